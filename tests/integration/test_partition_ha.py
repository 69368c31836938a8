"""The leader cut off from etcd (issue 32 section 3; docs/netns.md, docs/ha.md): `tessera up --ha
--netns` puts every head, every etcd member and every agent in a network namespace of its own,
and the test cuts the leading head's links to the three etcd members (both directions), not to
the agents nor to this namespace.

While it is cut, a writer applies small jobs through the CLI, which follows the head list in
head.json, and records every write the API acknowledged. The leader must step down (its lease
lapses; the head exits for its supervisor, so it stops acting), a standby must lead at a higher
term, the CLI must reach it, every acknowledged job must be there after the failover, and a
training job running through it all must never have two attempts alive at once
(attempt_guard.py records any overlap). When the links return, the old leader's head, restarted
by its supervisor, joins as a standby of the new leader.

Election: lease 2 s, renew deadline 1.2 s, retry 0.3 s (test_ha.py's); hosts: two v6e 2x4
slices of one host each. Skipped, saying why, where namespaces cannot be made or etcd is not
installed. Every wait polls a condition with a generous deadline.
"""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

from test_cluster import (PYTHON, REPO, TESSERA, Cluster, alive, netns_unavailable, read_pid,
                          wait_for)
from tessera.client import Client

HERE = os.path.dirname(os.path.abspath(__file__))
GUARD = os.path.join(HERE, "attempt_guard.py")
ETCD = os.environ.get("TESSERA_ETCD") or shutil.which("etcd")
ELECTION = ["--election-lease-ms", "2000", "--election-renew-deadline-ms", "1200",
            "--election-retry-ms", "300"]

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


def leader_info(c, endpoint):
    """A head's GET /v1/leader ({"role", "term", "leader", ...}), or {} when it does not answer;
    over https verified against cluster `c`'s CA (http for a --plain-http cluster)."""
    scheme = c.url.split("://", 1)[0]
    context = c.ssl_context() if scheme == "https" else None
    try:
        with urllib.request.urlopen("%s://%s/v1/leader" % (scheme, endpoint), timeout=2,
                                    context=context) as r:
            body = json.loads(r.read() or b"{}")
            return body if isinstance(body, dict) else {}
    except (OSError, ValueError, urllib.error.URLError):
        return {}


class Writer:
    """Applies a stream of small jobs through the CLI (which finds the leader from the head
    list), one after the other, recording each acknowledged one (exit 0) with its time."""

    def __init__(self, c):
        self.c = c
        self.acked, self.failed = [], 0  # (name, time acknowledged)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        n = 0
        while not self.stop.is_set():
            name = "w-%d" % n
            n += 1
            # Two slices while the guarded job holds one: it stays Pending, so the stream of
            # writes starts no processes.
            manifest = ("apiVersion: tessera/v1\nkind: TrainJob\nmetadata:\n  name: %s\n"
                        "spec:\n  accelerator: v6e\n  topology: 2x4\n  slices: 2\n"
                        "  template:\n    command: [\"true\"]\n" % name)
            p = subprocess.run([TESSERA, "apply", "-f", "-", "--state-dir", self.c.state],
                               input=manifest, capture_output=True, text=True, timeout=120,
                               cwd=REPO)
            if p.returncode == 0:
                self.acked.append((name, time.monotonic()))
            else:
                self.failed += 1

    def acked_since(self, t):
        return [name for name, at in list(self.acked) if at > t]

    def finish(self):
        self.stop.set()
        self.thread.join(timeout=180)


@unittest.skipIf(netns_unavailable(), "network namespaces cannot be made here: %s" %
                 netns_unavailable())
@unittest.skipIf(not ETCD, "*** etcd is not installed (scripts/setup.sh installs etcd-server) ***")
class LeaderCutFromEtcdTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(netns=True)
        try:
            cls.c.cli("up", "--ha", "--ha-heads", "2", "--netns", "--generation", "v6e",
                      "--topology", "2x4", "--slices", "2", "--heartbeat-ms", "200",
                      "--lease-ms", "3000", "--timeout", "120", *ELECTION)
            with open(os.path.join(cls.c.state, "admin.token")) as f:
                cls.c.token = f.read().strip()
            cls.c.reload_port()
            with open(os.path.join(cls.c.state, "cluster.json")) as f:
                cls.heads = json.load(f)["ha"]["headEndpoints"]
        except BaseException:
            cls.c.down()  # tearDownClass does not run when this fails: the namespaces go here
            raise

    @classmethod
    def tearDownClass(cls):
        if os.environ.get("TESSERA_KEEP_LOGS"):
            shutil.copytree(os.path.join(cls.c.state, "logs"),
                            tempfile.mkdtemp(prefix="tessera-partition-ha-logs-"),
                            dirs_exist_ok=True)
        cls.c.down()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="partition-ha-", dir=self.c.dir)
        self.heal = []  # (function, args) undone at the end of the test, cut or not

        def heal_all():
            for fn, args in reversed(self.heal):
                try:
                    fn(*args)
                except AssertionError:
                    pass

        self.addCleanup(heal_all)

    def cut_between(self, ns_of, peer):
        self.heal.append((self.c.heal_between, (ns_of, peer)))
        self.c.cut_between(ns_of, peer)

    def member_at(self, endpoint):
        address = endpoint.rsplit(":", 1)[0]
        return [m["name"] for m in self.c.netns_plan()["members"] if m["address"] == address][0]

    def client_of(self, endpoint):
        """A client of the head at `endpoint` (HOST:PORT), with the cluster's scheme and CA."""
        return Client(self.c.url.split("://", 1)[0] + "://" + endpoint, self.c.token,
                      ca_file=self.c.ca_file)

    def leader(self):
        """(endpoint, term) of the head that says it leads, or None."""
        for h in self.heads:
            info = leader_info(self.c, h)
            if info.get("role") == "leader":
                return h, info["term"]
        return None

    def records(self):
        try:
            with open(os.path.join(self.tmp, "records.jsonl")) as f:
                return [json.loads(line) for line in f if line.strip()]
        except OSError:
            return []

    def test_the_leader_cut_off_from_etcd_steps_down_and_nothing_acknowledged_is_lost(self):
        old, term = wait_for("a leader", self.leader, timeout=60)
        old_member = self.member_at(old)
        self.assertTrue(old_member.startswith("head"), old_member)
        client = self.client_of(old)
        script = os.path.join(self.tmp, "sdk_worker.py")
        with open(script, "w") as f:
            f.write(SDK_WORKER)
        client.apply({"apiVersion": "tessera/v1", "kind": "TrainJob",
                      "metadata": {"name": "guarded"},
                      "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 1,
                               "failurePolicy": {"maxFailures": 2, "onHostLoss": "pause"},
                               "template": {"command": [PYTHON, GUARD, script, self.tmp],
                                            "env": {"PYTHONPATH": os.path.join(REPO, "python"),
                                                    "ATTEMPT_GUARD_DIR": self.tmp},
                                            "workingDir": REPO}}})
        wait_for("the guarded job running and reporting", lambda: (
            client.get("job", "guarded")["status"]["phase"] == "Running" and
            client.get("job", "guarded")["status"].get("lastStep", 0) >= 3), timeout=90)
        worker = wait_for("attempt 0's pid", lambda: read_pid(self.tmp + "/worker-0-0.pid"))
        index = self.heads.index(old)
        with open(os.path.join(self.c.state, "heads", str(index), "head.json")) as f:
            old_pid = json.load(f)["pid"]

        writer = Writer(self.c)
        try:
            wait_for("a write acknowledged before the cut", lambda: writer.acked, timeout=60)
            cut_at = time.monotonic()
            for i in range(3):
                self.cut_between(old_member, "etcd-%d" % i)
                self.cut_between("etcd-%d" % i, old_member)
            def another_leader():
                found = self.leader()
                return found if found and found[0] != old else None

            new, new_term = wait_for("another head leading", another_leader, timeout=90)
            elected = time.monotonic() - cut_at
            self.assertGreater(new_term, term)
            # The old leader stops acting: its renewals fail, it steps down and its process
            # exits for the supervisor (which restarts it; cut off, it cannot reach etcd).
            wait_for("the old leader's head process gone", lambda: not alive(old_pid),
                     timeout=90)
            exited = time.monotonic() - cut_at
            # The CLI follows the head list to the new leader: writes are acknowledged again.
            after = time.monotonic()
            wait_for("three writes acknowledged by the new leader",
                     lambda: len(writer.acked_since(after)) >= 3, timeout=90)
            first = min(at for _, at in writer.acked if at > cut_at)
        finally:
            writer.finish()
        print("\npartition leader/etcd: a new leader %.1f s, the first acknowledged write %.1f "
              "s, the old leader's process gone %.1f s after the cut; %d writes acknowledged, "
              "%d failed (load %.1f)" % (elected, first - cut_at, exited, len(writer.acked),
                                          writer.failed, os.getloadavg()[0]))

        # Nothing acknowledged is lost.
        new_client = self.client_of(new)
        listed = {j["metadata"]["name"] for j in new_client.request("GET", "/api/v1/jobs")["items"]}
        lost = [name for name, _ in writer.acked if name not in listed]
        self.assertEqual(lost, [], "acknowledged writes missing after the failover")
        # The training job ran through it, never two attempts at once.
        st = new_client.get("job", "guarded")["status"]
        self.assertEqual(st["phase"], "Running", st)
        self.assertFalse([r for r in self.records() if r["overlap"]], self.records())
        if st["attempt"] == 0:
            self.assertTrue(alive(worker), "attempt 0's worker died but no new attempt started")
        # The agents follow the new leader.
        wait_for("every host Ready on the new leader", lambda: all(
            h["status"]["state"] == "Ready"
            for h in new_client.request("GET", "/api/v1/hosts")["items"]), timeout=60)
        status = self.c.cli("status").stdout
        self.assertIn("leader: " + new, status)

        # The links return: the old leader's head, restarted by its supervisor, stands by.
        for fn, args in reversed(self.heal):
            fn(*args)
        self.heal.clear()
        def standing_by():
            info = leader_info(self.c, old)
            return info.get("role") == "standby" and info.get("leader") == new

        wait_for("the old leader standing by for the new one", standing_by, timeout=90)
        self.assertEqual(self.leader(), (new, new_term))
        self.assertFalse([r for r in self.records() if r["overlap"]], self.records())


if __name__ == "__main__":
    unittest.main()
