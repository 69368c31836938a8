#!/usr/bin/env python3
"""Router overhead: the latency `tessera router` adds to a request, against calling the replica
directly and against HAProxy and nginx as reference proxies, side by side in one run.

    /usr/bin/python3 bench/serving/router_overhead.py \
        --tessera build/release/bin/tessera --rate 1000 --seconds 30 [--runs 5] \
        [--baseline OTHER/bin/tessera]

The backend is nginx answering `return 200 "ok\\n"` (one worker): as fast as a replica gets,
so what is measured is the proxies. Four targets on loopback:

    direct    the backend itself
    tessera   tessera router --static-endpoints (one io thread)
    haproxy   HAProxy, mode http, nbthread 1, http-reuse always
    nginx     nginx proxy_pass to an upstream with keepalive, worker_processes 1

Every proxy keeps its connections to the backend alive, and the client keeps one connection
alive per target. The client sends at a fixed total rate (open loop: request i is due at
start + i / rate), round robin over the targets (each round in a fresh seeded order), so all
see the same moments of machine load. A request is timed from its send to its last byte. Added latency at a percentile is the
target's percentile minus direct's. Figures go to stdout (a Markdown table) and --json.

--runs N repeats the timed load N times on the same processes (one warm-up) and adds a table
of the medians across runs; --baseline BIN runs a second tessera router (another build, e.g.
before a change) as the target `baseline`, so the two builds see the same moments of load.

Nothing here is installed or left running: configs live in a temp dir, every process started
is stopped by its pid at the end.
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("%s exited with %d before listening" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit("%s did not listen on %d within %.0f s" % (what, port, timeout))


NGINX_BACKEND = """
daemon off;
worker_processes 1;
pid {dir}/backend.pid;
error_log {dir}/backend-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/b-body; proxy_temp_path {dir}/b-proxy;
  fastcgi_temp_path {dir}/b-fcgi; uwsgi_temp_path {dir}/b-uwsgi; scgi_temp_path {dir}/b-scgi;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port};
    location / {{ return 200 "ok\\n"; }}
  }}
}}
"""

NGINX_PROXY = """
daemon off;
worker_processes 1;
pid {dir}/proxy.pid;
error_log {dir}/proxy-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/p-body; proxy_temp_path {dir}/p-proxy;
  fastcgi_temp_path {dir}/p-fcgi; uwsgi_temp_path {dir}/p-uwsgi; scgi_temp_path {dir}/p-scgi;
  keepalive_requests 1000000;
  upstream backend {{ server 127.0.0.1:{backend}; keepalive 32; keepalive_requests 1000000; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
"""

HAPROXY = """
global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  server s1 127.0.0.1:{backend}
"""


class Target:
    """One keep-alive connection and the latencies of the requests sent on it."""

    def __init__(self, name, port):
        self.name, self.port = name, port
        self.sock = None
        self.buf = b""
        self.latencies_us = []
        self.errors = 0

    def connect(self):
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def request(self, raw):
        """Sends one GET and reads its whole (Content-Length) response; returns the status."""
        if self.sock is None:
            self.connect()
        self.sock.sendall(raw)
        while b"\r\n\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.buf += data
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            rest += data
        self.buf = rest[length:]
        return int(head.split(b" ", 2)[1])


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def run_load(targets, rate, seconds, warmup, seed=1):
    raw = b"GET /bench HTTP/1.1\r\nHost: bench\r\n\r\n"
    for t in targets:  # warm every connection and every proxy's pool
        t.latencies_us, t.errors = [], 0
        for _ in range(warmup):
            t.request(raw)
    interval = 1.0 / rate
    total = int(rate * seconds)
    late = 0
    # Each round visits every target once, in a fresh order: a disturbance that repeats at a
    # multiple of the round's length (a 100 Hz tick, 5 targets 1 ms apart) would otherwise
    # always land on the same target.
    rng = random.Random(seed)
    order = []
    start = time.perf_counter()
    for i in range(total):
        due = start + i * interval
        now = time.perf_counter()
        if now < due:
            time.sleep(max(0.0, due - now - 0.0002))
            while time.perf_counter() < due:
                pass
        elif now - due > interval:
            late += 1
        if i % len(targets) == 0:
            order = list(targets)
            rng.shuffle(order)
        t = order[i % len(targets)]
        t0 = time.perf_counter_ns()
        try:
            status = t.request(raw)
            if status != 200:
                t.errors += 1
        except (OSError, ConnectionError, ValueError):
            t.errors += 1
            t.sock = None
            continue
        t.latencies_us.append((time.perf_counter_ns() - t0) / 1000.0)
    return late, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", default=os.path.join(REPO, "build", "release", "bin", "tessera"))
    ap.add_argument("--rate", type=float, default=1000.0, help="requests per second, all targets")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=int, default=200, help="requests per target before timing")
    ap.add_argument("--runs", type=int, default=1, help="timed runs on the same processes")
    ap.add_argument("--baseline", help="a second tessera binary, measured as target 'baseline'")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    if args.runs < 1:
        raise SystemExit("--runs must be 1 or more, got %d" % args.runs)
    if args.baseline and not os.path.exists(args.baseline):
        raise SystemExit("--baseline: no tessera binary at %s" % args.baseline)
    for tool in ("nginx", "haproxy"):
        if not shutil.which(tool) and not os.path.exists("/usr/sbin/" + tool):
            raise SystemExit("%s is not installed (scripts/setup.sh installs it)" % tool)
    if not os.path.exists(args.tessera):
        raise SystemExit("no tessera binary at %s (build the release preset)" % args.tessera)

    tmp = tempfile.mkdtemp(prefix="router-overhead-")
    procs = []

    def start(cmd, what, port, log):
        p = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        procs.append(p)
        wait_listening(port, p, what)
        return p

    try:
        backend = free_port()
        with open(os.path.join(tmp, "backend.conf"), "w") as f:
            f.write(NGINX_BACKEND.format(dir=tmp, port=backend))
        start(["nginx", "-p", tmp, "-c", os.path.join(tmp, "backend.conf")], "backend nginx",
              backend, os.path.join(tmp, "backend.log"))

        tessera = free_port()
        with open(os.path.join(tmp, "endpoints.json"), "w") as f:
            json.dump({"services": [{"name": "bench", "maxOngoingRequests": 100, "endpoints": [
                {"address": "127.0.0.1", "port": backend}]}]}, f)
        start([args.tessera, "router", "--static-endpoints", os.path.join(tmp, "endpoints.json"),
               "--port", str(tessera), "--plain-http"], "tessera router", tessera, os.path.join(tmp, "router.log"))
        baseline = None
        if args.baseline:
            baseline = free_port()
            start([args.baseline, "router", "--static-endpoints",
                   os.path.join(tmp, "endpoints.json"), "--port", str(baseline)],
                  "baseline tessera router", baseline, os.path.join(tmp, "baseline.log"))

        haproxy = free_port()
        with open(os.path.join(tmp, "haproxy.cfg"), "w") as f:
            f.write(HAPROXY.format(port=haproxy, backend=backend))
        start(["haproxy", "-db", "-f", os.path.join(tmp, "haproxy.cfg")], "haproxy", haproxy,
              os.path.join(tmp, "haproxy.log"))

        nginx = free_port()
        with open(os.path.join(tmp, "proxy.conf"), "w") as f:
            f.write(NGINX_PROXY.format(dir=tmp, port=nginx, backend=backend))
        start(["nginx", "-p", tmp, "-c", os.path.join(tmp, "proxy.conf")], "nginx proxy", nginx,
              os.path.join(tmp, "nginx.log"))

        targets = [Target("direct", backend), Target("tessera", tessera)]
        if baseline:
            targets.append(Target("baseline", baseline))
        targets += [Target("haproxy", haproxy), Target("nginx", nginx)]
        runs = []
        for i in range(args.runs):
            uptime_before = subprocess.run(["uptime"], capture_output=True,
                                           text=True).stdout.strip()
            late, total = run_load(targets, args.rate, args.seconds,
                                   args.warmup if i == 0 else 20, seed=i + 1)
            uptime_after = subprocess.run(["uptime"], capture_output=True,
                                          text=True).stdout.strip()
            runs.append(figures_of(targets, args, late, total, uptime_before, uptime_after))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    for i, figures in enumerate(runs):
        if args.runs > 1:
            print("## run %d of %d\n" % (i + 1, args.runs))
        report(figures)
    result = runs[0] if args.runs == 1 else {"runs": runs, "median": medians(runs)}
    if args.runs > 1:
        med = result["median"]
        print("## medians over %d runs\n" % args.runs)
        print("| target | added p50 us | added p99 us |")
        print("|---|---|---|")
        for name, row in med["targets"].items():
            print("| %s | %.0f | %.0f |" % (name, row["added_p50"], row["added_p99"]))
        for key in sorted(k for k in med if k.startswith("ratio_")):
            print("median of %s: %.2f" % (key, med[key]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    if any(row["errors"] for figures in runs for row in figures["targets"].values()):
        sys.exit(1)


def figures_of(targets, args, late, total, uptime_before, uptime_after):
    figures = {"rate": args.rate, "seconds": args.seconds, "requests": total, "late": late,
               "uptime_before": uptime_before, "uptime_after": uptime_after,
               "backend": "nginx return 200 (1 worker)", "targets": {}}
    direct = sorted(targets[0].latencies_us)
    for t in targets:
        lat = sorted(t.latencies_us)
        row = {"n": len(lat), "errors": t.errors}
        for p in (50, 90, 99, 99.9):
            row["p%s" % p] = percentile(lat, p)
            row["added_p%s" % p] = percentile(lat, p) - percentile(direct, p)
        figures["targets"][t.name] = row
    t = figures["targets"]
    for name in ("tessera", "baseline"):
        if name not in t:
            continue
        for ref in ("haproxy", "nginx") + (("baseline",) if name == "tessera" and
                                           "baseline" in t else ()):
            for p in ("p50", "p99"):
                added = t[ref]["added_" + p]
                ratio = t[name]["added_" + p] / added if added else 0
                figures["ratio_%s_%s_%s" % (name, ref, p)] = ratio
    return figures


def report(figures):
    print("rate %.0f req/s over %d targets for %.0f s (%d requests, %d sent late)" %
          (figures["rate"], len(figures["targets"]), figures["seconds"], figures["requests"],
           figures["late"]))
    print("uptime before: %s\nuptime after:  %s\n" % (figures["uptime_before"],
                                                       figures["uptime_after"]))
    print("| target | n | errors | p50 us | p99 us | p99.9 us | added p50 us | added p99 us |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in figures["targets"].items():
        print("| %s | %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f |" % (
            name, row["n"], row["errors"], row["p50"], row["p99"], row["p99.9"],
            row["added_p50"], row["added_p99"]))
    for key in sorted(k for k in figures if k.startswith("ratio_")):
        _, name, ref, p = key.split("_")
        print("%s added %s / %s added %s: %.2f" % (name, p, ref, p, figures[key]))
    print()


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2.0


def medians(runs):
    """Per target, the median across runs of each figure; ratios are the medians of the
    per-run ratios."""
    out = {"targets": {}}
    for name in runs[0]["targets"]:
        out["targets"][name] = {
            key: median([r["targets"][name][key] for r in runs])
            for key in runs[0]["targets"][name]}
    for key in runs[0]:
        if key.startswith("ratio_"):
            out[key] = median([r[key] for r in runs])
    return out


if __name__ == "__main__":
    main()
