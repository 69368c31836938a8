"""Network partitions on a live cluster in network namespaces (issue 32 section 3, docs/netns.md):
links are cut, not processes killed.

- A host cut off from the head: its lease runs out, the job recovers by its policy on the other
  slice, the cut-off host's worker stops by the agent's own fence time before the replacement
  starts (attempt_guard.py records any overlap), and when the link returns the host rejoins
  without the new attempt restarting.
- The router cut off from the head: it keeps serving the endpoints it last knew.
- A worker cut off from its peers (its link to the other hosts of its job down, the head still
  reachable): the job's collective hangs, the head finds it, and the job recovers.

One cluster for the file: three v6e 2x4 slices of one host each, 200 ms heartbeats, a 2 s lease,
a 3 s fence. Each test restores every link it cut. Skipped, saying why, where namespaces cannot
be made (not root, no iproute2). Every wait polls a condition with a generous deadline.
"""
import json
import os
import tempfile
import time
import unittest

from test_cluster import (PYTHON, REPO, Cluster, Router, alive, read_pid, netns_unavailable,
                          wait_for)
from test_serving_e2e import completion

HERE = os.path.dirname(os.path.abspath(__file__))
GUARD = os.path.join(HERE, "attempt_guard.py")
BACKEND = os.path.join(HERE, "serving_backend.py")
FENCE_MS = 3000
LEASE_MS = 2000

# A training worker that reports progress (starting the SDK's fence watchdog) and records its pid.
SDK_WORKER = """
import os, sys, time
from tessera import worker
with open(os.path.join(sys.argv[1], "worker-%s-%s.pid" % (os.environ["TESSERA_ATTEMPT"],
                                                           os.environ["RANK"])), "w") as f:
    f.write(str(os.getpid()))
step = 0
while True:
    worker.report_progress(step)
    step += 1
    time.sleep(0.1)
"""


@unittest.skipIf(netns_unavailable(), "network namespaces cannot be made here: %s" %
                 netns_unavailable())
class PartitionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(netns=True)
        cls.c.cli("up", "--generation", "v6e", "--topology", "2x4", "--slices", "3",
                  "--heartbeat-ms", "200", "--lease-ms", str(LEASE_MS), "--fence-ms",
                  str(FENCE_MS), "--timeout", "120", "--netns")
        with open(os.path.join(cls.c.state, "admin.token")) as f:
            cls.c.token = f.read().strip()
        cls.c.reload_port()
        cls.router = Router(cls.c.state)

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="partition-", dir=self.c.dir)
        self.heal = []  # (function, args) undone at the end of the test, cut or not

        def heal_all():
            for fn, args in reversed(self.heal):
                try:
                    fn(*args)
                except AssertionError:
                    pass

        self.addCleanup(heal_all)

    def tearDown(self):
        for kind, path in (("jobs", "/api/v1/jobs"), ("services", "/api/v1/services")):
            code, items = self.c.request("GET", path)
            for it in items.get("items", []):
                self.c.request("DELETE", "%s/%s" % (path, it["metadata"]["name"]))
            wait_for("no " + kind, lambda: not self.c.request("GET", path)[1]["items"],
                     timeout=60)
        wait_for("every host Ready", lambda: all(
            h["status"]["state"] == "Ready"
            for h in self.c.request("GET", "/api/v1/hosts")[1]["items"]), timeout=60)

    def cut_link(self, name):
        self.heal.append((self.c.heal_link, (name,)))
        self.c.cut_link(name)

    def cut_between(self, ns_of, peer):
        self.heal.append((self.c.heal_between, (ns_of, peer)))
        self.c.cut_between(ns_of, peer)

    def records(self):
        try:
            with open(os.path.join(self.tmp, "records.jsonl")) as f:
                return [json.loads(line) for line in f if line.strip()]
        except OSError:
            return []

    def test_a_host_cut_off_from_the_head_is_fenced_and_rejoins(self):
        script = os.path.join(self.tmp, "sdk_worker.py")
        with open(script, "w") as f:
            f.write(SDK_WORKER)
        doc = {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "cut"},
               "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 1,
                        "failurePolicy": {"maxFailures": 2, "onHostLoss": "pause"},
                        "template": {"command": [PYTHON, GUARD, script, self.tmp],
                                     "env": {"PYTHONPATH": os.path.join(REPO, "python"),
                                             "ATTEMPT_GUARD_DIR": self.tmp},
                                     "workingDir": REPO}}}
        code, body = self.c.request("POST", "/api/v1/jobs", doc)
        self.assertEqual(code, 201, body)
        st = wait_for("attempt 0 running and reporting", lambda: (
            self.c.get_job("cut")["status"]["phase"] == "Running" and
            self.c.get_job("cut")["status"].get("lastStep", 0) >= 3 and
            self.c.get_job("cut")["status"]), timeout=60)
        host = st["workers"][0]["host"]
        old = wait_for("attempt 0's pid", lambda: read_pid(self.tmp + "/worker-0-0.pid"))

        cut_at = time.monotonic()
        self.cut_link(host)
        st = wait_for("a replacement attempt", lambda: (
            self.c.get_job("cut")["status"]["attempt"] >= 1 and self.c.get_job("cut")["status"]),
            timeout=60)
        recovered = wait_for("attempt 1 running", lambda: (
            self.c.get_job("cut")["status"]["phase"] == "Running" and
            self.c.get_job("cut")["status"]["attempt"] == 1 and time.monotonic()), timeout=60)
        print("\npartition host/head: recovered in %.1f s (lease %d ms, fence %d ms)" % (
            recovered - cut_at, LEASE_MS, FENCE_MS))
        self.assertNotEqual(st["workers"][0]["host"], host)
        self.assertEqual(st["attempts"][0]["endReason"], "HostLost")
        # The cut-off host stopped its worker by its own fence time, while still cut off.
        wait_for("the cut-off worker stopped", lambda: not alive(old), timeout=30)
        new = wait_for("attempt 1's pid", lambda: read_pid(self.tmp + "/worker-1-0.pid"))
        records = wait_for("attempt 1's guard record",
                           lambda: [r for r in self.records() if r["attempt"] == 1])
        self.assertEqual(records[0]["overlap"], [], "attempt 0 still ran when attempt 1 started")

        self.c.heal_link(host)
        wait_for("the host back", lambda: [
            h for h in self.c.request("GET", "/api/v1/hosts")[1]["items"]
            if h["metadata"]["name"] == host and h["status"]["state"] == "Ready"], timeout=30)
        st = self.c.get_job("cut")["status"]
        self.assertEqual((st["phase"], st["attempt"]), ("Running", 1))
        self.assertTrue(alive(new), "attempt 1's worker was restarted when the host rejoined")
        self.assertEqual(read_pid(self.tmp + "/worker-1-0.pid"), new)
        self.assertFalse([r for r in self.records() if r["overlap"]])

    def test_the_router_cut_off_from_the_head_keeps_serving(self):
        svc = {"apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": "kept"},
               "spec": {"accelerator": "v6e", "topology": "2x4", "replicas": 1,
                        "command": [PYTHON, BACKEND, "--token-ms", "1"],
                        "env": {"SERVING_BACKEND_BIND": "0.0.0.0"}, "workingDir": REPO,
                        "readiness": {"path": "/healthz", "startupGrace": "60s",
                                      "period": "500ms", "timeout": "5s"}}}
        code, body = self.c.request("POST", "/api/v1/apply", svc)
        self.assertIn(code, (200, 201), body)
        wait_for("the service answering through the router",
                 lambda: completion(self.router, "kept")[0], timeout=90)
        # This namespace (the router, and this test's client) can no longer reach the head; the
        # agents and the replica still can.
        self.cut_between("root", "head")
        failed = 0
        deadline = time.monotonic() + 3 * LEASE_MS / 1000.0
        served = 0
        while time.monotonic() < deadline:
            ok, _ = completion(self.router, "kept")
            served += ok
            failed += not ok
            time.sleep(0.05)
        print("\npartition router/head: %d requests served, %d failed while cut" % (
            served, failed))
        self.assertGreater(served, 0)
        self.assertEqual(failed, 0)
        self.c.heal_between("root", "head")
        wait_for("the head reachable again", lambda: self.c.request(
            "GET", "/api/v1/services/kept")[0] == 200, timeout=30)

    def test_a_worker_cut_off_from_its_peers_is_recovered(self):
        # Two slices talk over gloo; one host loses its link to the other (the head reachable).
        doc = {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "peers"},
               "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 2,
                        "failurePolicy": {"maxFailures": 2},
                        "progress": {"hangTimeout": "8s"},
                        "template": {"command": [PYTHON, os.path.join(REPO, "examples", "train",
                                                                      "train.py")],
                                     "env": {"STEPS": "100000", "STEP_MS": "50",
                                             "DIST_TIMEOUT_SECONDS": "10",
                                             "PYTHONPATH": os.path.join(REPO, "python")},
                                     "workingDir": REPO}}}
        code, body = self.c.request("POST", "/api/v1/jobs", doc)
        self.assertEqual(code, 201, body)
        st = wait_for("attempt 0 training", lambda: (
            self.c.get_job("peers")["status"]["phase"] == "Running" and
            self.c.get_job("peers")["status"].get("lastStep", 0) >= 3 and
            self.c.get_job("peers")["status"]), timeout=120)
        a, b = st["workers"][0]["host"], st["workers"][1]["host"]
        self.cut_between(a, b)
        self.cut_between(b, a)
        cut_at = time.monotonic()
        st = wait_for("a new attempt", lambda: (
            self.c.get_job("peers")["status"]["attempt"] >= 1 and
            self.c.get_job("peers")["status"]), timeout=90)
        found = time.monotonic() - cut_at
        print("\npartition worker/peers: found in %.1f s (%s)" % (
            found, st["attempts"][0].get("endReason")))
        # Found as a hang (no steps) or as the failure of a collective that timed out.
        self.assertIn(st["attempts"][0].get("endReason"), ("Hang", "WorkerFailed"))
        # Healed, the new attempt trains again.
        self.c.heal_between(a, b)
        self.c.heal_between(b, a)
        # The job's lastStep is the highest of any attempt, which a new attempt resumed from an
        # older checkpoint passes only after a while on a loaded machine: look at the running
        # attempt's own steps instead.
        def attempt_steps():
            st = self.c.get_job("peers")["status"]
            own = [a for a in st.get("attempts", []) if a["attempt"] == st["attempt"]]
            return st["attempt"], (own[0].get("lastStep", -1) if own else st.get("lastStep", -1))

        healed = attempt_steps()
        wait_for("the new attempt training", lambda: (
            attempt_steps()[0] >= 1 and attempt_steps() != healed and
            attempt_steps()[1] >= 0 and self.c.phase("peers") == "Running"), timeout=120)


if __name__ == "__main__":
    unittest.main()
