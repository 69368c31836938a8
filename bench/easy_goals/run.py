#!/usr/bin/env python3
"""Issue 16's scheduling goals on every given trace (or any trace) with ONE set of easy flags.

For each trace, sizes one block of K cubes by bench/README.md's rule (the trace's offered
chip-time over its submission span, at --load of the cluster, rounded up, at least 2 cubes),
then runs one `tessera sim` process with `--policies tightest-fit,tessera --admission
backfill,easy` and the easy flags given after `--`, and prints, per trace, the baseline (aligned
tightest-fit with backfill) p95 wait overall / of the jobs that need whole cubes (cube or larger),
each policy's easy p95 overall / cube-or-larger, moves and moved share, and whether both halves
of the goal are met (cube-or-larger p95 at least 2x lower, overall p95 no worse). A trace
without a job that needs whole cubes, or whose such jobs do not wait in the baseline (p95 0),
cannot test the goal: its row says so and is not counted.

  bench/easy_goals/run.py [--tessera BIN] [--load 0.75] [--all] [--trace FILE]...
                          [--shape-map MAP] [--json FILE] [-- EASY FLAGS...]

At the default --load 0.75 the ITP traces with cube jobs get the sizes of the table in
bench/README.md (cluster01 2, 02 3, 03 4, 04 12, 06 2 cubes).
"""
import argparse
import json
import math
import os
import subprocess
import sys

TRACES = "../shared/traces/microsoft-itp-elasticflow"
# The ITP traces with 64-GPU jobs (cube jobs under the default shape map), and, with --all,
# the rest (no job of 64 GPUs: under the default map easy equals backfill on them).
WITH_CUBE_JOBS = ["cluster01", "cluster02", "cluster03", "cluster04", "cluster06"]
WITHOUT = ["cluster05", "cluster07", "cluster08", "cluster09", "cluster10"]


def p95_h(row):
    return row["waitP95S"] / 3600


def hours(h):
    return f"{h:.3g} h" if h < 100 else f"{h:.0f} h"


def sim(binary, trace, cubes, policies, admission, extra):
    cmd = ["nice", "-n", "10", binary, "sim", "--trace", trace, "--blocks", "1",
           "--cubes-per-block", str(cubes), "--policies", policies, "--admission", admission,
           "-o", "json", "--no-progress"] + extra
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\nfailed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout)


def cubes_for(binary, trace, load, extra):
    """K = offered chip-hours / (load x 64 chips x submission span in hours), at least 2."""
    probe = sim(binary, trace, 2, "first-fit", "backfill", extra)
    span_h = probe["submitSpanS"] / 3600
    offered = probe["runs"][0]["allocatedChipHours"]
    if span_h <= 0:
        return 2
    return max(2, math.ceil(offered / (load * 64 * span_h)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", default="build/release/bin/tessera"
                    if os.path.exists("build/release/bin/tessera") else "build/dev/bin/tessera")
    ap.add_argument("--load", type=float, default=0.75,
                    help="offered load the cluster is sized for (0 < load <= 1)")
    ap.add_argument("--all", action="store_true", help="also the ITP traces without cube jobs")
    ap.add_argument("--trace", action="append", default=[],
                    help="a trace file (repeatable) instead of the given ITP traces")
    ap.add_argument("--shape-map", help="passed to tessera sim (accelerators:shape,...)")
    ap.add_argument("--json", help="write the raw results to FILE")
    ap.add_argument("flags", nargs="*", help="easy flags (after --)")
    a = ap.parse_args()
    if not 0 < a.load <= 1:
        ap.error(f"--load: {a.load} is not in (0, 1]; e.g. 0.75")
    traces = a.trace or [f"{TRACES}/{n}.csv" for n in WITH_CUBE_JOBS + (WITHOUT if a.all else [])]
    extra = ["--shape-map", a.shape_map] if a.shape_map else []
    raw = {}
    met = {"tightest-fit": 0, "tessera": 0}
    tested = 0
    print(f"tessera: {a.tessera}; load {a.load}; easy flags: {' '.join(a.flags) or '(defaults)'}")
    print("| trace (cubes) | backfill tf: p95 all / cube+ | easy tf | easy tessera | moves tf / "
          "tessera, max moved share |")
    print("|---|---|---|---|---|")
    for trace in traces:
        name = os.path.splitext(os.path.basename(trace))[0]
        k = cubes_for(a.tessera, trace, a.load, extra)
        d = sim(a.tessera, trace, k, "tightest-fit,tessera", "backfill,easy", extra + a.flags)
        raw[name] = d
        runs = {(r["policy"], r["admission"]): r for r in d["runs"]}
        base = runs[("tightest-fit", "backfill")]
        # Nothing to test: no job needs whole cubes, or none of them waits in the baseline.
        untested = ("no job needs whole cubes" if base["wholeCubes"]["jobs"] == 0 else
                    "0 h: no wait to lower" if base["wholeCubes"]["waitP95S"] == 0 else None)
        if untested:
            print(f"| {name} ({k}) | {hours(p95_h(base))} / ({untested}) | "
                  f"{hours(p95_h(runs[('tightest-fit', 'easy')]))} | "
                  f"{hours(p95_h(runs[('tessera', 'easy')]))} | (not counted) |")
            continue
        tested += 1
        cells = [f"{hours(p95_h(base))} / {hours(p95_h(base['wholeCubes']))}"]
        moves = []
        share = 0.0
        for pol in ("tightest-fit", "tessera"):
            e = runs[(pol, "easy")]
            ok = p95_h(e) <= p95_h(base) and 2 * p95_h(e["wholeCubes"]) <= p95_h(base["wholeCubes"])
            met[pol] += ok
            cell = f"{hours(p95_h(e))} / {hours(p95_h(e['wholeCubes']))}"
            cells.append(f"**{cell}**" if ok else cell)
            moves.append(str(e["moves"]))
            share = max(share, e["movedChipHours"] / (e["totalChips"] * e["makespanS"] / 3600))
        print(f"| {name} ({k}) | {' | '.join(cells)} | {' / '.join(moves)}, "
              f"{100 * share:.3f} % |")
    print(f"goal met (bold): tightest-fit {met['tightest-fit']}/{tested}, "
          f"tessera {met['tessera']}/{tested} traces that test it")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f)


if __name__ == "__main__":
    sys.exit(main())
