#!/usr/bin/env python3
"""Autoscaling on a local cluster (issue 12): a step in load to the new replicas taking traffic,
their start-up time stated separately, and the scale-down after the step down.

A Service with autoscaling (--min-replicas 1, --max-replicas 3, --target 2 ongoing requests,
--upscale-delay 5s, --downscale-delay 30s, --lookback 5s) of the fast fake server
tests/integration/serving_backend.py (--token-ms 20, --max-tokens 100: a request streams for
about 2 s, so ongoing requests = rate x 2 s), on `tessera up` with --max-replicas v6e 2x4 slices
(one host each: a group is one process), load through `tessera router`. The load (open loop,
loadgen.py's requests, one thread each) is --low-rate for --low-s, --high-rate for --high-s (the
step up), then --low-rate again (the step down) until the Service is back to --min-replicas.

A monitor polls the head (GET /api/v1/services/NAME) and the router's /metrics every
--poll-s and records, as durations from the step up:
  desired     the head's desiredReplicas (the autoscaler's decision) changing
  placed      a new group leaving Pending (a slice assigned, processes starting)
  ready       the head calling it Ready (readiness probe every 500 ms)
  routed      the router routing to it (its dispatcher lists the replica: a
              tessera_router_in_flight{replica=NEW} sample appears in /metrics)
  traffic     the router's tessera_router_in_flight{replica=NEW} above 0 (the router has no
              per-replica request counter; with 2 s requests a replica taking traffic has
              requests in flight at every poll)
and start-up time = placed -> ready per new group; from the step down: desiredReplicas back
down and the groups gone. Requests failed (any error loadgen counts) and E2E latency p50/p99
by window: before the step, the step up until the last new group takes traffic, the rest of
the high load, after the step down. Timestamps are the monitor's poll times (resolution
--poll-s plus the time of one poll).

A benchmark, not a timed test: it prints a table and writes JSON (--json). Run it on a quiet
machine:

  /usr/bin/python3 bench/serving/autoscale_step.py \
      --binary build/dev/bin/tessera --json autoscale.json
"""

import argparse
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import failures  # noqa: E402  (its cluster harness: LocalCluster, Load, metric, uptime)
import loadgen  # noqa: E402

SERVICE = failures.SERVICE


def service_doc(args):
    return {
        "apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": SERVICE},
        "spec": {
            "accelerator": "v6e", "topology": "2x4",
            "command": [failures.PYTHON, failures.FAKE, "--token-ms", str(args.token_ms)],
            "workingDir": failures.REPO,
            "autoscaling": {"minReplicas": args.min_replicas, "maxReplicas": args.max_replicas,
                            "targetOngoingRequests": args.target,
                            "upscaleDelay": args.upscale_delay,
                            "downscaleDelay": args.downscale_delay, "lookback": args.lookback},
            "maxOngoingRequests": args.max_ongoing,
            "readiness": {"path": "/healthz", "startupGrace": "2m", "period": "500ms",
                          "timeout": "5s"},
            "terminationGracePeriod": "30s",
        },
    }


def schedule(args):
    """Low, high, then low again until stopped (an hour of it)."""
    out, t = [], 0.0
    phases = [(args.low_rate, args.low_s), (args.high_rate, args.low_s + args.high_s),
              (args.low_rate, 3600.0)]
    for rate, until in phases:
        while t < until:
            out.append(loadgen.Arrival(t, args.prompt_tokens, args.max_tokens,
                                       "fixed #%d" % len(out)))
            t += 1.0 / rate
    return out


class Monitor:
    """Polls the head and the router; keeps every change with its monotonic time."""

    def __init__(self, cluster, poll_s):
        self.cluster, self.poll_s = cluster, poll_s
        self.desired = []  # (t, desiredReplicas, autoscaler reason)
        self.router_ready = []  # (t, n)
        self.replicas = {}  # replica -> {"seen", "placed", "ready", "routed", "traffic", "gone"}
        self.errors = 0
        self.last_reason = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stopping.is_set():
            try:
                self.poll()
            except (OSError, KeyError, IndexError, ValueError):
                self.errors += 1
            self.stopping.wait(self.poll_s)

    def poll(self):
        svc = self.cluster.service()
        text = self.cluster.router_metrics()
        now = time.monotonic()
        if svc is None:
            self.errors += 1
            return
        role = svc["status"]["roles"][0]
        reason = (role.get("autoscaler") or {}).get("reason", "")
        if not self.desired or self.desired[-1][1] != role["desiredReplicas"]:
            # The reason at the poll before the change: the desire that led to it.
            self.desired.append((now, role["desiredReplicas"], self.last_reason or reason))
        self.last_reason = reason
        n = int(failures.metric(text, "tessera_router_ready_replicas", service=SERVICE) or 0)
        if not self.router_ready or self.router_ready[-1][1] != n:
            self.router_ready.append((now, n))
        present = set()
        for r in role["replicas"]:
            rec = self.replicas.setdefault(r["replica"], {"seen": now})
            present.add(r["replica"])
            if "placed" not in rec and r["phase"] != "Pending":
                rec["placed"] = now
            if "ready" not in rec and r["phase"] == "Ready":
                rec["ready"] = now
            in_flight = failures.metric(text, "tessera_router_in_flight", service=SERVICE,
                                        replica=r["replica"])
            if in_flight is not None and "routed" not in rec:
                rec["routed"] = now
            if "traffic" not in rec and (in_flight or 0) > 0:
                rec["traffic"] = now
        for k, rec in self.replicas.items():
            if k not in present and "gone" not in rec:
                rec["gone"] = now

    def stop(self):
        self.stopping.set()
        self.thread.join()


def latency(results, lo, hi):
    ok = [r for r in results if r.error is None and r.end_s and lo <= r.start_s < hi]
    e2e = [r.end_s - r.start_s for r in ok]
    return {"requests": len([r for r in results if lo <= r.start_s < hi]), "ok": len(ok),
            "e2e_ms_p50": round((loadgen.percentile(e2e, 50) or 0) * 1000, 1),
            "e2e_ms_p99": round((loadgen.percentile(e2e, 99) or 0) * 1000, 1)}


def since(t, origin):
    return None if t is None else round(t - origin, 2)


def run(args):
    cluster = failures.LocalCluster(args.binary, "2x4", args.max_replicas)
    report = {"config": dict(vars(args)), "binary": os.path.abspath(args.binary),
              "uptime_before": failures.uptime()}
    try:
        cluster.up()
        status, body = cluster.request("POST", "/api/v1/apply", service_doc(args))
        if status not in (200, 201):
            raise SystemExit("apply failed: %s %s" % (status, body))
        failures.wait_steady(cluster, args.min_replicas, timeout=180)
        initial = {r["replica"] for r in cluster.service()["status"]["roles"][0]["replicas"]}
        url = "%s/services/%s" % (cluster.router_url, SERVICE)
        monitor = Monitor(cluster, args.poll_s)
        load = failures.Load(url, schedule(args), args.timeout_s, cluster.ca_file)
        step_up = load.begin + args.low_s
        step_down = step_up + args.high_s
        time.sleep(max(0.0, step_down - time.monotonic()))
        # The step down: wait for the Service back at its minimum, and the groups gone.
        deadline = step_down + args.scale_down_timeout_s
        while time.monotonic() < deadline:
            d = monitor.desired[-1] if monitor.desired else None
            gone = [rec for k, rec in monitor.replicas.items() if k not in initial]
            if (d and d[0] > step_down and d[1] == args.min_replicas and gone and
                    all("gone" in rec for rec in gone)):
                break
            time.sleep(0.2)
        time.sleep(args.tail_s)
        monitor.stop()
        results = load.stop()
        end = time.monotonic()
    finally:
        cluster.down()
    report["uptime_after"] = failures.uptime()

    new = {k: v for k, v in sorted(monitor.replicas.items()) if k not in initial}
    ups = [(t, n, why) for t, n, why in monitor.desired[1:] if step_up <= t < step_down]
    downs = [(t, n, why) for t, n, why in monitor.desired[1:] if t >= step_down]
    last_traffic = max((v["traffic"] for v in new.values() if "traffic" in v), default=None)
    failed = [r for r in results if r.error is not None]
    errors = {}
    for r in failed:
        errors[r.error] = errors.get(r.error, 0) + 1
    report.update({
        "initial_replicas": sorted(initial),
        "desired_changes_after_step_up_s": [
            {"at_s": since(t, step_up), "desiredReplicas": n, "reason": why}
            for t, n, why in ups],
        "new_groups": {str(k): {
            "desired_s": since(v["seen"], step_up), "placed_s": since(v.get("placed"), step_up),
            "ready_s": since(v.get("ready"), step_up),
            "router_routing_s": since(v.get("routed"), step_up),
            "traffic_s": since(v.get("traffic"), step_up),
            "startup_s": (round(v["ready"] - v["placed"], 2)
                          if "ready" in v and "placed" in v else None),
            "gone_after_step_down_s": since(v.get("gone"), step_down)}
            for k, v in new.items()},
        "desired_changes_after_step_down_s": [
            {"at_s": since(t, step_down), "desiredReplicas": n, "reason": why}
            for t, n, why in downs],
        "router_ready_replicas": [(since(t, step_up), n) for t, n in monitor.router_ready],
        "requests": len(results), "failed": len(failed), "errors": errors,
        "error_examples": {r.error: (r.detail or "")[:200] for r in failed},
        "latency": {
            "before": latency(results, 0, step_up),
            "step_until_traffic": latency(results, step_up, last_traffic or step_down),
            "high_after_traffic": latency(results, last_traffic or step_down, step_down),
            "after_step_down": latency(results, step_down, end),
        },
        "monitor_poll_errors": monitor.errors,
    })
    return report


def print_table(r):
    print("| event (from the step up, s) | replica | at |")
    print("|---|---|---|")
    for d in r["desired_changes_after_step_up_s"]:
        print("| head's desiredReplicas -> %d | - | %s |" % (d["desiredReplicas"], d["at_s"]))
    if not r["new_groups"]:
        print("| no new group was placed: see desired_changes_after_step_up_s in the JSON | - "
              "| - |")
    for k, g in r["new_groups"].items():
        for name, key in (("placed", "placed_s"), ("Ready (start-up %s s)" % g["startup_s"],
                                                   "ready_s"),
                          ("in the router's routing", "router_routing_s"),
                          ("taking traffic (in flight > 0)", "traffic_s")):
            print("| %s | %s | %s |" % (name, k, g[key]))
    for d in r["desired_changes_after_step_down_s"]:
        print("| after the step down: desiredReplicas -> %d | - | %s after the step down |" %
              (d["desiredReplicas"], d["at_s"]))
    for k, g in r["new_groups"].items():
        print("| after the step down: group gone | %s | %s after the step down |" %
              (k, g["gone_after_step_down_s"]))
    print()
    print("requests %d, failed %d %s" % (r["requests"], r["failed"], r["errors"] or ""))
    print("| window | requests | ok | E2E p50 ms | E2E p99 ms |")
    print("|---|---|---|---|---|")
    for name, w in r["latency"].items():
        print("| %s | %d | %d | %.0f | %.0f |" % (name, w["requests"], w["ok"], w["e2e_ms_p50"],
                                                 w["e2e_ms_p99"]))
    print("uptime: %s -> %s" % (r["uptime_before"], r["uptime_after"]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--binary", default=os.path.join(failures.REPO, "build", "dev", "bin",
                                                    "tessera"))
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--max-replicas", type=int, default=3, help="also the number of slices")
    p.add_argument("--target", type=float, default=2.0, help="targetOngoingRequests")
    p.add_argument("--upscale-delay", default="5s")
    p.add_argument("--downscale-delay", default="30s")
    p.add_argument("--lookback", default="5s")
    p.add_argument("--max-ongoing", type=int, default=4, help="maxOngoingRequests per replica")
    p.add_argument("--token-ms", type=float, default=20.0, help="the fake server's token delay")
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=100)
    p.add_argument("--low-rate", type=float, default=0.5, help="req/s before and after")
    p.add_argument("--high-rate", type=float, default=2.5, help="req/s of the step")
    p.add_argument("--low-s", type=float, default=20.0)
    p.add_argument("--high-s", type=float, default=60.0)
    p.add_argument("--tail-s", type=float, default=5.0, help="load after the scale-down")
    p.add_argument("--scale-down-timeout-s", type=float, default=150.0)
    p.add_argument("--poll-s", type=float, default=0.1)
    p.add_argument("--timeout-s", type=float, default=120.0, help="per request")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    if not 1 <= args.min_replicas < args.max_replicas:
        p.error("--min-replicas/--max-replicas: need 1 <= min < max (a step must add a group)")
    if args.low_rate <= 0 or args.high_rate <= args.low_rate:
        p.error("--low-rate/--high-rate: need 0 < low < high")
    if not os.access(args.binary, os.X_OK):
        p.error("--binary: %s is not an executable; build it (cmake --build --preset dev)" %
                args.binary)
    print("binary %s; %g -> %g -> %g req/s, %d tokens at %g ms; autoscaling %d..%d, target %g, "
          "upscale %s, downscale %s, lookback %s" % (
              args.binary, args.low_rate, args.high_rate, args.low_rate, args.max_tokens,
              args.token_ms, args.min_replicas, args.max_replicas, args.target,
              args.upscale_delay, args.downscale_delay, args.lookback), flush=True)
    report = run(args)
    print_table(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print("wrote", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
