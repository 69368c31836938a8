#!/usr/bin/env python3
"""Failures under load (issue 12): a Service of 2+ replica groups on a local cluster, load
through `tessera router`, and three failures, each in its own load window:

  kill     kill -9 of one process of one group (--kill-worker; default 1, a follower). Counts
           the requests that failed against those in flight on that replica at the kill (the
           router's tessera_router_in_flight just before it); times the group's return: the head
           calling it Ready again, and the router routing to every replica again.
  rolling  a spec change (an env variable) rolled with maxSurge 1, maxUnavailable 0: counts
           failed requests; times the update.
  head     the head killed (-9) for --head-down-s seconds (default 60), then started again on
           its state and port: counts failed requests through the router.

A benchmark, not a timed test: it prints a table and writes JSON (--json). Load is
loadgen.py's: the Azure trace (time-scaled, --time-scale) or a fixed rate (--rate), open-loop,
one thread per request; a request fails on any error loadgen counts (an HTTP status other than
200, a cut or incomplete stream, a stream error event, a timeout).

The replicas run examples/serve/server.py (--server example, the default) or the fast fake
tests/integration/serving_backend.py (--server fake). Cluster: `tessera up` with replicas + 1
v6e slices of --topology (default 4x4, four hosts: a group is four processes, worker 0 the
leader; 2x4 is one host, a group of one), so a rolling update has room for its surge group.
Run it on a quiet machine:

  /usr/bin/python3 bench/serving/failures.py \
      --binary build/dev/bin/tessera --json failures.json
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python"))

import loadgen  # noqa: E402
from tessera.client import ApiError, Client  # noqa: E402

PYTHON = "/usr/bin/python3"  # Debian's: it has python3-torch
EXAMPLE = os.path.join(REPO, "examples", "serve", "server.py")
FAKE = os.path.join(REPO, "tests", "integration", "serving_backend.py")
SERVICE = "llm"


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def load_average():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def wait_for(what, fn, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise SystemExit("failures.py: timed out after %.0f s waiting for %s (last: %r)" %
                     (timeout, what, last))


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def metric(text, name, **labels):
    """The value of one sample in Prometheus text, or None."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(got.get(k) == str(v) for k, v in labels.items()):
            return float(m.group(4))
    return None


class LocalCluster:
    """`tessera up` in a temporary state directory; the head can be killed and started again."""

    def __init__(self, binary, topology, slices):
        self.binary = binary
        self.topology, self.slices = topology, slices
        self.dir = tempfile.mkdtemp(prefix="tessera-failures-")
        self.state = os.path.join(self.dir, "state")
        self.head_logs = []

    def cli(self, *args, check=True):
        p = subprocess.run([self.binary, *args, "--state-dir", self.state], capture_output=True,
                           text=True, timeout=300, cwd=REPO)
        if check and p.returncode != 0:
            raise SystemExit("tessera %s failed (%d): %s%s" % (" ".join(args), p.returncode,
                                                               p.stdout, p.stderr))
        return p

    def up(self):
        self.cli("up", "--generation", "v6e", "--topology", self.topology, "--slices",
                 str(self.slices), "--heartbeat-ms", "200", "--lease-ms", "2000", "--timeout",
                 "180")
        with open(os.path.join(self.state, "admin.token")) as f:
            self.token = f.read().strip()
        with open(os.path.join(self.state, "head.json")) as f:
            self.port = json.load(f)["port"]
        # up's router: HTTPS verified against the cluster CA.
        with open(os.path.join(self.state, "router.json")) as f:
            router = json.load(f)
        self.ca_file = os.path.join(self.state, "ca.crt")
        self.router_url = "%s://127.0.0.1:%d" % (router.get("scheme", "http"), router["port"])

    def down(self):
        self.cli("down", "--purge", check=False)
        for log in self.head_logs:
            log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def request(self, method, path, body=None):
        """(status, body) through tessera.client: 200 with the answer, the API's status and
        message on a refusal, 0 while the head is down or starting."""
        client = Client("https://127.0.0.1:%d" % self.port, self.token,
                        ca_file=os.path.join(self.state, "ca.crt"))
        try:
            return 200, client.request(method, path,
                                       json.dumps(body) if body is not None else None)
        except ApiError as e:
            return e.status, e.message
        except OSError as e:  # the head is down or starting
            return 0, str(e)

    def service(self):
        status, body = self.request("GET", "/api/v1/services/" + SERVICE)
        return body if status == 200 else None

    def router_metrics(self):
        conn = loadgen.connect(urllib.parse.urlsplit(self.router_url), 10, self.ca_file)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    def cluster_json(self):
        with open(os.path.join(self.state, "cluster.json")) as f:
            return json.load(f)

    def kill_head(self):
        pid = self.cluster_json()["head"]
        os.kill(pid, signal.SIGKILL)
        wait_for("the head gone", lambda: not alive(pid), timeout=30)
        try:
            os.waitpid(pid, os.WNOHANG)  # ours only when we started it
        except ChildProcessError:
            pass

    def start_head(self):
        log = open(os.path.join(self.state, "logs", "head-restart.log"), "a")
        self.head_logs.append(log)
        head = subprocess.Popen([self.binary, "head", "--state-dir", self.state, "--port",
                                 str(self.port), "--heartbeat-ms", "200", "--lease-ms", "2000"],
                                stdout=log, stderr=log, start_new_session=True)
        cluster = self.cluster_json()
        cluster["head"] = head.pid
        with open(os.path.join(self.state, "cluster.json"), "w") as f:
            json.dump(cluster, f)
        wait_for("the head serving again", lambda: self.request("GET", "/healthz")[0] == 200,
                 timeout=120)
        return head


def service_doc(server, replicas, group_size_topology, roll=0, startup_nice=None):
    if server == "example":
        command = [PYTHON, EXAMPLE, "--layers", "2"]
        max_ongoing = 16
        grace = "60s"
    else:
        command = [PYTHON, FAKE, "--token-ms", "5"]
        max_ongoing = 8
        grace = "30s"
    doc = {
        "apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": SERVICE},
        "spec": {
            "accelerator": "v6e", "topology": group_size_topology, "command": command,
            "workingDir": REPO, "env": {"ROLL": str(roll)}, "replicas": replicas,
            "maxOngoingRequests": max_ongoing,
            "readiness": {"path": "/healthz", "startupGrace": "3m", "period": "1s",
                          "timeout": "5s"},
            "terminationGracePeriod": grace,
            "rollout": {"maxSurge": 1, "maxUnavailable": 0},
        },
    }
    if startup_nice is not None:  # else the spec's default (docs/serving.md)
        doc["spec"]["startupNice"] = startup_nice
    return doc


class Load:
    """loadgen's open loop in the background: each arrival starts on time in its own thread;
    stop() ends the schedule and waits for the requests in flight."""

    def __init__(self, url, arrivals, timeout_s, ca_file=None):
        self.url, self.arrivals, self.timeout_s = url, arrivals, timeout_s
        self.ca_file = ca_file  # for an https:// url (loadgen.connect)
        self.results, self.threads = [], []
        self.stopping = threading.Event()
        self.begin = time.monotonic()
        self.scheduler = threading.Thread(target=self.schedule, daemon=True)
        self.scheduler.start()

    def schedule(self):
        for index, a in enumerate(self.arrivals):
            due = self.begin + a.offset_s
            if self.stopping.wait(max(0.0, due - time.monotonic())):
                return
            r = loadgen.Result(a, due)
            t = threading.Thread(target=loadgen.run_one,
                                 args=(self.url, None, 0.0, self.timeout_s, r, index,
                                       self.ca_file),
                                 daemon=True)
            self.results.append(r)
            self.threads.append(t)
            t.start()

    def in_flight(self, at):
        return sum(1 for r in list(self.results)
                   if r.start_s and r.start_s <= at and (r.end_s is None and r.error is None))

    def stop(self):
        self.stopping.set()
        self.scheduler.join()
        deadline = time.monotonic() + self.timeout_s + 5
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for r, t in zip(self.results, self.threads):
            if t.is_alive() and r.error is None:
                r.error = "timeout"
        return self.results


def arrivals(args):
    """An endless enough schedule: the scenarios stop it."""
    if args.rate is not None:
        return loadgen.fixed_schedule(args.rate, args.prompt_tokens, args.max_tokens,
                                      int(args.rate * 3600))
    rows = loadgen.read_trace(args.trace)
    return loadgen.trace_schedule(rows, args.time_scale, args.max_prompt_tokens,
                                  args.max_output_tokens, args.skip_s,
                                  os.path.basename(args.trace))


def summary(results, event_s):
    failed = [r for r in results if r.error is not None]
    errors = {}
    for r in failed:
        errors[r.error] = errors.get(r.error, 0) + 1
    ttft = [r.first_token_s - r.start_s for r in results if r.error is None and r.first_token_s]
    return {
        "sent": len(results), "ok": len(results) - len(failed), "failed": len(failed),
        "failed_started_before_event": sum(1 for r in failed if r.start_s < event_s),
        "failed_started_after_event": sum(1 for r in failed if r.start_s >= event_s),
        "errors": errors,
        "error_examples": {r.error: (r.detail or "")[:200] for r in failed},
        "ttft_ms_p50": (loadgen.percentile(ttft, 50) or 0) * 1000,
        "ttft_ms_p99": (loadgen.percentile(ttft, 99) or 0) * 1000,
    }


def router_errors(cluster):
    """tessera_router_errors_total of the Service by reason (queue_full, queue_timeout,
    no_ready_replica, response_timeout, ...): the refusals and failures the router counted."""
    out = {}
    try:
        text = cluster.router_metrics()
    except OSError:
        return out
    for line in text.splitlines():
        if not line.startswith("tessera_router_errors_total{"):
            continue
        m = re.match(r'^tessera_router_errors_total\{(.*)\} (\S+)$', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))
        if labels.get("service") == SERVICE:
            out[labels.get("reason", "?")] = int(float(m.group(2)))
    return out


def errors_since(cluster, before):
    after = router_errors(cluster)
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}


def ready_endpoints(cluster):
    svc = cluster.service()
    return [e for e in svc["status"]["endpoints"] if e["ready"]] if svc else []


def router_ready(cluster):
    try:
        return int(metric(cluster.router_metrics(), "tessera_router_ready_replicas",
                          service=SERVICE) or 0)
    except OSError:
        return -1


def wait_steady(cluster, replicas, timeout):
    wait_for("%d replicas ready at the head" % replicas,
             lambda: len(ready_endpoints(cluster)) == replicas and
             cluster.service()["status"]["phase"] == "Ready", timeout=timeout)
    wait_for("the router routing to %d replicas" % replicas,
             lambda: router_ready(cluster) == replicas, timeout=60)


def scenario_kill(cluster, args, load_url, schedule):
    svc = cluster.service()
    role = svc["status"]["roles"][0]
    victim = sorted(role["replicas"], key=lambda r: r["replica"])[0]
    worker = min(args.kill_worker, len(victim["processes"]) - 1)
    pid = victim["processes"][worker]["pid"]
    load = Load(load_url, schedule, args.timeout_s, cluster.ca_file)
    time.sleep(args.warmup_s)  # the load's steady part before the failure
    text = cluster.router_metrics()
    in_flight_victim = int(metric(text, "tessera_router_in_flight", service=SERVICE,
                                  replica=victim["replica"]) or 0)
    in_flight_all = sum(int(metric(text, "tessera_router_in_flight", service=SERVICE,
                                   replica=r["replica"]) or 0) for r in role["replicas"])
    kill_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    in_flight_load = load.in_flight(kill_at)
    # The router drops the replica (the head saw it fail), then routes to it again.
    dropped_at = head_ready_at = rejoined_at = None
    took_traffic = False
    deadline = kill_at + args.recover_timeout_s
    while time.monotonic() < deadline:
        now = time.monotonic()
        n = router_ready(cluster)
        if dropped_at is None and 0 <= n < args.replicas:
            dropped_at = now
        if head_ready_at is None:
            r = [x for x in (cluster.service() or {"status": {"roles": [{"replicas": []}]}})
                 ["status"]["roles"][0]["replicas"] if x["replica"] == victim["replica"]]
            if r and r[0]["phase"] == "Ready" and r[0]["incarnation"] > victim["incarnation"]:
                head_ready_at = now
        if head_ready_at is not None and n == args.replicas:
            rejoined_at = rejoined_at or now
            if (metric(cluster.router_metrics(), "tessera_router_in_flight", service=SERVICE,
                       replica=victim["replica"]) or 0) > 0:
                took_traffic = True
            if took_traffic or now - rejoined_at > args.tail_s:
                break
        time.sleep(0.05)
    time.sleep(args.tail_s)
    results = load.stop()
    out = summary(results, kill_at)
    out.update({
        "victim": {"replica": victim["replica"], "worker": worker, "pid": pid,
                   "group_size": len(victim["processes"])},
        "in_flight_at_kill_on_victim": in_flight_victim,
        "in_flight_at_kill_all_replicas": in_flight_all,
        "in_flight_at_kill_loadgen": in_flight_load,
        "router_dropped_s": None if dropped_at is None else dropped_at - kill_at,
        "head_ready_again_s": None if head_ready_at is None else head_ready_at - kill_at,
        "rejoined_routing_s": None if rejoined_at is None else rejoined_at - kill_at,
        "took_traffic_after_rejoin": took_traffic,
    })
    return out


def scenario_rolling(cluster, args, load_url, schedule):
    role = cluster.service()["status"]["roles"][0]
    generation = role["generation"]
    old = sorted(r["replica"] for r in role["replicas"])
    errors_before = router_errors(cluster)
    load = Load(load_url, schedule, args.timeout_s, cluster.ca_file)
    time.sleep(args.warmup_s)
    start = time.monotonic()
    status, body = cluster.request("POST", "/api/v1/apply", service_doc(
        args.server, args.replicas, args.topology, roll=generation,
        startup_nice=args.startup_nice))
    if status not in (200, 201):
        raise SystemExit("apply of the new spec failed: %s %s" % (status, body))
    min_ready = args.replicas
    peak = {"queued": 0, "queue_bound": 0, "load1": 0.0}

    def rolled():
        nonlocal min_ready
        try:
            text = cluster.router_metrics()
            peak["queued"] = max(peak["queued"],
                                 int(metric(text, "tessera_router_queued", service=SERVICE) or 0))
            peak["queue_bound"] = max(peak["queue_bound"], int(
                metric(text, "tessera_router_queue_bound", service=SERVICE) or 0))
        except OSError:
            pass
        peak["load1"] = max(peak["load1"], float(load_average()))
        svc = cluster.service()
        if svc is None:
            return False
        min_ready = min(min_ready, len([e for e in svc["status"]["endpoints"] if e["ready"]]))
        r = svc["status"]["roles"][0]
        return (r["generation"] == generation + 1 and len(r["replicas"]) == args.replicas and
                all(x["generation"] == generation + 1 and x["phase"] == "Ready"
                    for x in r["replicas"]))

    wait_for("the rolling update done", rolled, timeout=args.recover_timeout_s, interval=0.2)
    done = time.monotonic()
    wait_for("the router on the new groups", lambda: router_ready(cluster) == args.replicas,
             timeout=60)
    time.sleep(args.tail_s)
    results = load.stop()
    out = summary(results, start)
    failed_at = sorted(r.start_s - start for r in results if r.error is not None)
    out.update({
        "router_errors": errors_since(cluster, errors_before),
        "failed_started_s_after_apply": [failed_at[0], failed_at[-1]] if failed_at else None,
        "peak_router_queued": peak["queued"], "peak_router_queue_bound": peak["queue_bound"],
        "peak_load1_during_update": peak["load1"],
        "update_s": done - start, "old_replicas": old,
        "new_replicas": sorted(r["replica"] for r in cluster.service()["status"]["roles"][0]
                               ["replicas"]),
        "min_ready_endpoints_during_update": min_ready,
    })
    return out


def scenario_head(cluster, args, load_url, schedule):
    load = Load(load_url, schedule, args.timeout_s, cluster.ca_file)
    time.sleep(args.warmup_s)
    cluster.kill_head()
    killed = time.monotonic()
    wait_for("the router to notice the head gone",
             lambda: metric(cluster.router_metrics(), "tessera_router_head_connected") == 0,
             timeout=30)
    min_router_ready = args.replicas
    while time.monotonic() < killed + args.head_down_s:  # the outage itself
        min_router_ready = min(min_router_ready, router_ready(cluster))
        time.sleep(0.2)
    head = cluster.start_head()
    back = time.monotonic()
    wait_for("the router watching again",
             lambda: metric(cluster.router_metrics(), "tessera_router_head_connected") == 1,
             timeout=60)
    reconnected = time.monotonic()
    tail_end = time.monotonic() + max(args.tail_s, 10)
    while time.monotonic() < tail_end:
        min_router_ready = min(min_router_ready, router_ready(cluster))
        time.sleep(0.1)
    results = load.stop()
    out = summary(results, killed)
    svc = cluster.service()
    out.update({
        "head_down_s": back - killed, "router_reconnected_after_start_s": reconnected - back,
        "min_router_ready_replicas": min_router_ready,
        "phase_after": svc["status"]["phase"] if svc else None,
        "head_pid": head.pid,
    })
    return out


def row(name, s, event, recovery):
    return "| %s | %d | %d | %d (%d before, %d after) | %s | %s | %s |" % (
        name, s["sent"], s["ok"], s["failed"], s["failed_started_before_event"],
        s["failed_started_after_event"], event, recovery,
        ", ".join("%s %d" % kv for kv in sorted(s["errors"].items())) or "-")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--binary", default=os.path.join(REPO, "build", "dev", "bin", "tessera"))
    p.add_argument("--server", choices=("example", "fake"), default="example")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--topology", default="4x4", help="of each slice and each replica group")
    p.add_argument("--scenarios", default="kill,rolling,head")
    p.add_argument("--kill-worker", type=int, default=1, help="0 is the leader")
    p.add_argument("--head-down-s", type=float, default=60.0)
    p.add_argument("--warmup-s", type=float, default=10.0, help="load before each failure")
    p.add_argument("--tail-s", type=float, default=10.0, help="load after each recovery")
    p.add_argument("--recover-timeout-s", type=float, default=300.0)
    p.add_argument("--trace", default=loadgen.DEFAULT_TRACE)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--skip-s", type=float, default=0.0)
    p.add_argument("--max-prompt-tokens", type=int, default=128)
    p.add_argument("--max-output-tokens", type=int, default=32)
    p.add_argument("--rate", type=float, help="fixed rate instead of the trace")
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--timeout-s", type=float, default=120.0, help="per request")
    p.add_argument("--startup-nice", type=int, choices=range(0, 20), metavar="0..19",
                   help="the Service's spec.startupNice (default: the spec's default; 0 = off)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in ("kill", "rolling", "head"):
            p.error("--scenarios: unknown scenario %r; use kill, rolling, head" % s)
    if args.replicas < 2:
        p.error("--replicas: at least 2 (a failure must leave a replica serving)")
    if not os.access(args.binary, os.X_OK):
        p.error("--binary: %s is not an executable; build it (cmake --build --preset dev)" %
                args.binary)

    schedule = arrivals(args)
    load_desc = ("fixed %g req/s, prompt %d, output %d tokens" %
                 (args.rate, args.prompt_tokens, args.max_tokens) if args.rate is not None else
                 "trace %s from %g s, time scale %gx, caps %d / %d tokens" %
                 (os.path.basename(args.trace), args.skip_s, args.time_scale,
                  args.max_prompt_tokens, args.max_output_tokens))
    report = {"config": {k: v for k, v in vars(args).items()}, "load": load_desc,
              "binary": os.path.abspath(args.binary), "scenarios": {}}
    print("load: %s; server: %s; %d replicas of v6e %s; binary %s" % (
        load_desc, args.server, args.replicas, args.topology, args.binary), flush=True)
    cluster = LocalCluster(args.binary, args.topology, args.replicas + 1)
    try:
        cluster.up()
        status, body = cluster.request("POST", "/api/v1/apply",
                                       service_doc(args.server, args.replicas, args.topology,
                                                   startup_nice=args.startup_nice))
        if status not in (200, 201):
            raise SystemExit("apply failed: %s %s" % (status, body))
        wait_steady(cluster, args.replicas, timeout=300)
        url = "%s/services/%s" % (cluster.router_url, SERVICE)
        offset = 0.0
        for name in scenarios:
            # Each scenario replays the next part of the schedule, from offset 0.
            part = [loadgen.Arrival(a.offset_s - offset, a.prompt_tokens, a.max_tokens,
                                    a.source) for a in schedule if a.offset_s >= offset]
            before = uptime()
            fn = {"kill": scenario_kill, "rolling": scenario_rolling, "head": scenario_head}[name]
            started = time.monotonic()
            errors_before = router_errors(cluster)
            result = fn(cluster, args, url, part)
            result.setdefault("router_errors", errors_since(cluster, errors_before))
            offset += time.monotonic() - started
            result["uptime_before"], result["uptime_after"] = before, uptime()
            report["scenarios"][name] = result
            print("%s: %s" % (name, json.dumps(result)), flush=True)
            wait_steady(cluster, args.replicas, timeout=300)
    finally:
        cluster.down()

    print()
    print("| scenario | sent | ok | failed (started before / after the event) | at the event |"
          " recovery | errors |")
    print("|---|---|---|---|---|---|---|")
    s = report["scenarios"]
    if "kill" in s:
        k = s["kill"]
        print(row("kill -9 of worker %d (of %d) of replica %d" % (
            k["victim"]["worker"], k["victim"]["group_size"], k["victim"]["replica"]), k,
                  "%d in flight on it (%d on all replicas)" % (
                      k["in_flight_at_kill_on_victim"], k["in_flight_at_kill_all_replicas"]),
                  "out of routing %s s, Ready at the head %s s, routed to again %s s%s" % (
                      _s(k["router_dropped_s"]), _s(k["head_ready_again_s"]),
                      _s(k["rejoined_routing_s"]),
                      "" if k["took_traffic_after_rejoin"] else " (no traffic seen on it)")))
    if "rolling" in s:
        r = s["rolling"]
        print(row("rolling update, maxSurge 1, maxUnavailable 0", r,
                  "replicas %s -> %s" % (r["old_replicas"], r["new_replicas"]),
                  "done in %.1f s; ready endpoints never below %d; router queue peak %d "
                  "(bound %d); router errors: %s" % (
                      r["update_s"], r["min_ready_endpoints_during_update"],
                      r["peak_router_queued"], r["peak_router_queue_bound"],
                      ", ".join("%s %d" % kv for kv in sorted(r["router_errors"].items()))
                      or "none")))
    if "head" in s:
        h = s["head"]
        print(row("head killed for %.0f s" % h["head_down_s"], h, "-",
                  "router watching again %.1f s after the head started; routed to %d+ "
                  "replicas throughout" % (h["router_reconnected_after_start_s"],
                                           h["min_router_ready_replicas"])))
    for name, r in s.items():
        print("%s: %s -> %s" % (name, r["uptime_before"], r["uptime_after"]))
        print("%s: router refusals and failures by cause: %s" % (name, ", ".join(
            "%s %d" % kv for kv in sorted(r["router_errors"].items())) or "none"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print("wrote", args.json)
    return 0


def _s(v):
    return "-" if v is None else "%.1f" % v


if __name__ == "__main__":
    sys.exit(main())
