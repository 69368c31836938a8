#!/usr/bin/env python3
"""Chaos by partition (issue 32 section 3; docs/netns.md): a cluster of `tessera up --ha --netns`
whose links are cut instead of its processes killed, and the figures per fault.

The cluster: two heads on three etcd members (election lease 2 s, renew deadline 1.2 s, retry
0.3 s), v6e, four 2x4 slices of one host each, 200 ms heartbeats, a 3 s host lease, a 3 s fence,
every head, etcd member and host in a namespace of its own; the router and this script in the
root namespace. The workload: one training job over two slices (examples/train/train.py over
gloo, under tests/integration/attempt_guard.py, which records any overlap of two attempts;
hangTimeout 8 s, onHostLoss pause, no failure limit), one Service of one replica
(tests/integration/serving_backend.py), a writer posting a short job to the leader every 200 ms
(acknowledged = 201; it asks the heads who leads when a post fails) and a client sending a
completion through the router every 100 ms. Round i injects fault i mod 4, bounded in time:

  host-head     the training job's first host's veth down until the job runs a new attempt
                (at most 90 s), then up again; recovery = cut -> new attempt Running
  leader-etcd   the leading head's links to the three etcd members dropped, both ways (the
                agents and the root namespace still reach it), until another head leads and a
                write is accepted (at most 90 s), then healed; recovery = cut -> the first write
                acknowledged after the cut
  router-head   the root namespace (the router, the writer) cut from every head for 3 s, then
                healed; recovery = heal -> the next acknowledged write
  worker-peers  the training job's two hosts cut from each other, both ways (the heads still
                reachable), until the job runs a new attempt (at most 90 s), then healed;
                recovery = cut -> new attempt Running

Reported per fault kind: rounds, time to recovery (p50, max), router requests failed during the
fault (from the cut until recovered and healed), writes refused; for the whole run acknowledged
writes lost (every 201 must be in the final list of jobs) and overlapping attempts. Exit status
1 on a lost write or an overlap. Needs root, iproute2 and etcd.

  python3 bench/chaos/partition.py --rounds 12 --out partition.json
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import test_cluster  # noqa: E402  (the integration tests' cluster: up, cut, heal)
from test_serving_e2e import completion  # noqa: E402
from tessera.client import Client  # noqa: E402

HOST_LEASE_MS, FENCE_MS = 3000, 3000
ELECTION = ["--election-lease-ms", "2000", "--election-renew-deadline-ms", "1200",
            "--election-retry-ms", "300"]
FAULTS = ("host-head", "leader-etcd", "router-head", "worker-peers")
GUARD = os.path.join(REPO, "tests", "integration", "attempt_guard.py")
BACKEND = os.path.join(REPO, "tests", "integration", "serving_backend.py")
TRAIN = os.path.join(REPO, "examples", "train", "train.py")


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100.0 * (len(v) - 1))))]


def leader_info(c, endpoint):
    """GET /v1/leader of the head at `endpoint`, over https verified against cluster `c`'s CA
    (http for a --plain-http cluster); {} when it does not answer."""
    scheme = c.url.split("://", 1)[0]
    context = c.ssl_context() if scheme == "https" else None
    try:
        with urllib.request.urlopen("%s://%s/v1/leader" % (scheme, endpoint), timeout=1,
                                    context=context) as r:
            body = json.loads(r.read() or b"{}")
            return body if isinstance(body, dict) else {}
    except (OSError, ValueError, urllib.error.URLError):
        return {}


class Heads:
    """The heads of the cluster and who leads."""

    def __init__(self, c):
        self.c = c
        with open(os.path.join(c.state, "cluster.json")) as f:
            self.endpoints = json.load(f)["ha"]["headEndpoints"]

    def client_of(self, endpoint):
        """A client of the head at `endpoint` (HOST:PORT), with the cluster's scheme and CA."""
        return Client(self.c.url.split("://", 1)[0] + "://" + endpoint, self.c.token, timeout=5,
                      ca_file=self.c.ca_file)

    def leader(self):
        """(endpoint, term) of the head that says it leads, or None."""
        for h in self.endpoints:
            info = leader_info(self.c, h)
            if info.get("role") == "leader":
                return h, info["term"]
        return None

    def client(self):
        found = test_cluster.wait_for("a leader", self.leader, 90)
        return self.client_of(found[0])

    def member(self, endpoint):
        address = endpoint.rsplit(":", 1)[0]
        return [m["name"] for m in self.c.netns_plan()["members"] if m["address"] == address][0]


class Load:
    """The writer and the router client, on threads of their own."""

    def __init__(self, heads, router):
        self.heads, self.router = heads, router  # router: test_cluster.Router
        self.acked, self.refused, self.requests = [], [], []  # (name, time); time; (time, ok)
        self.refusals = {}  # the first answer of each refused status
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.write), threading.Thread(target=self.ask)]
        for t in self.threads:
            t.start()

    def write(self):
        n, client = 0, None
        while not self.stop.wait(0.2):
            name = "w-%d" % n
            n += 1
            doc = {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
                   "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 1,
                            "template": {"command": ["true"]}}}
            code, body = 0, "no leader found"
            try:
                if client is None:
                    found = self.heads.leader()
                    if found:
                        client = self.heads.client_of(found[0])
                if client is not None:
                    code, body = client.call("POST", "/api/v1/jobs", doc)
            except Exception as e:  # a cut link or a head gone: the client's own timeout
                code, body = 0, e
            if code == 201:
                self.acked.append((name, time.monotonic()))
            else:
                if code not in self.refusals:
                    self.refusals[code] = body
                    print("writer: a post refused (%d): %s" % (code, str(body)[:200]),
                          flush=True)
                self.refused.append(time.monotonic())
                client = None  # ask again who leads

    def ask(self):
        while not self.stop.wait(0.1):
            try:
                ok, _ = completion(self.router, "svc")
            except OSError:
                ok = False
            self.requests.append((time.monotonic(), ok))

    def first_ack_after(self, t):
        return next((at for _, at in list(self.acked) if at > t), None)

    def failed_between(self, t0, t1):
        return sum(1 for t, ok in list(self.requests) if t0 <= t <= t1 and not ok)

    def refused_between(self, t0, t1):
        return sum(1 for t in list(self.refused) if t0 <= t <= t1)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def new_attempt_running(heads, attempt):
    def check():
        try:
            st = heads.client().get("job", "long")["status"]
        except Exception:
            return False
        return st["attempt"] > attempt and st["phase"] == "Running" and st.get("lastStep", 0) > 0
    return check


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="faults (default 4; at most 20)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    if not 1 <= args.rounds <= 20:
        ap.error("--rounds: give 1 to 20 (each round is bounded to about two minutes)")
    why = test_cluster.netns_unavailable()
    if why:
        print("partition chaos: cannot make network namespaces here: %s" % why, file=sys.stderr)
        return 2
    if not (os.environ.get("TESSERA_ETCD") or shutil.which("etcd")):
        print("partition chaos: no etcd (scripts/setup.sh installs etcd-server)", file=sys.stderr)
        return 2
    c = test_cluster.Cluster(netns=True)
    results = {kind: [] for kind in FAULTS}
    overlaps = lost = 0
    load = None
    started = time.monotonic()
    load_before = os.getloadavg()
    try:
        c.cli("up", "--ha", "--ha-heads", "2", "--netns", "--generation", "v6e", "--topology",
              "2x4", "--slices", "4", "--heartbeat-ms", "200", "--lease-ms",
              str(HOST_LEASE_MS), "--fence-ms", str(FENCE_MS), "--timeout", "120", *ELECTION)
        with open(os.path.join(c.state, "admin.token")) as f:
            c.token = f.read().strip()
        c.reload_port()  # the leader's address, scheme and the cluster CA
        heads = Heads(c)
        router = test_cluster.Router(c.state)  # HTTPS verified against the cluster CA
        tmp = tempfile.mkdtemp(dir=c.dir)
        code, body = heads.client().call("POST", "/api/v1/jobs", {
            "apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "long"},
            "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 2,
                     "failurePolicy": {"maxFailures": -1, "onHostLoss": "pause"},
                     "progress": {"hangTimeout": "8s"},
                     "template": {"command": [test_cluster.PYTHON, GUARD, TRAIN],
                                  "env": {"PYTHONPATH": os.path.join(REPO, "python"),
                                          "ATTEMPT_GUARD_DIR": tmp, "STEPS": "1000000",
                                          "STEP_MS": "100", "DIST_TIMEOUT_SECONDS": "10",
                                          "CKPT_EVERY": "1000000"},
                                  "workingDir": REPO}}})
        assert code == 201, body
        code, body = heads.client().call("POST", "/api/v1/apply", {
            "apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": "svc"},
            "spec": {"accelerator": "v6e", "topology": "2x4", "replicas": 1,
                     "command": [test_cluster.PYTHON, BACKEND, "--token-ms", "1"],
                     "env": {"SERVING_BACKEND_BIND": "0.0.0.0"}, "workingDir": REPO,
                     "readiness": {"path": "/healthz", "startupGrace": "60s",
                                   "period": "500ms", "timeout": "5s"}}})
        assert code in (200, 201), body
        test_cluster.wait_for("the long job training", lambda: (
            heads.client().get("job", "long")["status"].get("lastStep", 0) > 0), 120)
        test_cluster.wait_for("the service answering",
                              lambda: completion(router, "svc")[0], 90)
        load = Load(heads, router)
        for i in range(args.rounds):
            kind = FAULTS[i % len(FAULTS)]
            # A quiet start: the job trains and a write was just acknowledged.
            test_cluster.wait_for("the long job training", lambda: (
                heads.client().get("job", "long")["status"]["phase"] == "Running"), 120)
            now = time.monotonic()
            test_cluster.wait_for("a write", lambda: load.first_ack_after(now), 60)
            st = heads.client().get("job", "long")["status"]
            hosts, attempt = [w["host"] for w in st["workers"]], st["attempt"]
            cuts = []
            t0 = time.monotonic()
            try:
                if kind == "host-head":
                    c.cut_link(hosts[0])
                    cuts.append((c.heal_link, (hosts[0],)))
                    test_cluster.wait_for("a new attempt", new_attempt_running(heads, attempt),
                                          90)
                    recovered = time.monotonic() - t0
                elif kind == "leader-etcd":
                    old = heads.leader()[0]
                    member = heads.member(old)
                    for e in range(3):
                        for a, b in ((member, "etcd-%d" % e), ("etcd-%d" % e, member)):
                            c.cut_between(a, b)
                            cuts.append((c.heal_between, (a, b)))
                    test_cluster.wait_for("another head leading", lambda: (
                        (heads.leader() or (old,))[0] != old), 90)
                    test_cluster.wait_for("a write acknowledged", lambda: (
                        load.first_ack_after(t0)), 90)
                    recovered = load.first_ack_after(t0) - t0
                elif kind == "router-head":
                    for h in heads.endpoints:
                        c.cut_between("root", heads.member(h))
                        cuts.append((c.heal_between, ("root", heads.member(h))))
                    deadline = time.monotonic() + 3.0
                    test_cluster.wait_for("the cut's end", lambda: time.monotonic() > deadline,
                                          10)
                    for fn, fargs in reversed(cuts):
                        fn(*fargs)
                    cuts = []
                    healed = time.monotonic()
                    test_cluster.wait_for("a write accepted",
                                          lambda: load.first_ack_after(healed), 60)
                    recovered = load.first_ack_after(healed) - healed
                else:  # worker-peers
                    a, b = hosts[0], hosts[1]
                    for x, y in ((a, b), (b, a)):
                        c.cut_between(x, y)
                        cuts.append((c.heal_between, (x, y)))
                    test_cluster.wait_for("a new attempt", new_attempt_running(heads, attempt),
                                          90)
                    recovered = time.monotonic() - t0
            finally:
                for fn, fargs in reversed(cuts):
                    fn(*fargs)
            # Healed: every host Ready and both heads answering again.
            test_cluster.wait_for("every host Ready", lambda: all(
                h["status"]["state"] == "Ready"
                for h in heads.client().request("GET", "/api/v1/hosts")["items"]), 90)
            test_cluster.wait_for("both heads answering", lambda: all(
                leader_info(c, h).get("role") in ("leader", "standby")
                for h in heads.endpoints), 90)
            t1 = time.monotonic()
            results[kind].append({"recovery_s": round(recovered, 2),
                                  "requests_failed": load.failed_between(t0, t1),
                                  "requests": sum(1 for t, _ in list(load.requests)
                                                  if t0 <= t <= t1),
                                  "writes_refused": load.refused_between(t0, t1)})
            print("round %d %s: recovered in %.2f s; %d of %d router requests failed, %d writes "
                  "refused (load %.2f)" % (i, kind, recovered, results[kind][-1]["requests_failed"],
                                           results[kind][-1]["requests"],
                                           results[kind][-1]["writes_refused"],
                                           os.getloadavg()[0]), flush=True)
        load.finish()
        listed = {j["metadata"]["name"]
                  for j in heads.client().request("GET", "/api/v1/jobs")["items"]}
        lost = len([n for n, _ in load.acked if n not in listed])
        with open(os.path.join(tmp, "records.jsonl")) as f:
            overlaps = sum(1 for line in f if json.loads(line)["overlap"])
        summary = {
            kind: {"rounds": len(r), "recovery_p50_s": pct([x["recovery_s"] for x in r], 50),
                   "recovery_max_s": max([x["recovery_s"] for x in r], default=None),
                   "requests_failed": sum(x["requests_failed"] for x in r),
                   "requests": sum(x["requests"] for x in r),
                   "writes_refused": sum(x["writes_refused"] for x in r)}
            for kind, r in results.items()}
        report = {"rounds": args.rounds, "acked_writes": len(load.acked), "acked_lost": lost,
                  "overlapping_attempts": overlaps, "faults": summary, "detail": results,
                  "wall_s": round(time.monotonic() - started, 1),
                  "load_before": load_before, "load_after": os.getloadavg()}
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
