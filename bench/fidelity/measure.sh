# Sourced by scripts/bench-fidelity.sh and scripts/bench-ranking.sh: measuring on a machine whose
# host disturbs it. This VM shares its host: for seconds to minutes at a time another tenant's
# work makes the same computation 10-40% slower in CPU time (cache and memory bandwidth; steal is
# not counted, the kernel subtracts it), in a profile as in a run (docs/executor.md). A measured
# run taken then is not the machine the profile describes, so
#  * a probe (one thread timing a tiny-gpt layer's forward and backward at micro-batch 2, as
#    `hetexec profile` times it) measures how fast the machine is now, against the fastest of
#    three probes taken at the start (the baseline);
#  * every profile and every run waits until a probe is within FIDELITY_QUIET (default 3%) of the
#    baseline (at most FIDELITY_WAITS probes, 5 s apart; then it goes on and says so);
#  * each run is followed by a probe too, and a run whose probes before and after are both quiet
#    counts as undisturbed; report.py fastest keeps the fastest undisturbed run of a plan (the
#    fastest of all when none was), and rows say how many were disturbed.
# Needs: $hetexec, $out. Sets: probe_now (the last probe's slowdown, e.g. 1.012).

quiet="${FIDELITY_QUIET:-0.03}"
waits="${FIDELITY_WAITS:-6}"

probe() {  # sets probe_now: this machine's speed now, as a slowdown against the baseline
  "$hetexec" profile --threads 1 --model configs/models/tiny-gpt.yaml --device probe --tp 1 --cp 1 --micro-batch 2 \
    --max-seconds 0.25 -o "$out/probe.yaml" > /dev/null
  probe_now=$(python3 bench/fidelity/report.py probe "$out/probe.yaml" "$out/probe-baseline.yaml")
}

probe_baseline() {  # the fastest of three probes, a few seconds apart
  local k
  for k in 1 2 3; do
    "$hetexec" profile --threads 1 --model configs/models/tiny-gpt.yaml --device probe --tp 1 --cp 1 --micro-batch 2 \
      --max-seconds 0.25 -o "$out/probe.$k.yaml" > /dev/null
    sleep 2
  done
  python3 bench/fidelity/report.py faster "$out/probe.1.yaml" "$out/probe.2.yaml" "$out/probe.12.yaml"
  python3 bench/fidelity/report.py faster "$out/probe.12.yaml" "$out/probe.3.yaml" "$out/probe-baseline.yaml"
  echo "probe baseline: $(python3 bench/fidelity/report.py probe "$out/probe-baseline.yaml" "$out/probe-baseline.yaml" ms) ms per layer (fwd + bwd, micro-batch 2)" >&2
}

is_quiet() { python3 -c "import sys; sys.exit(0 if float('$probe_now') <= 1 + float('$quiet') else 1)"; }

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
