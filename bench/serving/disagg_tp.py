#!/usr/bin/env python3
"""The KV handoff between tensor-parallel groups against local prefill: time to the first token.

For each group size N (default 1, 2 and 4) it starts a prefill group and a decode group of N
processes each (examples/serve, loopback, gloo) and sends, one at a time, the same prompt with
max_tokens 1 to the decode leader, alternating two ways:
  handoff  with X-Tessera-Prefill naming the prefill group: decode's leader asks prefill's
           leader, then every decode rank pulls its own shard from the matching prefill rank
  local    without the header: the decode group prefills itself
A request of one token is answered when its first token is made, so its latency at the client
is the time to first token. Reported per size: the medians of both, their ratio, the KV bytes
each rank pulls and the decode leader's handoff counters (a fallback would show there).

  /usr/bin/python3 bench/serving/disagg_tp.py --requests 40
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "serve", "server.py")
PYTHON = "/usr/bin/python3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), resp.headers
    finally:
        conn.close()


def start_group(size, tmp, args):
    port_file = os.path.join(tmp, f"port-{time.monotonic_ns()}")
    master = str(free_port())
    procs = []
    for worker in range(size):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TESSERA_", "MASTER_", "PORT"))}
        env.update(TESSERA_GROUP_SIZE=str(size), TESSERA_WORKER_INDEX=str(worker),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=master, PORT="0")
        extra = ["--port-file", port_file] if worker == 0 else []
        procs.append(subprocess.Popen([PYTHON, SERVER, "--host", "127.0.0.1", *args, *extra],
                                      env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise SystemExit(f"a server process of a group of {size} exited")
        if os.path.exists(port_file):
            with open(port_file) as f:
                port = int(f.read())
            try:
                if request(port, "GET", "/healthz")[0] == 200:
                    return port, procs
            except OSError:
                pass
        time.sleep(0.1)
    raise SystemExit(f"a group of {size} was not ready in 180 s")


def measure(size, args, tmp):
    prefill_port, prefill = start_group(size, tmp, ["--mode", "prefill", *args.model])
    decode_port, decode = start_group(size, tmp, ["--mode", "decode", *args.model])
    try:
        body = {"prompt": "k" * (args.prompt_tokens - 1), "max_tokens": 1, "temperature": 0}
        via = {"X-Tessera-Prefill": f"127.0.0.1:{prefill_port}"}
        times = {"handoff": [], "local": []}
        for i in range(args.warmup + args.requests):
            for way, headers in (("handoff", via), ("local", {})):
                started = time.perf_counter()
                status, data, resp_headers = request(decode_port, "POST", "/v1/completions",
                                                     body, headers)
                elapsed = time.perf_counter() - started
                want = "remote" if way == "handoff" else "local"
                if status != 200 or resp_headers.get("X-Tessera-Prefilled") != want:
                    raise SystemExit(f"size {size}: {way} answered {status} "
                                     f"{resp_headers.get('X-Tessera-Prefilled')}: {data}")
                if i >= args.warmup:
                    times[way].append(elapsed)
        stats = request(decode_port, "GET", "/healthz")[1]["disagg"]
        return times, stats
    finally:
        for p in prefill + decode:
            p.kill()
            p.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1,2,4", help="group sizes, comma-separated")
    p.add_argument("--requests", type=int, default=40, help="measured requests per way")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--prompt-tokens", type=int, default=256, help="BOS included")
    args = p.parse_args()
    args.model = []  # the default model: 4 layers, d_model 256, 8 heads
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"load average at start: {' '.join(load)}")
    print(f"{'size':>4} {'handoff p50 ms':>15} {'local p50 ms':>13} {'ratio':>6} "
          f"{'KV bytes/rank':>13} {'handoffs':>8} {'fallbacks':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            times, stats = measure(size, args, tmp)
            handoff = statistics.median(times["handoff"]) * 1000
            local = statistics.median(times["local"]) * 1000
            per_rank = stats.get("kvBytesIn", 0) / max(1, stats.get("handoffs", 1))
            print(f"{size:>4} {handoff:>15.1f} {local:>13.1f} {handoff / local:>6.2f} "
                  f"{per_rank:>13,.0f} {stats.get('handoffs', 0):>8} "
                  f"{stats.get('fallbacks', 0):>9}", flush=True)
    with open("/proc/loadavg") as f:
        print(f"load average at end: {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    sys.exit(main())
