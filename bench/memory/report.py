#!/usr/bin/env python3
"""scripts/bench-memory.sh's table: per rank of every plan, the planner's peak bytes per device
(hetplan simulate's stage memory_bytes) against the rank's measured peak (run-local's memory
line: the heap's growth, or on a device backend its device buffers' peak, and the buffers
accounted)."""
import json
import sys


def ranks_of(plan):
    """(pipeline, stage, stage dict) per rank, in the runtime's rank order."""
    out = []
    for p, pipe in enumerate(plan["pipelines"]):
        for s, st in enumerate(pipe["stages"]):
            out += [(p, s, st)] * len(st["devices"])
    return out


def memory_line(metrics):
    with open(metrics) as f:
        for line in f:
            j = json.loads(line)
            if "memory" in j:
                return j["memory"]
    raise SystemExit(f"{metrics}: no memory line")


def main(runs_file, results_file):
    rows = []
    with open(runs_file) as f:
        for line in f:
            name, plan, metrics, predicted = line.split()
            plan_j = json.load(open(predicted))
            measured = memory_line(metrics)
            for r, (p, s, st) in enumerate(ranks_of(plan_j)):
                pred = st["predicted"]["memory_bytes"]
                m = measured[r]
                rows.append({"plan": name, "rank": r, "stage": f"p{p} s{s} {st['subcluster']}",
                             "recompute": st.get("recompute", "none"), "predicted": pred,
                             "heap": m["device"] if m.get("device", 0) > 0 else m["heap"],
                             "accounted": m["accounted"], "activations": m["activations"]})
    mib = 1 << 20
    print("| plan | rank | stage | recompute | predicted MiB | measured MiB (heap, or device) | predicted ÷ measured | accounted MiB | predicted ÷ accounted |")
    print("|---|---|---|---|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['plan']} | {x['rank']} | {x['stage']} | {x['recompute']} | {x['predicted'] / mib:.3f} | {x['heap'] / mib:.3f} | "
              f"{x['predicted'] / x['heap']:.3f} | {x['accounted'] / mib:.3f} | {x['predicted'] / x['accounted']:.3f} |")
    ratios = sorted(x["predicted"] / x["heap"] for x in rows)
    worst = max(ratios, key=lambda q: abs(q - 1))
    within = sum(abs(q - 1) <= 0.10 for q in ratios)
    print(f"\n{len(rows)} ranks of {len({x['plan'] for x in rows})} plans: predicted ÷ measured median "
          f"{ratios[len(ratios) // 2]:.3f}, worst {worst:.3f}, {within}/{len(rows)} within 10%")
    json.dump({"rows": rows, "median": ratios[len(ratios) // 2], "worst": worst, "within_10pct": within}, open(results_file, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
