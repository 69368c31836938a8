"""Integration test of SliceReservations (docs/reservations.md) on a live local cluster: a real
head and real agents (two v6e 4x4 slices), because what it checks only real processes show: a
job inside the reservation is started by the agents of the reserved hosts and no others, the
slice stays held after the job's workers have exited, and `delete --force` stops workers that
really run before the hosts are released; a Service inside it has its processes started by the
reserved hosts' agents only, and holds the reservation while they serve. The rules themselves
are unit-tested
(src/workload/reservation_test.cc, src/controller/controller_reservations_test.cc).

Uses the Cluster helper of test_cluster.py (polled with deadlines, never fixed sleeps).
"""
import unittest

from test_cluster import PYTHON, REPO, Cluster, alive, wait_for
from test_serving import SERVER

RESERVATION = """
apiVersion: tessera/v1
kind: SliceReservation
metadata: {name: pool}
spec: {accelerator: TPU-V6E, topology: 4x4, slices: 1}
"""


def inside(name, command):
    return {
        "apiVersion": "tessera/v1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"accelerator": "v6e", "topology": "4x4", "slices": 1, "reservation": "pool",
                 "template": {"command": command, "workingDir": REPO,
                              "terminationGracePeriod": "2s"}},
    }


class ReservationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def reservation(self):
        code, body = self.c.request("GET", "/api/v1/slicereservations/pool")
        return body if code == 200 else None

    def placed_hosts(self, job):
        return {h for s in self.c.get_job(job)["status"]["placement"] for h in s["hosts"]}

    def test_reserve_run_inside_keep_held_refuse_delete_in_use_then_force(self):
        c = self.c
        # The number of slices is spec.slices, as in a TrainJob; the old name is a 422 naming it.
        code, body = c.request("POST", "/api/v1/apply",
                               {"apiVersion": "tessera/v1", "kind": "SliceReservation",
                                "metadata": {"name": "old"},
                                "spec": {"accelerator": "v6e", "topology": "4x4",
                                         "numSlices": 1}})
        self.assertEqual(code, 422, body)
        self.assertEqual(body["field"], "spec.numSlices", body)
        self.assertIn("spec.slices", body["error"])
        out = c.cli("apply", "-f", "-", input=RESERVATION).stdout
        self.assertIn("slicereservation/pool created", out)
        c.cli("wait", "slicereservation", "pool", "--for", "phase=Ready", "--timeout", "30s")
        r = self.reservation()
        held = set(r["status"]["hosts"])
        self.assertEqual(len(held), 4, r)
        self.assertEqual(r["spec"]["accelerator"], "v6e")  # stored in the canonical spelling
        self.assertRegex(c.cli("get", "sr").stdout, r"pool\s+Ready\s+v6e 4x4\s+1/1\s+4\s+0")

        # A job inside runs on the reserved hosts only, and the slice stays held after it ends.
        code, body = c.request("POST", "/api/v1/apply",
                               inside("short", [PYTHON, "-c", "print('inside')"]))
        self.assertEqual(code, 201, body)
        self.assertEqual(c.wait_phase("short", ("Succeeded", "Failed"), timeout=30), "Succeeded")
        self.assertEqual(self.placed_hosts("short"), held)
        r = self.reservation()
        self.assertEqual(r["status"]["phase"], "Ready")
        self.assertEqual(set(r["status"]["hosts"]), held)
        self.assertEqual(r["status"]["users"], [])

        # In use: a delete is refused naming the user; --force stops it, then releases.
        code, body = c.request("POST", "/api/v1/apply", inside("long", ["sleep", "600"]))
        self.assertEqual(code, 201, body)
        c.wait_phase("long", ("Running",), timeout=30)
        self.assertEqual(self.placed_hosts("long"), held)
        code, body = c.request("DELETE", "/api/v1/slicereservations/pool")
        self.assertEqual(code, 409, body)
        self.assertIn("trainjob/long", str(body))
        refused = c.cli("delete", "sr", "pool", check=False)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("trainjob/long", refused.stderr)
        forced = c.cli("delete", "slicereservation", "pool", "--force").stdout
        self.assertIn("slicereservation/pool", forced)
        wait_for("the reservation to be released", lambda: self.reservation() is None, timeout=30)
        st = c.get_job("long")["status"]
        self.assertEqual(st["phase"], "Pending")
        self.assertEqual(st["reason"], "ReservationNotFound")
        # Released only after the agents confirmed the stop: the worker processes are gone.
        self.assertFalse(st["stopping"], st)
        pids = [w["pid"] for w in st["workers"]]
        self.assertEqual(len(pids), 4, st)
        self.assertFalse([p for p in pids if alive(p)], st)

    def test_service_inside_runs_on_the_reserved_hosts_only_and_blocks_delete(self):
        c = self.c
        c.cli("apply", "-f", "-", input=RESERVATION.replace("name: pool", "name: svcpool"))
        c.cli("wait", "slicereservation", "svcpool", "--for", "phase=Ready", "--timeout", "30s")
        code, body = c.request("GET", "/api/v1/slicereservations/svcpool")
        held = set(body["status"]["hosts"])
        svc = {"apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": "echo"},
               "spec": {"reservation": "svcpool", "accelerator": "v6e", "topology": "4x4",
                        "command": [PYTHON, "-c", SERVER], "workingDir": REPO, "replicas": 2,
                        "readiness": {"path": "/healthz", "startupGrace": "60s", "period": "1s"},
                        "terminationGracePeriod": "2s"}}
        code, body = c.request("POST", "/api/v1/apply", svc)
        self.assertIn(code, (200, 201), body)

        def replicas():
            return {r["replica"]: r for r in c.request("GET", "/api/v1/services/echo")[1]
                    ["status"]["roles"][0]["replicas"]}
        wait_for("one group ready inside", lambda: replicas()[0]["phase"] == "Ready", timeout=60)
        group = replicas()[0]
        self.assertEqual({p["host"] for p in group["processes"]}, held, group)
        self.assertTrue(all(alive(p["pid"]) for p in group["processes"]), group)
        # The second group waits inside, though the other slice of the cluster is free.
        self.assertEqual(replicas()[1]["reason"], "ReservationFull", replicas()[1])
        code, body = c.request("DELETE", "/api/v1/slicereservations/svcpool")
        self.assertEqual(code, 409, body)
        self.assertIn("service/echo", str(body))
        c.cli("delete", "service", "echo")
        wait_for("the service removed",
                 lambda: c.request("GET", "/api/v1/services/echo")[0] == 404, timeout=60)
        code, body = c.request("DELETE", "/api/v1/slicereservations/svcpool")
        self.assertEqual(code, 200, body)


if __name__ == "__main__":
    unittest.main()
