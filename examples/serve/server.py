#!/usr/bin/env python3
"""tessera's example model server: a small causal transformer behind an OpenAI-compatible API.

  POST /v1/completions  prompt, max_tokens, temperature, stream, seed (completions.py); with
                        "stream": true a text/event-stream of `data: {...}` chunks, one HTTP
                        chunk per token, flushed as it is made, ending in `data: [DONE]`
  GET  /healthz         200 once the model is built and every process of the group joined,
                        503 before (and after the group failed)
  GET  /v1/models       the one model served

One replica is a group of TESSERA_GROUP_SIZE processes (one per host of the slice), tensor-
parallel over torch.distributed gloo at MASTER_ADDR:MASTER_PORT; TESSERA_WORKER_INDEX 0, the
leader, serves HTTP on PORT and drives the others (engine.py). A group of one does not use
torch.distributed. Weights come from --seed (model.py): every replica of a Service computes the
same function. Concurrent requests are batched: new requests are prefilled between decode
steps, and one decode step serves every running sequence (up to --max-batch; more wait in
arrival order, up to --max-queue, then 503).

Run one process:  /usr/bin/python3 examples/serve/server.py --port 8000
Run a group of 2 by hand (two shells):
  TESSERA_GROUP_SIZE=2 TESSERA_WORKER_INDEX=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 PORT=8000 \
      /usr/bin/python3 examples/serve/server.py
  TESSERA_GROUP_SIZE=2 TESSERA_WORKER_INDEX=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 PORT=8001 \
      /usr/bin/python3 examples/serve/server.py

HTTPS: when tessera gives the leader a certificate (TESSERA_TLS_CERT, TESSERA_TLS_KEY, signed
by the cluster CA for the host's address; docs/serving.md "TLS to replicas") it serves HTTPS
only, TLS 1.2+, and answers plain HTTP with 400 (tls_serving.py); without them, plain HTTP.

SIGTERM or SIGINT drains the leader: it stops listening, closes any new request without an
answer (a router retries it elsewhere), lets the requests in flight finish (up to --drain-s),
then stops its followers, which ignore SIGTERM. Logs are JSON lines on stderr ({"event": ...,
fields}). Exit codes: 0 stopped by SIGTERM or SIGINT, 1 the group failed (a peer died or a
collective timed out), 2 bad settings.
"""

import argparse
import datetime
import http.server
import json
import os
import signal
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import completions  # noqa: E402
import tls_serving  # noqa: E402

MAX_BODY_BYTES = 1 << 20


def log(event, **fields):
    fields = {"event": event, **fields}
    sys.stderr.write(json.dumps(fields) + "\n")
    sys.stderr.flush()


class Settings:
    """Everything the process needs, read from flags and the tessera environment."""


def fail(message):
    """Bad settings: say which and how to fix it, exit 2."""
    print(f"server: {message}", file=sys.stderr)
    raise SystemExit(2)


def env_int(name, default, minimum):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        fail(f"{name}={raw!r} is not a whole number")
    if value < minimum:
        fail(f"{name}={value} must be at least {minimum}")
    return value


def _env_number(name, kind, per_unit=1):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return kind(raw) / per_unit if per_unit != 1 else kind(raw)
    except ValueError:
        fail(f"{name}={raw!r} is not a number")


def parse_settings(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="0.0.0.0", help="address the leader listens on")
    p.add_argument("--port", type=int, default=None, help="HTTP port (default: $PORT, or 8000)")
    p.add_argument("--port-file", help="write the bound port here once listening (for --port 0)")
    p.add_argument("--model-name", default="tessera-tiny")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--context", type=int, default=1024,
                   help="longest prompt + completion, in tokens (bytes + 1)")
    p.add_argument("--seed", type=int, default=0, help="the weights' seed")
    p.add_argument("--max-batch", type=int, default=16, help="sequences decoded together")
    p.add_argument("--max-queue", type=int, default=256, help="waiting requests before 503")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    p.add_argument("--collective-timeout-s", type=int, default=60,
                   help="gloo timeout: joining the group, and any one collective")
    p.add_argument("--drain-s", type=float, default=30,
                   help="on SIGTERM, how long requests in flight may take to finish")
    p.add_argument("--mode", choices=("colocated", "prefill", "decode"), default="colocated",
                   help="disaggregated serving (disagg.py): prefill exports KV for a decode "
                   "replica to pull; decode asks the prefill replica in the X-Tessera-Prefill "
                   "header to prefill long prompts")
    p.add_argument("--kv-port", type=int, default=0,
                   help="prefill: the KV listener's TCP port (0 picks a free one; the "
                   "prefill answer says which)")
    p.add_argument("--kv-timeout-s", type=float, default=5.0,
                   help="decode: the longest a handoff (prefill call and KV pull) may take "
                   "before local prefill; prefill: the longest a pull may stall")
    p.add_argument("--kv-hold-s", type=float, default=10.0,
                   help="prefill: an unpulled KV blob is freed after this long")
    p.add_argument("--test-kv-fault", default="",
                   help="tests only: RANK:refuse or RANK:corrupt makes the KV listener of "
                   "process RANK of a prefill group refuse or damage every pull")
    p.add_argument("--disagg-threshold", type=int, default=8,
                   help="decode: prompts longer than this many uncached tokens are prefilled "
                   "remotely")
    # A Service's prefill and decode roles set these (docs/serving.md "Prefill and decode
    # roles"); flags win.
    kv_env = {"mode": os.environ.get("TESSERA_KV_ROLE") or None,
              "disagg_threshold": _env_number("TESSERA_KV_THRESHOLD", int),
              "kv_timeout_s": _env_number("TESSERA_KV_TIMEOUT_MS", float, 1000),
              "kv_hold_s": _env_number("TESSERA_KV_HOLD_MS", float, 1000)}
    if kv_env["mode"] not in (None, "prefill", "decode"):
        fail(f"TESSERA_KV_ROLE={kv_env['mode']!r} must be prefill or decode")
    p.set_defaults(**{k: v for k, v in kv_env.items() if v is not None})
    args = p.parse_args(argv)
    s = Settings()
    s.__dict__.update(vars(args))
    s.group_size = env_int("TESSERA_GROUP_SIZE", 1, 1)
    s.worker_index = env_int("TESSERA_WORKER_INDEX", 0, 0)
    if s.worker_index >= s.group_size:
        fail(f"TESSERA_WORKER_INDEX={s.worker_index} must be below "
                         f"TESSERA_GROUP_SIZE={s.group_size}")
    if s.port is None:
        s.port = env_int("PORT", 8000, 0)
    if not 0 <= s.port <= 65535:
        fail(f"--port {s.port} must be 0 to 65535")
    if s.group_size > 1:
        s.master_addr = os.environ.get("MASTER_ADDR", "")
        s.master_port = env_int("MASTER_PORT", 0, 1)
        if not s.master_addr or not s.master_port:
            fail("a group of TESSERA_GROUP_SIZE > 1 needs MASTER_ADDR and "
                             "MASTER_PORT (the torch.distributed rendezvous; tessera sets both)")
    for name in ("max_batch", "max_queue", "threads", "collective_timeout_s"):
        if getattr(s, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("kv_timeout_s", "kv_hold_s"):
        if not getattr(s, name) > 0:
            fail(f"--{name.replace('_', '-')} must be more than 0 (a handoff without a timeout "
                 "could hold a request or its KV forever)")
    if s.disagg_threshold < 0:
        fail(f"--disagg-threshold {s.disagg_threshold} must be 0 or more")
    if not 0 <= s.kv_port <= 65535:
        fail(f"--kv-port {s.kv_port} must be 0 to 65535")
    s.kv_fault = None
    if s.test_kv_fault:
        rank, _, kind = s.test_kv_fault.partition(":")
        if not rank.isdigit() or kind not in ("refuse", "corrupt"):
            fail(f"--test-kv-fault {s.test_kv_fault!r} must be RANK:refuse or RANK:corrupt")
        if int(rank) == s.worker_index:
            s.kv_fault = kind
    return s


class State:
    """What the HTTP threads share: the engine once ready, and the settings."""

    def __init__(self, settings):
        self.settings = settings
        self.engine = None
        self.ready = threading.Event()
        self.failed = None  # why the group failed, once it has
        self.draining = False  # SIGTERM: no new requests; the ones in flight finish
        # Disaggregated serving (disagg.py): the blobs a prefill replica holds, its KV
        # listener, the model fields a blob must match, and the handoff counters.
        self.store = None
        self.kv_server = None
        self.kv_fields = None
        self.kv_ranks = None  # prefill: every rank's KV listener, "host:port", rank order
        self.counters = None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tessera-serve/1"
    state = None  # set on a subclass per server

    def log_message(self, fmt, *args):
        pass  # one JSON line per request would drown the logs under load

    # ---- plumbing

    def _send_json(self, status, body, extra_headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra_headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, err, extra_headers=()):
        self._send_json(err.status, err.body(), extra_headers)

    def _write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _write_event(self, payload):
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._write_chunk(b"data: " + text.encode() + b"\n\n")

    # ---- routes

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        st = self.state
        if path == "/healthz":
            if st.failed:
                self._send_json(503, {"status": "failed", "reason": st.failed})
            elif not st.ready.is_set():
                self._send_json(503, {"status": "starting",
                                      "groupSize": st.settings.group_size})
            else:
                running, waiting = st.engine.load()
                body = {"status": "ok", "groupSize": st.settings.group_size,
                        "running": running, "waiting": waiting, "mode": st.settings.mode}
                if st.counters is not None:
                    body["disagg"] = st.counters.snapshot()
                if st.store is not None:
                    held, held_bytes = st.store.held()
                    body["disagg"].update(kvHeld=held, kvHeldBytes=held_bytes,
                                          kvExpired=st.store.expired, kvPort=st.kv_server.port)
                self._send_json(200, body)
        elif path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [{
                "id": st.settings.model_name, "object": "model", "created": 0,
                "owned_by": "tessera"}]})
        else:
            self._send_error(completions.RequestError(
                404, f"no route GET {path}; try POST /v1/completions, GET /v1/models or "
                "GET /healthz", code="not_found"))

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        if path != "/v1/completions":
            self._drain_body()
            self._send_error(completions.RequestError(
                404, f"no route POST {path}; completions are at POST /v1/completions",
                code="not_found"))
            return
        try:
            self._complete()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _drain_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length <= MAX_BODY_BYTES:
            self.rfile.read(length)
        elif length:
            self.close_connection = True

    def _complete(self):
        from engine import Request
        from model import encode

        st = self.state
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            self._send_error(completions.RequestError(
                411, "send the JSON body with a Content-Length header"))
            return
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send_error(completions.RequestError(
                413, f"the request body is {length} bytes; the limit is {MAX_BODY_BYTES}"))
            return
        raw = self.rfile.read(length)
        if st.draining or st.failed:
            # Stopping (scaled down or replaced) or the group broke (this process exits next):
            # close without a byte of answer, so a router retries the request on another
            # replica.
            self.close_connection = True
            return
        try:
            req = completions.parse_request(raw, st.settings.model_name)
            if st.failed or not st.ready.is_set():
                raise completions.RequestError(
                    503, "the model is not ready yet (GET /healthz says when it is)",
                    kind="server_error", code="not_ready")
            tokens = encode(req.prompt)
            context = st.settings.context
            if len(tokens) + req.max_tokens > context:
                param = "prompt" if len(tokens) >= context else "max_tokens"
                raise completions.RequestError(
                    400, f"{param}: this model's context is {context} tokens; the prompt has "
                    f"{len(tokens)} (its UTF-8 bytes + 1) and max_tokens is {req.max_tokens}: "
                    "shorten the prompt or lower max_tokens", param,
                    code="context_length_exceeded")
            export = _wants_remote_decode(raw, st.settings.mode, req, st.settings.group_size)
        except completions.RequestError as e:
            self._send_error(e, [("Retry-After", "1")] if e.status == 503 else [])
            return

        request = Request(tokens, req.max_tokens, req.temperature, req.seed)
        request.export = export
        if export:
            import disagg

            request.export_handle = disagg.new_handle()
        handoff = self._maybe_remote_prefill(request, req.prompt)
        if not st.engine.submit(request):
            self._send_error(completions.RequestError(
                503, f"the server is full ({st.settings.max_queue} requests waiting); retry",
                kind="server_error", code="overloaded"), [("Retry-After", "1")])
            return
        completion = completions.Completion(st.settings.model_name, len(tokens) - 1)
        settled = []

        def headers():
            """Called once the engine admitted the request (it may have fallen back)."""
            if not settled:
                settled.append(self._settle_handoff(request, handoff))
            return [("X-Tessera-Prefilled", settled[0])] if settled[0] else []

        try:
            if req.stream:
                self._stream(request, req, completion, headers)
            else:
                self._whole(request, completion, headers)
        finally:
            request.cancel()  # no-op when finished; frees the slot when the client left

    def _group_failed_before_answering(self):
        """The group broke before any byte of this request's answer: close the connection
        without one, so a router retries the request on another replica."""
        if self.state.engine.failure is None:
            return False
        self.close_connection = True
        return True

    def _maybe_remote_prefill(self, request, prompt):
        """Decode mode: a long prompt is prefilled by the prefill replica the router named,
        falling back to local prefill on any failure. Returns (source, seconds, bytes) for
        _settle_handoff; source is remote, local or fallback:<reason>, None outside decode
        mode. In a group of N > 1 this pulls rank 0's shard; the followers pull theirs when the
        engine admits the request."""
        import disagg

        st = self.state
        s = st.settings
        if s.mode != "decode":
            return None, None, 0
        address = self.headers.get(disagg.HEADER)
        if not address or len(request.tokens) <= s.disagg_threshold:
            st.counters.add("localPrefills")
            return "local", None, 0
        started = time.monotonic()
        try:
            h = disagg.remote_prefill(
                address, prompt, s.model_name, s.kv_timeout_s, st.kv_fields, request.tokens,
                ca_file=os.environ.get("TESSERA_CA_FILE") or None, group_size=s.group_size)
        except disagg.HandoffFailed as e:
            st.counters.add("fallbacks")
            st.counters.add(f"fallback_{e.reason}")
            log("handoff_fallback", prefill=address, rank=0, reason=e.reason, error=str(e))
            return f"fallback:{e.reason}", None, 0
        request.imported = (h.layers, h.logits)
        if s.group_size > 1:
            request.import_payload = json.dumps({"handle": h.handle, "ranks": h.ranks,
                                                 "tokens": request.tokens}).encode()
        return "remote", time.monotonic() - started, h.size

    def _settle_handoff(self, request, handoff):
        """The X-Tessera-Prefilled value once the engine admitted the request, counting the
        handoff or the fallback a follower's failed pull caused."""
        import disagg

        source, seconds, size = handoff
        st = self.state
        if source != "remote":
            return source
        if request.kv_failures:
            rank, code = request.kv_failures[0]
            reason = disagg.REASONS[code] if 0 < code < len(disagg.REASONS) else "transfer"
            st.counters.add("fallbacks")
            st.counters.add(f"fallback_{reason}")
            st.counters.add("followerFallbacks")
            log("handoff_fallback", prefill=self.headers.get(disagg.HEADER), rank=rank,
                reason=reason, failed_ranks=[r for r, _ in request.kv_failures],
                error=f"process {rank} of the decode group could not pull its KV shard")
            return f"fallback:{reason}"
        st.counters.add("handoffs")
        st.counters.add("kvBytesIn", size)
        # The prefill call and rank 0's pull, plus the followers' pulls and the group's
        # agreement (engine IMPORT) in a group of more than one.
        st.counters.add("handoffMsSum", round(1000 * (seconds + request.import_s), 3))
        return "remote"

    def _whole(self, request, completion, headers=lambda: []):
        text = []
        while True:
            kind, value = request.events.get()
            if kind == "token":
                text.append(value)
            elif kind == "done":
                body = completion.whole("".join(text), value, len(text))
                if request.export and request.kv_failures:
                    self._send_error(completions.RequestError(
                        500, "processes %s of this prefill group could not keep their KV "
                        "shard" % [r for r, _ in request.kv_failures], kind="server_error"))
                    return
                if request.export:
                    body["kv_transfer_params"] = self._hold_exported(request)
                self._send_json(200, body, headers())
                return
            else:
                if self._group_failed_before_answering():
                    return
                self._send_error(completions.RequestError(500, value, kind="server_error"))
                return

    def _hold_exported(self, request):
        """Prefill mode: the request's KV as a blob under a new handle, for a decode replica
        to pull from the KV listener."""
        import kvwire

        st = self.state
        layers, logits = request.exported
        request.exported = None
        blob = kvwire.encode(st.kv_fields, request.tokens, layers, logits)
        handle = st.store.put(blob, request.export_handle)
        st.counters.add("exports")
        return {"handle": handle, "port": st.kv_server.port, "bytes": len(blob),
                "tokens": len(request.tokens), "hold_s": st.store.hold_s,
                "ranks": st.kv_ranks}

    def _stream(self, request, req, completion, headers=lambda: []):
        # The status line waits for the first event (the first token comes with it), so a
        # request the group failed before its first token can still be retried elsewhere.
        first = request.events.get()
        if first[0] == "error" and self._group_failed_before_answering():
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in headers():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()
        sent = 0
        event = first
        while True:
            kind, value = event
            if kind == "token":
                sent += 1
                last = sent == req.max_tokens
                self._write_event(completion.chunk(value, "length" if last else None))
            elif kind == "done":
                break
            else:
                self._write_event(completions.error_body(value, kind="server_error"))
                break
            event = request.events.get()
        if req.include_usage:
            self._write_event(completion.usage_chunk(sent))
        self._write_event("[DONE]")
        self._write_chunk(b"")  # the chunked body's terminator


class Server(tls_serving.TlsServerMixin, http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        """A client that went away is routine; anything else is one JSON log line (the default
        prints a traceback)."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        log("http_error", client=f"{client_address[0]}:{client_address[1]}", error=repr(error))


def _wants_remote_decode(raw, mode, req, group_size):
    """Whether a request asks for its KV to be kept for a decode replica
    ("kv_transfer_params": {"do_remote_decode": true}); refuses it where it cannot be."""
    try:
        params = json.loads(raw).get("kv_transfer_params")
    except (ValueError, AttributeError):
        return False  # parse_request accepted the body, so this does not happen
    if params is None:
        return False
    if not isinstance(params, dict) or not isinstance(params.get("do_remote_decode"), bool):
        raise completions.RequestError(
            400, 'kv_transfer_params: must be {"do_remote_decode": true or false}',
            "kv_transfer_params")
    if not params["do_remote_decode"]:
        return False
    if mode != "prefill":
        raise completions.RequestError(
            400, f"kv_transfer_params: this replica runs --mode {mode}; only a prefill replica "
            "keeps KV for a decode replica", "kv_transfer_params")
    if req.max_tokens != 1 or req.stream:
        raise completions.RequestError(
            400, "max_tokens: a remote-decode prefill makes exactly 1 token, unstreamed "
            f"(got max_tokens {req.max_tokens}, stream {req.stream})", "max_tokens")
    decode_size = params.get("group_size", 1)
    if not isinstance(decode_size, int) or isinstance(decode_size, bool) or decode_size < 1:
        raise completions.RequestError(
            400, "kv_transfer_params.group_size: must be a whole number of at least 1, the "
            "decode group's process count", "kv_transfer_params.group_size")
    if decode_size != group_size:
        raise completions.RequestError(
            400, f"kv_transfer_params.group_size: this prefill group has {group_size} "
            f"processes and the decode group {decode_size}; rank r of a decode group pulls "
            "rank r's KV shard, so pair prefill and decode roles of the same group size "
            "(the decode group prefills locally meanwhile)", "kv_transfer_params.group_size")
    return True


def start_http(state):
    s = state.settings
    handler = type("BoundHandler", (Handler,), {"state": state})
    family = socket.AF_INET6 if ":" in s.host else socket.AF_INET
    Server.address_family = family
    try:
        tls = tls_serving.context_from_env()  # HTTPS when tessera gave the leader a certificate
    except ValueError as e:
        fail(str(e))
    httpd = Server((s.host, s.port), handler)
    httpd.tls = tls
    port = httpd.server_address[1]
    if s.port_file:
        tmp = s.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, s.port_file)
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()
    log("listening", host=s.host, port=port, scheme="https" if tls else "http")
    return httpd


def main(argv=None):
    s = parse_settings(sys.argv[1:] if argv is None else argv)
    import torch

    import engine
    import model

    torch.set_num_threads(s.threads)
    config = model.Config(layers=s.layers, d_model=s.d_model, heads=s.heads, d_ff=s.d_ff,
                          context=s.context, seed=s.seed)
    error = config.check(s.group_size)
    if error:
        print(f"server: {error}", file=sys.stderr)
        return 2

    leader = s.worker_index == 0
    state = State(s)
    httpd = start_http(state) if leader else None
    stop = threading.Event()
    if leader:
        def on_signal(signum, _frame):
            log("stopping", signal=signal.Signals(signum).name)
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    channel = None
    all_reduce = None
    started = time.monotonic()
    if s.group_size > 1:
        import torch.distributed as dist

        log("joining", group_size=s.group_size, worker=s.worker_index,
            master=f"{s.master_addr}:{s.master_port}")
        dist.init_process_group(
            "gloo", init_method=f"tcp://{s.master_addr}:{s.master_port}",
            rank=s.worker_index, world_size=s.group_size,
            timeout=datetime.timedelta(seconds=s.collective_timeout_s))
        channel = engine.GroupChannel(s.max_batch)

        def all_reduce(t):
            dist.all_reduce(t)

    net = model.ShardedTransformer(config, s.worker_index, s.group_size, s.max_batch, all_reduce)
    follower_kv = _start_disagg(s, state, net, channel) if s.mode != "colocated" else None
    if not leader:
        # A follower spends its life inside gloo calls, where Python runs no signal handler. It
        # ignores SIGTERM: the leader drains its requests, then its STOP ends the follower
        # cleanly (SIGKILL after the grace period ends it otherwise).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log("ready", role="follower", worker=s.worker_index,
            seconds=round(time.monotonic() - started, 2))
        try:
            engine.follow(net, channel, follower_kv)
        except Exception as e:
            log("group_failed", worker=s.worker_index, error=str(e))
            return 1
        _leave_group()
        return 0

    eng = engine.Engine(net, channel, s.max_queue)
    state.engine = eng
    loop = threading.Thread(target=_run_engine, args=(eng, state), name="engine")
    loop.start()
    state.ready.set()
    log("ready", role="leader", group_size=s.group_size, layers=s.layers, d_model=s.d_model,
        heads=s.heads, seconds=round(time.monotonic() - started, 2))
    # The signal handler only sets an Event; stopping happens here, outside the handler.
    while loop.is_alive() and not stop.wait(1.0):
        pass
    # Drain: no new connections or requests; the requests in flight finish (up to --drain-s).
    state.draining = True
    httpd.shutdown()
    httpd.server_close()
    deadline = time.monotonic() + s.drain_s
    while loop.is_alive() and eng.load() != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    log("drained", in_flight=sum(eng.load()))
    eng.stop()
    loop.join()
    if state.failed:
        return 1
    if s.group_size > 1:
        _leave_group()
    return 0


def _leave_group():
    """Destroys the process group after STOP, while the interpreter is whole. Left to the
    interpreter's teardown, gloo's threads may still hold work whose tensors reach back into
    Python, and the process then aborts (exit -6) instead of exiting 0."""
    import torch.distributed as dist

    dist.destroy_process_group()


def _start_disagg(s, state, net, channel):
    """Prefill or decode mode, on every process of the group: the handoff's counters and model
    fields; in prefill mode a KV listener per process (the leader's on --kv-port, a follower's
    on --kv-port + its index, or each on a free port when --kv-port is 0), whose addresses the
    group gathers to the leader (one all-gather, at start, on every process in the same order).
    Returns a follower's disagg.FollowerKv (None on the leader)."""
    import disagg
    import kvwire

    state.counters = disagg.Counters()
    state.kv_fields = kvwire.model_fields(net)
    if s.mode == "prefill":
        state.store = disagg.HandleStore(s.kv_hold_s)
        port = s.kv_port + s.worker_index if s.kv_port else 0
        state.kv_server = disagg.KvServer(state.store, state.counters, s.host, port,
                                          s.kv_timeout_s, fault=s.kv_fault)
        state.kv_server.start()
        host = disagg.advertised_host(s.host, getattr(s, "master_addr", "127.0.0.1"),
                                      getattr(s, "master_port", 1))
        address = disagg.join_address(host, state.kv_server.port)
        state.kv_ranks = channel.gather_addresses(address) if channel else [address]
        log("kv_listening", host=s.host, port=state.kv_server.port, worker=s.worker_index,
            advertised=address, fault=s.kv_fault)
    if s.worker_index == 0:
        return None
    return disagg.FollowerKv(net, state.kv_fields, s.kv_timeout_s, state.store, log)


def _run_engine(eng, state):
    try:
        eng.run()
    except Exception as e:
        state.failed = str(e)
        log("group_failed", worker=0, error=str(e))


if __name__ == "__main__":
    sys.exit(main())
