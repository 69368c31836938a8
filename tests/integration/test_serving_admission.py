"""Integration test of Services admitted through ClusterQueues (docs/serving.md "Admission") on a
live local cluster: a high-priority Service preempts a running low-priority TrainJob
(examples/train/train.py, which checkpoints on SIGTERM); its replica groups start once the
victim's workers are gone and serve; a low-priority Service waits behind the quota and says why
in `tessera describe service`; deleting the Service gives the quota back and the victim resumes.

Uses the Cluster helper of test_cluster.py (a real head and real agents, polled with deadlines).
"""
import json
import os
import re
import unittest
import urllib.request

from test_cluster import PYTHON, REPO, Cluster, alive, wait_for
from test_preemption import QUEUES, VICTIM_STEP_MS, train_job


# Every process listens on $PORT and answers any GET with its TESSERA_* environment.
SERVER = (
    "import http.server, json, os\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = json.dumps({k: v for k, v in os.environ.items()\n"
    "                           if k.startswith('TESSERA_')}).encode()\n"
    "        self.send_response(200)\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "    def log_message(self, *args):\n"
    "        pass\n"
    "srv = http.server.HTTPServer(('127.0.0.1', int(os.environ['PORT'])), H)\n"
    "if os.environ.get('TESSERA_TLS_CERT'):  # a leader's certificate (docs/serving.md)\n"
    "    import ssl\n"
    "    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
    "    ctx.load_cert_chain(os.environ['TESSERA_TLS_CERT'], os.environ['TESSERA_TLS_KEY'])\n"
    "    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)\n"
    "srv.serve_forever()\n"
)


def service(name, queue, priority, replicas=1):
    return {
        "apiVersion": "tessera/v1",
        "kind": "Service",
        "metadata": {"name": name, "queue": queue},
        "spec": {
            "priority": priority,
            "accelerator": "v6e",
            "topology": "4x4",
            "command": [PYTHON, "-c", SERVER],
            "workingDir": REPO,
            "replicas": replicas,
            "readiness": {"path": "/healthz", "startupGrace": "60s", "period": "1s",
                          "timeout": "2s"},
            "terminationGracePeriod": "2s",
        },
    }


class ServingAdmissionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def apply(self, kind, name, body):
        p = self.c.cli("apply", "-f", "-", input=QUEUES.format(kind=kind, name=name, body=body))
        self.assertIn("%s/%s created" % (kind.lower(), name), p.stdout)

    def get(self, name):
        code, body = self.c.request("GET", "/api/v1/services/" + name)
        return body if code == 200 else None

    def replica(self, name, i=0):
        svc = self.get(name)
        for r in (svc or {}).get("status", {}).get("roles", [{}])[0].get("replicas", []):
            if r["replica"] == i:
                return r
        return None

    def log(self, job):
        code, text = self.c.request("GET", "/api/v1/jobs/%s/logs?worker=0" % job)
        return text if code == 200 and isinstance(text, str) else ""

    def test_high_priority_service_preempts_training_and_a_low_one_waits_with_a_reason(self):
        c = self.c
        self.apply("PriorityClass", "low", "value: 1")
        self.apply("PriorityClass", "serving", "value: 1000")
        self.apply("ClusterQueue", "shared",
                   "spec:\n  quotas: [{generation: v6e, nominalQuota: 32}]\n"
                   "  preemption: {withinClusterQueue: LowerPriority}")
        self.apply("LocalQueue", "team", "spec: {clusterQueue: shared}")

        # Low-priority training on both slices, running with a checkpoint behind it. Each step
        # takes at least STEP_MS asleep (test_preemption's victim does the same): at full speed
        # its 8 workers spun all-reduces for the whole test, on the 2 cores the pool shares.
        ckpt = os.path.join(c.dir, "ckpt-low")
        code, body = c.request("POST", "/api/v1/apply",
                               train_job("low", "team", "low", 2, 100000, ckpt, 5,
                                         VICTIM_STEP_MS))
        self.assertEqual(code, 201, body)
        wait_for("low to checkpoint",
                 lambda: (c.get_job("low")["status"]["lastStep"] >= 6
                          and c.get_job("low")["status"]["lastCheckpointTimeMs"] > 0),
                 timeout=180)
        pids = [w["pid"] for w in c.get_job("low")["status"]["workers"] if w.get("pid")]
        self.assertEqual(len(pids), 8, c.get_job("low")["status"]["workers"])

        # A high-priority Service of two groups (one slice each): they preempt the job.
        code, body = c.request("POST", "/api/v1/apply",
                               service("llm", "team", "serving", replicas=2))
        self.assertIn(code, (200, 201), body)
        wait_for("low to be preempted",
                 lambda: c.get_job("low")["status"]["preemptions"] == 1, timeout=30)
        self.assertEqual(c.phase("low"), "Pending")
        code, events = c.request("GET", "/api/v1/events")
        self.assertEqual(code, 200)
        preemption = [e for e in events["items"]
                      if e["object"] == "trainjob/low" and e["reason"] == "Preempted"]
        self.assertEqual(len(preemption), 1, events["items"])
        self.assertIn("preempted by service/llm/server/", preemption[0]["message"])
        preempted = wait_for("PREEMPTED in low's log",
                             lambda: re.search(r"PREEMPTED step=(\d+)", self.log("low")),
                             timeout=90)
        self.assertGreater(int(preempted.group(1)), 0)

        # The groups start once the victim's workers are gone, and serve.
        wait_for("llm ready", lambda: self.get("llm")["status"]["phase"] == "Ready",
                 timeout=120)
        for pid in pids:
            self.assertFalse(alive(pid), "a worker of the victim still runs: %d" % pid)
        for ep in self.get("llm")["status"]["endpoints"]:
            self.assertTrue(ep["ready"], ep)
            with urllib.request.urlopen("https://%s:%d/env" % (ep["address"], ep["port"]),
                                        timeout=10, context=c.ssl_context()) as r:
                self.assertEqual(json.loads(r.read())["TESSERA_SERVICE"], "llm")
        code, queues = c.request("GET", "/api/v1/clusterqueues")
        self.assertEqual(code, 200)
        self.assertEqual(queues["items"][0]["status"]["usedChips"], 32, queues)
        # The victim waits for quota, naming the group that holds it.
        wait_for("low to say it is over quota",
                 lambda: c.get_job("low")["status"].get("pendingReason") == "OverQuota",
                 timeout=30)

        # A low-priority Service cannot preempt anything: it waits, and says why.
        code, body = c.request("POST", "/api/v1/apply", service("batch", "team", "low"))
        self.assertIn(code, (200, 201), body)
        wait_for("batch to wait over quota",
                 lambda: (self.replica("batch") or {}).get("reason") == "OverQuota", timeout=30)
        out = c.cli("describe", "service", "batch").stdout
        self.assertIn("OverQuota", out)
        self.assertIn("position", out)
        self.assertEqual(self.get("llm")["status"]["phase"], "Ready")  # never disturbed
        c.cli("delete", "service", "batch")
        wait_for("batch removed", lambda: self.get("batch") is None, timeout=60)

        # Deleting the Service gives its quota back: the victim resumes from its checkpoint.
        c.cli("delete", "service", "llm")
        wait_for("llm removed", lambda: self.get("llm") is None, timeout=60)
        wait_for("low running again",
                 lambda: (c.get_job("low")["status"]["attempt"] == 1
                          and c.phase("low") == "Running"), timeout=120)
        wait_for("low to resume from its checkpoint",
                 lambda: "resume step %s from" % preempted.group(1) in c.cli(
                     "logs", "job", "low", "--worker", "0").stdout, timeout=120)
        c.cli("delete", "job", "low")


if __name__ == "__main__":
    unittest.main()
