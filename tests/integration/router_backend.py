"""A small HTTP backend for the router's integration tests (tests/integration/test_router.py).

Listens on 127.0.0.1, port 0 by default, and prints "PORT <n>" on stdout once listening. Run
as a Service's leader it serves HTTPS only when tessera gives it a certificate
(TESSERA_TLS_CERT, TESSERA_TLS_KEY: examples/serve/tls_serving.py), as a model server would.

  GET  /hello...        200 "<name> <path>" (the path as the backend saw it)
  GET  /slow?id=X       waits until the gate opens (GET /open), then 200 "<name> slow X"
  GET  /stream          text/event-stream, chunked: "data: 1", then waits for GET /open-stream,
                        then "data: 2" and the end
  GET  /state           JSON: the order /slow requests arrived, streams finished, requests seen
  any, with --die-on-request: the process exits at once without answering

Control paths (/open, /open-stream, /state) are meant to be called on the backend directly.
"""
import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "serve"))
import tls_serving  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="backend")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--die-on-request", action="store_true")
    args = parser.parse_args()

    lock = threading.Lock()
    gate = threading.Event()
    stream_gate = threading.Event()
    state = {"slow_order": [], "streams_finished": 0, "requests": 0, "paths": []}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body, content_type="text/plain"):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def chunk(self, text):
            data = text.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def do_GET(self):
            path = self.path
            if path == "/open":
                gate.set()
                return self.reply(200, "open")
            if path == "/open-stream":
                stream_gate.set()
                return self.reply(200, "open")
            if path == "/state":
                with lock:
                    return self.reply(200, json.dumps(state), "application/json")
            if args.die_on_request:
                os._exit(3)
            with lock:
                state["requests"] += 1
                state["paths"].append(path)
            if path.startswith("/slow"):
                request_id = path.split("id=", 1)[-1]
                with lock:
                    state["slow_order"].append(request_id)
                gate.wait(120)
                return self.reply(200, "%s slow %s" % (args.name, request_id))
            if path.startswith("/stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.chunk("data: 1\n\n")
                stream_gate.wait(120)
                self.chunk("data: 2\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                with lock:
                    state["streams_finished"] += 1
                return
            return self.reply(200, "%s %s" % (args.name, path))

    class Server(tls_serving.TlsServerMixin, ThreadingHTTPServer):
        daemon_threads = True

    try:
        tls = tls_serving.context_from_env()
    except ValueError as e:
        print("router_backend:", e, file=sys.stderr, flush=True)
        sys.exit(2)
    server = Server(("127.0.0.1", args.port), Handler)
    server.tls = tls
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
