"""Integration test: a local HA cluster (`tessera up --ha`: three etcd members, two heads, two
agents) survives kill -9 of the leading head with agents attached. The agents follow the new
leader by themselves, a job submitted through the CLI with every head's address (the dead one
first) completes, a standby forwards reads and writes, `tessera status` names the new leader,
the agents keep the new term on disk, the serving router reaches the control plane again, and `tessera down` stops every process, etcd included (docs/ha.md "Following the leader").

Why real processes: what is under test is the agents, the router and the CLI finding the leader
among separate head processes across a SIGKILL (connection refused, a standby's 503 naming the
leader, a lease expiring in a real three-member etcd) and the supervisor restarting the killed
head; the rules themselves are unit-tested (src/ha/head_list_test.cc, election_test.cc).
Short settings: election lease 2 s, retry 0.3 s, heartbeats every 200 ms; about 20 s.

Needs the `etcd` binary (Debian's etcd-server); skipped with a loud message when it is absent.
"""
import http.client as httplib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from test_cluster import REPO, TESSERA, alive, wait_for

ETCD = os.environ.get("TESSERA_ETCD") or shutil.which("etcd")
ELECTION = ["--election-lease-ms", "2000", "--election-renew-deadline-ms", "1200",
            "--election-retry-ms", "300"]


def http(port, method, path, body=None, token=None, ca_file=None):
    """One call to the head at 127.0.0.1:`port`: HTTPS verified against `ca_file` (the cluster
    CA `up` made)."""
    req = urllib.request.Request("https://127.0.0.1:%d%s" % (port, path), method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        context = ssl.create_default_context(cafile=ca_file)
        with urllib.request.urlopen(req, timeout=5, context=context) as r:
            return r.status, json.loads(r.read() or b"null"), dict(r.headers)
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        try:
            return e.code, json.loads(text), dict(e.headers)
        except ValueError:
            return e.code, text, dict(e.headers)
    except OSError:
        return 0, None, {}


@unittest.skipIf(not ETCD, "*** etcd is not installed (scripts/setup.sh installs etcd-server) ***")
class HaFollowTheLeader(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-ha-follow-")
        self.state = os.path.join(self.dir, "state")
        self.ca_file = os.path.join(self.state, "ca.crt")
        self.addCleanup(self.cleanup)

    def cleanup(self):
        self.cli("down", check=False)
        if os.environ.get("TESSERA_KEEP_LOGS"):
            print("logs kept in", self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def cli(self, *args, check=True):
        p = subprocess.run([TESSERA, *args, "--state-dir", self.state], capture_output=True,
                           text=True, timeout=120, cwd=REPO)
        if check and p.returncode != 0:
            raise AssertionError("tessera %s failed (%d): %s%s" % (" ".join(args), p.returncode,
                                                                   p.stdout, p.stderr))
        return p

    def info(self, port):
        code, body, _ = http(port, "GET", "/v1/leader", ca_file=self.ca_file)
        return body if code == 200 and isinstance(body, dict) else {}

    def role(self, port):
        return self.info(port).get("role")

    def check_etcd_asks_for_a_client_certificate(self, ha):
        """etcd under `up --ha` speaks TLS to its clients and refuses one without a certificate
        the cluster CA signed: plain HTTP fails, TLS without a certificate fails, and the
        certificate `up` wrote (as each head holds one) reads /health."""
        self.assertTrue(ha["store"].startswith("etcds://"), ha["store"])
        host, port = ha["etcdEndpoints"][0].rsplit(":", 1)
        no_cert = ssl.create_default_context(cafile=self.ca_file)
        for conn in (httplib.HTTPConnection(host, int(port), timeout=10),
                     httplib.HTTPSConnection(host, int(port), timeout=10, context=no_cert)):
            with self.assertRaises((OSError, httplib.HTTPException)):
                conn.request("GET", "/health")
                conn.getresponse().read()
            conn.close()
        with_cert = ssl.create_default_context(cafile=self.ca_file)
        with_cert.load_cert_chain(os.path.join(self.state, "etcd-client.crt"),
                                  os.path.join(self.state, "etcd-client.key"))
        conn = httplib.HTTPSConnection(host, int(port), timeout=10, context=with_cert)
        conn.request("GET", "/health")
        response = conn.getresponse()
        self.assertEqual(response.status, 200)
        self.assertIn(b'"health":"true"', response.read())
        conn.close()
        for i in range(len(ha["heads"])):
            self.assertTrue(os.path.exists(os.path.join(self.state, "heads", str(i),
                                                        "etcd-client.crt")))

    def test_agents_and_cli_follow_the_leader_across_kill_9(self):
        # Conflicting flags are refused before anything starts.
        p = self.cli("up", "--ha-heads", "2", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--ha-heads only applies with --ha", p.stderr)
        p = self.cli("up", "--ha", "--fence-ms", "1000", *ELECTION, check=False)
        self.assertIn("--fence-ms 1000 with --ha", p.stderr)

        started = time.monotonic()
        self.cli("up", "--ha", "--ha-heads", "2", "--generation", "v6e", "--topology", "2x4",
                 "--slices", "2", "--heartbeat-ms", "200", "--lease-ms", "3000", "--timeout",
                 "120", *ELECTION)
        with open(os.path.join(self.state, "cluster.json")) as f:
            cluster = json.load(f)
        with open(os.path.join(self.state, "admin.token")) as f:
            token = f.read().strip()
        ports = cluster["ha"]["headPorts"]
        self.assertEqual(len(cluster["ha"]["etcd"]), 3)
        self.check_etcd_asks_for_a_client_certificate(cluster["ha"])
        leader = wait_for("a leader", lambda: next((p for p in ports if self.role(p) == "leader"),
                                                   None))
        standby = next(p for p in ports if p != leader)
        wait_for("the other head to stand by", lambda: self.role(standby) == "standby")

        # A standby forwards a user's read and write to the leader; an agent's call it refuses,
        # naming the leader, so that the agent goes there itself.
        code, body, headers = http(standby, "GET", "/api/v1/hosts", token=token,
                                     ca_file=self.ca_file)
        self.assertEqual(code, 200, body)
        self.assertEqual(len(body["items"]), 2)
        self.assertIn("X-Tessera-Proxied-By", headers)
        code, body, _ = http(standby, "POST", "/api/v1/jobs", {
            "apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "via-standby"},
            "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 1,
                     "template": {"command": ["true"], "workingDir": REPO}}}, token=token,
            ca_file=self.ca_file)
        self.assertEqual(code, 201, body)
        code, body, headers = http(standby, "POST", "/api/v1/agents/register", {},
                                     ca_file=self.ca_file)
        self.assertEqual(code, 503, body)
        self.assertEqual(headers.get("X-Tessera-Leader"), "127.0.0.1:%d" % leader)
        status = self.cli("status").stdout
        self.assertIn("leader: 127.0.0.1:%d" % leader, status)

        # kill -9 the leading head (not its supervisor) with both agents attached.
        with open(os.path.join(self.state, "heads", str(ports.index(leader)), "head.json")) as f:
            head_pid = json.load(f)["pid"]
        term = self.info(leader)["term"]
        os.kill(head_pid, signal.SIGKILL)
        killed = time.time()
        # The supervisor restarts the killed head at once, so either head may win the next
        # election; what matters is a new leader at a higher term.
        new = wait_for("a new leader at a higher term", lambda: next(
            (p for p in ports if self.role(p) == "leader" and self.info(p)["term"] > term),
            None), timeout=90)
        elected = time.time() - killed

        # Both agents heartbeat the new leader: their hosts are Ready with a heartbeat newer
        # than the kill, and each agent logged its switch.
        def attached():
            code, body, _ = http(new, "GET", "/api/v1/hosts", token=token, ca_file=self.ca_file)
            if code != 200:
                return None
            hosts = body["items"]
            fresh = [h for h in hosts if h["status"].get("state") == "Ready" and
                     h["status"].get("lastHeartbeatMs", 0) / 1000.0 > killed]
            return len(fresh) == 2 and hosts
        wait_for("both agents to heartbeat the new leader", attached, timeout=30, interval=0.2)
        print("\nkill -9 of the leader -> new leader answering %.1f s, agents attached %.1f s "
              "(load %.1f)" % (elected, time.time() - killed, os.getloadavg()[0]))
        if new != leader:  # the agents had to move
            for name in ("slice-000-w0", "slice-001-w0"):
                with open(os.path.join(self.state, "logs", "agent-%s.log" % name)) as f:
                    self.assertIn("agent.head_switched", f.read(), name)

        # Each agent keeps the new leader's term on disk (agent/fence_memory.h), so that a
        # restart of the agent would still refuse the deposed leader.
        new_term = self.info(new)["term"]

        def seen_term(name):
            try:
                with open(os.path.join(self.state, "agents", name, "fence", "seen")) as f:
                    return int(f.read().split("\nterm ")[1].split()[0])
            except (OSError, IndexError, ValueError):
                return 0
        for name in ("slice-000-w0", "slice-001-w0"):
            wait_for("%s to keep term %d" % (name, new_term),
                     lambda: seen_term(name) >= new_term, timeout=30, interval=0.2)

        # The serving router, given both heads, is connected to the control plane again; when
        # the head it used first was the one killed, it logged its move to the other.
        def router_connected():
            try:
                # HTTPS verified against the cluster CA, like the heads.
                context = ssl.create_default_context(cafile=self.ca_file)
                with urllib.request.urlopen(cluster["routerUrl"] + "/metrics", timeout=5,
                                            context=context) as r:
                    return "tessera_router_head_connected 1" in r.read().decode()
            except OSError:
                return False
        wait_for("the router to reach a head again", router_connected, timeout=30, interval=0.2)
        if leader == ports[0]:
            with open(os.path.join(self.state, "logs", "router.log")) as f:
                self.assertIn("event=head_switched", f.read())

        # The CLI with every address, the dead leader first: it finds the new one.
        servers = ",".join("https://127.0.0.1:%d" % p for p in [leader, standby])
        job = os.path.join(self.dir, "job.yaml")
        with open(job, "w") as f:
            f.write("apiVersion: tessera/v1\nkind: TrainJob\nmetadata: {name: after}\n"
                    "spec:\n  accelerator: v6e\n  topology: 2x4\n  slices: 2\n"
                    "  template: {command: ['true'], workingDir: %s}\n" % REPO)
        self.cli("apply", "-f", job, "--server", servers)
        self.cli("wait", "job", "after", "--for", "phase=Succeeded", "--timeout", "60s",
                 "--server", servers)
        self.assertIn("leader: 127.0.0.1:%d" % new, self.cli("status").stdout)
        # The acknowledged job from before the kill is still there.
        self.assertIn("via-standby", self.cli("describe", "job", "via-standby", "--server",
                                              servers).stdout)

        # The supervisor restarted the killed head: both heads answer, one leads.
        wait_for("both heads back", lambda: sorted(self.role(p) or "" for p in ports) ==
                 ["leader", "standby"], timeout=30)

        pids = cluster["ha"]["etcd"] + cluster["ha"]["heads"] + cluster["agents"]
        self.cli("down")
        wait_for("every process stopped", lambda: not any(alive(p) for p in pids), timeout=30)
        print("\nHA follow test: %.1f s from `up --ha` to `down`" % (time.monotonic() - started))


if __name__ == "__main__":
    unittest.main()
