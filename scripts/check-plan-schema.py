#!/usr/bin/env python3
"""Checks plans against docs/plan.schema.json (hetplan.plan/v1).

  check-plan-schema.py [--schema F] [--kept DIR] [--hetplan BIN --search MODEL:CLUSTER ...] [--min-plans N] PATH...
  check-plan-schema.py [--schema F] --self-test PLAN

A PATH is a plan file or a folder searched recursively for plans: files named *.plan.json
or plan.json, and any other *.json whose top-level "format" starts with "hetplan.plan/".
--kept DIR is such a folder that may not exist: the plans the tests kept (tests/kept_plans.hpp),
none when no test that keeps plans ran.
With --hetplan and --search, it also runs `hetplan search` on each MODEL:CLUSTER with every
algorithm and checks the plans found. --self-test mutates PLAN in ways the schema must
reject (a typo in a field name, a value outside an enum, tp 0, a bare number where a
quantity needs a unit, ...) and fails unless every mutation is rejected.

Exit status: 0 all plans valid, 1 a plan is invalid (each error names the file and the
JSON path), 2 usage, 77 python3-jsonschema is missing (ctest reports the test as skipped).
"""
import argparse
import concurrent.futures
import contextlib
import copy
import io
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77

try:
    import jsonschema
except ImportError:
    print("SKIP: python3-jsonschema is not installed (apt-get install python3-jsonschema; scripts/setup.sh installs it)")
    sys.exit(SKIP)

ALGORITHMS = ["auto", "uniform", "exhaustive", "hapt", "heteroauto", "mcts", "hexiscale"]


def load_validator(schema_path):
    with open(schema_path, encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def is_plan_file(path):
    name = os.path.basename(path)
    if name.endswith(".plan.json") or name == "plan.json":
        return True
    if not name.endswith(".json"):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and str(doc.get("format", "")).startswith("hetplan.plan/")


def plan_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in (".git", "build"))
                for f in sorted(files):
                    full = os.path.join(root, f)
                    if is_plan_file(full):
                        yield full
        elif os.path.exists(p):
            yield p
        else:
            raise FileNotFoundError(p)


def where(error):
    return "/".join(str(x) for x in error.absolute_path) or "(top level)"


def problems(validator, doc):
    return sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))


def check_text(validator, name, text):
    try:
        doc = json.loads(text)
    except ValueError as e:
        print(f"{name}: not JSON: {e}")
        return False
    errors = problems(validator, doc)
    for e in errors[:10]:
        print(f"{name}: {where(e)}: {e.message}")
    if len(errors) > 10:
        print(f"{name}: ... and {len(errors) - 10} more")
    return not errors


_validator = None  # one per worker process


def _init_worker(schema_path):
    global _validator
    _validator = load_validator(schema_path)


def _check_file(path):
    """(valid, what check_text printed) for one file, in a worker process."""
    out = io.StringIO()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with contextlib.redirect_stdout(out):
        ok = check_text(_validator, path, text)
    return ok, out.getvalue()


def search_plans(hetplan, pairs, budget):
    """Runs hetplan search with every algorithm; yields (name, plan text or None, why)."""
    for pair in pairs:
        model, cluster = pair.split(":", 1)
        for algo in ALGORITHMS:
            name = f"search --algo {algo} --model {os.path.basename(model)} --cluster {os.path.basename(cluster)}"
            r = subprocess.run([hetplan, "search", "--model", model, "--cluster", cluster, "--algo", algo,
                                "--time-budget", str(budget), "--format", "json"],
                               capture_output=True, text=True, timeout=120 + 4 * budget)
            if r.returncode == 0:
                yield name, r.stdout, ""
            else:
                yield name, None, (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]


# Mutations a schema that catches typos must reject: (what, function changing a plan).
def mutations(plan):
    def stage(p):
        return p["pipelines"][0]["stages"][0]

    out = [
        ("a misspelt top-level field", lambda p: p.update(pipelnes=p["pipelines"])),
        ("a misspelt stage field", lambda p: stage(p).update(recomptue="full")),
        ("an unknown schedule kind", lambda p: p["schedule"].update(kind="2f2b")),
        ("an unknown recompute option", lambda p: stage(p).update(recompute="some")),
        ("tp 0", lambda p: stage(p).update(tp=0)),
        ("a negative device index", lambda p: stage(p)["devices"][0].update(node=-1)),
        ("layers with three values", lambda p: stage(p).update(layers=[0, 1, 2])),
        ("a string micro_batch_size", lambda p: p["pipelines"][0].update(micro_batch_size="8")),
        ("no pipelines", lambda p: p.update(pipelines=[])),
        ("no schedule", lambda p: p.pop("schedule")),
        ("another format version", lambda p: p.update(format="hetplan.plan/v2")),
        ("a stage without devices", lambda p: stage(p).pop("devices")),
    ]
    if "model" in plan:
        out.append(("an unknown architecture", lambda p: p["model"].update(architecture="mamba")))
        out.append(("zero_stage 4", lambda p: p["model"]["training"].update(zero_stage=4)))
    if "cluster" in plan:
        def bare(p):
            p["cluster"]["subclusters"][0]["intra_node"] = {"bandwidth": "300", "latency": "2us"}
        out.append(("a bandwidth without a unit", bare))
        out.append(("a bandwidth in a time unit", lambda p: p["cluster"]["subclusters"][0].update(
            intra_node={"bandwidth": "3ms", "latency": "2us"})))
        out.append(("zero nodes", lambda p: p["cluster"]["subclusters"][0].update(nodes=0)))
    if "predicted" in plan:
        out.append(("a NaN written as null", lambda p: p["predicted"].update(iteration_s=None)))
        out.append(("a misspelt prediction field", lambda p: p["predicted"].update(mfu_=0.5)))
    return out


def self_test(validator, path):
    with open(path, encoding="utf-8") as f:
        plan = json.load(f)
    ok = True
    if problems(validator, plan):
        print(f"{path}: the unmutated plan must validate")
        check_text(validator, path, json.dumps(plan))
        return False
    for what, change in mutations(plan):
        mutated = copy.deepcopy(plan)
        change(mutated)
        errors = problems(validator, mutated)
        if errors:
            print(f"rejected   {what}: {where(errors[0])}: {errors[0].message[:100]}")
        else:
            print(f"ACCEPTED   {what}: the schema must reject it")
            ok = False
    # And the file check fails on such a plan, found in a folder as the tests' plans are.
    with tempfile.TemporaryDirectory() as folder:
        mutated = copy.deepcopy(plan)
        mutated["pipelines"][0]["stages"][0]["tp"] = 0
        with open(os.path.join(folder, "0123456789abcdef.plan.json"), "w", encoding="utf-8") as f:
            json.dump(mutated, f)
        found = list(plan_files([folder]))
        if len(found) != 1 or check_text(validator, found[0], open(found[0], encoding="utf-8").read()):
            print("ACCEPTED   a plan file with tp 0 in a folder of kept plans")
            ok = False
        else:
            print("rejected   a plan file with tp 0 in a folder of kept plans")
    return ok


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schema", default=os.path.join(here, "..", "docs", "plan.schema.json"))
    ap.add_argument("--self-test", metavar="PLAN")
    ap.add_argument("--kept", metavar="DIR", help="the plans the tests kept (a missing folder holds none)")
    ap.add_argument("--hetplan")
    ap.add_argument("--search", action="append", default=[], metavar="MODEL:CLUSTER")
    ap.add_argument("--time-budget", type=float, default=2)
    ap.add_argument("--min-plans", type=int, default=1, help="fail when fewer plans were checked")
    ap.add_argument("paths", nargs="*")
    a = ap.parse_args()
    if a.search and not a.hetplan:
        ap.error("--search needs --hetplan")
    validator = load_validator(a.schema)

    if a.self_test:
        ok = self_test(validator, a.self_test)
        print("self-test:", "every mutation rejected" if ok else "FAILED")
        return 0 if ok else 1

    checked = failed = 0
    counts = {}

    # Thousands of kept plans: checked on every core.
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count() or 1, initializer=_init_worker,
                                                  initargs=(a.schema,))

    def check_files(paths, what):
        nonlocal checked, failed
        counts.setdefault(what, 0)
        for ok, printed in pool.map(_check_file, list(plan_files(paths)), chunksize=16):
            print(printed, end="")
            checked += 1
            counts[what] += 1
            if not ok:
                failed += 1

    try:
        check_files(a.paths, "in the given files and folders")
    except FileNotFoundError as e:
        print(f"{e}: no such file or folder")
        return 2
    if a.kept:
        check_files([a.kept] if os.path.isdir(a.kept) else [], "kept by the tests")
    pool.shutdown()
    for name, text, why in search_plans(a.hetplan, a.search, a.time_budget):
        if text is None:
            print(f"{name}: no plan ({why})")
            continue
        checked += 1
        counts["found by hetplan search"] = counts.get("found by hetplan search", 0) + 1
        if not check_text(validator, name, text):
            failed += 1
    for what, n in counts.items():
        print(f"{n} plans {what}")
    print(f"{checked} plans checked against {os.path.relpath(a.schema)}: {checked - failed} valid, {failed} invalid")
    if checked < a.min_plans:
        print(f"expected at least {a.min_plans} plans")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
