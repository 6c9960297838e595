#!/usr/bin/env bash
# Does the planner's ranking of plans hold when they run? (issue 16) For three clusters of
# CPU-class devices emulated on this machine -- configs/clusters/tiny-cpu.yaml (tiny-gpt),
# bench/fidelity/cluster.yaml (tiny-llama) and bench/fidelity/cluster-3.yaml (three subclusters,
# tiny-gpt) -- profile the devices as the dilated ranks compute, take the 5 best plans of
# `hetplan search` (--write-top 5) and the uniform plan, run each with `hetexec run-local
# --emulate-devices --emulate-links --time-dilation X` (X: the bench's dilation of the cluster's
# largest plan, report.py dilation_of, one for all plans of a cluster so that their steps
# compare), and report per cluster: every plan's predicted and measured step, Kendall's tau
# between the predicted and the measured order, and how far the planner's first choice is from
# the fastest measured plan.
# Each plan is run FIDELITY_RUNS times (default 3), round-robin over the cluster's plans so that a
# plan's runs are minutes apart, each run predicted from a profile of the rows it uses taken just
# before it (measure.sh fresh_profiles) and run again up to FIDELITY_RETRIES times (default 1)
# when its own compute is off that profile by more than FIDELITY_COMPUTE (report.py). This VM's
# host moves its speed by 20-40% for minutes at a time (docs/executor.md), so plans measured
# minutes apart are measured on different machines; besides the raw order the report gives the
# order of the runs' steps at the speed of the planner's profiles (report.py planner: measured x
# the planner's prediction ÷ the run's own), which keeps what the model gets wrong about each
# plan and takes out only the host's speed.
# RANKING_ROUNDS=N instead runs the plans in N interleaved rounds (every plan once per round,
# each round starting one plan later), no fresh profiles: a round takes about a minute, in which
# the host's slower spells are shared by the plans, so report.py rounds ranks the plans three
# ways: by their median step, by their median at the rounds' mean speed (each run ÷ its round's
# geometric mean over the plans) and by each plan's fastest run (the host's disturbances add
# time). What the model gets wrong about one plan stays in; a profile taken in another spell
# than its run (which the fresh-profile reading divides out of a run that was not slow) does
# not enter.
#   scripts/bench-ranking.sh [CLUSTER-FILTER]
#   RANKING_STEPS (default 12): steps per run (the first is not counted)
#   RANKING_REUSE_PROFILES=1: use the search's profiles an earlier run left in $build/bench-ranking
#   RANKING_DILATION=X: run every cluster's plans at X instead of report.py's dilation_of
#   RANKING_PROFILE_SECONDS (default 0.5): each point of the search's profiles, at most (hetexec profile --max-seconds)
# Writes $build/bench-ranking/results.json (and per run its profiles, trace, comparisons and the
# simulations' notes, RUN.*.notes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${HET_BUILD_DIR:-build}"
filter="${1:-}"
runs="${FIDELITY_RUNS:-3}"
rounds="${RANKING_ROUNDS:-0}"
steps="${RANKING_STEPS:-12}"
retries="${FIDELITY_RETRIES:-1}"
out="$build/bench-ranking"
mkdir -p "$out"
hetexec="$build/apps/hetexec/hetexec"
hetplan="$build/apps/hetplan/hetplan"
source bench/fidelity/measure.sh
results="$out/results.jsonl"
: > "$results"
# name:cluster:model:type=slowdown,...
for case in tiny-cpu:configs/clusters/tiny-cpu.yaml:tiny-gpt:fast=1,slow=4 \
            fidelity:bench/fidelity/cluster.yaml:tiny-llama:fast=1,slow=2 \
            three:bench/fidelity/cluster-3.yaml:tiny-gpt:fast=1,mid=2,slow=4; do
  IFS=: read -r name cluster model devices <<< "$case"
  if [[ -n $filter && $name != *$filter* ]]; then continue; fi
  dir="$out/$name"
  mkdir -p "$dir"
  types=(${devices//,/ })
  # The planner's profiles: every row the search may use, at dilation 8 (x the type's slowdown).
  planner_profiles=()
  for dev in "${types[@]}"; do
    d=${dev%%=*} s=${dev##*=}
    if [[ -z ${RANKING_REUSE_PROFILES:-} || ! -f $dir/cpu-$d.yaml ]]; then
      echo "$name: profiling cpu-$d for the search" >&2
      "$hetexec" profile --threads 1 --model "configs/models/$model.yaml" --device "cpu-$d" --slowdown "$s" \
        --time-dilation $(( 8 * s )) --tp 1 2 --cp 1 2 --micro-batch 1 2 4 8 \
        --max-seconds "${RANKING_PROFILE_SECONDS:-0.5}" -o "$dir/cpu-$d.yaml" > /dev/null
    fi
    planner_profiles+=(--profile "$dir/cpu-$d.yaml")
  done
  inputs=(--model "configs/models/$model.yaml" --cluster "$cluster")
  rm -f "$dir"/search.*.plan.json "$dir"/*.*.*.compare.json "$dir"/*.*.*.planner.json
  "$hetplan" search "${inputs[@]}" "${planner_profiles[@]}" --time-budget 10 -o "$dir/search.plan.json" --write-top 5 > /dev/null
  "$hetplan" search "${inputs[@]}" "${planner_profiles[@]}" --algo uniform -o "$dir/uniform.plan.json" > /dev/null
  plans=()
  x=8
  for plan in "$dir"/search.[1-5].plan.json "$dir/uniform.plan.json"; do
    if [[ ! -f $plan ]]; then continue; fi
    plans+=("$plan")
    px=$(python3 bench/fidelity/report.py dilation "$plan")
    if (( px > x )); then x=$px; fi
  done
  x=${RANKING_DILATION:-$x}
  echo "$name: ${#plans[@]} plans at time dilation $x" >&2
  if (( rounds > 0 )); then
    # Interleaved rounds: every plan once per round, each round starting one plan later, each
    # run simulated with the planner's profiles; report.py rounds takes each round's speed out.
    rm -f "$dir"/*.r*.planner.json
    n=${#plans[@]}
    for k in $(seq 1 "$rounds"); do
      for i in $(seq 0 $((n - 1))); do
        plan=${plans[$(( (i + k) % n ))]}
        p=$(basename "$plan" .plan.json)
        run="$dir/$p.r$k"
        "$hetexec" run-local "$plan" "${inputs[@]}" --steps "$steps" --emulate-devices --emulate-links --time-dilation "$x" \
          --trace "$run.trace.json" > "$run.log"
        "$hetplan" simulate "$plan" "${inputs[@]}" "${planner_profiles[@]}" --time-dilation "$x" --measured "$run.trace.json" \
          --format json > "$run.planner.json" 2> "$run.planner.notes" || { cat "$run.planner.notes" >&2; exit 1; }
        python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(f'$name round $k/$rounds $p: planner {c[\"predicted_step_s\"]*1e3:.1f} ms, measured {c[\"measured_step_s\"]*1e3:.1f} ms')" \
          "$run.planner.json" >&2
      done
    done
    python3 bench/fidelity/report.py rounds "$name" "$results" "$dir"/*.r*.planner.json
    continue
  fi
  for k in $(seq 1 "$runs"); do  # round-robin: a plan's runs are a whole round apart
    for plan in "${plans[@]}"; do
      p=$(basename "$plan" .plan.json)
      for t in $(seq 1 $((retries + 1))); do  # a run the host disturbed is run again (its files kept, counted as disturbed)
        run="$dir/$p.$k.$t"
        fresh_profiles "$plan" "$model" "$x" "$run" "${types[@]}"
        "$hetexec" run-local "$plan" "${inputs[@]}" --steps "$steps" --emulate-devices --emulate-links --time-dilation "$x" \
          --trace "$run.trace.json" > "$run.log"
        "$hetplan" simulate "$plan" "${inputs[@]}" "${profiles[@]}" --time-dilation "$x" --measured "$run.trace.json" \
          --format json > "$run.compare.json" 2> "$run.compare.notes" || { cat "$run.compare.notes" >&2; exit 1; }
        "$hetplan" simulate "$plan" "${inputs[@]}" "${planner_profiles[@]}" --time-dilation "$x" --measured "$run.trace.json" \
          --format json > "$run.planner.json" 2> "$run.planner.notes" || { cat "$run.planner.notes" >&2; exit 1; }
        python3 bench/fidelity/report.py planner "$run.compare.json" "$run.planner.json"
        verdict=$(python3 bench/fidelity/report.py disturbed "$run.compare.json")
        python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(f'$name run $k/$runs try $t $p: planner {c[\"planner_predicted_step_s\"]*1e3:.1f} ms, own profile {c[\"predicted_step_s\"]*1e3:.1f} ms, measured {c[\"measured_step_s\"]*1e3:.1f} ms, at the planner profile speed {c[\"measured_at_planner_profile_s\"]*1e3:.1f} ms, own compute ÷ profile {c[\"compute_measured_over_profiled\"]:.3f}: $verdict')" \
          "$run.compare.json" >&2
        if [[ $verdict == quiet ]]; then break; fi
      done
    done
  done
  for plan in "${plans[@]}"; do
    p=$(basename "$plan" .plan.json)
    python3 bench/fidelity/report.py median "$dir/$p.compare.json" "$dir/$p".*.*.compare.json
    python3 bench/fidelity/report.py ranked "$name" "$p" "$dir/$p.compare.json" "$results"
  done
done
python3 bench/fidelity/report.py ranking "$results" "$out/results.json"
