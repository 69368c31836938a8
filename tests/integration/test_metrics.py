"""GET /metrics on a live local cluster, read with a strict text-format parser (prom_text.py)
and checked against what the API says; and the parser itself refusing malformed input."""
import json
import os
import subprocess
import unittest
import urllib.request

import prom_text
from test_cluster import LEASE_MS, PYTHON, TESSERA, Cluster, job, wait_for

BUSY = ("import time\nend = time.time() + 300\n"
        "while time.time() < end:\n    print('busy', flush=True); time.sleep(0.2)\n")


class ParserTest(unittest.TestCase):
    GOOD = (
        "# HELP a_total Things.\n# TYPE a_total counter\n"
        "a_total{k=\"v\\\"\\\\\\n\"} 3\n"
        "# HELP h Latency.\n# TYPE h histogram\n"
        "h_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1.5\nh_count 2\n"
        "# TYPE g gauge\ng NaN\ng{x=\"1\"} -Inf 1700000000000\n")

    def test_accepts_the_format(self):
        fams = prom_text.parse(self.GOOD)
        self.assertEqual(fams["a_total"].get(k="v\"\\\n"), 3)
        self.assertEqual(fams["h"].get("h_count"), 2)
        self.assertEqual(fams["g"].type, "gauge")

    def test_refuses_malformed_input(self):
        bad = {
            "no final newline": "# TYPE g gauge\ng 1",
            "bad escape": "# TYPE g gauge\ng{a=\"\\t\"} 1\n",
            "bad value": "# TYPE g gauge\ng one\n",
            "type after sample": "g 1\n# TYPE g gauge\n",
            "duplicate series": "# TYPE g gauge\ng{a=\"1\"} 1\ng{a=\"1\"} 2\n",
            "split family": "# TYPE g gauge\ng 1\n# TYPE f gauge\nf 1\ng{a=\"x\"} 2\n",
            "negative counter": "# TYPE c counter\nc -1\n",
            "no +Inf": "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
            "not cumulative": ("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                               "h_sum 1\nh_count 1\n"),
            "count mismatch": "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n",
            "reserved label": "# TYPE g gauge\ng{__name__=\"x\"} 1\n",
            "label twice": "# TYPE g gauge\ng{a=\"1\",a=\"2\"} 1\n",
            "blank line": "# TYPE g gauge\n\ng 1\n",
            "unknown type": "# TYPE g thing\ng 1\n",
            "two HELPs": "# HELP g a\n# HELP g b\ng 1\n",
            "unterminated labels": "# TYPE g gauge\ng{a=\"1\" 1\n",
        }
        for what, text in bad.items():
            with self.subTest(what):
                with self.assertRaises(prom_text.ParseError):
                    prom_text.parse(text)


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()
        cls.c.up()

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def scrape(self):
        req = urllib.request.Request(self.c.url + "/metrics")
        req.add_header("Authorization", "Bearer " + self.c.token)
        with urllib.request.urlopen(req, timeout=30, context=self.c.ssl_context()) as r:
            self.assertEqual(r.status, 200)
            self.assertTrue(r.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
            return prom_text.parse(r.read().decode())

    def test_metrics_need_the_admin_token(self):
        code, _ = self.c.request("GET", "/metrics", token=None)
        self.assertEqual(code, 401)
        with open(os.path.join(self.c.state, "join.token")) as f:
            code, _ = self.c.request("GET", "/metrics", token=f.read().strip())
        self.assertEqual(code, 403)

    def test_values_match_the_api(self):
        code, _ = self.c.request("POST", "/api/v1/jobs", job("metered", [PYTHON, "-c", BUSY],
                                                               slices=1))
        self.assertEqual(code, 201)
        self.c.wait_phase("metered", ("Running",))
        m = self.scrape()
        _, hosts = self.c.request("GET", "/api/v1/hosts")
        _, jobs = self.c.request("GET", "/api/v1/jobs")
        hosts, jobs = hosts["items"], jobs["items"]
        chips = sum(h["spec"]["chips"] for h in hosts)
        allocated = sum(h["spec"]["chips"] for h in hosts if h["status"]["job"])
        self.assertEqual(m["tessera_chips"].get(generation="v6e"), chips)
        self.assertEqual(m["tessera_chips_allocated"].get(generation="v6e"), allocated)
        self.assertEqual(allocated, 16)
        self.assertEqual(m["tessera_chips_unhealthy"].get(generation="v6e"), 0)
        self.assertEqual(m["tessera_hosts"].get(generation="v6e"), len(hosts))
        running = sum(1 for j in jobs if j["status"]["phase"] == "Running")
        self.assertEqual(m["tessera_jobs"].get(phase="Running"), running)
        self.assertEqual(m["tessera_jobs"].get(phase="Pending"), 0)
        for h in hosts:
            name = h["metadata"]["name"]
            age = m["tessera_host_heartbeat_age_seconds"].get(host=name)
            self.assertIsNotNone(age, name)
            # A host whose last heartbeat is older than its lease would be Lost.
            self.assertLess(age, LEASE_MS / 1000, name)
            self.assertEqual(m["tessera_host_ready"].get(host=name, generation="v6e"), 1)
            util = m["tessera_host_chip_utilization_ratio"].get(host=name, generation="v6e")
            self.assertTrue(0 <= util <= 1, (name, util))
        # The admission of "metered" was observed once; its events were counted.
        lat = m["tessera_admission_latency_seconds"]
        self.assertEqual(lat.type, "histogram")
        self.assertGreaterEqual(lat.get("tessera_admission_latency_seconds_count"), 1)
        placed = m["tessera_events_total"].get(object_kind="trainjob", reason="Placed",
                                               type="Normal")
        self.assertGreaterEqual(placed, 1)
        self.assertEqual(m["tessera_recovery_time_seconds"].type, "histogram")
        # Worker memory shows up on the hosts that run the job (within a few heartbeats).
        busy_hosts = [h["metadata"]["name"] for h in hosts if h["status"]["job"] == "metered"]

        def memory_reported():
            fams = self.scrape()
            return all(fams["tessera_host_memory_bytes"].get(host=n, generation="v6e") > 0
                       for n in busy_hosts)
        wait_for("worker memory in /metrics", memory_reported, timeout=30)
        # A second scrape does not count the same admission again.
        again = self.scrape()["tessera_admission_latency_seconds"]
        self.assertEqual(again.get("tessera_admission_latency_seconds_count"),
                         lat.get("tessera_admission_latency_seconds_count"))
        self.c.request("DELETE", "/api/v1/jobs/metered")
        wait_for("metered gone", lambda: self.c.phase("metered") == "Gone")
        m = self.scrape()
        self.assertEqual(m["tessera_chips_allocated"].get(generation="v6e"), 0)
        self.assertEqual(m["tessera_jobs"].get(phase="Running"), 0)

    def test_events_are_listed_by_the_cli(self):
        out = self.c.cli("get", "events", "--for", "host/slice-000-w0").stdout
        self.assertIn("Registered", out)
        self.assertNotIn("slice-001", out)
        # --watch replays the list, then follows: the first line is an event as JSON.
        follow = subprocess.Popen([TESSERA, "get", "events", "--watch", "-o", "json", "--state-dir",
                                   self.c.state], stdout=subprocess.PIPE, text=True)
        try:
            first = json.loads(follow.stdout.readline())
            self.assertEqual(first["kind"], "Event")
            self.assertIn(first["reason"], ("Registered", "Created", "Placed", "Started"))
        finally:
            follow.kill()
            follow.wait()
            follow.stdout.close()
        # `get -w` follows every kind now (test_cli_apply.test_wait_get_name_and_watch).


if __name__ == "__main__":
    unittest.main()
