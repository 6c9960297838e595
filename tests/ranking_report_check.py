"""bench/fidelity/report.py's ranking arithmetic (scripts/bench-ranking.sh): interleaved rounds
take out each round's speed and nothing else, and Kendall's tau counts orders as it should.
   python3 tests/ranking_report_check.py REPO_ROOT"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(sys.argv[1], "bench", "fidelity"))
import report  # noqa: E402


def check(ok, what):
    if not ok:
        sys.exit("FAILED: " + what)


# Kendall tau: the same order 1, the reverse -1; tau-b leaves pairs predicted equal out of its denominator.
check(report.kendall_tau([1, 2, 3], [10, 20, 30]) == (1.0, 1.0), "tau of the same order is 1")
check(report.kendall_tau([1, 2, 3], [30, 20, 10]) == (-1.0, -1.0), "tau of the reverse order is -1")
a, b = report.kendall_tau([1, 1, 3], [10, 20, 30])
check(abs(a - 2 / 3) < 1e-12 and abs(b - 2 / 6 ** 0.5) < 1e-12,
      f"a tie in the prediction: tau-a 2/3, tau-b 2/sqrt(2 x 3) (Kendall 1945; got {a}, {b})")

# Rounds: three plans whose true steps are 100, 103 and 110 ms, measured in six rounds whose host
# speed moves by up to 40% from round to round (C did not run in round 6), A's run in round 1
# and B's in round 2 disturbed alone by 30% and 8%. Raw medians mix the rounds' speeds; at the
# rounds' mean speed the order and the distances are the true ones, and so are the fastest runs'.
true = {"A": 0.100, "B": 0.103, "C": 0.110}
speed = {1: 1.00, 2: 1.40, 3: 0.95, 4: 1.25, 5: 1.02, 6: 1.10}
alone = {("B", 2): 1.08, ("A", 1): 1.30}
with tempfile.TemporaryDirectory() as d:
    files = []
    for p, t in true.items():
        for k, s in speed.items():
            if (p, k) == ("C", 6):
                continue  # a round in which one plan did not run does not count
            path = os.path.join(d, f"{p}.r{k}.planner.json")
            json.dump({"predicted_step_s": t * 0.98, "measured_step_s": t * s * alone.get((p, k), 1)}, open(path, "w"))
            files.append(path)
    results = os.path.join(d, "results.jsonl")
    report.rounds("test", results, *files)
    rows = {r["plan"]: r for r in map(json.loads, open(results))}
    check(all(r["rounds"] == 5 for r in rows.values()), "only the rounds in which every plan ran count")
    at = {p: rows[p]["at_round_s"] for p in rows}
    check(at["A"] < at["B"] < at["C"], f"at the rounds' mean speed the true order holds: {at}")
    ratio = at["C"] / at["A"]
    check(abs(ratio - 1.10) < 0.01, f"a plan's own distance from the others stays in: C/A {ratio:.4f}, true 1.100")
    quiet = rows["A"]["at_round_runs_s"][2:]  # rounds 3-5, which nothing disturbed alone: raw 0.95-1.25
    spread = max(quiet) / min(quiet) - 1
    check(spread < 1e-9, f"the rounds' speed is taken out: A's quiet runs spread {spread:.3f} at the mean speed (raw 32%)")
    fastest = {p: rows[p]["fastest_s"] for p in rows}
    check(abs(fastest["B"] / fastest["A"] - 1.03) < 1e-9 and abs(fastest["C"] / fastest["A"] - 1.10) < 1e-9,
          f"each plan's fastest run is its quietest: {fastest}")
    report.ranking(results, os.path.join(d, "results.json"))
    o = json.load(open(os.path.join(d, "results.json")))["test"]["at_round_speed"]
    check(abs(o["kendall_tau_b"] - 1.0) < 1e-12, f"tau-b at the rounds' speed is 1: {o}")
print("ranking report: ok")
