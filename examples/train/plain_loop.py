#!/usr/bin/env python3
"""A training loop without any framework, checkpointing through the same tessera SDK calls as
train.py (tessera.peer_ckpt over tessera.checkpoint): the in-memory peer checkpoints of
spec.checkpoint.inMemory when the job asks for them, disk checkpoints every CKPT_EVERY steps.

The "model" is a vector updated from each batch's sample indices by a fixed rule, the same on
every rank (data parallel: every rank holds the whole state), so the state after step n is a
known function of n: after a restore the loop replays the rule from scratch and exits 4 if the
state it loaded is not exactly that (a wrong or torn restore cannot pass unnoticed).

The ranks step in lockstep through a small TCP barrier that rank 0 serves on MASTER_PORT (the
stand-in for a collective): a rank that dies breaks the barrier and the others exit 1 at once,
as a gloo all-reduce would, so the launcher restarts the group. The same barrier carries rank
0's choice of checkpoint to the others.

Environment: STEPS (100), CKPT_EVERY (10), STEP_MS (50), BATCH_SIZE (4), TRACE_FILE (a JSON
line per step and per restore: {"type": "step"|"restore", "rank", "attempt", "step", ...}).
Exit codes: 0 done, 1 the group broke (a peer died), 4 restored state wrong.
"""

import json
import os
import socket
import struct
import sys
import time

try:
    from tessera import checkpoint, data, peer_ckpt, worker
except ImportError:  # run from a checkout without PYTHONPATH=python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    from tessera import checkpoint, data, peer_ckpt, worker

NUM_SAMPLES = 256
DIM = 16
SEED = 7
_MSG = struct.Struct("<qqqq")  # four int64s per barrier message


def env_int(name, default):
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def initial_state():
    return {"step": 0, "w": [0] * DIM}


def apply_step(w, indices):
    """The update rule: deterministic, order-sensitive, exact in integers."""
    out = list(w)
    for i in indices:
        out[i % DIM] = (out[i % DIM] * 31 + i + 1) % 1_000_003
    return out


class Barrier:
    """All ranks exchange four int64s per round; rank 0 answers with its own (the decision)."""

    def __init__(self, ctx, timeout_s=30.0):
        self.world = ctx.world_size
        self.rank = ctx.rank
        self.peers = []
        if self.world == 1:
            return
        deadline = time.monotonic() + timeout_s
        if ctx.rank == 0:
            srv = socket.socket()
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("0.0.0.0", ctx.master_port))
            srv.listen(self.world)
            srv.settimeout(timeout_s)
            while len(self.peers) < self.world - 1:
                conn, _ = srv.accept()
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    self._recv(conn)  # the hello: a probe that only connects is dropped
                except OSError:
                    conn.close()
                    continue
                conn.settimeout(None)
                self.peers.append(conn)
            srv.close()
        else:
            while True:
                try:
                    conn = socket.create_connection((ctx.master_addr, ctx.master_port),
                                                    timeout=timeout_s)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            conn.settimeout(None)
            conn.sendall(_MSG.pack(ctx.rank, 0, 0, 0))
            self.peers = [conn]

    def _recv(self, conn):
        buf = b""
        while len(buf) < _MSG.size:
            chunk = conn.recv(_MSG.size - len(buf))
            if not chunk:
                raise ConnectionError("a peer left the group")
            buf += chunk
        return _MSG.unpack(buf)

    def exchange(self, values):
        """Rank 0's values after every rank has sent its own (a barrier plus a broadcast)."""
        if self.world == 1:
            return values
        if self.rank == 0:
            for c in self.peers:
                self._recv(c)
            for c in self.peers:
                c.sendall(_MSG.pack(*values))
            return values
        self.peers[0].sendall(_MSG.pack(*values))
        return self._recv(self.peers[0])


def trace(path, **fields):
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(dict(fields, time=time.time())) + "\n")


def main():
    ctx = worker.context()
    steps = env_int("STEPS", 100)
    ckpt_every = env_int("CKPT_EVERY", 10)
    step_s = env_int("STEP_MS", 50) / 1000
    batch_size = env_int("BATCH_SIZE", 4)
    trace_path = os.environ.get("TRACE_FILE") or None
    global_batch = batch_size * ctx.world_size
    if NUM_SAMPLES % global_batch:
        print(f"plain_loop: BATCH_SIZE x WORLD_SIZE ({global_batch}) must divide {NUM_SAMPLES}",
              file=sys.stderr)
        return 1
    try:
        barrier = Barrier(ctx)
    except OSError as e:
        print(f"plain_loop: the group did not form: {e}", file=sys.stderr, flush=True)
        return 1
    batches = data.ShardedBatches(range(NUM_SAMPLES), batch_size=batch_size, rank=ctx.rank,
                                  world_size=ctx.world_size, seed=SEED, last_batch="drop")
    mem = peer_ckpt.open(ctx)  # disk only unless the job asked for spec.checkpoint.inMemory

    # Rank 0 chooses (memory copies newer than the disk checkpoint, else disk) and tells the
    # others, so every rank resumes the same step.
    restore_start = time.monotonic()
    found = mem.latest() if ctx.is_chief else None
    step, source, attempt, world = barrier.exchange(
        (found.step, 1 if found.source == "memory" else 0, found.attempt, found.world)
        if found else (-1, 0, -1, 0))
    state = initial_state()
    if step >= 0:
        chosen = peer_ckpt.Found(step, "memory" if source else "disk", attempt, world)
        state = json.loads(mem.load(chosen))
        batches.load_state_dict(state["data"])
        # Replay from scratch: the loaded state must be exactly the state after its step.
        w = initial_state()["w"]
        for k in range(1, state["step"] + 1):
            w = apply_step(w, step_indices(k, global_batch))
        if state["step"] != step or state["w"] != w:
            print(f"plain_loop: restored state of step {step} is wrong", file=sys.stderr,
                  flush=True)
            return 4
        trace(trace_path, type="restore", rank=ctx.rank, attempt=ctx.attempt, step=step,
              source=chosen.source, host=mem.last_load_host)
    else:
        trace(trace_path, type="restore", rank=ctx.rank, attempt=ctx.attempt, step=0,
              source="none", host=None)
    step = max(step, 0)
    worker.report_restore(step, time.monotonic() - restore_start)

    while step < steps:
        start = time.monotonic()
        batch = next(batches)
        # Every rank applies the whole global batch (replicated state): its own shard and,
        # through the shared permutation, the others' (what an all-reduce would give it).
        indices = step_indices(step + 1, global_batch)
        mine = indices[ctx.rank * batch_size:(ctx.rank + 1) * batch_size]
        if batch.indices != mine:
            print(f"plain_loop: rank {ctx.rank} got batch {batch.indices} at step {step + 1}, "
                  f"expected {mine} (data position restored wrong)", file=sys.stderr, flush=True)
            return 4
        time.sleep(max(0.0, step_s - (time.monotonic() - start)))
        try:
            barrier.exchange((step + 1, 0, 0, 0))
        except OSError as e:
            print(f"plain_loop: {e} at step {step + 1}", file=sys.stderr, flush=True)
            return 1
        state = {"step": step + 1, "w": apply_step(state["w"], indices),
                 "data": batches.state_dict()}
        step += 1
        snapshot = lambda: json.dumps(state).encode()  # noqa: E731
        mem.save(step, snapshot)  # every inMemory.everySteps steps; sent in the background
        trace(trace_path, type="step", rank=ctx.rank, attempt=ctx.attempt, step=step)
        worker.report_progress(step)
        if ctx.is_chief and (step % ckpt_every == 0 or step == steps) and ctx.checkpoint_dir:
            saved = checkpoint.save(ctx.checkpoint_dir, step, snapshot(), keep_last=3)
            worker.report_checkpoint(step, saved.seconds)
    mem.close()
    barrier.exchange((steps, 0, 0, 0))  # every rank has sent its last snapshot
    if ctx.is_chief:
        mem.close(finished=True)  # the job is done: its keepers may exit
        print(f"RESULT ok steps={step} world={ctx.world_size}", flush=True)
    return 0


def step_indices(k, global_batch):
    """The sample indices of global step k (1-based): the group's k-th slice of the epochs'
    permutations (NUM_SAMPLES is a multiple of the global batch, so no ragged tail)."""
    first = (k - 1) * global_batch
    epoch, offset = divmod(first, NUM_SAMPLES)
    return data.permutation(NUM_SAMPLES, SEED, epoch)[offset:offset + global_batch]


if __name__ == "__main__":
    sys.exit(main())
