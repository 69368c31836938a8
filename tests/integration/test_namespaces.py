"""Namespaces made real (issue 33, section 2; docs/security.md "Namespaces"): TrainJobs,
LocalQueues and events live in a namespace; the same name runs side by side in two; a user of
namespace A can neither read, change nor delete what lives in B, nor use B's LocalQueue (a job
of A naming a queue that exists only in B waits with a reason naming A and the fix); a
cluster admin sees both with -A. A real head and agents (`tessera up`) on ports from 0.
"""
import json
import os
import unittest

from test_cluster import Client, Cluster, job, wait_for

QUEUE_A, QUEUE_B = "team-x", "team-y"


def in_namespace(doc, namespace, queue=None):
    doc["metadata"]["namespace"] = namespace
    if queue:
        doc["metadata"]["queue"] = queue
    return doc


def local_queue(name, namespace):
    return {"apiVersion": "tessera/v1", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": "cq"}}


class NamespacesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()
        cls.c.up()
        cls.configs = {}
        for name, role, ns in (("xena", "admin", QUEUE_A), ("yuri", "edit", QUEUE_B)):
            path = os.path.join(cls.c.dir, name + ".json")
            cls.c.cli("user", "create", name, "--role", role, "--namespace", ns, "--out", path)
            cls.configs[name] = path
        cls.x = Client.from_config(cls.configs["xena"])
        cls.y = Client.from_config(cls.configs["yuri"])
        # One ClusterQueue (cluster-wide, the cluster admin's); each namespace's admin makes its
        # own LocalQueue "lq", and team-y alone has "only-y".
        cls.c.client.apply({"apiVersion": "tessera/v1", "kind": "ClusterQueue",
                            "metadata": {"name": "cq"},
                            "spec": {"quotas": [{"generation": "v6e", "nominalQuota": 64}]}})
        cls.x.apply(local_queue("lq", QUEUE_A))
        cls.c.client.apply([local_queue("lq", QUEUE_B), local_queue("only-y", QUEUE_B)])
        # The same name in both namespaces, each through its own namespace's "lq".
        cls.x.apply(in_namespace(job("a", ["sh", "-c", "echo from-x; sleep 600"], 1), QUEUE_A,
                                 "lq"))
        cls.y.apply(in_namespace(job("a", ["sh", "-c", "echo from-y; sleep 600"], 1), QUEUE_B,
                                 "lq"))

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def token(self, who):
        with open(self.configs[who]) as f:
            return json.load(f)["token"]

    def phase(self, client, name):
        return client.get("job", name)["status"]["phase"]

    def assert_refused(self, answer, *words):
        code, body = answer
        self.assertEqual(code, 403, body)
        for word in words:
            self.assertIn(word, body["error"])

    def test_the_same_name_runs_side_by_side_in_two_namespaces(self):
        for client, text in ((self.x, "from-x"), (self.y, "from-y")):
            wait_for("a Running in " + client.namespace,
                     lambda c=client: self.phase(c, "a") == "Running", timeout=90)
            got = client.get("job", "a")
            self.assertEqual(got["metadata"]["name"], "a")
            self.assertEqual(got["metadata"]["namespace"], client.namespace)
            self.assertIn(text, json.dumps(got["spec"]))
            listed = [(j["metadata"]["name"], j["metadata"]["namespace"])
                      for j in client.list("jobs")]
            self.assertIn(("a", client.namespace), listed)
            self.assertEqual({ns for _, ns in listed}, {client.namespace})
            # Its logs are its own job's.
            p = self.c.cli("logs", "job", "a", "--config", self.configs[
                "xena" if client is self.x else "yuri"])
            self.assertIn(text, p.stdout)
        # The default namespace holds neither.
        self.assertEqual(self.c.client.list("jobs"), [])
        # A cluster admin sees both with -A, with a NAMESPACE column.
        table = self.c.cli("get", "jobs", "-A").stdout
        self.assertRegex(table, r"NAMESPACE\s+NAME")
        self.assertRegex(table, QUEUE_A + r"\s+a\s+Running")
        self.assertRegex(table, QUEUE_B + r"\s+a\s+Running")
        every = self.c.client.request("GET", "/api/v1/jobs?allNamespaces=true")["items"]
        self.assertEqual(sorted(j["metadata"]["namespace"] for j in every), [QUEUE_A, QUEUE_B])
        shown = json.loads(self.c.cli("get", "job", "a", "-n", QUEUE_B, "-o", "json").stdout)
        self.assertIn("from-y", json.dumps(shown["spec"]))
        # Events carry their namespace; a namespace's list holds its own only.
        events = self.x.list("events")
        self.assertTrue(events)
        self.assertEqual({e["metadata"]["namespace"] for e in events}, {QUEUE_A})
        self.assertIn("trainjob/a", {e["object"] for e in events})

    def test_a_user_of_one_namespace_cannot_read_change_or_delete_in_another(self):
        for who, other in (("xena", QUEUE_B), ("yuri", QUEUE_A)):
            token = self.token(who)

            def call(method, path, body=None):
                return self.c.request(method, path, body, token=token)

            q = "?namespace=" + other
            self.assert_refused(call("GET", "/api/v1/jobs/a" + q), "user '%s'" % who, "get",
                                "TrainJob %s/a" % other)
            self.assert_refused(call("GET", "/api/v1/jobs" + q), "list")
            self.assert_refused(call("GET", "/api/v1/jobs?watch=true&namespace=" + other),
                                "watch")
            self.assert_refused(call("GET", "/api/v1/events" + q), "Event")
            self.assert_refused(call("GET", "/api/v1/localqueues" + q), "LocalQueue")
            self.assert_refused(call("GET", "/api/v1/jobs/a/logs?worker=0&namespace=" + other),
                                "logs")
            self.assert_refused(call("DELETE", "/api/v1/jobs/a" + q), "delete")
            self.assert_refused(call("DELETE", "/api/v1/localqueues/lq" + q), "delete")
            stolen = in_namespace(job("a", ["sh", "-c", "echo stolen"], 1), other, "lq")
            self.assert_refused(call("POST", "/api/v1/apply", stolen), "apply",
                                "TrainJob %s/a" % other)
            self.assert_refused(call("POST", "/api/v1/jobs", stolen), "create")
            self.assert_refused(call("GET", "/api/v1/jobs?allNamespaces=true"), "every namespace")
            # Nor through its own namespace with the other's key (NS.NAME) as the name.
            for method in ("GET", "DELETE"):
                code, body = call(method, "/api/v1/jobs/%s.a?namespace=%s" % (
                    other, QUEUE_A if other == QUEUE_B else QUEUE_B))
                self.assertEqual(code, 400, body)
                self.assertEqual(body.get("field"), "name", body)
            # The CLI with -n of the other namespace is refused the same way.
            p = self.c.cli("delete", "job", "a", "-n", other, "--config", self.configs[who],
                           check=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("user '%s'" % who, p.stderr)
        for client in (self.x, self.y):
            self.assertNotIn("stolen", json.dumps(client.get("job", "a")["spec"]))

    def test_a_watch_carries_its_own_namespace_only(self):
        seen = [c.object["metadata"]["namespace"] for c in self.x.watch("jobs", timeout=2.0)]
        self.assertTrue(seen)
        self.assertEqual(set(seen), {QUEUE_A})
        # A change in the other namespace while x watches from its list: never seen by x.
        listed = self.x.request("GET", "/api/v1/jobs?namespace=" + QUEUE_A)
        version = listed["metadata"]["resourceVersion"]
        self.y.apply(in_namespace(job("w", ["true"], 1), QUEUE_B, "lq"))
        self.x.apply(in_namespace(job("w", ["true"], 1), QUEUE_A, "lq"))
        changes = list(self.x.watch("jobs", resource_version=version, timeout=3.0))
        self.assertTrue(changes)
        self.assertEqual({c.object["metadata"]["namespace"] for c in changes}, {QUEUE_A})
        for client in (self.x, self.y):
            client.delete("job", "w")

    def test_a_job_cannot_use_another_namespaces_local_queue(self):
        sneaky = in_namespace(job("sneaky", ["true"], 1), QUEUE_A, "only-y")
        self.x.apply(sneaky)
        wait_for("sneaky's reason", lambda: "only-y" in self.x.get(
            "job", "sneaky")["status"].get("message", ""))
        st = self.x.get("job", "sneaky")["status"]
        self.assertEqual(st["phase"], "Pending")
        self.assertIn("LocalQueue only-y does not exist in namespace " + QUEUE_A, st["message"])
        self.assertIn("metadata.namespace: " + QUEUE_A, st["message"])
        p = self.c.cli("explain", "job", "sneaky", "--config", self.configs["xena"])
        self.assertIn("namespace " + QUEUE_A, p.stdout)
        # Still waiting a moment later: team-y's queue never admits it.
        self.assertEqual(self.phase(self.x, "sneaky"), "Pending")
        self.x.delete("job", "sneaky")
        # And team-y's own job may not be submitted by team-x's user at all.
        token = self.token("xena")
        code, body = self.c.request("POST", "/api/v1/apply",
                                    in_namespace(job("sneaky", ["true"], 1), QUEUE_B, "only-y"),
                                    token=token)
        self.assertEqual(code, 403, body)

    def test_describe_finds_a_reservation_in_its_namespace_only(self):
        # Held or waiting, either will do: describe reads the object, not its hosts.
        self.y.apply({"apiVersion": "tessera/v1", "kind": "SliceReservation",
                      "metadata": {"name": "held", "namespace": QUEUE_B, "queue": "lq"},
                      "spec": {"accelerator": "v6e", "topology": "4x4", "slices": 1}})
        try:
            shown = self.c.cli("describe", "sr", "held", "-n", QUEUE_B).stdout
            self.assertRegex(shown, r"Name:\s+held")
            self.assertRegex(shown, r"Phase:\s+\w+")
            p = self.c.cli("describe", "sr", "held", check=False)
            self.assertNotEqual(p.returncode, 0, p.stdout)
            self.assertIn("not found", p.stderr)
            p = self.c.cli("describe", "slicereservation", "held", "--config",
                           self.configs["xena"], check=False)
            self.assertNotEqual(p.returncode, 0, p.stdout)
        finally:
            self.y.delete("slicereservation", "held")

    def test_deleting_in_one_namespace_leaves_the_other(self):
        for client in (self.x, self.y):
            client.apply(in_namespace(job("d", ["sleep", "600"], 1), client.namespace, "lq"))
        self.c.cli("delete", "job", "d", "-n", QUEUE_A)
        wait_for("d gone from team-x", lambda: "d" not in [
            j["metadata"]["name"] for j in self.x.list("jobs")])
        self.assertEqual(self.y.get("job", "d")["metadata"]["namespace"], QUEUE_B)
        self.y.delete("job", "d")


if __name__ == "__main__":
    unittest.main()
