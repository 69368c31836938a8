#!/usr/bin/env python3
"""TLS cost on the serving path: a streamed completion with and without TLS, side by side in one
run (bench/README.md "TLS cost").

    /usr/bin/python3 bench/serving/tls_cost.py --tessera build/dev/bin/tessera [--n 40]

The replica is a small streaming server here (a text/event-stream of --tokens `data:` chunks,
one HTTP chunk each, as examples/serve/server.py sends them, with no model behind it: what is
measured is the transport; the server sets TCP_NODELAY, as a token streamer should). Six targets
on loopback. The first four take a fresh connection per request (the handshake included, as for
a client that does not keep its connection):

    replica plain     the replica over plain HTTP
    replica tls       the same replica's TLS port (its certificate from the cluster CA)
    router plain      `tessera router --plain-http` in front of the plain replica port
    router tls        `tessera router --tls-cert-file ...` (HTTPS) in front of the same

The last two isolate the router's hop to the replica (docs/serving.md "TLS to replicas"): the
client keeps one HTTPS connection to each of two routers alike but for that hop, so the only
difference is the router -> replica connection (pooled, kept alive by the router):

    via router, replica tls     the router verifies the TLS replica (endpoint scheme https)
                                against the cluster CA (--replicas-ca-file)
    via router, replica plain   a router with --replicas-plain-http, to the plain replica

Requests go round robin over the targets, in a fresh seeded order each round, so all see the same
moments of machine load. Time to first token is from the request (the connect, for a fresh
connection) to the first `data:` line; total to the end of the stream. Medians and p99 of --n per
target go to stdout as a Markdown table, with the load average.

The certificates come from a `tessera head` started once on a temporary state directory (the
CA and a server certificate for 127.0.0.1, api/head_tls.h) and stopped at once. Every process
started is stopped by its pid at the end.
"""
import argparse
import http.client
import http.server
import json
import os
import random
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def stream_handler(tokens):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def setup(self):
            super().setup()
            # As a model server streaming tokens should: without it each small write waits on
            # the client's delayed ACK (40 ms), which would be measured instead of TLS.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(tokens):
                data = b'data: {"choices": [{"text": "t%d"}]}\n\n' % i
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            done = b"data: [DONE]\n\n"
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            self.wfile.flush()

    return Handler


def serve(handler, context=None):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def wait_file(path, proc, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"tls_cost: {what} exited with {proc.returncode}")
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            time.sleep(0.02)
    sys.exit(f"tls_cost: {what} did not start within {timeout} s")


def connect(port, context):
    return (http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=context)
            if context else http.client.HTTPConnection("127.0.0.1", port, timeout=30))


class Kept:
    """A connection kept across requests (a client that keeps its connection)."""

    def __init__(self, port, context):
        self.conn = connect(port, context)


def one(port, context):
    """(time to first token, total) of one streamed completion: on a new connection, or on
    `context.conn` when `context` is a Kept."""
    t0 = time.perf_counter()
    kept = isinstance(context, Kept)
    conn = context.conn if kept else connect(port, context)
    body = json.dumps({"prompt": "hi", "max_tokens": 32, "stream": True})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status} from port {port}")
    ttft = None
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data:") and ttft is None:
            ttft = time.perf_counter() - t0
    total = time.perf_counter() - t0
    if not kept:
        conn.close()
    return ttft, total


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tessera", required=True)
    p.add_argument("--n", type=int, default=40, help="completions per target")
    p.add_argument("--tokens", type=int, default=32, help="chunks per stream")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="tessera-tls-cost-")
    procs = []
    try:
        state = os.path.join(tmp, "head")
        os.makedirs(state)
        head = subprocess.Popen([a.tessera, "head", "--state-dir", state, "--port", "0"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(head)
        wait_file(os.path.join(state, "head.json"), head, "the head")
        head.terminate()
        head.wait(30)
        ca, crt, key = (os.path.join(state, f) for f in ("ca.crt", "server.crt", "server.key"))
        server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_context.load_cert_chain(crt, key)
        client_context = ssl.create_default_context(cafile=ca)
        handler = stream_handler(a.tokens)
        plain_replica = serve(handler)
        tls_replica = serve(handler, server_context)
        endpoints = os.path.join(tmp, "endpoints.json")
        with open(endpoints, "w") as f:
            json.dump({"services": [{"name": "llm", "endpoints": [
                {"address": "127.0.0.1", "port": plain_replica.server_port, "replica": 0}]}]}, f)
        tls_endpoints = os.path.join(tmp, "tls-endpoints.json")
        with open(tls_endpoints, "w") as f:
            json.dump({"services": [{"name": "llm", "endpoints": [
                {"address": "127.0.0.1", "port": tls_replica.server_port, "replica": 0,
                 "scheme": "https"}]}]}, f)
        https = ["--tls-cert-file", crt, "--tls-key-file", key]
        routers = {}
        for name, flags in (("plain", ["--plain-http", "--static-endpoints", endpoints]),
                            ("tls", [*https, "--static-endpoints", endpoints]),
                            ("hop tls", [*https, "--static-endpoints", tls_endpoints,
                                         "--replicas-ca-file", ca]),
                            ("hop plain", [*https, "--static-endpoints", endpoints,
                                           "--replicas-plain-http"])):
            info = os.path.join(tmp, f"router-{name.replace(' ', '-')}.json")
            proc = subprocess.Popen([a.tessera, "router", "--port", "0", "--info-file", info,
                                     *flags],
                                    stdout=subprocess.DEVNULL,
                                    stderr=open(os.path.join(
                                        tmp, f"router-{name.replace(' ', '-')}.log"), "w"))
            procs.append(proc)
            routers[name] = wait_file(info, proc, f"the {name} router")["port"]
        targets = {
            "replica plain": (plain_replica.server_port, None),
            "replica tls": (tls_replica.server_port, client_context),
            "router plain": (routers["plain"], None),
            "router tls": (routers["tls"], client_context),
            "via router, replica tls": (routers["hop tls"],
                                        Kept(routers["hop tls"], client_context)),
            "via router, replica plain (--replicas-plain-http)": (
                routers["hop plain"], Kept(routers["hop plain"], client_context)),
        }
        for port, context in targets.values():  # warm-up
            one(port, context)
        rng = random.Random(a.seed)
        results = {name: [] for name in targets}
        for _ in range(a.n):
            order = list(targets)
            rng.shuffle(order)
            for name in order:
                results[name].append(one(*targets[name]))
        load = os.getloadavg()
        print(f"{a.n} streamed completions of {a.tokens} tokens per target (seed {a.seed}); "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print("| target | TTFT median (ms) | TTFT p99 (ms) | total median (ms) | total p99 (ms) |")
        print("|---|---|---|---|---|")
        med = {}
        for name, rs in results.items():
            ttft = [r[0] * 1000 for r in rs]
            total = [r[1] * 1000 for r in rs]
            med[name] = (statistics.median(ttft), statistics.median(total))
            print(f"| {name} | {med[name][0]:.2f} | {pct(ttft, 99):.2f} | "
                  f"{med[name][1]:.2f} | {pct(total, 99):.2f} |")
        med["hop tls"] = med["via router, replica tls"]
        med["hop plain"] = med["via router, replica plain (--replicas-plain-http)"]
        for where in ("replica", "router", "hop"):
            t, p_ = med[f"{where} tls"], med[f"{where} plain"]
            print(f"{where}: TLS / plain = {t[0] / p_[0]:.2f}x TTFT, {t[1] / p_[1]:.2f}x total "
                  f"(+{t[0] - p_[0]:.2f} ms, +{t[1] - p_[1]:.2f} ms)")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
