#!/usr/bin/python3
"""Seeded variants of an Azure LLM inference trace, to check an autoscaler beyond one trace.

Writes files of the same format (TIMESTAMP,ContextTokens,GeneratedTokens) into OUT_DIR:

  diurnal.csv         2 h, arrivals a Poisson process whose rate swings 0.25x..1.75x of the
                      source's mean over one 2 h cycle; lengths drawn from the source's rows
  diurnal-shift.csv   the same cycle shifted by half a period (starts at the peak)
  bursty-code.csv     1 h in the shape of the study's code trace: prompts 2x longer, outputs
                      1/8 (>= 1); arrivals switch between a low rate (0.4x) and bursts (3x) of
                      1-5 minutes (a Markov-modulated Poisson process)
  steps.csv           90 min of plateaus at 0.5x, 1.5x, 0.75x, 2x, 0.5x the source's mean rate
  shuffled.csv        the source's arrival gaps and lengths in a random order: same mix, the
                      time structure destroyed

Every variant is a function of the source file and --seed. Standard library only.

  bench/serving/trace_variants.py --source ../shared/traces/azure-llm-inference-2023/conv.csv \
      --out variants --seed 1
"""

import argparse
import csv
import datetime
import math
import os
import random
import sys


def read(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append((parse_time(r["TIMESTAMP"]), int(r["ContextTokens"]), int(r["GeneratedTokens"])))
    if not rows:
        sys.exit(f"{path}: no rows")
    return rows


def parse_time(s):
    day, _, frac = s.partition(".")
    t = datetime.datetime.strptime(day, "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


def write(path, start, arrivals):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for t, ctx, gen in arrivals:
            stamp = datetime.datetime.fromtimestamp(start + t, datetime.timezone.utc)
            w.writerow([stamp.strftime("%Y-%m-%d %H:%M:%S.%f"), ctx, gen])


def poisson(rng, rate_at, duration_s, peak_rate, lengths):
    """Thinning: a Poisson process of rate rate_at(t) <= peak_rate over [0, duration_s)."""
    out, t = [], 0.0
    while True:
        t += rng.expovariate(peak_rate)
        if t >= duration_s:
            return out
        if rng.random() * peak_rate <= rate_at(t):
            ctx, gen = lengths(rng)
            out.append((t, ctx, gen))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", default="../shared/traces/azure-llm-inference-2023/conv.csv")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rows = read(a.source)
    start = rows[0][0]
    span = max(rows[-1][0] - start, 1.0)
    mean = len(rows) / span
    os.makedirs(a.out, exist_ok=True)

    def drawn(rng):
        _, ctx, gen = rows[rng.randrange(len(rows))]
        return ctx, gen

    def code_like(rng):
        _, ctx, gen = rows[rng.randrange(len(rows))]
        return ctx * 2, max(1, gen // 8)

    rng = random.Random(a.seed)
    period = 7200.0
    for name, phase in (("diurnal.csv", 0.0), ("diurnal-shift.csv", math.pi)):
        rate = lambda t, ph=phase: mean * (1 + 0.75 * math.sin(2 * math.pi * t / period + ph - math.pi / 2))
        write(os.path.join(a.out, name), start, poisson(rng, rate, period, mean * 1.75, drawn))

    # Bursts: exponential sojourns, 4 min mean low, 2.5 min mean (1-5) high.
    switches, t, high = [], 0.0, False
    while t < 3600:
        switches.append((t, high))
        t += rng.uniform(60, 300) if high else rng.expovariate(1 / 240)
        high = not high

    def bursty(t):
        level = False
        for at, h in switches:
            if at > t:
                break
            level = h
        return mean / 2 * (3.0 if level else 0.4)  # prompts cost 2x: half the rate

    write(os.path.join(a.out, "bursty-code.csv"), start, poisson(rng, bursty, 3600, mean / 2 * 3, code_like))

    plateaus = [0.5, 1.5, 0.75, 2.0, 0.5]
    step_rate = lambda t: mean * plateaus[min(int(t // 1080), len(plateaus) - 1)]
    write(os.path.join(a.out, "steps.csv"), start, poisson(rng, step_rate, 5400, mean * 2, drawn))

    gaps = [rows[i + 1][0] - rows[i][0] for i in range(len(rows) - 1)]
    rng.shuffle(gaps)
    lengths = [(r[1], r[2]) for r in rows]
    rng.shuffle(lengths)
    t, shuffled = 0.0, []
    for i, (ctx, gen) in enumerate(lengths):
        shuffled.append((t, ctx, gen))
        if i < len(gaps):
            t += gaps[i]
    write(os.path.join(a.out, "shuffled.csv"), start, shuffled)


if __name__ == "__main__":
    main()
