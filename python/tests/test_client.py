"""tessera.client against a real head (build/dev/bin/tessera head, no agents): apply of dicts
and multi-document YAML, get, list, delete, errors with the API's field, watch and its resume
after a dropped connection and after a 410, wait.

A real head is needed because the client's whole job is the head's HTTP contract (watch lines,
resourceVersion, 410, error bodies); a head without agents starts in well under a second.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from tessera import client as tc

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESSERA = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "dev", "bin", "tessera"))

QUEUES = """\
# the admission resources of docs/admission.md, one file
apiVersion: tessera/v1
kind: PriorityClass
metadata: {name: high}
value: 100
---
apiVersion: tessera/v1
kind: ClusterQueue
metadata: {name: research}
spec:
  quotas: [{generation: v6e, nominalQuota: 32}]
---
apiVersion: tessera/v1
kind: LocalQueue
metadata: {name: team-a}
spec: {clusterQueue: research}
"""


def job(name, topology="4x4", accelerator="v6e"):
    return {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"accelerator": accelerator, "topology": topology,
                     "template": {"command": ["true"]}}}


def wait_for(what, fn, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


@unittest.skipUnless(os.access(TESSERA, os.X_OK), "needs the tessera binary (%s)" % TESSERA)
class ClientAgainstHeadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tessera-client-")
        cls.head = subprocess.Popen([TESSERA, "head", "--state-dir", cls.dir, "--port", "0"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for("head.json", lambda: os.path.exists(os.path.join(cls.dir, "head.json")))
        cls.c = tc.Client.from_state_dir(cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.head.terminate()
        try:
            cls.head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cls.head.kill()
            cls.head.wait()
        cls.head.stderr.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_multi_document_yaml_applies_in_order(self):
        out = self.c.apply(QUEUES)
        self.assertEqual([o["kind"] for o in out], ["PriorityClass", "ClusterQueue", "LocalQueue"])
        names = [q["metadata"]["name"] for q in self.c.list("localqueues")]
        self.assertIn("team-a", names)
        again = self.c.apply(QUEUES)  # replaced, not created
        self.assertFalse(again[1].get("created", True))

    def test_errors_carry_the_field_and_message(self):
        with self.assertRaises(tc.ApiError) as e:
            self.c.apply(job("bad", topology="4x5"))
        self.assertEqual(e.exception.status, 422)
        self.assertEqual(e.exception.field, "spec.topology")
        self.assertIn("4x5", e.exception.message)
        with self.assertRaises(tc.ApiError) as e:
            self.c.get("job", "no-such-job")
        self.assertEqual(e.exception.status, 404)
        with self.assertRaises(tc.ApiError) as e:
            self.c.apply("apiVersion: tessera/v1\nkind: TrainJob\nmetadata: {name: j}\n"
                         "spec: {accelerator: v6e-16, template: {command: [x]}}\n")
        self.assertEqual(e.exception.field, "spec.topology")
        self.assertIn("2x8 or 4x4", e.exception.message)
        with self.assertRaises(ValueError):
            self.c.list("pods")

    def test_pod_type_accelerator_is_stored_canonical(self):
        self.c.apply(job("canon", topology="", accelerator="TPU-V6E-32"))
        got = self.c.get("job", "canon")
        self.assertEqual((got["spec"]["accelerator"], got["spec"]["topology"]), ("v6e", "4x8"))
        self.c.delete("job", "canon")

    def test_get_list_delete_and_wait(self):
        self.c.apply(job("waits"))
        self.assertEqual(self.c.get("job", "waits")["status"]["phase"], "Pending")
        self.assertIn("waits", [j["metadata"]["name"] for j in self.c.list("jobs")])
        self.assertEqual(self.c.wait("job", "waits", "phase=Pending", timeout=10)
                         ["metadata"]["name"], "waits")
        started = time.monotonic()
        with self.assertRaises(TimeoutError):
            self.c.wait("job", "waits", "phase=Succeeded", timeout=0.5)
        self.assertLess(time.monotonic() - started, 10)
        threading.Timer(0.2, lambda: self.c.delete("job", "waits")).start()
        self.assertIsNone(self.c.wait("job", "waits", "delete", timeout=20))
        with self.assertRaises(ValueError):
            self.c.wait("job", "waits", "phase")

    def test_watch_resumes_after_a_dropped_connection_without_loss_or_repeat(self):
        names = ["w-%d" % i for i in range(6)]
        start = self.c.request("GET", "/api/v1/jobs")["metadata"]["resourceVersion"]
        real_open = self.c._open
        opened = []

        class Dropping:
            """The head's stream, cut after two lines (a dropped connection)."""

            def __init__(self, inner):
                self.inner = inner

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.inner.close()

            def __iter__(self):
                for i, line in enumerate(self.inner):
                    if i == 2:
                        raise ConnectionResetError("dropped")
                    yield line

        def dropping_open(method, path, body=None, timeout=None, **kw):
            r = real_open(method, path, body, timeout, **kw)
            if "watch=true" in path:
                opened.append(path)
                return Dropping(r)
            return r

        self.c._open = dropping_open
        try:
            for n in names:
                self.c.apply(job(n))
            for n in names[:3]:
                self.c.delete("job", n)
            seen = []
            for change in self.c.watch("jobs", resource_version=start, timeout=20,
                                       reconnect_delay=0.01):
                if change.name in names:
                    seen.append((change.type, change.name))
                if len([s for s in seen if s[0] == "DELETED"]) == 3:
                    break
        finally:
            self.c._open = real_open
        self.assertEqual([s for s in seen if s[0] == "ADDED"], [("ADDED", n) for n in names])
        self.assertEqual([s for s in seen if s[0] == "DELETED"],
                         [("DELETED", n) for n in names[:3]])
        revisions_resumed = [p for p in opened if "resourceVersion=" in p]
        self.assertGreater(len(opened), 2)  # it did reconnect, each time from a revision
        self.assertEqual(len(revisions_resumed), len(opened))
        for n in names[3:]:
            self.c.delete("job", n)

    def test_watch_lists_again_after_410(self):
        self.c.apply(job("gone-410"))
        seen = []
        # "1" is older than any revision this run of the head handed out: 410, then a list.
        for change in self.c.watch("jobs", resource_version="1", timeout=10):
            seen.append((change.type, change.name))
            if change.name == "gone-410":
                break
        self.assertIn(("ADDED", "gone-410"), seen)
        self.c.delete("job", "gone-410")

    def test_reserve_slices_on_a_head_without_hosts_stays_pending_with_a_reason(self):
        if self.c.call("GET", "/api/v1/slicereservations")[0] == 404:
            self.skipTest("this head binary does not serve kind SliceReservation yet")
        with self.assertRaises(tc.ApiError) as e:
            self.c.reserve_slices("v6e", "4x4", 1, name="bad-ttl", ttl="soon")
        self.assertEqual((e.exception.status, e.exception.field), (422, "spec.ttl"))
        r = self.c.reserve_slices("v6e", "4x4", 2, name="pg-client", ttl="1h")
        started = time.monotonic()
        with self.assertRaises(TimeoutError) as e:
            r.ready(timeout=0.5)
        self.assertLess(time.monotonic() - started, 10)
        self.assertIn("pg-client is not Ready", str(e.exception))
        self.assertIn("Pending", str(e.exception))
        self.assertEqual((r.phase, r.slices, r.hosts), ("Pending", [], []))
        got = self.c.get("slicereservation", "pg-client")
        self.assertEqual(got["spec"]["slices"], 2)
        r.delete()
        self.assertIsNone(self.c.wait("reservation", "pg-client", "delete", timeout=20))

    def test_ordinary_calls_share_one_kept_alive_connection(self):
        c = tc.Client.from_state_dir(self.dir)
        self.addCleanup(c.close)
        c.apply(job("keepalive-a"))
        first = c._idle[0]
        for _ in range(5):
            self.assertEqual(c.get("jobs", "keepalive-a")["metadata"]["name"], "keepalive-a")
        with self.assertRaises(tc.ApiError) as e:
            c.get("jobs", "no-such-job")  # a refusal leaves the connection usable
        self.assertEqual(e.exception.status, 404)
        c.delete("jobs", "keepalive-a")
        self.assertEqual(c._idle, [first], "every call went over the first connection")

    def test_a_connection_the_head_closed_is_replaced(self):
        c = tc.Client.from_state_dir(self.dir)
        self.addCleanup(c.close)
        c.list("jobs")
        [conn] = c._idle
        # Ended as when the head closes an idle connection: readable, at end of file.
        conn.sock.shutdown(socket.SHUT_RDWR)
        c.list("jobs")
        self.assertEqual(len(c._idle), 1)
        self.assertIsNot(c._idle[0], conn)

        # Closed just as it is taken (the check before reuse saw it open): one more try on a
        # new connection, for this call only.
        conn = c._idle[0]
        conn.sock.shutdown(socket.SHUT_RDWR)
        real_select = tc.select.select
        tc.select.select = lambda r, w, x, t: ([], [], [])
        try:
            self.assertEqual(c.call("GET", "/api/v1/jobs/no-such-job")[0], 404)
        finally:
            tc.select.select = real_select
        self.assertIsNot(c._idle[0], conn)

    def test_a_head_that_is_gone_raises_url_error(self):
        c = tc.Client.from_state_dir(self.dir)
        self.addCleanup(c.close)
        c.list("jobs")
        dead = tc.Client("https://127.0.0.1:1", c.token, ca_file=c.ca_file)
        with self.assertRaises(tc.urllib.error.URLError):
            dead.list("jobs")

    def test_split_documents(self):
        self.assertEqual(len(tc.split_documents(QUEUES)), 3)
        self.assertEqual(tc.split_documents("# nothing\n---\n"), [])
        self.assertEqual(tc.split_documents('[{"a": 1}, {"b": 2}]'), ['{"a": 1}', '{"b": 2}'])
        self.assertEqual(tc.parse_condition("status.phase=Ready"), (["phase"], "Ready"))


class FromStateDirTest(unittest.TestCase):
    def test_missing_state_dir_says_what_to_do(self):
        with tempfile.TemporaryDirectory() as d:
            old = os.environ.pop("TESSERA_SERVER", None)
            try:
                with self.assertRaises(FileNotFoundError) as e:
                    tc.Client.from_state_dir(d)
            finally:
                if old is not None:
                    os.environ["TESSERA_SERVER"] = old
            self.assertIn("tessera up", str(e.exception))



class FromConfigTest(unittest.TestCase):
    def test_a_users_config_gives_server_token_and_namespace(self):
        import json
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ann.tessera.json")
            with open(path, "w") as f:
                json.dump({"server": "http://127.0.0.1:1/", "token": "t" * 64, "user": "ann",
                           "namespace": "team-a", "caFile": ""}, f)
            c = tc.Client.from_config(path)
            self.assertEqual((c.url, c.token, c.namespace),
                             ("http://127.0.0.1:1", "t" * 64, "team-a"))
            # Namespaced kinds carry the namespace; cluster-wide ones and "default" do not.
            self.assertEqual(c._in_namespace("job"), "?namespace=team-a")
            self.assertEqual(c._in_namespace("clusterqueue"), "")
            self.assertEqual(tc.Client.from_config(path, namespace="default")._in_namespace("job"),
                             "")
            with open(path, "w") as f:
                json.dump({"server": "http://127.0.0.1:1"}, f)
            with self.assertRaises(ValueError):
                tc.Client.from_config(path)

if __name__ == "__main__":
    unittest.main()
