"""What a new user meets: `tessera get KIND NAME` for every kind (kubectl's -o json|yaml|name|wide,
a missing name is an error with exit 1), `get hosts -w` printing a row as a job takes and frees
its hosts, `tessera up` passing --fair-sharing to its head and suggesting a job that fits the
cluster it started (which then runs, and whose goodput says what it is made of), and
`tessera up --ha` working with its defaults as docs/ha.md runs it.

Real processes (the built binary, $TESSERA_BIN), ports from 0, state in temporary directories;
every wait polls a condition with a deadline.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
from tessera.client import Client  # noqa: E402
from test_cluster import LEASE_MS, heartbeat_ms, wait_for  # noqa: E402

TESSERA = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "dev", "bin", "tessera"))
ETCD = os.environ.get("TESSERA_ETCD") or shutil.which("etcd")

OBJECTS = """\
apiVersion: tessera/v1
kind: PriorityClass
metadata: {name: get-pc}
value: 10
---
apiVersion: tessera/v1
kind: ClusterQueue
metadata: {name: get-cq}
spec:
  quotas: [{generation: v6e, nominalQuota: 32}]
---
apiVersion: tessera/v1
kind: LocalQueue
metadata: {name: get-lq}
spec: {clusterQueue: get-cq}
---
apiVersion: tessera/v1
kind: TrainJob
metadata: {name: get-job, queue: get-lq}
spec:
  accelerator: v6e
  topology: 4x4
  template: {command: ["true"]}
---
apiVersion: tessera/v1
kind: Service
metadata: {name: get-svc, queue: get-lq}
spec: {accelerator: TPU-V6E-8, command: [python3, s.py]}
---
apiVersion: tessera/v1
kind: SliceReservation
metadata: {name: get-sr, queue: get-lq}
spec: {accelerator: v6e, topology: 4x4}
"""



def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().split(b"\0")


class LineReader:
    """The lines a process writes to stdout, read on a thread so a wait can have a deadline."""

    def __init__(self, proc):
        self.lines = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc):
        for line in proc.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def snapshot(self):
        with self.lock:
            return list(self.lines)


class CliGetTest(unittest.TestCase):
    """Against a head alone: objects of every kind, no agents."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tessera-get-")
        cls.state = os.path.join(cls.dir, "state")
        cls.head = subprocess.Popen([TESSERA, "head", "--state-dir", cls.state, "--port", "0"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("the head", lambda: os.path.exists(os.path.join(cls.state, "head.json")))
        p = subprocess.run([TESSERA, "apply", "-f", "-", "--state-dir", cls.state],
                           input=OBJECTS, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise AssertionError("apply failed: " + p.stdout + p.stderr)

    @classmethod
    def tearDownClass(cls):
        cls.head.terminate()
        try:
            cls.head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cls.head.kill()
            cls.head.wait()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def cli(self, *args, input=None):
        return subprocess.run([TESSERA, *args, "--state-dir", self.state], capture_output=True,
                              text=True, input=input, timeout=60)

    def test_get_kind_name_for_every_kind_in_every_format(self):
        cases = [("job", "get-job", "TrainJob", "trainjob"),
                 ("services", "get-svc", "Service", "service"),
                 ("sr", "get-sr", "SliceReservation", "slicereservation"),
                 ("clusterqueue", "get-cq", "ClusterQueue", "clusterqueue"),
                 ("localqueues", "get-lq", "LocalQueue", "localqueue"),
                 ("pc", "get-pc", "PriorityClass", "priorityclass")]
        for kind, name, api_kind, prefix in cases:
            with self.subTest(kind=kind):
                p = self.cli("get", kind, name)
                self.assertEqual(p.returncode, 0, p.stderr)
                lines = p.stdout.splitlines()
                self.assertEqual(len(lines), 2, p.stdout)  # the header and the one row
                self.assertTrue(lines[0].startswith("NAME"), p.stdout)
                self.assertTrue(lines[1].startswith(name + " "), p.stdout)
                # One name: -o json prints the object itself, as kubectl does.
                p = self.cli("get", kind, name, "-o", "json")
                self.assertEqual(p.returncode, 0, p.stderr)
                obj = json.loads(p.stdout)
                self.assertEqual(obj["kind"], api_kind)
                self.assertEqual(obj["metadata"]["name"], name)
                p = self.cli("get", kind, name, "-o", "yaml")
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("name: " + name, p.stdout)
                self.assertIn("kind: " + api_kind, p.stdout)
                p = self.cli("get", kind, name, "-o", "name")
                self.assertEqual(p.stdout.strip(), prefix + "/" + name, p.stderr)
                p = self.cli("get", "%s/%s" % (prefix, name), "-o", "name")  # KIND/NAME
                self.assertEqual(p.stdout.strip(), prefix + "/" + name, p.stderr)
                p = self.cli("get", kind, name, "-o", "wide")
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn(name, p.stdout)

    def test_a_missing_name_is_an_error_after_the_others_are_printed(self):
        p = self.cli("get", "job", "get-job", "no-such-job")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("get-job", p.stdout)
        self.assertIn('error: trainjob "no-such-job" not found', p.stderr)
        p = self.cli("get", "jobs", "get-job", "get-job", "-o", "json")  # several: a List
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([i["metadata"]["name"] for i in json.loads(p.stdout)["items"]],
                         ["get-job", "get-job"])
        for kind, prefix in (("hosts", "host"), ("queues", "clusterqueue"), ("svc", "service"),
                             ("slicereservation", "slicereservation")):
            p = self.cli("get", kind, "nope")
            self.assertEqual(p.returncode, 1, kind)
            self.assertEqual(p.stdout, "", kind)
            self.assertIn('%s "nope" not found' % prefix, p.stderr)
        p = self.cli("get", "events", "x")
        self.assertEqual(p.returncode, 2)
        self.assertIn("events have no names", p.stderr)
        self.assertIn("--for trainjob/NAME", p.stderr)
        p = self.cli("get", "job", "a/b?c")
        self.assertEqual(p.returncode, 2)
        self.assertIn("NAME: 'a/b?c' is not an object name", p.stderr)
        p = self.cli("get", "pods")
        self.assertEqual(p.returncode, 2)
        self.assertIn("kind 'pods' is unknown; valid: jobs", p.stderr)

    def test_lists_come_in_pages_that_make_the_whole_list(self):
        jobs = "".join(
            "---\napiVersion: tessera/v1\nkind: TrainJob\nmetadata: {name: page-job-%d}\n"
            "spec: {accelerator: v6e, topology: 4x4, template: {command: [\"true\"]}}\n" % i
            for i in range(5))
        p = self.cli("apply", "-f", "-", input=jobs)
        self.assertEqual(p.returncode, 0, p.stderr)
        whole = self.cli("get", "jobs", "-o", "name", "--chunk-size", "0")
        self.assertEqual(whole.returncode, 0, whole.stderr)
        self.assertGreaterEqual(len(whole.stdout.splitlines()), 6, whole.stdout)
        paged = self.cli("get", "jobs", "-o", "name", "--chunk-size", "2")
        self.assertEqual(paged.returncode, 0, paged.stderr)
        self.assertEqual(paged.stdout, whole.stdout)
        # The API itself: limit and continue, every page at the first page's version.
        c = Client.from_state_dir(self.state)
        names, token, versions, pages = [], None, set(), 0
        while True:
            status, page = c.call("GET", "/api/v1/jobs?limit=2" +
                                  ("&continue=" + token if token else ""))
            self.assertEqual(status, 200, page)
            pages += 1
            self.assertLessEqual(len(page["items"]), 2)
            names += ["trainjob/" + i["metadata"]["name"] for i in page["items"]]
            versions.add(page["metadata"]["resourceVersion"])
            token = page["metadata"].get("continue")
            if not token:
                self.assertNotIn("remainingItemCount", page["metadata"])
                break
            self.assertEqual(page["metadata"]["remainingItemCount"],
                             len(whole.stdout.splitlines()) - len(names))
        self.assertEqual(names, whole.stdout.splitlines())
        self.assertEqual(len(versions), 1, versions)
        self.assertEqual(pages, (len(names) + 1) // 2)
        # A wrong token or limit: 400 naming the field and the fix.
        status, answer = c.call("GET", "/api/v1/jobs?limit=2&continue=not-a-token")
        self.assertEqual(status, 400, answer)
        self.assertEqual(answer.get("field"), "continue", answer)
        self.assertIn("list again without continue", str(answer))
        status, answer = c.call("GET", "/api/v1/jobs?limit=two")
        self.assertEqual(status, 400, answer)
        self.assertEqual(answer.get("field"), "limit", answer)
        # A token of another kind is refused too.
        _, first = c.call("GET", "/api/v1/jobs?limit=1")
        status, answer = c.call("GET", "/api/v1/hosts?limit=1&continue=" +
                                first["metadata"]["continue"])
        self.assertEqual(status, 400, answer)
        self.assertEqual(answer.get("field"), "continue", answer)
        # Python's client pages too.
        self.assertEqual(["trainjob/" + i["metadata"]["name"]
                          for i in c.list("jobs", chunk_size=2)], names)

    def test_get_help_lists_every_kind(self):
        p = subprocess.run([TESSERA, "get", "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        for kind in ("jobs", "services", "hosts", "events", "clusterqueues", "localqueues",
                     "priorityclasses", "slicereservations"):
            self.assertIn(kind, p.stdout)

    def test_watch_of_one_name_prints_only_its_changes(self):
        def apply_pc(name, value):
            p = self.cli("apply", "-f", "-", input=(
                "apiVersion: tessera/v1\nkind: PriorityClass\nmetadata: {name: %s}\n"
                "value: %d\n" % (name, value)))
            self.assertEqual(p.returncode, 0, p.stderr)

        apply_pc("get-watched", 1)
        watch = subprocess.Popen([TESSERA, "get", "pc", "get-watched", "-w", "-o", "json",
                                  "--state-dir", self.state], stdout=subprocess.PIPE, text=True)
        reader = LineReader(watch)
        try:
            # The watch's first line is the object as listed: from then on it sees every change.
            wait_for("the listed object", lambda: reader.snapshot(), timeout=30)
            apply_pc("get-other", 1)
            apply_pc("get-watched", 2)
            changes = wait_for("the change of get-watched",
                               lambda: (lambda s: s if len(s) >= 2 else None)(
                                   reader.snapshot()), timeout=30)
        finally:
            watch.terminate()
            watch.wait(timeout=30)
        parsed = [json.loads(line) for line in changes]
        self.assertEqual([c["object"]["metadata"]["name"] for c in parsed],
                         ["get-watched", "get-watched"])
        self.assertEqual([(c["type"], c["object"]["value"]) for c in parsed],
                         [("ADDED", 1), ("MODIFIED", 2)])


class CliUpTest(unittest.TestCase):
    """`tessera up` of one v6e 2x2 slice (one host): the flags it passes, its suggestion, and
    `get hosts -w` as jobs come and go."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tessera-up-")
        cls.state = os.path.join(cls.dir, "state")
        p = cls.cli("up", "--generation", "v6e", "--topology", "2x2", "--slices", "1",
                    "--heartbeat-ms", heartbeat_ms(), "--lease-ms", str(LEASE_MS), "--timeout", "120",
                    "--fair-sharing")
        cls.up = p
        if p.returncode != 0:
            cls.cli("down", "--purge")
            raise AssertionError("up failed: " + p.stdout + p.stderr)
        with open(os.path.join(cls.state, "admin.token")) as f:
            token = f.read().strip()
        with open(os.path.join(cls.state, "head.json")) as f:
            cls.client = Client("https://127.0.0.1:%d" % json.load(f)["port"], token,
                                ca_file=os.path.join(cls.state, "ca.crt"))

    @classmethod
    def tearDownClass(cls):
        cls.cli("down", "--purge")
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def cli(cls, *args, input=None):
        return subprocess.run([TESSERA, *args, "--state-dir", cls.state], capture_output=True,
                              text=True, input=input, timeout=180, cwd=REPO)

    def phase(self, name):
        return self.client.get("job", name)["status"]["phase"]

    def test_up_passes_fair_sharing_to_its_head(self):
        with open(os.path.join(self.state, "cluster.json")) as f:
            head = json.load(f)["head"]
        self.assertIn(b"--fair-sharing", cmdline(head))
        # And the head acts on it: a setting fair sharing ignores is reported as such. (The
        # queue goes at once: with a ClusterQueue, a job needs a LocalQueue.)
        try:
            p = self.cli("apply", "-f", "-", input=(
                "apiVersion: tessera/v1\nkind: ClusterQueue\nmetadata: {name: up-fair}\nspec:\n"
                "  cohort: up-lab\n  quotas: [{generation: v6e, nominalQuota: 4}]\n"
                "  preemption: {borrowWithinCohort: {policy: LowerPriority}}\n"))
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("ignored: the head runs with fair sharing", p.stderr)
        finally:
            self.cli("delete", "clusterqueue", "up-fair", "--ignore-not-found")

    def test_hosts_watch_prints_a_row_as_a_job_takes_and_frees_the_host(self):
        watch = subprocess.Popen([TESSERA, "get", "hosts", "-w", "--state-dir", self.state],
                                 stdout=subprocess.PIPE, text=True)
        reader = LineReader(watch)
        try:
            wait_for("the list", lambda: len(reader.snapshot()) >= 2, timeout=30)
            before = len(reader.snapshot())
            p = self.cli("apply", "-f", "-", input=json.dumps({
                "apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "w-job"},
                "spec": {"accelerator": "v6e", "topology": "2x2",
                         "template": {"command": ["true"]}}}))
            self.assertEqual(p.returncode, 0, p.stderr)
            wait_for("w-job to finish", lambda: self.phase("w-job") == "Succeeded", timeout=90)
            # A row naming the job when it took the host, then one without once it was freed.
            rows = wait_for("a row with w-job, then one without", lambda: (
                lambda new: new if any("w-job" in r for r in new) and
                "w-job" not in new[-1] else None)(reader.snapshot()[before:]), timeout=30)
        finally:
            watch.terminate()
            watch.wait(timeout=30)
        self.assertTrue(all(r.startswith("slice-000-w0 ") for r in rows), rows)
        self.assertEqual(self.cli("delete", "job", "w-job").returncode, 0)

    def test_the_suggested_job_fits_the_cluster_runs_and_states_its_goodput(self):
        demo = os.path.join(self.state, "demo-job.yaml")
        self.assertIn("Try: tessera get hosts; tessera apply -f " + demo, self.up.stdout)
        with open(demo) as f:
            text = f.read()
        self.assertIn("topology: 2x2", text)
        p = self.cli("apply", "-f", demo)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.cli("wait", "job", "train-demo", "--for", "phase=Succeeded", "--timeout", "300s")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr + self.cli(
            "describe", "job", "train-demo").stdout)
        out = self.cli("describe", "job", "train-demo").stdout
        self.assertRegex(out, r"Goodput: +\d+% = \S+ in kept steps / \S+ since the first placement")
        self.assertIn("start-up (placement to first step, every attempt):", out)
        self.assertIn("no failure, so nothing was lost to recovery", out)
        self.assertEqual(self.cli("delete", "job", "train-demo").returncode, 0)


@unittest.skipIf(not ETCD, "*** etcd is not installed (scripts/setup.sh installs etcd-server) ***")
class CliUpHaTest(unittest.TestCase):
    """`tessera up --ha` with the default election and fence, as docs/ha.md runs it."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-up-ha-")
        self.state = os.path.join(self.dir, "state")

    def tearDown(self):
        self.cli("down", "--purge")
        shutil.rmtree(self.dir, ignore_errors=True)

    def cli(self, *args):
        return subprocess.run([TESSERA, *args, "--state-dir", self.state], capture_output=True,
                              text=True, timeout=180, cwd=REPO)

    def test_up_ha_works_with_its_defaults_and_prints_each_url_apart(self):
        extra = ("--etcd", ETCD) if os.environ.get("TESSERA_ETCD") else ()
        p = self.cli("up", "--ha", "--ha-heads", "2", "--generation", "v6e", "--topology", "2x2",
                     "--slices", "1", "--timeout", "120", *extra)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        heads = [line for line in p.stdout.splitlines() if line.startswith("  heads:")]
        self.assertEqual(len(heads), 1, p.stdout)
        self.assertEqual(heads[0].count("https://"), 2, p.stdout)
        self.assertIn("(leader)", heads[0])
        web = [line for line in p.stdout.splitlines() if line.startswith("  web:")]
        self.assertEqual(len(web), 1, p.stdout)
        self.assertEqual(web[0].count("https://"), 1, p.stdout)
        self.assertNotIn(",http", p.stdout)
        # The agents fence one lease plus 5 s after the last answer: above the 15 s lease.
        with open(os.path.join(self.state, "cluster.json")) as f:
            agent = json.load(f)["agents"][0]
        args = cmdline(agent)
        self.assertEqual(args[args.index(b"--fence-ms") + 1], b"20000")
        self.assertEqual(self.cli("get", "hosts", "-o", "name").stdout.strip(),
                         "host/slice-000-w0")


if __name__ == "__main__":
    unittest.main()
