"""Integration test of jobs on a 3D (7x) cluster: a 2x2x2 slice and a 4x4x8 super-slice over two
cubes run on a local `tessera up --generation 7x --cubes 2` cluster (32 emulated hosts, a real
head and real agents), and every worker gets the TPU environment of its place in the slice.

Real processes because what is checked is what the agents hand to each worker process (the env
contract of docs/agent-protocol.md) for 3D placements, which no unit test covers end to end. The
workers only print their environment, so the test is short.
"""
import json
import os
import unittest

from test_cluster import ENV_DUMP, LEASE_MS, PYTHON, REPO, Cluster, heartbeat_ms, wait_for


class Cluster3D(Cluster):
    """The Cluster helper on two 7x cubes; `extra` goes to `tessera up`."""

    def up(self, extra=()):
        self.cli("up", "--generation", "7x", "--cubes", "2", "--heartbeat-ms", heartbeat_ms(),
                 "--lease-ms", str(LEASE_MS), "--timeout", "120", *extra)
        with open(os.path.join(self.state, "admin.token")) as f:
            self.token = f.read().strip()
        self.reload_port()


def job_7x(name, topology, command, env=None, ckpt_dir=None, expected=None):
    spec = {
        "accelerator": "7x",
        "topology": topology,
        "template": {"command": command, "env": env or {}, "workingDir": REPO,
                     "terminationGracePeriod": "20s"},
    }
    if ckpt_dir:
        spec["checkpoint"] = {"dir": ckpt_dir}
    if expected:
        spec["expectedDuration"] = expected
    return {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": spec}


class ThreeDClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster3D()
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def envs_of(self, name, workers):
        envs = {}
        for w in range(workers):
            log = self.c.cli("logs", "job", name, "--worker", str(w)).stdout
            lines = [l for l in log.splitlines() if l.startswith("ENV ")]
            self.assertTrue(lines, "worker %d of %s printed no ENV line: %r" % (w, name, log))
            envs[w] = json.loads(lines[0][4:])
        return envs

    def check_slice(self, name, topology, pod_type, hosts):
        c = self.c
        code, body = c.request("POST", "/api/v1/jobs", job_7x(name, topology, [PYTHON, "-c", ENV_DUMP]))
        self.assertEqual(code, 201, body)
        self.assertEqual(c.wait_phase(name, ("Succeeded", "Failed"), timeout=60), "Succeeded")
        status = c.get_job(name)["status"]
        self.assertEqual(len(status["placement"]), 1)
        placed = status["placement"][0]["hosts"]
        self.assertEqual(len(placed), hosts)
        envs = self.envs_of(name, hosts)
        for w, e in envs.items():
            self.assertEqual(e["TPU_WORKER_ID"], str(w))
            self.assertEqual(e["RANK"], str(w))
            self.assertEqual(e["WORLD_SIZE"], str(hosts))
            self.assertEqual(e["TPU_TOPOLOGY"], topology)
            self.assertEqual(e["TPU_ACCELERATOR_TYPE"], pod_type)
            self.assertEqual(e["TPU_WORKER_HOSTNAMES"], ",".join(placed))
            self.assertEqual(e["TESSERA_JOB"], name)
            self.assertEqual(e["TPU_NAME"], name + "-s0")  # a slice formed for this job
            self.assertEqual(e["JAX_PROCESS_ID"], str(w))
            self.assertEqual(e["JAX_PROCESS_COUNT"], str(hosts))
            self.assertNotIn("MEGASCALE_NUM_SLICES", e)  # one slice: no multi-slice env
        self.assertEqual(len({e["MASTER_PORT"] for e in envs.values()}), 1)
        return placed

    def test_a_2x2x2_slice_gets_two_neighbouring_hosts_of_one_cube(self):
        placed = self.check_slice("cube-part", "2x2x2", "7x-16", 2)
        self.assertEqual(len({h.rsplit("-h", 1)[0] for h in placed}), 1, placed)

    def test_a_4x4x8_super_slice_spans_both_cubes(self):
        placed = self.check_slice("super", "4x4x8", "7x-256", 32)
        self.assertEqual(sorted({h.rsplit("-h", 1)[0] for h in placed}), ["cube-000", "cube-001"])
        self.assertEqual(len(set(placed)), 32)


if __name__ == "__main__":
    unittest.main()
