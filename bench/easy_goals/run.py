#!/usr/bin/env python3
"""Issue 16's scheduling goals on every given trace with ONE set of easy flags.

For each ITP trace with cube-size jobs (and, with --all, the rest), runs one
`tessera sim` process with `--policies tightest-fit,tessera --admission backfill,easy` and
the easy flags given after `--`, and prints, per trace, the baseline (aligned tightest-fit with
backfill) p95 overall / cube, each policy's easy p95 overall / cube, moves and moved share,
and whether both halves of the goal are met (cube p95 at least 2x lower, overall p95 no worse).

  bench/easy_goals/run.py [--tessera build/dev/bin/tessera] [--all] [-- EASY FLAGS...]

The cluster shape is bench/README.md's one rule (cubes per block K from the offered load).
"""
import argparse
import json
import subprocess
import sys

TRACES = "../shared/traces/microsoft-itp-elasticflow"
# K = offered chip-time / (0.75 x 64 x span), rounded up, at least 2 (bench/README.md).
CUBES = {"cluster01": 2, "cluster02": 3, "cluster03": 4, "cluster04": 12, "cluster06": 2}
# No job of 64 GPUs: easy equals backfill at any size (--all checks it). 05 and 07 by the rule;
# 08-10 at 2 cubes, not from the rule.
NO_CUBE_JOBS = {"cluster05": 8, "cluster07": 8, "cluster08": 2, "cluster09": 2, "cluster10": 2}


def p95(run, size=None):
    if size is None:
        return run["waitP95S"] / 3600
    for row in run["bySize"]:
        if row["class"] == size:
            return row["waitP95S"] / 3600
    return float("nan")


def hours(h):
    return f"{h:.3g} h" if h < 100 else f"{h:.0f} h"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", default="build/dev/bin/tessera")
    ap.add_argument("--all", action="store_true", help="also the traces without cube jobs")
    ap.add_argument("--json", help="write the raw results to FILE")
    ap.add_argument("flags", nargs="*", help="easy flags (after --)")
    a = ap.parse_args()
    traces = dict(CUBES)
    if a.all:
        traces.update(NO_CUBE_JOBS)
    raw = {}
    met = {"tightest-fit": 0, "tessera": 0}
    print(f"easy flags: {' '.join(a.flags) or '(defaults)'}")
    print("| trace (cubes) | backfill tf: p95 all / cube | easy tf | easy tessera | moves tf / "
          "tessera, max moved share |")
    print("|---|---|---|---|---|")
    for name, k in traces.items():
        cmd = ["nice", "-n", "10", a.tessera, "sim", "--trace", f"{TRACES}/{name}.csv",
               "--blocks", "1", "--cubes-per-block", str(k), "--policies", "tightest-fit,tessera",
               "--admission", "backfill,easy", "-o", "json", "--no-progress"] + a.flags
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        d = json.loads(out)
        raw[name] = d
        runs = {(r["policy"], r["admission"]): r for r in d["runs"]}
        base = runs[("tightest-fit", "backfill")]
        cells = [f"{hours(p95(base))} / {hours(p95(base, 'cube'))}"]
        moves = []
        share = 0.0
        for pol in ("tightest-fit", "tessera"):
            e = runs[(pol, "easy")]
            ok = p95(e) <= p95(base) and p95(e, "cube") * 2 <= p95(base, "cube")
            met[pol] += ok
            cell = f"{hours(p95(e))} / {hours(p95(e, 'cube'))}"
            cells.append(f"**{cell}**" if ok else cell)
            moves.append(str(e["moves"]))
            share = max(share, e["movedChipHours"] / (e["totalChips"] * e["makespanS"] / 3600))
        print(f"| {name} ({k}) | {' | '.join(cells)} | {' / '.join(moves)}, "
              f"{100 * share:.3f} % |")
    print(f"goal met (bold): tightest-fit {met['tightest-fit']}/{len(CUBES)}, "
          f"tessera {met['tessera']}/{len(CUBES)} traces with cube jobs")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f)


if __name__ == "__main__":
    sys.exit(main())
