"""tls_serving.py: HTTPS for a replica's server when tessera gives it a certificate. A real
ThreadingHTTPServer on loopback with certificates made by the openssl command line.

Run: /usr/bin/python3 -m unittest discover -s examples/serve -v
"""

import http.client
import http.server
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import unittest
import warnings

import tls_serving


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd, timeout=60)


def make_certs(folder, cn):
    """ca.crt, and server.crt / server.key signed by it for 127.0.0.1."""
    if not os.path.exists(os.path.join(folder, "ca.crt")):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=test CA", "-days", "1",
                cwd=folder)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "server.key.new", "-out", "server.csr", "-subj", "/CN=" + cn, cwd=folder)
    with open(os.path.join(folder, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt.new", "-days", "1", "-extfile", "san.ext",
            cwd=folder)
    # Replaced as the agent replaces them: each file atomically.
    os.replace(os.path.join(folder, "server.key.new"), os.path.join(folder, "server.key"))
    os.replace(os.path.join(folder, "server.crt.new"), os.path.join(folder, "server.crt"))


class Hello(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = (tls_serving.tls_version(self.connection) or "plain").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(tls_serving.TlsServerMixin, http.server.ThreadingHTTPServer):
    daemon_threads = True


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl command")
class TlsServingTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tls-serving-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        make_certs(self.dir, "first")
        self.env = {"TESSERA_TLS_CERT": os.path.join(self.dir, "server.crt"),
                    "TESSERA_TLS_KEY": os.path.join(self.dir, "server.key")}

    def serve(self, tls):
        server = Server(("127.0.0.1", 0), Hello)
        server.tls = tls
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return server.server_address[1]

    def https_get(self, port):
        ctx = ssl.create_default_context(cafile=os.path.join(self.dir, "ca.crt"))
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ctx)
        try:
            conn.request("GET", "/")
            r = conn.getresponse()
            return r.status, r.read().decode(), conn.sock.getpeercert()
        finally:
            conn.close()

    def test_without_the_variables_it_stays_plain(self):
        self.assertIsNone(tls_serving.context_from_env({}))
        port = self.serve(None)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/")
        self.assertEqual(conn.getresponse().read(), b"plain")
        conn.close()

    def test_one_variable_alone_or_a_bad_file_is_named(self):
        with self.assertRaisesRegex(ValueError, "TESSERA_TLS_CERT and TESSERA_TLS_KEY"):
            tls_serving.context_from_env({"TESSERA_TLS_CERT": self.env["TESSERA_TLS_CERT"]})
        with self.assertRaisesRegex(ValueError, "cannot load"):
            tls_serving.context_from_env({"TESSERA_TLS_CERT": self.env["TESSERA_TLS_KEY"],
                                          "TESSERA_TLS_KEY": self.env["TESSERA_TLS_KEY"]})

    def test_serves_https_and_refuses_plain_http_with_400(self):
        port = self.serve(tls_serving.context_from_env(self.env))
        status, body, _ = self.https_get(port)
        self.assertEqual(status, 200)
        self.assertIn(body, ("TLSv1.2", "TLSv1.3"))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/")
        r = conn.getresponse()
        self.assertEqual(r.status, 400)
        self.assertIn(b"HTTPS only", r.read())
        conn.close()
        # TLS 1.1 is refused.
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.load_verify_locations(os.path.join(self.dir, "ca.crt"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # that is the point
            old.maximum_version = ssl.TLSVersion.TLSv1_1
        with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
            with self.assertRaises((ssl.SSLError, OSError)):
                old.wrap_socket(raw, server_hostname="127.0.0.1")
        # A client that connects and says nothing holds up no one else.
        idle = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.addCleanup(idle.close)
        self.assertEqual(self.https_get(port)[0], 200)

    def test_a_replaced_certificate_serves_the_connections_after(self):
        port = self.serve(tls_serving.context_from_env(self.env))
        first = dict(x[0] for x in self.https_get(port)[2]["subject"])["commonName"]
        self.assertEqual(first, "first")
        make_certs(self.dir, "renewed")
        second = dict(x[0] for x in self.https_get(port)[2]["subject"])["commonName"]
        self.assertEqual(second, "renewed")


if __name__ == "__main__":
    unittest.main()
