#!/usr/bin/env python3
"""Warm start of Service groups (issue 34), side by side: two Services of examples/serve/server.py
on one local cluster, `cold` (no warmStart) and `warm` (spec.warmStart: {preload: [torch]}),
one replica group each (v6e 4x4: four processes, one per host, worker 0 the leader), and one
free slice for a scaled-up group. Two scenarios, each repeated --runs times per Service,
alternating which Service goes first:

  kill   kill -9 of a follower (worker 1) of the Service's group: to the group Ready again at
         the head (a new incarnation), the router routing to it again
         (tessera_router_ready_replicas back to 1) and its first request through the router
         (tessera_router_in_flight for it above 0).
  scale  the scale-up decision (POST /api/v1/services/NAME/scale, replicas 1 -> 2): to the new
         group Ready at the head, routed to, and taking its first request through the router;
         then back to 1 (SIGTERM: the leader drains) before the next run.

While one Service is measured it gets a light open-loop load through `tessera router`
(--rate req/s, 32-token prompts, 8 tokens out), so that "taking traffic" has requests to take.
Before every warm run the script waits until each host the group will start on holds a ready
warm interpreter (the agents' logs: `warm.ready`, not yet handed out), which is the steady
state warm start gives; a scaled-up group lands on the one free slice, whose hosts got the warm
Service's pool from one unmeasured scale-up (and down) of each Service first. Every started
process is checked against its agent's log (`worker.started ... warm=true|false`), and every
scaled-down leader's log for "drained".

A benchmark: a table of medians and JSON (--json); bounded (--budget-s, every wait has a
deadline). Run it under the build lock:

  /usr/bin/python3 bench/serving/warm_start.py \\
      --binary build/dev/bin/tessera --runs 3 --json warm_start.json
"""

import argparse
import glob
import json
import os
import re
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import failures  # noqa: E402
import loadgen  # noqa: E402

PYTHON = failures.PYTHON
COLD, WARM = "cold", "warm"


def service_doc(name, replicas):
    spec = {
        "accelerator": "v6e", "topology": "4x4",
        "command": [PYTHON, failures.EXAMPLE, "--layers", "2", "--drain-s", "10"],
        "workingDir": failures.REPO, "replicas": replicas, "maxOngoingRequests": 16,
        "readiness": {"path": "/healthz", "startupGrace": "3m", "period": "1s", "timeout": "5s"},
        "terminationGracePeriod": "30s",
    }
    if name == WARM:
        spec["warmStart"] = {"preload": ["torch"]}
    return {"apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": name},
            "spec": spec}


class Bench:
    def __init__(self, args):
        self.args = args
        self.cluster = failures.LocalCluster(args.binary, "4x4", 3)
        self.deadline = time.monotonic() + args.budget_s

    # --- reading the cluster -------------------------------------------------------------

    def wait(self, what, fn, timeout):
        timeout = min(timeout, self.deadline - time.monotonic())
        if timeout <= 0:
            raise SystemExit("warm_start.py: --budget-s spent before %s" % what)
        return failures.wait_for(what, fn, timeout)

    def replicas(self, name):
        status, body = self.cluster.request("GET", "/api/v1/services/" + name)
        if status != 200:
            return None
        return sorted(body["status"]["roles"][0]["replicas"], key=lambda r: r["replica"])

    def router(self, name, replica=None):
        """(ready replicas, in flight on `replica`) as the router reports them."""
        try:
            text = self.cluster.router_metrics()
        except OSError:
            return -1, 0
        ready = int(failures.metric(text, "tessera_router_ready_replicas", service=name) or 0)
        in_flight = 0
        if replica is not None:
            in_flight = int(failures.metric(text, "tessera_router_in_flight", service=name,
                                            replica=replica) or 0)
        return ready, in_flight

    def agent_log(self, host):
        with open(os.path.join(self.cluster.state, "logs", "agent-%s.log" % host)) as f:
            return f.read()

    def warm_ready(self, host):
        """Whether `host`'s agent holds a ready warm interpreter not yet handed out."""
        idle = set()
        for line in self.agent_log(host).splitlines():
            m = re.search(r"warm\.ready .*?\bpid=(\d+)", line)
            if m:
                idle.add(m.group(1))
            m = re.search(r"worker\.started .*\bpid=(\d+) warm=true|warm\.exited .*?\bpid=(\d+)",
                          line)
            if m:
                idle.discard(m.group(1) or m.group(2))
        return bool(idle)

    def warm_processes(self, replica):
        """How many of the group's processes their agents started warm."""
        n = 0
        for p in replica["processes"]:
            if re.search(r"worker\.started .*\bpid=%d warm=true" % p["pid"],
                         self.agent_log(p["host"])):
                n += 1
        return n

    def leader_log(self, name, replica):
        pattern = os.path.join(self.cluster.state, "agents", replica["processes"][0]["host"],
                               "logs", "%s.server.%d" % (name, replica["replica"]), "*",
                               str(replica["incarnation"]), "worker-0.log")
        found = glob.glob(pattern)
        if not found:
            return ""
        with open(found[0]) as f:
            return f.read()

    def load(self, name):
        schedule = loadgen.fixed_schedule(self.args.rate, 32, 8, int(self.args.rate * 600))
        url = "%s/services/%s" % (self.cluster.router_url, name)
        return failures.Load(url, schedule, 60, self.cluster.ca_file)

    def steady(self, name, replicas):
        self.wait("%s: %d groups ready" % (name, replicas),
                  lambda: (lambda r: r is not None and len(r) == replicas and
                           all(x["phase"] == "Ready" for x in r))(self.replicas(name)), 300)
        self.wait("%s: the router on %d groups" % (name, replicas),
                  lambda: self.router(name)[0] == replicas, 60)

    def until_taking_traffic(self, name, t0, ready_group, endpoints):
        """Polls until ready_group() names the group Ready at the head, then until the router
        routes to `endpoints` groups and the group has requests in flight (or the recovery
        timeout). (head, routed, traffic, group): monotonic times, None where not reached."""
        head = routed = traffic = group = None
        while time.monotonic() < t0 + self.args.recover_timeout_s:
            now = time.monotonic()
            if head is None:
                group = ready_group()
                if group is not None:
                    head = now
            if head is not None:
                ready, in_flight = self.router(name, group["replica"])
                if routed is None and ready == endpoints:
                    routed = now
                if routed is not None and in_flight > 0:
                    traffic = now
                    break
            time.sleep(0.05)
        return head, routed, traffic, group

    # --- scenarios -----------------------------------------------------------------------

    def kill(self, name):
        self.steady(name, 1)
        victim = self.replicas(name)[0]
        hosts = [p["host"] for p in victim["processes"]]
        if name == WARM:
            self.wait("warm interpreters on %s" % hosts,
                      lambda: all(self.warm_ready(h) for h in hosts), 180)
        load = self.load(name)
        time.sleep(self.args.warmup_s)
        t0 = time.monotonic()
        os.kill(victim["processes"][1]["pid"], signal.SIGKILL)

        def recreated():
            r = self.replicas(name) or []
            if r and r[0]["incarnation"] > victim["incarnation"] and r[0]["phase"] == "Ready":
                return r[0]
            return None

        head, routed, traffic, again = self.until_taking_traffic(name, t0, recreated, 1)
        load.stop()
        if head is None:
            raise SystemExit("%s: the killed group was not Ready again in %.0f s" %
                             (name, self.args.recover_timeout_s))
        return {"ready_s": head - t0, "routed_s": since(routed, t0),
                "traffic_s": since(traffic, t0), "warm_processes": self.warm_processes(again),
                "processes": len(again["processes"]), "load_average": failures.load_average()}

    def scale(self, name):
        self.steady(name, 1)
        if name == WARM and self.scale_hosts:
            self.wait("warm interpreters on %s" % self.scale_hosts,
                      lambda: all(self.warm_ready(h) for h in self.scale_hosts), 180)
        old = {r["replica"] for r in self.replicas(name)}
        load = self.load(name)
        time.sleep(self.args.warmup_s)
        t0 = time.monotonic()
        status, body = self.cluster.request("POST", "/api/v1/services/%s/scale" % name,
                                            {"role": "server", "replicas": 2})
        if status != 200:
            raise SystemExit("scale of %s failed: %s %s" % (name, status, body))

        def added():
            new = [r for r in self.replicas(name) or [] if r["replica"] not in old]
            return new[0] if new and new[0]["phase"] == "Ready" else None

        head, routed, traffic, new = self.until_taking_traffic(name, t0, added, 2)
        load.stop()
        if head is None:
            raise SystemExit("%s: the new group was not Ready in %.0f s" %
                             (name, self.args.recover_timeout_s))
        out = {"ready_s": head - t0, "routed_s": since(routed, t0),
               "traffic_s": since(traffic, t0), "warm_processes": self.warm_processes(new),
               "processes": len(new["processes"]), "load_average": failures.load_average()}
        if name == WARM:  # where its pool now is: the next warm scale-up waits for it there
            self.scale_hosts = [p["host"] for p in new["processes"]]
        # Back to one group: SIGTERM, the leader drains, the slice is freed.
        status, body = self.cluster.request("POST", "/api/v1/services/%s/scale" % name,
                                            {"role": "server", "replicas": 1})
        if status != 200:
            raise SystemExit("scale of %s back to 1 failed: %s %s" % (name, status, body))
        pids = [p["pid"] for p in new["processes"]]
        self.wait("%s: the added group gone" % name,
                  lambda: len(self.replicas(name) or []) == 1 and
                  not any(failures.alive(p) for p in pids), 120)
        out["leader_drained"] = '"event": "drained"' in self.leader_log(name, new)
        return out

    # --- the run -------------------------------------------------------------------------

    def run(self):
        args = self.args
        report = {"config": vars(args), "binary": os.path.abspath(args.binary),
                  "uptime_before": failures.uptime(), "kill": {COLD: [], WARM: []},
                  "scale": {COLD: [], WARM: []}}
        print("warm_start: %d runs; cluster 3 x v6e 4x4; uptime: %s" %
              (args.runs, report["uptime_before"]), flush=True)
        self.scale_hosts = []
        try:
            self.cluster.up()
            for name in (COLD, WARM):
                status, body = self.cluster.request("POST", "/api/v1/apply",
                                                    service_doc(name, 1))
                if status not in (200, 201):
                    raise SystemExit("apply of %s failed: %s %s" % (name, status, body))
            for name in (COLD, WARM):
                self.steady(name, 1)
            scenarios = [s for s in args.scenarios.split(",") if s]
            if "scale" in scenarios:
                for name in (COLD, WARM):  # unmeasured: the free slice's hosts get the pool
                    primed = self.scale(name)
                    print("prime scale %s: %s" % (name, json.dumps(primed)), flush=True)
            for scenario in scenarios:
                fn = {"kill": self.kill, "scale": self.scale}[scenario]
                for i in range(args.runs):
                    order = (COLD, WARM) if i % 2 == 0 else (WARM, COLD)
                    for name in order:
                        result = fn(name)
                        report[scenario][name].append(result)
                        print("%s %s run %d: %s" % (scenario, name, i + 1, json.dumps(result)),
                              flush=True)
        finally:
            self.cluster.down()
        report["uptime_after"] = failures.uptime()
        print_table(report)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
            print("wrote", args.json)


def since(t, t0):
    return None if t is None else t - t0


def median(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def print_table(report):
    print()
    print("| scenario | to | cold: median (runs) | warm: median (runs) | warm / cold |")
    print("|---|---|---|---|---|")
    for scenario, label in (("kill", "kill -9 of a follower"),
                            ("scale", "scale-up decision, 1 -> 2 groups")):
        runs = report[scenario]
        if not runs[COLD] and not runs[WARM]:
            continue
        for key, to in (("ready_s", "group Ready at the head"),
                        ("routed_s", "routed to by the router"),
                        ("traffic_s", "first request through the router")):
            c, w = median(runs[COLD], key), median(runs[WARM], key)
            print("| %s | %s | %s (%s) | %s (%s) | %s |" % (
                label, to, fmt(c), ", ".join(fmt(r.get(key)) for r in runs[COLD]), fmt(w),
                ", ".join(fmt(r.get(key)) for r in runs[WARM]),
                "%.2f" % (w / c) if c and w else "-"))
        for name in (COLD, WARM):
            started = ["%d/%d" % (r["warm_processes"], r["processes"]) for r in runs[name]]
            print("%s %s: processes started warm per run: %s; load average per run: %s%s" % (
                scenario, name, ", ".join(started),
                ", ".join(r["load_average"] for r in runs[name]),
                "; leaders drained on scale-down: %s" % ", ".join(
                    str(r["leader_drained"]) for r in runs[name]) if scenario == "scale" else ""))
    print("uptime before: %s" % report["uptime_before"])
    print("uptime after:  %s" % report["uptime_after"])


def fmt(v):
    return "-" if v is None else "%.1f s" % v


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--binary", default=os.path.join(failures.REPO, "build", "dev", "bin",
                                                    "tessera"))
    p.add_argument("--runs", type=int, default=3, help="per scenario and Service")
    p.add_argument("--scenarios", default="kill,scale")
    p.add_argument("--rate", type=float, default=2.0, help="load on the measured Service, req/s")
    p.add_argument("--warmup-s", type=float, default=3.0, help="load before each event")
    p.add_argument("--recover-timeout-s", type=float, default=180.0)
    p.add_argument("--budget-s", type=float, default=1800.0, help="the whole run, at most")
    p.add_argument("--json", help="write the runs here")
    args = p.parse_args()
    for s in args.scenarios.split(","):
        if s and s not in ("kill", "scale"):
            p.error("--scenarios: unknown scenario %r; use kill, scale" % s)
    if args.runs < 1:
        p.error("--runs: at least 1")
    if not os.access(args.binary, os.X_OK):
        p.error("--binary: %s is not an executable; build it (cmake --build --preset dev)" %
                args.binary)
    Bench(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
