import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

from tessera import worker


class ContextTest(unittest.TestCase):
    def test_nothing_set_is_a_single_local_process(self):
        ctx = worker.context({})
        self.assertEqual(ctx, worker.WorkerContext())
        self.assertEqual((ctx.rank, ctx.world_size, ctx.attempt), (0, 1, 0))
        self.assertTrue(ctx.is_chief)
        self.assertIsNone(ctx.checkpoint_dir)

    def test_reads_every_field(self):
        env = {
            "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.2",
            "MASTER_PORT": "1234", "MEGASCALE_SLICE_ID": "1", "MEGASCALE_NUM_SLICES": "2",
            "TPU_WORKER_ID": "3", "TESSERA_ATTEMPT": "2", "TESSERA_JOB": "train-demo",
            "TESSERA_CHECKPOINT_DIR": "/ckpt",
        }
        ctx = worker.context(env)
        self.assertEqual(
            ctx,
            worker.WorkerContext(
                rank=5, world_size=8, local_rank=1, slice_id=1, num_slices=2, worker_id=3,
                attempt=2, job="train-demo", checkpoint_dir="/ckpt", master_addr="10.0.0.2",
                master_port=1234,
            ),
        )
        self.assertFalse(ctx.is_chief)
        with self.assertRaises(Exception):
            ctx.rank = 0  # frozen

    def test_defaults_to_os_environ(self):
        with mock.patch.dict(os.environ, {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h",
                                          "MASTER_PORT": "5"}):
            self.assertEqual(worker.context().rank, 1)

    def assertEnvError(self, env, variable, fragment):
        with self.assertRaises(worker.EnvError) as cm:
            worker.context(env)
        self.assertEqual(cm.exception.variable, variable)
        self.assertIn(variable, str(cm.exception))
        self.assertIn(fragment, str(cm.exception))

    def test_errors_name_the_variable(self):
        full = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
        self.assertEnvError({**full, "RANK": "zero"}, "RANK", "integer")
        self.assertEnvError({**full, "WORLD_SIZE": "2.0"}, "WORLD_SIZE", "integer")
        self.assertEnvError({**full, "WORLD_SIZE": "0"}, "WORLD_SIZE", ">= 1")
        self.assertEnvError({**full, "RANK": "2"}, "RANK", "< WORLD_SIZE")
        self.assertEnvError({**full, "RANK": "-1"}, "RANK", ">= 0")
        self.assertEnvError({"RANK": "0"}, "WORLD_SIZE", "required when RANK")
        self.assertEnvError({"WORLD_SIZE": "1"}, "RANK", "required when WORLD_SIZE")
        del full["MASTER_PORT"]
        self.assertEnvError(full, "MASTER_PORT", "required when WORLD_SIZE > 1")
        self.assertEnvError({**full, "MASTER_PORT": "70000"}, "MASTER_PORT", "TCP port")
        self.assertEnvError({"TESSERA_ATTEMPT": "x"}, "TESSERA_ATTEMPT", "integer")
        self.assertEnvError({"TPU_WORKER_ID": "-3"}, "TPU_WORKER_ID", ">= 0")
        self.assertEnvError({"MEGASCALE_SLICE_ID": "2", "MEGASCALE_NUM_SLICES": "2"},
                            "MEGASCALE_SLICE_ID", "< MEGASCALE_NUM_SLICES")
        self.assertEnvError({"MEGASCALE_NUM_SLICES": "2"}, "MEGASCALE_SLICE_ID", "required")

    def test_torchrun_environment(self):
        # What torchrun (torch 1.13) sets for local rank 1 of 2 on the second agent, after two
        # restarts; nothing of tessera's.
        env = {
            "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "3", "ROLE_WORLD_SIZE": "4",
            "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "40123",
            "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "3",
            "TORCHELASTIC_RUN_ID": "bench-kill-1", "TORCHELASTIC_USE_AGENT_STORE": "True",
            "NCCL_ASYNC_ERROR_HANDLING": "1", "OMP_NUM_THREADS": "1",
        }
        ctx = worker.context(env)
        self.assertEqual(
            ctx,
            worker.WorkerContext(rank=3, world_size=4, local_rank=1, attempt=2,
                                 job="bench-kill-1", master_addr="127.0.0.1", master_port=40123),
        )
        # The checkpoint directory and progress file come from tessera's variables under either
        # launcher, so the same script checkpoints and reports the same way.
        ctx = worker.context({**env, "TESSERA_CHECKPOINT_DIR": "/ckpt"})
        self.assertEqual(ctx.checkpoint_dir, "/ckpt")

    def test_tessera_variables_win_over_torchrun(self):
        env = {"TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_RUN_ID": "x",
               "TESSERA_ATTEMPT": "5", "TESSERA_JOB": "train"}
        ctx = worker.context(env)
        self.assertEqual((ctx.attempt, ctx.job), (5, "train"))
        ctx = worker.context({**env, "TESSERA_ATTEMPT": "", "TESSERA_JOB": ""})
        self.assertEqual((ctx.attempt, ctx.job), (2, "x"))
        self.assertEnvError({"TORCHELASTIC_RESTART_COUNT": "two"}, "TORCHELASTIC_RESTART_COUNT",
                            "integer")
        self.assertEnvError({"TORCHELASTIC_RESTART_COUNT": "2", "TESSERA_ATTEMPT": "-1"},
                            "TESSERA_ATTEMPT", ">= 0")

    def test_empty_values_count_as_unset(self):
        self.assertEqual(worker.context({"RANK": "", "WORLD_SIZE": " ", "TESSERA_JOB": ""}),
                         worker.WorkerContext())


class ProgressTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "progress.jsonl")
        self.env = {"TESSERA_PROGRESS_FILE": self.path, "RANK": "1", "WORLD_SIZE": "2",
                    "MASTER_ADDR": "h", "MASTER_PORT": "1", "TESSERA_ATTEMPT": "3"}

    def tearDown(self):
        self.dir.cleanup()

    def lines(self):
        with open(self.path) as f:
            return [json.loads(line) for line in f]

    def test_unset_is_a_no_op(self):
        self.assertFalse(worker.report_progress(1, env={}))
        self.assertFalse(worker.report_checkpoint(1, 0.5, env={"TESSERA_PROGRESS_FILE": ""}))
        self.assertFalse(worker.report_restore(1, 0.5, env={}))

    def test_writes_one_json_line_per_report(self):
        self.assertTrue(worker.report_progress(0, env=self.env))
        self.assertTrue(worker.report_progress(7, env=self.env))
        self.assertTrue(worker.report_checkpoint(7, 1.25, env=self.env))
        got = self.lines()
        self.assertEqual([list(r) for r in got],
                         [["type", "step", "rank", "attempt", "time"]] * 2
                         + [["type", "step", "seconds", "rank", "attempt", "time"]])
        self.assertEqual([(r["type"], r["step"], r["rank"], r["attempt"]) for r in got],
                         [("progress", 0, 1, 3), ("progress", 7, 1, 3), ("checkpoint", 7, 1, 3)])
        self.assertEqual(got[2]["seconds"], 1.25)
        self.assertIsInstance(got[0]["time"], float)

    def test_restore_line(self):
        self.assertTrue(worker.report_restore(30, 0.75, env=self.env))
        self.assertTrue(worker.report_restore(0, 0, env=self.env))  # started from scratch
        got = self.lines()
        self.assertEqual([list(r) for r in got],
                         [["type", "step", "seconds", "rank", "attempt", "time"]] * 2)
        self.assertEqual([(r["type"], r["step"], r["seconds"], r["rank"], r["attempt"])
                          for r in got], [("restore", 30, 0.75, 1, 3), ("restore", 0, 0.0, 1, 3)])
        self.assertIsInstance(got[1]["seconds"], float)

    def test_torchrun_attempt_in_reports(self):
        env = {"TESSERA_PROGRESS_FILE": self.path, "RANK": "0", "WORLD_SIZE": "2",
               "MASTER_ADDR": "h", "MASTER_PORT": "1", "TORCHELASTIC_RESTART_COUNT": "4"}
        worker.report_restore(20, 0.1, env=env)
        worker.report_progress(21, env=env)
        self.assertEqual([(r["type"], r["attempt"]) for r in self.lines()],
                         [("restore", 4), ("progress", 4)])

    def test_rejects_bad_steps_and_seconds(self):
        for bad in (-1, 1.0, "3", True, None):
            with self.assertRaises((TypeError, ValueError), msg=repr(bad)):
                worker.report_progress(bad, env=self.env)
        for bad in (-0.1, float("nan"), float("inf"), "1", True):
            with self.assertRaises((TypeError, ValueError), msg=repr(bad)):
                worker.report_checkpoint(1, bad, env=self.env)
            with self.assertRaises((TypeError, ValueError), msg=repr(bad)):
                worker.report_restore(1, bad, env=self.env)
        for bad in (-1, 1.0, None):
            with self.assertRaises((TypeError, ValueError), msg=repr(bad)):
                worker.report_restore(bad, 0.1, env=self.env)
        self.assertFalse(os.path.exists(self.path))

    def test_concurrent_writers_never_interleave(self):
        def write(rank):
            env = {**self.env, "RANK": str(rank)}
            for step in range(300):
                worker.report_progress(step, env=env)

        threads = [threading.Thread(target=write, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = self.lines()  # json.loads fails on any torn line
        self.assertEqual(len(got), 600)
        for rank in range(2):
            self.assertEqual([r["step"] for r in got if r["rank"] == rank], list(range(300)))


# A worker that reports one step, then blocks in a GIL-releasing call as a rank waiting in a
# collective would.
_WAITING_WORKER = """
import sys, time
from tessera import worker
worker.report_progress(3)
print("reported", flush=True)
time.sleep(float(sys.argv[1]))
"""


class LivenessTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "progress.jsonl")

    def tearDown(self):
        self.dir.cleanup()

    def run_worker(self, interval_ms, block_s):
        env = {**os.environ, "TESSERA_PROGRESS_FILE": self.path, "RANK": "2",
               "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1",
               "TESSERA_ALIVE_INTERVAL_MS": str(interval_ms),
               "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(worker.__file__)))}
        return subprocess.Popen([sys.executable, "-c", _WAITING_WORKER, str(block_s)], env=env,
                                stdout=subprocess.DEVNULL)

    def records(self, kind):
        if not os.path.exists(self.path):  # the worker has not reported yet
            return []
        with open(self.path) as f:
            return [r for r in map(json.loads, f) if r["type"] == kind]

    def test_ticks_continue_while_the_main_thread_waits(self):
        child = self.run_worker(interval_ms=20, block_s=60)
        try:
            deadline = time.monotonic() + 30
            while len(self.records("alive")) < 3:
                self.assertLess(time.monotonic(), deadline, "no liveness ticks")
                time.sleep(0.02)
        finally:
            child.kill()
            child.wait()
        ticks = self.records("alive")
        self.assertTrue(all(t["step"] == 3 and t["rank"] == 2 for t in ticks), ticks)

    def test_zero_turns_ticks_off(self):
        # The worker blocks for 25 tick intervals of the other test, then exits by itself.
        child = self.run_worker(interval_ms=0, block_s=0.5)
        self.assertEqual(child.wait(timeout=30), 0)
        self.assertEqual(len(self.records("progress")), 1)
        self.assertEqual(self.records("alive"), [])


if __name__ == "__main__":
    unittest.main()
