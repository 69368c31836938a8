"""In-memory peer checkpoints on a live local cluster (docs/elastic.md "In-memory peer
checkpoints"): a kill -9 of one worker, then the loss of a whole host's memory (its worker and
its keeper killed), each cost at most one step, where the disk checkpoint (every 50 steps here)
would cost up to 50.

Real processes are needed: the point is that a keeper started by a worker outlives that worker
and the agent's kill of its process group, that the head passes spec.checkpoint.inMemory down
to the workers of every attempt, and that the restarted group finds the copies of the dead
host's rank on the other host's keeper over TCP. Two v6e 2x4 slices (one host each, rank 0 and
rank 1); the job is examples/train/plain_loop.py (no torch: each start is a plain Python
process), 50 ms steps. About 15 s.
"""
import json
import os
import signal
import sys
import tempfile
import unittest

from test_cluster import LEASE_MS, PYTHON, REPO, Cluster, alive, heartbeat_ms, wait_for

sys_path = os.path.join(REPO, "python")


def read_trace(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # being written
    except FileNotFoundError:
        pass
    return out


class PeerCheckpointTest(unittest.TestCase):
    def setUp(self):
        # In network namespaces where they can be made: the snapshots go between hosts at their
        # own addresses (docs/netns.md).
        self.c = Cluster(netns=True)
        self.addCleanup(self.c.down)
        self.c.cli("up", "--generation", "v6e", "--topology", "2x4", "--slices", "2",
                   "--heartbeat-ms", heartbeat_ms(), "--lease-ms", str(LEASE_MS), "--timeout", "120",
                   *self.c.up_flags())
        with open(os.path.join(self.c.state, "admin.token")) as f:
            self.c.token = f.read().strip()
        self.c.reload_port()
        self.tmp = tempfile.mkdtemp(prefix="peer-ckpt-", dir=self.c.dir)
        self.ckpt = os.path.join(self.tmp, "ckpt")
        self.trace = os.path.join(self.tmp, "trace.jsonl")
        self.addCleanup(self.kill_keepers)

    def keeper(self, host):
        path = os.path.join(self.ckpt, ".tessera-peer", "keepers", host)
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def kill_keepers(self):
        # The job first: a running worker would start its host's keeper again.
        try:
            self.c.client.delete("job", "mem")
        except Exception:
            pass
        wait_for("the job deleted", lambda: self.c.get_job("mem") is None, timeout=60)
        keepers = os.path.join(self.ckpt, ".tessera-peer", "keepers")
        for name in os.listdir(keepers) if os.path.isdir(keepers) else []:
            doc = self.keeper(name)
            if doc and alive(doc["pid"]):
                os.kill(doc["pid"], signal.SIGKILL)

    def restored(self, attempt):
        """{rank: restore line} of `attempt` once both ranks restored."""
        got = {r["rank"]: r for r in read_trace(self.trace)
               if r["type"] == "restore" and r["attempt"] == attempt}
        return got if len(got) == 2 else None

    def last_step(self, attempt):
        return max((r["step"] for r in read_trace(self.trace)
                    if r["type"] == "step" and r["attempt"] == attempt), default=0)

    def worker(self, rank):
        st = self.c.get_job("mem")["status"]
        return next(w for w in st["workers"] if w["rank"] == rank)

    def kill_and_recover(self, attempt, also_keeper):
        start = (self.restored(attempt) or {0: {"step": 0}})[0]["step"]
        wait_for("attempt %d at step %d" % (attempt, start + 15),
                 lambda: self.last_step(attempt) >= start + 15, timeout=60)
        w = wait_for("rank 1's worker of attempt %d" % attempt, lambda: (
            self.c.get_job("mem")["status"]["attempt"] == attempt and
            self.worker(1).get("pid", 0) > 0 and self.worker(1)), timeout=30)
        keeper = self.keeper(w["host"])
        self.assertIsNotNone(keeper, "rank 1's host has no keeper registered")
        os.kill(w["pid"], signal.SIGKILL)
        if also_keeper:  # the host's memory is gone: its worker and its keeper
            os.kill(keeper["pid"], signal.SIGKILL)
        got = wait_for("attempt %d's restore" % (attempt + 1),
                       lambda: self.restored(attempt + 1), timeout=60)
        lost = self.last_step(attempt) - got[0]["step"]
        print("\n%s: attempt %d's last step %d, resumed from %d (%s)" % (
            "host loss" if also_keeper else "kill -9", attempt, self.last_step(attempt),
            got[0]["step"], got[1]["source"]), file=sys.stderr)
        return w, got, lost

    def test_kill_9_and_host_loss_lose_at_most_one_step(self):
        doc = {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "mem"},
               "spec": {"accelerator": "v6e", "topology": "2x4", "slices": 2,
                        "failurePolicy": {"maxFailures": 3},
                        "checkpoint": {"dir": self.ckpt,
                                       "inMemory": {"everySteps": 1, "peerCopies": 1,
                                                    "maxBytesPerHost": "16Mi"}},
                        "template": {"command": [PYTHON, "examples/train/plain_loop.py"],
                                     "env": {"PYTHONPATH": sys_path, "STEPS": "100000",
                                             "STEP_MS": "50", "CKPT_EVERY": "50",
                                             "TRACE_FILE": self.trace},
                                     "workingDir": REPO}}}
        code, body = self.c.request("POST", "/api/v1/jobs", doc)
        self.assertEqual(code, 201, body)

        w, got, lost = self.kill_and_recover(0, also_keeper=False)
        self.assertEqual({r["source"] for r in got.values()}, {"memory"}, got)
        self.assertLessEqual(lost, 1, "kill -9 of one worker lost %d steps: %s" % (lost, got))

        # Host loss: rank 1's copies come from rank 0's host (the next slice's keeper).
        w, got, lost = self.kill_and_recover(1, also_keeper=True)
        self.assertEqual({r["source"] for r in got.values()}, {"memory"}, got)
        self.assertLessEqual(lost, 1, "host loss lost %d steps: %s" % (lost, got))
        other_host = self.worker(0)["host"]
        self.assertNotEqual(other_host, w["host"])
        self.assertEqual(got[1]["host"], other_host, got)

        # The group goes on from there, its state replayed and checked by the loop itself.
        wait_for("attempt 2 stepping", lambda: self.last_step(2) >= got[0]["step"] + 5,
                 timeout=60)
        # The steps are in the trace file at once; the phase follows the agents' next heartbeat
        # (every 500 ms here), which a loaded machine may deliver after those 5 steps.
        wait_for("attempt 2 Running", lambda: self.c.get_job("mem")["status"]["phase"] in
                 ("Running", "Failed", "Succeeded"), timeout=30)
        st = self.c.get_job("mem")["status"]
        self.assertEqual(st["phase"], "Running", st.get("message"))

    def test_the_head_refuses_a_bad_in_memory_setting_naming_the_field(self):
        doc = {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "bad"},
               "spec": {"accelerator": "v6e", "topology": "2x4",
                        "checkpoint": {"dir": self.ckpt,
                                       "inMemory": {"maxBytesPerHost": "8GB"}},
                        "template": {"command": [PYTHON, "-c", "pass"]}}}
        code, body = self.c.request("POST", "/api/v1/jobs", doc)
        self.assertEqual(code, 422, body)
        self.assertIn("spec.checkpoint.inMemory.maxBytesPerHost", json.dumps(body))


if __name__ == "__main__":
    unittest.main()
