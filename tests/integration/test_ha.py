"""Integration test: two HA heads on one real etcd; kill -9 the leader, the standby takes over
and an acknowledged job is not lost.

Why real processes: what is under test is the failover between two `tessera head` processes
(a SIGKILL that leaves the lease to expire in etcd, a standby's election, the controller
reloading from etcd). The election and store logic are unit-tested in C++ (src/ha, src/store).
Short by design: lease 2 s, renew deadline 1.2 s, retry 0.3 s. The bad inputs (conflicting
flags, an etcd that is down at start, a store of a newer schema) are checked on the real binary
in the same class because the last needs the etcd it starts (about 2 s).

Needs the `etcd` binary (Debian's etcd-server, installed by scripts/setup.sh); skipped with a
loud message only when it is absent. Every wait polls with a deadline.
"""
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESSERA = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "dev", "bin", "tessera"))
ETCD = os.environ.get("TESSERA_ETCD") or shutil.which("etcd")
ELECTION = ["--election-lease-ms", "2000", "--election-renew-deadline-ms", "1200",
            "--election-retry-ms", "300"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, fn, timeout=60.0, interval=0.05):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %.0f s waiting for %s (last: %r)" % (timeout, what, last))


def job(name):
    return {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"accelerator": "v6e", "topology": "4x4", "slices": 1,
                     "template": {"command": ["true"], "workingDir": REPO}}}


@unittest.skipIf(not ETCD, "*** etcd is not installed (scripts/setup.sh installs etcd-server) ***")
class HaFailover(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-ha-")
        self.state = os.path.join(self.dir, "state")
        self.procs = []
        for _ in range(3):  # a port lost to another process between pick and bind: retry
            client, peer = free_port(), free_port()
            self.etcd_url = "etcd://127.0.0.1:%d" % client
            c, p = "http://127.0.0.1:%d" % client, "http://127.0.0.1:%d" % peer
            shutil.rmtree(os.path.join(self.dir, "etcd"), ignore_errors=True)
            etcd = subprocess.Popen(
                [ETCD, "--data-dir", os.path.join(self.dir, "etcd"), "--name", "t",
                 "--listen-client-urls", c, "--advertise-client-urls", c,
                 "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                 "--initial-cluster", "t=" + p, "--max-txn-ops", "10000"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "etcd.log"), "w"))
            ok = wait_for("etcd", lambda: etcd.poll() is not None or self.etcd_ready(client), 60)
            if etcd.poll() is None and ok:
                self.procs.append(etcd)
                break
        else:
            self.fail("etcd did not start; see " + os.path.join(self.dir, "etcd.log"))

    def tearDown(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if os.environ.get("TESSERA_KEEP_LOGS"):  # the etcd and head logs, for a failed run
            print("logs kept in", self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def etcd_ready(port):
        try:
            req = urllib.request.Request("http://127.0.0.1:%d/v3/kv/range" % port,
                                         data=b'{"key":"cHJvYmU="}', method="POST")
            with urllib.request.urlopen(req, timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def head(self, port):
        log = open(os.path.join(self.dir, "head-%d.log" % port), "w")
        p = subprocess.Popen([TESSERA, "head", "--store", self.etcd_url, "--port", str(port),
                              "--state-dir", self.state, "--etcd-compaction-interval-ms",
                              "1000", *ELECTION],
                             stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def call(self, port, method, path, body=None):
        """One call to the head at 127.0.0.1:`port`, over HTTPS verified against the CA the
        first head made in the state directory the heads share."""
        req = urllib.request.Request("https://127.0.0.1:%d%s" % (port, path), method=method,
                                     data=json.dumps(body).encode() if body else None)
        req.add_header("Content-Type", "application/json")
        token_file = os.path.join(self.state, "admin.token")
        if os.path.exists(token_file):
            with open(token_file) as f:
                req.add_header("Authorization", "Bearer " + f.read().strip())
        try:
            context = ssl.create_default_context(cafile=os.path.join(self.state, "ca.crt"))
            with urllib.request.urlopen(req, timeout=5, context=context) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read().decode()
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, text
        except OSError:
            return 0, None

    def role(self, port):
        code, body = self.call(port, "GET", "/v1/leader")
        return body if code == 200 else None

    def run_head(self, *args, timeout=30):
        # A real free port: the head checks its port before the election flags.
        return subprocess.run([TESSERA, "head", "--port", str(free_port()), "--state-dir",
                               self.state, *args], capture_output=True, text=True,
                              timeout=timeout)

    def test_bad_inputs_are_refused_with_a_message_and_no_crash(self):
        # Conflicting HA flags, before anything starts.
        p = self.run_head("--election-lease-ms", "2000")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--election-lease-ms only applies to an HA head", p.stderr)
        p = self.run_head("--store", "zk://127.0.0.1:2181")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("is neither sqlite nor etcd://", p.stderr)
        p = self.run_head("--store", self.etcd_url, "--election-lease-ms", "2000",
                          "--election-renew-deadline-ms", "2500", "--election-retry-ms", "300")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--election-renew-deadline-ms (2500) must be less than --election-lease-ms",
                      p.stderr)
        p = self.run_head("--etcd-compaction-interval-ms", "60000")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--etcd-compaction-interval-ms only applies to an HA head", p.stderr)
        p = self.run_head("--store", self.etcd_url, "--etcd-compaction-interval-ms", "50",
                          *ELECTION)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--etcd-compaction-interval-ms: 50 is too short: give 0 (never compact) "
                      "or at least 1000", p.stderr)
        # An etcd endpoint that is down at start: retried with backoff, then a clear error
        # naming it (an exit code, not a signal).
        dead = "127.0.0.1:%d" % free_port()
        p = self.run_head("--store", "etcd://" + dead, "--store-timeout-ms", "1000", *ELECTION)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(dead, p.stderr)
        self.assertGreaterEqual(p.stderr.count("retry"), 2, p.stderr)
        # A store written by a newer schema version is refused with a message.
        port = int(self.etcd_url.rsplit(":", 1)[1])
        put = json.dumps({"key": base64.b64encode(b"/newer/schema").decode(),
                          "value": base64.b64encode(b"99").decode()}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/v3/kv/put" % port, data=put,
                                     method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            self.assertEqual(r.status, 200)
        p = self.run_head("--store", self.etcd_url, "--store-prefix", "/newer/", *ELECTION)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("schema version 99", p.stderr)
        self.assertIn("run a newer tessera", p.stderr)

    def test_kill_leader_standby_takes_over_and_keeps_the_acknowledged_job(self):
        a, b = free_port(), free_port()
        head_a = self.head(a)
        wait_for("head A to lead", lambda: (self.role(a) or {}).get("role") == "leader")
        self.head(b)
        wait_for("head B to stand by naming A",
                 lambda: (self.role(b) or {}).get("leader") == "127.0.0.1:%d" % a)
        self.assertEqual(self.role(b)["role"], "standby")

        # A standby forwards a user's write to the leader (docs/ha.md "What a standby serves")...
        code, body = self.call(b, "POST", "/api/v1/jobs", job("forwarded"))
        self.assertEqual(code, 201, body)
        code, body = self.call(a, "GET", "/api/v1/jobs/forwarded")
        self.assertEqual(code, 200, body)
        # ...and refuses an agent's call, naming the leader, for the agent to go there.
        code, body = self.call(b, "POST", "/api/v1/agents/register", {})
        self.assertEqual(code, 503, body)
        self.assertIn("127.0.0.1:%d" % a, json.dumps(body))

        code, body = self.call(a, "POST", "/api/v1/jobs", job("acked"))
        self.assertEqual(code, 201, body)
        term_a = self.role(a)["term"]

        head_a.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        head_a.wait()
        n = [0]

        def write_accepted():
            n[0] += 1
            code, _ = self.call(b, "POST", "/api/v1/jobs", job("after-%d" % n[0]))
            return code == 201
        wait_for("head B to accept a write", write_accepted, timeout=60, interval=0.02)
        took = time.monotonic() - killed
        print("\nleader kill -9 -> first accepted write on the standby: %.2f s "
              "(lease 2 s, retry 0.3 s; load %s)" % (took, os.getloadavg()[0]), file=sys.stderr)

        info = self.role(b)
        self.assertEqual(info["role"], "leader")
        self.assertGreater(info["term"], term_a)
        code, acked = self.call(b, "GET", "/api/v1/jobs/acked")
        self.assertEqual(code, 200, acked)
        self.assertEqual(acked["metadata"]["name"], "acked")
        # Generous bound for a loaded 2-core machine; the goal is lease + 2 s.
        self.assertLess(took, 20.0)

        # The new leader compacts etcd's history, one interval (1 s here) behind: past a
        # revision it wrote itself, once it has written after it.
        written = self.etcd_revision()
        code, body = self.call(b, "POST", "/api/v1/jobs", job("after-compaction"))
        self.assertEqual(code, 201, body)
        wait_for("the leader to compact etcd past revision %d" % written,
                 lambda: "compacted" in self.etcd_range_at(written), timeout=60, interval=0.2)

    def etcd_call(self, path, body):
        port = int(self.etcd_url.rsplit(":", 1)[1])
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                     data=json.dumps(body).encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"{}")

    def etcd_revision(self):
        return int(self.etcd_call("/v3/kv/range", {"key": "cHJvYmU="})["header"]["revision"])

    def etcd_range_at(self, revision):
        """etcd's answer to a read pinned at `revision`: its error text when it has none."""
        answer = self.etcd_call("/v3/kv/range", {"key": "cHJvYmU=", "revision": str(revision)})
        return answer.get("error", "") if "error" in answer else "ok"


if __name__ == "__main__":
    unittest.main()
