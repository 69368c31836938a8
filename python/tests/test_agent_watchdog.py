"""The worker's fence watchdog (tessera/agent_watchdog.py): a worker whose agent has not
reached a head for the fence time exits, also when the agent is frozen and writes nothing."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from tessera import agent_watchdog

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FakeClock:
    def __init__(self, now_ms):
        self.now_ms = now_ms

    def __call__(self):
        return self.now_ms


class WatchdogTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.path = os.path.join(self._tmp.name, "contact")

    def write(self, contact_ms):
        with open(self.path, "w") as f:
            f.write("%d\n" % contact_ms)

    def test_fenced_once_the_contact_is_fence_old(self):
        clock, calls = FakeClock(10_000), []
        dog = agent_watchdog.Watchdog(self.path, 3000, clock=clock,
                                      on_fenced=lambda s, f: calls.append((s, f)))
        self.write(10_000)
        self.assertFalse(dog.check())
        clock.now_ms = 12_999
        self.assertFalse(dog.check())
        self.write(12_500)  # the agent reached the head again: the fence starts over
        clock.now_ms = 15_000
        self.assertFalse(dog.check())
        clock.now_ms = 15_500
        self.assertTrue(dog.check())
        self.assertEqual(calls, [(3000, 3000)])
        self.assertTrue(dog.check())  # stays fenced, and is told only once
        self.assertEqual(len(calls), 1)

    def test_a_missing_file_counts_from_the_last_contact_seen(self):
        clock, calls = FakeClock(0), []
        dog = agent_watchdog.Watchdog(self.path, 1000, clock=clock,
                                      on_fenced=lambda s, f: calls.append(s))
        clock.now_ms = 50_000
        self.assertFalse(dog.check())  # never seen: nothing to count from
        self.write(50_000)
        self.assertFalse(dog.check())
        os.unlink(self.path)
        clock.now_ms = 51_000
        self.assertTrue(dog.check())
        with open(self.path, "w") as f:
            f.write("not a number")
        self.assertIsNone(agent_watchdog.read_contact_ms(self.path))

    def test_bad_settings_name_the_variable(self):
        with self.assertRaisesRegex(ValueError, "TESSERA_FENCE_MS"):
            agent_watchdog.start_from_env({agent_watchdog.CONTACT_FILE_VAR: self.path,
                                           agent_watchdog.FENCE_MS_VAR: "soon"})
        with self.assertRaisesRegex(ValueError, "TESSERA_FENCE_MS"):
            agent_watchdog.Watchdog(self.path, 0)
        self.assertIsNone(agent_watchdog.start_from_env({}))  # not under an agent: no watchdog

    def test_a_worker_whose_agent_is_silent_kills_its_process_group(self):
        # A real worker process, leader of its own group (as the agent starts it), with a
        # child: once the contact file goes stale both are gone, the leader by SIGKILL.
        self.write(int(time.monotonic() * 1000))
        child_pid_file = os.path.join(self._tmp.name, "child.pid")
        script = textwrap.dedent("""
            import os, subprocess, sys, time
            from tessera import worker
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            with open(sys.argv[1], "w") as f:
                f.write(str(child.pid))
            worker.report_progress(1)  # starts the watchdog
            time.sleep(600)
        """)
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR,
                   TESSERA_PROGRESS_FILE=os.path.join(self._tmp.name, "progress.jsonl"),
                   TESSERA_AGENT_CONTACT_FILE=self.path, TESSERA_FENCE_MS="1000")
        proc = subprocess.Popen([sys.executable, "-c", script, child_pid_file], env=env,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        self.assertEqual(proc.returncode, -signal.SIGKILL, err)
        self.assertIn(b"tessera: fenced", err)
        with open(child_pid_file) as f:
            child = int(f.read())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
        else:
            self.fail("the worker's child survived the fence")


if __name__ == "__main__":
    unittest.main()
