"""End-to-end tests of Services through `tessera router` on a local emulated cluster (issue 12,
docs/serving.md): a rolling update with maxUnavailable 0 replaces groups one at a time while the
router keeps answering every request; autoscaling from the router's load reports adds a group
that takes traffic and removes it after the downscale delay; a replica killed before it sends
the first byte of a response has the request retried on another replica.

The replicas run serving_backend.py (a fast fake of examples/serve: HTTP on $PORT, streamed
completions, requests held until released). The cluster: three v6e 2x4 slices of one host
(8 chips) each, so a replica group is one process (test_serving.py covers groups of four:
a follower's death recreating its group) and a rolling update of two replicas has room for its
surge group. Short probe periods and delays; every wait polls a condition with a deadline.

The binary comes from $TESSERA_BIN.
"""
import http.client
import json
import os
import signal
import threading
import time
import unittest

from test_cluster import PYTHON, REPO, Cluster, Router, alive, netns_unavailable, wait_for
from test_router import metric

HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND = os.path.join(HERE, "serving_backend.py")
# The replicas listen on their host's own address when the hosts are network namespaces (the
# cluster below is one where they can be made: docs/netns.md), else on loopback.
BACKEND_BIND = "127.0.0.1" if netns_unavailable() else "0.0.0.0"


def service(name, replicas=2, env=None, autoscaling=None):
    spec = {
        "accelerator": "v6e",
        "topology": "2x4",
        "command": [PYTHON, BACKEND, "--token-ms", "2"],
        "workingDir": REPO,
        "env": dict({"SERVING_BACKEND_BIND": BACKEND_BIND}, **(env or {})),
        "maxOngoingRequests": 4,
        "readiness": {"path": "/healthz", "startupGrace": "60s", "period": "500ms",
                      "timeout": "5s"},
        "terminationGracePeriod": "20s",
        "rollout": {"maxSurge": 1, "maxUnavailable": 0},
    }
    if autoscaling:
        spec["autoscaling"] = autoscaling
    else:
        spec["replicas"] = replicas
    return {"apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": name},
            "spec": spec}


class ServingCluster(Cluster):
    """test_cluster's Cluster with 2x4 slices, and the router `tessera up` started."""

    def up(self, topology="2x4", slices=3):
        self.cli("up", "--generation", "v6e", "--topology", topology, "--slices", str(slices),
                 "--heartbeat-ms", "200", "--lease-ms", "2000", "--timeout", "120",
                 *self.up_flags())
        with open(os.path.join(self.state, "admin.token")) as f:
            self.token = f.read().strip()
        self.reload_port()
        self.router = Router(self.state)


def router_call(router, method, path, body=None, timeout=60):
    """(status, body text) of one request through `router` (test_cluster's Router: HTTPS
    verified against the cluster CA); a new connection each."""
    conn = router.connection(timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data else {}
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        return r.status, r.read().decode(errors="replace")
    finally:
        conn.close()


def completion(router, service_name, tokens=5, prefix="/services/"):
    """One streamed completion through `router`: (ok, replica or error text). `prefix`: where
    the router serves the Service's namespace (/namespaces/NS/services/ outside default)."""
    status, text = router_call(router, "POST", "%s%s/v1/completions" % (prefix, service_name),
                               {"prompt": "hi", "max_tokens": tokens, "stream": True})
    if status != 200:
        return False, "HTTP %d: %s" % (status, text[:200])
    replica, count, done = None, 0, False
    for line in text.splitlines():
        if not line.startswith("data: "):
            continue
        payload = line[6:]
        if payload == "[DONE]":
            done = True
            continue
        event = json.loads(payload)
        for choice in event.get("choices") or []:
            count += len(choice.get("text", ""))
        replica = event.get("replica", replica)
    if not done or count != tokens:
        return False, "incomplete stream (%d of %d tokens, done=%s): %r" % (count, tokens, done,
                                                                          text[-200:])
    return True, replica


class Traffic:
    """`clients` threads sending streamed completions through the router back to back until
    stopped; every outcome is kept."""

    def __init__(self, router, service_name, clients=3):
        self.router, self.service = router, service_name
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.by_replica = {}
        self.failures = []
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(clients)]
        for t in self.threads:
            t.start()

    def loop(self):
        while not self.stop_event.is_set():
            try:
                ok, what = completion(self.router, self.service)
            except Exception as e:  # a failure to count, not to stop on
                ok, what = False, "%s: %s" % (type(e).__name__, e)
            with self.lock:
                if ok:
                    self.ok += 1
                    self.by_replica[what] = self.by_replica.get(what, 0) + 1
                else:
                    self.failures.append((time.time(), what))

    def count(self):
        with self.lock:
            return self.ok

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=120)


class ServingEndToEndTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Serving through the router to replicas at their hosts' own addresses (docs/netns.md).
        cls.c = ServingCluster(netns=True)
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def tearDown(self):
        # Leave the cluster empty for the next test.
        for svc in self.c.request("GET", "/api/v1/services")[1]["items"]:
            self.c.request("DELETE", "/api/v1/services/" + svc["metadata"]["name"])
        wait_for("no services", lambda: not self.c.request("GET", "/api/v1/services")[1]["items"],
                 timeout=90)

    def get(self, name):
        status, body = self.c.request("GET", "/api/v1/services/" + name)
        return body if status == 200 else None

    def role(self, name):
        return self.get(name)["status"]["roles"][0]

    def ready_endpoints(self, name):
        svc = self.get(name)
        return [e for e in svc["status"]["endpoints"] if e["ready"]] if svc else []

    def apply(self, doc):
        status, body = self.c.request("POST", "/api/v1/apply", doc)
        self.assertIn(status, (200, 201), body)

    def router_metrics(self):
        status, text = router_call(self.c.router, "GET", "/metrics")
        self.assertEqual(status, 200, text)
        return text

    def plain_http_status(self, path):
        """The status of a plain-HTTP GET of `path` at the router's port; None when the
        connection ends without an HTTP answer."""
        conn = http.client.HTTPConnection("127.0.0.1", self.c.router.port, timeout=30)
        try:
            conn.request("GET", path)
            return conn.getresponse().status
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def hold_dir(self, name):
        path = os.path.join(self.c.dir, "hold-" + name)
        os.makedirs(path, exist_ok=True)
        return path

    def test_a_service_of_another_namespace_is_served_at_its_namespaced_path(self):
        # "ns-echo" of team-s beside nothing of that name in default: the router watches every
        # namespace, routes /namespaces/team-s/services/ns-echo/ to it, /services/ns-echo/ to
        # nothing, and reports its load into team-s (status.roles[].traffic there).
        doc = service("ns-echo", 1)
        doc["metadata"]["namespace"] = "team-s"
        self.apply(doc)
        in_ns = "/api/v1/services/ns-echo?namespace=team-s"
        try:
            def ready():
                status, body = self.c.request("GET", in_ns)
                return status == 200 and any(e["ready"] for e in body["status"]["endpoints"])

            wait_for("ns-echo ready in team-s", ready, timeout=90)
            wait_for("the router routing to ns-echo", lambda: router_call(
                self.c.router, "GET", "/namespaces/team-s/services/ns-echo/whoami")[0] == 200,
                timeout=60)
            status, text = router_call(self.c.router, "GET", "/services/ns-echo/whoami")
            self.assertEqual(status, 404, text)
            self.assertIn("/namespaces/team-s/services/ns-echo/", text)
            ok, what = completion(self.c.router, "ns-echo", prefix="/namespaces/team-s/services/")
            self.assertTrue(ok, what)

            def reported():
                role = self.c.request("GET", in_ns)[1]["status"]["roles"][0]
                return role.get("traffic", {}).get("requests", 0) > 0

            wait_for("the router's load report in team-s", reported, timeout=60)
        finally:
            self.c.request("DELETE", in_ns)
            wait_for("ns-echo gone", lambda: self.c.request("GET", in_ns)[0] == 404, timeout=90)

    def test_rolling_update_replaces_groups_one_at_a_time_and_fails_no_request(self):
        self.apply(service("roll", 2, env={"VERSION": "v1"}))
        wait_for("2 replicas ready", lambda: len(self.ready_endpoints("roll")) == 2, timeout=90)
        # The router learns them from the head's watch.
        wait_for("the router routing to roll",
                 lambda: metric(self.router_metrics(), "tessera_router_ready_replicas",
                                service="roll") == 2, timeout=30)
        # `up`'s router speaks HTTPS only: what HTTPS serves, plain HTTP on its port does not.
        self.assertEqual(self.c.router.scheme, "https")
        self.assertEqual(router_call(self.c.router, "GET", "/services/roll/whoami")[0], 200)
        self.assertNotEqual(self.plain_http_status("/services/roll/whoami"), 200)
        old = {r["replica"] for r in self.role("roll")["replicas"]}
        traffic = Traffic(self.c.router, "roll")
        self.addCleanup(traffic.stop)
        wait_for("traffic flowing", lambda: traffic.count() >= 20, timeout=60)

        self.apply(service("roll", 2, env={"VERSION": "v2"}))
        snapshots = []

        def rolled():
            role = self.role("roll")
            snapshots.append(role)
            live = [r for r in role["replicas"] if r["phase"] != "Terminating"]
            return (role["generation"] == 2 and len(role["replicas"]) == 2 and
                    all(r["generation"] == 2 and r["phase"] == "Ready" for r in live))

        wait_for("both groups replaced by generation 2", rolled, timeout=180, interval=0.05)
        # The router has dropped the old groups and routes to the new ones.
        wait_for("the router on the new groups",
                 lambda: metric(self.router_metrics(), "tessera_router_ready_replicas",
                                service="roll") == 2, timeout=30)
        before = traffic.count()
        wait_for("more traffic after the update", lambda: traffic.count() >= before + 20,
                 timeout=60)
        traffic.stop()

        self.assertEqual(traffic.failures, [], "requests failed during the rolling update")
        new = {r["replica"] for r in self.role("roll")["replicas"]}
        self.assertFalse(old & new, "every group was replaced")
        # One group at a time: never more than one new group starting, never more than
        # replicas + maxSurge groups, never fewer than 2 ready (maxUnavailable 0).
        for role in snapshots:
            live = [r for r in role["replicas"] if r["phase"] != "Terminating"]
            starting_new = [r for r in live if r["generation"] == 2 and r["phase"] != "Ready"]
            ready = [r for r in live if r["phase"] == "Ready"]
            self.assertLessEqual(len(starting_new), 1, role)
            self.assertLessEqual(len(live), 3, role)
            self.assertGreaterEqual(len(ready), 2, role)
        # Both new groups were seen starting, one after the other.
        seen_starting = [tuple(sorted(r["replica"] for r in role["replicas"]
                                      if r["generation"] == 2 and r["phase"] != "Ready"))
                         for role in snapshots]
        self.assertTrue(any(seen_starting), "no snapshot caught a new group starting")
        # Responses now come from generation 2 (its VERSION) only.
        for _ in range(5):
            status, text = router_call(self.c.router, "GET", "/services/roll/whoami")
            self.assertEqual(status, 200, text)
            self.assertEqual(json.loads(text)["version"], "v2")
        text = self.router_metrics()
        self.assertIsNone(metric(text, "tessera_router_requests_total", service="roll", code=502))
        self.assertIsNone(metric(text, "tessera_router_requests_total", service="roll", code=503))

    def test_autoscaling_adds_a_group_that_takes_traffic_then_scales_down_after_the_delay(self):
        hold = self.hold_dir("auto")
        downscale_s = 4
        self.apply(service("auto", env={"HOLD_DIR": hold}, autoscaling={
            "minReplicas": 1, "maxReplicas": 2, "targetOngoingRequests": 1,
            "upscaleDelay": "1s", "downscaleDelay": "%ds" % downscale_s, "lookback": "2s"}))
        wait_for("1 replica ready", lambda: len(self.ready_endpoints("auto")) == 1, timeout=90)
        wait_for("the router routing to auto",
                 lambda: metric(self.router_metrics(), "tessera_router_ready_replicas",
                                service="auto") == 1, timeout=30)
        first = self.ready_endpoints("auto")[0]["replica"]
        self.assertEqual(self.role("auto")["desiredReplicas"], 1)
        described = self.c.cli("describe", "service", "auto").stdout
        self.assertIn("Autoscaling: min 1, max 2, initial 1, target 1 ongoing requests per "
                      "replica, TTFT 2000 ms, TPOT 50 ms, upscale delay 1000ms, downscale delay "
                      "4000ms, lookback 2000ms", described)

        # Three requests held in flight on the only replica: the router reports 3 ongoing.
        results = []
        threads = [threading.Thread(target=lambda i=i: results.append(router_call(
            self.c.router, "GET", "/services/auto/hold?id=%d" % i, timeout=120)))
            for i in range(3)]
        for t in threads:
            t.start()
        wait_for("3 requests held", lambda: len(os.listdir(hold)) == 3, timeout=30)

        wait_for("the autoscaler wanting 2", lambda: self.role("auto")["desiredReplicas"] == 2,
                 timeout=60)
        scaled = [e for e in self.events("auto") if "Autoscaled" in json.dumps(e)]
        self.assertIn("1 -> 2 replicas", json.dumps(scaled[-1]), scaled)
        self.assertIn("upscale delay 1 s", json.dumps(scaled[-1]), scaled)
        wait_for("the new group ready", lambda: len(self.ready_endpoints("auto")) == 2,
                 timeout=90)
        wait_for("the router routing to both",
                 lambda: metric(self.router_metrics(), "tessera_router_ready_replicas",
                                service="auto") == 2, timeout=30)
        second = [e["replica"] for e in self.ready_endpoints("auto") if e["replica"] != first][0]
        # The new group takes traffic: it has free slots and no request in flight, so power of
        # two choices sends it every new request while the first holds three.
        for _ in range(3):
            status, text = router_call(self.c.router, "GET", "/services/auto/whoami")
            self.assertEqual(status, 200, text)
            self.assertEqual(json.loads(text)["replica"], str(second))
        self.assertGreaterEqual(metric(self.router_metrics(), "tessera_router_requests_total",
                                       service="auto", code=200), 3)

        # The load goes away: back to 1 replica, not before the downscale delay.
        released = time.time()
        open(os.path.join(hold, "release"), "w").close()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(sorted(r[0] for r in results), [200, 200, 200], results)
        wait_for("the autoscaler back to 1", lambda: self.role("auto")["desiredReplicas"] == 1,
                 timeout=60)
        waited = time.time() - released
        self.assertGreaterEqual(waited, downscale_s - 0.1,
                                "scaled down %.1f s after the load ended" % waited)
        scaled = [e for e in self.events("auto") if "Autoscaled" in json.dumps(e)]
        self.assertIn("2 -> 1 replicas", json.dumps(scaled[-1]), scaled)
        self.assertIn("downscale delay %d s" % downscale_s, json.dumps(scaled[-1]), scaled)
        wait_for("one group left", lambda: len(self.role("auto")["replicas"]) == 1, timeout=60)
        self.assertEqual(len(self.ready_endpoints("auto")), 1)
        wait_for("the router on one replica",
                 lambda: metric(self.router_metrics(), "tessera_router_ready_replicas",
                                service="auto") == 1, timeout=30)
        self.assertEqual(router_call(self.c.router, "GET", "/services/auto/whoami")[0], 200)

    def events(self, name):
        status, body = self.c.request("GET", "/api/v1/events")
        self.assertEqual(status, 200, body)
        return [e for e in body["items"] if "service/" + name in json.dumps(e)]

    def test_a_replica_killed_before_its_first_byte_has_the_request_retried_on_another(self):
        hold = self.hold_dir("retry")
        self.apply(service("retry", 2, env={"HOLD_DIR": hold}))
        wait_for("2 replicas ready", lambda: len(self.ready_endpoints("retry")) == 2, timeout=90)
        wait_for("the router routing to both",
                 lambda: metric(self.router_metrics(), "tessera_router_ready_replicas",
                                service="retry") == 2, timeout=30)
        retries_before = metric(self.router_metrics(), "tessera_router_retries_total",
                                service="retry") or 0

        result = []
        t = threading.Thread(target=lambda: result.append(router_call(
            self.c.router, "GET", "/services/retry/hold?id=x", timeout=120)))
        t.start()
        self.addCleanup(t.join, 120)
        self.addCleanup(lambda: open(os.path.join(hold, "release"), "w").close())
        first = wait_for("the request held by a replica", lambda: os.listdir(hold), timeout=30)
        _, replica, pid, _ = first[0].split("-", 3)
        os.kill(int(pid), signal.SIGKILL)  # the leader, before any byte of its answer

        def retried():
            held = [f for f in os.listdir(hold) if f.startswith("held-")]
            return [f for f in held if f.split("-")[1] != replica]

        second = wait_for("the request retried on the other replica", retried, timeout=30)
        open(os.path.join(hold, "release"), "w").close()
        t.join(timeout=120)
        self.assertEqual(len(result), 1)
        status, text = result[0]
        self.assertEqual(status, 200, text)
        answer = json.loads(text)
        self.assertEqual(answer["id"], "x")
        self.assertNotEqual(answer["replica"], replica)
        self.assertEqual(answer["replica"], second[0].split("-")[1])
        text = self.router_metrics()
        self.assertEqual(metric(text, "tessera_router_retries_total", service="retry"),
                         retries_before + 1)
        self.assertIsNone(metric(text, "tessera_router_requests_total", service="retry", code=502))
        self.assertFalse(alive(int(pid)))
        # The killed group is recreated and rejoins routing.
        wait_for("the killed group back", lambda: any(
            r["replica"] == int(replica) and r["restarts"] >= 1 and r["phase"] == "Ready"
            for r in self.role("retry")["replicas"]), timeout=90)
        wait_for("the router routing to both again",
                 lambda: metric(self.router_metrics(), "tessera_router_ready_replicas",
                                service="retry") == 2, timeout=30)


if __name__ == "__main__":
    unittest.main()
