#!/usr/bin/env python3
"""Predicted ÷ measured with the compute taken at each run's own speed (issue 16).

A run's own compute ÷ profile (the trace's, `hetplan simulate --measured`) says how fast this
VM's host let it compute against the profile; on a host that is 20-40% slower for minutes at a
time, profiles and runs are often taken at different speeds, and the step's ratio then measures
the host, not the model. For every run bench-fidelity.sh kept files of, this scales the
profiles' compute rows (forward, backward, recompute, optimizer time) by the run's own ratio,
re-simulates it against its trace, and prints the ratio again: what the model predicts had the
profile been taken at the speed the run computed. It tests everything but the profile's absolute
speed (schedule, links, collectives, the rank program); the profile's speed is what the raw
ratio adds. One ratio per run, for both device types.

  python3 bench/fidelity/normalized.py [OUT_DIR (build/bench-fidelity)] [CLUSTER (bench/fidelity/cluster.yaml)]
"""
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import dilation_of  # noqa: E402  (the bench's dilation of a plan)

out = sys.argv[1] if len(sys.argv) > 1 else "build/bench-fidelity"
cluster = sys.argv[2] if len(sys.argv) > 2 else "bench/fidelity/cluster.yaml"
hetplan = os.environ.get("HETPLAN", "build/apps/hetplan/hetplan")
UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
ROW = re.compile(r"\b(forward|backward|recompute|time): ([0-9.e+-]+)(ns|us|ms|s)\b")


def scaled(src, dst, r):
    text = open(src).read()
    open(dst, "w").write(ROW.sub(lambda m: "%s: %.9gs" % (m.group(1), float(m.group(2)) * UNIT[m.group(3)] * r), text))


per_plan = {}
with tempfile.TemporaryDirectory() as tmp:
    for plan in sorted(glob.glob("bench/fidelity/plans/*.plan.json")):
        name = os.path.basename(plan)[: -len(".plan.json")]
        model = "tiny-" + name.split("-")[0]
        for compare in sorted(glob.glob(f"{out}/{name}.*.*.compare.json")):
            c = json.load(open(compare))
            r = c["compute_measured_over_profiled"]
            profiles = []
            for dev in ("fast", "slow"):
                # The run's own profile (bench-fidelity.sh FIDELITY_FRESH), else the bench's.
                own = compare[: -len(".compare.json")] + f".{dev}.yaml"
                src = own if os.path.exists(own) else f"{out}/{model}-{dev}.yaml"
                if not os.path.exists(src):
                    continue  # FIDELITY_FRESH: a device type this plan does not use
                profiles += ["--profile", f"{tmp}/{model}-{dev}.yaml"]
                scaled(src, f"{tmp}/{model}-{dev}.yaml", r)
            trace = compare[: -len(".compare.json")] + ".trace.json"
            j = json.loads(subprocess.check_output(
                [hetplan, "simulate", plan, "--model", f"configs/models/{model}.yaml", "--cluster", cluster, *profiles,
                 "--time-dilation", str(dilation_of(plan)), "--measured", trace, "--format", "json"]))
            raw = c["predicted_step_s"] / c["measured_step_s"]
            norm = j["predicted_step_s"] / j["measured_step_s"]
            per_plan.setdefault(name, []).append(norm)
            print(f"{os.path.basename(compare):40s} raw {raw:.3f}  own compute ÷ profile {r:.3f}  at the run's speed {norm:.3f}")
print()
print("| plan | runs | predicted ÷ measured at the run's own compute speed: median (range) |")
print("|---|---|---|")
medians = []
for name, v in per_plan.items():
    medians.append(statistics.median(v))
    print(f"| {name} | {len(v)} | {medians[-1]:.3f} ({min(v):.3f}-{max(v):.3f}) |")
if medians:
    within = lambda e: sum(abs(m - 1) <= e for m in medians)
    print(f"\n{len(medians)} plans: median of the medians {statistics.median(medians):.3f}; "
          f"within 5%: {within(0.05)}/{len(medians)}, within 10%: {within(0.10)}/{len(medians)}")
