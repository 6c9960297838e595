#!/usr/bin/env bash
# Predicted vs measured: profile this machine's CPU backend for tiny-gpt (the slow subcluster
# emulated 4x slower: 200 vs 50 GFLOPS in configs/clusters/tiny-cpu.yaml), search a plan with
# those profiles, predict it with `hetplan simulate`, run it with `hetexec run-local
# --emulate-devices --emulate-links`, and compare the step times (median after the first step).
#   scripts/bench-predict.sh [STEPS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${HET_BUILD_DIR:-build}"
steps="${1:-30}"
out="$build/bench-predict"
mkdir -p "$out"
model=configs/models/tiny-gpt.yaml
cluster=configs/clusters/tiny-cpu.yaml
"$build/apps/hetexec/hetexec" profile --threads 1 --model "$model" --device cpu-fast --micro-batch 1 2 4 8 16 -o "$out/fast.yaml" > /dev/null
"$build/apps/hetexec/hetexec" profile --threads 1 --model "$model" --device cpu-slow --slowdown 4 --micro-batch 1 2 4 8 16 -o "$out/slow.yaml" > /dev/null
# Two plans: a two-rank pipeline (one rank per core of a 2-core machine) and the plan the
# search finds (more ranks than cores share the CPU, which the model does not know).
for plan in pipeline search; do
  if [[ $plan == search ]]; then
    "$build/apps/hetplan/hetplan" search --model "$model" --cluster "$cluster" --profile "$out/fast.yaml" \
      --profile "$out/slow.yaml" --time-budget 5 -o "$out/$plan.json" --format json > /dev/null
  else
    cp tests/data/plans/tiny-cpu-pipeline.plan.json "$out/$plan.json"
  fi
  predicted=$("$build/apps/hetplan/hetplan" simulate "$out/$plan.json" --model "$model" --cluster "$cluster" \
    --profile "$out/fast.yaml" --profile "$out/slow.yaml" --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["predicted"]["iteration_s"])')
  "$build/apps/hetexec/hetexec" run-local "$out/$plan.json" --model "$model" --cluster "$cluster" --steps "$steps" \
    --emulate-devices --emulate-links --metrics-out "$out/$plan.jsonl" > /dev/null
  measured=$(python3 -c 'import json,statistics,sys; s=[json.loads(l)["step_s"] for l in open(sys.argv[1])][1:]; print(statistics.median(s))' "$out/$plan.jsonl")
  ranks=$(python3 -c 'import json,sys; print(sum(s.get("dp",1)*s.get("tp",1)*s.get("cp",1) for p in json.load(open(sys.argv[1]))["pipelines"] for s in p["stages"]))' "$out/$plan.json")
  python3 -c 'import sys; p,m=float(sys.argv[3]),float(sys.argv[4]); print(f"{sys.argv[1]:8s} {sys.argv[2]} ranks  predicted {p*1e3:8.2f} ms  measured {m*1e3:8.2f} ms  measured/predicted {m/p:5.2f}")' "$plan" "$ranks" "$predicted" "$measured"
done
