#!/usr/bin/env bash
# How long a checkpoint takes, per GB, and how long it holds the ranks up (issue 19).
#   scripts/bench-checkpoint.sh [--format json]
# Trains GPT models of two sizes (hidden 512 and 1024, 4 layers, as the test plans split them:
# about 13 M and 51 M parameters, 150 and 610 MB of fp32 values and AdamW moments) for 3 steps under two plans — two pipeline
# stages (each rank writes its stage) and dp 2 with ZeRO-1 (each rank writes half of every
# bucket) — with a checkpoint after every step, and reads from the run's trace:
#   write s   each rank's own "checkpoint" event (building its pieces, writing and fsyncing its
#             file), the median over the checkpoints, the slowest rank;
#   commit s  rank 0's event: its write, then waiting for every rank's answer, the manifest and
#             the rename: how long the checkpoint holds rank 0 (and so the next step) up;
#   MB/s      the checkpoint's bytes / commit s.
# Needs build/ (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
format=table
[[ "${1:-}" == "--format" ]] && format="$2"
hetexec=build/apps/hetexec/hetexec
[[ -x $hetexec ]] || { echo "bench-checkpoint: build first (bash scripts/setup.sh)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rows=()
for hidden in 512 1024; do
  for zero in 0 1; do
    model="$work/gpt-$hidden-zero$zero.yaml"
    cat > "$model" <<EOF
name: ckpt-gpt-$hidden
architecture: gpt
num_layers: 4
hidden_size: $hidden
num_attention_heads: 8
vocab_size: 256
seq_length: 32
dtype: fp32
training:
  global_batch_size: 16
  micro_batch_sizes: [1, 2, 4]
  zero_stage: $zero
  recompute: [none]
EOF
    plan=tests/data/plans/pipeline.plan.json
    [[ $zero == 1 ]] && plan=tests/data/plans/data.plan.json
    echo "bench-checkpoint: hidden $hidden, $(basename "$plan" .plan.json), ZeRO $zero" >&2
    "$hetexec" run-local "$plan" --model "$model" --cluster configs/clusters/demo-1x4a100-1x4v100.yaml --steps 3 \
      --checkpoint-dir "$work/ck-$hidden-$zero" --checkpoint-every 1 --keep 1 --trace "$work/trace-$hidden-$zero.json" > "$work/out-$hidden-$zero.txt"
    rows+=("$hidden $zero $(basename "$plan" .plan.json) $work/trace-$hidden-$zero.json $work/out-$hidden-$zero.txt")
  done
done

python3 - "$format" "${rows[@]}" <<'EOF'
import json, re, statistics, sys
fmt, rows = sys.argv[1], sys.argv[2:]
out = []
for row in rows:
    hidden, zero, plan, trace, text = row.split()
    events = json.load(open(trace))["traceEvents"]
    by_rank = {}
    for e in events:
        if e.get("name") == "checkpoint" and e.get("ph") == "X":
            by_rank.setdefault(e["tid"], []).append(e["dur"] / 1e6)
    saved = re.findall(r"checkpoint: \S+, training resumes there at step \d+ \(([\d.]+) MB in ([\d.]+) s", open(text).read())
    mb = float(saved[-1][0])
    ranks = sorted(by_rank)
    commit = statistics.median(by_rank[ranks[0]])
    writes = [statistics.median(by_rank[r]) for r in ranks[1:]]
    out.append({"hidden": int(hidden), "plan": plan + (" (ZeRO-1)" if zero == "1" else ""), "ranks": len(ranks), "mb": mb,
                "write_s": max(writes) if writes else commit, "commit_s": commit, "mb_per_s": mb / commit,
                "checkpoints": len(saved)})
if fmt == "json":
    print(json.dumps(out, indent=1))
else:
    print(f"{'hidden':>6}  {'plan':<18} {'ranks':>5} {'MB':>8} {'write s':>8} {'commit s':>9} {'MB/s':>7}")
    for r in out:
        print(f"{r['hidden']:>6}  {r['plan']:<18} {r['ranks']:>5} {r['mb']:>8.1f} {r['write_s']:>8.3f} {r['commit_s']:>9.3f} {r['mb_per_s']:>7.0f}")
EOF
