"""Fencing on a live local cluster (docs/ha.md "Fencing"): a frozen agent's training worker
stops by itself, the head waits the fence time before it starts the replacement elsewhere, and
the agent, once resumed, refuses what is left of the stale attempt.

Real processes are needed: a SIGSTOPped agent, a worker's SDK watchdog reading the agent's
contact file on CLOCK_MONOTONIC, and the head's lease and fence timers on one machine's clock
cannot be faked in one process. Two v6e 2x4 slices (one host each), heartbeats every 200 ms, a
2 s lease and a 3 s fence; the whole test takes about 15 s.

The job's worker is a shell (the process group leader, standing for any process that does not
use the SDK) running a Python child that does: it reports progress, which starts the SDK's
watchdog. While the agent is frozen the Python child exits on its own once the agent's last
contact is a fence time old; the shell, which only the agent can stop, is stopped by the agent
as soon as it is resumed, before it does anything else, and the head hears of the refusal.
"""
import json
import os
import signal
import tempfile
import time
import unittest

from test_cluster import PYTHON, REPO, Cluster, alive, read_pid, wait_for
from test_elastic import agent_pid

FENCE_MS = 3000
MARGIN_MS = 1000  # the head's fence margin (ControllerOptions::fence_margin_ms)

SDK_WORKER = """
import os, sys, time
from tessera import worker
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
step = 0
while True:
    worker.report_progress(step)  # the first call starts the fence watchdog
    step += 1
    time.sleep(0.1)
"""


class FencingTest(unittest.TestCase):
    def setUp(self):
        # In network namespaces where they can be made (docs/netns.md).
        self.c = Cluster(netns=True)
        self.addCleanup(self.c.down)
        self.c.cli("up", "--generation", "v6e", "--topology", "2x4", "--slices", "2",
                   "--heartbeat-ms", "200", "--lease-ms", "2000", "--fence-ms", str(FENCE_MS),
                   "--timeout", "120", *self.c.up_flags())
        with open(os.path.join(self.c.state, "admin.token")) as f:
            self.c.token = f.read().strip()
        self.c.reload_port()
        self.tmp = tempfile.mkdtemp(prefix="fencing-", dir=self.c.dir)
        self.script = os.path.join(self.tmp, "sdk_worker.py")
        with open(self.script, "w") as f:
            f.write(SDK_WORKER)
        self.frozen = []
        self.addCleanup(lambda: [os.kill(p, signal.SIGCONT) for p in self.frozen])

    def events(self, reason):
        return [e for e in self.c.request("GET", "/api/v1/events")[1]["items"]
                if e.get("reason") == reason]

    def test_a_frozen_agent_is_fenced_and_the_replacement_waits_for_it(self):
        shell = ('%s %s "%s/sdk-$TESSERA_ATTEMPT.pid" & echo $$ > "%s/sh-$TESSERA_ATTEMPT.pid"; '
                 'while :; do sleep 1; done' % (PYTHON, self.script, self.tmp, self.tmp))
        doc = {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "fenced"},
               "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 1,
                        # pause: the replacement takes the other free slice at full size.
                        "failurePolicy": {"maxFailures": 2, "onHostLoss": "pause"},
                        "template": {"command": ["/bin/sh", "-c", shell],
                                     "env": {"PYTHONPATH": os.path.join(REPO, "python")},
                                     "workingDir": REPO}}}
        code, body = self.c.request("POST", "/api/v1/jobs", doc)
        self.assertEqual(code, 201, body)
        st = wait_for("attempt 0 running and reporting", lambda: (
            self.c.get_job("fenced")["status"]["phase"] == "Running" and
            self.c.get_job("fenced")["status"]["lastStep"] >= 3 and
            self.c.get_job("fenced")["status"]), timeout=60)
        host = st["workers"][0]["host"]
        sdk = wait_for("the SDK worker's pid", lambda: read_pid(self.tmp + "/sdk-0.pid"))
        sh = wait_for("the shell's pid", lambda: read_pid(self.tmp + "/sh-0.pid"))
        agent = agent_pid(self.c, host)

        os.kill(agent, signal.SIGSTOP)
        self.frozen.append(agent)
        frozen_at = time.time()
        # Poll the worker and the job together: the worker must be gone before the replacement
        # is placed, and the job says what it waits for meanwhile.
        sdk_gone = placed = None
        said_fence = ""
        deadline = time.time() + 60
        while time.time() < deadline and placed is None:
            if sdk_gone is None and not alive(sdk):
                sdk_gone = time.time()
            status = self.c.get_job("fenced")["status"]
            if not said_fence and "to fence its workers" in status.get("message", ""):
                said_fence = self.c.cli("describe", "job", "fenced").stdout
            if status["attempt"] >= 1:
                placed = time.time()
                st = status
            time.sleep(0.02)
        self.assertIsNotNone(placed, "no replacement attempt within 60 s: %s" % json.dumps(
            {k: status.get(k) for k in ("phase", "message", "attempt", "attempts")}))
        self.assertIsNotNone(sdk_gone, "the SDK worker of the frozen host was still alive when "
                                       "the replacement was placed")
        self.assertLessEqual(sdk_gone, placed)
        # The SDK waited for the fence time too (the agent's last contact was at most a
        # heartbeat before the freeze).
        self.assertGreaterEqual(sdk_gone - frozen_at, (FENCE_MS - 400) / 1000.0)
        self.assertTrue(alive(sh), "the shell is the agent's to stop, and the agent is frozen")
        # The head waited the fence time (plus its margin) since it last heard of the host.
        first, second = st["attempts"][0], st["attempts"][1]
        self.assertEqual(first["endReason"], "HostLost")
        self.assertGreaterEqual(second["placedMs"] - first["failureMs"], FENCE_MS + MARGIN_MS)
        self.assertNotEqual(st["workers"][0]["host"], host)
        self.assertIn("fence", said_fence)
        self.assertTrue(self.events("WaitingForFence"))

        # Resumed, the agent fences first: the stale attempt's shell is stopped and refused,
        # and the head hears of it.
        os.kill(agent, signal.SIGCONT)
        self.frozen.remove(agent)
        wait_for("the stale shell stopped", lambda: not alive(sh), timeout=20)
        refused = wait_for("the refusal at the head", lambda: [
            e for e in self.events("AssignmentRefused")
            if e.get("object") == "host/" + host and "attempt 0" in e.get("message", "")],
            timeout=20)
        self.assertIn("fenced", refused[0]["message"])
        with open(os.path.join(self.c.state, "logs", "agent-%s.log" % host)) as f:
            log = f.read()
        self.assertIn("agent.fenced", log)
        self.assertIn("agent.refused", log)
        wait_for("the host back", lambda: [
            h for h in self.c.request("GET", "/api/v1/hosts")[1]["items"]
            if h["metadata"]["name"] == host and h["status"]["state"] == "Ready"], timeout=20)
        # Attempt 1 runs on, untouched (it may still be starting on a busy machine); attempt 0
        # was never started again.
        st = wait_for("attempt 1 running", lambda: (
            self.c.get_job("fenced")["status"]["phase"] == "Running" and
            self.c.get_job("fenced")["status"]), timeout=60)
        self.assertEqual(st["attempt"], 1)


if __name__ == "__main__":
    unittest.main()
