"""Prefill/decode disaggregation: the KV handoff between a prefill and a decode replica.

Decode orchestrates (as llm-d and Ray Serve LLM's decode servers do). The router sends a
request to a decode replica with the address of a prefill replica in the X-Tessera-Prefill
header (host:port, its HTTP address). When the prompt's uncached part is longer than the
threshold (this model has no prefix cache, so that is the whole prompt, BOS included), decode:
  1. POSTs the prompt to the prefill replica's /v1/completions with max_tokens 1 and
     "kv_transfer_params": {"do_remote_decode": true}; the answer carries
     "kv_transfer_params": {"handle", "port", "bytes", "tokens", "hold_s"};
  2. connects to that host at `port` (the prefill replica's KV listener) and pulls the blob:
     it sends b"GET <handle>\\n", the replica answers b"OK <bytes>\\n" and the blob
     (kvwire.py), or b"ERR <message>\\n";
  3. checks and imports the blob and generates, sampling the first token from the blob's
     logits with the request's own generator.
Every step has a timeout (--kv-timeout-s). Any failure (no answer, an error status, a stall,
a short or damaged blob, another model) makes decode prefill the request locally: the request
never fails because a prefill replica did.

Tensor-parallel groups (TESSERA_GROUP_SIZE = N > 1). Each process holds heads/N attention heads,
so each holds its own shard of a prompt's KV, and rank r of the decode group needs exactly rank
r's shard of the prefill group: both groups must have the same size. Then:
  - every prefill process runs a KV listener; at start the group gathers their addresses to the
    leader (GroupChannel.gather_addresses; a process advertises --host, or when that is a
    wildcard the local address of its route to MASTER_ADDR), and the leader's answer lists them
    as "ranks": ["host:port", ...] (rank 0's host is the one decode called);
  - decode sends its "group_size" in the prefill call; a prefill group of another size answers
    400 and decode falls back (reason mismatch), as it does if the answer lists another number
    of ranks;
  - the prefill leader's engine broadcasts EXPORT with the handle: every prefill rank runs the
    prompt and keeps its shard under that one handle, and the group agrees (one all-reduce)
    before the leader answers, so no shard is pulled before it is held;
  - the decode leader pulls rank 0's shard in its HTTP thread as a group of one does; at
    admission its engine broadcasts IMPORT (slot, handle, the ranks' addresses, the prompt)
    and every follower pulls its own shard from the matching prefill rank, checks its crc32,
    model, rank and prompt (kvwire.py) and writes it into the slot; one all-reduce of every
    rank's outcome follows, and unless all succeeded the whole group prefills the request
    locally (the leader broadcasts a PREFILL as for any request), so the ranks never diverge.
    The leader logs and counts the failed rank and its reason.
A follower's pull runs on the engine's turn and so delays the group's running sequences by its
duration (a loopback pull of a 256-token prompt's shard takes about a millisecond), at most
--kv-timeout-s.

The prefill replica holds a blob under its handle until it is pulled once (the handle is taken
when the pull starts, so a puller that dies mid-transfer frees it too) or until --kv-hold-s
pass unpulled; a sender that stalls on a puller that stopped reading gives up after
--kv-timeout-s. /healthz reports what is held (kvHeld, kvHeldBytes) and the counters.

Thread-safety: HandleStore and Counters lock their state; the rest is per call.
"""

import collections
import http.client
import json
import socket
import threading
import time
import uuid

import kvwire

HEADER = "X-Tessera-Prefill"  # the prefill replica the router picked, host:port
MAX_LINE = 256


class HandleStore:
    """KV blobs waiting to be pulled, by handle, each freed when taken or when it expires."""

    def __init__(self, hold_s, clock=time.monotonic):
        self.hold_s = hold_s
        self._clock = clock
        self._lock = threading.Lock()
        self._blobs = {}  # handle -> (blob, expiry)
        self.expired = 0

    def put(self, blob, handle=None):
        """Holds blob under `handle` (a new one when None); returns the handle."""
        handle = handle or new_handle()
        with self._lock:
            self._sweep_locked()
            self._blobs[handle] = (blob, self._clock() + self.hold_s)
        return handle

    def take(self, handle):
        """The blob, removed from the store; None when unknown or expired."""
        with self._lock:
            self._sweep_locked()
            entry = self._blobs.pop(handle, None)
        return None if entry is None else entry[0]

    def sweep(self):
        with self._lock:
            self._sweep_locked()

    def held(self):
        """(blobs held, their bytes)."""
        with self._lock:
            self._sweep_locked()
            return len(self._blobs), sum(len(b) for b, _ in self._blobs.values())

    def _sweep_locked(self):
        now = self._clock()
        for handle in [h for h, (_, expiry) in self._blobs.items() if expiry <= now]:
            del self._blobs[handle]
            self.expired += 1


def new_handle():
    return uuid.uuid4().hex  # 32 hex digits (engine.HANDLE_BYTES)


class Counters:
    """Named counts and sums for /healthz."""

    def __init__(self):
        self._lock = threading.Lock()
        self._values = collections.Counter()

    def add(self, name, value=1):
        with self._lock:
            self._values[name] += value

    def snapshot(self):
        with self._lock:
            return dict(self._values)


FAULTS = ("refuse", "corrupt")


class KvServer:
    """The prefill replica's KV listener: one thread per pull, each bounded by timeout_s.

    fault (tests only, --test-kv-fault): "refuse" answers every pull with ERR, "corrupt" flips
    one byte of every blob it sends (the puller's crc32 check catches it)."""

    def __init__(self, store, counters, host, port, timeout_s, fault=None):
        self.store = store
        self.counters = counters
        self.timeout_s = timeout_s
        self.fault = fault
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._stopping = False

    def start(self):
        threading.Thread(target=self._accept, name="kv-accept", daemon=True).start()
        threading.Thread(target=self._sweeper, name="kv-sweep", daemon=True).start()

    def stop(self):
        self._stopping = True
        self._sock.close()

    def _sweeper(self):
        # Expired handles are also dropped on every put/take; this frees them when idle.
        while not self._stopping:
            time.sleep(min(1.0, max(0.05, self.store.hold_s / 4)))
            self.store.sweep()

    def _accept(self):
        while not self._stopping:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="kv-pull",
                             daemon=True).start()

    def _serve(self, conn):
        with conn:
            conn.settimeout(self.timeout_s)
            try:
                line = _read_line(conn)
            except (OSError, ValueError):
                self.counters.add("pullsBroken")
                return
            if not line.startswith("GET "):
                _send_quietly(conn, b"ERR the request is GET <handle>\n")
                return
            blob = self.store.take(line[4:].strip())
            if blob is not None and self.fault == "refuse":
                self.counters.add("pullsRefusedByFault")
                _send_quietly(conn, b"ERR refused (--test-kv-fault)\n")
                return
            if blob is not None and self.fault == "corrupt":
                damaged = bytearray(blob)
                damaged[len(damaged) // 2] ^= 0x5A
                blob = bytes(damaged)
            if blob is None:
                self.counters.add("pullsUnknown")
                _send_quietly(conn, b"ERR unknown or expired handle\n")
                return
            try:
                # Taken: from here the blob is freed whatever happens to the puller.
                conn.sendall(b"OK %d\n" % len(blob))
                conn.sendall(blob)
            except OSError:
                self.counters.add("pullsBroken")
                return
            self.counters.add("pulls")
            self.counters.add("kvBytesOut", len(blob))


class HandoffFailed(Exception):
    def __init__(self, reason, detail):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def parse_address(value):
    """(host, port) of a host:port header value (IPv6 in brackets); raises ValueError."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{HEADER}: {value!r} is not host:port")
    return host.strip("[]"), int(port)


class Handoff:
    """What remote_prefill got: rank 0's shard and what the followers need to pull theirs."""

    def __init__(self, tokens, layers, logits, size, handle, ranks):
        self.tokens = tokens
        self.layers = layers
        self.logits = logits
        self.size = size  # rank 0's blob, bytes
        self.handle = handle
        self.ranks = ranks  # ["host:port"] of every prefill rank's KV listener, rank 0 first


def remote_prefill(address, prompt, model_name, timeout_s, expect_fields, expect_tokens,
                   ca_file=None, group_size=1):
    """Runs the handoff (steps 1 and 2 above) against the prefill replica at address: over
    HTTPS verified against `ca_file` when it is given (tessera gave this leader, and so the
    prefill leader too, a certificate from the cluster CA: $TESSERA_CA_FILE), else plain HTTP.
    For a decode group of `group_size` > 1 it pulls rank 0's shard only (the followers pull
    theirs at admission, engine.py's IMPORT).

    Returns a Handoff. Raises HandoffFailed(reason, detail); reason is one of unreachable,
    timeout, refused, mismatch, transfer, bad_kv."""
    deadline = time.monotonic() + timeout_s
    try:
        host, port = parse_address(address)
    except ValueError as e:
        raise HandoffFailed("refused", str(e)) from None
    params = {"do_remote_decode": True}
    if group_size > 1:
        params["group_size"] = group_size
    body = json.dumps({"model": model_name, "prompt": prompt, "max_tokens": 1,
                       "temperature": 0, "kv_transfer_params": params})
    if ca_file:
        import ssl
        context = ssl.create_default_context(cafile=ca_file)
        conn = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
    except socket.timeout:
        raise HandoffFailed("timeout", f"no prefill answer from {address} in {timeout_s} s")\
            from None
    except (OSError, http.client.HTTPException) as e:
        raise HandoffFailed("unreachable", f"{address}: {e}") from None
    finally:
        conn.close()
    if resp.status != 200:
        reason = "refused"
        try:
            if json.loads(data)["error"]["param"] == "kv_transfer_params.group_size":
                reason = "mismatch"
        except (ValueError, KeyError, TypeError):
            pass
        raise HandoffFailed(reason, f"{address} answered {resp.status}: {data[:300]!r}")
    try:
        params = json.loads(data)["kv_transfer_params"]
        handle, kv_port = str(params["handle"]), int(params["port"])
        ranks = [str(r) for r in params.get("ranks") or [f"{host}:{kv_port}"]]
    except (ValueError, KeyError, TypeError) as e:
        raise HandoffFailed("refused", f"{address} sent no kv_transfer_params: {e}") from None
    if len(ranks) != group_size:
        raise HandoffFailed("mismatch", f"the prefill group at {address} has {len(ranks)} "
                            f"processes, this decode group {group_size}: a KV shard is per "
                            "rank, so pair roles of the same group size")
    ranks[0] = join_address(host, kv_port)
    blob = pull(host, kv_port, handle, deadline)
    try:
        tokens, layers, logits = kvwire.decode(blob, expect_fields, expect_tokens)
    except kvwire.WireError as e:
        raise HandoffFailed("bad_kv", str(e)) from None
    return Handoff(tokens, layers, logits, len(blob), handle, ranks)


def pull_shard(address, handle, deadline, expect_fields, expect_tokens):
    """A follower's part of a handoff: its shard of `handle` from the prefill rank at address
    (host:port), checked. Returns (layers, blob bytes); raises HandoffFailed."""
    try:
        host, port = parse_address(address)
    except ValueError as e:
        raise HandoffFailed("refused", str(e)) from None
    blob = pull(host, port, handle, deadline)
    try:
        _, layers, _ = kvwire.decode(blob, expect_fields, expect_tokens)
    except kvwire.WireError as e:
        raise HandoffFailed("bad_kv", str(e)) from None
    return layers, len(blob)


# The outcome of one rank's part of a group's handoff, as the group's all-reduce carries it.
REASONS = ("ok", "unreachable", "timeout", "refused", "mismatch", "transfer", "bad_kv")


def reason_code(reason):
    return REASONS.index(reason) if reason in REASONS else REASONS.index("transfer")


def advertised_host(bind_host, master_addr, master_port):
    """The address peers reach this process's KV listener at: --host when it names one, else
    the local address of this host's route to the group's rendezvous (MASTER_ADDR), which
    tessera sets to the leader's address on the cluster network. Sends nothing."""
    if bind_host not in ("0.0.0.0", "::", ""):
        return bind_host
    family = socket.AF_INET6 if ":" in master_addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((master_addr, master_port))
            return s.getsockname()[0]
        except OSError:
            return socket.gethostname()


def join_address(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def pull(host, port, handle, deadline):
    """The blob of `handle` from a KV listener, by `deadline` (time.monotonic)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise HandoffFailed("timeout", "no time left to pull the KV")
    try:
        with socket.create_connection((host, port), timeout=remaining) as s:
            s.sendall(b"GET %s\n" % handle.encode())
            line = _read_line(s, deadline)
            if not line.startswith("OK "):
                raise HandoffFailed("transfer", f"the KV listener said {line!r}")
            size = int(line[3:])
            chunks, got = [], 0
            while got < size:
                s.settimeout(max(0.001, deadline - time.monotonic()))
                chunk = s.recv(min(1 << 20, size - got))
                if not chunk:
                    raise HandoffFailed("transfer", f"the KV stream ended at {got} of {size} "
                                        "bytes")
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks)
    except socket.timeout:
        raise HandoffFailed("timeout", "pulling the KV took too long") from None
    except (OSError, ValueError) as e:
        raise HandoffFailed("transfer", f"pulling the KV from {host}:{port}: {e}") from None


def _read_line(sock, deadline=None):
    data = b""
    while not data.endswith(b"\n"):
        if deadline is not None:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = sock.recv(1)
        if not chunk:
            raise ValueError("the connection closed before a whole line")
        data += chunk
        if len(data) > MAX_LINE:
            raise ValueError("a line longer than 256 bytes")
    return data.decode("ascii", "replace").strip()


def _send_quietly(conn, data):
    try:
        conn.sendall(data)
    except OSError:
        pass


class FollowerKv:
    """A follower's side of a tensor-parallel group's handoff, called by engine.follow() on the
    leader's EXPORT (prefill group: keep this rank's shard under the leader's handle) and
    IMPORT (decode group: pull this rank's shard from the matching prefill rank)."""

    def __init__(self, model, fields, timeout_s, store=None, log=None):
        self.model = model
        self.fields = fields
        self.timeout_s = timeout_s
        self.store = store  # prefill groups only
        self._log = log or (lambda event, **fields: None)

    def export(self, slot, tokens, handle):
        """Returns this rank's outcome code (0: held)."""
        import torch

        if self.store is None:
            self._log("kv_export_refused", reason="this process runs no KV listener")
            return reason_code("refused")
        blob = kvwire.encode(self.fields, tokens, self.model.export_kv(slot, len(tokens)),
                             torch.zeros(0))
        self.store.put(blob, handle)
        return 0

    def import_shard(self, slot, payload):
        """payload: the leader's JSON {"handle", "ranks", "tokens"}. Pulls this rank's shard,
        writes it into `slot` and returns 0, or returns the failure's code (the group then
        prefills locally, which overwrites the slot)."""
        try:
            spec = json.loads(payload)
            address = spec["ranks"][self.model.rank]
            handle, tokens = str(spec["handle"]), list(spec["tokens"])
        except (ValueError, KeyError, IndexError, TypeError) as e:
            self._log("kv_import_failed", reason="refused", error=f"bad IMPORT payload: {e}")
            return reason_code("refused")
        try:
            layers, _ = pull_shard(address, handle, time.monotonic() + self.timeout_s,
                                   self.fields, tokens)
        except HandoffFailed as e:
            self._log("kv_import_failed", rank=self.model.rank, prefill=address,
                      reason=e.reason, error=str(e))
            return reason_code(e.reason)
        self.model.import_kv(slot, layers)
        return 0
