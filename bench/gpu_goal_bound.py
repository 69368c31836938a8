#!/usr/bin/env python3
"""Can any scheduler meet issue 36's goal on a trace? Two necessary conditions, checked.

The goal on a run: the domain class's p95 wait at most 0.5x slurm-block's, the overall p95 wait
no worse than slurm-block's. With p95 by nearest rank (as `tessera sim`), that is: at most
n - ceil(0.95 n) jobs wait longer than slurm-block's overall p95, and at most nd - ceil(0.95 nd)
of the nd domain-class jobs longer than half its p95. A job that waits at most W ends by its
deadline r + p + W (submission, run time, wait; a wait counts the time a preempted job spends
requeued).

Both checks hold these deadlines against the least constrained schedule there is: clairvoyant
(every run time known) and preemptive at no cost. Energetic reasoning: in any interval [a, b] a
job must run at least p - max(0, a - r) - max(0, d - b) of it (when positive). When what the
jobs that keep their deadlines must run there exceeds the capacity, some jobs are late: at least
as many as it takes, largest first, to fit. An interval that needs more late jobs than the goal
allows rules the goal out for every scheduler; when none does, the goal is not ruled out (a real
schedule is far more constrained).

- The GPU pool: every job, its GPUs x time against the fleet's GPUs x (b - a), no hosts,
  domains or gangs; late jobs allowed: both counts above together.
- The domain class alone: a domain-class job runs in one domain (the one clique its rule
  requires) and takes more than half of it (h100: a host; gb200-nvl72: a rack), so a domain runs
  at most one at a time; its time against domains x (b - a); late jobs allowed: the class's
  count only (a job that waits longer than half its p95 is late here whatever else it does).

Intervals: both ends among the submission times and deadlines, thinned to --points each (a
subset gives a weaker, still valid, check). ITP csv traces (job_id,submission_time,duration,
num_gpu), the format of the named traces and of bench/gpu_mixed_traces.py.

Usage: bench/gpu_goal_bound.py TRACE --gpus G --domains D --domain-gpus LO-HI
                               --domain-p95-h P --all-p95-h A
  e.g. (gb200-nvl72, 1 rack; slurm-block's p95s from `tessera sim ... -o json`):
  bench/gpu_goal_bound.py ../shared/traces/microsoft-itp-elasticflow/cluster01.csv \\
      --gpus 72 --domains 1 --domain-gpus 37-72 --domain-p95-h 49.995 --all-p95-h 34.387
"""
import argparse
import csv
import math
import sys


def read_itp(path):
    jobs = []
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            try:
                jobs.append((int(row["submission_time"]), max(1, int(row["duration"])),
                             max(1, int(row["num_gpu"]))))
            except (KeyError, TypeError, ValueError):
                sys.exit(f"{path}:{i}: want job_id,submission_time,duration,num_gpu with whole "
                         "numbers")
    return jobs


def thin(values, k):
    values = sorted(set(values))
    if len(values) <= k:
        return values
    return sorted({values[i * (len(values) - 1) // (k - 1)] for i in range(k)})


def span(text):
    lo, sep, hi = text.partition("-")
    if not sep or not lo.isdigit() or not hi.isdigit() or int(lo) > int(hi):
        raise argparse.ArgumentTypeError(f"{text!r}: want LO-HI GPUs, e.g. 37-72")
    return int(lo), int(hi)


def late_jobs_needed(jobs, deadlines, capacity, points):
    """The most late jobs any interval needs: (count, (a, b)), or (0, None) when none.

    jobs: (submission, run time, width) each, width units of `capacity` while it runs;
    deadlines: when each must end to be on time."""
    starts = thin([r for r, _, _ in jobs], points)
    ends = thin(deadlines, points)
    worst = (0, None)
    for a in starts:
        for b in ends:
            if b <= a:
                continue
            need = []
            for (r, p, width), d in zip(jobs, deadlines):
                if d <= a or r >= b:
                    continue
                m = p - max(0, a - r) - max(0, d - b)
                if m > 0:
                    need.append(m * width)
            excess = sum(need) - capacity * (b - a)
            if excess <= 0:
                continue
            need.sort(reverse=True)
            late = 0
            while excess > 0:
                excess -= need[late]
                late += 1
            if late > worst[0]:
                worst = (late, (a, b))
    return worst


def goal_checks(jobs, domain, gpus, domains, w_dom_s, w_all_s, points):
    """[(name, late jobs needed, (a, b) or None, late jobs allowed)] for the two checks."""
    n, nd = len(jobs), sum(domain)
    late_all, late_dom = n - math.ceil(0.95 * n), nd - math.ceil(0.95 * nd)
    deadlines = [r + p + (w_dom_s if dom else w_all_s) for (r, p, _), dom in zip(jobs, domain)]
    pool = late_jobs_needed(jobs, deadlines, gpus, points)
    checks = [("the GPU pool", *pool, late_all + late_dom)]
    if nd:
        alone = [((r, p, 1), d) for (r, p, _), d, dom in zip(jobs, deadlines, domain) if dom]
        cls = late_jobs_needed([j for j, _ in alone], [d for _, d in alone], domains, points)
        checks.append(("the domain class alone", *cls, late_dom))
    return checks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--gpus", type=int, required=True, help="the fleet's GPUs")
    ap.add_argument("--domains", type=int, required=True,
                    help="its NVLink domains (h100: hosts; gb200-nvl72: racks)")
    ap.add_argument("--domain-gpus", type=span, required=True,
                    help="the domain class's sizes, LO-HI GPUs (h100: 5-8, gb200-nvl72: 37-72)")
    ap.add_argument("--domain-p95-h", type=float, required=True,
                    help="slurm-block's domain-class p95 wait, hours")
    ap.add_argument("--all-p95-h", type=float, required=True,
                    help="slurm-block's overall p95 wait, hours")
    ap.add_argument("--points", type=int, default=150,
                    help="interval ends of each kind, at most (default 150)")
    args = ap.parse_args()
    if args.gpus < 1 or args.domains < 1 or args.points < 2:
        sys.exit("--gpus and --domains: at least 1; --points: at least 2")

    jobs = read_itp(args.trace)
    if not jobs:
        sys.exit(f"{args.trace}: no jobs; want an ITP csv with a row per job")
    lo, hi = args.domain_gpus
    domain = [lo <= g <= hi for _, _, g in jobs]
    w_dom = min(0.5 * args.domain_p95_h, args.all_p95_h)
    checks = goal_checks(jobs, domain, args.gpus, args.domains, w_dom * 3600,
                         args.all_p95_h * 3600, args.points)
    t0 = min(r for r, _, _ in jobs)
    print(f"{args.trace}: {len(jobs)} jobs, {sum(domain)} of the domain class (overall p95 "
          f"{args.all_p95_h:.2f} h, domain {w_dom:.2f} h)")
    ruled_out = False
    for name, late, interval, allowed in checks:
        where = ""
        if interval:
            where = (f" ({(interval[0] - t0) / 3600:.1f} h to {(interval[1] - t0) / 3600:.1f} h "
                     "from the first submission)")
        jobs_text = "1 job" if late == 1 else f"{late} jobs"
        print(f"{name}: {jobs_text} late at least{where}; the goal allows {allowed}")
        ruled_out = ruled_out or late > allowed
    print("no scheduler meets the goal" if ruled_out else "the goal is not ruled out")


if __name__ == "__main__":
    main()
