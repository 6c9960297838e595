#!/usr/bin/env bash
# Does the planner's ranking of plans hold when they run? (issue 16) For three clusters of
# CPU-class devices emulated on this machine -- configs/clusters/tiny-cpu.yaml (tiny-gpt),
# bench/fidelity/cluster.yaml (tiny-llama) and bench/fidelity/cluster-3.yaml (three subclusters,
# tiny-gpt) -- profile the devices as the dilated ranks compute, take the 5 best plans of
# `hetplan search` (--write-top 5) and the uniform plan, run each with `hetexec run-local
# --emulate-devices --emulate-links --time-dilation 8`, predict each run with `hetplan simulate
# --time-dilation 8 --measured`, and report per cluster: every plan's predicted and measured step,
# Kendall's tau between the predicted and the measured order, and how far the planner's first
# choice is from the fastest measured plan. Profiles are taken twice (each row the faster of the
# two) and each plan run FIDELITY_RUNS times (default 3, the median undisturbed run kept), each
# profile and run when a probe finds the machine quiet, as bench-fidelity.sh
# (bench/fidelity/measure.sh).
#   scripts/bench-ranking.sh [CLUSTER-FILTER]
#   RANKING_REUSE_PROFILES=1: use the profiles an earlier run left in $build/bench-ranking (saves ~20 min per cluster)
# Writes $build/bench-ranking/results.json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${HET_BUILD_DIR:-build}"
filter="${1:-}"
runs="${FIDELITY_RUNS:-3}"  # runs of each plan, the median kept: this VM's host disturbs runs (bench-fidelity.sh)
out="$build/bench-ranking"
mkdir -p "$out"
hetexec="$build/apps/hetexec/hetexec"
hetplan="$build/apps/hetplan/hetplan"
x=8
source bench/fidelity/measure.sh
probe_baseline "${RANKING_REUSE_PROFILES:-}"
results="$out/results.jsonl"
: > "$results"
# name:cluster:model:device=slowdown,...
for case in tiny-cpu:configs/clusters/tiny-cpu.yaml:tiny-gpt:fast=1,slow=4 \
            fidelity:bench/fidelity/cluster.yaml:tiny-llama:fast=1,slow=2 \
            three:bench/fidelity/cluster-3.yaml:tiny-gpt:fast=1,mid=2,slow=4; do
  IFS=: read -r name cluster model devices <<< "$case"
  if [[ -n $filter && $name != *$filter* ]]; then continue; fi
  dir="$out/$name"
  mkdir -p "$dir"
  profiles=()
  for dev in ${devices//,/ }; do
    d=${dev%%=*} s=${dev##*=}
    if [[ -n ${RANKING_REUSE_PROFILES:-} && -f $dir/cpu-$d.yaml ]]; then  # the profiles of an earlier run of this script
      profiles+=(--profile "$dir/cpu-$d.yaml")
      continue
    fi
    for k in 1 2; do  # two profiles, each row the faster of the two (report.py faster)
      wait_quiet
      "$hetexec" profile --threads 1 --model "configs/models/$model.yaml" --device "cpu-$d" --slowdown "$s" \
        --time-dilation $(( x * s )) --tp 1 2 --cp 1 2 --micro-batch 1 2 4 8 -o "$dir/cpu-$d.$k.yaml" > /dev/null
    done
    python3 bench/fidelity/report.py faster "$dir/cpu-$d.1.yaml" "$dir/cpu-$d.2.yaml" "$dir/cpu-$d.yaml"
    profiles+=(--profile "$dir/cpu-$d.yaml")
  done
  inputs=(--model "configs/models/$model.yaml" --cluster "$cluster")
  "$hetplan" search "${inputs[@]}" "${profiles[@]}" --time-budget 10 -o "$dir/search.plan.json" --write-top 5 > /dev/null
  "$hetplan" search "${inputs[@]}" "${profiles[@]}" --algo uniform -o "$dir/uniform.plan.json" > /dev/null
  for plan in "$dir"/search.[1-5].plan.json "$dir/uniform.plan.json"; do
    [[ -f $plan ]] || continue
    p=$(basename "$plan" .plan.json)
    compares=()
    for k in $(seq 1 "$runs"); do  # the median undisturbed run kept (report.py median)
      probed_run "$dir/$p.$k.probe.json" "$hetexec" run-local "$plan" "${inputs[@]}" --steps 12 --emulate-devices \
        --emulate-links --time-dilation "$x" --trace "$dir/$p.$k.trace.json" > "$dir/$p.$k.log"
      "$hetplan" simulate "$plan" "${inputs[@]}" "${profiles[@]}" --time-dilation "$x" --measured "$dir/$p.$k.trace.json" \
        --format json > "$dir/$p.$k.compare.json"
      compares+=("$dir/$p.$k.compare.json")
    done
    python3 bench/fidelity/report.py median "$dir/$p.compare.json" "${compares[@]}"
    python3 bench/fidelity/report.py ranked "$name" "$p" "$dir/$p.compare.json" "$results"
  done
done
python3 bench/fidelity/report.py ranking "$results" "$out/results.json"
