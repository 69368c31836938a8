"""Integration test of defragmentation by checkpoint-and-move in the head (`tessera head
--backfill easy --defrag`), on a local two-cube 7x cluster (32 emulated hosts): sub-cube jobs are
left scattered over both cubes, a 4x4x4 job arrives and waits, the head moves the fewest (the
cheapest) jobs, the 4x4x4 starts, and the moved job resumes from the checkpoint it wrote on
SIGTERM.

Real processes because the move is the whole stop protocol (SIGTERM with grace to real workers,
the agents' confirmations, the requeue with its placement hint, the restart on other hosts),
which the pure tests of admission/easy_pass.h cannot show. The workers are a few lines of Python
that count steps and checkpoint to a file, so the test is short.
"""
import os
import unittest

from test_3d_cluster import Cluster3D, job_7x
from test_cluster import PYTHON, wait_for

# Rank 0 counts steps in $TESSERA_CHECKPOINT_DIR/step, resumes from it, and checkpoints on
# SIGTERM before exiting 143; the other ranks only wait.
WORKER = r"""
import os, signal, sys, time
rank = int(os.environ["RANK"])
path = os.path.join(os.environ.get("TESSERA_CHECKPOINT_DIR", "."), "step")
step = 0
if rank == 0 and os.path.exists(path):
    step = int(open(path).read())
    print("resume step %d" % step, flush=True)
def stop(*_):
    if rank == 0:
        open(path + ".tmp", "w").write(str(step)); os.replace(path + ".tmp", path)
        open(path + ".sigterm", "w").write(str(step))  # for the test: this attempt's log goes
        print("PREEMPTED step=%d" % step, flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(0.1)
    step += 1
    if rank == 0 and step % 10 == 0:
        open(path + ".tmp", "w").write(str(step)); os.replace(path + ".tmp", path)
"""


def cubes_of(hosts):
    return sorted({h.rsplit("-h", 1)[0] for h in hosts})


class DefragTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster3D()
        cls.c.up(("--backfill", "easy", "--defrag"))

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def submit(self, name, topology, expected="2h"):
        ckpt = os.path.join(self.c.dir, "ckpt-" + name)
        os.makedirs(ckpt, exist_ok=True)
        code, body = self.c.request("POST", "/api/v1/jobs",
                                    job_7x(name, topology, [PYTHON, "-c", WORKER],
                                           ckpt_dir=ckpt, expected=expected))
        self.assertEqual(code, 201, body)

    def hosts(self, name):
        return [h for p in self.c.get_job(name)["status"]["placement"] for h in p["hosts"]]

    def log(self, name):
        return self.c.cli("logs", "job", name, "--worker", "0", check=False).stdout

    def test_a_4x4x4_waits_defrag_moves_the_cheapest_job_it_starts_and_the_job_resumes(self):
        c = self.c
        # Scatter: `fill` and `half` share cube 0 (tightest fit), `small` goes to cube 1; then
        # `fill` ends, leaving 80 free chips and no whole cube.
        self.submit("fill", "2x4x4")
        c.wait_phase("fill", ("Running",), timeout=30)
        self.submit("half", "2x4x4")
        c.wait_phase("half", ("Running",), timeout=30)
        self.submit("small", "2x2x4")
        c.wait_phase("small", ("Running",), timeout=30)
        self.assertEqual(cubes_of(self.hosts("fill") + self.hosts("half")), ["cube-000"])
        self.assertEqual(cubes_of(self.hosts("small")), ["cube-001"])
        small_before = set(self.hosts("small"))
        wait_for("small to checkpoint", lambda: os.path.exists(
            os.path.join(c.dir, "ckpt-small", "step")), timeout=30)
        c.cli("delete", "job", "fill")
        wait_for("fill gone", lambda: c.get_job("fill") is None, timeout=30)

        # The 4x4x4 needs a whole cube: defragmentation moves `small` (16 chips, the cheaper
        # of the two that could make room), not `half`.
        self.submit("cube", "4x4x4")
        wait_for("small to be moved", lambda: c.get_job("small")["status"]["preemptions"] == 1,
                 timeout=30)
        cube = c.get_job("cube")["status"]
        if cube["phase"] == "Pending":
            self.assertEqual(cube["reason"], "WaitingForDefragmentation", cube)
        self.assertEqual(c.wait_phase("cube", ("Running",), timeout=40), "Running")
        self.assertEqual(cubes_of(self.hosts("cube")), ["cube-001"])
        self.assertEqual(c.get_job("half")["status"]["preemptions"], 0)
        self.assertEqual(c.phase("half"), "Running")

        # `small` restarts toward the cube already in use, from its SIGTERM checkpoint.
        self.assertEqual(c.wait_phase("small", ("Running",), timeout=40), "Running")
        self.assertEqual(cubes_of(self.hosts("small")), ["cube-000"])
        self.assertFalse(small_before & set(self.hosts("small")))
        # (`tessera logs` shows the current attempt only: the SIGTERM step is in a file.)
        sigterm = os.path.join(c.dir, "ckpt-small", "step.sigterm")
        self.assertTrue(os.path.exists(sigterm), "small wrote no checkpoint on SIGTERM")
        with open(sigterm) as f:
            step = int(f.read())
        self.assertGreater(step, 0)
        wait_for("small to resume from step %d" % step,
                 lambda: "resume step %d" % step in self.log("small"), timeout=30)

        # Events and explain say what happened.
        code, events = c.request("GET", "/api/v1/events")
        self.assertEqual(code, 200)
        text = [(e.get("object", ""), e.get("reason", ""), e.get("message", ""))
                for e in events["items"]]
        self.assertTrue(any(o == "trainjob/small" and "moved by defragmentation" in m
                            for o, r, m in text), text)
        self.assertTrue(any(o == "trainjob/cube" and r == "WaitingForDefragmentation"
                            for o, r, m in text), text)
        self.assertTrue(any(o == "trainjob/small" and r == "Defragmented" for o, r, m in text), text)


if __name__ == "__main__":
    unittest.main()
