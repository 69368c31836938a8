"""The batching loop that runs the model, and the protocol by which the leader drives its group.

One engine thread on the leader owns the model, the KV-cache slots and every collective. HTTP
threads only call Engine.submit() and read events from the returned Request. Each turn of the
loop (continuous batching):
  1. admits waiting requests into free cache slots, one prefill each (which yields the
     request's first token), in arrival order;
  2. runs one batched decode step over every running sequence (slots 0..n-1 in one call),
     yielding one more token for each;
  3. frees the slots of finished and cancelled requests.
A long prompt's prefill therefore delays the running sequences' next token by its duration.

Group protocol (torch.distributed gloo, the leader is rank 0): before every model call the
leader broadcasts a fixed-size int64 header [op, a, b, tokens..., positions...]; followers
loop on it and make the same model call, which performs the same all-reduces in the same
order. Ops: PREFILL (a = slot, b = prompt length; a second broadcast carries the prompt),
DECODE (a = n slots; tokens and positions in the header), NOOP (sent when idle, so followers'
collective timeout only fires when the leader is gone), STOP. Only the leader samples.

Disaggregated groups (disagg.py) add two ops, each ending in one all-reduce of every rank's
outcome code (GroupChannel.agree), so all ranks know whether every rank succeeded:
EXPORT (prefill group; a = slot, b = prompt length; then the prompt and the 32-byte handle):
a PREFILL after which every rank keeps its KV shard under the handle; IMPORT (decode group;
a = slot, b = payload length; then the payload, JSON {"handle", "ranks", "tokens"}): every
follower pulls its shard from the matching prefill rank into the slot. When any rank failed
the leader then broadcasts an ordinary PREFILL of the request: the group falls back together.

Thread-safety: submit(), cancel (Request.cancel) and stop() may be called from any thread;
everything else runs on the engine thread.
"""

import collections
import os
import queue
import threading
import time

import torch

from model import decode_token

PREFILL, DECODE, NOOP, STOP, EXPORT, IMPORT = 1, 2, 3, 4, 5, 6
IDLE_NOOP_S = 5.0
HANDLE_BYTES = 32  # disagg.new_handle(): 32 hex digits
ADDRESS_BYTES = 128  # room for one "host:port" in gather_addresses


class GroupChannel:
    """The leader's and followers' side of the header protocol over torch.distributed."""

    def __init__(self, max_batch):
        import torch.distributed as dist

        self._dist = dist
        self._header = torch.zeros(3 + 2 * max_batch, dtype=torch.int64)
        self.max_batch = max_batch

    def send(self, op, a=0, b=0, tokens=(), positions=()):
        h = self._header
        h.zero_()
        h[0], h[1], h[2] = op, a, b
        n = len(tokens)
        if n:
            h[3:3 + n] = torch.tensor(tokens)
            h[3 + self.max_batch:3 + self.max_batch + n] = torch.tensor(positions)
        self._dist.broadcast(h, src=0)

    def send_prompt(self, tokens):
        self._dist.broadcast(torch.tensor(tokens, dtype=torch.int64), src=0)

    def receive(self):
        """(op, a, b, tokens, positions) as the leader sent them."""
        h = self._header
        self._dist.broadcast(h, src=0)
        op, a, b = (int(v) for v in h[:3])
        if op == DECODE:
            tokens = h[3:3 + a].tolist()
            positions = h[3 + self.max_batch:3 + self.max_batch + a].tolist()
            return op, a, b, tokens, positions
        return op, a, b, [], []

    def receive_prompt(self, length):
        t = torch.zeros(length, dtype=torch.int64)
        self._dist.broadcast(t, src=0)
        return t.tolist()

    def send_bytes(self, data):
        self._dist.broadcast(torch.frombuffer(bytearray(data), dtype=torch.uint8), src=0)

    def receive_bytes(self, length):
        t = torch.zeros(length, dtype=torch.uint8)
        self._dist.broadcast(t, src=0)
        return t.numpy().tobytes()

    def agree(self, code):
        """Every rank's outcome code (0 = success), on every rank: one all-reduce."""
        codes = torch.zeros(self._dist.get_world_size(), dtype=torch.int64)
        codes[self._dist.get_rank()] = code
        self._dist.all_reduce(codes)
        return codes.tolist()

    def gather_addresses(self, address):
        """Every rank's "host:port" (its KV listener), on every rank, in rank order."""
        data = address.encode()
        if len(data) > ADDRESS_BYTES:
            raise ValueError(f"the KV address {address!r} is longer than {ADDRESS_BYTES} bytes")
        mine = torch.zeros(ADDRESS_BYTES, dtype=torch.uint8)
        mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        every = [torch.zeros(ADDRESS_BYTES, dtype=torch.uint8)
                 for _ in range(self._dist.get_world_size())]
        self._dist.all_gather(every, mine)
        return [t.numpy().tobytes().rstrip(b"\0").decode() for t in every]


def follow(model, channel, kv=None):
    """A follower's whole life: make every model call the leader announces, until STOP. kv is
    this process's disagg.FollowerKv in a prefill or decode group (None when colocated: it
    then answers EXPORT and IMPORT with a failure code, which makes the leader prefill).

    Raises whatever torch.distributed raises when the group breaks (the caller exits, and the
    group is recreated as a whole)."""
    refused = 3  # disagg.REASONS.index("refused"), without importing the handoff's modules
    while True:
        op, a, b, tokens, positions = channel.receive()
        if op == STOP:
            return
        if op == PREFILL:
            model.prefill(a, channel.receive_prompt(b), want_logits=False)
        elif op == DECODE:
            model.decode(tokens, positions, want_logits=False)
        elif op == EXPORT:
            prompt = channel.receive_prompt(b)
            handle = channel.receive_bytes(HANDLE_BYTES).decode()
            model.prefill(a, prompt, want_logits=False)
            channel.agree(kv.export(a, prompt, handle) if kv else refused)
        elif op == IMPORT:
            payload = channel.receive_bytes(b)
            channel.agree(kv.import_shard(a, payload) if kv else refused)


class Request:
    """One completion in flight. Events arrive on .events as tuples:
    ("token", text), then ("done", finish_reason) or ("error", message)."""

    def __init__(self, tokens, max_tokens, temperature, seed):
        self.tokens = tokens
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.generator = torch.Generator()
        self.generator.manual_seed(seed if seed is not None else int.from_bytes(os.urandom(7),
                                                                                  "little"))
        self.events = queue.Queue()
        self.generated = 0
        self.cancelled = threading.Event()
        # Engine-thread state.
        self.slot = None
        self.position = 0  # where the next token fed to the model goes
        self.last = None  # the last sampled token, fed to the next decode step
        # Disaggregated serving (disagg.py). A prefill replica's request sets export: the engine
        # then leaves copies of the prompt's KV and next-token logits in .exported. A decode
        # replica's request that was prefilled elsewhere carries them in .imported, and the
        # engine writes them into the slot instead of running the prompt.
        self.export = False
        self.exported = None  # ([(k, v)] per layer, logits)
        self.imported = None  # ([(k, v)] per layer, logits)
        # Tensor-parallel groups: the handle every prefill rank keeps its shard under
        # (export), and the IMPORT payload telling each decode follower where its shard is.
        self.export_handle = None
        self.import_payload = None
        # Set by the engine: [(rank, code)] of the ranks whose EXPORT or IMPORT part failed.
        # A failed import means the request was prefilled locally instead.
        self.kv_failures = []
        self.import_s = 0.0  # how long the followers' pulls and the agreement took (IMPORT)

    def cancel(self):
        """The client went away: the engine frees the slot at its next turn."""
        self.cancelled.set()


class Engine:
    """The leader's batching loop (see the module docstring)."""

    def __init__(self, model, channel=None, max_queue=256):
        self.model = model
        self.channel = channel  # None for a group of one
        self.max_queue = max_queue
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting = collections.deque()
        self._stopping = False
        self._slots = [None] * model.max_batch
        self.failure = None  # the exception that stopped the loop, if any

    def submit(self, request):
        """Queues a request; False when the queue is full (the caller answers 503)."""
        with self._lock:
            if self._stopping or self.failure or len(self._waiting) >= self.max_queue:
                return False
            self._waiting.append(request)
            self._wake.notify()
        return True

    def load(self):
        """(running sequences, waiting requests) for /healthz."""
        with self._lock:
            return sum(s is not None for s in self._slots), len(self._waiting)

    def stop(self):
        with self._lock:
            self._stopping = True
            self._wake.notify()

    def run(self):
        """The loop; returns after stop(), raises when the model or the group fails (every
        request in flight or waiting then gets an error event)."""
        try:
            self._loop()
            if self.channel:
                self.channel.send(STOP)
        except Exception as e:  # the group broke: fail everything, let the caller exit
            self.failure = e
            raise
        finally:
            self._fail_all("the server is shutting down" if self.failure is None else
                           f"the model group failed: {self.failure}")

    def _loop(self):
        while True:
            admitted = self._admit()
            running = [r for r in self._slots if r is not None]
            if running:
                self._decode_step(running)
                continue
            if admitted:
                continue
            with self._lock:
                if self._stopping:
                    return
                if not self._waiting:
                    self._wake.wait(IDLE_NOOP_S)
                idle = not self._waiting and not self._stopping
            if idle and self.channel:
                self.channel.send(NOOP)

    def _admit(self):
        admitted = 0
        while None in self._slots:
            with self._lock:
                if not self._waiting or self._stopping:
                    return admitted
                request = self._waiting.popleft()
            if request.cancelled.is_set():
                continue
            slot = self._slots.index(None)
            request.slot = slot
            logits = self._import(slot, request) if request.imported is not None else None
            if logits is None:
                exporting = request.export and self.channel is not None
                if exporting:
                    self.channel.send(EXPORT, slot, len(request.tokens))
                    self.channel.send_prompt(request.tokens)
                    self.channel.send_bytes(request.export_handle.encode())
                elif self.channel:
                    self.channel.send(PREFILL, slot, len(request.tokens))
                    self.channel.send_prompt(request.tokens)
                logits = self.model.prefill(slot, request.tokens)
                if request.export:
                    request.exported = (self.model.export_kv(slot, len(request.tokens)),
                                        logits.clone())
                if exporting:
                    # Every rank holds its shard before the answer names the handle.
                    request.kv_failures = [(r, c) for r, c in
                                           enumerate(self.channel.agree(0)) if c]
            request.position = len(request.tokens)
            self._slots[slot] = request
            self._emit(request, logits)
            admitted += 1
        return admitted

    def _import(self, slot, request):
        """Writes a request prefilled elsewhere into `slot`: the leader's shard from
        request.imported, each follower's pulled now (IMPORT). Returns the next-token logits,
        or None when a rank failed (request.kv_failures says which): prefill locally."""
        layers, logits = request.imported
        request.imported = None
        if self.channel:
            started = time.monotonic()
            payload = request.import_payload
            self.channel.send(IMPORT, slot, len(payload))
            self.channel.send_bytes(payload)
            request.kv_failures = [(r, c) for r, c in enumerate(self.channel.agree(0)) if c]
            request.import_s = time.monotonic() - started
            if request.kv_failures:
                return None
        self.model.import_kv(slot, layers)
        return logits

    def _decode_step(self, running):
        n = max(r.slot for r in running) + 1
        tokens, positions = [0] * n, [0] * n  # free slots below n: any token at position 0
        for r in running:
            tokens[r.slot], positions[r.slot] = r.last, r.position
        if self.channel:
            self.channel.send(DECODE, n, 0, tokens, positions)
        logits = self.model.decode(tokens, positions)
        for r in running:
            r.position += 1
            self._emit(r, logits[r.slot])

    def _emit(self, request, logits):
        """Samples the request's next token, sends it, and frees the slot when done."""
        if request.cancelled.is_set():
            self._slots[request.slot] = None
            return
        if request.temperature == 0:
            index = int(torch.argmax(logits))
        else:
            probs = torch.softmax(logits / request.temperature, dim=-1)
            index = int(torch.multinomial(probs, 1, generator=request.generator))
        token = self.model.token_of(index)
        request.last = token
        request.generated += 1
        request.events.put(("token", decode_token(token)))
        if request.generated >= request.max_tokens:
            request.events.put(("done", "length"))
            self._slots[request.slot] = None

    def _fail_all(self, message):
        with self._lock:
            self._stopping = True
            waiting = list(self._waiting)
            self._waiting.clear()
        for r in waiting + [r for r in self._slots if r is not None]:
            r.events.put(("error", message))
        self._slots = [None] * len(self._slots)
