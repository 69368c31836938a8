"""The CLI as kubectl users expect it, against a real head (no agents: these commands only talk
to the API): `apply -f` of multi-document YAML, JSON lists, directories and standard input,
stopping at the first refusal; `--dry-run`; `wait`; `get -o name`; `get -w`; `completion bash`.

Real processes because what is tested is the binary's argument handling, its output and exit
codes, and the head's answers to it; a head alone starts in well under a second.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
from tessera.client import Client  # noqa: E402

TESSERA = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "dev", "bin", "tessera"))

QUEUES = """\
apiVersion: tessera/v1
kind: PriorityClass
metadata: {name: cli-high}
value: 100
---
# a comment-only document is skipped
---
apiVersion: tessera/v1
kind: ClusterQueue
metadata: {name: cli-research}
spec:
  quotas: [{generation: v6e, nominalQuota: 32}]
---
apiVersion: tessera/v1
kind: LocalQueue
metadata: {name: cli-team}
spec: {clusterQueue: cli-research}
"""


def job(name, topology="4x4"):
    return {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"accelerator": "v6e", "topology": topology,
                     "template": {"command": ["true"]}}}


class CliApplyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tessera-cli-")
        cls.state = os.path.join(cls.dir, "state")
        cls.head = subprocess.Popen([TESSERA, "head", "--state-dir", cls.state, "--port", "0"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(cls.state, "head.json")):
            if time.monotonic() > deadline:
                raise AssertionError("the head did not start")
            time.sleep(0.02)
        cls.client = Client.from_state_dir(cls.state)

    @classmethod
    def tearDownClass(cls):
        cls.head.terminate()
        try:
            cls.head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cls.head.kill()
            cls.head.wait()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def cli(self, *args, input=None, timeout=60):
        return subprocess.run([TESSERA, *args, "--state-dir", self.state], capture_output=True,
                              text=True, input=input, timeout=timeout)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_multi_document_file_applies_each_in_order(self):
        p = self.cli("apply", "-f", self.write("queues.yaml", QUEUES))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["priorityclass/cli-high created",
                                                 "clusterqueue/cli-research created",
                                                 "localqueue/cli-team created"])
        p = self.cli("apply", "-f", "-", input=QUEUES)  # standard input; now replaced
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("clusterqueue/cli-research configured", p.stdout)

    def test_a_setting_that_cannot_take_effect_is_applied_with_a_warning(self):
        lonely = ("apiVersion: tessera/v1\nkind: ClusterQueue\nmetadata: {name: cli-lonely}\n"
                  "spec:\n  cohort: cli-nobody-else\n"
                  "  quotas: [{generation: v6e, nominalQuota: 16}]\n")
        p = self.cli("apply", "-f", "-", input=lonely)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "clusterqueue/cli-lonely created")
        self.assertIn("Warning: clusterqueue/cli-lonely: spec.cohort: no other ClusterQueue is "
                      "in cohort cli-nobody-else", p.stderr)
        # describe shows the same warning with its reason, beside the usage and the counts.
        p = self.cli("describe", "clusterqueue", "cli-lonely")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("Cohort:      cli-nobody-else", p.stdout)
        self.assertIn("Workloads:   0 pending, 0 admitted", p.stdout)
        self.assertIn("  spec.cohort: no other ClusterQueue is in cohort cli-nobody-else",
                      p.stdout)
        self.assertIn("IneffectiveSetting", p.stdout)  # the queue's Warning event
        p = self.cli("describe", "clusterqueue", "cli-no-such-queue")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("clusterqueue 'cli-no-such-queue' not found", p.stderr)

    def test_directory_and_json_list_stop_at_the_first_refusal(self):
        d = os.path.join(self.dir, "jobs")
        self.write("jobs/a.json", json.dumps([job("cli-a1"), job("cli-a2")]))
        self.write("jobs/b.yaml", json.dumps(job("cli-bad", topology="4x5")))
        self.write("jobs/c.yml", json.dumps(job("cli-c")))
        self.write("jobs/notes.txt", "not a manifest")
        p = self.cli("apply", "-f", d)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["trainjob/cli-a1 created",
                                                 "trainjob/cli-a2 created"])
        self.assertIn("b.yaml: spec.topology: topology '4x5'", p.stderr)
        self.assertIn("2 of 4 applied before it (trainjob/cli-a1, trainjob/cli-a2); the rest "
                      "were not sent", p.stderr)
        names = [j["metadata"]["name"] for j in self.client.list("jobs")]
        self.assertNotIn("cli-c", names)
        for n in ("cli-a1", "cli-a2"):
            self.client.delete("job", n)

    def test_dry_run_validates_on_the_head_and_stores_nothing(self):
        p = self.cli("apply", "--dry-run", "-f", "-", input=json.dumps(job("cli-dry")))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "trainjob/cli-dry created (dry run)")
        with self.assertRaises(Exception):
            self.client.get("job", "cli-dry")
        bad = job("cli-dry")
        bad["spec"]["priority"] = "no-such-class"
        p = self.cli("apply", "--dry-run", "-f", "-", input=json.dumps(bad))
        self.assertEqual(p.returncode, 2)
        self.assertIn("spec.priority: PriorityClass 'no-such-class' does not exist", p.stderr)
        service = ("apiVersion: tessera/v1\nkind: Service\nmetadata: {name: cli-svc}\n"
                   "spec: {accelerator: TPU-V6E-8, command: [python3, s.py]}\n")
        p = self.cli("apply", "--dry-run", "-f", "-", input=service)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "service/cli-svc created (dry run)")
        with self.assertRaises(Exception):
            self.client.get("service", "cli-svc")

    def test_wait_get_name_and_watch(self):
        self.client.apply(job("cli-wait"))
        p = self.cli("wait", "job", "cli-wait", "--for", "phase=Pending", "--timeout", "20s")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "trainjob/cli-wait condition met (phase=Pending)")
        started = time.monotonic()
        p = self.cli("wait", "job", "cli-wait", "--for", "phase=Succeeded", "--timeout", "1s")
        self.assertEqual(p.returncode, 1)
        # It says what the job waits for: its reason (when not the phase) and message.
        self.assertIn("timed out after 1s waiting for trainjob/cli-wait phase=Succeeded "
                      "(now Pending; waiting for the scheduler)", p.stderr)
        self.assertLess(time.monotonic() - started, 30)
        p = self.cli("wait", "job", "cli-wait", "--for", "phase", "--timeout", "1s")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--for: 'phase' is not a condition", p.stderr)
        p = self.cli("wait", "job", "cli-wait", "--for", "phase=Pending", "--timeout", "5 min")
        self.assertIn("--timeout: '5 min' is not a duration", p.stderr)

        p = self.cli("get", "jobs", "-o", "name")
        self.assertIn("trainjob/cli-wait", p.stdout.splitlines())

        # get -w: the list, then each change; a delete shows up as it happens.
        watch = subprocess.Popen([TESSERA, "get", "jobs", "-w", "-o", "json", "--state-dir",
                                  self.state], stdout=subprocess.PIPE, text=True)
        try:
            first = json.loads(watch.stdout.readline())
            self.assertEqual(first["type"], "ADDED")
            self.client.delete("job", "cli-wait")
            seen = []
            while not any(c["type"] == "DELETED" for c in seen):
                line = watch.stdout.readline()
                self.assertTrue(line, "the watch ended early")
                change = json.loads(line)
                if change["object"]["metadata"]["name"] == "cli-wait":
                    seen.append(change)
        finally:
            watch.terminate()
            watch.wait(timeout=30)
            watch.stdout.close()
        p = self.cli("wait", "job", "cli-wait", "--for", "delete", "--timeout", "5s")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "trainjob/cli-wait deleted")

    def test_bash_completion(self):
        p = subprocess.run([TESSERA, "completion", "bash"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("complete -o default -F _tessera tessera", p.stdout)
        script = p.stdout + ('\nCOMP_WORDS=(tessera ap); COMP_CWORD=1; _tessera; '
                             'echo "${COMPREPLY[@]}"\n'
                             'COMP_WORDS=(tessera get qu); COMP_CWORD=2; _tessera; '
                             'echo "${COMPREPLY[@]}"\n'
                             'COMP_WORDS=(tessera wait job x --ti); COMP_CWORD=4; _tessera; '
                             'echo "${COMPREPLY[@]}"\n')
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                             timeout=30).stdout.splitlines()
        self.assertEqual(out, ["apply", "queues queue", "--timeout"])


if __name__ == "__main__":
    unittest.main()
