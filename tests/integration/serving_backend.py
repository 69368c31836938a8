"""A fast fake model server for Service tests and benchmarks (tests/integration/
test_serving_e2e.py, bench/serving/failures.py): what examples/serve/server.py looks like from
outside, without the model.

Run as every process of a replica group, as tessera runs it: the leader (TESSERA_WORKER_INDEX
0, or unset) serves HTTP on $PORT; followers only wait. Standard library only.

  GET  /healthz           200
  GET  /whoami            JSON: replica, generation marker ($VERSION), pid, port, and "tls": the
                          TLS version of the connection it came on ("TLSv1.3"), null if plain
  POST /v1/completions    {"max_tokens": N, "stream": true}: N chunks of one token each,
                          --token-ms apart, then a usage chunk and `data: [DONE]` (the shape
                          bench/serving/loadgen.py reads); without "stream", one JSON answer.
                          As a decode role (TESSERA_KV_ROLE=decode) it answers a request that
                          names a prefill replica (X-Tessera-Prefill) with X-Tessera-Prefilled:
                          remote, moving no KV (the real handoff is examples/serve's)
  GET  /hold?id=X         touches $HOLD_DIR/held-<replica>-<pid>-<X>, then answers only once
                          $HOLD_DIR/release exists (polled; 120 s at most): a request held
                          before its first byte, for the tests of the router's retry and of
                          load-driven autoscaling

With TESSERA_TLS_CERT and TESSERA_TLS_KEY (a leader tessera gave a certificate) it serves HTTPS
only, as examples/serve/server.py does (examples/serve/tls_serving.py): plain HTTP gets 400.

SIGTERM (a group scaled down or replaced): the listening socket is closed at once, a request
arriving on a connection still open is closed unanswered (a router retries it), requests in
flight finish, then the process exits 0, so a graceful stop fails no request. A follower exits
0 on SIGTERM.
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "serve"))
import tls_serving  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--token-ms", type=float, default=2.0, help="delay between tokens")
    args = parser.parse_args()

    worker = int(os.environ.get("TESSERA_WORKER_INDEX", "0"))
    if worker != 0:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            signal.pause()

    replica = os.environ.get("TESSERA_REPLICA", "?")
    version = os.environ.get("VERSION", "")
    hold_dir = os.environ.get("HOLD_DIR", "")
    decode = os.environ.get("TESSERA_KV_ROLE") == "decode"
    port = int(os.environ["PORT"])
    lock = threading.Lock()
    in_flight = [0]
    idle = threading.Condition(lock)
    stopping = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body, content_type="application/json"):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def counted(self, handler):
            if stopping.is_set():
                # Draining: a request on a connection still open is closed without a byte of
                # answer, so a router retries it on another replica.
                self.close_connection = True
                return
            with lock:
                in_flight[0] += 1
            try:
                handler()
            finally:
                with lock:
                    in_flight[0] -= 1
                    idle.notify_all()

        def do_GET(self):
            self.counted(self.get)

        def do_POST(self):
            self.counted(self.post)

        def get(self):
            if self.path == "/healthz":
                return self.reply(200, "ok\n", "text/plain")
            if self.path == "/whoami":
                return self.reply(200, json.dumps({
                    "replica": replica, "version": version, "pid": os.getpid(), "port": port,
                    "tls": tls_serving.tls_version(self.connection)}))
            if self.path.startswith("/hold"):
                request_id = self.path.split("id=", 1)[-1]
                open(os.path.join(hold_dir, "held-%s-%d-%s" % (replica, os.getpid(),
                                                               request_id)), "w").close()
                deadline = time.monotonic() + 120
                while not os.path.exists(os.path.join(hold_dir, "release")):
                    if time.monotonic() > deadline:
                        return self.reply(504, '{"error": "never released"}')
                    time.sleep(0.02)
                return self.reply(200, json.dumps({"replica": replica, "version": version,
                                                   "pid": os.getpid(), "id": request_id}))
            return self.reply(404, '{"error": "not found"}')

        def post(self):
            length = int(self.headers.get("Content-Length", "0"))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self.reply(400, '{"error": "the body is not JSON"}')
            if self.path != "/v1/completions":
                return self.reply(404, '{"error": "not found"}')
            tokens = max(1, int(body.get("max_tokens", 16)))
            if not body.get("stream"):
                time.sleep(tokens * args.token_ms / 1000.0)
                return self.reply(200, json.dumps({
                    "choices": [{"text": "x" * tokens, "index": 0}],
                    "usage": {"completion_tokens": tokens}, "replica": replica}))
            self.send_response(200)
            if decode and self.headers.get("X-Tessera-Prefill"):
                self.send_header("X-Tessera-Prefilled", "remote")
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def chunk(event):
                data = ("data: %s\n\n" % event).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            for _ in range(tokens):
                time.sleep(args.token_ms / 1000.0)
                chunk(json.dumps({"choices": [{"text": "x", "index": 0}], "replica": replica}))
            chunk(json.dumps({"choices": [], "usage": {"completion_tokens": tokens}}))
            chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    # SERVING_BACKEND_BIND=0.0.0.0 in a host's network namespace (docs/netns.md): every address
    # of that namespace, which is the host's own.
    class Server(tls_serving.TlsServerMixin, ThreadingHTTPServer):
        daemon_threads = True

    try:
        tls = tls_serving.context_from_env()
    except ValueError as e:
        print("serving_backend:", e, file=sys.stderr, flush=True)
        sys.exit(2)
    server = Server((os.environ.get("SERVING_BACKEND_BIND", "127.0.0.1"), port), Handler)
    server.tls = tls
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("serving on", port, "replica", replica, "version", version,
          "scheme", "https" if tls else "http", flush=True)
    while not stopping.wait(1.0):
        pass
    # Drain: no new connections, the ones in flight finish.
    server.shutdown()
    server.socket.close()
    with lock:
        idle.wait_for(lambda: in_flight[0] == 0, timeout=60)
    print("drained", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
