"""Integration test of admission in the head: a high-priority job preempts a low-priority
training job on a live local cluster; the victim checkpoints on SIGTERM, waits in line with its
place kept, and resumes from that checkpoint when the high-priority job has finished.

Uses the Cluster helper of test_cluster.py (a real head and real agents, polled with deadlines).
"""
import os
import re
import unittest

from test_cluster import PYTHON, REPO, Cluster, wait_for

QUEUES = """
apiVersion: tessera/v1
kind: {kind}
metadata: {{name: {name}}}
{body}
"""


# The victim's steps: each takes at least STEP_MS (asleep), so the job runs for at least 30 s and
# is still running when the high-priority job comes, without 8 workers spinning all-reduces on a
# machine the other integration files share (1,500 steps at full speed before: most of this
# file's CPU).
VICTIM_STEPS = 300
VICTIM_STEP_MS = 100


def train_job(name, queue, priority, slices, steps, ckpt_dir, ckpt_every, step_ms=0):
    return {
        "apiVersion": "tessera/v1",
        "kind": "TrainJob",
        "metadata": {"name": name, "queue": queue},
        "spec": {
            "accelerator": "v6e",
            "topology": "4x4",
            "slices": slices,
            "priority": priority,
            "checkpoint": {"dir": ckpt_dir},
            "template": {
                "command": [PYTHON, "examples/train/train.py"],
                "env": {"STEPS": str(steps), "CKPT_EVERY": str(ckpt_every),
                        "STEP_MS": str(step_ms), "PYTHONPATH": os.path.join(REPO, "python")},
                "workingDir": REPO,
                "terminationGracePeriod": "60s",
            },
        },
    }


class PreemptionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def apply(self, kind, name, body):
        p = self.c.cli("apply", "-f", "-", input=QUEUES.format(kind=kind, name=name, body=body))
        self.assertIn("%s/%s created" % (kind.lower(), name), p.stdout)

    def log(self, job):
        code, text = self.c.request("GET", "/api/v1/jobs/%s/logs?worker=0" % job)
        return text if code == 200 and isinstance(text, str) else ""

    def test_high_priority_job_preempts_and_the_victim_resumes_from_its_checkpoint(self):
        c = self.c
        self.apply("PriorityClass", "low", "value: 1")
        self.apply("PriorityClass", "high", "value: 100")
        self.apply("ClusterQueue", "research",
                   "spec:\n  quotas: [{generation: v6e, nominalQuota: 32}]\n"
                   "  preemption: {withinClusterQueue: LowerPriority}")
        self.apply("LocalQueue", "team", "spec: {clusterQueue: research}")
        code, queues = c.request("GET", "/api/v1/clusterqueues")
        self.assertEqual(code, 200)
        self.assertEqual(queues["items"][0]["status"]["nominalChips"], 32)

        ckpt = os.path.join(c.dir, "ckpt-low")
        code, body = c.request("POST", "/api/v1/apply",
                               train_job("low", "team", "low", 2, VICTIM_STEPS, ckpt, 5,
                                         VICTIM_STEP_MS))
        self.assertEqual(code, 201, body)
        # Running, with at least one periodic checkpoint behind it.
        wait_for("low to checkpoint",
                 lambda: (c.get_job("low")["status"]["lastStep"] >= 6
                          and c.get_job("low")["status"]["lastCheckpointTimeMs"] > 0),
                 timeout=180)
        self.assertIn("research", c.cli("get", "queues").stdout)

        code, body = c.request("POST", "/api/v1/apply",
                               train_job("high", "team", "high", 1, 20,
                                         os.path.join(c.dir, "ckpt-high"), 10))
        self.assertEqual(code, 201, body)
        # The victim is requeued (Pending, preempted once) and checkpoints on SIGTERM.
        wait_for("low to be preempted",
                 lambda: c.get_job("low")["status"]["preemptions"] == 1, timeout=30)
        self.assertEqual(c.phase("low"), "Pending")
        preempted_log = wait_for("PREEMPTED in low's log",
                                 lambda: re.search(r"PREEMPTED step=(\d+)", self.log("low")),
                                 timeout=90)
        step = int(preempted_log.group(1))
        self.assertGreater(step, 0)

        # The high-priority job starts once the victim's workers are gone, and finishes.
        self.assertEqual(c.wait_phase("high", ("Succeeded", "Failed"), timeout=180), "Succeeded")
        # Meanwhile (or right after) the victim explains itself, then resumes and succeeds.
        explain = c.cli("explain", "job", "low").stdout
        self.assertIn("Job:       low", explain)
        self.assertEqual(c.wait_phase("low", ("Succeeded", "Failed"), timeout=300), "Succeeded")
        st = c.get_job("low")["status"]
        self.assertEqual(st["attempt"], 1)
        log = c.cli("logs", "job", "low", "--worker", "0").stdout
        self.assertIn("resume step %d from" % step, log)
        self.assertRegex(log, r"RESULT ok loss=[0-9.]+ steps=%d world=8" % VICTIM_STEPS)
        out = c.cli("get", "queues").stdout
        self.assertRegex(out, r"research\s+-\s+32\s+0\s+0\s+0\s+0")


if __name__ == "__main__":
    unittest.main()
