"""Helpers of scripts/bench-fidelity.sh and bench-ranking.sh: a plan's rank count, result rows, the summaries."""
import json
import os
import statistics
import sys

# How far a run's own compute may be off its profile (FIDELITY_COMPUTE) and still be the
# profiled machine: a run's forwards and backwards minus their collectives, as the trace
# measured them (the rank's CPU time, stretched), against the profile's (simulate --measured).
COMPUTE_TOLERANCE = float(os.environ.get("FIDELITY_COMPUTE", "0.05"))


def compute_off(c):
    """Whether comparison `c` computed more than COMPUTE_TOLERANCE off its profile (a trace
    without compute, from before the trace carried it: not off)."""
    k = c.get("compute_measured_over_profiled", 0)
    return k > 0 and abs(k - 1) > COMPUTE_TOLERANCE


def probes(compare):
    """The probes around a run (NAME.probe.json beside NAME.compare.json, measure.sh); quiet when none."""
    p = compare.replace(".compare.json", ".probe.json")
    return json.load(open(p)) if os.path.exists(p) else {"quiet": True}


def why_disturbed(compare):
    """Why the run of comparison file `compare` does not measure the profiled machine: its probes
    or its own compute (an empty list: undisturbed)."""
    c = json.load(open(compare))
    why = []
    if not probes(compare)["quiet"]:
        why.append("probes not quiet")
    if compute_off(c):
        why.append(f"own compute {c['compute_measured_over_profiled']:.3f}x its profile")
    return why


def disturbed(compare):
    """Prints 'quiet', or 'disturbed: ' and why (why_disturbed)."""
    why = why_disturbed(compare)
    print("disturbed: " + ", ".join(why) if why else "quiet")


def rank_count(plan):
    p = json.load(open(plan))
    return sum(s.get("dp", 1) * s.get("tp", 1) * s.get("cp", 1) for q in p["pipelines"] for s in q["stages"])


def ranks(plan):
    print(rank_count(plan))


def rows(plan, subcluster):
    """The `hetexec profile` options that measure the rows plan `plan` uses on `subcluster`'s
    devices (its stages' tp and cp degrees and the sequences of a micro-batch on one replica,
    micro_batch_size / dp), or nothing when no stage is there (bench-fidelity.sh FIDELITY_FRESH)."""
    p = json.load(open(plan))
    stages = [(s, q["micro_batch_size"] // s.get("dp", 1)) for q in p["pipelines"] for s in q["stages"]
              if s["subcluster"] == subcluster]
    if stages:
        def degrees(key):
            return " ".join(map(str, sorted({s.get(key, 1) for s, _ in stages})))
        print(f"--tp {degrees('tp')} --cp {degrees('cp')} --micro-batch {' '.join(map(str, sorted({b for _, b in stages})))}")


def quiet_dilation(busy, cores):
    """The least of 8, 16, 32, ... at which `busy` dilated threads keep at most an eighth of
    `cores` busy (busy / X <= cores / 8): het::runtime::quiet_dilation (libexec/runtime/pace.hpp,
    where the measurements behind it are), the rule run-local's note gives; tests/pace_test.cpp
    holds the two to the same answers."""
    x, busy, cores = 8, int(busy), max(1, int(cores))
    while busy * 8 > x * cores:
        x *= 2
    return x


def dilation_of(plan):
    """The bench's time dilation of a plan: quiet_dilation of its ranks (one thread each, as
    run-local runs dilated ranks) on this machine's cores: 8 up to 2 ranks on 2 cores, 16 up to
    4, 32 up to 8. The 8-device ranking cluster's TP plans measured 2.4-3.6% over their
    prediction at X = 16 and 0.9-3.2% at 32; at 8 the 8-rank plans also computed 1.07-1.13x
    their profile, four ranks per core taking each other's caches (docs/executor.md "How much of
    the cores the ranks may keep busy")."""
    return quiet_dilation(rank_count(plan), os.cpu_count())


def dilation(plan):
    print(dilation_of(plan))


def row(name, n, x, rep, compare, results):
    c = json.load(open(compare))
    r = {"plan": name, "ranks": int(n), "dilation": int(x), "rep": int(rep), "predicted_s": c["predicted_step_s"],
         "measured_s": c["measured_step_s"], "ratio": c["predicted_over_measured"], "runs": c.get("runs", 1),
         "disturbed_runs": c.get("disturbed_runs", 0), "compute_ratio": c.get("compute_measured_over_profiled", 0)}
    with open(results, "a") as f:
        f.write(json.dumps(r) + "\n")
    print("| %s | %d | %d | %d | %.1f | %.1f | %.3f | %.3f | %d of %d |" % (
        name, r["ranks"], r["dilation"], r["rep"], r["predicted_s"] * 1e3, r["measured_s"] * 1e3, r["ratio"], r["compute_ratio"],
        r["disturbed_runs"], r["runs"]))


def faster(a, b, out):
    """Writes to `out` profile `a` with each timed row (a unit's, the optimizer step's) replaced
    by `b`'s where b's is faster (its times summed, read as text with their units): a host that
    disturbs a measurement makes it slower, never faster, and a disturbance lasts seconds, so
    it hits some rows of a profile and not others."""
    import re
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    def key(line):
        m = re.match(r"\s*- \{(unit: \w+, tp: \d+, cp: \d+, micro_batch_size: \d+|tp: \d+, time:)", line)
        return m.group(1) if m else None
    def total(line):
        return sum(float(v) * scale[u] for v, u in re.findall(r"(?:forward|backward|time): ([0-9.e+-]+)(ns|us|ms|s)\b", line))
    rows_b = {key(line): line for line in open(b) if key(line)}
    with open(out, "w") as g:
        for line in open(a):
            k = key(line)
            if k in rows_b and total(rows_b[k]) < total(line):
                line = rows_b[k]
            g.write(line)


def layer_time(profile, micro_batch=2):
    """A tiny-gpt layer's forward + backward at tp 1, cp 1 (seconds) in a profile."""
    import re
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    for line in open(profile):
        if re.match(r"\s*- \{unit: layer, tp: 1, cp: 1, micro_batch_size: %d\b" % micro_batch, line):
            return sum(float(v) * scale[u] for v, u in re.findall(r"(?:forward|backward): ([0-9.e+-]+)(ns|us|ms|s)\b", line))
    raise SystemExit(f"{profile}: no layer row at tp 1, cp 1, micro-batch {micro_batch}")


def probe(profile, baseline, unit="ratio"):
    """Prints the probe's layer time over the baseline's (the machine's slowdown now), or with
    unit 'ms' the probe's layer time in milliseconds (bench/fidelity/measure.sh)."""
    t = layer_time(profile)
    print(f"{t * 1e3:.3f}" if unit == "ms" else f"{t / layer_time(baseline):.4f}")


def probed(out, before, after, quiet):
    """Writes a run's probes (measure.sh): the slowdowns before and after it and whether both
    were within `quiet` of the baseline."""
    b, a = float(before), float(after)
    json.dump({"before": b, "after": a, "quiet": max(b, a) <= 1 + float(quiet)}, open(out, "w"))


def median(out, *compares):
    """Copies to `out` the comparison whose measured step is the median (the lower of the two
    middle ones for an even count) of the undisturbed runs. A run is undisturbed when the probes
    found the machine quiet (NAME.probe.json beside each NAME.compare.json: the machine's
    slowdown before and after the run, and whether both were quiet; measure.sh) and its own
    compute is within COMPUTE_TOLERANCE of its profile. When none was: of the runs whose own
    compute was (the probes aside), and when none was either, the run whose own compute was
    nearest its profile — the direct evidence of the machine a run measured, where the probes
    are indirect (the median of all runs, kept before, kept gpt-two-pipelines' run at 1.25x its
    profile out of 9 disturbed runs, one of them at 1.03x; 2026-11-29). The median, not the
    fastest: on this VM a run moves 15-20% even between quiet probes, in both directions
    against its neighbours (llama-eager-1f1b measured 299.3 and 258.8 ms, its prediction 309.1),
    and the fastest of several runs picks that outlier. Adds "runs", "disturbed_runs", the kept
    run's "probe" and the measured step of every run it was the median of ("measured_runs_s")."""
    quiet = [c for c in compares if not why_disturbed(c)]
    kept_from = quiet or [c for c in compares if not compute_off(json.load(open(c)))] or [
        min(compares, key=lambda c: abs(json.load(open(c)).get("compute_measured_over_profiled", 1) - 1))]
    ordered = sorted(kept_from, key=lambda c: json.load(open(c))["measured_step_s"])
    best = ordered[(len(ordered) - 1) // 2]
    kept = json.load(open(best))
    kept.update({"runs": len(compares), "disturbed_runs": len(compares) - len(quiet), "probe": probes(best),
                 "measured_runs_s": [json.load(open(c))["measured_step_s"] for c in ordered]})
    at_planner = [json.load(open(c)).get("measured_at_planner_profile_s") for c in ordered]
    if all(at_planner):  # bench-ranking.sh: every run's step at the planner's profile speed (planner)
        kept["measured_at_planner_profile_runs_s"] = sorted(at_planner)
    json.dump(kept, open(out, "w"), indent=1)


def planner(compare, planner_compare):
    """Adds to `compare` (a run predicted from the profile taken just before it) the prediction
    of the planner's own profiles (`planner_compare`: the same run simulated with the profiles
    the search ranked the plans by) and the run's measured step at the speed of those profiles:
    measured x planner's prediction ÷ fresh prediction. On a host whose speed moves 20-40% from
    one minute to the next, plans measured minutes apart are measured on different machines;
    this puts every run on the machine the planner's profiles describe, through the run's own
    predicted ÷ measured (what the model gets wrong about it stays in; only the host's speed
    between the two profiles is taken out). bench-ranking.sh."""
    c, p = json.load(open(compare)), json.load(open(planner_compare))
    c["planner_predicted_step_s"] = p["predicted_step_s"]
    c["measured_at_planner_profile_s"] = c["measured_step_s"] * p["predicted_step_s"] / c["predicted_step_s"]
    json.dump(c, open(compare, "w"), indent=1)


def ranked(cluster, plan, compare, results):
    """A plan's row of the ranking: the planner's prediction (its profiles') and the kept run's
    measured step; with fresh profiles (planner) also the kept run's own prediction and the
    median of its runs' steps at the planner's profile speed."""
    c = json.load(open(compare))
    r = {"cluster": cluster, "plan": plan, "predicted_s": c.get("planner_predicted_step_s", c["predicted_step_s"]),
         "measured_s": c["measured_step_s"], "measured_runs_s": c.get("measured_runs_s", [c["measured_step_s"]]),
         "disturbed_runs": c.get("disturbed_runs", 0), "runs": c.get("runs", 1), "fresh_ratio": c["predicted_over_measured"],
         "compute_ratio": c.get("compute_measured_over_profiled", 0)}
    if "measured_at_planner_profile_runs_s" in c:
        r["at_planner_runs_s"] = c["measured_at_planner_profile_runs_s"]
        r["at_planner_s"] = statistics.median(r["at_planner_runs_s"])
    with open(results, "a") as f:
        f.write(json.dumps(r) + "\n")


def kendall_tau(a, b, resolution=0.0):
    """Kendall's tau between two lists of values over the same items: (tau-a, tau-b).
    tau-a counts a pair tied in either list as neither agreeing nor not, over all n(n-1)/2 pairs;
    tau-b (Kendall 1945; scipy.stats.kendalltau's default) leaves the tied pairs out of the
    denominator too, so plans the planner predicts equal (the same layout as one pipeline of dp 4
    or four of dp 1) are not counted as a wrong order whichever of them measures faster.
    With a resolution r > 0, two values closer than r of the smaller count as tied: plans whose
    measured times differ by less than one plan's runs differ from each other cannot be ordered
    by measuring them, and plans predicted within r are a tie the measurement cannot check."""
    n, s, ties_a, ties_b = len(a), 0, 0, 0
    def diff(v, i, j):
        d = v[i] - v[j]
        return 0 if abs(d) <= resolution * min(v[i], v[j]) else d
    for i in range(n):
        for j in range(i + 1, n):
            x, y = diff(a, i, j), diff(b, i, j)
            s += (x > 0) - (x < 0) if y > 0 else -((x > 0) - (x < 0)) if y < 0 else 0
            ties_a += x == 0
            ties_b += y == 0
    pairs = n * (n - 1) / 2
    if pairs == 0:
        return 1.0, 1.0
    denominator = ((pairs - ties_a) * (pairs - ties_b)) ** 0.5
    return s / pairs, (s / denominator if denominator > 0 else 0.0)


def order_report(rs, measured, runs):
    """Kendall's tau between the planner's predicted order and the order of `measured` (a key of
    each row), at no resolution and at the measurement's (the median over plans of how far a
    plan's runs, key `runs`, spread: (slowest - fastest) / fastest; plans closer than that are
    ties), and how much slower the planner's first choice measured than the fastest."""
    predicted = [r["predicted_s"] for r in rs]
    values = [r[measured] for r in rs]
    tau, tau_b = kendall_tau(predicted, values)
    spreads = [max(r[runs]) / min(r[runs]) - 1 for r in rs if len(r.get(runs, [])) > 1]
    resolution = statistics.median(spreads) if spreads else 0.0
    _, tau_r = kendall_tau(predicted, values, resolution)
    # The planner's first choice: the plan hetplan search returns (its own ranking).
    first = next((r for r in rs if r["plan"] == "search.1"), min(rs, key=lambda r: r["predicted_s"]))
    fastest = min(rs, key=lambda r: r[measured])
    return {"kendall_tau": tau, "kendall_tau_b": tau_b, "kendall_tau_b_at_resolution": tau_r, "resolution": resolution,
            "first_choice": first["plan"], "fastest_measured": fastest["plan"],
            "first_choice_gap": first[measured] / fastest[measured] - 1}


def ranking(results, out):
    rows = [json.loads(line) for line in open(results)]
    report = {}
    for cluster in dict.fromkeys(r["cluster"] for r in rows):
        rs = [r for r in rows if r["cluster"] == cluster]
        normalized = all("at_planner_s" in r for r in rs)
        blocked = all("at_round_s" in r for r in rs)
        print(f"\n{cluster}: plan | planner's predicted ms | measured ms"
              + (f" (median of {rs[0]['rounds']} rounds)" if blocked else "") + " | predicted ÷ measured"
              + (" | measured at the planner's profile speed ms | predicted ÷ that | the run's own profile: predicted ÷ measured | runs kept" if normalized else "")
              + (" | at the rounds' mean speed ms | predicted ÷ that | fastest run ms | predicted ÷ that | slowest run ms" if blocked else ""))
        for r in rs:
            line = f"  {r['plan']:10s} | {r['predicted_s'] * 1e3:8.1f} | {r['measured_s'] * 1e3:8.1f} | {r['predicted_s'] / r['measured_s']:.3f}"
            if normalized:
                line += (f" | {r['at_planner_s'] * 1e3:8.1f} | {r['predicted_s'] / r['at_planner_s']:.3f} | {r['fresh_ratio']:.3f}"
                         f" | {r['runs'] - r['disturbed_runs']} of {r['runs']}")
            if blocked:
                line += (f" | {r['at_round_s'] * 1e3:8.1f} | {r['predicted_s'] / r['at_round_s']:.3f}"
                         f" | {r['fastest_s'] * 1e3:8.1f} | {r['predicted_s'] / r['fastest_s']:.3f} | {max(r['measured_runs_s']) * 1e3:.1f}")
            print(line)
        tied = sum(rs[i]["predicted_s"] == rs[j]["predicted_s"] for i in range(len(rs)) for j in range(i + 1, len(rs)))
        report[cluster] = {"pairs_predicted_equal": tied, "plans": rs,
                           "measured": order_report(rs, "measured_s", "measured_runs_s")}
        if normalized:
            report[cluster]["at_planner_profile"] = order_report(rs, "at_planner_s", "at_planner_runs_s")
        if blocked:
            report[cluster]["at_round_speed"] = order_report(rs, "at_round_s", "at_round_runs_s")
            report[cluster]["fastest_run"] = order_report(rs, "fastest_s", "fastest_two_s")
        for key, what in (("measured", "measured"), ("at_planner_profile", "measured at the planner's profile speed"),
                          ("at_round_speed", "measured at the rounds' mean speed"), ("fastest_run", "each plan's fastest run")):
            if key not in report[cluster]:
                continue
            o = report[cluster][key]
            print(f"  {what}: Kendall tau-a {o['kendall_tau']:.2f}, tau-b {o['kendall_tau_b']:.2f} ({tied} pairs predicted equal), "
                  f"tau-b {o['kendall_tau_b_at_resolution']:.2f} at the measurement's resolution ({o['resolution'] * 100:.1f}%: "
                  f"a plan's runs spread that much); the planner's first choice ({o['first_choice']}) measured "
                  f"{o['first_choice_gap'] * 100:.1f}% slower than the fastest ({o['fastest_measured']})")
    json.dump(report, open(out, "w"), indent=1)


def rounds(cluster, results, *planner_compares):
    """The ranking's rows from interleaved rounds (bench-ranking.sh): every plan run once per
    round, the rounds one after another, each run simulated with the planner's profiles
    (`planner_compares`: DIR/PLAN.rK.planner.json). On this VM the host's speed moves 10-40%,
    for seconds to minutes at a time, so runs minutes apart are measured on different machines;
    a round (all plans, about a minute) shares its slower spells. A round is a block, as in any
    benchmark of alternatives on a drifting machine: each run's step divided by its round's geometric mean
    over the plans (the round's speed, common to its plans), times the mean of those over the
    rounds, is the step at the rounds' mean speed. Only rounds in which every plan ran count.
    What the model gets wrong about one plan stays in (the other plans of its round set the
    speed); what the host does to the whole round is taken out. Writes one row per plan: the
    planner's prediction, the median raw step (measured_s), the median step at the rounds'
    mean speed (at_round_s), with every run's value, and each plan's fastest run (fastest_s).
    The fastest run: the host's disturbances add time (a run is slowed for the seconds a spell
    lasts; the runs of one plan here fall into a quiet and a slowed group 10-25% apart; on
    2026-12-04 one run in 90 came out 10% under its plan's next fastest), and for timings whose
    noise is added delay the minimum is the most robust estimator of the undisturbed time (Chen &
    Revels 2016, "Robust benchmarking in noisy environments", arXiv:1608.04295, §4); its
    resolution is how far a plan's two fastest runs are apart."""
    runs = {}  # plan -> round -> (predicted, measured)
    for path in planner_compares:
        base = os.path.basename(path)[: -len(".planner.json")]
        plan, _, k = base.rpartition(".r")
        c = json.load(open(path))
        runs.setdefault(plan, {})[int(k)] = (c["predicted_step_s"], c["measured_step_s"])
    plans = list(runs)
    whole = sorted(set.intersection(*(set(r) for r in runs.values())))
    if not whole:
        sys.exit(f"{cluster}: no round in which every plan ran")
    speed = {k: statistics.geometric_mean([runs[p][k][1] for p in plans]) for k in whole}
    mean = statistics.geometric_mean(list(speed.values()))
    with open(results, "a") as f:
        for p in plans:
            raw = [runs[p][k][1] for k in whole]
            at = [runs[p][k][1] / speed[k] * mean for k in whole]
            f.write(json.dumps({"cluster": cluster, "plan": p, "predicted_s": runs[p][whole[0]][0],
                                "measured_s": statistics.median(raw), "measured_runs_s": raw,
                                "at_round_s": statistics.median(at), "at_round_runs_s": at,
                                "fastest_s": min(raw), "fastest_two_s": sorted(raw)[:2],
                                "rounds": len(whole), "runs": len(runs[p])}) + "\n")


def summary(results, out):
    rows = [json.loads(line) for line in open(results)]
    errs = [abs(r["ratio"] - 1) for r in rows]
    s = {"plans": len({r["plan"] for r in rows}), "runs": len(rows), "median_abs_error": statistics.median(errs),
         "max_abs_error": max(errs), "within_5pct": sum(e <= 0.05 for e in errs), "within_10pct": sum(e <= 0.10 for e in errs),
         "median_ratio": statistics.median(r["ratio"] for r in rows),
         "rows_from_disturbed_runs": sum(r.get("disturbed_runs", 0) == r.get("runs", 1) for r in rows),
         "disturbed_runs": sum(r.get("disturbed_runs", 0) for r in rows), "all_runs": sum(r.get("runs", 1) for r in rows)}
    json.dump({"summary": s, "runs": rows}, open(out, "w"), indent=1)
    print(f"\n{s['plans']} plans, {s['runs']} runs: predicted ÷ measured median {s['median_ratio']:.3f}; "
          f"|error| median {s['median_abs_error'] * 100:.1f}%, max {s['max_abs_error'] * 100:.1f}%; "
          f"within 5%: {s['within_5pct']}/{s['runs']}, within 10%: {s['within_10pct']}/{s['runs']}; "
          f"{s['disturbed_runs']} of {s['all_runs']} runs disturbed by the host (probes, own compute), "
          f"{s['rows_from_disturbed_runs']} rows with no undisturbed run")


if __name__ == "__main__":
    {"ranks": ranks, "rows": rows, "dilation": dilation, "row": row, "summary": summary, "faster": faster, "median": median, "ranked": ranked,
     "ranking": ranking, "quiet-dilation": lambda b, c: print(quiet_dilation(b, c)), "rounds": rounds, "planner": planner, "probe": probe, "probed": probed, "disturbed": disturbed}[sys.argv[1]](*sys.argv[2:])
