#!/usr/bin/env bash
# Predicted vs measured peak memory per rank (issue 17), on the CPU backend: for every plan in
# bench/fidelity/plans (pipelines of 2-4 stages, DP, TP, CP, mixed (dp, tp), two pipelines,
# recompute none / selective / full, every schedule kind, 8 ranks) and the DP plan again with
# ZeRO-1 (bench/memory/tiny-gpt-zero1.yaml), run 2 steps with `hetexec run-local --metrics-out`
# (each rank's peak: the heap's growth, and the buffers it accounts) and predict the plan with
# `hetplan simulate --format json` (the stage's memory_bytes per device). Prints a markdown
# table and the summary; writes $build/bench-memory/results.json.
# MEMORY_BACKEND=cuda: the same on the CUDA backend in the emulation (the hetexec every build
# makes in $build/emulation, its device buffers' peak per rank), predicted in bf16 (the precision
# the CUDA backend trains in);
# results in $build/bench-memory-cuda.
#   scripts/bench-memory.sh [PLAN-NAME-FILTER]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${HET_BUILD_DIR:-build}"
filter="${1:-}"
backend="${MEMORY_BACKEND:-cpu}"
hetexec="$build/apps/hetexec/hetexec"
hetplan="$build/apps/hetplan/hetplan"
out="$build/bench-memory"
if [[ $backend == cuda ]]; then
  out="$build/bench-memory-cuda"
  hetexec="$build/emulation/apps/hetexec/hetexec"
elif [[ $backend != cpu ]]; then
  echo "error: MEMORY_BACKEND must be cpu or cuda, not '$backend'" >&2
  exit 2
fi
mkdir -p "$out"
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
  flags=()
  if [[ $backend == cuda ]]; then
    sed 's/^dtype: fp32/dtype: bf16/' "$model" > "$out/$name.model.yaml"
    model="$out/$name.model.yaml"
    flags=(--backend cuda)
  fi
  inputs=(--model "$model" --cluster "$cluster")
  "$hetexec" run-local "$plan" "${inputs[@]}" --steps 2 "${flags[@]}" --metrics-out "$out/$name.metrics.jsonl" > "$out/$name.log"
  "$hetplan" simulate "$plan" "${inputs[@]}" --format json > "$out/$name.predicted.json"
  echo "$name $plan $out/$name.metrics.jsonl $out/$name.predicted.json" >> "$out/runs.txt"
done
python3 bench/memory/report.py "$out/runs.txt" "$out/results.json"
