"""Per-host certificates (issue 33; docs/security.md "Host certificates"), tested as an attacker
would try them: the join token alone, a certificate from another CA, an expired certificate, a
revoked host, host A's certificate speaking for host B, plain HTTP to an agent's log server.
And the renewal: with a 20 s lifetime, every agent renews at 15 s while its workers keep
running. A real head and agents (`tessera up`) on ports from 0.
"""
import json
import os
import re
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from test_cluster import Cluster, job, wait_for

TTL_S = 20  # the head's --host-cert-ttl-s: agents renew at 15 s


def openssl(*args, cwd=None):
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd, timeout=60)


class HostCertsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()
        cls.c.up(extra=("--host-cert-ttl-s", str(TTL_S)))
        with open(os.path.join(cls.c.state, "join.token")) as f:
            cls.join_token = f.read().strip()
        cls.hosts = sorted(h["metadata"]["name"] for h in cls.c.client.list("hosts"))
        cls.tmp = tempfile.mkdtemp(prefix="tessera-host-certs-", dir=cls.c.dir)

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def agent_dir(self, host):
        return os.path.join(self.c.state, "agents", host)

    def host_pem(self, host):
        return os.path.join(self.agent_dir(host), "host.pem")

    def agent_log(self, host):
        with open(os.path.join(self.c.state, "logs", "agent-%s.log" % host)) as f:
            return f.read()

    def credential(self, host):
        """The X-Tessera-Host-Credential header of `host`'s agent."""
        with open(os.path.join(self.agent_dir(host), "credential")) as f:
            return {"X-Tessera-Host-Credential": f.read().strip()}

    def call(self, method, path, body=None, cert=None, token=None, headers=None):
        """(status, parsed body) of a call to the head with `cert` (a PEM file holding the
        certificate and key) and the join token."""
        ctx = ssl.create_default_context(cafile=self.c.ca_file)
        if cert:
            ctx.load_cert_chain(cert)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.c.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + (token or self.join_token))
        req.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def assert_refused(self, method, path, cert, *words, body=None):
        """The call is refused: by the TLS handshake (the head does not accept the
        certificate) or with a 403 naming `words`."""
        try:
            code, answer = self.call(method, path, body, cert=cert)
        except (ssl.SSLError, ConnectionError, urllib.error.URLError) as e:
            return "handshake: %s" % e
        self.assertEqual(code, 403, answer)
        for word in words:
            self.assertIn(word, answer["error"])
        return answer["error"]

    def heartbeat_path(self, host):
        return "/api/v1/agents/%s/heartbeat" % host

    def test_the_certificate_is_private_and_names_its_host(self):
        host = self.hosts[0]
        self.assertEqual(os.stat(self.host_pem(host)).st_mode & 0o777, 0o600)
        p = subprocess.run(["openssl", "x509", "-noout", "-subject", "-ext", "subjectAltName",
                            "-in", self.host_pem(host)], capture_output=True, text=True)
        self.assertIn("CN = host:%s" % host, p.stdout)
        self.assertIn("DNS:%s.host.tessera" % host, p.stdout)

    def test_the_join_token_alone_no_longer_opens_an_agents_calls(self):
        host = self.hosts[0]
        self.assert_refused("POST", self.heartbeat_path(host), None, "client certificate",
                            body={})
        self.assert_refused("GET", "/api/v1/agents/%s/assignments" % host, None,
                            "client certificate")

    def test_host_a_may_not_report_or_read_for_host_b(self):
        a, b = self.hosts[0], self.hosts[1]
        self.assert_refused("POST", self.heartbeat_path(b), self.host_pem(a), a, b, body={})
        self.assert_refused("GET", "/api/v1/agents/%s/assignments" % b, self.host_pem(a), a, b)
        # Nor get B's certificate with A's.
        self.assert_refused("POST", "/api/v1/agents/bootstrap", self.host_pem(a), a, b,
                            body={"name": b, "csr": "x"})
        # Its own assignments (with its host credential too): answered.
        code, answer = self.call("GET", "/api/v1/agents/%s/assignments" % a,
                                 cert=self.host_pem(a), headers=self.credential(a))
        self.assertEqual(code, 200, answer)

    def test_a_certificate_from_another_ca_is_refused(self):
        d = os.path.join(self.tmp, "other-ca")
        os.makedirs(d)
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key", cwd=d)
        openssl("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=evil CA", "-days", "2",
                "-out", "ca.crt", cwd=d)
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "host.key", cwd=d)
        openssl("req", "-new", "-key", "host.key", "-subj", "/O=host/CN=host:%s" % self.hosts[0],
                "-out", "host.csr", cwd=d)
        openssl("x509", "-req", "-in", "host.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "1", "-out", "host.crt", cwd=d)
        pem = os.path.join(d, "host.pem")
        with open(pem, "w") as out:
            for name in ("host.crt", "host.key"):
                with open(os.path.join(d, name)) as f:
                    out.write(f.read())
        why = self.assert_refused("POST", self.heartbeat_path(self.hosts[0]), pem,
                                  "client certificate", body={})
        self.assertTrue(why, "refused")

    def test_an_expired_certificate_is_refused(self):
        # Signed by the cluster CA itself, for the right host, but over a year ago.
        d = os.path.join(self.tmp, "expired")
        os.makedirs(os.path.join(d, "certs"))
        open(os.path.join(d, "index.txt"), "w").close()
        with open(os.path.join(d, "serial"), "w") as f:
            f.write("1000\n")
        with open(os.path.join(d, "ca.cnf"), "w") as f:
            f.write("[ca]\ndefault_ca = c\n[c]\ndatabase = index.txt\nnew_certs_dir = certs\n"
                    "serial = serial\ndefault_md = sha256\npolicy = p\n"
                    "x509_extensions = e\n[p]\ncommonName = supplied\n"
                    "organizationName = optional\n"
                    "[e]\nextendedKeyUsage = clientAuth\nbasicConstraints = CA:FALSE\n")
        host = self.hosts[0]
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "host.key", cwd=d)
        openssl("req", "-new", "-key", "host.key", "-subj", "/O=host/CN=host:%s" % host,
                "-out", "host.csr", cwd=d)
        openssl("ca", "-batch", "-config", "ca.cnf", "-cert", os.path.join(self.c.state, "ca.crt"),
                "-keyfile", os.path.join(self.c.state, "ca.key"), "-in", "host.csr",
                "-startdate", "20240101000000Z", "-enddate", "20240102000000Z",
                "-out", "host.crt", cwd=d)
        pem = os.path.join(d, "host.pem")
        with open(pem, "w") as out:
            for name in ("host.crt", "host.key"):
                with open(os.path.join(d, name)) as f:
                    out.write(f.read())
        self.assert_refused("POST", self.heartbeat_path(host), pem, "client certificate",
                            body={})

    def test_plain_http_to_an_agents_log_server_is_refused(self):
        host = self.hosts[0]
        port = int(re.search(r"agent.log_server_https host=\S+ port=(\d+)",
                             self.agent_log(host)).group(1))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /logs/x/1/0/0 HTTP/1.1\r\nHost: x\r\n\r\n")
            s.settimeout(10)
            try:
                answer = s.recv(4096)
            except (ConnectionError, socket.timeout):
                answer = b""
        # The server's plain-HTTP check (src/net): a 400 saying the port speaks HTTPS only, then
        # the connection is closed; never a log.
        self.assertTrue(answer.startswith(b"HTTP/1.1 400"), answer)
        self.assertIn(b"HTTPS only", answer)

    def test_zz_a_revoked_host_is_refused_until_an_admin_readmits_it(self):
        host = self.hosts[-1]
        pem = self.host_pem(host)
        with open(pem) as f:
            kept = f.read()  # the agent may renew meanwhile: use the certificate it had
        copy = os.path.join(self.tmp, "revoked.pem")
        with open(copy, "w") as f:
            f.write(kept)
        # Deleted once it runs nothing (an earlier test's workers may still be stopping).
        wait_for("host %s deleted" % host,
                 lambda: self.c.cli("delete", "host", host, check=False).returncode == 0,
                 timeout=60, interval=0.5)
        # Its certificate, still within its lifetime, is refused naming the revocation.
        self.assert_refused("POST", self.heartbeat_path(host), copy, "revoked", body={})
        self.assert_refused("GET", "/api/v1/agents/%s/assignments" % host, copy, "revoked")
        # So is a new bootstrap, with the join token.
        self.assert_refused("POST", "/api/v1/agents/bootstrap", None, "revoked",
                            body={"name": host, "csr": "x"})
        # The agent's own calls are refused, and it logs why.
        wait_for("the revoked agent logs why it is refused",
                 lambda: "revoked" in self.agent_log(host), timeout=60)
        self.assertNotIn(host, [h["metadata"]["name"] for h in self.c.client.list("hosts")])
        # An admin lifts the revocation: the agent (its certificate expired meanwhile) gets a
        # new one and registers its host again.
        self.c.cli("delete", "hostrevocation", host)
        wait_for("the readmitted host %s registers again" % host,
                 lambda: host in [h["metadata"]["name"] for h in self.c.client.list("hosts")],
                 timeout=TTL_S * 4 + 60)

    def test_renewal_while_a_worker_keeps_running(self):
        self.c.client.apply(job("renew", ["sh", "-c", "echo started; sleep 600"], slices=1))
        self.c.wait_phase("renew", ["Running"])
        host = self.c.get_job("renew")["status"]["workers"][0]["host"]
        before = self.agent_log(host).count("agent.host_cert_renewed")
        with open(self.host_pem(host)) as f:
            old = f.read()
        wait_for("host %s renews its certificate" % host,
                 lambda: self.agent_log(host).count("agent.host_cert_renewed") > before,
                 timeout=TTL_S * 3)
        with open(self.host_pem(host)) as f:
            self.assertNotEqual(f.read(), old)
        # Past the old certificate's end: the worker ran on, the host stayed Ready, and the head
        # still reads its log over HTTPS (the renewed certificate, verified against the CA).
        wait_for("the old certificate's lifetime is over",
                 lambda: self.agent_log(host).count("agent.host_cert_renewed") > before + 1,
                 timeout=TTL_S * 3)
        self.assertEqual(self.c.phase("renew"), "Running")
        p = self.c.cli("logs", "job", "renew")
        self.assertIn("started", p.stdout)
        self.c.client.request("DELETE", "/api/v1/jobs/renew")


if __name__ == "__main__":
    unittest.main()
