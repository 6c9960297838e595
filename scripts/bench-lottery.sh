#!/usr/bin/env bash
# The search's lottery between basins (issue 20): default `auto` runs of two bench_converge
# binaries on the 50 mid-size instances, alternated instance by instance (so that both see the
# same machine), REPS runs of each; then, per binary, how many runs came within 1% of the best
# plan any run of either found, how many instances did so in every run, the geometric mean of
# run / best, and the wall time summed; and the instances where some run missed.
#   scripts/bench-lottery.sh OLD_BINARY NEW_BINARY [REPS=3] [OUT=build/lottery.txt]
# Copy a binary before rebuilding it (cp build/bench/bench_converge /tmp/bc_old). 300 runs take
# 13-20 minutes on a 2-core machine; run nothing else meanwhile.
set -euo pipefail
if [[ $# -lt 2 ]]; then sed -n '2,9p' "$0"; exit 2; fi
old=$1 new=$2 reps=${3:-3} out=${4:-build/lottery.txt}
for b in "$old" "$new"; do [[ -x $b ]] || { echo "bench-lottery: $b is not an executable" >&2; exit 2; }; done
mkdir -p "$(dirname "$out")"
: > "$out"
for rep in $(seq 1 "$reps"); do
  for n in $(seq 0 49); do
    for b in "$old" "$new"; do
      "$b" --only midsize --from "$n" --midsize 1 --factor 0 --format json 2>/dev/null |
        python3 -c "import sys,json; d=json.load(sys.stdin)[0]; print('$n $b', d['default_iteration_s'], d['default_wall_s'])" >> "$out"
    done
    echo "rep $rep/$reps instance $n" >&2
  done
done
python3 - "$out" <<'PY'
import sys, collections, math
runs = collections.defaultdict(lambda: collections.defaultdict(list))
walls = collections.defaultdict(float)
order = []
for line in open(sys.argv[1]):
    n, b, t, w = line.split()
    if b not in order: order.append(b)
    runs[int(n)][b].append(float(t)); walls[b] += float(w)
within, every, logs, count = (collections.Counter() for _ in range(4))
missed = []
for n in sorted(runs):
    best = min(t for b in runs[n] for t in runs[n][b])
    for b in order:
        ts = runs[n][b]
        k = sum(t <= best * 1.01 for t in ts)
        within[b] += k; count[b] += len(ts); every[b] += k == len(ts)
        logs[b] += sum(math.log(t / best) for t in ts)
    if any(t > best * 1.01 for b in order for t in runs[n][b]):
        missed.append(f"midsize-{n} best {best:.4f} | " + " | ".join(" ".join(f"{t:.4f}" for t in runs[n][b]) for b in order))
for b in order:
    print(f"{b}: {within[b]} of {count[b]} runs within 1% of the best seen, {every[b]} of {len(runs)} instances in every run, "
          f"geometric mean {math.exp(logs[b] / count[b]):.4f}, wall {walls[b]:.1f} s")
print("\n".join(missed))
PY
