#!/usr/bin/env python3
"""Control-plane benchmark driver.

For each agent count N (and each repetition) it starts a real `tessera head` on a fresh temp
state directory (loopback, ephemeral port, --heartbeat-ms 1000 --lease-ms 5000) and runs a load
generator against it, then stops the head (SIGTERM, then SIGKILL after 10 s) and removes the
state directory. Prints one JSON line per run on stderr and a Markdown table of medians on
stdout; --json appends every run's JSON line to a file.

The default load generator is the C++ one (`tessera_loadgen`, bench/control_plane/loadgen.cc,
built beside the `tessera` binary: build/release/bench/tessera_loadgen), spread over --shards
processes (default: enough that none holds more than 8,000 connections); every shard sets up its
agents and prints READY, then the driver creates --jobs one-slice TrainJobs (admin token), waits
--warmup s and starts every shard's window at once ("GO"), measuring the head's CPU (utime+stime
of /proc/PID/stat) over the window, its RSS (VmRSS) at the end and the hosts Ready / Lost
(GET /api/v1/hosts) after it. `--loadgen py` runs the Python generator (loadgen.py) as before.
`--baseline BIN` runs each agent count against BIN first (the commit before, with the two
connections per agent it speaks: --baseline-connection), then against --tessera, in one run.
`--etcd BIN` gives every head a fresh local 3-member etcd cluster (`--store etcd://...`, each
member's data in the run's temp directory) and reports the cluster's committed writes per second
over the window (`etcdWritesPerS`: the raft leader's etcd_server_proposals_committed_total) and
its database size at the end (`etcdDbMiB`, the file; `etcdDbInUseMiB`, the part in use: the
leader compacts etcd's history every `--etcd-compaction-interval-ms`, a head flag that
`--head-arg` passes).

`--failover` (with `--etcd`) measures a leader kill instead (bench/README.md "Failover at fleet
scale"): a fresh 3-member etcd, `--seed-jobs` TrainJobs put into it first (tessera_seed_store,
built beside tessera_loadgen), two HA heads sharing one state directory (election lease
`--election-lease-ms`, default 2000 as in the tests), the agents given both heads (the leader
first). After `--failover-before` s of the window the leader is killed with SIGKILL and the rest
of the window (`--failover-after` s) measures: kill -> first accepted write (a new PriorityClass
applied every 50 ms at every head, whichever accepts it), kill -> the standby says it is elected
and serving, its store load from its own log, every agent's first heartbeat answered after its
channel broke (p50 / p99 / max, agents that never got one), hosts Lost and HostLost events on the
new leader, and the etcd write rate before and after.

  bench/control_plane/run.py --tessera build/release/bin/tessera --agents 1000,10000 --json out.json
  bench/control_plane/run.py --tessera build/release/bin/tessera --etcd etcd --failover \
      --agents 1000 --seed-jobs 10000 --tls off --json failover.json
"""

import argparse
import json
import math
import ssl
import urllib.request
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
current = {"head": None, "loadgen": None, "dir": None, "shards": [], "etcd": [], "heads": []}


def cleanup():
    for p in current["shards"]:
        if p.poll() is None:
            p.kill()
            p.wait(5)
    current["shards"] = []
    for p in current["heads"]:  # --failover: the HA heads
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
    current["heads"] = []
    for key in ("loadgen", "head"):
        p = current[key]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        current[key] = None
    for p in current["etcd"]:  # after the head, which writes to it until it stops
        if p.poll() is None:
            p.kill()
            p.wait(5)
    current["etcd"] = []
    if current["dir"]:
        shutil.rmtree(current["dir"], ignore_errors=True)
        current["dir"] = None


def on_signal(signum, _frame):
    cleanup()
    sys.exit(128 + signum)


def read_file(path):
    with open(path) as f:
        return f.read().strip()


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def etcd_call(port, path, body=None, timeout=2):
    """(status, text) of one request to an etcd member's client port; (0, "") if it fails."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except (OSError, urllib.error.HTTPError):
        return 0, ""


def start_etcd(etcd, d):
    """A fresh 3-member etcd cluster with its data under `d`; the client ports, once every
    member answers /health."""
    peers = [(free_port(), free_port()) for _ in range(3)]
    initial = ",".join(f"e{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(peers))
    for i, (c, p) in enumerate(peers):
        log = open(os.path.join(d, f"etcd-e{i}.log"), "w")
        current["etcd"].append(subprocess.Popen(
            [etcd, "--name", f"e{i}", "--data-dir", os.path.join(d, f"etcd-e{i}"),
             "--listen-client-urls", f"http://127.0.0.1:{c}",
             "--advertise-client-urls", f"http://127.0.0.1:{c}",
             "--listen-peer-urls", f"http://127.0.0.1:{p}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
             "--initial-cluster", initial, "--initial-cluster-state", "new",
             "--max-txn-ops", "10000"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    clients = [c for c, _ in peers]
    deadline = time.monotonic() + 60
    for c in clients:
        while '"health":"true"' not in etcd_call(c, "/health")[1].replace(" ", ""):
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd member on port {c} not healthy in 60 s; see {d}")
            time.sleep(0.1)
    return clients


def etcd_figures(clients):
    """The raft leader's committed proposals (one per write), the database size in bytes (the
    file) and the part of it in use (the rest is pages freed by compaction, reused before the
    file grows)."""
    committed, size, in_use = 0.0, 0.0, 0.0
    for c in clients:
        for line in etcd_call(c, "/metrics", timeout=5)[1].splitlines():
            if line.startswith("etcd_server_proposals_committed_total "):
                committed = max(committed, float(line.split()[1]))
            elif line.startswith("etcd_mvcc_db_total_size_in_bytes "):
                size = max(size, float(line.split()[1]))
            elif line.startswith("etcd_mvcc_db_total_size_in_use_in_bytes "):
                in_use = max(in_use, float(line.split()[1]))
    return committed, size, in_use


def start_head(tessera, tls, extra_args=(), etcd=None):
    """A head on a fresh state directory (its store on a fresh local etcd cluster when `etcd`
    is that binary); (process, state dir, port, log file)."""
    d = tempfile.mkdtemp(prefix="tessera-cp-bench-")
    current["dir"] = d
    store = []
    if etcd:
        clients = start_etcd(etcd, d)
        store = ["--store", "etcd://" + ",".join(f"127.0.0.1:{c}" for c in clients)]
        current["etcd_clients"] = clients
    log = open(os.path.join(d, "head.log"), "w")
    head = subprocess.Popen(
        # An HA head (etcd) is told its port: its address is what standbys and agents learn.
        [tessera, "head", "--state-dir", d, "--port", str(free_port() if etcd else 0),
         "--heartbeat-ms", "1000",
         "--lease-ms", "5000"] + store + ([] if tls else ["--plain-http"]) + list(extra_args),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    current["head"] = head
    deadline = time.monotonic() + 30
    port = 0
    while port == 0:
        if time.monotonic() > deadline or head.poll() is not None:
            log.flush()
            raise RuntimeError("the head did not start; it printed:\n" +
                               read_file(os.path.join(d, "head.log"))[-2000:])
        try:
            h = json.loads(read_file(os.path.join(d, "head.json")))
            if h.get("pid") == head.pid:
                port = h["port"]
        except (OSError, ValueError):
            pass
        if port == 0:
            time.sleep(0.05)
    return head, d, port, log


def admin_call(d, port, tls, method, path, body=None):
    """(status, parsed JSON) of one admin request to the head."""
    scheme = "https" if tls else "http"
    req = urllib.request.Request(
        f"{scheme}://127.0.0.1:{port}{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + read_file(os.path.join(d, "admin.token")),
                 "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt")) if tls else None
    try:
        with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None


def job_doc(i):
    return {"apiVersion": "tessera/v1", "kind": "TrainJob",
            "metadata": {"name": f"cp-job-{i:04d}"},
            "spec": {"accelerator": "v6e", "topology": "4x4", "slices": 1,
                     "template": {"command": ["true"]}}}


def shard_reports(procs):
    """(each loadgen shard's last JSON line, None), or ([], why) after a cleanup when a shard
    failed."""
    reports = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        lines = [l for l in out.splitlines() if l.startswith("{")]
        if p.returncode != 0 or not lines:
            cleanup()
            return [], f"loadgen shard exit {p.returncode}"
        reports.append(json.loads(lines[-1]))
    current["shards"] = []
    return reports, None


def one_run_cc(a, tessera, n, rep, tls, connection):
    """One head and --shards tessera_loadgen processes (bench/control_plane/loadgen.cc)."""
    head, d, port, log = start_head(tessera, tls, a.head_arg, a.etcd)
    per_agent = 1 if connection == "one" else 2
    shards = a.shards or max(1, math.ceil(n * per_agent / 8000))
    t0 = time.monotonic()
    procs = []
    for i in range(shards):
        cmd = [a.loadgen_bin, "--port", str(port), "--join-token-file",
               os.path.join(d, "join.token"), "--agents", str(n), "--shard", f"{i}/{shards}",
               "--connection", connection, "--window", str(a.window), "--wait-go",
               "--seed", str(rep + 1), "--register-threads", str(a.register_threads),
               "--setup-timeout", str(a.setup_timeout)]
        if tls:
            cmd += ["--ca-file", os.path.join(d, "ca.crt")]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    current["shards"] = procs
    result = {"agents": n, "tls": tls, "binary": tessera, "connection": connection,
              "shards": shards}
    ready = [p.stdout.readline().strip() for p in procs]
    setup_s = time.monotonic() - t0
    if any(r != "READY" for r in ready):
        alive = head.poll() is None
        cleanup()
        return dict(result, failed=f"a loadgen shard did not get ready ({ready})",
                    head_alive=alive)
    job_errors = 0
    for i in range(a.jobs):
        st, _ = admin_call(d, port, tls, "POST", "/api/v1/jobs", job_doc(i))
        job_errors += st != 201
    time.sleep(a.warmup)
    etcd0 = etcd_figures(current["etcd_clients"]) if a.etcd else None
    cpu0, w0 = proc_cpu_s(head.pid), time.monotonic()
    for p in procs:
        p.stdin.write("GO\n")
        p.stdin.flush()
    time.sleep(a.window)
    cpu1, w1 = proc_cpu_s(head.pid), time.monotonic()
    if a.etcd:
        etcd1 = etcd_figures(current["etcd_clients"])
        result["etcdWritesPerS"] = round((etcd1[0] - etcd0[0]) / (w1 - w0), 1)
        result["etcdDbMiB"] = round(etcd1[1] / 2**20, 1)
        result["etcdDbInUseMiB"] = round(etcd1[2] / 2**20, 1)
    rss = proc_rss_mib(head.pid)
    shard_results, failed = shard_reports(procs)
    if failed:
        return dict(result, failed=failed)
    st, hosts = admin_call(d, port, tls, "GET", "/api/v1/hosts")
    states = {}
    for h in (hosts or {}).get("items", []):
        s = h.get("status", {}).get("state", "?")
        states[s] = states.get(s, 0) + 1
    st, events = admin_call(d, port, tls, "GET", "/api/v1/events")
    lost_events = sum(1 for e in (events or {}).get("items", []) if "HostLost" in json.dumps(e))
    alive = head.poll() is None
    cleanup()
    log.close()
    sent = sum(r["hb_sent"] for r in shard_results)
    in_time = sum(r["hb_in_time"] for r in shard_results)
    registered = sum(r["agents"] - r["register_errors"] for r in shard_results)
    result.update({
        "registerS": round(max(r["register_s"] for r in shard_results), 2),
        "registerErrors": n - registered,
        "setupS": round(setup_s, 2),
        "heartbeatsPerS": round(sum(r["hb_per_s"] for r in shard_results), 1),
        # A shard's percentile is over its own heartbeats; across shards the largest is given.
        "heartbeatP50Ms": round(max(r["hb_p50_ms"] for r in shard_results), 2),
        "heartbeatP99Ms": round(max(r["hb_p99_ms"] for r in shard_results), 2),
        "heartbeatMaxMs": round(max(r["hb_max_ms"] for r in shard_results), 2),
        "answeredUnder1sPct": round(100.0 * in_time / max(sent, 1), 3),
        "heartbeatErrors": sum(r["hb_errors"] for r in shard_results),
        "lostHosts": states.get("Lost", 0) + (n - sum(states.values())),
        "hostLostEvents": lost_events,
        "hosts": states,
        "headCpuPct": round(100.0 * (cpu1 - cpu0) / (w1 - w0), 1),
        "headRssMiB": round(rss, 1),
        "loadgenCpuPct": round(sum(r["loadgen_cpu_pct"] for r in shard_results), 1),
        "assignedWorkers": sum(r["assigned_workers"] for r in shard_results),
        "jobCreateErrors": job_errors,
        "headAliveAtEnd": alive,
        "shardResults": shard_results,
    })
    return result


def head_get(port, tls, ca, path, token=None, timeout=2.0):
    """(status, parsed JSON or None) of one GET to a head; (0, None) when it does not answer."""
    req = urllib.request.Request(f"{'https' if tls else 'http'}://127.0.0.1:{port}{path}",
                                 headers={"Authorization": "Bearer " + token} if token else {})
    ctx = ssl.create_default_context(cafile=ca) if tls else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, ValueError):
        return 0, None


def head_post(port, tls, ca, path, body, token, timeout=2.0):
    req = urllib.request.Request(f"{'https' if tls else 'http'}://127.0.0.1:{port}{path}",
                                 method="POST", data=json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=ca) if tls else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def probe_doc(i):
    """The failover probe's write: a new PriorityClass (a small object committed to the store
    through the controller, with no effect on placement)."""
    return {"apiVersion": "tessera/v1", "kind": "PriorityClass",
            "metadata": {"name": f"failover-probe-{i:05d}"}, "value": 1}


def pctl(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100.0 * (len(v) - 1))))]


def one_run_failover(a, n, rep, tls):
    """A leader kill on two HA heads over a local 3-member etcd holding --seed-jobs jobs."""
    d = tempfile.mkdtemp(prefix="tessera-cp-failover-")
    current["dir"] = d
    result = {"mode": "failover", "agents": n, "tls": tls, "binary": a.tessera,
              "connection": a.connection, "seededJobs": a.seed_jobs,
              "seededPending": a.seed_pending,
              "electionLeaseMs": a.election_lease_ms,
              "electionRenewDeadlineMs": a.election_renew_deadline_ms,
              "electionRetryMs": a.election_retry_ms}
    clients = start_etcd(a.etcd, d)
    current["etcd_clients"] = clients
    store = "etcd://" + ",".join(f"127.0.0.1:{c}" for c in clients)
    if a.seed_jobs > 0:
        t = time.monotonic()
        out = subprocess.run([a.seed_bin, "--store", store, "--jobs", str(a.seed_jobs),
                              "--pending", str(a.seed_pending)],
                             capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            cleanup()
            return dict(result, failed="seeding: " + out.stderr[-1000:])
        seeded = json.loads(out.stdout.strip().splitlines()[-1])
        result.update({"seedS": round(time.monotonic() - t, 2),
                       "seedJobsPerS": round(seeded["jobs"] / max(seeded["seconds"], 1e-9), 1),
                       "seedCommits": seeded["commits"], "seedEvents": seeded["events"],
                       "seedJobMiB": round(seeded["jobBytes"] / 2**20, 1)})
        result["etcdDbMiBAfterSeed"] = round(etcd_figures(clients)[1] / 2**20, 1)
    ports = [free_port(), free_port()]
    logs, heads = [], []
    ca = os.path.join(d, "ca.crt")

    def start(i):
        log = open(os.path.join(d, f"head-{i}.log"), "w")
        logs.append(log)
        p = subprocess.Popen(
            [a.tessera, "head", "--state-dir", d, "--port", str(ports[i]), "--heartbeat-ms",
             "1000", "--lease-ms", "5000", "--store", store,
             "--election-lease-ms", str(a.election_lease_ms),
             "--election-renew-deadline-ms", str(a.election_renew_deadline_ms),
             "--election-retry-ms", str(a.election_retry_ms)] +
            ([] if tls else ["--plain-http"]) + list(a.head_arg),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        current["heads"].append(p)
        heads.append(p)
        return p

    def role(i):
        st, body = head_get(ports[i], tls, ca, "/v1/leader", timeout=1)
        return body if st == 200 and body else {}

    def wait_for(what, fn, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if fn():
                return True
            if any(p.poll() is not None for p in heads):
                raise RuntimeError(f"a head exited waiting for {what}; the heads' last lines:\n"
                                   + heads_tail())
            time.sleep(0.05)
        raise RuntimeError(f"timed out after {timeout} s waiting for {what}; the heads' last "
                           "lines:\n" + heads_tail())

    def heads_tail():
        # The state directory goes with the run: what the heads said goes into the error.
        return "\n".join(f"head-{i}: " + read_file(os.path.join(d, f"head-{i}.log"))[-1500:]
                         for i in range(len(heads)))

    try:
        t = time.monotonic()
        start(0)  # the first makes the shared tokens and CA, and leads
        wait_for("head 0 to lead", lambda: role(0).get("role") == "leader", a.setup_timeout)
        result["firstLeaderServingS"] = round(time.monotonic() - t, 2)
        start(1)
        wait_for("head 1 to stand by", lambda: role(1).get("role") == "standby" and
                 role(1).get("leader") == f"127.0.0.1:{ports[0]}", 120)
    except RuntimeError as e:
        cleanup()
        return dict(result, failed=str(e))
    token = read_file(os.path.join(d, "admin.token"))
    shards = a.shards or max(1, math.ceil(n / 8000))
    heads_arg = ",".join(f"127.0.0.1:{p}" for p in ports)  # the leader first
    window = a.failover_before + a.failover_after
    t0 = time.monotonic()
    procs = []
    for i in range(shards):
        cmd = [a.loadgen_bin, "--heads", heads_arg, "--join-token-file",
               os.path.join(d, "join.token"), "--agents", str(n), "--shard", f"{i}/{shards}",
               "--connection", a.connection, "--window", str(window), "--wait-go",
               "--seed", str(rep + 1), "--register-threads", str(a.register_threads),
               "--setup-timeout", str(a.setup_timeout)]
        if tls:
            cmd += ["--ca-file", ca]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    current["shards"] = procs
    result["shards"] = shards
    ready = [p.stdout.readline().strip() for p in procs]
    result["setupS"] = round(time.monotonic() - t0, 2)
    if any(r != "READY" for r in ready):
        cleanup()
        return dict(result, failed=f"a loadgen shard did not get ready ({ready})")
    job_errors = 0
    for i in range(a.jobs):
        st = head_post(ports[0], tls, ca, "/api/v1/jobs", job_doc(i), token, timeout=60)
        job_errors += st != 201
        if st == 0:  # no answer in 60 s: the head is saturated; the run would only wait more
            cleanup()
            return dict(result, failed=f"the leader did not answer POST /api/v1/jobs in 60 s "
                        f"(job {i}); see bench/README.md \"Failover at fleet scale\"",
                        registerS=None)
    result["jobCreateErrors"] = job_errors
    time.sleep(a.warmup)
    leader, survivor = heads[0], 1
    e0 = etcd_figures(clients)
    w0 = time.monotonic()
    for p in procs:
        p.stdin.write("GO\n")
        p.stdin.flush()
    time.sleep(a.failover_before)
    e1 = etcd_figures(clients)
    result["etcdWritesPerSBefore"] = round((e1[0] - e0[0]) / (time.monotonic() - w0), 1)
    for p in procs:
        p.stdin.write("MARK\n")
        p.stdin.flush()
    kill_wall_ms = time.time() * 1000
    k = time.monotonic()
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait(10)
    # kill -> the survivor says it was elected ("starting": loading) and serving ("leader");
    # kill -> the first write accepted by any head, tried every 50 ms at every head.
    elected = serving = written = None
    probe = 0
    while time.monotonic() - k < a.failover_after - 1 and (written is None or serving is None):
        now = time.monotonic() - k
        if serving is None:
            r = role(survivor).get("role")
            if r in ("starting", "leader") and elected is None:
                elected = now
            if r == "leader":
                serving = now
        if written is None:
            for port in ports:
                st = head_post(port, tls, ca, "/api/v1/apply", probe_doc(probe), token, timeout=2)
                if st in (200, 201):
                    written = time.monotonic() - k
                    break
            probe += 1
        time.sleep(0.05)
    remaining = a.failover_after - (time.monotonic() - k)
    if remaining > 0:
        time.sleep(remaining)
    e2 = etcd_figures(clients)
    result["etcdWritesPerSAfter"] = round((e2[0] - e1[0]) / (time.monotonic() - k), 1)
    result["etcdDbMiB"] = round(e2[1] / 2**20, 1)
    result["etcdDbInUseMiB"] = round(e2[2] / 2**20, 1)
    shard_results, failed = shard_reports(procs)
    if failed:
        return dict(result, failed=failed)
    new = ports[survivor]
    st, hosts = head_get(new, tls, ca, "/api/v1/hosts", token, timeout=60)
    states = {}
    for h in (hosts or {}).get("items", []):
        s_ = h.get("status", {}).get("state", "?")
        states[s_] = states.get(s_, 0) + 1
    st, events = head_get(new, tls, ca, "/api/v1/events", token, timeout=60)
    lost_events = sum(1 for e in (events or {}).get("items", [])
                      if e.get("reason") == "HostLost" and e.get("timeMs", 0) >= kill_wall_ms)
    rss = proc_rss_mib(heads[survivor].pid) if heads[survivor].poll() is None else None
    alive = heads[survivor].poll() is None
    for log in logs:
        log.flush()
    new_log = read_file(os.path.join(d, f"head-{survivor}.log"))
    first_log = read_file(os.path.join(d, "head-0.log"))

    def logged(text, pattern):
        import re
        m = re.findall(pattern, text)
        return m[-1] if m else None

    # The takeover's steps, timestamped in the new leader's log (ha_head.cc, head.cc): seconds
    # from the kill to each, and the load and first tick as the head timed them.
    import re
    takeover = {ph: round((int(ms) - kill_wall_ms) / 1000, 3) for ph, ms in
                re.findall(r"event=takeover phase=(\w+) term=\d+ unix_ms=(\d+)", new_log)}
    loaded = re.findall(r"event=loaded controller_ms=(\d+) metrics_seed_ms=(\d+) total_ms=(\d+)",
                        new_log)
    first_tick = re.findall(r"event=first_tick took_ms=(\d+) unix_ms=(\d+)", new_log)
    if first_tick:
        takeover["first_tick_done"] = round((int(first_tick[-1][1]) - kill_wall_ms) / 1000, 3)
    slow_ticks = [int(t) for t in re.findall(r"event=slow_tick took_ms=(\d+)", new_log)]
    serving_ms = logged(new_log, r"serving (\d+) ms after the election")
    caught_up = logged(new_log, r"caught up from revision (\d+) to (\d+)")
    first_serving_ms = logged(first_log, r"serving (\d+) ms after the election")
    cleanup()
    for log in logs:
        log.close()
    rejoin = [t - kill_wall_ms for r in shard_results
              for t in r.get("failover", {}).get("rejoined_unix_ms", [])]
    down = sum(r.get("failover", {}).get("agents_down", 0) for r in shard_results)
    not_rejoined = sum(r.get("failover", {}).get("agents_not_rejoined", 0) for r in shard_results)
    before = [r["before_mark"] for r in shard_results if "before_mark" in r]
    b_sent = sum(b["hb_sent"] for b in before)
    result.update({
        "registerS": round(max(r["register_s"] for r in shard_results), 2),
        "registerErrors": sum(r["register_errors"] for r in shard_results),
        # The part of the window before the kill: the fleet held.
        "beforeHeartbeatsPerS": round(sum(b["hb_per_s"] for b in before), 1),
        "beforeAnsweredUnder1sPct": round(100.0 * sum(b["hb_in_time"] for b in before) /
                                          max(b_sent, 1), 3),
        "beforeHeartbeatP99Ms": round(max((b["hb_p99_ms"] for b in before), default=0), 2),
        "beforeHeartbeatErrors": sum(b["hb_errors"] for b in before),
        # The failover.
        "killToElectedS": None if elected is None else round(elected, 3),
        "killToServingS": None if serving is None else round(serving, 3),
        "killToFirstWriteS": None if written is None else round(written, 3),
        "goalFirstWriteS": round(a.election_lease_ms / 1000 + 2, 3),
        "firstWriteWithinGoal": written is not None and written <= a.election_lease_ms / 1000 + 2,
        "newLeaderServingMsAfterElection": None if serving_ms is None else int(serving_ms),
        "newLeaderCaughtUpFromTo": None if caught_up is None else [int(x) for x in caught_up],
        "killToTakeoverPhaseS": takeover,
        "newLeaderLoadMs": None if not loaded else
            dict(zip(["controller", "metricsSeed", "total"], map(int, loaded[-1]))),
        "newLeaderFirstTickMs": None if not first_tick else int(first_tick[-1][0]),
        "newLeaderSlowTicksMs": slow_ticks[-20:],
        "firstLeaderServingMsAfterElection":
            None if first_serving_ms is None else int(first_serving_ms),
        "agentsDown": down,
        "agentsRejoined": len(rejoin),
        "agentsNotRejoined": not_rejoined,
        "killToAgentRejoinP50S": None if not rejoin else round(pctl(rejoin, 50) / 1000, 3),
        "killToAgentRejoinP99S": None if not rejoin else round(pctl(rejoin, 99) / 1000, 3),
        "killToEveryAgentRejoinedS": None if not rejoin or not_rejoined else
            round(max(rejoin) / 1000, 3),
        "headSwitches": sum(r.get("failover", {}).get("head_switches", 0) for r in shard_results),
        "channelRefusals": {k_: sum(r.get("failover", {}).get("refusal_statuses", {}).get(k_, 0)
                                    for r in shard_results)
                            for k_ in sorted({k2 for r in shard_results for k2 in
                                              r.get("failover", {}).get("refusal_statuses", {})})},
        "afterHeartbeatErrors": sum(r["hb_errors"] for r in shard_results),
        "afterHeartbeatErrorKinds": {k_: sum(r["hb_error_kinds"].get(k_, 0) for r in shard_results)
                                     for k_ in sorted({k2 for r in shard_results
                                                       for k2 in r["hb_error_kinds"]})},
        "hosts": states,
        "lostHosts": states.get("Lost", 0) + (n - sum(states.values())),
        "hostLostEventsAfterKill": lost_events,
        "newLeaderRssMiB": None if rss is None else round(rss, 1),
        "newLeaderAliveAtEnd": alive,
        "loadgenCpuPct": round(sum(r["loadgen_cpu_pct"] for r in shard_results), 1),
        "probeWrites": probe,
    })
    for r in shard_results:  # the per-agent times are summarised above
        r.get("failover", {}).pop("rejoined_unix_ms", None)
    result["shardResults"] = shard_results
    return result


def one_run(a, n, rep, tls):
    """One head and one loadgen.py: over TLS (verified against the head's CA) when `tls`, else
    plain HTTP to a head started with --plain-http."""
    head, d, port, log = start_head(a.tessera, tls, a.head_arg)
    cmd = [sys.executable, os.path.join(HERE, "loadgen.py"), "--port", str(port),
           "--join-token", read_file(os.path.join(d, "join.token")),
           "--admin-token", read_file(os.path.join(d, "admin.token")),
           "--head-pid", str(head.pid), "--agents", str(n), "--jobs", str(a.jobs),
           "--window", str(a.window), "--get-jobs", str(a.get_jobs), "--seed", str(rep + 1)]
    if tls:
        cmd += ["--ca-file", os.path.join(d, "ca.crt")]
    lg = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    current["loadgen"] = lg
    try:
        out, _ = lg.communicate(timeout=a.window + 300)
    except subprocess.TimeoutExpired:
        lg.kill()
        out, _ = lg.communicate()
    current["loadgen"] = None
    alive = head.poll() is None
    cleanup()
    log.close()
    if lg.returncode != 0 or not out.strip():
        return {"agents": n, "tls": tls, "failed": f"loadgen exit {lg.returncode}",
                "head_alive": alive}
    r = json.loads(out.strip().splitlines()[-1])
    r["tls"] = tls
    r["head_alive_at_end"] = alive
    # The names the C++ generator's runs use, so --json files compare.
    r.update({"registerS": r["register_s"], "heartbeatP99Ms": r["hb_p99_ms"],
              "answeredUnder1sPct": r["hb_in_time_pct"],
              "lostHosts": r["hosts"].get("Lost", 0) + (n - sum(
                  v for v in r["hosts"].values() if isinstance(v, int))),
              "headCpuPct": r["head_cpu_pct"], "headRssMiB": r["head_rss_mb"],
              "loadgenCpuPct": r["loadgen_cpu_pct"], "binary": a.tessera})
    return r


CC_COLUMNS = [
    ("head", "head"), ("agents", "agents"), ("connection", "connections per agent"),
    ("registerS", "register all (s)"), ("heartbeatsPerS", "heartbeats/s"),
    ("answeredUnder1sPct", "answered < 1 s (%)"), ("heartbeatP50Ms", "heartbeat p50 (ms)"),
    ("heartbeatP99Ms", "heartbeat p99 (ms)"), ("lostHosts", "lost hosts"),
    ("headCpuPct", "head CPU (% of 1 core)"), ("headRssMiB", "head RSS (MiB)"),
    ("loadgenCpuPct", "loadgen CPU (%)"), ("etcdWritesPerS", "etcd writes/s"),
]


def cc_table(runs):
    lines = ["| " + " | ".join(c[1] for c in CC_COLUMNS) + " |", "|" + "---|" * len(CC_COLUMNS)]
    groups = {}
    for r in runs:
        groups.setdefault((r["head"], r["agents"], r["tls"]), []).append(r)
    for (binary, n, tls), rs in groups.items():
        ok = [r for r in rs if "failed" not in r]
        if not ok:
            lines.append(f"| {binary} | {n:,} | failed: {rs[0].get('failed')} |")
            continue
        row = []
        for key, _ in CC_COLUMNS:
            if key == "head":
                row.append(binary + ("" if tls else ", plain HTTP"))
            elif key == "agents":
                row.append(f"{n:,}" + (f" (x{len(ok)})" if len(ok) > 1 else ""))
            elif key == "connection":
                row.append("1" if ok[0]["connection"] == "one" else "2")
            elif key == "lostHosts":
                row.append(str(max(r["lostHosts"] for r in ok)))
            else:
                row.append(fmt(median(ok, key)))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


FAILOVER_COLUMNS = [
    ("agents", "agents"), ("seededJobs", "stored jobs"), ("seedS", "seeding (s)"),
    ("electionLeaseMs", "election lease (ms)"), ("killToFirstWriteS", "kill -> first write (s)"),
    ("killToServingS", "kill -> new leader serving (s)"),
    ("newLeaderServingMsAfterElection", "election -> serving (ms)"),
    ("killToAgentRejoinP99S", "kill -> agents back p99 (s)"),
    ("killToEveryAgentRejoinedS", "kill -> every agent back (s)"),
    ("lostHosts", "hosts lost"), ("hostLostEventsAfterKill", "HostLost events"),
    ("beforeAnsweredUnder1sPct", "answered < 1 s before (%)"),
    ("etcdWritesPerSBefore", "etcd writes/s before"), ("etcdWritesPerSAfter", "etcd writes/s after"),
]


def failover_table(runs):
    lines = ["| " + " | ".join(c[1] for c in FAILOVER_COLUMNS) + " |",
             "|" + "---|" * len(FAILOVER_COLUMNS)]
    for r in runs:
        if "failed" in r:
            lines.append(f"| {r['agents']:,} | {r.get('seededJobs', 0):,} | failed: {r['failed']} |")
            continue
        row = []
        for key, _ in FAILOVER_COLUMNS:
            v = r.get(key)
            row.append(f"{v:,}" if key in ("agents", "seededJobs") else fmt(v))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


COLUMNS = [
    ("agents", "agents", None),
    ("tls", "TLS", None),
    ("register_s", "register all (s)", None),
    ("hb_per_s", "heartbeats/s", None),
    ("hb_in_time_pct", "answered < 1 s (%)", None),
    ("hb_p99_ms", "heartbeat p99 (ms)", None),
    ("ready", "Ready / Lost hosts", None),
    ("head_cpu_pct", "head CPU (% of 1 core)", None),
    ("head_rss_mb", "head RSS (MiB)", None),
    ("get_jobs_p50_ms", "get jobs p50 (ms)", None),
    ("get_jobs_p99_ms", "get jobs p99 (ms)", None),
    ("loadgen_cpu_pct", "loadgen CPU (%)", None),
]


def median(rs, key):
    vals = [r[key] for r in rs if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return str(v)


def table(results):
    lines = ["| " + " | ".join(c[1] for c in COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    for n, tls in sorted(results):
        rs = [r for r in results[(n, tls)] if "failed" not in r]
        if not rs:
            lines.append(f"| {n} | {'on' if tls else 'off'} | failed: "
                         f"{results[(n, tls)][0].get('failed')} |")
            continue
        row = []
        for key, _, _ in COLUMNS:
            if key == "agents":
                row.append(f"{n:,}" + (f" (x{len(rs)})" if len(rs) > 1 else ""))
            elif key == "tls":
                row.append("on" if tls else "off (--plain-http)")
            elif key == "ready":
                ready = [r["hosts"].get("Ready", 0) for r in rs]
                lost = [r["hosts"].get("Lost", 0) for r in rs]
                row.append(f"{min(ready)} / {max(lost)}")
            else:
                row.append(fmt(median(rs, key)))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


TLS_MODES = {"on": [True], "off": [False], "both": [True, False]}


def record(a, r):
    """Stamps a run's result with the load average, prints it and appends it to --json."""
    r["load_avg_1m"] = round(os.getloadavg()[0], 1)
    print(json.dumps(r), file=sys.stderr, flush=True)
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(r) + "\n")
    return r


def main():
    p = argparse.ArgumentParser(description="tessera control-plane benchmark")
    p.add_argument("--tessera", default="build/h-cp-rel/bin/tessera")
    p.add_argument("--agents", default="100,500,1000,2000", help="comma-separated agent counts")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--window", type=float, default=25.0)
    p.add_argument("--jobs", type=int, default=50)
    p.add_argument("--get-jobs", type=int, default=2000)
    p.add_argument("--json", help="append every run's result to this file (JSON lines)")
    p.add_argument("--loadgen", choices=["cc", "py"], default="cc",
                   help="the C++ generator (default) or loadgen.py")
    p.add_argument("--loadgen-bin", help="tessera_loadgen (default: ../bench/tessera_loadgen "
                   "beside the tessera binary's directory)")
    p.add_argument("--connection", choices=["one", "two"], default="one",
                   help="C++ generator: the agent channel (one connection per agent) or the "
                   "heartbeat POSTs beside the watch stream (two)")
    p.add_argument("--baseline", help="another tessera binary run first for each agent count, "
                   "side by side (C++ generator)")
    p.add_argument("--baseline-connection", choices=["one", "two"], default="two")
    p.add_argument("--shards", type=int, default=0,
                   help="loadgen processes (0: one per 8,000 connections)")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--head-arg", action="append", default=[],
                   help="one more argument for every head started (repeat it), e.g. "
                        "--head-arg=--io-threads=2")
    p.add_argument("--register-threads", type=int, default=8)
    p.add_argument("--setup-timeout", type=float, default=120.0,
                   help="C++ generator: s for registration and every agent's first snapshot")
    p.add_argument("--tls", choices=["on", "off", "both"], default="on",
                   help="the agents speak TLS to the head (on, the default as for real agents), "
                   "plain HTTP to a --plain-http head (off), or each in turn, side by side "
                   "(both: the TLS cost, bench/README.md)")
    p.add_argument("--etcd", help="etcd binary: every head stores on a fresh local 3-member "
                   "etcd cluster (--store etcd://...), its write rate reported")
    p.add_argument("--failover", action="store_true",
                   help="with --etcd: a leader kill on two HA heads instead of the steady run "
                   "(bench/README.md \"Failover at fleet scale\")")
    p.add_argument("--seed-jobs", type=int, default=0,
                   help="--failover: TrainJobs put into etcd before the heads start "
                   "(tessera_seed_store)")
    p.add_argument("--seed-pending", type=int, default=0,
                   help="--failover: how many of --seed-jobs are Pending (8x8, never placed); "
                   "the rest Succeeded")
    p.add_argument("--seed-bin", help="tessera_seed_store (default: beside tessera_loadgen)")
    p.add_argument("--election-lease-ms", type=int, default=2000)
    p.add_argument("--election-renew-deadline-ms", type=int, default=1200)
    p.add_argument("--election-retry-ms", type=int, default=300)
    p.add_argument("--failover-before", type=float, default=10.0,
                   help="--failover: s of the window before the kill")
    p.add_argument("--failover-after", type=float, default=30.0,
                   help="--failover: s of the window from the kill on")
    a = p.parse_args()
    a.tessera = os.path.abspath(a.tessera)
    if a.failover and not a.etcd:
        sys.exit("run.py: --failover needs --etcd BIN (the heads elect their leader in etcd)")
    if a.failover and a.connection != "one":
        sys.exit("run.py: --failover needs --connection one (the agent channel)")
    if a.failover and a.baseline:
        sys.exit("run.py: --failover runs one binary: drop --baseline")
    if a.failover and a.failover_after < 5:
        sys.exit("run.py: --failover-after: at least 5 s")
    if a.seed_jobs < 0 or not 0 <= a.seed_pending <= max(a.seed_jobs, 0):
        sys.exit("run.py: --seed-jobs >= 0 and 0 <= --seed-pending <= --seed-jobs")
    if a.etcd:
        a.etcd = shutil.which(a.etcd) or a.etcd
        if not os.access(a.etcd, os.X_OK):
            sys.exit(f"run.py: --etcd {a.etcd} is not executable (Debian: apt install "
                     "etcd-server)")
        if a.loadgen != "cc":
            sys.exit("run.py: --etcd needs the C++ generator (--loadgen cc)")
    if a.loadgen == "cc":
        a.loadgen_bin = os.path.abspath(a.loadgen_bin or os.path.join(
            os.path.dirname(os.path.dirname(a.tessera)), "bench", "tessera_loadgen"))
        if not os.access(a.loadgen_bin, os.X_OK):
            sys.exit(f"run.py: {a.loadgen_bin} is not executable (build the tessera_loadgen "
                     "target, or give --loadgen-bin, or use --loadgen py)")
        if a.baseline:
            a.baseline = os.path.abspath(a.baseline)
        a.seed_bin = os.path.abspath(a.seed_bin or os.path.join(
            os.path.dirname(a.loadgen_bin), "tessera_seed_store"))
        if a.failover and a.seed_jobs > 0 and not os.access(a.seed_bin, os.X_OK):
            sys.exit(f"run.py: {a.seed_bin} is not executable (build the tessera_seed_store "
                     "target, or give --seed-bin)")
    if not os.access(a.tessera, os.X_OK):
        sys.exit(f"run.py: {a.tessera} is not executable (build it first, see bench/README.md)")
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    # Each agent holds 2 connections on each side: raise the fd limit for the head and us.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    print(f"fd limit {want} (hard {hard}); {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    results = {}
    if a.failover:
        runs = []
        try:
            for rep in range(a.repeat):
                for n in [int(x) for x in a.agents.split(",")]:
                    for tls in TLS_MODES[a.tls]:
                        runs.append(record(a, one_run_failover(a, n, rep, tls)))
        finally:
            cleanup()
        print(failover_table(runs))
        return
    if a.loadgen == "cc":
        runs = []
        try:
            for rep in range(a.repeat):
                for n in [int(x) for x in a.agents.split(",")]:
                    for tls in TLS_MODES[a.tls]:
                        heads = ([(a.baseline, a.baseline_connection)] if a.baseline else [])
                        for binary, connection in heads + [(a.tessera, a.connection)]:
                            r = one_run_cc(a, binary, n, rep, tls, connection)
                            r["head"] = "baseline" if binary == a.baseline else "this"
                            runs.append(record(a, r))
        finally:
            cleanup()
        print(cc_table(runs))
        return
    try:
        for rep in range(a.repeat):
            for n, tls in [(int(x), tls) for x in a.agents.split(",")
                           for tls in TLS_MODES[a.tls]]:
                results.setdefault((n, tls), []).append(record(a, one_run(a, n, rep, tls)))
    finally:
        cleanup()
    print(table(results))


if __name__ == "__main__":
    main()
