"""Two local clusters side by side on one machine, as a user runs them: each head seeds its
port picker on its own (head.json's portSeed) and probes the machine, so the workers of the two
clusters never get the same MASTER_PORT, and both bind it at once. On one of them, the README's
kubectl flow with queues: a job without metadata.queue, while no LocalQueue named default exists,
says why it waits in `wait`'s timeout and in `explain`, with the fix and the LocalQueues there
are; then queues.yaml, the example job and `wait`, word for word.

Uses the Cluster helper of test_cluster.py (polled with deadlines, never fixed sleeps).
"""
import json
import os
import unittest

from test_cluster import PYTHON, Cluster, job, wait_for

# Worker 0 listens on MASTER_PORT, as torch.distributed's store does, and says so; every worker
# then stays up until it is stopped.
LISTEN = (
    "import os, socket, time\n"
    "if os.environ['RANK'] == '0':\n"
    "    s = socket.socket()\n"
    "    s.bind(('127.0.0.1', int(os.environ['MASTER_PORT'])))\n"
    "    s.listen()\n"
    "    print('LISTENING', os.environ['MASTER_PORT'], flush=True)\n"
    "time.sleep(600)\n"
)


TEAM_QUEUE = """
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


class SideBySideTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a = Cluster()
        cls.b = Cluster()
        cls.a.up()
        cls.b.up()

    @classmethod
    def tearDownClass(cls):
        cls.b.down()
        cls.a.down()

    def test_kubectl_flow_with_queues_says_why_a_job_waits_then_runs_the_example(self):
        c = self.b
        # Queues without a LocalQueue named default: a job without metadata.queue waits for it.
        out = c.cli("apply", "-f", "-", input=TEAM_QUEUE).stdout
        self.assertIn("localqueue/team-a created", out)
        code, body = c.request("POST", "/api/v1/apply", job("unqueued", ["true"], slices=1))
        self.assertEqual(code, 201, body)
        wait_for("unqueued to wait for its LocalQueue",
                 lambda: c.get_job("unqueued")["status"].get("pendingReason")
                 == "LocalQueueNotFound", timeout=30)
        p = c.cli("wait", "job", "unqueued", "--for", "phase=Succeeded", "--timeout", "1s",
                  check=False)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("(now Pending; LocalQueueNotFound: LocalQueue default does not exist",
                      p.stderr)
        self.assertIn("set metadata.queue: NAME to one of the LocalQueues team-a (ClusterQueue "
                      "research)", p.stderr)
        p = c.cli("explain", "job", "unqueued")
        self.assertIn("Reason:    LocalQueueNotFound", p.stdout)
        self.assertIn("Fix:       set metadata.queue: NAME to one of these LocalQueues", p.stdout)
        self.assertIn("  team-a (ClusterQueue research)", p.stdout)
        self.assertIn("or apply a LocalQueue named default", p.stdout)
        self.assertNotIn("Would help", p.stdout)
        c.cli("delete", "job", "unqueued")

        # The README's flow: queues.yaml makes the LocalQueue named default too, so the example
        # job (no metadata.queue) is admitted and runs.
        c.cli("apply", "-f", "examples/client/queues.yaml")
        c.cli("apply", "--dry-run", "-f", "examples/train/")
        out = c.cli("apply", "-f", "examples/train/job.yaml").stdout
        self.assertIn("trainjob/train-demo created", out)
        p = c.cli("wait", "job", "train-demo", "--for", "phase=Succeeded", "--timeout", "5m",
                  check=False)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr + json.dumps(
            c.get_job("train-demo")["status"]))

    def test_two_clusters_give_their_workers_different_ports_and_both_bind(self):
        seeds = []
        for c in (self.a, self.b):
            with open(os.path.join(c.state, "head.json")) as f:
                seeds.append(json.load(f)["portSeed"])
        self.assertNotEqual(seeds[0], seeds[1])
        ports = []
        # One after the other, so that the second head's probe finds the first's worker 0 on its
        # port: even with equal seeds it could not hand that port out again.
        for c in (self.a, self.b):
            doc = job("listen", [PYTHON, "-c", LISTEN], slices=1)
            doc["metadata"]["queue"] = "team-a"  # in case the other test made queues here
            code, body = c.request("POST", "/api/v1/apply", doc)
            self.assertEqual(code, 201, body)
            c.wait_phase("listen", ("Running",), timeout=60)

            def worker0_log(c=c):
                out = c.cli("logs", "job", "listen", "--worker", "0", check=False).stdout
                return out if "LISTENING" in out else None
            log = wait_for("worker 0 to listen", worker0_log, timeout=60)
            port = int(log.split("LISTENING")[1].split()[0])
            self.assertEqual(port, c.get_job("listen")["status"]["masterPort"])
            ports.append(port)
        self.assertNotEqual(ports[0], ports[1])
        # Both still run: neither worker 0 lost its port to the other cluster's.
        for c in (self.a, self.b):
            self.assertEqual(c.phase("listen"), "Running")
            c.cli("delete", "job", "listen")


if __name__ == "__main__":
    unittest.main()
