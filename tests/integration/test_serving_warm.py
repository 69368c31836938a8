"""Integration test of a Service with spec.warmStart (docs/serving.md "Warm start") on a local
emulated cluster: a group of examples/serve/server.py (four processes, one per host) starts
cold and leaves a warm interpreter with torch imported on each of its hosts; a follower killed
with -9 recreates the group from those interpreters (every agent logs `warm=true` for the new
processes), the group is Ready again and answers a completion, and a scale-down's SIGTERM
drains the warm-started leader as it drains a cold one (its log, written by the warm process,
says "drained").

The binary comes from $TESSERA_BIN.
"""
import glob
import json
import os
import re
import signal
import unittest
import urllib.request

from test_cluster import PYTHON, REPO, Cluster, wait_for

SERVER = os.path.join(REPO, "examples", "serve", "server.py")
NAME = "warm"


def service(replicas):
    return {
        "apiVersion": "tessera/v1",
        "kind": "Service",
        "metadata": {"name": NAME},
        "spec": {
            "accelerator": "v6e",
            "topology": "4x4",
            "command": [PYTHON, SERVER, "--layers", "1", "--d-model", "64", "--heads", "4",
                        "--d-ff", "128", "--drain-s", "5"],
            "workingDir": REPO,
            "replicas": replicas,
            "warmStart": {"preload": ["torch"]},
            "readiness": {"path": "/healthz", "startupGrace": "90s", "period": "1s",
                          "timeout": "5s"},
            "terminationGracePeriod": "20s",
        },
    }


class ServingWarmStartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def replica(self):
        status, body = self.c.request("GET", "/api/v1/services/" + NAME)
        self.assertEqual(status, 200, body)
        replicas = body["status"]["roles"][0]["replicas"]
        return replicas[0] if replicas else None

    def agent_log(self, host):
        with open(os.path.join(self.c.state, "logs", "agent-%s.log" % host)) as f:
            return f.read()

    def warm_ready(self, host):
        """Whether `host`'s agent holds a warm interpreter now: one that said ready and was
        neither handed out nor exited since."""
        idle = set()
        for line in self.agent_log(host).splitlines():
            m = re.search(r"warm\.ready .*?\bpid=(\d+)", line)
            if m:
                idle.add(m.group(1))
            m = re.search(r"(?:worker\.started .*pid=(\d+) warm=true|warm\.exited .*?\bpid=(\d+))",
                          line)
            if m:
                idle.discard(m.group(1) or m.group(2))
        return bool(idle)

    def started_warm(self, host, pid):
        return re.search(r"worker\.started .*\bpid=%d warm=(true|false)" % pid,
                         self.agent_log(host))

    def worker_log(self, host, replica, incarnation, rank):
        pattern = os.path.join(self.c.state, "agents", host, "logs",
                               "%s.server.%d" % (NAME, replica), "*", str(incarnation),
                               "worker-%d.log" % rank)
        found = glob.glob(pattern)
        self.assertEqual(len(found), 1, pattern)
        with open(found[0]) as f:
            return f.read()

    def complete(self, replica):
        leader = replica["leader"]
        req = urllib.request.Request(
            "https://%s:%d/v1/completions" % (leader["address"], leader["port"]),
            data=json.dumps({"prompt": "warm", "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30, context=self.c.ssl_context()) as r:
            return r.status, json.loads(r.read())

    def test_a_killed_follower_brings_its_group_back_from_warm_interpreters(self):
        status, body = self.c.request("POST", "/api/v1/apply", service(1))
        self.assertIn(status, (200, 201), body)
        wait_for("the group ready (cold start)",
                 lambda: (self.replica() or {}).get("phase") == "Ready", timeout=100)
        first = self.replica()
        hosts = [p["host"] for p in first["processes"]]
        self.assertEqual(len(hosts), 4)
        for p in first["processes"]:  # no pool existed: the first start is cold
            self.assertEqual(self.started_warm(p["host"], p["pid"]).group(1), "false", p)
        wait_for("a warm interpreter on each of the group's hosts",
                 lambda: all(self.warm_ready(h) for h in hosts), timeout=90)

        os.kill(first["processes"][1]["pid"], signal.SIGKILL)

        def back():
            r = self.replica()
            return r if r and r["incarnation"] > first["incarnation"] and \
                r["phase"] == "Ready" else None

        again = wait_for("the group recreated and ready", back, timeout=90)
        for p in again["processes"]:
            m = self.started_warm(p["host"], p["pid"])
            self.assertIsNotNone(m, p)
            self.assertEqual(m.group(1), "true", "%s: %s" % (p, self.agent_log(p["host"])[-3000:]))
        status, answer = self.complete(again)
        self.assertEqual(status, 200)
        self.assertEqual(answer["usage"]["completion_tokens"], 4, answer)
        # The script's stderr reaches the worker log from the warm process, with its argv
        # (--layers 1) and the new incarnation's group.
        leader_log = self.worker_log(hosts[0], again["replica"], again["incarnation"], 0)
        self.assertIn('"event": "ready"', leader_log)
        self.assertIn('"layers": 1', leader_log)
        self.assertIn('"group_size": 4', leader_log)

        # Scale to 0: SIGTERM drains the warm-started leader, and its group stops.
        self.c.cli("scale", "service", NAME, "--replicas", "0")
        wait_for("the group stopped", lambda: self.replica() is None, timeout=60)
        leader_log = self.worker_log(hosts[0], again["replica"], again["incarnation"], 0)
        self.assertIn('"event": "stopping", "signal": "SIGTERM"', leader_log)
        self.assertIn('"event": "drained"', leader_log)


if __name__ == "__main__":
    unittest.main()
