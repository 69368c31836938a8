#!/usr/bin/env python3
"""Mixed GPU traces for `tessera sim --gpu`: traces no setting was chosen on.

Each trace takes one ITP cluster's submission times (its real bursts) and gives every
submission a job (GPUs, run time) drawn, with a fixed seed, from another cluster. The fleet is
sized as bench/README.md ("GPU domains") sizes the ITP runs: h100 hosts = max(ceil(mean GPUs in
use / 0.85 / 8), largest job / 8), gb200-nvl72 domains = ceil(hosts * 8 / 72).

Sets: `ab` (16 traces, sets A and B) was the check no setting was chosen on until the
restarted-job exemption (`--preempt-exempt-h`) was chosen on it with the ITP runs; `c` (12
traces, other pairs and seeds) was drawn after that, and no setting has been chosen on it.

Usage: bench/gpu_mixed_traces.py OUT_DIR [--traces DIR] [--set ab|c]
Writes OUT_DIR/mixAA_BB.csv for each pair and prints one line per trace:
  FILE HOSTS DOMAINS
"""
import argparse
import csv
import math
import os
import random
import sys

# (arrivals of, jobs from, seed). Set A, then set B.
PAIRS = [
    ("01", "03", 1), ("02", "06", 2), ("03", "07", 3), ("06", "02", 4),
    ("07", "04", 5), ("04", "01", 6), ("08", "03", 7), ("05", "06", 8),
    ("02", "03", 11), ("03", "02", 12), ("04", "06", 13), ("06", "07", 14),
    ("07", "01", 15), ("01", "04", 16), ("08", "06", 17), ("05", "03", 18),
]
PAIRS_C = [
    ("01", "06", 21), ("02", "07", 22), ("03", "04", 23), ("04", "02", 24),
    ("06", "03", 25), ("07", "06", 26), ("08", "01", 27), ("05", "07", 28),
    ("01", "02", 31), ("03", "06", 32), ("07", "08", 33), ("06", "04", 34),
]
FIELDS = ("submission_time", "duration", "num_gpu")


def read(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"gpu_mixed_traces: cannot read {path}: {e.strerror} (--traces: the "
                 "microsoft-itp-elasticflow directory)")
    missing = [c for c in FIELDS if rows and c not in rows[0]]
    if not rows or missing:
        sys.exit(f"gpu_mixed_traces: {path}: no rows or no column {', '.join(missing)} "
                 "(an ITP trace has submission_time,duration,num_gpu)")
    return rows


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--traces", default=os.path.join(
        here, "..", "..", "shared", "traces", "microsoft-itp-elasticflow"))
    p.add_argument("--set", choices=("ab", "c"), default="ab",
                   help="ab: sets A and B (16 traces); c: set C (12), drawn later")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    for arrivals, jobs, seed in PAIRS if a.set == "ab" else PAIRS_C:
        ra = read(os.path.join(a.traces, f"cluster{arrivals}.csv"))
        rb = read(os.path.join(a.traces, f"cluster{jobs}.csv"))
        rng = random.Random(seed)
        rows = []
        for x in ra:
            y = rng.choice(rb)
            rows.append((int(x["submission_time"]), int(y["duration"]), int(y["num_gpu"])))
        rows.sort()
        out = os.path.join(a.out_dir, f"mix{arrivals}_{jobs}.csv")
        with open(out, "w") as f:
            f.write("job_id,submission_time,duration,num_gpu\n")
            for i, (s, d, g) in enumerate(rows):
                f.write(f"m{i},{s},{d},{g}\n")
        t0 = rows[0][0]
        t1 = max(s + d for s, d, _ in rows)
        mean = sum(g * d for _, d, g in rows) / max(1, t1 - t0)
        hosts = max(math.ceil(mean / 0.85 / 8), math.ceil(max(g for _, _, g in rows) / 8))
        print(out, hosts, math.ceil(hosts * 8 / 72))


if __name__ == "__main__":
    main()
