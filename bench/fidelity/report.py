"""Helpers of scripts/bench-fidelity.sh: a plan's rank count, one result row, the summary."""
import json
import statistics
import sys


def ranks(plan):
    p = json.load(open(plan))
    print(sum(s.get("dp", 1) * s.get("tp", 1) * s.get("cp", 1) for q in p["pipelines"] for s in q["stages"]))


def row(name, n, x, rep, compare, results):
    c = json.load(open(compare))
    r = {"plan": name, "ranks": int(n), "dilation": int(x), "rep": int(rep), "predicted_s": c["predicted_step_s"],
         "measured_s": c["measured_step_s"], "ratio": c["predicted_over_measured"]}
    with open(results, "a") as f:
        f.write(json.dumps(r) + "\n")
    print("| %s | %d | %d | %d | %.1f | %.1f | %.3f |" % (name, r["ranks"], r["dilation"], r["rep"], r["predicted_s"] * 1e3,
                                                       r["measured_s"] * 1e3, r["ratio"]))


def faster(a, b, out):
    """Copies to `out` the profile whose layer rows sum to less time (read as text: the rows'
    forward and backward, with their units)."""
    import re
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    def total(path):
        t = 0.0
        for line in open(path):
            if "unit: layer" in line:
                for value, unit in re.findall(r"(?:forward|backward): ([0-9.e+-]+)(ns|us|ms|s)\b", line):
                    t += float(value) * scale[unit]
        return t
    ta, tb = total(a), total(b)
    src = a if ta <= tb else b
    with open(src) as f, open(out, "w") as g:
        g.write(f.read())


def summary(results, out):
    rows = [json.loads(line) for line in open(results)]
    errs = [abs(r["ratio"] - 1) for r in rows]
    s = {"plans": len({r["plan"] for r in rows}), "runs": len(rows), "median_abs_error": statistics.median(errs),
         "max_abs_error": max(errs), "within_5pct": sum(e <= 0.05 for e in errs), "within_10pct": sum(e <= 0.10 for e in errs),
         "median_ratio": statistics.median(r["ratio"] for r in rows)}
    json.dump({"summary": s, "runs": rows}, open(out, "w"), indent=1)
    print(f"\n{s['plans']} plans, {s['runs']} runs: predicted ÷ measured median {s['median_ratio']:.3f}; "
          f"|error| median {s['median_abs_error'] * 100:.1f}%, max {s['max_abs_error'] * 100:.1f}%; "
          f"within 5%: {s['within_5pct']}/{s['runs']}, within 10%: {s['within_10pct']}/{s['runs']}")


if __name__ == "__main__":
    {"ranks": ranks, "row": row, "summary": summary, "faster": faster}[sys.argv[1]](*sys.argv[2:])
