#!/usr/bin/env python3
"""A status flush's commit on a full change log, on a fresh local 3-member etcd, for one or more
builds of tessera_flush_commit_bench run alternately (bench/README.md, "etcd at 1,000 running
jobs"). Each run uses its own key prefix in the same etcd cluster.

  bench/control_plane/flush_commit.py --etcd etcd --bench NEW [--baseline OLD] [--repeat 3] \\
      [--doc-bytes 4096] [--jobs 1000] [--batch 100] [--commits 60]

Prints one JSON object per run (the bench's, with "bench" and "repeat" added) and a summary:
the median of each build's commit p50 and p90 over the repeats, and how its standby caught up
with the timed commits (the median time of the runs where it did, and how many did).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (start_etcd, cleanup: the same etcd cluster as the control-plane runs)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--etcd", default="etcd", help="the etcd binary (default: etcd on PATH)")
    p.add_argument("--bench", required=True, help="tessera_flush_commit_bench to measure")
    p.add_argument("--baseline", help="another build of it, run before --bench each repeat")
    p.add_argument("--repeat", type=int, default=3)
    for flag, default in (("--doc-bytes", 4096), ("--jobs", 1000), ("--batch", 100),
                          ("--commits", 60)):
        p.add_argument(flag, type=int, default=default)
    a = p.parse_args()
    if a.repeat < 1:
        sys.exit("flush_commit.py: --repeat must be at least 1")
    for b in filter(None, (a.bench, a.baseline)):
        if not os.access(b, os.X_OK):
            sys.exit(f"flush_commit.py: {b} is not executable (build tessera_flush_commit_bench "
                     "with the release preset)")
    signal.signal(signal.SIGINT, run.on_signal)
    signal.signal(signal.SIGTERM, run.on_signal)
    d = tempfile.mkdtemp(prefix="tessera-flush-bench-")
    run.current["dir"] = d
    try:
        clients = run.start_etcd(a.etcd, d)
        store = "etcd://" + ",".join(f"127.0.0.1:{c}" for c in clients)
        results = {}
        for r in range(a.repeat):
            for name, binary in (("baseline", a.baseline), ("this", a.bench)):
                if not binary:
                    continue
                out = subprocess.run(
                    [binary, "--store", store, "--doc-bytes", str(a.doc_bytes), "--jobs",
                     str(a.jobs), "--batch", str(a.batch), "--commits", str(a.commits)],
                    capture_output=True, text=True, timeout=1800)
                if out.returncode != 0:
                    sys.exit(f"flush_commit.py: {binary} failed: {out.stderr.strip()}")
                res = dict(json.loads(out.stdout), bench=name, repeat=r,
                           load=round(os.getloadavg()[0], 2))
                print(json.dumps(res), flush=True)
                results.setdefault(name, []).append(res)
        for name, rs in results.items():
            print(f"{name}: commit p50 median {statistics.median(x['commitMsP50'] for x in rs):.1f}"
                  f" ms, p90 median {statistics.median(x['commitMsP90'] for x in rs):.1f} ms "
                  f"over {len(rs)} runs")
            caught = [x["standbyFollowMs"] for x in rs if x.get("standbyFollowed", -1) >= 0]
            if "standbyFollowMs" in rs[0]:
                print(f"{name}: the standby caught up in {len(caught)} of {len(rs)} runs"
                      + (f", median {statistics.median(caught):.0f} ms" if caught else "")
                      + "".join(f"; {x['standbyFollowError']}" for x in rs[:1]
                                if x.get("standbyFollowed", -1) < 0))
    finally:
        run.cleanup()


if __name__ == "__main__":
    main()
