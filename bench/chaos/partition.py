#!/usr/bin/env python3
"""Chaos by partition (issue 32 section 3; docs/netns.md): a cluster of `tessera up --netns`
whose links are cut instead of its processes killed, and the figures per fault.

The cluster: v6e, three 2x4 slices of one host each, 200 ms heartbeats, a 2 s lease, a 3 s
fence, every host and the head in a namespace of their own. The workload: one long training job
on one slice (an SDK worker reporting progress, under tests/integration/attempt_guard.py, which
records any overlap of two attempts; onHostLoss pause), one Service of one replica
(tests/integration/serving_backend.py), a writer posting a short job to the head every 200 ms
(acknowledged = 201) and a client sending a completion through the router every 100 ms.
Round i injects fault i mod 2, bounded in time:

  host-head    the training job's host's veth down until the job runs a new attempt elsewhere
               (at most 60 s), then up again; recovery = cut -> new attempt Running
  router-head  this namespace (the router, the writer) cut from the head for 3 x the lease,
               then healed; recovery = heal -> the next accepted write

Reported per fault kind: rounds, time to recovery (p50, max), acknowledged writes lost (every
201 must be in the final list of jobs), overlapping attempts, router requests failed during the
fault. Exit status 1 on a lost write or an overlap. Needs root and iproute2.

  python3 bench/chaos/partition.py --rounds 4 --out partition.json
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import test_cluster  # noqa: E402  (the integration tests' cluster: up, cut, heal)
from test_serving_e2e import completion  # noqa: E402

LEASE_MS, FENCE_MS = 2000, 3000
GUARD = os.path.join(REPO, "tests", "integration", "attempt_guard.py")
BACKEND = os.path.join(REPO, "tests", "integration", "serving_backend.py")
SDK_WORKER = """
import time
from tessera import worker
step = 0
while True:
    worker.report_progress(step)
    step += 1
    time.sleep(0.1)
"""


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100.0 * (len(v) - 1))))]


class Load:
    """The writer and the router client, on threads of their own."""

    def __init__(self, c, router_port):
        self.c, self.router_port = c, router_port
        self.acked, self.requests = [], []  # names; (time, ok)
        self.last_write = 0.0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.write), threading.Thread(target=self.ask)]
        for t in self.threads:
            t.start()

    def write(self):
        n = 0
        while not self.stop.wait(0.2):
            name = "w-%d" % n
            n += 1
            doc = {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
                   "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 1,
                            "priority": -1, "template": {"command": ["true"]}}}
            try:
                code, _ = self.c.request("POST", "/api/v1/jobs", doc)
            except Exception:  # a cut link: the client's own timeout
                code = 0
            if code == 201:
                self.acked.append(name)
                self.last_write = time.monotonic()

    def ask(self):
        while not self.stop.wait(0.1):
            try:
                ok, _ = completion(self.router_port, "svc")
            except OSError:
                ok = False
            self.requests.append((time.monotonic(), ok))

    def failed_between(self, t0, t1):
        return sum(1 for t, ok in self.requests if t0 <= t <= t1 and not ok)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="faults (default 4; at most 20)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    if not 1 <= args.rounds <= 20:
        ap.error("--rounds: give 1 to 20 (each round is bounded to about a minute)")
    why = test_cluster.netns_unavailable()
    if why:
        print("partition chaos: cannot make network namespaces here: %s" % why, file=sys.stderr)
        return 2
    c = test_cluster.Cluster(netns=True)
    results = {"host-head": [], "router-head": []}
    overlaps = lost = 0
    load = None
    try:
        c.cli("up", "--generation", "v6e", "--topology", "2x4", "--slices", "3",
              "--heartbeat-ms", "200", "--lease-ms", str(LEASE_MS), "--fence-ms", str(FENCE_MS),
              "--timeout", "120", "--netns")
        with open(os.path.join(c.state, "admin.token")) as f:
            c.token = f.read().strip()
        c.reload_port()
        with open(os.path.join(c.state, "router.json")) as f:
            router_port = json.load(f)["port"]
        tmp = tempfile.mkdtemp(dir=c.dir)
        script = os.path.join(tmp, "sdk_worker.py")
        with open(script, "w") as f:
            f.write(SDK_WORKER)
        code, body = c.request("POST", "/api/v1/jobs", {
            "apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "long"},
            "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 1,
                     "failurePolicy": {"maxFailures": -1, "onHostLoss": "pause"},
                     "template": {"command": [test_cluster.PYTHON, GUARD, script],
                                  "env": {"PYTHONPATH": os.path.join(REPO, "python"),
                                          "ATTEMPT_GUARD_DIR": tmp},
                                  "workingDir": REPO}}})
        assert code == 201, body
        code, body = c.request("POST", "/api/v1/apply", {
            "apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": "svc"},
            "spec": {"accelerator": "v6e", "topology": "2x4", "replicas": 1,
                     "command": [test_cluster.PYTHON, BACKEND, "--token-ms", "1"],
                     "env": {"SERVING_BACKEND_BIND": "0.0.0.0"}, "workingDir": REPO,
                     "readiness": {"path": "/healthz", "startupGrace": "60s",
                                   "period": "500ms", "timeout": "5s"}}})
        assert code in (200, 201), body
        test_cluster.wait_for("the long job running", lambda: c.phase("long") == "Running", 90)
        test_cluster.wait_for("the service answering",
                              lambda: completion(router_port, "svc")[0], 90)
        load = Load(c, router_port)
        for i in range(args.rounds):
            kind = ("host-head", "router-head")[i % 2]
            time.sleep(1.0)
            if kind == "host-head":
                st = c.get_job("long")["status"]
                host, attempt = st["workers"][0]["host"], st["attempt"]
                t0 = time.monotonic()
                c.cut_link(host)
                try:
                    test_cluster.wait_for("a new attempt running", lambda: (
                        c.get_job("long")["status"]["attempt"] > attempt and
                        c.phase("long") == "Running"), 60)
                    recovered = time.monotonic() - t0
                finally:
                    c.heal_link(host)
                test_cluster.wait_for("%s back" % host, lambda: [
                    h for h in c.request("GET", "/api/v1/hosts")[1]["items"]
                    if h["metadata"]["name"] == host and h["status"]["state"] == "Ready"], 60)
                t1 = time.monotonic()
            else:
                t0 = time.monotonic()
                c.cut_between("root", "head")
                time.sleep(3 * LEASE_MS / 1000.0)
                c.heal_between("root", "head")
                healed = time.monotonic()
                test_cluster.wait_for("a write accepted", lambda: load.last_write > healed, 60)
                recovered = load.last_write - healed
                t1 = time.monotonic()
            failed = load.failed_between(t0, t1)
            results[kind].append({"recovery_s": round(recovered, 2), "requests_failed": failed})
            print("round %d %s: recovered in %.2f s, %d router requests failed" % (
                i, kind, recovered, failed), flush=True)
        load.finish()
        listed = {j["metadata"]["name"] for j in c.request("GET", "/api/v1/jobs")[1]["items"]}
        lost = len([n for n in load.acked if n not in listed])
        with open(os.path.join(tmp, "records.jsonl")) as f:
            overlaps = sum(1 for line in f if json.loads(line)["overlap"])
        summary = {
            kind: {"rounds": len(r), "recovery_p50_s": pct([x["recovery_s"] for x in r], 50),
                   "recovery_max_s": max([x["recovery_s"] for x in r], default=None),
                   "requests_failed": sum(x["requests_failed"] for x in r),
                   "requests": len(load.requests)} for kind, r in results.items()}
        report = {"rounds": args.rounds, "acked_writes": len(load.acked), "acked_lost": lost,
                  "overlapping_attempts": overlaps, "faults": summary, "detail": results}
        print(json.dumps(report, indent=1))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=1)
    finally:
        if load:
            load.finish()
        c.down()
    return 1 if lost or overlaps else 0


if __name__ == "__main__":
    sys.exit(main())
