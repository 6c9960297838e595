#!/usr/bin/env bash
# Chaos trials (issue 18; tests/chaos_test.cpp): N trials of each fault — an agent killed or
# stopped, a worker killed or stopped, the submitter killed, a run-local rank killed or
# stopped — at random moments of a running job, and a table of the contract per fault: the
# job stopped everywhere within 15 s, the node and rank named, no worker left, the next job ran.
#   bash scripts/chaos.sh [TRIALS (default 10)] [SEED (default 1)]
# Needs a build (scripts/setup.sh); exits 1 when any trial broke the contract.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
trials="${1:-10}" seed="${2:-1}"
bin="${HET_BUILD_DIR:-build}/tests/het_chaos_tests"
[[ -x "$bin" ]] || { echo "chaos: $bin is missing: run scripts/setup.sh first" >&2; exit 2; }
log=$(mktemp)
HET_CHAOS_TRIALS="$trials" HET_CHAOS_SEED="$seed" "$bin" "chaos:*" | tee "$log" | grep --line-buffered "^chaos " | sed -u 's/^/  /'
rc=${PIPESTATUS[0]}
echo
echo "$trials trials per fault, seed $seed; stopped: seconds from the fault until the launcher ended and no worker was left (contract: 15)"
awk '/^chaos / {
  for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
  f = v["fault"]; if (!(f in n)) order[++k] = f
  n[f]++; named[f] += v["named"]; left[f] += v["left"]; next_ok[f] += v["next"]
  s = v["stopped_s"] + 0; sum[f] += s; if (s > max[f]) max[f] = s
}
END {
  printf "| fault | trials | named | mean stopped s | max stopped s | workers left | next job ran |\n|---|---|---|---|---|---|---|\n"
  for (i = 1; i <= k; ++i) { f = order[i]
    printf "| %s | %d | %d | %.2f | %.2f | %d | %d |\n", f, n[f], named[f], sum[f] / n[f], max[f], left[f], next_ok[f] }
}' "$log"
if (( rc == 0 )); then rm -f "$log"; else echo "chaos: a trial broke the contract; the whole output is in $log"; fi
exit "$rc"
