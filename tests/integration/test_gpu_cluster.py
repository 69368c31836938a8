"""Integration test of GPU jobs (spec.gpu) on a local `tessera up --gpu gb200-nvl72 --domains 2
--trays 2` cluster: 4 emulated GB200 trays in two NVLink domains, each agent discovering its
GPUs through its own nvidia-smi (a script `up` writes that prints an emulated `nvidia-smi -q -x`).

Real processes because what is checked is the whole path: the agents' nvidia-smi discovery, the
head forming NVLink domains from it (`get hosts -o wide`), a 2-host job placed inside one
clique, and the environment each worker process starts with (RANK order, WORLD_SIZE,
CUDA_VISIBLE_DEVICES, the IMEX channel recorded on the placement); then a real 2-host PyTorch
(gloo) training job on the same path.
"""
import json
import os
import unittest

from test_cluster import LEASE_MS, PYTHON, REPO, Cluster, heartbeat_ms

GPU_ENV_DUMP = (
    "import json, os; print('ENV ' + json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith(('TPU_', 'TESSERA_')) or k in ('RANK', 'NODE_RANK', 'WORLD_SIZE', "
    "'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'CUDA_VISIBLE_DEVICES')}))"
)


class GpuCluster(Cluster):
    """The Cluster helper on emulated GB200 trays: two domains of two trays."""

    def up(self):
        self.cli("up", "--gpu", "gb200-nvl72", "--domains", "2", "--trays", "2",
                 "--heartbeat-ms", heartbeat_ms(), "--lease-ms", str(LEASE_MS), "--timeout", "120")
        with open(os.path.join(self.state, "admin.token")) as f:
            self.token = f.read().strip()
        self.reload_port()


def gpu_job(name, command, hosts=2, domain="required", env=None):
    return {"apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"gpu": {"system": "gb200-nvl72", "hosts": hosts, "domain": domain},
                     "template": {"command": command, "env": env or {}, "workingDir": REPO,
                                  "terminationGracePeriod": "20s"}}}


class GpuClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = GpuCluster()
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def domains(self):
        code, body = self.c.request("GET", "/api/v1/hosts")
        self.assertEqual(code, 200, body)
        return {h["metadata"]["name"]: h["status"]["gpu"] for h in body["items"]}

    def test_hosts_form_two_nvlink_domains(self):
        gpu = self.domains()
        self.assertEqual(sorted(gpu), ["nvl72-00-t00", "nvl72-00-t01", "nvl72-01-t00",
                                       "nvl72-01-t01"])
        for g in gpu.values():
            self.assertEqual(g["system"], "gb200-nvl72")
            self.assertEqual(g["gpus"], 4)
            self.assertTrue(g["clique"] and g["nvlinkReady"], g)
        self.assertEqual(gpu["nvl72-00-t00"]["domain"], gpu["nvl72-00-t01"]["domain"])
        self.assertEqual(gpu["nvl72-01-t00"]["domain"], gpu["nvl72-01-t01"]["domain"])
        self.assertNotEqual(gpu["nvl72-00-t00"]["domain"], gpu["nvl72-01-t00"]["domain"])
        wide = self.c.cli("get", "hosts", "-o", "wide").stdout
        self.assertIn("gb200-nvl72 x4 (" + gpu["nvl72-00-t00"]["domain"] + ")", wide)

    def test_two_host_job_gets_the_gpu_environment(self):
        c = self.c
        code, body = c.request("POST", "/api/v1/jobs",
                               gpu_job("gpu-env", [PYTHON, "-c", GPU_ENV_DUMP]))
        self.assertEqual(code, 201, body)
        self.assertEqual(c.wait_phase("gpu-env", ("Succeeded", "Failed"), timeout=90),
                         "Succeeded")
        status = c.get_job("gpu-env")["status"]
        placed = status["placement"][0]["hosts"]
        self.assertEqual(len(placed), 2)
        # One clique (domain: required), ranks by host name inside it.
        self.assertEqual(placed, sorted(placed))
        self.assertEqual(placed[0][:8], placed[1][:8])
        gpu = self.domains()
        self.assertEqual(status["gpu"]["domains"], [gpu[h]["domain"] for h in placed])
        channel = status["gpu"]["imexChannel"]
        self.assertGreaterEqual(channel, 0)
        envs = []
        for rank in range(2):
            log = c.cli("logs", "job", "gpu-env", "--worker", str(rank)).stdout
            lines = [l for l in log.splitlines() if l.startswith("ENV ")]
            self.assertTrue(lines, "worker %d printed no ENV line: %r" % (rank, log))
            envs.append(json.loads(lines[0][4:]))
        for rank, e in enumerate(envs):
            self.assertEqual(e["RANK"], str(rank))
            self.assertEqual(e["NODE_RANK"], str(rank))
            self.assertEqual(e["WORLD_SIZE"], "2")
            self.assertEqual(e["LOCAL_RANK"], "0")
            self.assertEqual(e["CUDA_VISIBLE_DEVICES"], "0,1,2,3")
            self.assertEqual(e["TESSERA_IMEX_CHANNEL"], str(channel))
            self.assertEqual(e["TESSERA_GPU_DOMAIN"], gpu[placed[rank]]["domain"])
            self.assertEqual(e["MASTER_PORT"], str(status["masterPort"]))
            self.assertEqual(e["MASTER_ADDR"], envs[0]["MASTER_ADDR"])
            self.assertNotIn("TPU_WORKER_ID", e)
        self.assertEqual({w["host"] for w in status["workers"]}, set(placed))

    def test_two_host_pytorch_job_trains(self):
        c = self.c
        code, body = c.request("POST", "/api/v1/jobs",
                               gpu_job("gpu-train", [PYTHON, "examples/train/train.py"],
                                       env={"STEPS": "5"}))
        self.assertEqual(code, 201, body)
        self.assertEqual(c.wait_phase("gpu-train", ("Succeeded", "Failed"), timeout=180),
                         "Succeeded", c.cli("describe", "job", "gpu-train").stdout)

    def test_a_wrong_gpu_spec_is_refused_naming_the_field(self):
        # A job accepted by mistake would hold up the GPU jobs of the other tests: delete it.
        for name in ("gpu-bad", "gpu-big"):
            self.addCleanup(self.c.cli, "delete", "job", name, check=False)
        code, body = self.c.request("POST", "/api/v1/jobs",
                                    gpu_job("gpu-bad", [PYTHON, "-c", "pass"], domain="block"))
        self.assertEqual(code, 422, body)
        self.assertIn("spec.gpu.domain", json.dumps(body))
        code, body = self.c.request("POST", "/api/v1/jobs",
                                    gpu_job("gpu-big", [PYTHON, "-c", "pass"], hosts=3))
        self.assertEqual(code, 422, body)  # 3 trays in one clique: the domains have 2 (never fits)
        self.assertIn("spec.gpu.hosts", json.dumps(body))


if __name__ == "__main__":
    unittest.main()
