#!/usr/bin/env python3
"""Can any scheduler meet issue 36's goal on a trace? A necessary condition, checked.

The goal on a run: the domain class's p95 wait at most 0.5x slurm-block's, the overall p95 wait
no worse than slurm-block's. With p95 by nearest rank (as `tessera sim`), that is: at most
n - ceil(0.95 n) jobs wait longer than slurm-block's overall p95, and at most as many of the
domain class's (by its own count) wait longer than half its p95. A job that waits at most W
ends by its deadline r + p + W (submission, run time, wait; a wait counts the time a preempted
job spends requeued).

This checks the least constrained schedule there is against those deadlines: clairvoyant (every run time
known), preemptive at no cost, the fleet's GPUs one pool (no hosts, domains or gangs: a job of g
GPUs runs at rate 1 on any g of them, or not at all). Energetic reasoning: in any interval
[a, b], a job must run at least p - max(0, a - r) - max(0, d - b) of it (when positive); those
GPU-seconds of every job that keeps its deadline must fit in GPUs x (b - a). A job that misses
it is one of the few the goal lets wait longer, so the interval needs at least as many such jobs
as it takes, largest first, to bring what must run there under capacity. When some interval
needs more than the goal allows, no scheduler meets the goal on that run; when none does, the
goal is not ruled out (this schedule is far easier than a real one).

Intervals: both ends among the submission times and deadlines, thinned to --points each (a
subset gives a weaker, still valid, check). ITP csv traces (job_id,submission_time,duration,
num_gpu), the format of the named traces and of bench/gpu_mixed_traces.py.

Usage: bench/gpu_goal_bound.py TRACE --gpus G --domain-gpus LO-HI --domain-p95-h D --all-p95-h A
  e.g. (gb200-nvl72, 1 rack; slurm-block's p95s from `tessera sim ... -o json`):
  bench/gpu_goal_bound.py ../shared/traces/microsoft-itp-elasticflow/cluster01.csv \\
      --gpus 72 --domain-gpus 37-72 --domain-p95-h 49.995 --all-p95-h 34.387
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


def late_jobs_needed(jobs, domain, gpus, w_dom_s, w_all_s, points):
    """The most jobs any interval needs to be late: (count, (a, b)); (0, None) when none."""
    deadline = [r + p + (w_dom_s if dom else w_all_s) for (r, p, _), dom in zip(jobs, domain)]
    starts = thin([r for r, _, _ in jobs], points)
    ends = thin(deadline, points)
    worst = (0, None)
    for a in starts:
        for b in ends:
            if b <= a:
                continue
            need = []
            for (r, p, g), d in zip(jobs, deadline):
                if d <= a or r >= b:
                    continue
                m = p - max(0, a - r) - max(0, d - b)
                if m > 0:
                    need.append(m * g)
            excess = sum(need) - gpus * (b - a)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--gpus", type=int, required=True, help="the fleet's GPUs")
    ap.add_argument("--domain-gpus", type=span, required=True,
                    help="the domain class's sizes, LO-HI GPUs (h100: 5-8, gb200-nvl72: 37-72)")
    ap.add_argument("--domain-p95-h", type=float, required=True,
                    help="slurm-block's domain-class p95 wait, hours")
    ap.add_argument("--all-p95-h", type=float, required=True,
                    help="slurm-block's overall p95 wait, hours")
    ap.add_argument("--points", type=int, default=150,
                    help="interval ends of each kind, at most (default 150)")
    args = ap.parse_args()
    if args.gpus < 1 or args.points < 2:
        sys.exit("--gpus: at least 1; --points: at least 2")

    jobs = read_itp(args.trace)
    if not jobs:
        sys.exit(f"{args.trace}: no jobs; want an ITP csv with a row per job")
    lo, hi = args.domain_gpus
    domain = [lo <= g <= hi for _, _, g in jobs]
    n, nd = len(jobs), sum(domain)
    allowed = (n - math.ceil(0.95 * n)) + (nd - math.ceil(0.95 * nd))
    w_dom = min(0.5 * args.domain_p95_h, args.all_p95_h)
    worst = late_jobs_needed(jobs, domain, args.gpus, w_dom * 3600, args.all_p95_h * 3600,
                             args.points)
    t0 = min(r for r, _, _ in jobs)
    print(f"{args.trace}: {n} jobs, {nd} of the domain class; the goal lets {allowed} wait "
          f"longer (overall p95 {args.all_p95_h:.2f} h, domain {w_dom:.2f} h)")
    if worst[1] is None:
        print("every interval fits with no job late: the goal is not ruled out")
        return
    a, b = worst[1]
    verdict = "no scheduler meets the goal" if worst[0] > allowed else "the goal is not ruled out"
    print(f"most late jobs an interval needs: {worst[0]} ({(a - t0) / 3600:.1f} h to "
          f"{(b - t0) / 3600:.1f} h from the first submission): {verdict}")


if __name__ == "__main__":
    main()
