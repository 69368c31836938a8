"""TLS from the router and the head's readiness prober to serving replicas (issue 33;
docs/serving.md "TLS to replicas", docs/security.md "What stays plain"), tested as an attacker
would try it. A real head, agents and router (`tessera up`, on loopback) and serving_backend.py
replicas:

- the leader of a replica group gets a certificate from the head, signed by the cluster CA for
  its endpoint's address and its host's name, in key files only its owner reads; it serves HTTPS
  only (plain HTTP to its port gets 400) and its endpoint says "https";
- the head's probes reach it (it becomes ready) and the router's requests reach it over TLS
  (the backend reports the TLS version of the connection it received), streams included;
- the key reaches no log, `describe`, event or the store, and another host's certificate cannot
  read the leader's assignment;
- plain HTTP to the router's HTTPS port gets a clear 400;
- under `up --replicas-plain-http` head and router log event=replicas_plain_http, replicas get
  no certificate and serve plain HTTP, and requests still flow.

The binary comes from $TESSERA_BIN.
"""
import glob
import http.client
import json
import os
import socket
import ssl
import unittest
import urllib.error
import urllib.request

from test_cluster import heartbeat_ms, wait_for
from test_serving_e2e import ServingCluster, completion, router_call, service


def plain_http(port, path="/healthz", timeout=30):
    """(status, body) of a plain-HTTP GET at 127.0.0.1:`port`; (None, why) when the connection
    ends without an HTTP answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as e:
        return None, repr(e)
    finally:
        conn.close()


class ReplicaTlsCluster(ServingCluster):
    def up(self, extra=()):
        self.cli("up", "--generation", "v6e", "--topology", "2x4", "--slices", "2",
                 "--heartbeat-ms", heartbeat_ms(6000), "--lease-ms", "6000", "--timeout", "120", *extra)
        with open(os.path.join(self.state, "admin.token")) as f:
            self.token = f.read().strip()
        self.reload_port()
        from test_cluster import Router
        self.router = Router(self.state)

    def log(self, name):
        with open(os.path.join(self.state, "logs", name)) as f:
            return f.read()

    def ready_endpoint(self, name):
        status, svc = self.request("GET", "/api/v1/services/" + name)
        if status != 200:
            return None
        ready = [e for e in svc["status"]["endpoints"] if e["ready"]]
        return ready[0] if ready else None

    def leader_host(self, name):
        status, svc = self.request("GET", "/api/v1/services/" + name)
        return svc["status"]["roles"][0]["replicas"][0]["processes"][0]["host"]


class ReplicaTlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = ReplicaTlsCluster()
        cls.c.up()
        status, body = cls.c.request("POST", "/api/v1/apply", service("tls", 1))
        assert status in (200, 201), body
        cls.endpoint = wait_for("the replica ready", lambda: cls.c.ready_endpoint("tls"),
                                timeout=120)
        cls.host = cls.c.leader_host("tls")
        cls.hosts = sorted(h["metadata"]["name"] for h in cls.c.client.list("hosts"))

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def test_the_leader_serves_https_with_a_certificate_from_the_cluster_ca_naming_its_host(self):
        self.assertEqual(self.endpoint["scheme"], "https")
        address, port = self.endpoint["address"], self.endpoint["port"]
        ctx = ssl.create_default_context(cafile=self.c.ca_file)
        with socket.create_connection((address, port), timeout=30) as raw:
            with ctx.wrap_socket(raw, server_hostname=address) as tls:
                cert = tls.getpeercert()
                self.assertIn(tls.version(), ("TLSv1.2", "TLSv1.3"))
        names = {v for _, v in cert["subjectAltName"]}
        self.assertIn(address, names)
        self.assertIn("%s.host.tessera" % self.host, names)
        # Another CA's client (the system's) does not trust it: it is the cluster CA's.
        with socket.create_connection((address, port), timeout=30) as raw:
            with self.assertRaises(ssl.SSLError):
                ssl.create_default_context().wrap_socket(raw, server_hostname=address)
        # Plain HTTP to the replica's port: a clear 400, not a hang or a bare close.
        status, text = plain_http(port)
        self.assertEqual(status, 400, text)
        self.assertIn("HTTPS only", text)

    def test_the_key_files_are_the_owners_only_and_followers_and_logs_have_none(self):
        keys = glob.glob(os.path.join(self.c.state, "agents", "*", "tls", "tls.*", "*", "*",
                                      "worker-*.key"))
        self.assertEqual(len(keys), 1, keys)
        self.assertIn(os.sep + self.host + os.sep, keys[0])
        folder = os.path.dirname(keys[0])
        for name in os.listdir(folder):
            self.assertEqual(os.stat(os.path.join(folder, name)).st_mode & 0o777, 0o600, name)
        with open(keys[0]) as f:
            key = f.read()
        self.assertIn("PRIVATE KEY", key)
        secret = key.strip().splitlines()[1]  # a line of the key's base64
        # Not in a log, `describe`, the Service's document, events or the store.
        logs = "".join(self.c.log(n) for n in os.listdir(os.path.join(self.c.state, "logs"))
                       if os.path.isfile(os.path.join(self.c.state, "logs", n)))
        self.assertNotIn(secret, logs)
        self.assertNotIn("PRIVATE KEY", logs)
        described = self.c.cli("describe", "service", "tls").stdout
        self.assertIn("tls", described)
        _, svc = self.c.request("GET", "/api/v1/services/tls")
        _, events = self.c.request("GET", "/api/v1/events")
        for text in (described, json.dumps(svc), json.dumps(events)):
            self.assertNotIn("PRIVATE KEY", text)
        stored = glob.glob(os.path.join(self.c.state, "tessera.db*"))
        self.assertTrue(stored)
        for path in stored:
            with open(path, "rb") as f:
                self.assertNotIn(b"PRIVATE KEY", f.read(), path)

    def assignments(self, host, cert_host):
        """(status, body) of GET host's assignments with cert_host's certificate and host
        credential, as cert_host's agent would call."""
        agent_dir = os.path.join(self.c.state, "agents", cert_host)
        ctx = ssl.create_default_context(cafile=self.c.ca_file)
        ctx.load_cert_chain(os.path.join(agent_dir, "host.pem"))
        with open(os.path.join(self.c.state, "join.token")) as f:
            token = f.read().strip()
        with open(os.path.join(agent_dir, "credential")) as f:
            credential = f.read().strip()
        req = urllib.request.Request(self.c.url + "/api/v1/agents/%s/assignments" % host)
        req.add_header("Authorization", "Bearer " + token)
        req.add_header("X-Tessera-Host-Credential", credential)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def test_only_the_leaders_host_reads_its_certificate(self):
        status, text = self.assignments(self.host, self.host)
        self.assertEqual(status, 200, text)
        leaders = [a for a in json.loads(text)["assignments"] if "tls" in a]
        self.assertEqual(len(leaders), 1, text[:500])
        self.assertIn("PRIVATE KEY", leaders[0]["tls"]["key"])
        other = [h for h in self.hosts if h != self.host][0]
        status, text = self.assignments(self.host, other)
        self.assertEqual(status, 403, text)
        self.assertIn(other, text)
        self.assertNotIn("PRIVATE KEY", text)
        # The other host's own assignments carry no certificate.
        status, text = self.assignments(other, other)
        self.assertEqual(status, 200, text)
        self.assertNotIn("PRIVATE KEY", text)

    def test_the_routers_requests_reach_the_replica_over_tls(self):
        status, text = router_call(self.c.router, "GET", "/services/tls/whoami")
        self.assertEqual(status, 200, text)
        self.assertIn(json.loads(text)["tls"], ("TLSv1.2", "TLSv1.3"))
        for _ in range(3):  # kept-alive TLS connections from the router's pool
            ok, what = completion(self.c.router, "tls", tokens=8)
            self.assertTrue(ok, what)
        self.assertIn("event=replicas_tls", self.c.log("router.log"))
        self.assertNotIn("event=replicas_plain_http", self.c.log("router.log"))

    def test_plain_http_to_the_routers_https_port_gets_a_clear_400(self):
        self.assertEqual(self.c.router.scheme, "https")
        status, text = plain_http(self.c.router.port, "/services/tls/whoami")
        self.assertEqual(status, 400, text)
        self.assertIn("HTTPS only", text)
        # ... and the router goes on serving HTTPS.
        self.assertEqual(router_call(self.c.router, "GET", "/services/tls/whoami")[0], 200)


class ReplicasPlainHttpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = ReplicaTlsCluster()
        cls.c.up(extra=("--replicas-plain-http",))

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def test_replicas_serve_plain_http_and_head_and_router_say_so(self):
        self.assertIn("event=replicas_plain_http", self.c.log("head.log"))
        self.assertIn("event=replicas_plain_http", self.c.log("router.log"))
        status, body = self.c.request("POST", "/api/v1/apply", service("plain", 1))
        self.assertIn(status, (200, 201), body)
        endpoint = wait_for("the replica ready", lambda: self.c.ready_endpoint("plain"),
                            timeout=120)
        self.assertEqual(endpoint["scheme"], "http")
        status, text = plain_http(endpoint["port"], "/whoami")
        self.assertEqual(status, 200, text)
        self.assertIsNone(json.loads(text)["tls"])
        status, text = router_call(self.c.router, "GET", "/services/plain/whoami")
        self.assertEqual(status, 200, text)
        self.assertIsNone(json.loads(text)["tls"])
        ok, what = completion(self.c.router, "plain", tokens=8)
        self.assertTrue(ok, what)
        self.assertEqual(glob.glob(os.path.join(self.c.state, "agents", "*", "tls")), [])


if __name__ == "__main__":
    unittest.main()
