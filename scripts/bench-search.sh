#!/usr/bin/env bash
# Search on the seed configurations: `hetplan compare` (uniform, heteroauto, hapt, mcts, auto) per
# seed model and cluster, then the search quality on random instances against the exhaustive
# oracle (bench_search). Output: a Markdown report on stdout (docs/search.md holds one).
#   scripts/bench-search.sh [TIME_BUDGET_S]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${HET_BUILD_DIR:-build}"
budget="${1:-20}"
pairs=(
  "hapt-gpt-15b hapt-4x8a100-4x8v100"
  "hapt-gpt-30b hapt-4x8a100-4x8v100-10gbps"
  "hapt-gpt-39b hapt-4x8a100-4x8v100-3gbps"
  "h2-100b h2-exp-a"
  "h2-100b-gbs8m h2-exp-b"
  "h2-100b-gbs4m h2-exp-c"
  "h2-100b-gbs8m h2-exp-d"
  "hetu-llama-32b hetu-16h800-16h20"
  "hetu-llama-70b hetu-16h800-32h20"
  "hetauto-exp1-llama-48l hetauto-exp1-32a100-32a2"
  "hetauto-exp2-llama-64l hetauto-exp2-32h20-32a100-32a2"
  "hetauto-exp3-llama-96l hetauto-exp3-32h20-64h800-128a100-512a2"
  "hexiscale-llama2-7b hexiscale-setting1"
  "hexiscale-llama2-13b hexiscale-setting2"
  "hexiscale-llama-30b hexiscale-setting3"
  "opt-350m demo-1x4a100-1x4v100"
)
echo "## hetplan compare on the seed configurations (time budget ${budget} s, $(nproc) cores)"
for p in "${pairs[@]}"; do
  set -- $p
  echo
  echo "### $1 on $2"
  echo '```'
  "$build/apps/hetplan/hetplan" compare --model "configs/models/$1.yaml" --cluster "configs/clusters/$2.yaml" \
    --time-budget "$budget" 2>/dev/null || echo "(failed)"
  echo '```'
done
echo
echo "## Search quality on random instances (gap to the exhaustive oracle, same cost model)"
echo '```'
"$build/bench/bench_search" --instances 200
echo '```'
