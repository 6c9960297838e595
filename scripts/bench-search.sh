#!/usr/bin/env bash
# Search on the seed configurations: `hetplan compare` (uniform, heteroauto, hapt, mcts,
# hexiscale, auto) per seed model and cluster — each algorithm's predicted iteration time and
# search seconds — then the search quality on random instances against the exhaustive oracle
# (bench_search). Output: a Markdown report on stdout (docs/search.md holds one) and the
# per-configuration numbers as JSON.
#   scripts/bench-search.sh [TIME_BUDGET_S] [JSON_OUT]
#     TIME_BUDGET_S  per algorithm run (default: hetplan's own default for the cluster)
#     JSON_OUT       default: build/bench-search.json
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${HET_BUILD_DIR:-build}"
budget="${1:-}"
json_out="${2:-$build/bench-search.json}"
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
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
budget_args=()
[[ -n "$budget" ]] && budget_args=(--time-budget "$budget")
i=0
for p in "${pairs[@]}"; do
  set -- $p
  printf 'compare %s on %s\n' "$1" "$2" >&2
  "$build/apps/hetplan/hetplan" compare --model "configs/models/$1.yaml" --cluster "configs/clusters/$2.yaml" \
    "${budget_args[@]}" --format json 2>/dev/null > "$tmp/$i.json" || echo '[]' > "$tmp/$i.json"
  printf '%s %s\n' "$1" "$2" > "$tmp/$i.name"
  i=$((i + 1))
done
python3 - "$tmp" "$i" "$json_out" "${budget:-default}" "$(nproc)" <<'PY'
import json, sys
tmp, n, out, budget, cores = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
algos = ["uniform", "heteroauto", "hapt", "mcts", "hexiscale", "auto"]
rows = []
for i in range(n):
    model, cluster = open(f"{tmp}/{i}.name").read().split()
    results = {r["algorithm"]: r for r in json.load(open(f"{tmp}/{i}.json"))}
    rows.append({"model": model, "cluster": cluster, "results": [results[a] for a in algos if a in results]})
json.dump({"time_budget_s": budget, "cores": int(cores), "configurations": rows}, open(out, "w"), indent=1)
print(f"## Seed configurations: predicted iteration seconds (search seconds), budget {budget}, {cores} cores\n")
print("| model | cluster | " + " | ".join(algos) + " | auto vs best single |")
print("|---|---|" + "---|" * (len(algos) + 1))
worse = 0
for r in rows:
    by = {x["algorithm"]: x for x in r["results"]}
    cells = []
    for a in algos:
        x = by.get(a)
        cells.append(f"{x['iteration_s']:.2f} ({x['search_s']:.1f})" if x and x["iteration_s"] is not None else "-")
    singles = [by[a]["iteration_s"] for a in algos[:-1] if a in by and by[a]["iteration_s"] is not None]
    auto = by.get("auto", {}).get("iteration_s")
    ratio = f"{min(singles) / auto:.3f}x" if singles and auto else "-"
    if singles and auto and auto > min(singles) * (1 + 1e-9):
        worse += 1
    print(f"| {r['model']} | {r['cluster']} | " + " | ".join(cells) + f" | {ratio} |")
print(f"\nauto worse than the best single algorithm on {worse} of {len(rows)} configurations; JSON: {out}")
PY
echo
echo "## Search quality on random instances (gap to the exhaustive oracle, same cost model)"
echo '```'
"$build/bench/bench_search" --instances 200
echo '```'
