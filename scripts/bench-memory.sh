#!/usr/bin/env bash
# Predicted vs measured peak memory per rank (issue 17), on the CPU backend: for every plan in
# bench/fidelity/plans (pipelines of 2-4 stages, DP, TP, CP, mixed (dp, tp), two pipelines,
# recompute none / selective / full, every schedule kind, 8 ranks) and the DP plan again with
# ZeRO-1 (bench/memory/tiny-gpt-zero1.yaml), run 2 steps with `hetexec run-local --metrics-out`
# (each rank's peak: the heap's growth, and the buffers it accounts) and predict the plan with
# `hetplan simulate --format json` (the stage's memory_bytes per device). Prints a markdown
# table and the summary; writes $build/bench-memory/results.json.
#   scripts/bench-memory.sh [PLAN-NAME-FILTER]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${HET_BUILD_DIR:-build}"
filter="${1:-}"
out="$build/bench-memory"
mkdir -p "$out"
hetexec="$build/apps/hetexec/hetexec"
hetplan="$build/apps/hetplan/hetplan"
cluster=bench/fidelity/cluster.yaml
runs=()
for plan in bench/fidelity/plans/*.plan.json; do
  name=$(basename "$plan" .plan.json)
  runs+=("$name|$plan|configs/models/tiny-${name%%-*}.yaml")
done
runs+=("gpt-dp2-zero1|bench/fidelity/plans/gpt-dp2.plan.json|bench/memory/tiny-gpt-zero1.yaml")
: > "$out/runs.txt"
for run in "${runs[@]}"; do
  IFS='|' read -r name plan model <<< "$run"
  if [[ -n $filter && $name != *$filter* ]]; then continue; fi
  inputs=(--model "$model" --cluster "$cluster")
  "$hetexec" run-local "$plan" "${inputs[@]}" --steps 2 --metrics-out "$out/$name.metrics.jsonl" > "$out/$name.log"
  "$hetplan" simulate "$plan" "${inputs[@]}" --format json > "$out/$name.predicted.json"
  echo "$name $plan $out/$name.metrics.jsonl $out/$name.predicted.json" >> "$out/runs.txt"
done
python3 bench/memory/report.py "$out/runs.txt" "$out/results.json"
