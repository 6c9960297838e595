#!/usr/bin/env bash
# How well two profiles of this machine agree: takes two `hetexec profile` runs back to back
# (or compares two profile files) and prints, per row, the forward, backward and optimizer-step
# times of both, their relative difference |a - b| / min(a, b), and the spread each profile
# reported for the row (the 95% interval of the median, `# spread` comments); then the largest
# difference. Exit 0; the numbers are for people (docs/executor.md, Profiling).
#   scripts/profile-spread.sh [PROFILE ARGS...]     default: --threads 1 --model configs/models/tiny-gpt.yaml
#                                                    --micro-batch 1 2 4 8 16
#   scripts/profile-spread.sh --compare A.yaml B.yaml
#   HET_BUILD_DIR  build directory (default: build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${HET_BUILD_DIR:-build}"

if [[ "${1:-}" == "--compare" ]]; then
  [[ $# -eq 3 ]] || { echo "usage: $0 --compare A.yaml B.yaml" >&2; exit 2; }
  a="$2" b="$3"
else
  args=("$@")
  if (( ${#args[@]} == 0 )); then args=(--threads 1 --model configs/models/tiny-gpt.yaml --micro-batch 1 2 4 8 16); fi
  out="$build/profile-spread"
  mkdir -p "$out"
  a="$out/a.yaml" b="$out/b.yaml"
  for f in "$a" "$b"; do
    start=$(date +%s.%N)
    "$build/apps/hetexec/hetexec" profile "${args[@]}" -o "$f" > /dev/null
    echo "profiled into $f in $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)") s"
  done
fi

python3 - "$a" "$b" <<'EOF'
import re, sys

SCALE = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}

def seconds(text):
    m = re.fullmatch(r"\s*([-+0-9.eE]+)\s*([a-z\u00b5]+)\s*", text)
    return float(m.group(1)) * SCALE[m.group(2)]

def rows(path):
    """(unit, tp, cp, micro-batch) -> {forward, backward, spread}, and the optimizer rows."""
    out = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"\s*- \{(.*)\}\s*(#.*)?$", line)
        if not m:
            continue
        fields = dict(kv.split(": ", 1) for kv in m.group(1).split(", "))
        spread = re.search(r"spread ([0-9.]+%|unknown)", m.group(2) or "")
        spread = spread.group(1) if spread else "-"
        if "unit" in fields:
            key = (fields["unit"], int(fields["tp"]), int(fields.get("cp", 1)), int(fields["micro_batch_size"]))
            out[key] = {"forward": seconds(fields["forward"]), "backward": seconds(fields["backward"]), "spread": spread}
        elif "time" in fields:
            key = ("optimizer", int(fields.get("tp", 1)), 1, int(fields.get("micro_batch_size", 0)))
            out[key] = {"step": seconds(fields["time"]), "spread": spread}
    return out

a, b = rows(sys.argv[1]), rows(sys.argv[2])
print(f"{'row':<22} {'time':<8} {'A (us)':>11} {'B (us)':>11} {'diff':>7}  spread A / B")
worst = (0.0, "")
by_kind = {}  # unit kind -> largest difference
total = [0.0, 0.0]
for key in sorted(set(a) & set(b)):
    for what in ("forward", "backward", "step"):
        if what not in a[key]:
            continue
        x, y = a[key][what], b[key][what]
        diff = abs(x - y) / min(x, y) if min(x, y) > 0 else float("inf")
        name = f"{key[0]} tp{key[1]} mbs{key[3]}" + (f" cp{key[2]}" if key[2] != 1 else "") if key[0] != "optimizer" else f"optimizer tp{key[1]}"
        print(f"{name:<22} {what:<8} {x * 1e6:11.2f} {y * 1e6:11.2f} {diff * 100:6.2f}%  {a[key]['spread']} / {b[key]['spread']}")
        if diff >= worst[0]:
            worst = (diff, f"{name} {what}")
        by_kind[key[0]] = max(by_kind.get(key[0], 0.0), diff)
        total[0] += x
        total[1] += y
missing = set(a) ^ set(b)
if missing:
    print(f"rows in only one profile: {sorted(missing)}")
print("largest difference per unit: " + ", ".join(f"{k} {v * 100:.2f}%" for k, v in sorted(by_kind.items())))
print(f"sum of every row's times: {abs(total[0] - total[1]) / min(total) * 100:.2f}% apart")
print(f"max relative difference: {worst[0] * 100:.2f}% ({worst[1]})")
EOF
