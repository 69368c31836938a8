"""In-memory peer checkpoints: each rank's latest state kept in host memory, outside the worker
process, on its own host and on a peer host, so a restart loses at most a step or so instead of
everything since the last disk checkpoint (docs/elastic.md "In-memory peer checkpoints").

A job asks for it in its spec (spec.checkpoint.inMemory: {everySteps, peerCopies,
maxBytesPerHost}); the head passes it down as TESSERA_PEER_CKPT_EVERY, _COPIES and _MAX_BYTES.
Without them open() gives a PeerCheckpoints that keeps nothing in memory and answers from the
disk checkpoints alone, so one training loop runs either way.

Keepers. A keeper is a small daemon, one per (job checkpoint directory, host), holding the
newest complete snapshots of every rank that sends it one: the ranks of its own host and the
ranks whose peer it is. The first worker of a job on a host starts it as a detached process
(its own session, reparented away from the worker), so it survives the worker being killed and
the agent killing the worker's process group; it exits when the job's chief says the job is
finished, after TESSERA_PEER_CKPT_IDLE_S (default 900) without a request, or within 2 s of its
registration file going away (the job's directory removed, or another keeper registered for the
host). Keepers find each
other through the job's checkpoint directory, which every attempt shares already:

  <dir>/.tessera-peer/secret            token every request carries (mode 0600)
  <dir>/.tessera-peer/keepers/<host>    {"host", "addr", "port", "pid"} of that host's keeper
  <dir>/.tessera-peer/ranks/<rank>      {"rank", "host", "slice", "attempt", "uid"}: where a rank runs
  <dir>/.tessera-peer/resumed-<uid>-<attempt>   the step each attempt resumed from (lineage)

Saving. save(step, state) every everySteps steps: `state` (bytes, or a callable returning bytes)
is turned into bytes in the caller's thread (the snapshot: the training loop may change its
tensors right after), then a background thread sends it to this host's keeper and to
peerCopies peer keepers. The ring: rank r's copy goes to the rank of the same worker index on
the next slice (a different slice, so a slice lost whole still leaves a copy), or with one
slice to the next host of the slice. A snapshot not yet sent when the next is due is replaced
by the newer one (counted in stats["coalesced"]). A keeper refuses a snapshot that would take
its host over maxBytesPerHost, and one of an attempt older than the newest it has seen
(attempt_fence.py's order: job uid, then attempt); the next save() raises PeerCheckpointError
with the keeper's reason, so nothing is dropped silently.

Restoring. latest(): the newest step for which a complete set of copies (every rank of the
world that saved it) is held by keepers that answer, if it is newer than the newest disk
checkpoint, else the disk checkpoint. A copy is never chosen when it is of another job uid,
not newer than the disk checkpoint, or of an attempt whose later history was thrown away (an
attempt after it resumed from an earlier step: the lineage files). load() fetches this rank's
copy from this host's keeper, then its ring peers, then any other keeper, and checks length
and CRC-32 (every copy is checked on receipt by the keeper too); a torn or damaged copy is
never returned. The chief calls latest() and tells the other ranks the answer (a broadcast in
torch), exactly as with disk checkpoints.

Thread-safety: PeerCheckpoints is used by one training thread (plus its own sender thread).
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import dataclasses
import fcntl
import hmac
import io
import json
import os
import re
import secrets
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from typing import Any, Callable, Mapping, NamedTuple, Optional, Union

from . import attempt_fence, checkpoint

EVERY_VAR = "TESSERA_PEER_CKPT_EVERY"
COPIES_VAR = "TESSERA_PEER_CKPT_COPIES"
MAX_BYTES_VAR = "TESSERA_PEER_CKPT_MAX_BYTES"
HOST_VAR = "TESSERA_PEER_CKPT_HOST"  # this host's name; default TPU_WORKER_HOSTNAMES[id]
IDLE_VAR = "TESSERA_PEER_CKPT_IDLE_S"
DEFAULT_MAX_BYTES = 4 << 30
DEFAULT_IDLE_S = 900.0
BACKGROUND_NICE = 10  # the keeper's and the sender thread's niceness (training stays at 0)
KEEP_PER_RANK = 2  # the newest two: a rank killed mid-send still has the step before
SUBDIR = ".tessera-peer"
_FRAME = struct.Struct("<IQ")  # header length, payload length
_MAX_HEADER = 1 << 20
_CONNECT_TIMEOUT_S = 1.0
_IO_TIMEOUT_S = 30.0

State = Union[bytes, bytearray, memoryview, Callable[[], Union[bytes, bytearray, memoryview]]]


class PeerCheckpointError(RuntimeError):
    """A snapshot could not be kept (over the host's cap, refused as stale, bad config). `code`
    is the keeper's reason: over_cap, stale_attempt, stale_step, torn, auth, config, missing."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class Config:
    every_steps: int = 0  # 0: in-memory checkpoints off
    peer_copies: int = 1
    max_bytes_per_host: int = DEFAULT_MAX_BYTES
    idle_s: float = DEFAULT_IDLE_S

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0


def _env_int(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = (env.get(name) or "").strip()
    if raw == "":
        return default
    try:
        value = int(raw, 10)
    except ValueError:
        raise PeerCheckpointError("config", f"{name}: must be an integer >= {minimum}, "
                                            f"got {raw!r}") from None
    if value < minimum:
        raise PeerCheckpointError("config", f"{name}: must be >= {minimum}, got {value}")
    return value


def config_from_env(env: Optional[Mapping[str, str]] = None) -> Config:
    """The job's spec.checkpoint.inMemory as the head passed it down. PeerCheckpointError
    (code "config") naming the variable when one is malformed."""
    env = os.environ if env is None else env
    idle_raw = (env.get(IDLE_VAR) or "").strip()
    try:
        idle = float(idle_raw) if idle_raw else DEFAULT_IDLE_S
    except ValueError:
        idle = -1.0
    if not idle > 0:
        raise PeerCheckpointError("config", f"{IDLE_VAR}: must be a number of seconds > 0, "
                                            f"got {idle_raw!r}")
    return Config(every_steps=_env_int(env, EVERY_VAR, 0, 0),
                  peer_copies=_env_int(env, COPIES_VAR, 1, 0),
                  max_bytes_per_host=_env_int(env, MAX_BYTES_VAR, DEFAULT_MAX_BYTES, 1),
                  idle_s=idle)


# ---------------------------------------------------------------------------------------------
# Wire: [u32 header length][u64 payload length][JSON header][payload]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def _send(sock: socket.socket, header: dict, payload: Optional[memoryview] = None) -> None:
    h = json.dumps(header).encode()
    n = 0 if payload is None else payload.nbytes
    sock.sendall(_FRAME.pack(len(h), n) + h)
    if n:
        sock.sendall(payload)


def _recv(sock: socket.socket) -> tuple[dict, bytes]:
    hlen, plen = _FRAME.unpack(_recv_exact(sock, _FRAME.size))
    if hlen > _MAX_HEADER:
        raise ConnectionError(f"header of {hlen} bytes: not a tessera keeper peer")
    header = json.loads(_recv_exact(sock, hlen))
    payload = _recv_exact(sock, plen) if plen else b""
    return header, payload


# ---------------------------------------------------------------------------------------------
# The keeper's memory: pure bookkeeping, tested without sockets


@dataclasses.dataclass
class Snapshot:
    rank: int
    uid: int
    attempt: int
    step: int
    world: int
    crc32: int
    payload: bytes
    origin: str = ""  # the host that sent it

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.uid, self.attempt, self.step)

    def describe(self) -> dict:
        return {"rank": self.rank, "uid": self.uid, "attempt": self.attempt, "step": self.step,
                "world": self.world, "length": len(self.payload), "crc32": self.crc32,
                "origin": self.origin}


class KeeperMemory:
    """The snapshots one keeper holds: the newest KEEP_PER_RANK per rank, at most `max_bytes`
    in all. put() raises PeerCheckpointError instead of going over the cap or taking a
    snapshot older than what it has (attempt fencing)."""

    def __init__(self, max_bytes: int, host: str = "", keep: int = KEEP_PER_RANK) -> None:
        self.max_bytes = max_bytes
        self.host = host
        self.keep = keep
        self.newest: Optional[tuple[int, int]] = None  # (uid, attempt) fence
        self.snaps: dict[int, list[Snapshot]] = {}  # rank -> newest first
        self.lock = threading.Lock()

    @property
    def used(self) -> int:
        return sum(len(s.payload) for lst in self.snaps.values() for s in lst)

    def begin(self, uid: int, attempt: int) -> None:
        with self.lock:
            self._fence(uid, attempt)

    def _fence(self, uid: int, attempt: int) -> None:
        if self.newest is not None and (uid, attempt) < self.newest:
            raise PeerCheckpointError(
                "stale_attempt",
                f"keeper on {self.host}: attempt {attempt} (job uid {uid}) may not store "
                f"snapshots: attempt {self.newest[1]} (uid {self.newest[0]}) has started (this "
                f"worker is a leftover of an earlier attempt; exit instead of writing)")
        self.newest = (uid, attempt)

    def put(self, snap: Snapshot) -> None:
        if zlib.crc32(snap.payload) != snap.crc32:
            raise PeerCheckpointError("torn", f"keeper on {self.host}: snapshot of rank "
                                              f"{snap.rank} step {snap.step}: checksum mismatch")
        with self.lock:
            self._fence(snap.uid, snap.attempt)
            have = self.snaps.get(snap.rank, [])
            if have and snap.key < have[0].key:
                raise PeerCheckpointError(
                    "stale_step", f"keeper on {self.host}: rank {snap.rank} step {snap.step} "
                    f"(attempt {snap.attempt}) is older than the step {have[0].step} (attempt "
                    f"{have[0].attempt}) it holds")
            kept = sorted([s for s in have if s.key != snap.key] + [snap],
                          key=lambda s: s.key, reverse=True)[:self.keep]
            others = self.used - sum(len(s.payload) for s in have)
            after = others + sum(len(s.payload) for s in kept)
            if after > self.max_bytes:
                raise PeerCheckpointError(
                    "over_cap",
                    f"keeper on {self.host}: keeping rank {snap.rank}'s snapshot of step "
                    f"{snap.step} ({len(snap.payload)} bytes) would hold {after} bytes, over "
                    f"this host's cap of {self.max_bytes} (spec.checkpoint.inMemory."
                    f"maxBytesPerHost; it must fit {self.keep} snapshots of every rank this "
                    f"host keeps, its own and its peers'): raise it or save less state")
            self.snaps[snap.rank] = kept

    def index(self) -> list[dict]:
        with self.lock:
            return [s.describe() for lst in self.snaps.values() for s in lst]

    def get(self, rank: int, uid: int, attempt: int, step: int) -> Optional[Snapshot]:
        with self.lock:
            for s in self.snaps.get(rank, []):
                if s.key == (uid, attempt, step):
                    return s
        return None


# ---------------------------------------------------------------------------------------------
# The keeper daemon


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: "_KeeperServer" = self.server  # type: ignore[assignment]
        sock: socket.socket = self.request
        sock.settimeout(_IO_TIMEOUT_S)
        while True:
            try:
                header, payload = _recv(sock)
            except (ConnectionError, OSError, ValueError):
                return  # closed, torn mid-message (never stored) or garbage
            server.touch()
            try:
                reply, data = server.serve(header, payload)
            except PeerCheckpointError as e:
                reply, data = {"ok": False, "code": e.code, "error": str(e)}, None
            try:
                _send(sock, reply, data)
            except OSError:
                return
            if reply.get("code") == "auth":
                return
            if header.get("op") == "shutdown":
                threading.Thread(target=server.shutdown, daemon=True).start()
                return


class _KeeperServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, bind: str, memory: KeeperMemory, token: str) -> None:
        super().__init__((bind, 0), _Handler)
        self.memory = memory
        self.token = token
        self.last_request = time.monotonic()

    def touch(self) -> None:
        self.last_request = time.monotonic()

    def serve(self, h: dict, payload: bytes) -> tuple[dict, Optional[memoryview]]:
        if not hmac.compare_digest(str(h.get("token", "")), self.token):
            raise PeerCheckpointError("auth", "keeper: wrong token (not this job's keeper)")
        op = h.get("op")
        m = self.memory
        if op == "ping":
            return {"ok": True, "host": m.host, "pid": os.getpid()}, None
        if op == "begin":
            m.begin(int(h["uid"]), int(h["attempt"]))
            return {"ok": True}, None
        if op == "put":
            if len(payload) != int(h["length"]):
                raise PeerCheckpointError("torn", f"keeper on {m.host}: payload of "
                                                  f"{len(payload)} bytes, header says {h['length']}")
            m.put(Snapshot(rank=int(h["rank"]), uid=int(h["uid"]), attempt=int(h["attempt"]),
                           step=int(h["step"]), world=int(h["world"]), crc32=int(h["crc32"]),
                           payload=payload, origin=str(h.get("origin", ""))))
            return {"ok": True, "used": m.used, "cap": m.max_bytes}, None
        if op == "index":
            return {"ok": True, "host": m.host, "snapshots": m.index(), "used": m.used,
                    "cap": m.max_bytes, "newest": m.newest}, None
        if op == "get":
            s = m.get(int(h["rank"]), int(h["uid"]), int(h["attempt"]), int(h["step"]))
            if s is None:
                raise PeerCheckpointError("missing", f"keeper on {m.host}: no snapshot of rank "
                                                     f"{h['rank']} step {h['step']}")
            return dict(s.describe(), ok=True), memoryview(s.payload)
        if op == "shutdown":
            return {"ok": True}, None
        raise PeerCheckpointError("config", f"keeper: unknown op {op!r}")


def _safe_name(host: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}", host):
        return host
    return "x-" + host.encode().hex()[:200]


def _write_json(path: str, doc: dict, mode: int = 0o644) -> None:
    d = os.path.dirname(path)
    fd, temp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _read_json(path: str) -> Optional[dict]:
    try:
        with builtins.open(path) as f:
            doc = json.load(f)
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None


def _token(root: str) -> str:
    path = os.path.join(root, "secret")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16))
    deadline = time.monotonic() + 5
    while True:  # another process may have created it an instant ago and be writing it
        with builtins.open(path) as f:
            text = f.read().strip()
        if len(text) == 32 or time.monotonic() > deadline:
            return text
        time.sleep(0.01)


def run_keeper(root: str, host: str, max_bytes: int, bind: str, advertise: str,
               idle_s: float) -> None:
    """Serves until told to stop or idle for idle_s; registers <root>/keepers/<host>."""
    memory = KeeperMemory(max_bytes, host)
    server = _KeeperServer(bind, memory, _token(root))
    port = server.server_address[1]
    _write_json(os.path.join(root, "keepers", _safe_name(host)),  # registry, below
                {"host": host, "addr": advertise, "port": port, "pid": os.getpid(),
                 "started": time.time(), "cap": max_bytes})

    registry = os.path.join(root, "keepers", _safe_name(host))

    def still_registered() -> bool:
        # Gone when the job's directory was removed or another keeper took this host's name.
        doc = _read_json(registry)
        return doc is not None and doc.get("pid") == os.getpid()

    def idle_watch() -> None:
        while True:
            left = idle_s - (time.monotonic() - server.last_request)
            if left <= 0 or not still_registered():
                server.shutdown()
                return
            time.sleep(min(left, 2.0))

    threading.Thread(target=idle_watch, daemon=True).start()
    server.serve_forever(poll_interval=0.5)
    server.server_close()


# ---------------------------------------------------------------------------------------------
# Client side


class _Conn:
    """One persistent connection to a keeper; reconnects once per request after a failure."""

    def __init__(self, addr: str, port: int, token: str) -> None:
        self.addr, self.port, self.token = addr, port, token
        self.sock: Optional[socket.socket] = None

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None

    def request(self, header: dict, payload: Optional[memoryview] = None) -> tuple[dict, bytes]:
        header = dict(header, token=self.token)
        for tries in (0, 1):
            try:
                if self.sock is None:
                    self.sock = socket.create_connection((self.addr, self.port),
                                                         timeout=_CONNECT_TIMEOUT_S)
                    self.sock.settimeout(_IO_TIMEOUT_S)
                    self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                _send(self.sock, header, payload)
                reply, data = _recv(self.sock)
            except (OSError, ValueError):
                self.close()
                if tries:
                    raise
                continue
            if not reply.get("ok"):
                raise PeerCheckpointError(reply.get("code", "error"), reply.get("error", "?"))
            return reply, data
        raise AssertionError("unreachable")


class Found(NamedTuple):
    step: int
    source: str  # "memory" or "disk"
    attempt: int = -1  # memory: the attempt that saved the copies
    world: int = 0  # memory: the world size that saved them
    path: Optional[str] = None  # disk: the checkpoint file


def _host_from_env(env: Mapping[str, str]) -> str:
    if (env.get(HOST_VAR) or "").strip():
        return env[HOST_VAR].strip()
    names = [n for n in (env.get("TPU_WORKER_HOSTNAMES") or "").split(",") if n]
    try:
        wid = int(env.get("TPU_WORKER_ID") or 0)
    except ValueError:
        wid = 0
    if 0 <= wid < len(names):
        return names[wid]
    return socket.gethostname()


def _addresses(master_addr: str, master_port: int) -> tuple[str, str]:
    """(bind, advertise): loopback when the group's master is, else this host's address on
    the route to the master."""
    try:
        loopback = socket.gethostbyname(master_addr).startswith("127.")
    except OSError:
        loopback = True
    if loopback:
        return "127.0.0.1", "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((master_addr, master_port))  # no packet: only picks the route
        return "0.0.0.0", s.getsockname()[0]


def ring_peers(rank: int, world: int, num_slices: int, copies: int) -> list[int]:
    """The ranks whose hosts keep rank's peer copies: the same worker index on the next
    slices (a different slice first), then, with one slice, the next hosts of the slice."""
    if copies <= 0 or world <= 1:
        return []
    per = world // num_slices if num_slices > 0 and world % num_slices == 0 else world
    slices = world // per
    s, w = divmod(rank, per)
    order = [((s + k) % slices) * per + w for k in range(1, slices)]
    order += [s * per + (w + k) % per for k in range(1, per)]
    out = []
    for r in order:
        if r != rank and r not in out:
            out.append(r)
    return out[:copies]


class PeerCheckpoints:
    """A rank's in-memory checkpoints, with the disk checkpoints beside them. See the module
    docstring. Build with open()."""

    def __init__(self, cfg: Config, *, rank: int, world: int, num_slices: int, slice_id: int,
                 attempt: Optional[int], uid: int, directory: Optional[str], host: str,
                 master_addr: str = "127.0.0.1", master_port: int = 29500,
                 env: Optional[Mapping[str, str]] = None) -> None:
        self.cfg = cfg
        self.rank, self.world = rank, world
        self.num_slices, self.slice_id = num_slices, slice_id
        self.attempt = attempt if attempt is not None else 0
        self.fenced = attempt is not None
        self.uid = uid
        self.dir = directory
        self.host = host
        self.stats = {"saved": 0, "sent": 0, "coalesced": 0, "peer_failures": 0,
                      "torn_refused": 0, "send_seconds": 0.0, "snapshot_seconds": 0.0}
        self._env = dict(os.environ if env is None else env)
        self._bind, self._advertise = "127.0.0.1", "127.0.0.1"
        self._master = (master_addr, master_port)
        self._conns: dict[str, _Conn] = {}
        self._rank_hosts: dict[int, str] = {}  # this attempt's ranks' hosts, once registered
        self._cv = threading.Condition()
        self._pending: Optional[tuple[int, bytes, int]] = None
        self._busy = False
        self._error: Optional[PeerCheckpointError] = None
        self._closed = False
        self._warned: set = set()
        self._thread: Optional[threading.Thread] = None
        self.last_load_host: Optional[str] = None  # the keeper load() took its copy from
        self.root = os.path.join(directory, SUBDIR) if directory else None
        if self.enabled:
            for sub in ("keepers", "ranks"):
                os.makedirs(os.path.join(self.root, sub), exist_ok=True)
            self._token = _token(self.root)
            _write_json(os.path.join(self.root, "ranks", str(rank)),
                        {"rank": rank, "host": host, "slice": slice_id, "attempt": self.attempt,
                         "uid": uid, "world": world})
            self._thread = threading.Thread(target=self._sender, name="peer-ckpt", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self.cfg.enabled and self.dir is not None

    # --- saving ---------------------------------------------------------------------------

    def due(self, step: int) -> bool:
        return self.enabled and step % self.cfg.every_steps == 0

    def save(self, step: int, state: State, *, force: bool = False) -> bool:
        """Snapshots `state` for `step` now and sends it in the background, when the step is
        due (every everySteps steps) or force. Returns whether it took a snapshot. Raises the
        PeerCheckpointError of an earlier snapshot a keeper refused (over the cap, stale)."""
        self._raise_error()
        if not self.enabled or not (force or self.due(step)):
            return False
        start = time.monotonic()
        payload = state() if callable(state) else state
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"snapshot state must be bytes, got {type(payload).__name__}")
        data = bytes(payload)
        crc = zlib.crc32(data)
        with self._cv:
            if self._pending is not None:
                self.stats["coalesced"] += 1
            self._pending = (step, data, crc)
            self._cv.notify_all()
        self.stats["saved"] += 1
        self.stats["snapshot_seconds"] += time.monotonic() - start
        return True

    def save_torch(self, step: int, obj: Any, *, force: bool = False) -> bool:
        """save() of `obj` serialized with torch.save (in this thread: the snapshot)."""
        if not self.enabled or not (force or self.due(step)):
            self._raise_error()
            return False

        def serialize() -> bytes:
            import torch

            buf = io.BytesIO()
            torch.save(obj, buf)
            return buf.getvalue()

        return self.save(step, serialize, force=True)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Waits until every snapshot taken has been sent (or refused: raises then)."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._pending is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"peer checkpoints: snapshot not sent in {timeout_s} s")
                self._cv.wait(left)
        self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _sender(self) -> None:
        # Background work: the training thread (and its peers waiting in the next collective)
        # get the cores first. Linux applies a thread id's priority to that thread only.
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
        with contextlib.suppress(OSError, ValueError):
            self._bind, self._advertise = _addresses(*self._master)
        while True:
            with self._cv:
                while self._pending is None and not self._closed:
                    self._cv.wait()
                if self._pending is None:
                    return
                step, data, crc = self._pending
                self._pending = None
                self._busy = True
            start = time.monotonic()
            try:
                self._send_all(step, data, crc)
            except PeerCheckpointError as e:
                self._error = e
            except Exception as e:  # the sender must not die silently
                self._error = PeerCheckpointError("error", f"peer checkpoints: {e!r}")
            finally:
                self.stats["send_seconds"] += time.monotonic() - start
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _send_all(self, step: int, data: bytes, crc: int) -> None:
        header = {"op": "put", "rank": self.rank, "uid": self.uid, "attempt": self.attempt,
                  "step": step, "world": self.world, "crc32": crc, "length": len(data),
                  "origin": self.host}
        view = memoryview(data)
        try:
            self._request(self._local_conn(), header, view)  # refusals raise: never silent
        except OSError:  # this host's keeper is gone (killed): start another, once
            self._conns.pop(self.host, None)
            self._request(self._local_conn(), header, view)
        for peer_rank in ring_peers(self.rank, self.world, self.num_slices,
                                    self.cfg.peer_copies):
            host = self._host_of_rank(peer_rank)
            if host is None or host == self.host:
                self._warn(("peer", peer_rank), f"no host for peer rank {peer_rank} yet "
                           f"(its worker has not started, or it runs on this host)")
                continue
            conn = self._conn_of_host(host)
            if conn is None:
                self.stats["peer_failures"] += 1
                self._warn(("keeper", host), f"no keeper registered for host {host} yet")
                continue
            try:
                self._request(conn, header, view)
            except OSError as e:
                self.stats["peer_failures"] += 1
                self._conns.pop(host, None)
                self._warn(("send", host), f"peer copy to {host} failed: {e}")
        self.stats["sent"] += 1

    def _request(self, conn: _Conn, header: dict, payload=None) -> tuple[dict, bytes]:
        return conn.request(header, payload)

    def _warn(self, key, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            print(f"tessera.peer_ckpt rank {self.rank}: {message}", file=sys.stderr, flush=True)

    def _host_of_rank(self, rank: int) -> Optional[str]:
        """The host rank runs on in this attempt (read once found: it does not change within
        an attempt), None until its worker has registered."""
        host = self._rank_hosts.get(rank)
        if host is not None:
            return host
        doc = _read_json(os.path.join(self.root, "ranks", str(rank)))
        if not doc or doc.get("uid") != self.uid or doc.get("attempt") != self.attempt:
            return None
        host = doc.get("host")
        if isinstance(host, str):
            self._rank_hosts[rank] = host
        return host

    def _keeper_doc(self, host: str) -> Optional[dict]:
        return _read_json(os.path.join(self.root, "keepers", _safe_name(host)))

    def _conn_of_host(self, host: str) -> Optional[_Conn]:
        conn = self._conns.get(host)
        if conn is not None:
            return conn
        doc = self._keeper_doc(host)
        if not doc:
            return None
        conn = _Conn(doc["addr"], int(doc["port"]), self._token)
        self._conns[host] = conn
        return conn

    def _local_conn(self) -> _Conn:
        conn = self._conns.get(self.host)
        if conn is not None:
            return conn
        conn = self.ensure_keeper()
        self._conns[self.host] = conn
        return conn

    def ensure_keeper(self) -> _Conn:
        """This host's keeper, started (detached) if none answers. Tells it this attempt has
        begun (StaleAttempt-like PeerCheckpointError if a newer one has)."""
        lock_path = os.path.join(self.root, "keepers", _safe_name(self.host) + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            conn = self._live_keeper()
            if conn is None:
                self._spawn_keeper()
                deadline = time.monotonic() + 30
                while conn is None:
                    if time.monotonic() > deadline:
                        raise PeerCheckpointError("error", f"keeper for host {self.host} did "
                                                           f"not start within 30 s")
                    time.sleep(0.02)
                    conn = self._live_keeper()
        finally:
            os.close(fd)
        if self.fenced:
            conn.request({"op": "begin", "uid": self.uid, "attempt": self.attempt})
        return conn

    def _live_keeper(self) -> Optional[_Conn]:
        doc = self._keeper_doc(self.host)
        if not doc:
            return None
        conn = _Conn(doc["addr"], int(doc["port"]), self._token)
        try:
            conn.request({"op": "ping"})
        except (OSError, PeerCheckpointError):
            conn.close()
            return None
        return conn

    def _spawn_keeper(self) -> None:
        pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TESSERA_PROGRESS", "TESSERA_AGENT_CONTACT"))}
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-m", "tessera.peer_ckpt", "keeper", "--root", self.root,
               "--host", self.host, "--max-bytes", str(self.cfg.max_bytes_per_host),
               "--bind", self._bind, "--advertise", self._advertise,
               "--idle-s", str(self.cfg.idle_s), "--daemon"]
        # The intermediate process forks the keeper into its own session and exits at once,
        # so the keeper is nobody's child here and outlives this worker and its group.
        # Its stderr goes to a file: the worker's own (the agent's log pipe) must not be held
        # open by a process that outlives the worker.
        log_path = os.path.join(self.root, "keepers", _safe_name(self.host) + ".log")
        with builtins.open(log_path, "ab") as log_file:
            subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=log_file, check=True, timeout=30)

    # --- restoring ------------------------------------------------------------------------

    def _keepers(self) -> list[tuple[str, _Conn]]:
        """Every registered keeper: this host's first, then this rank's ring peers' hosts,
        then the others (name order)."""
        if not self.root:
            return []
        try:
            names = sorted(n for n in os.listdir(os.path.join(self.root, "keepers"))
                           if not n.endswith((".lock", ".log")) and not n.startswith(".tmp-"))
        except FileNotFoundError:
            return []
        hosts = []
        for n in names:
            doc = _read_json(os.path.join(self.root, "keepers", n))
            if doc and isinstance(doc.get("host"), str):
                hosts.append(doc["host"])
        peers = [h for r in ring_peers(self.rank, self.world, self.num_slices, self.world)
                 if (h := self._host_of_rank_any(r)) is not None]
        order = [self.host] + peers + hosts
        out, seen = [], set()
        for h in order:
            if h in seen or h not in hosts:
                continue
            seen.add(h)
            conn = self._conn_of_host(h)
            if conn is not None:
                out.append((h, conn))
        return out

    def _host_of_rank_any(self, rank: int) -> Optional[str]:
        doc = _read_json(os.path.join(self.root, "ranks", str(rank)))
        return doc.get("host") if doc else None

    def _lineage(self) -> list[tuple[int, int]]:
        """(attempt, step resumed from) of every attempt of this job uid that recorded one."""
        out = []
        try:
            names = os.listdir(self.root)
        except (FileNotFoundError, TypeError):
            return out
        for n in names:
            if n.startswith(f"resumed-{self.uid}-"):
                doc = _read_json(os.path.join(self.root, n))
                if doc and doc.get("uid") == self.uid:
                    out.append((int(doc["attempt"]), int(doc["step"])))
        return out

    def memory_copies(self) -> dict[tuple[int, int], dict[int, int]]:
        """{(attempt, step): {rank: world}} of the copies the keepers that answer hold for this
        job uid, skipping copies whose history a later attempt threw away."""
        lineage = self._lineage()
        found: dict[tuple[int, int], dict[int, int]] = {}
        for host, conn in self._keepers():
            try:
                reply, _ = conn.request({"op": "index"})
            except (OSError, PeerCheckpointError):
                self._conns.pop(host, None)
                continue
            for s in reply.get("snapshots", []):
                if s["uid"] != self.uid or (self.fenced and s["attempt"] >= self.attempt):
                    continue
                # A later attempt that resumed from an earlier step discarded this history.
                if any(a > s["attempt"] and (not self.fenced or a < self.attempt)
                       and step < s["step"] for a, step in lineage):
                    continue
                found.setdefault((s["attempt"], s["step"]), {})[s["rank"]] = s["world"]
        return found

    def latest(self, *, record: bool = True) -> Optional[Found]:
        """The freshest complete state: the newest step every rank of its world has a copy of
        in a keeper that answers, when newer than the newest disk checkpoint; else the disk
        checkpoint; None when neither exists. Called by the chief (it starts the attempt in
        the checkpoint directory, as checkpoint.latest does, and records the step resumed
        from unless record=False); tell the other ranks the answer."""
        disk = checkpoint.latest(self.dir) if self.dir else None
        best: Optional[Found] = None
        if self.enabled:
            for (attempt, step), ranks in sorted(self.memory_copies().items(),
                                                 key=lambda kv: (kv[0][1], kv[0][0]),
                                                 reverse=True):
                worlds = set(ranks.values())
                if len(worlds) != 1:
                    continue
                world = worlds.pop()
                if set(ranks) == set(range(world)) and (disk is None or step > disk[0]):
                    best = Found(step, "memory", attempt, world)
                    break
        if best is None and disk is not None:
            best = Found(disk[0], "disk", path=disk[1])
        if record and self.enabled and self.fenced:
            self.record_resume(best.step if best else 0, best.source if best else "none")
        return best

    def record_resume(self, step: int, source: str) -> None:
        """Records that this attempt resumed from `step`, under the checkpoint directory's
        attempt fence (a stale attempt cannot record)."""
        with attempt_fence.commit(self.dir, self.attempt):
            _write_json(os.path.join(self.root, f"resumed-{self.uid}-{self.attempt:06d}"),
                        {"uid": self.uid, "attempt": self.attempt, "step": step,
                         "source": source, "time": time.time()})

    def load(self, found: Found, rank: Optional[int] = None) -> bytes:
        """The state of `found` for `rank` (default this rank; with a world different from the
        one that saved it, rank % that world: the same for replicated state, sharded state must
        pass the rank it wants). Memory: this host's keeper, then the ring peers, then any
        other; each copy's length and CRC-32 are checked and a bad one is skipped.
        PeerCheckpointError (missing) when no keeper has a good copy. Disk: checkpoint.load."""
        if found.source == "disk":
            path = found.path or os.path.join(self.dir, checkpoint.checkpoint_name(found.step))
            self.last_load_host = None
            return checkpoint.load(path)
        want = self.rank if rank is None else rank
        if found.world > 0 and want >= found.world:
            want %= found.world
        for host, conn in self._keepers():
            try:
                reply, data = conn.request({"op": "get", "rank": want, "uid": self.uid,
                                            "attempt": found.attempt, "step": found.step})
            except PeerCheckpointError:
                continue
            except OSError:
                self._conns.pop(host, None)
                continue
            if len(data) != reply.get("length") or zlib.crc32(data) != reply.get("crc32"):
                self.stats["torn_refused"] += 1
                self._warn(("torn", host), f"copy of rank {want} step {found.step} on {host} "
                                           f"failed its checksum; trying the next keeper")
                continue
            self.last_load_host = host
            return data
        raise PeerCheckpointError("missing", f"no keeper holds a good copy of rank {want} at "
                                             f"step {found.step} (attempt {found.attempt})")

    def load_torch(self, found: Found, rank: Optional[int] = None, *,
                   map_location: Any = "cpu") -> Any:
        import torch

        return torch.load(io.BytesIO(self.load(found, rank)), map_location=map_location)

    # --- ending ---------------------------------------------------------------------------

    def close(self, *, finished: bool = False, timeout_s: float = 30.0) -> None:
        """Sends what is pending, stops the sender. finished=True (the chief, once the whole
        job is done): tells every keeper of the job to exit."""
        try:
            if self._thread is not None:
                try:
                    self.flush(timeout_s)
                finally:
                    with self._cv:
                        self._closed = True
                        self._cv.notify_all()
                    self._thread.join(timeout_s)
            if finished and self.enabled:
                for host, conn in self._keepers():
                    with contextlib.suppress(OSError, PeerCheckpointError):
                        conn.request({"op": "shutdown"})
        finally:
            for conn in self._conns.values():
                conn.close()


def open(ctx: Any = None, env: Optional[Mapping[str, str]] = None) -> PeerCheckpoints:  # noqa: A001
    """PeerCheckpoints for this worker (ctx: tessera.worker.context(), read if None), configured
    from the environment the head set from spec.checkpoint.inMemory. Disabled (disk only) when
    the job did not ask, or has no checkpoint directory."""
    from . import worker

    env = os.environ if env is None else env
    ctx = worker.context(env) if ctx is None else ctx
    return PeerCheckpoints(
        config_from_env(env), rank=ctx.rank, world=ctx.world_size, num_slices=ctx.num_slices,
        slice_id=ctx.slice_id, attempt=attempt_fence.attempt_from_env(env),
        uid=attempt_fence.uid_from_env(env), directory=ctx.checkpoint_dir,
        host=_host_from_env(env), master_addr=ctx.master_addr, master_port=ctx.master_port,
        env=env)


def _main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tessera.peer_ckpt")
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keeper", help="run a host's keeper (workers start it themselves)")
    k.add_argument("--root", required=True)
    k.add_argument("--host", required=True)
    k.add_argument("--max-bytes", type=int, required=True)
    k.add_argument("--bind", default="127.0.0.1")
    k.add_argument("--advertise", default="127.0.0.1")
    k.add_argument("--idle-s", type=float, default=DEFAULT_IDLE_S)
    k.add_argument("--daemon", action="store_true")
    a = p.parse_args(argv)
    if a.daemon:
        if os.fork() > 0:
            os._exit(0)  # the spawner waits for this; the keeper lives on in the child
        os.setsid()
    with contextlib.suppress(OSError):
        os.nice(BACKGROUND_NICE)  # the host's training processes come first
    run_keeper(a.root, a.host, a.max_bytes, a.bind, a.advertise, a.idle_s)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
