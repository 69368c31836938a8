"""Runs examples/train/train.py for real: local gloo process groups, checkpoints, resume,
SIGTERM preemption and a restart at a smaller world size."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO, "examples", "train", "train.py")
NUM_SAMPLES = 512  # train.py's dataset size
DEADLINE_S = 60


def python_with_torch():
    """The interpreter to run train.py with: this one if it has torch, else Debian's."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
    for candidate in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if candidate and os.path.exists(candidate):
            if subprocess.run([candidate, "-c", probe]).returncode == 0:
                return candidate
    return None


PYTHON = python_with_torch()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipIf(PYTHON is None, "no Python interpreter with torch (Debian's python3-torch)")
class TrainExampleTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.ckpt_dir = os.path.join(self.dir, "ckpt")
        self.progress = os.path.join(self.dir, "progress.jsonl")
        self.trace = os.path.join(self.dir, "trace.jsonl")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            for f in (p.stdout, p.stderr):
                f.close()
        self._tmp.cleanup()

    def start(self, world, attempt, **extra_env):
        port = str(free_port())
        procs = []
        for rank in range(world):
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("TESSERA_", "RANK", "WORLD_SIZE", "MASTER_"))}
            env.update(
                PYTHONPATH=os.path.join(REPO, "python"), RANK=str(rank), WORLD_SIZE=str(world),
                LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                TESSERA_JOB="train-test", TESSERA_ATTEMPT=str(attempt),
                TESSERA_CHECKPOINT_DIR=self.ckpt_dir, TESSERA_PROGRESS_FILE=self.progress,
                TRAIN_TRACE_FILE=self.trace, DIST_TIMEOUT_SECONDS="30", CKPT_EVERY="10",
            )
            env.update(extra_env)
            procs.append(subprocess.Popen([PYTHON, TRAIN], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        self.procs.extend(procs)
        return procs

    def finish(self, procs):
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=DEADLINE_S)
            outs.append((p.returncode, out, err))
        return outs

    def run_group(self, world, attempt, **extra_env):
        outs = self.finish(self.start(world, attempt, **extra_env))
        for rank, (code, out, err) in enumerate(outs):
            self.assertEqual(code, 0, f"rank {rank} exited {code}\nstdout:\n{out}\nstderr:\n{err}")
        return outs[0][1]  # rank 0's stdout

    def records(self, path):
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f]

    def progress_steps(self, kind, rank, attempt):
        return [r["step"] for r in self.records(self.progress)
                if r["type"] == kind and r["rank"] == rank and r["attempt"] == attempt]

    def printed_steps(self, out):
        return [int(m) for m in re.findall(r"^step (\d+) loss \d+\.\d+$", out, re.M)]

    def assert_exactly_once(self):
        """Within each epoch no dataset index was handed out twice, over all ranks and
        attempts; every epoch before the last one seen was covered completely."""
        by_epoch = {}
        for r in self.records(self.trace):
            by_epoch.setdefault(r["epoch"], []).extend(r["indices"])
        for epoch, indices in by_epoch.items():
            self.assertEqual(len(indices), len(set(indices)), f"duplicates in epoch {epoch}")
            if epoch < max(by_epoch):
                self.assertEqual(sorted(indices), list(range(NUM_SAMPLES)), f"epoch {epoch}")

    def test_two_ranks_finish_then_resume_from_the_checkpoint(self):
        out = self.run_group(world=2, attempt=0, STEPS="20")
        self.assertEqual(self.printed_steps(out), list(range(1, 21)))
        self.assertRegex(out.splitlines()[-1], r"^RESULT ok loss=\d+\.\d+ steps=20 world=2$")
        for rank in (0, 1):
            self.assertEqual(self.progress_steps("progress", rank, 0), list(range(1, 21)))
        self.assertEqual(self.progress_steps("checkpoint", 0, 0), [10, 20])
        # (Besides the checkpoints: the attempt marker and lock of the commit fence.)
        self.assertEqual(sorted(n for n in os.listdir(self.ckpt_dir) if n.startswith("ckpt-")),
                         ["ckpt-0000000010", "ckpt-0000000020"])
        for rank in (0, 1):
            self.assertEqual(self.progress_steps("restore", rank, 0), [0])  # from scratch

        out = self.run_group(world=2, attempt=1, STEPS="40")
        self.assertIn("resume step 20 from", out)
        self.assertEqual(self.printed_steps(out), list(range(21, 41)))
        self.assertRegex(out.splitlines()[-1], r"^RESULT ok loss=\d+\.\d+ steps=40 world=2$")
        for rank in (0, 1):
            self.assertEqual(self.progress_steps("progress", rank, 1), list(range(21, 41)))
        self.assertEqual(self.progress_steps("checkpoint", 0, 1), [30, 40])
        for rank in (0, 1):
            self.assertEqual(self.progress_steps("restore", rank, 1), [20])
        # The restore line comes before the attempt's first step, on every rank.
        kinds = [(r["type"], r["step"]) for r in self.records(self.progress)
                 if r["attempt"] == 1 and r["rank"] == 1]
        self.assertEqual(kinds[:2], [("restore", 20), ("progress", 21)])
        self.assertEqual(len([n for n in os.listdir(self.ckpt_dir) if n.startswith("ckpt-")]),
                         3)  # KEEP_CHECKPOINTS default
        self.assert_exactly_once()

    def test_sigterm_checkpoints_and_a_smaller_group_resumes(self):
        procs = self.start(world=2, attempt=0, STEPS="1000000", CKPT_EVERY="7")
        deadline = time.monotonic() + DEADLINE_S
        while max(self.progress_steps("progress", 1, 0), default=0) < 5:
            self.assertTrue(all(p.poll() is None for p in procs), "a rank exited early")
            self.assertLess(time.monotonic(), deadline, "no progress before the deadline")
            time.sleep(0.01)  # polling interval, not a wait for an event
        procs[1].send_signal(signal.SIGTERM)  # one rank preempted: the group must agree
        outs = self.finish(procs)
        for rank, (code, out, err) in enumerate(outs):
            self.assertEqual(code, 128 + signal.SIGTERM, f"rank {rank}\n{out}\n{err}")
        match = re.search(r"^PREEMPTED step=(\d+)$", outs[0][1], re.M)
        self.assertIsNotNone(match, outs[0][1])
        stopped = int(match.group(1))
        self.assertEqual(self.progress_steps("checkpoint", 0, 0)[-1], stopped)
        self.assertIn(f"ckpt-{stopped:010d}", os.listdir(self.ckpt_dir))
        for rank in (0, 1):
            self.assertEqual(self.progress_steps("progress", rank, 0), list(range(1, stopped + 1)))

        # World 2 -> 1: the single rank takes whole global batches from the same offset.
        out = self.run_group(world=1, attempt=1, STEPS=str(stopped + 40))
        self.assertEqual(self.progress_steps("restore", 0, 1), [stopped])
        self.assertIn(f"resume step {stopped} from", out)
        self.assertIn("(saved at world 2, now 1)", out)
        self.assertEqual(self.printed_steps(out), list(range(stopped + 1, stopped + 41)))
        self.assertRegex(out.splitlines()[-1],
                         rf"^RESULT ok loss=\d+\.\d+ steps={stopped + 40} world=1$")
        self.assert_exactly_once()

    def test_sigterm_while_a_peer_is_stopped_exits_without_a_checkpoint(self):
        # Rank 1 is frozen (a hang): rank 0 blocks in the next all-reduce and cannot vote. On
        # SIGTERM it must still exit promptly (STOP_TIMEOUT_SECONDS), not wait for SIGKILL.
        procs = self.start(world=2, attempt=0, STEPS="1000000", CKPT_EVERY="5",
                           STEP_MS="20", STOP_TIMEOUT_SECONDS="1", DIST_TIMEOUT_SECONDS="600")
        deadline = time.monotonic() + DEADLINE_S
        while max(self.progress_steps("progress", 1, 0), default=0) < 6:
            self.assertTrue(all(p.poll() is None for p in procs), "a rank exited early")
            self.assertLess(time.monotonic(), deadline, "no progress before the deadline")
            time.sleep(0.01)  # polling interval, not a wait for an event
        procs[1].send_signal(signal.SIGSTOP)
        try:
            # Wait until rank 0 is blocked: its step count stops moving past rank 1's.
            frozen_at = max(self.progress_steps("progress", 1, 0))
            while max(self.progress_steps("progress", 0, 0)) < frozen_at:
                self.assertLess(time.monotonic(), deadline, "rank 0 did not catch up")
                time.sleep(0.01)
            procs[0].send_signal(signal.SIGTERM)
            out, err = procs[0].communicate(timeout=DEADLINE_S)
            self.assertEqual(procs[0].returncode, 128 + signal.SIGTERM, f"{out}\n{err}")
            self.assertIn("the group is stuck", err)
            self.assertNotIn("PREEMPTED", out)
            checkpoints = self.progress_steps("checkpoint", 0, 0)
            self.assertTrue(checkpoints and all(c % 5 == 0 for c in checkpoints), checkpoints)
        finally:
            procs[1].send_signal(signal.SIGCONT)
            procs[1].kill()


if __name__ == "__main__":
    unittest.main()
