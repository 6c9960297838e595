# Sourced by scripts/bench-fidelity.sh and scripts/bench-ranking.sh: measuring on a machine whose
# host disturbs it. This VM shares its host: for seconds to minutes at a time another tenant's
# work makes the same computation 10-40% slower in CPU time (cache and memory bandwidth; steal is
# not counted, the kernel subtracts it), in a profile as in a run (docs/executor.md). A measured
# run taken then is not the machine the profile describes, so
#  * a probe (on every core at once, one thread pinned to it timing a tiny-gpt layer's forward
#    and backward at micro-batch 2, as `hetexec profile` times it, dilated as the runs are:
#    each operation followed by FIDELITY_PROBE_DILATION - 1 (default 7) times its length of
#    pause; ~10 s) measures how fast the machine is now, for the work the runs do. Until
#    2026-11-29 the probe ran its operations back to back (~1 s): it saw the machine within
#    2-5% of its baseline while the dilated runs computed 10-40% over their profiles, for
#    tens of minutes (the host takes a sleeping vCPU's caches and gives them back cold);
#    probing dilated, alternated with runs of gpt-pipe2 in such a spell, the probe said
#    1.16-1.40 where the back-to-back one said 1.03-1.05 (one spell it saw too: 1.47) and the
#    runs computed 1.09-1.39x their profile. It measures its slowest core against the
#    baseline, the fastest of three probes taken at the start. Every core: the host disturbs
#    one vCPU and not the other for minutes, and a run uses both, so a probe on whichever core
#    the scheduler gave it found the machine quiet (1.01-1.03) before runs that measured 15-25%
#    over their prediction;
#  * every profile and every run waits until a probe is within FIDELITY_QUIET (default 3%) of the
#    baseline (at most FIDELITY_WAITS probes, 5 s apart; then it goes on and says so);
#  * each run is followed by a probe too, and a run whose probes before and after are both quiet
#    counts as undisturbed; report.py median keeps the median undisturbed run of a plan (when
#    none was, report.py says which), and rows say how many were disturbed.
# For a host whose speed moves by 20-40% for tens of minutes (2026-11-29), fresh_profiles instead
# profiles the rows a plan uses just before its run, so that the run is predicted from the
# machine it meets.
# Needs: $hetexec, $out. Sets: probe_now (the last probe's slowdown, e.g. 1.012), probe_before
# (probed_run's probe before its command), profiles (fresh_profiles).

quiet="${FIDELITY_QUIET:-0.03}"
waits="${FIDELITY_WAITS:-6}"
probe_dilation="${FIDELITY_PROBE_DILATION:-8}"

cores=$(nproc)

probe_cores() {  # PREFIX: a probe on every core at once, pinned, into PREFIX.CORE.yaml
  local c
  for c in $(seq 0 $((cores - 1))); do
    taskset -c "$c" "$hetexec" profile --threads 1 --model configs/models/tiny-gpt.yaml --device probe --tp 1 --cp 1 \
      --micro-batch 2 --max-seconds 0.25 --time-dilation "$probe_dilation" -o "$1.$c.yaml" > /dev/null &
  done
  wait
}

probe() {  # sets probe_now: this machine's speed now (its slowest core), as a slowdown against the baseline
  local c worst=0 s
  probe_cores "$out/probe"
  for c in $(seq 0 $((cores - 1))); do
    s=$(python3 bench/fidelity/report.py probe "$out/probe.$c.yaml" "$out/probe-baseline.yaml")
    worst=$(python3 -c "print(max($worst, $s))")
  done
  probe_now=$worst
}

probe_baseline() {  # [REUSE]: row by row the fastest of three probes on every core, a few seconds apart,
  # kept beside the profiles; with REUSE set (the profiles of an earlier run reused), that run's
  # baseline: the machine the profiles describe, not the one of now (on 2026-11-27 a baseline
  # taken anew was 4% slower than the profiles' and every run then looked quiet); one per probe
  # dilation (a dilated probe's layer takes longer)
  local k c kept="$out/probe-baseline.kept.d$probe_dilation.yaml"
  if [[ -n ${1:-} && -f $kept ]]; then
    cp "$kept" "$out/probe-baseline.yaml"
    echo "probe baseline (kept with the reused profiles): $(python3 bench/fidelity/report.py probe "$out/probe-baseline.yaml" "$out/probe-baseline.yaml" ms) ms per layer" >&2
    return
  fi
  for k in 1 2 3; do
    probe_cores "$out/probe-base-$k"
    sleep 2
  done
  cp "$out/probe-base-1.0.yaml" "$out/probe-baseline.yaml"
  for k in 1 2 3; do
    for c in $(seq 0 $((cores - 1))); do
      python3 bench/fidelity/report.py faster "$out/probe-baseline.yaml" "$out/probe-base-$k.$c.yaml" "$out/probe-baseline.next.yaml"
      mv "$out/probe-baseline.next.yaml" "$out/probe-baseline.yaml"
    done
  done
  cp "$out/probe-baseline.yaml" "$kept"
  echo "probe baseline: $(python3 bench/fidelity/report.py probe "$out/probe-baseline.yaml" "$out/probe-baseline.yaml" ms) ms per layer (fwd + bwd, micro-batch 2; $cores cores)" >&2
}

is_quiet() { python3 -c "import sys; sys.exit(0 if float('${1:-$probe_now}') <= 1 + float('$quiet') else 1)"; }  # [SLOWDOWN] (default: the last probe's)

wait_quiet() {  # probes until the machine is as fast as at the baseline (within $quiet)
  local k
  for k in $(seq 1 "$waits"); do
    probe
    if is_quiet; then return 0; fi
    echo "  machine ${probe_now}x slower than the baseline; waiting (probe $k of $waits)" >&2
    sleep 5
  done
  echo "  machine still ${probe_now}x slower after $waits probes; measuring anyway (the run is marked disturbed)" >&2
}

probed_run() {  # PROBE_JSON COMMAND...: runs COMMAND once the machine is quiet, and writes the probes around it
  local json=$1
  shift
  wait_quiet
  probe_before=$probe_now
  "$@"
  probe
  python3 bench/fidelity/report.py probed "$json" "$probe_before" "$probe_now" "$quiet"
}

fresh_profiles() {  # PLAN MODEL X RUN TYPE=SLOWDOWN...: profiles, just before PLAN's run, the rows it
  # uses on each device type cpu-TYPE (report.py rows: its stages' tp, cp and micro-batch of a
  # replica there), as its run computes them (dilation X x the type's slowdown; each point for at
  # most FIDELITY_FRESH_SECONDS, default 0.25 s), into RUN.TYPE.yaml; sets profiles to their
  # --profile options. A type the plan does not use is skipped.
  local plan=$1 model=$2 x=$3 run=$4 dev d s rows
  shift 4
  profiles=()
  for dev in "$@"; do
    d=${dev%%=*} s=${dev##*=}
    rows=$(python3 bench/fidelity/report.py rows "$plan" "$d")
    if [[ -z $rows ]]; then continue; fi
    # shellcheck disable=SC2086  # $rows: the options, split
    "$hetexec" profile --threads 1 --model "configs/models/$model.yaml" --device "cpu-$d" --slowdown "$s" \
      --time-dilation $(( x * s )) $rows --max-seconds "${FIDELITY_FRESH_SECONDS:-0.25}" -o "$run.$d.yaml" > /dev/null
    profiles+=(--profile "$run.$d.yaml")
  done
}
