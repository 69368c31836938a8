"""Integration test of GPU jobs (spec.gpu) on a local `tessera up --gpu gb200-nvl72 --domains 2
--trays 2` cluster: 4 emulated GB200 trays in two NVLink domains, each agent discovering its
GPUs through its own nvidia-smi (a script `up` writes that prints an emulated `nvidia-smi -q -x`).

Real processes because what is checked is the whole path: the agents' nvidia-smi discovery, the
head forming NVLink domains from it (`get hosts -o wide`), a 2-host job placed inside one
clique, and the environment each worker process starts with (RANK order, WORLD_SIZE,
CUDA_VISIBLE_DEVICES, the IMEX channel recorded on the placement); then a real 2-host PyTorch
(gloo) training job on the same path; and GPU jobs admitted through a ClusterQueue with a quota
in GPUs (the second waits with the quota reason until the first finishes).
"""
import json
import os
import unittest

from test_cluster import LEASE_MS, PYTHON, REPO, Cluster, heartbeat_ms, wait_for

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

    def test_gpu_jobs_wait_for_quota_in_a_cluster_queue(self):
        """A ClusterQueue with 8 GB200 GPUs (2 trays): the first 2-tray job runs, the second
        waits with the quota reason (in its status and `explain`), and runs once the first
        finishes. The first job's workers wait for a file the test writes, so "finishes" is a
        condition, not a sleep."""
        c = self.c
        release = os.path.join(c.state, "gpu-q1.release")
        hold = ("import os, time\n"
                "while not os.path.exists(%r): time.sleep(0.05)\n" % release)
        # Undone in reverse order: the jobs first, then the queues, so the other tests keep
        # the first-come, first-served head they expect.
        self.addCleanup(c.cli, "delete", "clusterqueue", "gpu-quota", "--ignore-not-found",
                        check=False)
        self.addCleanup(c.cli, "delete", "localqueue", "default", "--ignore-not-found",
                        check=False)
        for name in ("gpu-q1", "gpu-q2"):
            self.addCleanup(self.delete_and_wait_gone, name)
        self.addCleanup(lambda: open(release, "a").close())
        queues = [
            {"apiVersion": "tessera/v1", "kind": "ClusterQueue", "metadata": {"name": "gpu-quota"},
             "spec": {"quotas": [{"resource": "nvidia.com/gpu", "gpuSystem": "gb200-nvl72",
                                  "nominalQuota": 8}]}},
            {"apiVersion": "tessera/v1", "kind": "LocalQueue", "metadata": {"name": "default"},
             "spec": {"clusterQueue": "gpu-quota"}},
        ]
        for doc in queues:
            code, body = c.request("POST", "/api/v1/apply", doc)
            self.assertIn(code, (200, 201), body)
        # A quota on a TPU flavor, and an unknown resource: refused, naming the field and the fix.
        bad = dict(queues[0], metadata={"name": "gpu-bad"})
        bad["spec"] = {"quotas": [{"resource": "nvidia.com/gpu", "generation": "v6e",
                                   "nominalQuota": 8}]}
        code, body = c.request("POST", "/api/v1/apply", bad)
        self.assertEqual(code, 422, body)
        self.assertIn("spec.quotas[0].generation: v6e is a TPU generation", json.dumps(body))
        self.assertIn("gpuSystem: h100, h200, gb200-nvl72", json.dumps(body))
        bad["spec"] = {"quotas": [{"resource": "nvidia.com/gpus", "gpuSystem": "gb200-nvl72",
                                   "nominalQuota": 8}]}
        code, body = c.request("POST", "/api/v1/apply", bad)
        self.assertEqual(code, 422, body)
        self.assertIn("spec.quotas[0].resource: 'nvidia.com/gpus' is unknown", json.dumps(body))

        code, body = c.request("POST", "/api/v1/jobs", gpu_job("gpu-q1", [PYTHON, "-c", hold]))
        self.assertEqual(code, 201, body)
        self.assertEqual(c.wait_phase("gpu-q1", ("Running", "Failed"), timeout=90), "Running",
                         c.cli("describe", "job", "gpu-q1").stdout)
        code, body = c.request("POST", "/api/v1/jobs",
                               gpu_job("gpu-q2", [PYTHON, "-c", GPU_ENV_DUMP]))
        self.assertEqual(code, 201, body)

        def waiting_for_quota():
            st = c.get_job("gpu-q2")["status"]
            return st if st.get("pendingReason") == "OverQuota" else None
        st = wait_for("gpu-q2 waiting for quota", waiting_for_quota, timeout=60)
        self.assertEqual(st["phase"], "Pending")
        self.assertIn("needs 8 GPUs; queue gpu-quota uses 8 of nominal 8 GPUs", st["message"])
        self.assertEqual([h["name"] for h in st["wouldHelp"]], ["gpu-q1"])
        explain = c.cli("explain", "job", "gpu-q2").stdout
        self.assertIn("Reason:    OverQuota", explain)
        self.assertIn("queue gpu-quota uses 8 of nominal 8 GPUs: over quota by 8 GPUs", explain)
        self.assertIn("gpu-q1", explain)
        code, body = c.request("GET", "/api/v1/clusterqueues")
        self.assertEqual(code, 200, body)
        row = [q for q in body["items"] if q["metadata"]["name"] == "gpu-quota"][0]
        self.assertEqual(row["status"]["gpus"][0]["usedGpus"], 8, row["status"])
        self.assertEqual(row["status"]["gpus"][0]["pendingWorkloads"], 1, row["status"])

        open(release, "a").close()  # the first job's workers exit 0
        self.assertEqual(c.wait_phase("gpu-q1", ("Succeeded", "Failed"), timeout=90),
                         "Succeeded")
        self.assertEqual(c.wait_phase("gpu-q2", ("Succeeded", "Failed"), timeout=90),
                         "Succeeded", c.cli("describe", "job", "gpu-q2").stdout)
        self.assertEqual(len(c.get_job("gpu-q2")["status"]["placement"][0]["hosts"]), 2)

    def delete_and_wait_gone(self, name):
        self.c.cli("delete", "job", name, check=False)
        wait_for("job %s gone" % name,
                 lambda: self.c.get_job(name) is None, timeout=60)


if __name__ == "__main__":
    unittest.main()
