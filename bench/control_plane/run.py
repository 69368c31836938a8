#!/usr/bin/env python3
"""Control-plane benchmark driver.

For each agent count N (and each repetition) it starts a real `tessera head` on a fresh temp
state directory (loopback, ephemeral port, --heartbeat-ms 1000 --lease-ms 5000), runs
loadgen.py against it (N emulated agents + 50 TrainJobs + a GET /api/v1/jobs client), stops
the head (SIGTERM, then SIGKILL after 10 s) and removes the state directory. Prints one JSON
line per run on stderr and a Markdown table of medians on stdout.

  bench/control_plane/run.py --tessera build/h-cp-rel/bin/tessera --agents 100,500,1000,2000
"""

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
current = {"head": None, "loadgen": None, "dir": None}


def cleanup():
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
    if current["dir"]:
        shutil.rmtree(current["dir"], ignore_errors=True)
        current["dir"] = None


def on_signal(signum, _frame):
    cleanup()
    sys.exit(128 + signum)


def read_file(path):
    with open(path) as f:
        return f.read().strip()


def one_run(a, n, rep, tls):
    """One head and one loadgen: over TLS (verified against the head's CA) when `tls`, else
    plain HTTP to a head started with --plain-http."""
    d = tempfile.mkdtemp(prefix="tessera-cp-bench-")
    current["dir"] = d
    log = open(os.path.join(d, "head.log"), "w")
    head = subprocess.Popen(
        [a.tessera, "head", "--state-dir", d, "--port", "0", "--heartbeat-ms", "1000",
         "--lease-ms", "5000"] + ([] if tls else ["--plain-http"]),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    current["head"] = head
    deadline = time.monotonic() + 30
    port = 0
    while port == 0:
        if time.monotonic() > deadline or head.poll() is not None:
            raise RuntimeError("the head did not start; see " + log.name)
        try:
            h = json.loads(read_file(os.path.join(d, "head.json")))
            if h.get("pid") == head.pid:
                port = h["port"]
        except (OSError, ValueError):
            pass
        if port == 0:
            time.sleep(0.05)
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
    return r


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
    p.add_argument("--tls", choices=["on", "off", "both"], default="on",
                   help="the agents speak TLS to the head (on, the default as for real agents), "
                   "plain HTTP to a --plain-http head (off), or each in turn, side by side "
                   "(both: the TLS cost, bench/README.md)")
    a = p.parse_args()
    a.tessera = os.path.abspath(a.tessera)
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
