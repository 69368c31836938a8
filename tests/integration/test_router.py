"""End-to-end tests of `tessera router` with real backend processes (router_backend.py) on
loopback ports from 0: streaming pass-through, retry after a replica dies before answering,
FIFO queueing and 503 + Retry-After past the bound, /metrics, and the head link (a fake head
serving the watch API and taking load reports; the router keeps routing while it is down and
resumes watching when it is back).

The binary comes from $TESSERA_BIN (scripts/test.sh points it at the dev build). Every wait
polls a condition with a deadline; nothing sleeps to wait for an event.
"""
import http.client
import json
import os
import queue
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESSERA = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "dev", "bin", "tessera"))
BACKEND = os.path.join(os.path.dirname(os.path.abspath(__file__)), "router_backend.py")
PYTHON = "/usr/bin/python3"


def wait_for(what, fn, timeout=30.0, interval=0.02):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %.0f s waiting for %s (last: %r)" % (timeout, what, last))


def get(port, path, timeout=30.0):
    """(status, headers dict lower-case, body text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        conn.close()


def metric(text, name, **labels):
    """The value of one sample in Prometheus text, or None."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(got.get(k) == str(v) for k, v in labels.items()):
            return float(m.group(4))
    return None


class Backend:
    def __init__(self, name, *extra):
        self.proc = subprocess.Popen([PYTHON, BACKEND, "--name", name, *extra],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            raise AssertionError("backend %s did not start: %r" % (name, line))
        self.port = int(line.split()[1])

    def state(self):
        return json.loads(get(self.port, "/state")[2])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


class Router:
    """`tessera router` with `args`; plain HTTP on its port unless they give --tls-cert-file."""

    def __init__(self, tmp, *args):
        self.info = os.path.join(tmp, "router-%d.json" % time.monotonic_ns())
        self.log = open(os.path.join(tmp, "router.log"), "ab")
        plain = [] if "--tls-cert-file" in args else ["--plain-http"]
        self.proc = subprocess.Popen([TESSERA, "router", "--port", "0", "--info-file", self.info,
                                      *plain, *args], stdout=self.log, stderr=self.log)
        info = wait_for("the router's info file", lambda: self._read_info(), timeout=60)
        self.port = info["port"]

    def _read_info(self):
        if self.proc.poll() is not None:
            raise AssertionError("tessera router exited with %d; see %s" %
                                 (self.proc.returncode, self.log.name))
        try:
            with open(self.info) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def metrics(self):
        status, _, body = get(self.port, "/metrics")
        assert status == 200, body
        return body

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def static_file(tmp, services):
    path = os.path.join(tmp, "endpoints-%d.json" % time.monotonic_ns())
    with open(path, "w") as f:
        json.dump({"services": services}, f)
    return path


def endpoints(*backends):
    return [{"address": "127.0.0.1", "port": b.port, "replica": i} for i, b in enumerate(backends)]


class RouterTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tessera-router-")
        self.cleanup = []

    def tearDown(self):
        for fn in reversed(self.cleanup):
            fn()

    def backend(self, name, *extra):
        b = Backend(name, *extra)
        self.cleanup.append(b.stop)
        return b

    def router(self, *args):
        r = Router(self.tmp, *args)
        self.cleanup.append(r.stop)
        return r

    def test_routes_by_prefix_and_default_and_names_unknown_services(self):
        a, b = self.backend("a"), self.backend("b")
        path = static_file(self.tmp, [{"name": "alpha", "endpoints": endpoints(a)},
                                      {"name": "beta", "endpoints": endpoints(b)}])
        r = self.router("--static-endpoints", path, "--default-service", "beta")
        self.assertEqual(get(r.port, "/services/alpha/hello?x=1")[2], "a /hello?x=1")
        self.assertEqual(get(r.port, "/services/alpha")[2], "a /")
        self.assertEqual(get(r.port, "/hello")[2], "b /hello")
        status, _, body = get(r.port, "/services/gamma/hello")
        self.assertEqual(status, 404)
        self.assertIn("gamma", body)
        self.assertIn("alpha", body)  # the known services are listed
        self.assertEqual(get(r.port, "/healthz")[0], 200)

    def test_stream_chunks_arrive_before_the_backend_finishes(self):
        a = self.backend("a")
        r = self.router("--static-endpoints", static_file(self.tmp, [
            {"name": "llm", "endpoints": endpoints(a)}]))
        s = socket.create_connection(("127.0.0.1", r.port), timeout=30)
        self.cleanup.append(s.close)
        s.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while b"data: 1" not in received:
            data = s.recv(4096)
            self.assertTrue(data, "the router closed the stream early: %r" % received)
            received += data
        # The backend is still holding its stream open: the chunk was not buffered.
        self.assertEqual(a.state()["streams_finished"], 0)
        self.assertIn(b"text/event-stream", received)
        self.assertNotIn(b"data: 2", received)
        get(a.port, "/open-stream")
        while not received.endswith(b"0\r\n\r\n"):
            data = s.recv(4096)
            self.assertTrue(data, "stream ended without its last chunk: %r" % received)
            received += data
        self.assertIn(b"data: 2", received)
        self.assertEqual(a.state()["streams_finished"], 1)
        text = r.metrics()
        self.assertEqual(metric(text, "tessera_router_requests_total", service="llm", code=200), 1)
        self.assertEqual(metric(text, "tessera_router_time_to_first_byte_seconds_count",
                                service="llm", stream="true"), 1)

    def test_a_replica_that_dies_before_answering_is_retried_on_another(self):
        dying = self.backend("dying", "--die-on-request")
        good = self.backend("good")
        r = self.router("--static-endpoints", static_file(self.tmp, [
            {"name": "svc", "endpoints": endpoints(dying, good)}]))
        for i in range(8):
            status, _, body = get(r.port, "/hello/%d" % i)
            self.assertEqual((status, body), (200, "good /hello/%d" % i))
        # The dying replica took at least one request (it exited) and every request succeeded.
        wait_for("the dying backend to exit", lambda: dying.proc.poll() is not None, timeout=10)
        text = r.metrics()
        self.assertGreaterEqual(metric(text, "tessera_router_retries_total", service="svc"), 1)
        self.assertEqual(metric(text, "tessera_router_requests_total", service="svc", code=200), 8)
        self.assertIsNone(metric(text, "tessera_router_requests_total", service="svc", code=502))

    def test_full_replicas_queue_in_fifo_order_then_503_with_retry_after(self):
        a = self.backend("a")
        r = self.router("--static-endpoints", static_file(self.tmp, [
            {"name": "svc", "maxOngoingRequests": 1, "endpoints": endpoints(a)}]),
            "--max-queued", "3")
        results = {}

        def call(i):
            results[i] = get(r.port, "/slow?id=%d" % i, timeout=60)

        threads = []
        for i in range(4):
            t = threading.Thread(target=call, args=(i,))
            t.start()
            threads.append(t)
            # One at a time, so the arrival order at the router is 0, 1, 2, 3.
            if i == 0:
                wait_for("request 0 at the backend", lambda: a.state()["slow_order"] == ["0"])
            else:
                wait_for("%d queued" % i, lambda: metric(r.metrics(), "tessera_router_queued",
                                                         service="svc") == i)
        status, headers, body = get(r.port, "/slow?id=4")
        self.assertEqual(status, 503, body)
        self.assertEqual(headers.get("retry-after"), "1")
        self.assertIn("queue is full", body)
        self.assertEqual(metric(r.metrics(), "tessera_router_in_flight", service="svc",
                                replica=0), 1)
        get(a.port, "/open")
        for t in threads:
            t.join(timeout=60)
        self.assertEqual(a.state()["slow_order"], ["0", "1", "2", "3"])
        for i in range(4):
            self.assertEqual(results[i][0], 200)
            self.assertEqual(results[i][2], "a slow %d" % i)
        text = r.metrics()
        self.assertEqual(metric(text, "tessera_router_requests_total", service="svc", code=200), 4)
        self.assertEqual(metric(text, "tessera_router_requests_total", service="svc", code=503), 1)
        self.assertEqual(metric(text, "tessera_router_errors_total", service="svc",
                                reason="queue_full"), 1)
        self.assertEqual(metric(text, "tessera_router_queued", service="svc"), 0)

    def test_queue_timeout_answers_503(self):
        a = self.backend("a")
        r = self.router("--static-endpoints", static_file(self.tmp, [
            {"name": "svc", "maxOngoingRequests": 1, "endpoints": endpoints(a)}]),
            "--queue-timeout-ms", "200")
        holder = threading.Thread(target=get, args=(r.port, "/slow?id=0"))
        holder.start()
        self.cleanup.append(lambda: (get(a.port, "/open"), holder.join(60)))
        wait_for("request 0 at the backend", lambda: a.state()["slow_order"] == ["0"])
        status, headers, body = get(r.port, "/slow?id=1")
        self.assertEqual(status, 503)
        self.assertEqual(headers.get("retry-after"), "1")
        self.assertIn("200 ms", body)

    def test_https_port_with_a_certificate_of_the_cluster_ca(self):
        # The CA and a server certificate for 127.0.0.1 it signed, as a head makes them at its
        # first start (api/head_tls.h); the router presents that certificate.
        state = os.path.join(self.tmp, "head")
        os.makedirs(state)
        head = subprocess.Popen([TESSERA, "head", "--state-dir", state, "--port", "0"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for("the head's certificate", lambda: os.path.exists(
                os.path.join(state, "head.json")), timeout=60)
        finally:
            head.terminate()
            head.wait(timeout=30)
        a = self.backend("a")
        path = static_file(self.tmp, [{"name": "alpha", "endpoints": endpoints(a)}])
        r = self.router("--static-endpoints", path,
                        "--tls-cert-file", os.path.join(state, "server.crt"),
                        "--tls-key-file", os.path.join(state, "server.key"))
        with open(r.info) as f:
            self.assertEqual(json.load(f)["scheme"], "https")
        context = ssl.create_default_context(cafile=os.path.join(state, "ca.crt"))
        for _ in range(2):  # a second request on the kept-alive TLS connection
            conn = http.client.HTTPSConnection("127.0.0.1", r.port, timeout=30, context=context)
            conn.request("GET", "/services/alpha/hello")
            response = conn.getresponse()
            self.assertEqual((response.status, response.read().decode()), (200, "a /hello"))
            conn.request("GET", "/services/alpha/again")
            response = conn.getresponse()
            self.assertEqual((response.status, response.read().decode()), (200, "a /again"))
            conn.close()
        # Plain HTTP to the HTTPS port gets a plain 400 saying so, and reaches no replica; a
        # client that does not trust the cluster CA gets no answer.
        status, headers, text = get(r.port, "/services/alpha/hello", timeout=10)
        self.assertEqual(status, 400, text)
        self.assertIn("HTTPS only", text)
        self.assertEqual(headers.get("connection"), "close")
        with self.assertRaises(ssl.SSLError):
            conn = http.client.HTTPSConnection("127.0.0.1", r.port, timeout=10,
                                               context=ssl.create_default_context())
            try:
                conn.request("GET", "/healthz")
            finally:
                conn.close()
        self.assertEqual(a.state()["requests"], 4)  # the refused clients reached no replica

    def test_wrong_flags_are_named(self):
        def run(*args):
            return subprocess.run([TESSERA, "router", *args], capture_output=True, text=True,
                                  timeout=60)

        p = run("--port", "0")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--static-endpoints", p.stderr)
        empty = static_file(self.tmp, [])
        p = run("--static-endpoints", empty)  # neither a certificate nor --plain-http
        self.assertEqual(p.returncode, 2)
        self.assertIn("--tls-cert-file and --tls-key-file", p.stderr)
        p = run("--static-endpoints", empty, "--plain-http", "--tls-cert-file", "x")
        self.assertIn("--plain-http: conflicts", p.stderr)
        p = run("--static-endpoints", empty, "--tls-cert-file", "/nonexistent.crt",
                "--tls-key-file", "/nonexistent.key")
        self.assertEqual(p.returncode, 1)
        self.assertIn("/nonexistent", p.stderr)
        p = run("--head", "127.0.0.1:1", "--token-file", "/dev/null")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--head", p.stderr)
        p = run("--head", "http://127.0.0.1:1")
        self.assertIn("--token-file", p.stderr)
        bad = os.path.join(self.tmp, "bad.json")
        with open(bad, "w") as f:
            f.write('{"services": [{"name": "a", "endpoints": [{"address": "h"}]}]}')
        p = run("--static-endpoints", bad)
        self.assertEqual(p.returncode, 2)
        self.assertIn("services[0].endpoints[0].port", p.stderr)


class FakeHead:
    """The head's Service API as the router uses it: list, watch, load reports."""

    def __init__(self, token, port=0):
        self.token = token
        self.services = {}
        self.loads = []
        self.watchers = []
        self.lock = threading.Lock()
        head = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def authorized(self):
                if self.headers.get("Authorization") == "Bearer " + head.token:
                    return True
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return False

            def do_GET(self):
                if not self.authorized():
                    return
                if self.path == "/api/v1/services?allNamespaces=true":
                    with head.lock:
                        body = json.dumps({"items": list(head.services.values())}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if self.path == "/api/v1/services?watch=true&allNamespaces=true":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-ndjson")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    q = queue.Queue()
                    with head.lock:
                        for svc in head.services.values():
                            q.put({"type": "ADDED", "object": svc})
                        head.watchers.append(q)
                    while True:
                        event = q.get()
                        if event is None:
                            return
                        data = (json.dumps(event) + "\n").encode()
                        try:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                            self.wfile.flush()
                        except OSError:
                            return
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                if not self.authorized():
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                m = re.match(r"^/api/v1/services/([^/]+)/load$", self.path)
                if m:
                    with head.lock:
                        head.loads.append((m.group(1), json.loads(body)))
                self.send_response(200 if m else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def put(self, service):
        with self.lock:
            self.services[service["metadata"]["name"]] = service
            for q in self.watchers:
                q.put({"type": "MODIFIED", "object": service})

    def stop(self):
        with self.lock:
            for q in self.watchers:
                q.put(None)
            self.watchers = []
        self.server.shutdown()
        self.server.server_close()


def service_doc(name, *backends, ready=True):
    return {
        "apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"roles": [{"name": "server", "maxOngoingRequests": 2}]},
        "status": {"phase": "Ready", "endpoints": [
            {"role": "server", "replica": i, "generation": 1, "address": "127.0.0.1",
             "port": b.port, "ready": ready} for i, b in enumerate(backends)]},
    }


class RouterHeadLinkTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tessera-router-head-")
        self.cleanup = []

    def tearDown(self):
        for fn in reversed(self.cleanup):
            fn()

    def test_learns_endpoints_reports_load_and_survives_the_head_going_away(self):
        a = Backend("a")
        self.cleanup.append(a.stop)
        b = Backend("b")
        self.cleanup.append(b.stop)
        token = os.path.join(self.tmp, "admin.token")
        with open(token, "w") as f:
            f.write("secret\n")
        head = FakeHead("secret")
        head.put(service_doc("llm", a))
        r = Router(self.tmp, "--head", "http://127.0.0.1:%d" % head.port, "--token-file", token)
        self.cleanup.append(r.stop)

        wait_for("the router to learn llm", lambda: get(r.port, "/hello")[2] == "a /hello")
        # A watch event moves the service to b.
        head.put(service_doc("llm", b))
        wait_for("the router to follow the watch", lambda: get(r.port, "/hello")[2] == "b /hello")
        # Load reports arrive in the contract's shape.
        report = wait_for("a load report", lambda: head.loads and head.loads[-1])
        self.assertEqual(report[0], "llm")
        self.assertEqual(set(report[1]), {"timeMs", "role", "ongoingRequests", "queued",
                                          "perReplica", "requests", "latencySecondsSum", "refused",
                                          "latencyBuckets"})
        self.assertEqual(report[1]["role"], "server")
        self.assertEqual(report[1]["perReplica"], {"0": 0})
        self.assertEqual(metric(r.metrics(), "tessera_router_head_connected"), 1)

        # The head goes away: requests keep flowing on the last view.
        head.stop()
        wait_for("the router to notice", lambda: metric(r.metrics(),
                                                        "tessera_router_head_connected") == 0)
        for i in range(5):
            self.assertEqual(get(r.port, "/x%d" % i)[2], "b /x%d" % i)

        # Back on the same port, with a changed view: the router resumes watching.
        head2 = FakeHead("secret", port=head.port)
        self.cleanup.append(head2.stop)
        head2.put(service_doc("llm", a))
        wait_for("the router to resume", lambda: get(r.port, "/back")[2] == "a /back", timeout=60)
        self.assertEqual(metric(r.metrics(), "tessera_router_head_connected"), 1)


if __name__ == "__main__":
    unittest.main()
