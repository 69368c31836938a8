"""Batches per second of tessera.data with a background Prefetch against a plain loop over the
same data, side by side in one process.

    /usr/bin/python3 bench/data/run.py                 # defaults below, about 30 s
    /usr/bin/python3 bench/data/run.py --compute-ms 2 --rounds 7 --json out.json

Each batch is one rank's ArrayBatch of --batch-size rows of --features float32 values, then a
per-sample augmentation in Python (a random crop offset and flip per row, then normalisation:
the kind of work a decode/augment step does on the host), then a simulated training step of
--compute-ms that sleeps (the host waits on the accelerator, so the GIL is free, as it is
while a real step runs on the TPU). The plain loop does load and step one after the other; with
prefetch the next batch is loaded while the step of this one runs. Rounds alternate which loop
goes first, so drift on a shared machine falls on both; the report gives the median batches/s
of each, the median of the per-round ratios, and the ratio that perfect overlap would give
from the measured load and step times (load + step) / max(load, step).
"""
import argparse
import json
import os
import statistics
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
import numpy as np  # noqa: E402  (Debian: python3-numpy)

from tessera import data  # noqa: E402


def augment(batch, rng, crop):
    """Per-row work in Python, as a decode/augment step: a crop window and a flip per row."""
    x = batch.data
    width = x.shape[1] - crop
    out = np.empty((x.shape[0], width), dtype=np.float32)
    for i in range(x.shape[0]):
        start = int(rng.integers(0, crop + 1))
        row = x[i, start:start + width]
        out[i] = row[::-1] if rng.random() < 0.5 else row
    out -= out.mean(axis=1, keepdims=True)
    out /= out.std(axis=1, keepdims=True) + 1e-6
    return out


def batches(arrays, args, seed):
    """The loaded and augmented batches of one pass (a generator: Prefetch runs it ahead)."""
    rng = np.random.default_rng(seed)
    source = data.ArrayBatches(arrays, batch_size=args.batch_size, rank=0,
                               world_size=args.world_size, seed=seed, last_batch="pad")
    for _ in range(args.batches):
        yield augment(next(source), rng, args.crop)


def step(batch, compute_s):
    time.sleep(compute_s)  # the accelerator's step; the host thread waits
    return float(batch[0, 0])


def run_plain(arrays, args, seed):
    started = time.perf_counter()
    for b in batches(arrays, args, seed):
        step(b, args.compute_ms / 1000)
    return args.batches / (time.perf_counter() - started)


def run_prefetch(arrays, args, seed):
    started = time.perf_counter()
    with data.Prefetch(batches(arrays, args, seed), depth=args.depth) as p:
        for b in p:
            step(b, args.compute_ms / 1000)
    return args.batches / (time.perf_counter() - started)


def time_load(arrays, args, seed):
    """Seconds per batch of loading and augmenting alone (no step)."""
    started = time.perf_counter()
    n = 0
    for _ in batches(arrays, args, seed):
        n += 1
    return (time.perf_counter() - started) / n


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=16384)
    p.add_argument("--features", type=int, default=1024)
    p.add_argument("--crop", type=int, default=32, help="crop offsets drawn in [0, crop]")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--world-size", type=int, default=4, help="this process is rank 0 of it")
    p.add_argument("--batches", type=int, default=150, help="batches per loop per round")
    p.add_argument("--compute-ms", type=float, default=5.0)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()

    arrays = np.random.default_rng(args.seed).standard_normal(
        (args.samples, args.features), dtype=np.float32)
    run_plain(arrays, args, args.seed)  # warm up both paths (page faults, imports)
    run_prefetch(arrays, args, args.seed)
    plain, prefetch, load = [], [], []
    for r in range(args.rounds):
        seed = args.seed + r
        load.append(time_load(arrays, args, seed))
        order = (("plain", run_plain), ("prefetch", run_prefetch))
        for name, fn in order if r % 2 == 0 else order[::-1]:
            (plain if name == "plain" else prefetch).append(fn(arrays, args, seed))
    ratios = [b / a for a, b in zip(plain, prefetch)]
    load_ms = statistics.median(load) * 1000
    ideal = (load_ms + args.compute_ms) / max(load_ms, args.compute_ms)
    result = {
        "config": vars(args),
        "load_ms_per_batch_median": round(load_ms, 3),
        "plain_batches_per_s": [round(x, 1) for x in plain],
        "prefetch_batches_per_s": [round(x, 1) for x in prefetch],
        "plain_median": round(statistics.median(plain), 1),
        "prefetch_median": round(statistics.median(prefetch), 1),
        "ratio_of_medians": round(statistics.median(prefetch) / statistics.median(plain), 3),
        "median_round_ratio": round(statistics.median(ratios), 3),
        "ideal_overlap_ratio": round(ideal, 3),
        "loadavg": os.getloadavg(),
    }
    print("load+augment %.2f ms/batch, step %.2f ms, %d rounds of %d batches, depth %d" % (
        load_ms, args.compute_ms, args.rounds, args.batches, args.depth))
    print("%-9s %s   median %.1f batches/s" % ("plain", result["plain_batches_per_s"],
                                                result["plain_median"]))
    print("%-9s %s   median %.1f batches/s" % ("prefetch", result["prefetch_batches_per_s"],
                                                result["prefetch_median"]))
    print("prefetch / plain: median of rounds %.2fx, of medians %.2fx (perfect overlap %.2fx); "
          "load average %.2f %.2f %.2f" % (result["median_round_ratio"],
                                           result["ratio_of_medians"], ideal,
                                           *result["loadavg"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
