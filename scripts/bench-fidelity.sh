#!/usr/bin/env bash
# Predicted vs measured step time (issue 16): profile this machine's CPU backend for tiny-gpt and
# tiny-llama (one thread, as each rank runs), then for every plan in bench/fidelity/plans (plan
# shapes: pipelines of 2-4 stages, DP, TP, CP, mixed (dp, tp) stages over two subclusters with a
# slow link, two pipelines, recompute, every schedule kind, 8 ranks) run it with `hetexec run-local
# --emulate-devices --emulate-links --time-dilation X --trace` (X = 8, and 16 for plans of more
# than 2 x cores ranks: at least 4 x ranks / cores, so that the ranks sharing this machine's cores
# seldom compute at once — at 8, the 8-rank plans computed 1.07-1.13x their profile, four ranks
# per core taking each other's caches; at 16, 0.98-0.99x), predict the same
# run with `hetplan simulate --time-dilation X --measured`, and report predicted / measured step
# time. The profiles are taken as the dilated ranks compute (`hetexec profile --time-dilation`:
# each operation followed by the pause the run takes after it, X - 1 times it on the fast devices,
# 2X - 1 on the slow ones, which --emulate-devices slows 2x more; X = 8: the plans at 16 use the
# same profiles, and their own compute ÷ profile says whether the longer pause matters).
# Each repetition runs every plan FIDELITY_RUNS times (default 3), round-robin over the plans so
# that a plan's runs are minutes apart, and keeps the median of the undisturbed runs: this VM's
# host slows it by up to 40% for seconds to minutes at a time (docs/executor.md;
# bench/fidelity/measure.sh says how the probes around a run detect it), and between quiet probes
# a run still computed 0.94-1.36x its profile (the trace's own compute says so, FIDELITY_COMPUTE
# below), so the fastest run is an outlier as often as the slowest.
#   scripts/bench-fidelity.sh [REPETITIONS] [PLAN-NAME-FILTER]
#   FIDELITY_RUNS, FIDELITY_QUIET, FIDELITY_WAITS: measure.sh
#   FIDELITY_COMPUTE (default 0.05), FIDELITY_RETRIES (default 2): a run whose own compute (the
#   trace's, as simulate --measured sums it) is off its profile by more than FIDELITY_COMPUTE ran
#   on a machine other than the profiled one (the host slowed it during the run: the probes
#   around a run miss spells inside it); it is run again up to FIDELITY_RETRIES times, and
#   counted as disturbed (report.py disturbed).
#   FIDELITY_PROFILE_TRIES (default 4): profiles per device type, until two were taken with the
#   probes before and after quiet (FIDELITY_QUIET); each row the fastest of those
#   FIDELITY_REUSE_PROFILES=1: use the profiles an earlier run left in $build/bench-fidelity (saves ~30 min)
#   FIDELITY_FRESH=1: no profiles up front and no probes; each run is predicted from a profile of
#   the rows its plan uses (report.py rows), taken just before it at the plan's dilation
#   (FIDELITY_FRESH_SECONDS per point, default 0.25: ~10-40 s per run). For a host whose speed
#   moves by 20-40% for tens of minutes (2026-11-29: 1.25-1.4x for over 40 minutes, after the
#   profiles had been taken quiet), where a profile of an hour before describes another machine.
#   The own-compute gate (FIDELITY_COMPUTE) then holds each run to the profile taken before it.
#   FIDELITY_CLUSTER=F: run the plans on another cluster of the same subclusters (bench/fidelity/cluster-slow-link.yaml)
# Writes $build/bench-fidelity/results.json (and per plan its trace, comparison and side-by-side
# trace) and prints a markdown table and the summary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${HET_BUILD_DIR:-build}"
reps="${1:-2}"
filter="${2:-}"
runs="${FIDELITY_RUNS:-3}"  # runs of each plan per repetition, the median kept (report.py median)
retries="${FIDELITY_RETRIES:-2}"  # per run, runs again while the host disturbs it (report.py disturbed)
out="$build/bench-fidelity"
mkdir -p "$out"
hetexec="$build/apps/hetexec/hetexec"
hetplan="$build/apps/hetplan/hetplan"
cluster="${FIDELITY_CLUSTER:-bench/fidelity/cluster.yaml}"
x=8
dilation() { python3 bench/fidelity/report.py dilation "$1"; }  # PLAN: 8, 16, 32: ranks / X <= cores / 8
fresh="${FIDELITY_FRESH:-}"
source bench/fidelity/measure.sh
if [[ -z $fresh ]]; then probe_baseline "${FIDELITY_REUSE_PROFILES:-}"; fi
profile_tries="${FIDELITY_PROFILE_TRIES:-4}"  # profiles per device type at most, until two were taken quiet
for model in tiny-gpt tiny-llama; do  # slow: times x 2, the cluster's peak ratio, as --emulate-devices slows it
  if [[ -n $fresh ]]; then break; fi  # FIDELITY_FRESH: each run is profiled just before it (below)
  # The micro-batch sizes the plans of this model use (a profile of every size takes 1.5x as long).
  # A replica of a stage computes micro_batch_size / dp sequences at a time.
  mbs=$(python3 -c "import glob, json, sys; print(' '.join(map(str, sorted({pl['micro_batch_size'] // s.get('dp', 1) for f in glob.glob('bench/fidelity/plans/' + sys.argv[1] + '-*.plan.json') for pl in json.load(open(f))['pipelines'] for s in pl['stages']}))))" "${model#tiny-}")
  for dev in fast:1 slow:2; do
    s=${dev##*:}
    profile="$out/$model-${dev%%:*}"
    if [[ -n ${FIDELITY_REUSE_PROFILES:-} && -f $profile.yaml ]]; then continue; fi  # an earlier run's profiles
    # Profiles until two were taken with the machine quiet before and after (a profile is
    # minutes long, and on 2026-11-29 both of a device type's were taken in a spell of 1.2-1.4x,
    # so that every run then computed 0.7-0.9x of them), at most FIDELITY_PROFILE_TRIES; each row
    # the fastest of those kept: a row the machine disturbed (another tenant of this VM's host)
    # is slower, never faster.
    kept=() taken=()
    for k in $(seq 1 "$profile_tries"); do
      wait_quiet
      quiet_before=$probe_now
      "$hetexec" profile --threads 1 --model "configs/models/$model.yaml" --device "cpu-${dev%%:*}" --slowdown "$s" \
        --time-dilation $(( x * s )) --tp 1 2 --cp 1 2 --micro-batch $mbs -o "$profile.$k.yaml" > /dev/null
      taken+=("$profile.$k.yaml")
      probe
      if is_quiet && is_quiet "$quiet_before"; then
        kept+=("$profile.$k.yaml")
        if (( ${#kept[@]} == 2 )); then break; fi
      else
        echo "  profile $k of $model on ${dev%%:*} devices taken with the machine ${quiet_before}x, then ${probe_now}x slower than the baseline: not kept" >&2
      fi
    done
    if (( ${#kept[@]} == 0 )); then
      echo "  no profile of $model on ${dev%%:*} devices was taken quiet in $profile_tries tries: each row the fastest of all (runs will read as disturbed)" >&2
      kept=("${taken[@]}")
    fi
    cp "${kept[0]}" "$profile.yaml"
    for f in "${kept[@]:1}"; do
      python3 bench/fidelity/report.py faster "$profile.yaml" "$f" "$profile.merged.yaml" && mv "$profile.merged.yaml" "$profile.yaml"
    done
  done
done
results="$out/results.jsonl"
: > "$results"
plans=()
for plan in bench/fidelity/plans/*.plan.json; do
  name=$(basename "$plan" .plan.json)
  if [[ -z $filter || $name == *$filter* ]]; then plans+=("$plan"); fi
done
echo "| plan | ranks | dilation | rep | predicted ms | measured ms | predicted ÷ measured | own compute ÷ profile | runs disturbed |"
echo "|---|---|---|---|---|---|---|---|---|"
for rep in $(seq 1 "$reps"); do
  rm -f "$out"/*.*.*.compare.json  # the runs of an earlier repetition
  for k in $(seq 1 "$runs"); do  # round-robin: a plan's runs are a whole round apart
    for plan in "${plans[@]}"; do
      name=$(basename "$plan" .plan.json)
      model=tiny-${name%%-*}
      inputs=(--model "configs/models/$model.yaml" --cluster "$cluster")
      x=$(dilation "$plan")
      for t in $(seq 1 $((retries + 1))); do  # a run the host disturbed is run again (its files kept, counted as disturbed)
        run="$out/$name.$k.$t"
        rm -f "$run".*.yaml "$run.probe.json"
        if [[ -n $fresh ]]; then
          # The rows this plan uses, profiled as its run computes them, just before it: the
          # machine the run meets, not the one of an hour ago (the slow devices x 2).
          fresh_profiles "$plan" "$model" "$x" "$run" fast=1 slow=2
          "$hetexec" run-local "$plan" "${inputs[@]}" --steps 12 --emulate-devices --emulate-links --time-dilation "$x" \
            --trace "$run.trace.json" > "$run.log"
          probe_before=- probe_now=-
        else
          profiles=(--profile "$out/$model-fast.yaml" --profile "$out/$model-slow.yaml")
          probed_run "$run.probe.json" "$hetexec" run-local "$plan" "${inputs[@]}" --steps 12 --emulate-devices \
            --emulate-links --time-dilation "$x" --trace "$run.trace.json" > "$run.log"
        fi
        "$hetplan" simulate "$plan" "${inputs[@]}" "${profiles[@]}" \
          --time-dilation "$x" --measured "$run.trace.json" --side-by-side "$run.side-by-side.json" \
          --format json > "$run.compare.json"
        verdict=$(python3 bench/fidelity/report.py disturbed "$run.compare.json")
        python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(f'rep $rep run $k/$runs try $t $name: predicted {c[\"predicted_step_s\"]*1e3:.1f} ms, measured {c[\"measured_step_s\"]*1e3:.1f} ms, own compute ÷ profile {c[\"compute_measured_over_profiled\"]:.3f} (probes $probe_before, $probe_now): $verdict')" \
          "$run.compare.json" >&2
        if [[ $verdict == quiet ]]; then break; fi
      done
    done
  done
  for plan in "${plans[@]}"; do
    name=$(basename "$plan" .plan.json)
    ranks=$(python3 bench/fidelity/report.py ranks "$plan")
    x=$(dilation "$plan")
    compares=("$out/$name".*.*.compare.json)
    python3 bench/fidelity/report.py median "$out/$name.compare.json" "${compares[@]}"
    python3 bench/fidelity/report.py row "$name" "$ranks" "$x" "$rep" "$out/$name.compare.json" "$results"
  done
done
python3 bench/fidelity/report.py summary "$results" "$out/results.json"
