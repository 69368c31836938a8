"""A disaggregated Service of tensor-parallel groups through a real head (issue 34): `tessera up`
of one v5p cube (16 emulated hosts, each in a network namespace at its own address where they
can be made; the router), a Service whose prefill and decode roles are groups of 2 processes
each (v5p 2x2x2 slices, 2 hosts), applied through the head. Both groups come up Ready, requests
through the router are handed off prefill -> decode rank to rank (each decode rank pulls its own
shard from the matching prefill rank, whose KV listener is at its own host's address), and the
text equals the decode group's own local prefill, greedy (examples/serve/test_disagg_tp.py shows
that a local prefill is a colocated group's text).
Then, what docs/serving.md promises when a process dies:

- a killed prefill follower: every request still succeeds with the same text (decode prefills
  locally, "no request fails because a prefill replica did"), the head recreates the prefill
  group, and handoffs resume;
- a killed decode follower: the head recreates the decode group ("Group restart"); requests
  sent while it is gone wait in the router's queue (no replica ready) and are answered by the
  recreated group, handed off again, with the same text.

Real processes because what is tested is what no unit test covers: the head's placement of
2-host groups and their environment (MASTER_ADDR/PORT, TESSERA_GROUP_SIZE, TESSERA_KV_*), the
groups' rendezvous and KV listeners under the agents, the router's pairing, and the head's
group restart with the KV handoff. The model is small (2 layers, d_model 64) so that four
server processes and two restarts stay cheap on a 2-core machine.

The binary comes from $TESSERA_BIN.
"""
import http.client
import json
import os
import signal
import threading
import unittest

from test_cluster import (LEASE_MS, PYTHON, REPO, TESSERA, Cluster, Router, alive, heartbeat_ms,
                          wait_for)
from test_router import metric

NAME = "pdtp"
SERVER = os.path.join(REPO, "examples", "serve", "server.py")
SMALL = ["--layers", "2", "--d-model", "64", "--heads", "4", "--d-ff", "128", "--context",
         "512", "--threads", "1"]
# Longer than the threshold (8 tokens): decode hands them to the prefill role.
PROMPTS = ["Tensor-parallel disaggregation through a head: every decode rank pulls its shard.",
           "A second prompt, long enough to be prefilled by the prefill group's two ranks."]
MAX_TOKENS = 10


def role(name, kind):
    return {"name": name, "disaggregation": kind, "accelerator": "v5p", "topology": "2x2x2",
            "replicas": 1, "command": [PYTHON, SERVER, *SMALL], "workingDir": REPO,
            "maxOngoingRequests": 4,
            "readiness": {"path": "/healthz", "startupGrace": "120s", "period": "500ms",
                          "timeout": "5s"},
            "terminationGracePeriod": "5s"}


def service():
    return {"apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": NAME},
            "spec": {"kvTransfer": {"threshold": 8, "timeout": "5s", "hold": "10s"},
                     "roles": [role("decode", "decode"), role("prefill", "prefill")]}}


def complete(connect, prompt, path="/v1/completions", stream=False):
    """(HTTP status, text or error, X-Tessera-Prefilled) of one greedy completion;
    `connect(timeout)` gives the connection."""
    conn = connect(120)
    try:
        body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream}
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        raw = r.read().decode(errors="replace")
        if r.status != 200:
            return r.status, raw[:300], None
        if stream:
            chunks = [json.loads(line[6:]) for line in raw.splitlines()
                      if line.startswith("data: {")]
            text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        else:
            text = json.loads(raw)["choices"][0]["text"]
        return 200, text, r.getheader("X-Tessera-Prefilled")
    finally:
        conn.close()


class CubeCluster(Cluster):
    """test_cluster's Cluster on one v5p cube (16 hosts): 2x2x2 slices are 2 hosts each."""

    def up(self):
        self.cli("up", "--generation", "v5p", "--cubes", "1", "--heartbeat-ms", heartbeat_ms(),
                 "--lease-ms", str(LEASE_MS), "--timeout", "120", *self.up_flags())
        with open(os.path.join(self.state, "admin.token")) as f:
            self.token = f.read().strip()
        self.reload_port()
        self.router = Router(self.state)


class Requests:
    """Completions of PROMPTS in turn through the router, back to back on one thread until
    stopped; every outcome kept as (status, text or error, source, prompt)."""

    def __init__(self, router, path):
        self.router, self.path = router, path
        self.outcomes = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        i = 0
        while not self.stop_event.is_set():
            prompt = PROMPTS[i % len(PROMPTS)]
            try:
                status, text, source = complete(self.router.connection, prompt, self.path)
            except (OSError, http.client.HTTPException) as e:
                status, text, source = 0, "%s: %s" % (type(e).__name__, e), None
            self.outcomes.append((status, text, source, prompt))
            i += 1

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=150)
        return list(self.outcomes)


@unittest.skipUnless(os.path.exists(TESSERA), "needs the tessera binary ($TESSERA_BIN)")
class DisaggTensorParallelLiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # In network namespaces where they can be made: each host at its own address, so the
        # ranks' KV listeners and rendezvous are on distinct addresses (docs/netns.md).
        cls.c = CubeCluster(netns=True)
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def role(self, name):
        status, svc = self.c.request("GET", "/api/v1/services/" + NAME)
        self.assertEqual(status, 200, svc)
        return [r for r in svc["status"]["roles"] if r["name"] == name][0]

    def group(self, name):
        return self.role(name)["replicas"][0]

    def routed(self, role_name):
        """The router's count of ready replicas of a role (the decode role is the Service's;
        the prefill role is paired from the endpoints, not counted here)."""
        status, text = self.router_get("/metrics")
        self.assertEqual(status, 200, text)
        return metric(text, "tessera_router_ready_replicas", service=NAME)

    def router_get(self, path):
        conn = self.c.router.connection(30)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read().decode(errors="replace")
        finally:
            conn.close()

    def leader(self, name):
        """A connection factory to a role's leader (HTTPS, the cluster CA)."""
        ep = self.group(name)["leader"]
        return lambda timeout: http.client.HTTPSConnection(
            ep["address"], ep["port"], timeout=timeout, context=self.c.ssl_context())

    def healthz(self, name):
        conn = self.leader(name)(30)
        try:
            conn.request("GET", "/healthz")
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def ready_again(self, name, incarnation):
        """Waits for the role's group to be Ready at a later incarnation than `incarnation`."""
        def ready():
            g = self.group(name)
            return g if g["phase"] == "Ready" and g["incarnation"] > incarnation else None
        return wait_for("%s recreated and Ready" % name, ready, timeout=150, interval=0.2)

    def remote(self, prompt):
        """A completion through the router once one is handed off (the router's view may
        still lack the prefill endpoint)."""
        def handed_off():
            r = complete(self.c.router.connection, prompt, self.path)
            return r if r[0] == 200 and r[2] == "remote" else None
        return wait_for("a request prefilled by the prefill group", handed_off, timeout=60,
                        interval=0.2)

    def test_groups_of_two_hand_off_rank_to_rank_and_survive_a_dead_rank(self):
        status, body = self.c.request("POST", "/api/v1/apply", service())
        self.assertIn(status, (200, 201), body)
        self.addCleanup(self.c.request, "DELETE", "/api/v1/services/" + NAME)
        self.path = "/services/%s/v1/completions" % NAME

        def both_ready():
            ready = {n: self.group(n) for n in ("decode", "prefill")}
            return ready if all(g["phase"] == "Ready" for g in ready.values()) else None
        groups = wait_for("both groups Ready", both_ready, timeout=150, interval=0.2)
        for name, g in groups.items():
            self.assertEqual(len(g["processes"]), 2, (name, g))
            self.assertEqual(len(set(g["hosts"])), 2, (name, g))
        self.assertNotEqual(groups["decode"]["slice"], groups["prefill"]["slice"])

        # The reference: the decode group itself, no prefill replica named, prefills locally.
        want = {}
        for prompt in PROMPTS:
            status, text, source = complete(self.leader("decode"), prompt)
            self.assertEqual((status, source), (200, "local"), text)
            want[prompt] = text

        # Through the router: handed off, rank to rank, the same text.
        self.assertEqual(self.remote(PROMPTS[0])[1], want[PROMPTS[0]])
        status, text, source = complete(self.c.router.connection, PROMPTS[1], self.path,
                                        stream=True)
        self.assertEqual((status, text, source), (200, want[PROMPTS[1]], "remote"))
        decode = self.healthz("decode")["disagg"]
        self.assertGreaterEqual(decode["handoffs"], 2, decode)
        self.assertEqual(decode.get("fallbacks", 0), 0, decode)
        self.assertEqual(decode.get("followerFallbacks", 0), 0, decode)
        prefill = self.healthz("prefill")["disagg"]
        self.assertGreaterEqual(prefill["exports"], 2, prefill)
        # The prefill leader lists both ranks' KV listeners: the decode follower pulled from
        # the prefill follower's.
        conn = self.leader("prefill")(60)
        try:
            conn.request("POST", "/v1/completions", body=json.dumps({
                "prompt": PROMPTS[0], "max_tokens": 1, "temperature": 0,
                "kv_transfer_params": {"do_remote_decode": True, "group_size": 2}}),
                headers={"Content-Type": "application/json"})
            ranks = json.loads(conn.getresponse().read())["kv_transfer_params"]["ranks"]
        finally:
            conn.close()
        self.assertEqual(len(set(ranks)), 2, ranks)
        hosts = [p["host"] for p in groups["prefill"]["processes"]]  # rank order
        self.assertEqual([r.rsplit(":", 1)[0] for r in ranks],
                         [self.c.address_of(h) for h in hosts], (ranks, hosts))

        def check_all_answered(outcomes, what):
            self.assertTrue(outcomes, what)
            bad = [o for o in outcomes if o[0] != 200 or o[1] != want[o[3]]]
            self.assertEqual(bad, [], "%s: failed or different answers" % what)

        # A killed prefill follower: decode prefills locally meanwhile, no request fails; the
        # prefill group is recreated and handoffs resume.
        before = self.group("prefill")
        load = Requests(self.c.router, self.path)
        wait_for("a request during the load", lambda: load.outcomes, timeout=60)
        os.kill(before["processes"][1]["pid"], signal.SIGKILL)
        self.ready_again("prefill", before["incarnation"])
        self.remote(PROMPTS[0])
        outcomes = load.stop()
        check_all_answered(outcomes, "prefill follower killed")
        sources = [o[2] for o in outcomes]
        self.assertTrue(any(s != "remote" for s in sources),
                        "some request was prefilled by decode while the prefill group was "
                        "down: %s" % sources)
        self.assertEqual(self.group("prefill")["restarts"], before["restarts"] + 1)

        # A killed decode follower: the head recreates the decode group; requests sent once the
        # router stopped routing to it wait for the recreated group.
        before = self.group("decode")
        os.kill(before["processes"][1]["pid"], signal.SIGKILL)
        leader_pid = before["processes"][0]["pid"]
        wait_for("the decode leader to exit with its group", lambda: not alive(leader_pid),
                 timeout=60)
        wait_for("the router to stop routing to the broken group",
                 lambda: self.routed("decode") == 0, timeout=60, interval=0.1)
        load = Requests(self.c.router, self.path)
        self.ready_again("decode", before["incarnation"])
        self.remote(PROMPTS[1])
        outcomes = load.stop()
        check_all_answered(outcomes, "decode follower killed")
        self.assertEqual(self.group("decode")["restarts"], before["restarts"] + 1)
        decode = self.healthz("decode")["disagg"]
        self.assertEqual(decode.get("followerFallbacks", 0), 0, decode)


if __name__ == "__main__":
    unittest.main()
