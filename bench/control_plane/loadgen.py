#!/usr/bin/env python3
"""Control-plane load generator: N emulated tessera agents against one running head.

Standard library only (asyncio, raw HTTP/1.1 over asyncio streams). Speaks the agent
protocol of docs/agent-protocol.md: every request carries the join token, and each emulated
agent has its own host credential (64 random hex digits, like `tessera agent`'s
<state>/credential), sent as "credential" when it registers and in X-Tessera-Host-Credential
on every later call. Per emulated agent:
  1. POST /api/v1/agents/register (a v6e host of a 4x4 slice, 4 hosts per slice),
  2. GET  /api/v1/agents/<name>/assignments?watch=true on its own long-lived connection
     (chunked JSON lines, read and counted),
  3. POST /api/v1/agents/<name>/heartbeat at 1 Hz on one keep-alive connection, each agent
     starting at a random offset in the first second so the load spreads evenly. Emulated
     agents run no workers, so their heartbeats report no workers and no progress (nothing
     that would carry a job's uid).
With --ca-file (a head serving HTTPS) each emulated agent first gets its host certificate as
`tessera agent` does (POST /api/v1/agents/bootstrap with the join token and a certificate
request made by the `openssl` command; one EC key shared by all emulated agents), and presents
it on every later connection: the head authorises agent calls by it (docs/security.md).
Meanwhile it creates --jobs small TrainJobs (admin token) and one client sends
GET /api/v1/jobs at a steady rate, timing each answer.

The measurement window starts after registration, stream setup, job creation and a warm-up.
Over the window it reads the head's CPU time (/proc/<pid>/stat utime+stime) and, at the end,
its RSS (/proc/<pid>/status VmRSS), its own CPU time, and GET /api/v1/hosts (Ready / Lost).
Prints one JSON object on stdout. Every phase is bounded in time.
"""

import argparse
import asyncio
import json
import os
import random
import resource
import secrets
import subprocess
import tempfile
import ssl
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is state (field 3); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu_s(pid):
    """{tid: cpu seconds} for every thread of pid."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = proc_cpu_s(f"{pid}/task/{tid}")
        except OSError:
            pass
    return out


def proc_status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def proc_threads(pid):
    return proc_status_kb(pid, "Threads")


def self_cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


# The client TLS context every connection uses: None for a head started with --plain-http, else
# one that verifies the head against --ca-file (set once in main, before any connection).
TLS = None


def connect(host, port, tls=None):
    """A connection with `tls` (an agent's context holding its host certificate) or TLS."""
    return asyncio.open_connection(host, port, ssl=tls or TLS)


class HttpError(Exception):
    pass


def credential_header(credential):
    """The header line an agent sends its host credential in ("" when it has none)."""
    return f"X-Tessera-Host-Credential: {credential}\r\n" if credential else ""


class Conn:
    """One keep-alive HTTP/1.1 connection (requests are sequential on it). `credential`: the
    emulated agent's host credential, sent on every request (None for the admin client)."""

    def __init__(self, host, port, token, credential=None, tls=None):
        self.host, self.port, self.token = host, port, token
        self.credential = credential
        self.tls = tls
        self.reader = self.writer = None

    async def open(self):
        self.reader, self.writer = await connect(self.host, self.port, self.tls)

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    async def request(self, method, path, body=None, timeout=10.0):
        if self.writer is None:
            await asyncio.wait_for(self.open(), timeout)
        data = b"" if body is None else body
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Authorization: Bearer {self.token}\r\nContent-Length: {len(data)}\r\n"
                + credential_header(self.credential))
        if body is not None:
            head += "Content-Type: application/json\r\n"
        self.writer.write(head.encode() + b"\r\n" + data)
        try:
            return await asyncio.wait_for(self._read_response(), timeout)
        except BaseException:
            self.close()  # the connection is in an unknown state
            raise

    async def _read_response(self):
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, body


class Stats:
    def __init__(self):
        self.reset()

    def reset(self):
        self.hb_sent = 0
        self.hb_ok = 0  # 200 answers
        self.hb_in_time = 0  # 200 within the deadline of their send
        self.hb_late = 0  # 200 after the deadline
        self.hb_errors = 0  # non-200, timeouts, transport errors
        self.hb_send_lag = 0  # sent more than 100 ms after schedule (generator behind)
        self.hb_lat = []
        self.error_kinds = {}

    def error(self, kind):
        self.hb_errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1


async def watch_stream(host, port, token, credential, tls, name, counters, stop):
    """Holds the agent's assignment watch open; counts snapshot lines. Reconnects on end."""
    path = f"/api/v1/agents/{name}/assignments?watch=true"
    while not stop.is_set():
        writer = None
        try:
            reader, writer = await asyncio.wait_for(connect(host, port, tls), 10)
            writer.write((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                          f"Authorization: Bearer {token}\r\n"
                          f"{credential_header(credential)}\r\n").encode())
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            status = int(raw.split(b" ", 2)[1])
            if status != 200:
                counters["watch_errors"] += 1
                kinds = counters["watch_error_kinds"]
                kinds[f"http {status}"] = kinds.get(f"http {status}", 0) + 1
                await asyncio.sleep(1)
                continue
            counters["watch_open"] += 1
            first = True
            while not stop.is_set():
                size_line = await reader.readline()
                if not size_line:
                    break
                size = int(size_line.split(b";")[0], 16)
                chunk = await reader.readexactly(size + 2)
                if size == 0:
                    break
                n = chunk.count(b"\n") - 1  # JSON lines in this chunk (the chunk ends in CRLF)
                counters["snapshots"] += max(n, 1)
                if first:
                    counters["watch_first_snapshot"] += 1
                    first = False
            counters["watch_open"] -= 1
            if not stop.is_set():
                counters["watch_reconnects"] += 1
        except asyncio.CancelledError:
            raise
        except Exception:
            counters["watch_errors"] += 1
            if not stop.is_set():
                await asyncio.sleep(1)
        finally:
            if writer is not None:
                writer.close()


def host_body(i, credential):
    return json.dumps({
        "name": f"cp-{i:05d}", "generation": "v6e", "chips": 4, "address": "127.0.0.1",
        "agentPort": 1,
        "slice": {"name": f"slice-{i // 4:05d}", "topology": "4x4", "worker": i % 4},
        "credential": credential,
    }).encode()


async def register(conn, i, sem, deadline, reg):
    """Registers agent i on its (later heartbeat) connection, retrying; True when accepted."""
    async with sem:
        for _ in range(50):
            if time.monotonic() > deadline:
                break
            t = time.monotonic()
            try:
                st, body = await conn.request("POST", "/api/v1/agents/register",
                                              host_body(i, conn.credential), timeout=30)
                if st == 200:
                    reg["lat"].append(time.monotonic() - t)
                    reg["done_at"] = time.monotonic()
                    return True
                print(f"register cp-{i:05d}: {st} {body[:200]!r}", file=sys.stderr)
            except Exception as e:  # noqa: BLE001 - retried, reported below
                print(f"register cp-{i:05d}: {type(e).__name__} {e}", file=sys.stderr)
            await asyncio.sleep(0.2)
    reg["errors"] += 1
    return False


class HostCerts:
    """Host certificates for the emulated agents (a head serving HTTPS): one EC key for all, a
    certificate request per host made by `openssl req`, signed by the head at bootstrap."""

    def __init__(self, ca_file):
        self.ca_file = ca_file
        self.dir = tempfile.TemporaryDirectory(prefix="tessera-loadgen-")
        self.key = os.path.join(self.dir.name, "host.key")
        subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout",
                        "-out", self.key], check=True, capture_output=True)

    async def bootstrap(self, a, name):
        """The SSL context of host `name`, holding the certificate the head signed for it."""
        proc = await asyncio.create_subprocess_exec(
            "openssl", "req", "-new", "-key", self.key, "-subj", f"/CN=host:{name}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        csr, err = await proc.communicate()
        if proc.returncode != 0:
            raise HttpError(f"openssl req for {name}: {err.decode()[:200]}")
        conn = Conn(a.host, a.port, a.join_token)
        try:
            st, body = await conn.request(
                "POST", "/api/v1/agents/bootstrap",
                json.dumps({"name": name, "csr": csr.decode()}).encode(), timeout=30)
        finally:
            conn.close()
        if st != 200:
            raise HttpError(f"bootstrap {name}: {st} {body[:200]!r}")
        cert = os.path.join(self.dir.name, name + ".crt")
        with open(cert, "w") as f:
            f.write(json.loads(body)["certificate"])
        tls = ssl.create_default_context(cafile=self.ca_file)
        tls.load_cert_chain(cert, self.key)
        return tls


async def agent(a, i, sem, deadline, reg, stats, counters, stop, tasks):
    """One emulated agent: register, open the watch stream, heartbeat at 1 Hz (like
    src/agent: heartbeats start at once after registration)."""
    # A new credential per run: against a head that already knows these names (a second run
    # on the same state directory) registration is refused with 409 until the hosts are
    # deleted (`tessera delete host NAME`), as for a real agent with a new credential.
    name = f"cp-{i:05d}"
    tls = None
    if a.host_certs is not None:
        async with sem:
            try:
                tls = await a.host_certs.bootstrap(a, name)
            except Exception as e:  # noqa: BLE001 - counted as a registration error
                print(f"bootstrap {name}: {type(e).__name__} {e}", file=sys.stderr)
                reg["errors"] += 1
                return
    conn = Conn(a.host, a.port, a.join_token, secrets.token_hex(32), tls)
    try:
        if not await register(conn, i, sem, deadline, reg):
            return
        tasks.append(asyncio.create_task(
            watch_stream(a.host, a.port, a.join_token, conn.credential, tls, name, counters,
                         stop)))
        await heartbeat_agent(conn, name, time.monotonic(), random.random(), stats, stop,
                              a.deadline)
    finally:
        conn.close()


async def heartbeat_agent(conn, name, t0, offset, stats, stop, deadline_s):
    body = b'{"workers":[],"progress":[],"revision":0}'
    path = f"/api/v1/agents/{name}/heartbeat"
    k = 0
    while not stop.is_set():
        sched = t0 + offset + k
        now = time.monotonic()
        if sched > now:
            try:
                await asyncio.wait_for(stop.wait(), sched - now)
                return
            except asyncio.TimeoutError:
                pass
        now = time.monotonic()
        if now - sched > 0.1:
            stats.hb_send_lag += 1
        # A heartbeat that falls more than one period behind skips the missed periods.
        k = max(k + 1, int(now - t0 - offset) + 1)
        stats.hb_sent += 1
        t = time.monotonic()
        try:
            st, _ = await conn.request("POST", path, body, timeout=deadline_s * 5)
            dt = time.monotonic() - t
            if st == 200:
                stats.hb_ok += 1
                stats.hb_lat.append(dt)
                if dt <= deadline_s:
                    stats.hb_in_time += 1
                else:
                    stats.hb_late += 1
            else:
                stats.error(f"http {st}")
        except asyncio.CancelledError:
            raise
        except asyncio.TimeoutError:
            stats.error("timeout")
        except Exception as e:  # noqa: BLE001 - counted
            stats.error(type(e).__name__)


async def get_jobs_client(host, port, token, count, window_s, stop, out):
    """Sends up to `count` GET /api/v1/jobs spread evenly over window_s from one connection
    (one at a time: when answers are slower than the interval, fewer are sent)."""
    conn = Conn(host, port, token)
    interval = window_s / max(count, 1)
    t0 = time.monotonic()
    for i in range(count):
        if stop.is_set() or time.monotonic() >= t0 + window_s:
            break
        wait = t0 + i * interval - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        t = time.monotonic()
        try:
            st, body = await conn.request("GET", "/api/v1/jobs", timeout=10)
            if st == 200:
                out["lat"].append(time.monotonic() - t)
                out["bytes"] = len(body)
            else:
                out["errors"] += 1
        except Exception:  # noqa: BLE001 - counted
            out["errors"] += 1
    conn.close()


def job_doc(i):
    return json.dumps({
        "apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": f"cp-job-{i:03d}"},
        "spec": {"accelerator": "v6e", "topology": "4x4", "slices": 1,
                 "template": {"command": ["true"]}},
    }).encode()


async def main_async(a):
    result = {"agents": a.agents, "window_s": a.window}
    phase_deadline = time.monotonic() + a.setup_timeout
    stop = asyncio.Event()
    stats = Stats()
    counters = {"watch_open": 0, "watch_first_snapshot": 0, "snapshots": 0, "watch_errors": 0,
                "watch_reconnects": 0, "watch_error_kinds": {}}
    reg = {"lat": [], "errors": 0, "done_at": 0.0}
    sem = asyncio.Semaphore(a.register_concurrency)
    watch_tasks = []
    t0 = time.monotonic()
    tasks = [asyncio.create_task(
        agent(a, i, sem, phase_deadline, reg, stats, counters, stop, watch_tasks))
        for i in range(a.agents)]
    while len(reg["lat"]) + reg["errors"] < a.agents and time.monotonic() < phase_deadline:
        await asyncio.sleep(0.05)
    reg_lat = reg["lat"]
    result["register_s"] = round(reg["done_at"] - t0, 3)
    result["register_errors"] = a.agents - len(reg_lat)
    result["register_p50_ms"] = round(1000 * (pct(reg_lat, 50) or 0), 2)
    result["register_p99_ms"] = round(1000 * (pct(reg_lat, 99) or 0), 2)
    # Mean latency of the first and the last 10% of registrations (does registration slow
    # down as the fleet grows?).
    tenth = max(1, len(reg_lat) // 10)
    result["register_first10pct_mean_ms"] = round(1000 * sum(reg_lat[:tenth]) / tenth, 2)
    result["register_last10pct_mean_ms"] = round(1000 * sum(reg_lat[-tenth:]) / tenth, 2)
    print(f"[loadgen] {len(reg_lat)} of {a.agents} registered in {result['register_s']} s",
          file=sys.stderr)

    admin = Conn(a.host, a.port, a.admin_token)
    job_err = 0
    for i in range(a.jobs):
        try:
            st, body = await admin.request("POST", "/api/v1/jobs", job_doc(i), timeout=30)
            if st != 201:
                job_err += 1
                print(f"[loadgen] create job: {st} {body[:200]!r}", file=sys.stderr)
        except Exception as e:  # noqa: BLE001 - counted
            job_err += 1
            print(f"[loadgen] create job: {type(e).__name__} {e}", file=sys.stderr)
    result["job_create_errors"] = job_err

    # Wait for every watch stream's first snapshot (bounded), then warm up.
    while counters["watch_first_snapshot"] < a.agents and time.monotonic() < phase_deadline:
        await asyncio.sleep(0.1)
    result["watch_setup_s"] = round(time.monotonic() - t0, 3)
    await asyncio.sleep(a.warmup)

    # ---- measurement window ----
    stats.reset()
    gj = {"lat": [], "errors": 0, "bytes": 0}
    threads0 = thread_cpu_s(a.head_pid)
    head_cpu0, self_cpu0, w0 = proc_cpu_s(a.head_pid), self_cpu_s(), time.monotonic()
    gj_task = asyncio.create_task(
        get_jobs_client(a.host, a.port, a.admin_token, a.get_jobs, a.window, stop, gj))
    await asyncio.sleep(a.window)
    w1 = time.monotonic()
    head_cpu1, self_cpu1 = proc_cpu_s(a.head_pid), self_cpu_s()
    threads1 = thread_cpu_s(a.head_pid)
    rss_kb = proc_status_kb(a.head_pid, "VmRSS")
    hwm_kb = proc_status_kb(a.head_pid, "VmHWM")
    threads = proc_threads(a.head_pid)
    snap = dict(hb_sent=stats.hb_sent, hb_ok=stats.hb_ok, hb_in_time=stats.hb_in_time,
                hb_late=stats.hb_late, hb_errors=stats.hb_errors, hb_send_lag=stats.hb_send_lag,
                error_kinds=dict(stats.error_kinds), hb_lat=list(stats.hb_lat))
    # Hosts as the head sees them, while heartbeats are still flowing.
    states = {}
    try:
        st, body = await admin.request("GET", "/api/v1/hosts", timeout=30)
        for h in json.loads(body)["items"]:
            s = h.get("status", {}).get("state", "?")
            states[s] = states.get(s, 0) + 1
    except Exception as e:  # noqa: BLE001 - reported
        states["error"] = f"{type(e).__name__} {e}"
    # HostLost events over the whole run (setup included): a lease that expired at any time.
    lost_events = None
    try:
        st, body = await admin.request("GET", "/api/v1/events", timeout=30)
        lost_events = sum(1 for e in json.loads(body)["items"]
                          if "HostLost" in json.dumps(e))
    except Exception as e:  # noqa: BLE001 - reported
        print(f"[loadgen] events: {type(e).__name__} {e}", file=sys.stderr)
    try:
        await asyncio.wait_for(gj_task, 15)
    except asyncio.TimeoutError:
        gj_task.cancel()
    admin.close()
    stop.set()
    done, pending = await asyncio.wait(tasks + watch_tasks, timeout=10)
    for p in pending:
        p.cancel()

    win = w1 - w0
    # Per-thread CPU of the head in the window, busiest first (tid order: main, io threads,
    # controller loop, ... as they were started).
    tids = sorted(int(t) for t in threads1)
    # Head::Start starts the server's io threads (HeadOptions::io_threads = 2), then the loop.
    names = (["main", "io-1", "io-2", "loop"] if len(tids) == 4
             else [f"t{i}" for i in range(len(tids))])
    per_thread = {names[i]: round(100.0 * (threads1[str(t)] - threads0.get(str(t), 0.0)) / win, 1)
                  for i, t in enumerate(tids)}
    lat = snap.pop("hb_lat")
    result.update(snap)
    result.update({
        "window_measured_s": round(win, 3),
        "hb_per_s": round(snap["hb_ok"] / win, 1),
        # Of the heartbeats answered or failed in the window (not those still in flight).
        "hb_in_time_pct": round(
            100.0 * snap["hb_in_time"] / max(snap["hb_ok"] + snap["hb_errors"], 1), 3),
        "hb_p50_ms": round(1000 * (pct(lat, 50) or 0), 2),
        "hb_p99_ms": round(1000 * (pct(lat, 99) or 0), 2),
        "hb_max_ms": round(1000 * (max(lat) if lat else 0), 2),
        "head_cpu_pct": round(100.0 * (head_cpu1 - head_cpu0) / win, 1),
        "head_rss_mb": round(rss_kb / 1024.0, 1),
        "head_hwm_mb": round(hwm_kb / 1024.0, 1),
        "head_threads": threads,
        "head_thread_cpu_pct": per_thread,
        "loadgen_cpu_pct": round(100.0 * (self_cpu1 - self_cpu0) / win, 1),
        "hosts": states,
        "host_lost_events": lost_events,
        "watch": counters,
        "get_jobs_n": len(gj["lat"]),
        "get_jobs_errors": gj["errors"],
        "get_jobs_bytes": gj["bytes"],
        "get_jobs_p50_ms": round(1000 * (pct(gj["lat"], 50) or 0), 2),
        "get_jobs_p99_ms": round(1000 * (pct(gj["lat"], 99) or 0), 2),
        "get_jobs_max_ms": round(1000 * (max(gj["lat"]) if gj["lat"] else 0), 2),
    })
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ca-file", help="speak TLS, verifying the head against this CA (none: plain "
                   "HTTP, for a head started with --plain-http)")
    p.add_argument("--join-token", required=True)
    p.add_argument("--admin-token", required=True)
    p.add_argument("--head-pid", type=int, required=True)
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--jobs", type=int, default=50)
    p.add_argument("--window", type=float, default=25.0, help="measurement window, s")
    p.add_argument("--warmup", type=float, default=3.0, help="s of heartbeats before the window")
    p.add_argument("--get-jobs", type=int, default=2000, help="GET /api/v1/jobs in the window")
    p.add_argument("--deadline", type=float, default=1.0, help="a heartbeat is in time within")
    p.add_argument("--register-concurrency", type=int, default=64)
    p.add_argument("--setup-timeout", type=float, default=180.0)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    random.seed(a.seed)
    global TLS
    a.host_certs = None
    if a.ca_file:
        TLS = ssl.create_default_context(cafile=a.ca_file)
        a.host_certs = HostCerts(a.ca_file)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(65536, hard) if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if 2 * a.agents + 64 > want:
        sys.exit(f"loadgen: {a.agents} agents need {2 * a.agents + 64} fds; limit is {want}")
    print(json.dumps(asyncio.run(main_async(a))))


if __name__ == "__main__":
    main()
