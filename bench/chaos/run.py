#!/usr/bin/env python3
"""Chaos benchmark for tessera's HA control plane (issue 13, docs/ha.md "Chaos benchmark").

Runs, one after the other in this process, two control planes on this machine with the same
agents, workload and faults, and reports them side by side:

  ha:     3 etcd members, 3 heads (`--store etcd://...`, election lease 2 s), each head restarted
          by this script's supervisor whenever it exits (a step-down exits 3; kill -9 kills it);
  sqlite: one head on SQLite, restarted by the same supervisor.

Each has 8 agents (v6e 2x4 slices, one host each, every head's address, fence 5 s), a stream of
short jobs (`true`, 1 slice) and 2 long elastic jobs (slices 1..2, onHostLoss resize, an SDK
worker reporting progress, so its fence watchdog runs). Round i injects fault i mod 4:

  leader-kill    kill -9 the leading head
  leader-pause   SIGSTOP the leading head for lease + 1.5 s, then SIGCONT (it must step down);
                 right after SIGCONT a write is sent to it directly: accepting it is a violation
  etcd-kill      kill -9 an etcd member (etcd's own leader every other time), restarted 2 s
                 later (sqlite: no etcd; the round is skipped)
  agent-pause    SIGSTOP an agent for its fence time + 2 s, then SIGCONT

An independent checker thread polls the API (every head) and /proc throughout and counts
violations: an acknowledged (201) job missing from a successful list; one host in the workers
of two unfinished jobs; two attempts of one job with live processes at once (from the workers'
TESSERA_JOB / TESSERA_ATTEMPT environment); a job's attempt or resourceVersion going
backwards; a write accepted by a deposed (resumed) leader.

Reported per plane: failovers, fault -> first accepted write p50/p99 by fault kind, violations,
short jobs acknowledged and finished. Usage:

  python3 bench/chaos/run.py --rounds 20 --jobs 200 --out chaos.json
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LEASE_MS, RENEW_MS, RETRY_MS = 2000, 1200, 300
FENCE_MS = 5000
HOSTS = 8

SDK_WORKER = """
import time
from tessera import worker
step = 0
while True:
    worker.report_progress(step)
    step += 1
    time.sleep(0.2)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The cluster CA the heads made in their shared state directory (Plane sets it): heads speak
# HTTPS only, verified against it; etcd stays plain.
HEAD_CA_FILE = None


def head_call(port, method, path, body=None, token=None, timeout=2.0):
    """call() to a head: HTTPS, verified against HEAD_CA_FILE."""
    return call(port, method, path, body, token, timeout, ca_file=HEAD_CA_FILE)


def call(port, method, path, body=None, token=None, timeout=2.0, ca_file=None):
    scheme = "https" if ca_file else "http"
    req = urllib.request.Request("%s://127.0.0.1:%d%s" % (scheme, port, path), method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None
    except (OSError, ValueError):
        return 0, None


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100.0 * (len(v) - 1))))]


class Plane:
    """One control plane with its agents; every process is started and supervised here."""

    def __init__(self, mode, args, root):
        self.mode, self.args = mode, args
        self.dir = os.path.join(root, mode)
        os.makedirs(os.path.join(self.dir, "logs"))
        self.state = os.path.join(self.dir, "state")
        global HEAD_CA_FILE
        HEAD_CA_FILE = os.path.join(self.state, "ca.crt")
        self.lock = threading.Lock()
        self.heads, self.etcd, self.agents = [], [], []
        self.paused = set()  # pids we SIGSTOPped: never restarted while paused
        self.restarts = 0
        self.answer_after_restart_s = []
        self.stopping = False

    def spawn(self, argv, log):
        return subprocess.Popen(argv, stdout=open(os.path.join(self.dir, "logs", log), "a"),
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)

    # etcd
    def start_etcd(self):
        peers = [(free_port(), free_port()) for _ in range(3)]
        initial = ",".join("e%d=http://127.0.0.1:%d" % (i, p) for i, (_, p) in enumerate(peers))
        for i, (c, p) in enumerate(peers):
            m = {"name": "e%d" % i, "client": c, "peer": p, "initial": initial,
                 "data": os.path.join(self.dir, "etcd", "e%d" % i), "state": "new"}
            self.etcd.append(m)
            self.start_member(m)
        for m in self.etcd:
            self.wait("etcd %s healthy" % m["name"], lambda m=m: self.etcd_healthy(m), 60)

    def start_member(self, m):
        c, p = "http://127.0.0.1:%d" % m["client"], "http://127.0.0.1:%d" % m["peer"]
        m["proc"] = self.spawn(
            [self.args.etcd, "--name", m["name"], "--data-dir", m["data"],
             "--listen-client-urls", c, "--advertise-client-urls", c, "--listen-peer-urls", p,
             "--initial-advertise-peer-urls", p, "--initial-cluster", m["initial"],
             "--initial-cluster-state", m["state"], "--max-txn-ops", "10000"],
            "etcd-%s.log" % m["name"])
        m["state"] = "existing"  # a restart rejoins with its data

    @staticmethod
    def etcd_healthy(m):
        code, body = call(m["client"], "GET", "/health", timeout=1)
        return code == 200 and body and body.get("health") == "true"

    def etcd_leader(self):
        for m in self.etcd:
            code, body = call(m["client"], "POST", "/v3/maintenance/status", {}, timeout=1)
            if code == 200 and body and body.get("leader") == body.get("header", {}).get(
                    "member_id"):
                return m
        return None

    # heads
    def start_heads(self):
        n = 3 if self.mode == "ha" else 1
        store = ("etcd://" + ",".join("127.0.0.1:%d" % m["client"] for m in self.etcd)
                 if self.mode == "ha" else "sqlite")
        for i in range(n):
            h = {"i": i, "port": free_port()}
            h["argv"] = [self.args.tessera, "head", "--store", store, "--port", str(h["port"]),
                         "--state-dir", self.state, "--heartbeat-ms", "200", "--lease-ms",
                         "3000"]
            if self.mode == "ha":
                h["argv"] += ["--election-lease-ms", str(LEASE_MS), "--election-renew-deadline-ms",
                              str(RENEW_MS), "--election-retry-ms", str(RETRY_MS)]
            self.heads.append(h)
            h["proc"] = self.spawn(h["argv"], "head-%d.log" % i)
            if i == 0:  # the first creates the shared tokens
                self.wait("the first head", lambda: self.leader() is not None, 60)
        with open(os.path.join(self.state, "admin.token")) as f:
            self.token = f.read().strip()

    def supervise(self):
        """Restarts a head that exited, as systemd would (not one we paused)."""
        while not self.stopping:
            for h in self.heads:
                p = h["proc"]
                if p.poll() is not None and p.pid not in self.paused:
                    with self.lock:
                        self.restarts += 1
                    with open(os.path.join(self.dir, "logs", "head-%d.log" % h["i"]), "a") as f:
                        f.write("supervisor: pid %d exited with status %d; restarting\n" %
                                (p.pid, p.returncode))
                    h["proc"] = self.spawn(h["argv"], "head-%d.log" % h["i"])
                    threading.Thread(target=self.time_answer, args=(h, h["proc"]),
                                     daemon=True).start()
            time.sleep(0.05)

    def time_answer(self, h, proc):
        """Seconds from a supervisor restart to the head's first HTTP answer (any status)."""
        t0 = time.monotonic()
        while not self.stopping and proc.poll() is None and time.monotonic() - t0 < 60:
            code, _ = head_call(h["port"], "GET", "/v1/leader" if self.mode == "ha" else "/healthz",
                           timeout=1)
            if code:
                with self.lock:
                    self.answer_after_restart_s.append(time.monotonic() - t0)
                return
            time.sleep(0.02)

    def role(self, h):
        if self.mode == "sqlite":
            code, _ = head_call(h["port"], "GET", "/healthz", timeout=1)
            return "leader" if code == 200 else None
        code, body = head_call(h["port"], "GET", "/v1/leader", timeout=1)
        return body.get("role") if code == 200 and body else None

    def leader(self):
        for h in self.heads:
            if self.role(h) == "leader":
                return h
        return None

    def heads_arg(self):
        return ",".join("https://127.0.0.1:%d" % h["port"] for h in self.heads)

    # agents
    def start_agents(self):
        for s in range(HOSTS):
            name = "slice-%03d-w0" % s
            argv = [self.args.tessera, "agent", "--head", self.heads_arg(), "--ca-file",
                    HEAD_CA_FILE, "--join-token-file",
                    os.path.join(self.state, "join.token"), "--name", name, "--state-dir",
                    os.path.join(self.dir, "agents", name), "--generation", "v6e", "--address",
                    "127.0.0.1", "--slice", "slice-%03d" % s, "--topology", "2x4", "--worker",
                    "0", "--fence-ms", str(FENCE_MS), "--devices", "emulated"]
            self.agents.append({"name": name, "proc": self.spawn(argv, "agent-%s.log" % name)})
        self.wait("every host Ready", lambda: self.ready_hosts() == HOSTS, 90)

    def ready_hosts(self):
        code, body = self.get("/api/v1/hosts")
        if code != 200:
            return 0
        return sum(h["status"].get("state") == "Ready" for h in body["items"])

    # API through whichever head answers (a standby forwards to the leader)
    def get(self, path, timeout=3):
        for h in self.heads:
            code, body = head_call(h["port"], "GET", path, token=self.token, timeout=timeout)
            if code == 200:
                return code, body
        return 0, None

    def get_from_leader(self, path):
        """From the head that leads at the highest term only: a deposed leader resumed from a
        freeze may answer from its old memory for a moment, which is a stale read, not a write
        the store accepted, and must not be counted as one."""
        best = None
        for h in self.heads:
            if self.mode == "sqlite":
                best = h
                break
            code, body = head_call(h["port"], "GET", "/v1/leader", timeout=1)
            if code == 200 and body and body.get("role") == "leader" and (
                    best is None or body.get("term", 0) > best[1]):
                best = (h, body.get("term", 0))
        if best is None:
            return 0, None
        h = best if self.mode == "sqlite" else best[0]
        return head_call(h["port"], "GET", path, token=self.token, timeout=3)

    def post_job(self, doc, timeout=2.0):
        # Heads this script froze are skipped, so that the figure is the control plane's
        # failover time rather than this client's timeouts on a frozen head.
        for h in self.heads:
            if h["proc"].pid in self.paused:
                continue
            code, body = head_call(h["port"], "POST", "/api/v1/jobs", doc, token=self.token,
                              timeout=timeout)
            if code in (201, 409):
                return code, h
            if code in (400, 401, 403, 404, 422):  # the script's own mistake: never retried
                raise RuntimeError("%s: POST /api/v1/jobs refused with HTTP %d: %s" %
                                   (self.mode, code, body))
        return 0, None

    def wait(self, what, fn, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if fn():
                return
            time.sleep(0.05)
        raise RuntimeError("%s: timed out after %d s waiting for %s; logs in %s" %
                           (self.mode, timeout, what, os.path.join(self.dir, "logs")))

    def stop(self):
        self.stopping = True
        for pid in list(self.paused):
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        for group in (self.agents, self.heads, self.etcd):
            for x in group:
                p = x.get("proc")
                if p and p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for x in group:
                p = x.get("proc")
                if p:
                    try:
                        p.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()


def short_job(name):
    return {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 1,
                     "template": {"command": ["true"], "workingDir": REPO}}}


def long_job(name, script):
    return {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"accelerator": "v6e", "topology": "2x4", "slices": {"min": 1, "max": 2},
                     "failurePolicy": {"maxFailures": -1, "onHostLoss": "resize",
                                       "growBackInterval": "10s"},
                     "template": {"command": [sys.executable, script],
                                  "env": {"PYTHONPATH": os.path.join(REPO, "python")},
                                  "workingDir": REPO}}}


class Checker(threading.Thread):
    """Polls the API and /proc on its own; knows only what was acknowledged."""

    def __init__(self, plane, acked):
        super().__init__(daemon=True)
        self.plane, self.acked = plane, acked
        self.violations = []
        self.done = threading.Event()
        self.last = {}  # job -> (attempt, resourceVersion)
        self.polls = 0

    def violate(self, kind, detail):
        if not any(v["kind"] == kind and v["detail"] == detail for v in self.violations):
            self.violations.append({"kind": kind, "detail": detail, "at": time.time()})
            print("  VIOLATION %s: %s" % (kind, detail), file=sys.stderr)

    def run(self):
        while not self.done.is_set():
            acked_before = set(self.acked)
            code, body = self.plane.get_from_leader("/api/v1/jobs")
            if code == 200:
                self.polls += 1
                jobs = {j["metadata"]["name"]: j for j in body["items"]}
                for name in acked_before - set(jobs):
                    self.violate("acknowledged job lost", name)
                owner = {}
                for name, j in jobs.items():
                    st = j.get("status", {})
                    if st.get("phase") in ("Succeeded", "Failed"):
                        continue
                    for w in st.get("workers", []):
                        host = w.get("host")
                        if host and owner.setdefault(host, name) != name:
                            self.violate("chip owned by two jobs",
                                         "%s: %s and %s" % (host, owner[host], name))
                    now = (st.get("attempt", 0), int(j["metadata"].get("resourceVersion", 0)))
                    before = self.last.get(name)
                    if before and (now[0] < before[0] or now[1] < before[1]):
                        self.violate("stale write accepted",
                                     "%s went from (attempt, rv) %s to %s" % (name, before, now))
                    self.last[name] = now
            attempts = {}
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open("/proc/%s/stat" % pid) as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                            continue
                    with open("/proc/%s/environ" % pid, "rb") as f:
                        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                except (OSError, IndexError):
                    continue
                if env.get(b"CHAOS_PLANE") != self.plane.mode.encode():
                    continue
                job, attempt = env.get(b"TESSERA_JOB"), env.get(b"TESSERA_ATTEMPT")
                if job and attempt:
                    attempts.setdefault(job.decode(), set()).add(attempt.decode())
            for job, seen in attempts.items():
                if len(seen) > 1:
                    self.violate("two attempts running at once", "%s: attempts %s" %
                                 (job, sorted(seen)))
            time.sleep(0.2)


def run_plane(mode, args, root, rng):
    plane = Plane(mode, args, root)
    result = {"mode": mode, "rounds": 0, "failovers": 0, "first_write_s": {}, "elected_s": {},
              "faults": {}}
    acked = set()
    try:
        if mode == "ha":
            plane.start_etcd()
        plane.start_heads()
        threading.Thread(target=plane.supervise, daemon=True).start()
        plane.start_agents()
        script = os.path.join(plane.dir, "sdk_worker.py")
        with open(script, "w") as f:
            f.write(SDK_WORKER)
        for i in range(2):
            doc = long_job("long-%d" % i, script)
            doc["spec"]["template"]["env"]["CHAOS_PLANE"] = mode
            code, _ = plane.post_job(doc)
            if code == 201:
                acked.add("long-%d" % i)
        checker = Checker(plane, acked)
        checker.start()
        stop_stream = threading.Event()
        counter = [0]

        def stream():
            # Jobs are sent on a fixed schedule (job i at i * period) by a few writers, so that
            # one slow or failed-over answer does not stretch the stream past the rounds.
            period = args.duration_hint / max(args.jobs, 1)
            start = time.monotonic()
            while not stop_stream.is_set():
                with plane.lock:
                    i = counter[0]
                    counter[0] += 1
                if i >= args.jobs:
                    return
                time.sleep(max(0, start + i * period - time.monotonic()))
                name = "short-%04d" % i
                doc = short_job(name)
                doc["spec"]["template"]["env"] = {"CHAOS_PLANE": mode}
                while not stop_stream.is_set():
                    code, _ = plane.post_job(doc, timeout=3)
                    if code in (201, 409):  # 409: accepted before, answer lost; it exists
                        acked.add(name)
                        break
                    time.sleep(0.1)
        streamers = [threading.Thread(target=stream, daemon=True) for _ in range(4)]
        for t in streamers:
            t.start()

        probe = [0]

        def time_elected(kind, t0, old_term):
            """Fault -> an unfrozen head says it leads at a higher term (ha only)."""
            while time.monotonic() - t0 < 60:
                for h in plane.heads:
                    if h["proc"].pid in plane.paused:
                        continue
                    code, body = head_call(h["port"], "GET", "/v1/leader", timeout=0.5)
                    if code == 200 and body and body.get("role") == "leader" and \
                            body.get("term", 0) > old_term:
                        result["elected_s"].setdefault(kind, []).append(time.monotonic() - t0)
                        return
                time.sleep(0.02)

        def leader_term():
            for h in plane.heads:
                code, body = head_call(h["port"], "GET", "/v1/leader", timeout=1)
                if code == 200 and body and body.get("role") == "leader":
                    return body.get("term", 0)
            return 0

        def first_write(kind, t0):
            while time.monotonic() - t0 < 60:
                probe[0] += 1
                name = "probe-%04d" % probe[0]
                doc = short_job(name)
                doc["spec"]["template"]["env"] = {"CHAOS_PLANE": mode}
                code, _ = plane.post_job(doc, timeout=1)
                if code == 201:
                    acked.add(name)
                    result["first_write_s"].setdefault(kind, []).append(time.monotonic() - t0)
                    return
                time.sleep(0.02)
            result["first_write_s"].setdefault(kind, []).append(None)

        def current_leader():
            # The leader seen by the wait above may have stepped down since (an etcd kill makes
            # it miss its renew deadline): ask again until one leads.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                h = plane.leader()
                if h is not None:
                    return h
                time.sleep(0.05)
            raise RuntimeError("%s: no head has led for 60 s" % mode)

        kinds = ["leader-kill", "leader-pause", "etcd-kill", "agent-pause"]
        try:
            for r in range(args.rounds):
                kind = kinds[r % 4]
                result["faults"][kind] = result["faults"].get(kind, 0)
                plane.wait("a leader", lambda: plane.leader() is not None, 60)
                if kind == "etcd-kill" and mode == "sqlite":
                    continue  # no etcd
                result["faults"][kind] += 1
                result["rounds"] += 1
                print("%s round %d/%d: %s" % (mode, r + 1, args.rounds, kind), file=sys.stderr)
                old_term = leader_term() if mode == "ha" else 0
                if kind == "leader-kill":
                    h = current_leader()
                    h["proc"].send_signal(signal.SIGKILL)
                    t0 = time.monotonic()
                    result["failovers"] += 1
                    if mode == "ha":
                        threading.Thread(target=time_elected, args=(kind, t0, old_term),
                                         daemon=True).start()
                    first_write(kind, t0)
                elif kind == "leader-pause":
                    h = current_leader()
                    pid = h["proc"].pid
                    plane.paused.add(pid)
                    os.kill(pid, signal.SIGSTOP)
                    t0 = time.monotonic()
                    if mode == "ha":
                        result["failovers"] += 1
                        threading.Thread(target=time_elected, args=(kind, t0, old_term),
                                         daemon=True).start()
                        first_write(kind, t0)
                    time.sleep(max(0, LEASE_MS / 1000.0 + 1.5 - (time.monotonic() - t0)))
                    os.kill(pid, signal.SIGCONT)
                    if mode == "ha":
                        # The resumed, deposed leader must not accept a write.
                        name = "deposed-%d" % r
                        code, _ = head_call(h["port"], "POST", "/api/v1/jobs", short_job(name),
                                       token=plane.token, timeout=3)
                        newer = plane.leader()
                        if code == 201 and newer is not None and newer is not h:
                            checker.violate("write by deposed leader accepted", name)
                        if code == 201:
                            acked.add(name)
                        plane.paused.discard(pid)
                    else:
                        plane.paused.discard(pid)  # so that the writer tries it again
                        first_write(kind, t0)  # the same head, once it runs again
                elif kind == "etcd-kill":
                    m = plane.etcd_leader() if r % 8 == 2 else rng.choice(plane.etcd)
                    m = m or rng.choice(plane.etcd)
                    m["proc"].send_signal(signal.SIGKILL)
                    m["proc"].wait()
                    t0 = time.monotonic()
                    first_write(kind, t0)
                    time.sleep(max(0, 2.0 - (time.monotonic() - t0)))
                    plane.start_member(m)
                    plane.wait("etcd %s back" % m["name"], lambda: plane.etcd_healthy(m), 60)
                else:
                    a = rng.choice(plane.agents)
                    pid = a["proc"].pid
                    plane.paused.add(pid)
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(FENCE_MS / 1000.0 + 2.0)
                    os.kill(pid, signal.SIGCONT)
                    plane.paused.discard(pid)
                time.sleep(args.settle)
        except RuntimeError as e:
            # A plane that stops answering ends the rounds, not the report: what the checker
            # saw up to here is still printed, with the reason.
            result["aborted"] = str(e)
            print("%s: rounds aborted: %s" % (mode, e), file=sys.stderr)
        # The rounds may end before the schedule: let the stream finish (bounded), then stop.
        deadline = time.monotonic() + 120
        while any(t.is_alive() for t in streamers) and time.monotonic() < deadline:
            time.sleep(0.2)
        stop_stream.set()
        for t in streamers:
            t.join(timeout=30)
        # Let what was acknowledged run to the end, then a last look.
        deadline = time.monotonic() + args.drain
        while time.monotonic() < deadline:
            code, body = plane.get("/api/v1/jobs")
            if code == 200:
                short = [j for j in body["items"] if not j["metadata"]["name"].startswith("long")]
                if all(j["status"].get("phase") in ("Succeeded", "Failed") for j in short):
                    break
            time.sleep(0.5)
        time.sleep(1)
        checker.done.set()
        checker.join(timeout=10)
        # The whole list (1,000+ jobs, through a standby that forwards it to the leader) can
        # take longer than the checker's 3 s; a list that still fails is reported as such.
        code, body = plane.get("/api/v1/jobs", timeout=30)
        phases = None
        if code == 200:
            phases = {}
            for j in body["items"]:
                if not j["metadata"]["name"].startswith("long"):
                    p = j["status"].get("phase")
                    phases[p] = phases.get(p, 0) + 1
        result.update({"acknowledged": len(acked), "short_job_phases": phases,
                       "violations": checker.violations, "checker_polls": checker.polls,
                       "head_restarts": plane.restarts,
                       "restart_to_answer_s": {
                           "n": len(plane.answer_after_restart_s),
                           "p50_s": pct(plane.answer_after_restart_s, 50),
                           "max_s": max(plane.answer_after_restart_s, default=None)}})
    finally:
        plane.stop()
    for kind, values in result["elected_s"].items():
        result.setdefault("elected_summary", {})[kind] = {
            "n": len(values), "p50_s": pct(values, 50), "p99_s": pct(values, 99)}
    for kind, values in result["first_write_s"].items():
        ok = [v for v in values if v is not None]
        result.setdefault("first_write_summary", {})[kind] = {
            "n": len(values), "no_write_in_60s": len(values) - len(ok),
            "p50_s": pct(ok, 50), "p99_s": pct(ok, 99), "max_s": max(ok) if ok else None}
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=100, help="faults per plane (default 100)")
    ap.add_argument("--jobs", type=int, default=1000, help="short jobs per plane (default 1000)")
    ap.add_argument("--duration-hint", type=float, default=None,
                    help="seconds over which the short jobs are spread (default 5 s per round)")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds between rounds")
    ap.add_argument("--drain", type=float, default=120.0,
                    help="seconds to wait at the end for acknowledged jobs to finish")
    ap.add_argument("--planes", default="ha,sqlite", help="ha, sqlite or both (default)")
    ap.add_argument("--seed", type=int, default=None)
    # The release build, as for every benchmark (bench/README.md), when there is one; else
    # the dev build (AddressSanitizer: its heads start several times slower).
    release = os.path.join(REPO, "build", "release", "bin", "tessera")
    dev = os.path.join(REPO, "build", "dev", "bin", "tessera")
    ap.add_argument("--tessera", default=os.environ.get(
        "TESSERA_BIN", release if os.path.exists(release) else dev))
    ap.add_argument("--etcd", default=os.environ.get("TESSERA_ETCD") or shutil.which("etcd"))
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the logs directory")
    args = ap.parse_args()
    for name in ("rounds", "jobs"):
        if getattr(args, name) < 1:
            ap.error("--%s: must be at least 1" % name)
    planes = [p.strip() for p in args.planes.split(",") if p.strip()]
    if not planes or any(p not in ("ha", "sqlite") for p in planes):
        ap.error("--planes: '%s'; write ha, sqlite or ha,sqlite" % args.planes)
    if "ha" in planes and not args.etcd:
        ap.error("--etcd: no etcd on PATH; install Debian's etcd-server or pass --etcd PATH")
    if args.duration_hint is None:
        args.duration_hint = 5.0 * args.rounds
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print("chaos: seed %d, %d rounds, %d short jobs, load %.1f, %s" %
          (seed, args.rounds, args.jobs, os.getloadavg()[0], args.tessera), file=sys.stderr)
    root = tempfile.mkdtemp(prefix="tessera-chaos-")
    results = {"seed": seed, "rounds": args.rounds, "jobs": args.jobs,
               "load_before": os.getloadavg(), "planes": []}
    try:
        for mode in planes:
            started = time.monotonic()
            r = run_plane(mode, args, root, random.Random(seed))
            r["wall_s"] = time.monotonic() - started
            results["planes"].append(r)
    finally:
        results["load_after"] = os.getloadavg()
        if args.keep:
            print("logs kept in", root, file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    fmt = lambda v: "-" if v is None else "%.2f" % v
    print("\n%-8s %-13s %5s %8s %8s %8s %s" % ("plane", "fault", "n", "p50 s", "p99 s", "max s",
                                               "no write in 60 s"))
    for r in results["planes"]:
        for kind, s in sorted(r.get("first_write_summary", {}).items()):
            print("%-8s %-13s %5d %8s %8s %8s %d" % (r["mode"], kind, s["n"], fmt(s["p50_s"]),
                                                     fmt(s["p99_s"]), fmt(s["max_s"]),
                                                     s["no_write_in_60s"]))
    for r in results["planes"]:
        for kind, s in sorted(r.get("elected_summary", {}).items()):
            print("%s %s: fault -> a new head says it leads p50 %s s, p99 %s s (n %d)" %
                  (r["mode"], kind, fmt(s["p50_s"]), fmt(s["p99_s"]), s["n"]))
    for r in results["planes"]:
        if r.get("aborted"):
            print("%s: ABORTED after %d rounds: %s" % (r["mode"], r["rounds"], r["aborted"]))
        print("%s: %d rounds, %d failovers, %d head restarts, %d acknowledged, short jobs %s, "
              "%d checker polls, %d violations, %.0f s" %
              (r["mode"], r["rounds"], r["failovers"], r.get("head_restarts", 0),
               r.get("acknowledged", 0),
               r.get("short_job_phases") if r.get("short_job_phases") is not None
               else "(the final list failed on every head)", r.get("checker_polls", 0),
               len(r.get("violations", [])), r.get("wall_s", 0)))
        ra = r.get("restart_to_answer_s", {})
        print("%s: a restarted head answered HTTP after p50 %s s, max %s s (%d restarts)" %
              (r["mode"], fmt(ra.get("p50_s")), fmt(ra.get("max_s")), ra.get("n", 0)))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if any(r.get("violations") or r.get("aborted") for r in results["planes"]) else 0


if __name__ == "__main__":
    sys.exit(main())
