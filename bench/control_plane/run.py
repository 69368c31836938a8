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
its database size at the end.

  bench/control_plane/run.py --tessera build/release/bin/tessera --agents 1000,10000 --json out.json
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
current = {"head": None, "loadgen": None, "dir": None, "shards": [], "etcd": []}


def cleanup():
    for p in current["shards"]:
        if p.poll() is None:
            p.kill()
            p.wait(5)
    current["shards"] = []
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
    """The raft leader's committed proposals (one per write) and the database size in bytes."""
    committed, size = 0.0, 0.0
    for c in clients:
        for line in etcd_call(c, "/metrics", timeout=5)[1].splitlines():
            if line.startswith("etcd_server_proposals_committed_total "):
                committed = max(committed, float(line.split()[1]))
            elif line.startswith("etcd_mvcc_db_total_size_in_bytes "):
                size = max(size, float(line.split()[1]))
    return committed, size


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
    rss = proc_rss_mib(head.pid)
    shard_results = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        lines = [l for l in out.splitlines() if l.startswith("{")]
        if p.returncode != 0 or not lines:
            cleanup()
            return dict(result, failed=f"loadgen shard exit {p.returncode}")
        shard_results.append(json.loads(lines[-1]))
    current["shards"] = []
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
    a = p.parse_args()
    a.tessera = os.path.abspath(a.tessera)
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
    if a.loadgen == "cc":
        runs = []
        try:
            for rep in range(a.repeat):
                for n in [int(x) for x in a.agents.split(",")]:
                    for tls in {"on": [True], "off": [False], "both": [True, False]}[a.tls]:
                        heads = ([(a.baseline, a.baseline_connection)] if a.baseline else [])
                        for binary, connection in heads + [(a.tessera, a.connection)]:
                            r = one_run_cc(a, binary, n, rep, tls, connection)
                            r["head"] = "baseline" if binary == a.baseline else "this"
                            r["load_avg_1m"] = round(os.getloadavg()[0], 1)
                            print(json.dumps(r), file=sys.stderr, flush=True)
                            if a.json:
                                with open(a.json, "a") as f:
                                    f.write(json.dumps(r) + "\n")
                            runs.append(r)
        finally:
            cleanup()
        print(cc_table(runs))
        return
    try:
        for rep in range(a.repeat):
            for n, tls in [(int(x), tls) for x in a.agents.split(",")
                           for tls in {"on": [True], "off": [False], "both": [True, False]}[a.tls]]:
                r = one_run(a, n, rep, tls)
                r["load_avg_1m"] = round(os.getloadavg()[0], 1)
                print(json.dumps(r), file=sys.stderr, flush=True)
                if a.json:
                    with open(a.json, "a") as f:
                        f.write(json.dumps(r) + "\n")
                results.setdefault((n, tls), []).append(r)
    finally:
        cleanup()
    print(table(results))


if __name__ == "__main__":
    main()
