"""Integration tests: a real head and real agents on loopback ports, driven through the
`tessera` binary and the HTTP API, as a user would.

The binary comes from $TESSERA_BIN (scripts/test.sh points it at the dev build). Every wait
polls a condition with a deadline; nothing sleeps to wait for an event.
"""
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
from tessera.client import ApiError, Client  # noqa: E402  (the project's Python client)
TESSERA = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "dev", "bin", "tessera"))
PYTHON = "/usr/bin/python3"  # Debian's, which has torch

ENV_DUMP = (
    "import json, os; print('ENV ' + json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith(('TPU_', 'MEGASCALE_', 'JAX_', 'TESSERA_')) "
    "or k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')}))"
)


def job(name, command, slices=2, topology="4x4", env=None):
    return {
        "apiVersion": "tessera/v1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "accelerator": "v6e",
            "topology": topology,
            "slices": slices,
            "template": {"command": command, "env": env or {}, "workingDir": REPO},
        },
    }


# How often wait_for polls: first after FIRST_POLL_S, then each wait half as long again, up to
# LAST_POLL_S. Most polls are an HTTPS request to the head, which costs the dev build's head
# milliseconds of CPU under ASan (1.9 ms on the client's kept-alive connection, 4.8 ms on a new
# one): polled every 50 ms, a wait of a minute on a condition that read the job three times kept
# most of a core busy, on the two cores the pool of integration files shares (docs/testing.md,
# "Polls"). Short waits still end within a few tens of milliseconds.
FIRST_POLL_S = 0.05
LAST_POLL_S = 0.5


def wait_for(what, fn, timeout=60.0, interval=None):
    """fn()'s first truthy value, polled until `timeout` s have passed (then AssertionError
    naming `what` and fn's last value). `interval` polls at that fixed period instead of backing
    off from FIRST_POLL_S to LAST_POLL_S, for the few waits that time an event by the poll."""
    deadline = time.monotonic() + timeout
    period = interval or FIRST_POLL_S
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(period)
        if interval is None:
            period = min(LAST_POLL_S, period * 1.5)
    raise AssertionError("timed out after %.0f s waiting for %s (last: %r)" % (timeout, what, last))


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not alive for our purposes.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def mode_of(path):
    return os.stat(path).st_mode & 0o777


# The host lease of the test clusters: 6 s, so that a healthy agent on a loaded 2-core machine
# (the integration files run side by side, run_parallel.py) is not declared lost; the tests
# about a lost host choose their own.
LEASE_MS = 6000


def heartbeat_ms(lease_ms=LEASE_MS):
    """The test clusters' heartbeat: a tenth of the lease, from 100 to 500 ms. Each heartbeat
    is a TLS round trip of an ASan build on both sides: an idle cluster of 8 agents took 16% of
    a core at 200 ms and 9% at 500 ms (docs/testing.md), and the integration stage is bound by
    the CPU. Ten beats a lease keep a loaded agent from being declared lost."""
    return str(max(100, min(500, lease_ms // 10)))


def netns_unavailable():
    """Why `tessera up --netns` cannot run here (docs/netns.md), or None when it can.
    TESSERA_IT_NETNS=0 turns it off for a run."""
    if os.environ.get("TESSERA_IT_NETNS", "1") == "0":
        return "TESSERA_IT_NETNS=0"
    if os.geteuid() != 0:
        return "not root (network namespaces need root)"
    if not (shutil.which("ip") or os.path.exists("/usr/sbin/ip") or os.path.exists("/sbin/ip")):
        return "no `ip` (iproute2; scripts/setup.sh installs it)"
    return None


def ip(*args, check=True):
    """Runs iproute2's `ip`; raises with its output when it fails and `check`."""
    exe = shutil.which("ip") or ("/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "/sbin/ip")
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise AssertionError("ip %s failed: %s%s" % (" ".join(args), p.stdout, p.stderr))
    return p


# A MAC no interface has: a permanent neighbour entry pointing an address at it drops every packet
# to that address (docs/netns.md "Partitions"; tc and iptables are not always there).
NOWHERE_MAC = "02:00:00:00:00:01"


def read_pid(path):
    """The pid a worker wrote to `path`, or None while the file is missing or empty."""
    try:
        with open(path) as f:
            text = f.read().strip()
        return int(text) if text else None
    except OSError:
        return None


class Router:
    """`up`'s serving router as <state>/router.json records it, and connections to it: HTTPS
    verified against the cluster CA (<state>/ca.crt), or plain HTTP under `up --plain-http`."""

    def __init__(self, state):
        with open(os.path.join(state, "router.json")) as f:
            info = json.load(f)
        self.port = info["port"]
        self.scheme = info.get("scheme", "http")
        self.ca_file = os.path.join(state, "ca.crt")
        self.url = "%s://127.0.0.1:%d" % (self.scheme, self.port)

    def ssl_context(self):
        return ssl.create_default_context(cafile=self.ca_file) if self.scheme == "https" else None

    def connection(self, timeout=60):
        """A new http.client connection to the router."""
        if self.scheme == "https":
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout,
                                               context=self.ssl_context())
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)


class Cluster:
    """One `tessera up` cluster in a temporary directory. netns=True starts it with --netns
    (each host at its own address, docs/netns.md) where namespaces can be made; elsewhere it runs
    on loopback as before and says why on stderr, so the tests about distribution run either
    way."""

    def __init__(self, netns=False):
        self.dir = tempfile.mkdtemp(prefix="tessera-it-")
        self.state = os.path.join(self.dir, "state")
        why = netns_unavailable() if netns else None
        if netns and why:
            print("note: this cluster runs on loopback, not in network namespaces: %s" % why,
                  file=sys.stderr)
        self.netns = netns and not why

    def up_flags(self):
        """The flags every `up` of this cluster gets."""
        return ("--netns",) if self.netns else ()

    def netns_plan(self):
        """<state>/netns.json: the bridge and each member's namespace, veth and address."""
        with open(os.path.join(self.state, "netns.json")) as f:
            return json.load(f)

    def member(self, name):
        """The namespace record of "head" or of a host."""
        return [m for m in self.netns_plan()["members"] if m["name"] == name][0]

    def address_of(self, host):
        """Where peers reach `host` (its namespace's address, or loopback)."""
        return self.member(host)["address"] if self.netns else "127.0.0.1"

    def cut_link(self, name):
        """Takes the veth of "head" or a host down: it is cut off from everything."""
        ip("link", "set", "dev", self.member(name)["veth"], "down")

    def heal_link(self, name):
        ip("link", "set", "dev", self.member(name)["veth"], "up")

    def cut_between(self, ns_of, peer):
        """Drops what member `ns_of` ("root" for this namespace: the CLI and the router) sends
        to member `peer`, and nothing else."""
        where = self.netns_plan()["bridge"] if ns_of == "root" else "eth0"
        args = ("neigh", "replace", self.member(peer)["address"], "lladdr", NOWHERE_MAC,
                "dev", where, "nud", "permanent")
        ip(*args) if ns_of == "root" else ip("netns", "exec", self.member(ns_of)["ns"], "ip",
                                             *args)

    def heal_between(self, ns_of, peer):
        where = self.netns_plan()["bridge"] if ns_of == "root" else "eth0"
        args = ("neigh", "del", self.member(peer)["address"], "dev", where)
        ip(*args) if ns_of == "root" else ip("netns", "exec", self.member(ns_of)["ns"], "ip",
                                             *args)

    def cli(self, *args, check=True, input=None):
        p = subprocess.run([TESSERA, *args, "--state-dir", self.state], capture_output=True,
                           text=True, input=input, timeout=120, cwd=REPO)
        if check and p.returncode != 0:
            raise AssertionError("tessera %s failed (%d): %s%s" % (" ".join(args), p.returncode,
                                                                   p.stdout, p.stderr))
        return p

    def up(self, extra=(), lease_ms=None):
        lease_ms = lease_ms or LEASE_MS
        self.cli("up", "--generation", "v6e", "--topology", "4x4", "--slices", "2",
                 "--heartbeat-ms", heartbeat_ms(lease_ms), "--lease-ms", str(lease_ms), "--timeout", "120",
                 *self.up_flags(), *extra)
        with open(os.path.join(self.state, "admin.token")) as f:
            self.token = f.read().strip()
        self.reload_port()
        self.router = Router(self.state)

    def reload_port(self):
        with open(os.path.join(self.state, "head.json")) as f:
            head = json.load(f)
        self.port = head["port"]
        self.head_address = head.get("address", "127.0.0.1")
        # HTTPS, verified against the cluster CA `up` made (http with --plain-http).
        self.ca_file = os.path.join(self.state, "ca.crt")
        self.url = "%s://%s:%d" % (head.get("scheme", "http"), self.head_address, self.port)
        self.client = Client(self.url, self.token, ca_file=self.ca_file)

    def ssl_context(self):
        """For urllib calls of the head's URL: trusts the cluster CA."""
        return ssl.create_default_context(cafile=self.ca_file)

    def down(self):
        self.cli("down", "--purge", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def request(self, method, path, body=None, token="admin", content_type="application/json"):
        """(HTTP status, parsed answer) of one call through the client, refusals included;
        token "admin", another token, or None for none."""
        client = self.client if token == "admin" else Client(self.client.url, token,
                                                             ca_file=self.ca_file)
        return client.call(method, path, body, content_type=content_type)

    def get_job(self, name):
        try:
            return self.client.get("job", name)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def phase(self, name):
        j = self.get_job(name)
        return j["status"]["phase"] if j else "Gone"

    def wait_phase(self, name, phases, timeout=90):
        phase = wait_for("%s in %s" % (name, phases),
                         lambda: (lambda now: now if now in phases else None)(self.phase(name)),
                         timeout)
        if phase == "Failed" and "Succeeded" in phases:
            # The caller most likely hoped for success: say why it failed, for the failure's
            # report (the job's status, its events, the tail of its workers' logs).
            print("\n%s Failed; `tessera describe job %s`:\n%s" % (
                name, name, self.cli("describe", "job", name, check=False).stdout),
                file=sys.stderr)
        return phase


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # In network namespaces where they can be made: training across slices at the hosts'
        # own addresses (docs/netns.md).
        cls.c = Cluster(netns=True)
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def tearDown(self):
        # Leave the cluster empty for the next test.
        code, jobs = self.c.request("GET", "/api/v1/jobs")
        for j in jobs["items"]:
            self.c.request("DELETE", "/api/v1/jobs/" + j["metadata"]["name"])
        wait_for("no jobs", lambda: not self.c.request("GET", "/api/v1/jobs")[1]["items"])

    def test_state_is_readable_by_its_owner_only(self):
        # Tokens, the store (specs whose env may hold secrets) and workers' logs.
        self.assertEqual(mode_of(self.c.state), 0o700)
        for name in ("admin.token", "join.token", "head.json", "tessera.db", "tessera.db-wal",
                     "router.crt", "router.key"):
            self.assertEqual(mode_of(os.path.join(self.c.state, name)), 0o600, name)
        for host in ("slice-000-w0", "slice-001-w3"):
            self.assertEqual(mode_of(os.path.join(self.c.state, "agents", host)), 0o700, host)

    def test_watch_streams_job_changes(self):
        # Every change after this list's revision, even those before the watch connects.
        since = self.c.client.request("GET", "/api/v1/jobs")["metadata"]["resourceVersion"]
        self.c.client.apply(job("watched", ["true"], slices=1))
        seen = []
        for change in self.c.client.watch("jobs", resource_version=since, timeout=60):
            if change.name == "watched":
                seen.append({"type": change.type, "object": change.object})
            if any(e["object"]["status"]["phase"] == "Succeeded" for e in seen):
                break
        self.assertTrue(seen, "the watch ended before the job did")
        self.assertEqual(seen[0]["type"], "ADDED")
        phases = [e["object"]["status"]["phase"] for e in seen]
        self.assertIn("Starting", phases)
        self.assertEqual(phases[-1], "Succeeded")

    def test_hosts_registered(self):
        code, hosts = self.c.request("GET", "/api/v1/hosts")
        self.assertEqual(code, 200)
        self.assertEqual(len(hosts["items"]), 8)
        self.assertTrue(all(h["status"]["state"] == "Ready" for h in hosts["items"]))
        out = self.c.cli("get", "hosts").stdout
        self.assertIn("slice-001-w3", out)

    def test_every_worker_gets_its_slice_environment(self):
        code, _ = self.c.request("POST", "/api/v1/jobs", job("envcheck", [PYTHON, "-c", ENV_DUMP]))
        self.assertEqual(code, 201)
        self.assertEqual(self.c.wait_phase("envcheck", ("Succeeded", "Failed")), "Succeeded")
        envs = {}
        for rank in range(8):
            log = self.c.cli("logs", "job", "envcheck", "--worker", str(rank)).stdout
            line = [l for l in log.splitlines() if l.startswith("ENV ")][0]
            envs[rank] = json.loads(line[4:])
        status = self.c.get_job("envcheck")["status"]
        hosts = {p["slice"]: p["hosts"] for p in status["placement"]}
        ports = {e["MASTER_PORT"] for e in envs.values()}
        self.assertEqual(len(ports), 1)
        for rank, e in envs.items():
            s, w = divmod(rank, 4)
            slice_name = "slice-%03d" % s
            self.assertEqual(e["RANK"], str(rank))
            self.assertEqual(e["WORLD_SIZE"], "8")
            self.assertEqual(e["TPU_WORKER_ID"], str(w))
            self.assertEqual(e["TPU_NAME"], slice_name)
            self.assertEqual(e["TPU_WORKER_HOSTNAMES"], ",".join(hosts[slice_name]))
            self.assertEqual(e["TPU_WORKER_HOSTNAMES"].split(",")[w], "%s-w%d" % (slice_name, w))
            self.assertEqual(e["TPU_ACCELERATOR_TYPE"], "v6e-16")
            self.assertEqual(e["TPU_TOPOLOGY"], "4x4")
            self.assertEqual(e["MEGASCALE_SLICE_ID"], str(s))
            self.assertEqual(e["MEGASCALE_NUM_SLICES"], "2")
            chief = self.c.address_of(hosts["slice-000"][0])
            self.assertEqual(e["MEGASCALE_COORDINATOR_ADDRESS"], chief)
            self.assertEqual(e["JAX_PROCESS_ID"], str(rank))
            self.assertEqual(e["JAX_PROCESS_COUNT"], "8")
            self.assertEqual(e["TESSERA_ATTEMPT"], "0")
            self.assertEqual(e["MASTER_ADDR"], chief)

    def test_pytorch_example_trains_across_two_slices(self):
        with open(os.path.join(REPO, "examples", "train", "job.yaml")) as f:
            manifest = f.read()
        p = self.c.cli("apply", "-f", "-", input=manifest)
        self.assertIn("trainjob/train-demo created", p.stdout)
        self.assertEqual(self.c.wait_phase("train-demo", ("Succeeded", "Failed"), timeout=180),
                         "Succeeded")
        log = self.c.cli("logs", "job", "train-demo", "--worker", "0").stdout
        self.assertRegex(log, r"RESULT ok loss=[0-9.]+ steps=50 world=8")
        self.assertEqual(self.c.get_job("train-demo")["status"]["lastStep"], 50)

    def test_job_that_does_not_fit_now_waits_with_a_reason(self):
        code, _ = self.c.request("POST", "/api/v1/jobs", job("big", ["sleep", "600"]))
        self.assertEqual(code, 201)
        self.c.wait_phase("big", ("Running",))
        code, _ = self.c.request("POST", "/api/v1/jobs", job("waiter", ["true"], slices=1))
        self.assertEqual(code, 201)
        st = self.c.get_job("waiter")["status"]
        self.assertEqual(st["phase"], "Pending")
        self.assertEqual(st["reason"], "NoFreeSlice")
        self.assertIn("0 of 2 are free", st["message"])
        # Once the big job is deleted, the waiter runs.
        self.c.cli("delete", "job", "big")
        self.assertEqual(self.c.wait_phase("waiter", ("Succeeded", "Failed")), "Succeeded")

    def test_delete_kills_every_worker_process_group(self):
        # Each worker starts a grandchild; both must die.
        script = "sleep 600 & echo child $! ; wait"
        self.c.request("POST", "/api/v1/jobs", job("sleepy", ["/bin/sh", "-c", script]))
        self.c.wait_phase("sleepy", ("Running",))
        pids = [w["pid"] for w in self.c.get_job("sleepy")["status"]["workers"]]
        self.assertEqual(len(pids), 8)
        children = []
        for rank in range(8):
            log = wait_for("child pid in log", lambda: [
                l for l in self.c.cli("logs", "job", "sleepy", "--worker", str(rank)).stdout.splitlines()
                if l.startswith("child ")])
            children.append(int(log[0].split()[1]))
        self.assertTrue(all(alive(p) for p in pids + children))
        self.assertIn("terminating", self.c.cli("delete", "job", "sleepy").stdout)
        wait_for("job gone", lambda: self.c.phase("sleepy") == "Gone")
        wait_for("every worker and grandchild gone", lambda: not any(alive(p) for p in pids + children))
        p = self.c.cli("delete", "job", "sleepy", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("not found", p.stderr)
        self.assertEqual(self.c.cli("delete", "job", "sleepy", "--ignore-not-found").returncode, 0)

    def test_requests_without_a_valid_token_get_401_and_change_nothing(self):
        before = self.c.request("GET", "/api/v1/jobs")[1]
        for token in (None, "wrong-token-0123456789"):
            code, _ = self.c.request("POST", "/api/v1/jobs", job("sneaky", ["true"]), token=token)
            self.assertEqual(code, 401)
            code, _ = self.c.request("GET", "/api/v1/jobs", token=token)
            self.assertEqual(code, 401)
        # The join token is for agents only.
        with open(os.path.join(self.c.state, "join.token")) as f:
            join = f.read().strip()
        self.assertEqual(self.c.request("POST", "/api/v1/jobs", job("sneaky", ["true"]), token=join)[0], 403)
        self.assertEqual(self.c.request("GET", "/api/v1/jobs")[1], before)

    def test_the_bearer_scheme_is_case_insensitive_for_auth_and_roles_alike(self):
        with open(os.path.join(self.c.state, "join.token")) as f:
            join = f.read().strip()

        def get(path, authorization):
            req = urllib.request.Request(self.c.url + path)
            req.add_header("Authorization", authorization)
            try:
                with urllib.request.urlopen(req, timeout=30, context=self.c.ssl_context()) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
        for scheme in ("bearer", "BEARER", "Bearer"):
            self.assertEqual(get("/api/v1/jobs", scheme + " " + self.c.token), 200, scheme)
            self.assertEqual(get("/api/v1/jobs", scheme + " " + join), 403, scheme)
        # An encoded '/' cannot slip past the dashboard's exemption.
        self.assertEqual(get("/web%2F..%2Fapi/v1/jobs", ""), 400)

    def test_bad_input_gets_4xx_naming_the_field_and_keeps_the_head_serving(self):
        code, _ = self.c.request("POST", "/api/v1/jobs", job("keeper", ["sleep", "600"], slices=1))
        self.assertEqual(code, 201)
        cases = [
            (b"apiVersion: [unclosed", 400, "malformed YAML"),
            (b'{"apiVersion": ', 400, "malformed JSON"),
            (json.dumps({**job("x", ["true"]), "kind": "Pod"}).encode(), 422, "kind"),
            (json.dumps({**job("x", ["true"]), "spec": {**job("x", ["true"])["spec"], "colour": 1}}).encode(),
             422, "spec.colour: unknown field"),
            (json.dumps(job("x", ["true"], topology="4x5")).encode(), 422, "spec.topology"),
            (json.dumps({**job("x", ["true"]), "spec": {**job("x", ["true"])["spec"], "accelerator": "v9"}}).encode(),
             422, "spec.accelerator"),
            (json.dumps(job("x", ["true"], slices=-1)).encode(), 422, "spec.slices"),
            (json.dumps(job("x", ["true"], slices=10 ** 12)).encode(), 422, "spec.slices"),
            (json.dumps(job("x", ["true"], slices=3)).encode(), 422, "can never fit"),
            (json.dumps(job("keeper", ["true"], slices=1)).encode(), 409, "already exists"),
            (b"a: " + b"x" * (10 * 1024 * 1024), 413, "body"),
        ]
        for body, want_code, want_text in cases:
            code, answer = self.c.request("POST", "/api/v1/jobs", body, content_type="application/yaml")
            self.assertEqual(code, want_code, (body[:60], answer))
            self.assertIn(want_text, json.dumps(answer), body[:60])
        self.assertEqual(self.c.request("GET", "/healthz", token=None)[0], 200)
        names = [j["metadata"]["name"] for j in self.c.request("GET", "/api/v1/jobs")[1]["items"]]
        self.assertEqual(names, ["keeper"])
        self.assertEqual(self.c.wait_phase("keeper", ("Running",)), "Running")
        # The CLI reports a bad file with the field and a non-zero exit.
        p = self.c.cli("apply", "-f", "-", input=json.dumps(job("y", ["true"], topology="4x5")), check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("spec.topology", p.stderr)
        self.assertEqual(p.stdout, "")


class RestartTest(unittest.TestCase):
    def test_kill_9_of_the_head_loses_nothing_and_adopts_running_workers(self):
        c = Cluster()
        self.addCleanup(c.down)
        c.up()
        c.request("POST", "/api/v1/jobs", job("survivor", ["sleep", "600"]))
        c.wait_phase("survivor", ("Running",))
        before = c.get_job("survivor")
        pids = [w["pid"] for w in before["status"]["workers"]]
        with open(os.path.join(c.state, "cluster.json")) as f:
            cluster = json.load(f)
        os.kill(cluster["head"], signal.SIGKILL)
        wait_for("head gone", lambda: not alive(cluster["head"]))
        log = open(os.path.join(c.state, "logs", "head-restart.log"), "w")
        self.addCleanup(log.close)
        head = subprocess.Popen([TESSERA, "head", "--state-dir", c.state, "--port", str(c.port),
                                 "--heartbeat-ms", heartbeat_ms(), "--lease-ms", str(LEASE_MS)],
                                stdout=log, stderr=log, start_new_session=True)
        self.addCleanup(lambda: (c.down(), head.wait(timeout=30)))  # stop, then reap
        cluster["head"] = head.pid
        with open(os.path.join(c.state, "cluster.json"), "w") as f:
            json.dump(cluster, f)
        wait_for("head serving", lambda: _healthy(c))
        after = c.get_job("survivor")
        self.assertEqual(after["status"]["phase"], "Running")
        self.assertEqual(after["status"]["placement"], before["status"]["placement"])
        self.assertEqual(after["status"]["masterPort"], before["status"]["masterPort"])
        # Agents reconnect and keep heartbeating; the same processes keep running.
        wait_for("hosts ready", lambda: all(h["status"]["state"] == "Ready"
                                            for h in c.request("GET", "/api/v1/hosts")[1]["items"]))
        self.assertTrue(all(alive(p) for p in pids))
        after2 = c.get_job("survivor")
        self.assertEqual([w["pid"] for w in after2["status"]["workers"]], pids)
        # Both slices are still held by the adopted job, so a new one waits, then runs once the
        # survivor is deleted.
        c.request("POST", "/api/v1/jobs", job("later", ["true"], slices=1))
        self.assertEqual(c.get_job("later")["status"]["reason"], "NoFreeSlice")
        c.cli("delete", "job", "survivor")
        wait_for("survivor's workers gone", lambda: not any(alive(p) for p in pids))
        self.assertEqual(c.wait_phase("later", ("Succeeded", "Failed")), "Succeeded")


class PrivateStateTest(unittest.TestCase):
    def start_head(self, state):
        """Starts `tessera head` on `state` and waits until it has written head.json."""
        log = open(os.path.join(os.path.dirname(state), "head.log"), "a")
        self.addCleanup(log.close)
        head = subprocess.Popen([TESSERA, "head", "--state-dir", state, "--port", "0"],
                                stdout=log, stderr=log, start_new_session=True)

        def stop():
            if head.poll() is None:
                head.terminate()
                head.wait(timeout=30)
        self.addCleanup(stop)

        def written():
            if head.poll() is not None:
                raise AssertionError("the head exited with %d; see %s" % (head.returncode, log.name))
            try:
                with open(os.path.join(state, "head.json")) as f:
                    return json.load(f).get("pid") == head.pid
            except (OSError, ValueError):
                return False
        wait_for("head.json of pid %d" % head.pid, written, timeout=60)
        return stop

    def test_wider_modes_are_tightened_when_the_head_starts(self):
        base = tempfile.mkdtemp(prefix="tessera-private-")
        self.addCleanup(shutil.rmtree, base, True)
        state = os.path.join(base, "state")
        self.start_head(state)()  # a first run creates the tokens and the store, then stops
        with open(os.path.join(state, "admin.token")) as f:
            token = f.read()
        files = ["admin.token", "join.token", "head.json", "tessera.db", "tessera.db-wal"]
        for name in files:
            if not os.path.exists(os.path.join(state, name)):
                open(os.path.join(state, name), "a").close()  # e.g. an empty -wal
            os.chmod(os.path.join(state, name), 0o644)
        os.chmod(state, 0o755)

        self.start_head(state)
        self.assertEqual(mode_of(state), 0o700)
        for name in files:
            self.assertEqual(mode_of(os.path.join(state, name)), 0o600, name)
        with open(os.path.join(state, "admin.token")) as f:
            self.assertEqual(f.read(), token, "tightened, not replaced")


def _healthy(cluster):
    # While the restarted head starts, a connection can be refused or reset; a client retries.
    try:
        return cluster.request("GET", "/healthz", token=None)[0] == 200
    except OSError:
        return False


if __name__ == "__main__":
    unittest.main()
