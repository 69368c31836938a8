#!/usr/bin/env python3
"""Worker start-up through a real `tessera agent`, cold vs warm, and the exit-to-heartbeat delay.

A fake head (this script, HTTP on loopback) registers one agent and streams it assignment
snapshots. Each run assigns one worker, a Python script that records the wall clock as its
first statement and again right after `import torch`, then waits to be killed. The script is
run with the agent's warm pool off (cold: fork+exec of /usr/bin/python3) and on (warm:
`--warm-python /usr/bin/python3 --warm-preload torch`). Then the worker is killed with
SIGKILL and the delay until the agent's heartbeat reporting the exit arrives at the fake head
is measured (the heartbeat interval is 1 s, so anything well under that is a prompt
heartbeat). Between runs the worker is withdrawn and, in warm mode, the pool is allowed to
refill, so each run measures a restart that finds a ready warm process.

Figures (medians of --runs): assignment written to the stream -> script's first statement;
-> after `import torch`; SIGKILL -> heartbeat with the exit received.

Usage:
  /usr/bin/python3 bench/recovery/warm_start.py [--tessera build/release/bin/tessera] [--runs 5]
"""

import argparse
import http.server
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = "/usr/bin/python3"
HEARTBEAT_MS = 1000

WORKER = """\
import os, time
first = time.time()
import torch
after_torch = time.time()
with open(os.environ["BENCH_OUT"] + ".tmp", "w") as f:
    f.write("%d %.6f %.6f\\n" % (os.getpid(), first, after_torch))
os.rename(os.environ["BENCH_OUT"] + ".tmp", os.environ["BENCH_OUT"])
time.sleep(3600)
"""


CREDENTIAL_HEADER = "X-Tessera-Host-Credential"
UID = 1  # metadata.uid of the one job the fake head assigns (docs/agent-protocol.md)


class FakeHead:
    """Just enough of the head for one agent: register, heartbeat, the assignment stream.
    Like the real head it takes the agent's host credential at registration and answers a
    later call without it in X-Tessera-Host-Credential with 403; the run then stops with the
    refused calls."""

    def __init__(self):
        self.lock = threading.Lock()
        self.credential = None  # the registered agent's credential
        self.refused = []  # (method, path, why) of calls answered 403
        self.revision = 1
        self.assignments = []
        self.streams = []  # queues of snapshot lines, one per open watch stream
        self.heartbeats = []  # (receive time, body)
        self.changed = threading.Condition(self.lock)
        head = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _json(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _refused(self):
                """Answers 403 (and True) unless the call carries the registered credential."""
                with head.lock:
                    expected = head.credential
                got = self.headers.get(CREDENTIAL_HEADER)
                if expected is not None and got == expected:
                    return False
                why = ("not registered" if expected is None else
                       "no %s header" % CREDENTIAL_HEADER if got is None else
                       "another credential")
                with head.lock:
                    head.refused.append((self.command, self.path, why))
                self._json(403, {"error": "credential: " + why, "field": "credential"})
                return True

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                if self.path.endswith("/register"):
                    credential = body.get("credential")
                    if not isinstance(credential, str) or len(credential) < 32:
                        self._json(400, {"error": "credential: required", "field": "credential"})
                        return
                    with head.lock:
                        head.credential = credential
                    self._json(200, {"host": body["name"], "heartbeatIntervalMs": HEARTBEAT_MS,
                                     "leaseMs": 5000})
                elif self.path.endswith("/heartbeat"):
                    if self._refused():
                        return
                    with head.lock:
                        head.heartbeats.append((time.time(), body))
                        head.changed.notify_all()
                        snapshot = head.snapshot_locked()
                    self._json(200, snapshot)
                else:
                    self._json(404, {"error": "no such path"})

            def do_GET(self):
                if self._refused():
                    return
                lines = queue.Queue()
                with head.lock:
                    head.streams.append(lines)
                    lines.put(json.dumps(head.snapshot_locked()))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    while True:
                        data = (lines.get() + "\n").encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                except OSError:
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def snapshot_locked(self):
        return {"revision": self.revision, "assignments": self.assignments}

    def assign(self, assignments, stop=None):
        """Publishes a snapshot on every stream; returns the time it was handed to them."""
        with self.lock:
            self.revision += 1
            self.assignments = assignments
            snapshot = self.snapshot_locked()
            if stop:
                snapshot["stop"] = stop
            line = json.dumps(snapshot)
            now = time.time()
            for s in self.streams:
                s.put(line)
            return now

    def wait_heartbeat(self, predicate, after, timeout=60):
        """The receive time of the first heartbeat after `after` that satisfies `predicate`."""
        deadline = time.time() + timeout
        with self.lock:
            while True:
                for t, body in self.heartbeats:
                    if t >= after and predicate(body):
                        return t
                left = deadline - time.time()
                if left <= 0:
                    raise TimeoutError("no matching heartbeat")
                self.changed.wait(left)


def wait_for(what, predicate, timeout=120):
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise TimeoutError("timed out waiting for " + what)
        time.sleep(0.005)


def run_mode(tessera, warm, runs, pool):
    work = tempfile.mkdtemp(prefix="tessera-warm-bench-")
    head = FakeHead()
    token = os.path.join(work, "join.token")
    with open(token, "w") as f:
        f.write("bench-token\n")
    script = os.path.join(work, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    args = [tessera, "agent", "--head", "http://127.0.0.1:%d" % head.port,
            "--join-token-file", token, "--name", "bench-host", "--state-dir",
            os.path.join(work, "agent"), "--generation", "v6e", "--slice", "s0",
            "--topology", "4x4", "--worker", "0", "--devices", "emulated"]
    if warm:
        args += ["--warm-python", PYTHON, "--warm-preload", "torch", "--warm-pool", str(pool)]
    agent_log = os.path.join(work, "agent.log")
    log = open(agent_log, "w")
    agent = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

    def log_count(event):
        with open(agent_log) as f:
            return f.read().count(" " + event + " ")

    results = []
    try:
        wait_for("the agent to register and heartbeat", lambda: head.heartbeats or head.refused)
        if head.refused:
            raise RuntimeError("the fake head refused the agent's calls: %s" % head.refused)
        for run in range(runs):
            if warm:
                wait_for("a ready warm process", lambda: log_count("warm.ready") > run, 300)
            out = os.path.join(work, "out-%d" % run)
            assignment = {"job": "bench", "uid": UID, "attempt": run, "rank": 0, "worker": 0,
                          "command": [PYTHON, script], "env": {"BENCH_OUT": out},
                          "workingDir": work, "graceMs": 10000}
            t_assign = head.assign([assignment])
            text = wait_for("the worker's timestamps",
                            lambda: os.path.exists(out) and open(out).read())
            pid, first, after_torch = text.split()
            pid, first, after_torch = int(pid), float(first), float(after_torch)
            # Dead worker -> heartbeat that reports it.
            t_kill = time.time()
            os.kill(pid, signal.SIGKILL)

            def reports_exit(body, attempt=run):
                return any(w.get("uid") == UID and w["attempt"] == attempt
                           and w["state"] == "Exited" for w in body.get("workers", []))

            t_heartbeat = head.wait_heartbeat(reports_exit, t_kill)
            # Withdraw it; the confirmation heartbeat clears the way for the next run.
            t_withdraw = head.assign(
                [], stop=[{"job": "bench", "uid": UID, "attempt": run, "graceMs": 0}])
            t_confirm = head.wait_heartbeat(lambda body: not body.get("workers"), t_withdraw)
            results.append({"first": first - t_assign, "torch": after_torch - t_assign,
                            "exit_heartbeat": t_heartbeat - t_kill,
                            "withdraw_confirm": t_confirm - t_withdraw})
            print("  %s run %d: first line %.3f s, after import torch %.3f s, "
                  "kill->heartbeat %.1f ms, withdraw->confirm %.1f ms"
                  % ("warm" if warm else "cold", run, results[-1]["first"],
                     results[-1]["torch"], 1000 * results[-1]["exit_heartbeat"],
                     1000 * results[-1]["withdraw_confirm"]), flush=True)
        if head.refused:
            raise RuntimeError("the fake head refused the agent's calls: %s" % head.refused)
        return results
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
        log.close()
        head.server.shutdown()
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tessera", default=os.environ.get(
        "TESSERA_BIN", os.path.join(REPO, "build", "release", "bin", "tessera")))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pool", type=int, default=1, help="--warm-pool of the warm agent")
    args = parser.parse_args()
    if not os.access(args.tessera, os.X_OK):
        sys.exit("no tessera binary at %s (build it, or pass --tessera)" % args.tessera)
    cold = run_mode(args.tessera, False, args.runs, args.pool)
    warm = run_mode(args.tessera, True, args.runs, args.pool)

    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    print("\nmedians of %d runs (seconds unless noted)" % args.runs)
    print("| | cold | warm | cold / warm |")
    print("|---|---|---|---|")
    for key, label in (("first", "assignment -> first line"),
                       ("torch", "assignment -> after `import torch`")):
        c, w = med(cold, key), med(warm, key)
        print("| %s | %.3f | %.3f | %.1fx |" % (label, c, w, c / w))
    for key, label in (("exit_heartbeat", "SIGKILL -> heartbeat with the exit (ms)"),
                       ("withdraw_confirm", "withdrawal (stop graceMs 0) -> confirming "
                                            "heartbeat (ms)")):
        print("| %s | %.1f | %.1f | |" % (label, 1000 * med(cold, key), 1000 * med(warm, key)))


if __name__ == "__main__":
    main()
