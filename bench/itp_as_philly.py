#!/usr/bin/env python3
"""An ITP cluster trace written as a Philly cluster_job_log, to check the Philly reader end to end.

Philly's own log (msr-fiddle/philly-traces) is not in ../shared/traces. This writes an ITP trace
in its schema (README of that repository): each job one attempt on machines of up to 8 GPUs,
submitted at a date plus its submission offset and started `--start-delay-s` later, run for
its duration; the list is written latest submission first (jobs submitted at the same second
kept in their order) so the reader's sort is exercised. `tessera sim`
must then give the same figures on the log as on the CSV (bench/README.md, "Philly").

The reader times a log from its first submission; `--shifted-csv FILE` also writes the ITP trace
with its submissions counted from its first, the CSV whose event hashes the log must give
(bench/philly_reader.sh compares them).

Usage: bench/itp_as_philly.py ITP_CSV OUT_JSON [--shifted-csv FILE]
         [--base 2017-10-01T00:00:00] [--start-delay-s 60]
"""
import argparse
import csv
import datetime
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("itp_csv")
    ap.add_argument("out_json")
    ap.add_argument("--base", default="2017-10-01T00:00:00",
                    help="the date of submission offset 0 (ISO 8601)")
    ap.add_argument("--start-delay-s", type=int, default=60,
                    help="seconds from submission to the attempt's start")
    ap.add_argument("--shifted-csv", help="also write the trace counted from its first submission")
    args = ap.parse_args()
    base = datetime.datetime.fromisoformat(args.base)

    def at(seconds):
        return (base + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")

    with open(args.itp_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if args.shifted_csv:
        first = min(int(r["submission_time"]) for r in rows) if rows else 0
        with open(args.shifted_csv, "w", newline="") as f:
            out = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["job_id"])
            out.writeheader()
            for r in rows:
                out.writerow(dict(r, submission_time=int(r["submission_time"]) - first))
    jobs = []
    for row in rows:
        gpus = int(row["num_gpu"])
        submit, duration = int(row["submission_time"]), int(row["duration"])
        machines = [8] * (gpus // 8) + ([gpus % 8] if gpus % 8 else [])
        start = submit + args.start_delay_s
        jobs.append({
            "status": "Pass",
            "vc": "itp",
            "jobid": row["job_id"],
            "attempts": [{
                "start_time": at(start),
                "end_time": at(start + duration),
                "detail": [{"ip": "m%d" % i, "gpus": ["gpu%d" % g for g in range(n)]}
                           for i, n in enumerate(machines)],
            }],
            "submitted_time": at(submit),
            "user": "itp",
        })
    # Latest second first; the jobs of one second in the trace's order.
    seconds = {}
    for j in jobs:
        seconds.setdefault(j["submitted_time"], []).append(j)
    jobs = [j for t in sorted(seconds, reverse=True) for j in seconds[t]]
    with open(args.out_json, "w") as f:
        json.dump(jobs, f, indent=1)
    print("%s: %d jobs" % (args.out_json, len(jobs)))


if __name__ == "__main__":
    main()
