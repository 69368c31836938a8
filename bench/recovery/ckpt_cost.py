#!/usr/bin/python3
"""Checkpoint costs on this machine, for the pod-scale recovery simulation (tessera sim-recovery).

Measures, for a training state of --mb MiB of float32 tensors (a model and Adam's two moments):
- disk save: tessera.checkpoint.save_torch (serialize, write, fsync, rename, fsync the directory);
- disk load: tessera.checkpoint.load_torch (read, CRC check, deserialize);
- host-memory snapshot: copying every tensor into a preallocated host buffer (what an in-memory
  checkpoint does before it replicates the copy in the background).
Prints the median of --runs runs of each and the rate in GB/s (10^9 bytes) as one JSON line.
The page cache is not dropped between save and load (no root): the load figure is a warm read.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

import torch  # noqa: E402

from tessera import checkpoint  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mb", type=int, default=512, help="state size in MiB (default 512)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    a = p.parse_args()
    if a.mb < 1 or a.runs < 1:
        p.error("--mb and --runs must be at least 1")
    n = a.mb * 1024 * 1024 // 4 // 3
    state = {"model": torch.randn(n), "exp_avg": torch.randn(n), "exp_avg_sq": torch.rand(n)}
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    saves, loads, copies = [], [], []
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        for step in range(a.runs):
            saved = checkpoint.save_torch(d, step, state, keep_last=1)
            saves.append(saved.seconds)
            t0 = time.monotonic()
            checkpoint.load_torch(saved.path)
            loads.append(time.monotonic() - t0)
    buffers = {k: torch.empty_like(v) for k, v in state.items()}
    for _ in range(a.runs):
        t0 = time.monotonic()
        for k, v in state.items():
            buffers[k].copy_(v)
        copies.append(time.monotonic() - t0)
    med = {k: statistics.median(v) for k, v in
           (("save_s", saves), ("load_s", loads), ("snapshot_s", copies))}
    out = {"bytes": nbytes, "runs": a.runs, **med,
           "save_gbps": nbytes / med["save_s"] / 1e9, "load_gbps": nbytes / med["load_s"] / 1e9,
           "snapshot_gbps": nbytes / med["snapshot_s"] / 1e9,
           "raw": {"save_s": saves, "load_s": loads, "snapshot_s": copies},
           "loadavg": os.getloadavg()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
