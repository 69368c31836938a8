"""Integration test of a Service (docs/serving.md) on a local emulated cluster: two replica
groups of a tiny Python HTTP server, readiness, a killed process recreating its whole group
while the other group keeps serving, scale down and delete.

The binary comes from $TESSERA_BIN.
"""
import json
import os
import signal
import unittest
import urllib.request

from test_cluster import PYTHON, REPO, Cluster, alive, wait_for

# Every process listens on $PORT; the leader's /env shows what tessera gave it.
SERVER = (
    "import http.server, json, os\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = json.dumps({k: v for k, v in os.environ.items()\n"
    "                           if k.startswith(('TESSERA_', 'TPU_')) or k in\n"
    "                           ('PORT', 'MASTER_ADDR', 'MASTER_PORT')}).encode()\n"
    "        self.send_response(200)\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "    def log_message(self, *args):\n"
    "        pass\n"
    "print('serving on', os.environ['PORT'], flush=True)\n"
    "srv = http.server.HTTPServer(('127.0.0.1', int(os.environ['PORT'])), H)\n"
    "if os.environ.get('TESSERA_TLS_CERT'):  # a leader's certificate (docs/serving.md)\n"
    "    import ssl\n"
    "    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
    "    ctx.load_cert_chain(os.environ['TESSERA_TLS_CERT'], os.environ['TESSERA_TLS_KEY'])\n"
    "    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)\n"
    "srv.serve_forever()\n"
)


def service(name, replicas):
    return {
        "apiVersion": "tessera/v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
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


class ServingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def get(self, name):
        status, body = self.c.request("GET", "/api/v1/services/" + name)
        return body if status == 200 else None

    def replicas(self, name):
        svc = self.get(name)
        return {r["replica"]: r for r in svc["status"]["roles"][0]["replicas"]} if svc else {}

    def ready_endpoints(self, name):
        svc = self.get(name)
        return [e for e in svc["status"]["endpoints"] if e["ready"]] if svc else []

    def test_bad_manifest_gets_422_naming_the_field(self):
        bad = service("bad", 1)
        bad["spec"]["readiness"]["path"] = "healthz"
        status, body = self.c.request("POST", "/api/v1/apply", bad)
        self.assertEqual(status, 422, body)
        self.assertEqual(body.get("field"), "spec.readiness.path", body)

    def test_group_recreated_while_the_other_keeps_serving_then_scale_and_delete(self):
        status, body = self.c.request("POST", "/api/v1/apply", service("echo", 2))
        self.assertIn(status, (200, 201), body)
        wait_for("both replicas ready", lambda: len(self.ready_endpoints("echo")) == 2,
                 timeout=90)
        svc = self.get("echo")
        self.assertEqual(svc["status"]["phase"], "Ready", svc["status"])

        # The leader serves, with the serving environment.
        ep = self.ready_endpoints("echo")[0]
        # HTTPS with a certificate from the cluster CA (docs/serving.md "TLS to replicas").
        self.assertEqual(ep["scheme"], "https")
        with urllib.request.urlopen("https://%s:%d/env" % (ep["address"], ep["port"]),
                                    timeout=10, context=self.c.ssl_context()) as r:
            env = json.loads(r.read())
        self.assertEqual(env["TESSERA_SERVICE"], "echo")
        self.assertEqual(env["TESSERA_ROLE"], "server")
        self.assertEqual(env["TESSERA_WORKER_INDEX"], "0")
        self.assertEqual(env["TESSERA_GROUP_SIZE"], "4")
        self.assertEqual(env["TESSERA_LEADER_ADDRESS"], "%s:%d" % (ep["address"], ep["port"]))
        self.assertEqual(env["PORT"], str(ep["port"]))
        self.assertTrue(env["TESSERA_TLS_KEY"].endswith("/worker-0.key"), env)
        self.assertEqual(env["TPU_WORKER_ID"], "0")

        # kill -9 of a follower of one group: that whole group is recreated, the other stays.
        before = self.replicas("echo")
        victim, other = sorted(before)
        follower = before[victim]["processes"][1]
        self.assertEqual(follower["phase"], "Running", follower)
        leader_pid = before[victim]["processes"][0]["pid"]
        os.kill(follower["pid"], signal.SIGKILL)

        def recreated():
            r = self.replicas("echo")
            self.assertEqual(r[other]["phase"], "Ready", r[other])  # never disturbed
            return r[victim]["restarts"] >= 1 and r[victim]["phase"] == "Ready"

        wait_for("the killed group recreated and ready", recreated, timeout=90)
        after = self.replicas("echo")[victim]
        self.assertEqual(after["incarnation"], before[victim]["incarnation"] + 1)
        wait_for("the old leader stopped with its group", lambda: not alive(leader_pid),
                 timeout=30)
        self.assertEqual(len(self.ready_endpoints("echo")), 2)

        # Scale to 1: one group stops and frees its slice.
        self.c.cli("scale", "service", "echo", "--replicas", "1")
        wait_for("one replica left", lambda: len(self.replicas("echo")) == 1, timeout=60)
        out = self.c.cli("get", "services").stdout
        self.assertIn("echo", out)
        self.assertIn("server 1/1", out)
        out = self.c.cli("describe", "service", "echo").stdout
        self.assertIn("Endpoints:", out)

        # Delete: every process stops, then the service is gone.
        pids = [p["pid"] for r in self.replicas("echo").values() for p in r["processes"]]
        self.c.cli("delete", "service", "echo")
        wait_for("the service removed", lambda: self.get("echo") is None, timeout=60)
        wait_for("every process gone", lambda: not any(alive(p) for p in pids), timeout=30)


if __name__ == "__main__":
    unittest.main()
