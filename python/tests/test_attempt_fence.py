"""Checkpoint-commit fencing (tessera/attempt_fence.py, docs/ha.md "Fencing"): an attempt older
than the newest one that has started in a checkpoint directory can never commit there."""

import multiprocessing
import os
import tempfile
import time
import unittest

from tessera import attempt_fence, checkpoint
from tessera.attempt_fence import StaleAttempt


def _zombie(directory, attempt, steps, started, out):
    """Saves steps with `attempt` until refused; reports the steps committed and the refusal."""
    committed = []
    started.set()
    for step in steps:
        try:
            checkpoint.save(directory, step, b"attempt-%d" % attempt, attempt=attempt)
        except StaleAttempt as e:
            out.put((committed, e.newest, step))
            return
        committed.append(step)
    out.put((committed, None, None))


class AttemptFenceTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self._tmp.name, "ckpt")

    def tearDown(self):
        self._tmp.cleanup()

    def test_outside_a_worker_nothing_is_fenced_or_written(self):
        self.assertIsNone(attempt_fence.begin_attempt(self.dir, env={}))
        checkpoint.save(self.dir, 1, b"x", attempt=None)  # no TESSERA_ATTEMPT in this process
        self.assertEqual(os.listdir(self.dir), ["ckpt-0000000001"])
        self.assertIsNone(attempt_fence.newest_attempt(self.dir))

    def test_an_older_attempt_is_refused_after_a_newer_one_began(self):
        checkpoint.save(self.dir, 10, b"a0", attempt=0)
        self.assertEqual(attempt_fence.newest_attempt(self.dir), 0)
        self.assertEqual(checkpoint.latest(self.dir, attempt=1)[0], 10)  # attempt 1 restores
        self.assertEqual(attempt_fence.newest_attempt(self.dir), 1)
        with self.assertRaises(StaleAttempt) as refused:
            checkpoint.save(self.dir, 20, b"zombie", attempt=0)
        self.assertEqual((refused.exception.attempt, refused.exception.newest), (0, 1))
        self.assertIn("attempt 1 has started", str(refused.exception))
        # Nothing of the refused write is left: no checkpoint, no temporary.
        self.assertEqual(sorted(n for n in os.listdir(self.dir) if not n.startswith(".tessera")),
                         ["ckpt-0000000010"])
        with self.assertRaises(StaleAttempt):
            checkpoint.latest(self.dir, attempt=0)  # nor may it claim the directory back
        checkpoint.save(self.dir, 20, b"a1", attempt=1)
        checkpoint.save(self.dir, 30, b"a2", attempt=2)  # a newer one simply moves it on
        self.assertEqual(attempt_fence.newest_attempt(self.dir), 2)

    def test_a_zombie_cannot_overwrite_the_same_step(self):
        checkpoint.save(self.dir, 40, b"new", attempt=3)
        with self.assertRaises(StaleAttempt):
            checkpoint.save(self.dir, 40, b"old", attempt=2)
        self.assertEqual(checkpoint.load(checkpoint.latest(self.dir, attempt=3)[1]), b"new")

    def test_a_zombie_cannot_prune_newer_checkpoints(self):
        for step in (10, 20):
            checkpoint.save(self.dir, step, b"a1", attempt=1)
        with self.assertRaises(StaleAttempt):
            checkpoint.save(self.dir, 30, b"a0", attempt=0, keep_last=1)
        self.assertEqual(sorted(n for n in os.listdir(self.dir) if n.startswith("ckpt-")),
                         ["ckpt-0000000010", "ckpt-0000000020"])

    def test_attempt_comes_from_the_environment(self):
        env = {"TESSERA_ATTEMPT": "4"}
        self.assertEqual(attempt_fence.begin_attempt(self.dir, env=env), 4)
        with self.assertRaisesRegex(ValueError, "TESSERA_ATTEMPT"):
            attempt_fence.attempt_from_env({"TESSERA_ATTEMPT": "four"})
        with self.assertRaisesRegex(ValueError, "TESSERA_ATTEMPT"):
            attempt_fence.attempt_from_env({"TESSERA_ATTEMPT": "-1"})
        with self.assertRaisesRegex(ValueError, "attempt must be"):
            checkpoint.save(self.dir, 1, b"x", attempt=-2)

    def test_a_later_job_over_the_same_directory_is_newer_than_every_attempt_before(self):
        old = {"TESSERA_JOB_UID": "3", "TESSERA_ATTEMPT": "5"}
        new = {"TESSERA_JOB_UID": "4", "TESSERA_ATTEMPT": "0"}
        self.assertEqual(attempt_fence.begin_attempt(self.dir, env=old), 5)
        self.assertEqual(attempt_fence.begin_attempt(self.dir, env=new), 0)  # takes over
        with self.assertRaises(StaleAttempt) as refused:
            attempt_fence.begin_attempt(self.dir, env=old)
        self.assertIn("of job uid 4", str(refused.exception))
        with self.assertRaisesRegex(ValueError, "TESSERA_JOB_UID"):
            attempt_fence.uid_from_env({"TESSERA_JOB_UID": "x"})

    def test_a_damaged_marker_is_reported_not_ignored(self):
        os.makedirs(self.dir)
        with open(os.path.join(self.dir, attempt_fence.ATTEMPT_FILE), "w") as f:
            f.write("garbage")
        with self.assertRaisesRegex(ValueError, r"\.tessera-attempt: not an attempt marker"):
            checkpoint.save(self.dir, 1, b"x", attempt=1)
        self.assertFalse(any(n.startswith("ckpt-") for n in os.listdir(self.dir)))

    def test_two_attempts_racing(self):
        # Attempt 0 saves as fast as it can in another process while attempt 1 begins. Once
        # begin_attempt(1) has returned, attempt 0 commits nothing more: every file it wrote
        # was already there, and its next save is refused.
        ctx = multiprocessing.get_context("fork")
        started, out = ctx.Event(), ctx.Queue()
        zombie = ctx.Process(target=_zombie,
                             args=(self.dir, 0, range(100000), started, out))
        zombie.start()
        try:
            self.assertTrue(started.wait(30))
            # Let it commit a few (polling the directory with a deadline).
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if os.path.isdir(self.dir) and len(
                        [n for n in os.listdir(self.dir) if n.startswith("ckpt-")]) >= 5:
                    break
                time.sleep(0.002)
            attempt_fence.begin_attempt(self.dir, 1)
            before = {n: checkpoint.load(os.path.join(self.dir, n))
                      for n in os.listdir(self.dir) if n.startswith("ckpt-")}
            committed, newest, refused_step = out.get(timeout=60)
        finally:
            zombie.join(60)
        self.assertEqual(newest, 1)  # it was refused, by attempt 1
        self.assertGreaterEqual(len(committed), 5)
        after = {n: checkpoint.load(os.path.join(self.dir, n))
                 for n in os.listdir(self.dir) if n.startswith("ckpt-")}
        self.assertEqual(after, before, "attempt 0 committed after attempt 1 began")
        self.assertNotIn(checkpoint.checkpoint_name(refused_step), after)
        # Attempt 1 writes on; its files are its own.
        checkpoint.save(self.dir, refused_step, b"attempt-1", attempt=1)
        self.assertEqual(checkpoint.load(checkpoint.latest(self.dir, attempt=1)[1]), b"attempt-1")

    def test_two_attempts_beginning_at_once_leave_the_newer(self):
        ctx = multiprocessing.get_context("fork")
        os.makedirs(self.dir)

        def begin_many(attempt):
            for _ in range(200):
                try:
                    attempt_fence.begin_attempt(self.dir, attempt)
                except StaleAttempt:
                    return

        procs = [ctx.Process(target=begin_many, args=(a,)) for a in (5, 6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        self.assertEqual(attempt_fence.newest_attempt(self.dir), 6)
        with self.assertRaises(StaleAttempt):
            attempt_fence.begin_attempt(self.dir, 5)


if __name__ == "__main__":
    unittest.main()
