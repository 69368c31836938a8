#!/usr/bin/env python3
"""Example data-parallel training job for tessera: linear regression with PyTorch over gloo.

Every rank computes gradients on its shard of each global batch (tessera.data), all-reduces
them, and checks the collective itself each step (an all-reduce of rank + 1 must equal
world * (world + 1) / 2, else exit 3). It reports progress every step and checkpoints every
CKPT_EVERY steps through the tessera SDK, resumes from the newest complete checkpoint (model,
optimizer, data position, step) and reports the restore, and on SIGTERM saves a checkpoint and
exits 143 (preemption). If the group is stuck (a peer hung or dead, so no step can finish),
SIGTERM exits 143 after STOP_TIMEOUT_SECONDS without a checkpoint: the last periodic one stands.

The same script runs under tessera and under torchrun (tessera.worker.context() reads both
environments); bench/recovery runs it under both.

Environment (besides the tessera contract, see python/tessera/README.md):
  STEPS                 total steps of the job, counting those done before a resume (100)
  CKPT_EVERY            steps between checkpoints (10); one is also written at the end
  TESSERA_PEER_CKPT_*   set by the head from spec.checkpoint.inMemory: every rank also keeps
                        a snapshot in host memory every everySteps steps (tessera.peer_ckpt),
                        and a restart resumes from the freshest complete one when it is newer
                        than the newest disk checkpoint
  KEEP_CHECKPOINTS      complete checkpoints kept (3)
  BATCH_SIZE            samples per rank per step (16)
  DIST_TIMEOUT_SECONDS  timeout of init_process_group and of each collective (60; gloo's own
                        default is 1800)
  STEP_MS               simulated compute: each step takes at least this long, the rest spent
                        asleep before the all-reduce (0)
  STOP_TIMEOUT_SECONDS  after SIGTERM, exit without a checkpoint if no step completes within
                        this long (3)
  WAIT_FOR_MASTER       1 (default): ranks other than 0 wait for rank 0's store to listen before
                        init_process_group (tessera.rendezvous); 0: connect at once, as before
                        (torch's store client then retries after a whole second)
  TRAIN_TRACE_FILE      if set, each rank appends the dataset indices of every batch it takes
                        (a JSON line per step), so tests can check exactly-once delivery

Output on rank 0: `step N loss X` per step (mean over ranks of the batch loss), then\n`RESULT ok loss=X steps=N world=W` (X: loss over the whole dataset) and exit 0.
Exit codes: 0 done, 1 bad configuration or non-finite loss, 3 all-reduce check failed,
143 preempted by SIGTERM (after the checkpoint is written).
"""

import datetime
import json
import math
import os
import signal
import sys
import threading
import time

try:
    from tessera import checkpoint, data, peer_ckpt, rendezvous, worker
except ImportError:  # run from a checkout without PYTHONPATH=python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    from tessera import checkpoint, data, peer_ckpt, rendezvous, worker

NUM_SAMPLES = 512
NUM_FEATURES = 8
DATA_SEED = 1234
EXIT_CONFIG = 1
EXIT_COLLECTIVE_CHECK = 3
EXIT_PREEMPTED = 128 + signal.SIGTERM

_stop_requested = False
_steps_done = 0  # steps completed by this process, read by the stuck-stop watcher


def _on_sigterm(signum, frame):
    # Only set a flag: the ranks agree on when to stop through the next collective, so they
    # all stop after the same step and the checkpoint matches every rank's position.
    global _stop_requested
    _stop_requested = True


def _watch_for_stuck_stop(timeout_s):
    """Exits the process 143 if SIGTERM comes while no step can complete.

    A rank blocked in a collective (a peer is dead or stopped) never returns to Python, so the
    SIGTERM handler above never runs and the launcher would have to wait out its grace period
    and SIGKILL. The C-level handler still writes the signal number to the wakeup fd; this
    thread reads it and, if no step completes within timeout_s, exits at once. Without a
    checkpoint: the ranks cannot agree on one, and the last periodic checkpoint is consistent.
    """
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)

    def watch():
        while signal.SIGTERM not in os.read(r, 64):
            pass
        steps_at_sigterm = _steps_done
        threading.Event().wait(timeout_s)  # a deadline for the main loop, not a poll
        if _steps_done == steps_at_sigterm:
            print(f"train: SIGTERM and no step completed in {timeout_s} s (the group is stuck); "
                  f"exiting without a checkpoint after step {_steps_done}",
                  file=sys.stderr, flush=True)
            os._exit(EXIT_PREEMPTED)

    threading.Thread(target=watch, name="stuck-stop", daemon=True).start()


def env_int(name, default, minimum):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        sys.exit(f"train: {name} must be an integer, got {raw!r}")
    if value < minimum:
        sys.exit(f"train: {name} must be >= {minimum}, got {value}")
    return value


def synthetic_dataset(torch):
    """The same regression problem on every rank: y = X w + 0.5 + small noise."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(NUM_SAMPLES, NUM_FEATURES, generator=gen)
    w = torch.randn(NUM_FEATURES, 1, generator=gen)
    y = x @ w + 0.5 + 0.01 * torch.randn(NUM_SAMPLES, 1, generator=gen)
    return x, y


def main():
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        ctx = worker.context()
    except worker.EnvError as e:
        print(f"train: {e}", file=sys.stderr)
        return EXIT_CONFIG
    steps = env_int("STEPS", 100, 0)
    ckpt_every = env_int("CKPT_EVERY", 10, 1)
    keep = env_int("KEEP_CHECKPOINTS", 3, 1)
    batch_size = env_int("BATCH_SIZE", 16, 1)
    timeout_s = env_int("DIST_TIMEOUT_SECONDS", 60, 1)
    step_s = env_int("STEP_MS", 0, 0) / 1000
    _watch_for_stuck_stop(env_int("STOP_TIMEOUT_SECONDS", 3, 1))
    trace_path = os.environ.get("TRAIN_TRACE_FILE") or None
    chief = ctx.is_chief

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # several ranks share a host's cores
    # env:// reads these; a single local run may have none set.
    os.environ.setdefault("MASTER_ADDR", ctx.master_addr)
    os.environ.setdefault("MASTER_PORT", str(ctx.master_port))
    if env_int("WAIT_FOR_MASTER", 1, 0):
        rendezvous.wait_for_master(ctx, timeout_s=timeout_s)  # no 1 s retry of the store client
    dist.init_process_group("gloo", init_method="env://", rank=ctx.rank,
                            world_size=ctx.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    world = ctx.world_size

    x, y = synthetic_dataset(torch)
    batches = data.ShardedBatches(range(NUM_SAMPLES), batch_size=batch_size, rank=ctx.rank,
                                  world_size=world, seed=DATA_SEED, last_batch="drop")
    torch.manual_seed(0)
    model = torch.nn.Linear(NUM_FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    params = list(model.parameters())

    # Rank 0 picks the checkpoint and tells the others, so every rank resumes the same step
    # even if the directory changes while they start. With spec.checkpoint.inMemory that is
    # the freshest complete in-memory copy when newer than the disk checkpoint.
    step = 0
    restore_start = time.monotonic()
    mem = peer_ckpt.open(ctx)
    found = mem.latest() if (chief and ctx.checkpoint_dir) else None
    chosen = torch.tensor([found.step, int(found.source == "memory"), found.attempt, found.world]
                          if found else [-1, 0, -1, 0], dtype=torch.int64)
    dist.broadcast(chosen, src=0)
    if chosen[0].item() >= 0:
        where = peer_ckpt.Found(int(chosen[0]), "memory" if chosen[1].item() else "disk",
                                int(chosen[2]), int(chosen[3]))
        state = mem.load_torch(where)
        path = (f"memory (host {mem.last_load_host})" if where.source == "memory" else
                os.path.join(ctx.checkpoint_dir, checkpoint.checkpoint_name(where.step)))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        batches.load_state_dict(state["data"])
        step = state["step"]
        if chief:
            print(f"resume step {step} from {path} (saved at world {state['world']}, now {world})",
                  flush=True)
    for p in params:  # identical start on every rank, whatever happened before
        dist.broadcast(p.data, src=0)
    worker.report_restore(step, time.monotonic() - restore_start)

    def save():
        if not (chief and ctx.checkpoint_dir):
            return
        state = {"step": step, "world": world, "model": model.state_dict(),
                 "optimizer": optimizer.state_dict(), "data": batches.state_dict()}
        saved = checkpoint.save_torch(ctx.checkpoint_dir, step, state, keep_last=keep)
        worker.report_checkpoint(step, saved.seconds)

    global _steps_done
    expected_check = world * (world + 1) / 2
    while step < steps:
        step_start = time.monotonic()
        batch = next(batches)
        idx = torch.tensor(batch.indices, dtype=torch.int64)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        if step_s:
            time.sleep(max(0.0, step_s - (time.monotonic() - step_start)))

        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)
        flat /= world
        offset = 0
        for p in params:
            n = p.grad.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n

        # One small collective carries the check, the stop vote and the loss.
        check = torch.tensor([ctx.rank + 1, 1.0 if _stop_requested else 0.0, loss.item()],
                             dtype=torch.float64)
        dist.all_reduce(check)
        if check[0].item() != expected_check:
            print(f"train: all-reduce check failed at step {step + 1}: got {check[0].item()}, "
                  f"expected {expected_check} (world {world})", file=sys.stderr, flush=True)
            return EXIT_COLLECTIVE_CHECK
        optimizer.step()
        step += 1
        _steps_done = step
        loss_value = check[2].item() / world
        if mem.due(step):  # snapshot now (torch.save into bytes), sent in the background
            mem.save_torch(step, {"step": step, "world": world, "model": model.state_dict(),
                                  "optimizer": optimizer.state_dict(),
                                  "data": batches.state_dict()})

        if trace_path:
            with open(trace_path, "a") as f:
                f.write(json.dumps({"rank": ctx.rank, "attempt": ctx.attempt, "step": step,
                                    "epoch": batch.epoch, "indices": batch.indices}) + "\n")
        worker.report_progress(step)
        if chief:
            print(f"step {step} loss {loss_value:.4f}", flush=True)
        if check[1].item() > 0:
            save()
            if chief:
                print(f"PREEMPTED step={step}", flush=True)
            dist.destroy_process_group()
            return EXIT_PREEMPTED
        if step % ckpt_every == 0 or step == steps:
            save()

    with torch.no_grad():  # the model is identical on every rank, so is this
        final_loss = torch.nn.functional.mse_loss(model(x), y).item()
    mem.close()  # the last snapshot sent
    dist.barrier()  # nobody reports success before every rank has finished its steps
    dist.destroy_process_group()
    if chief:
        mem.close(finished=True)  # the job is done: its hosts' keepers may exit
    if chief:
        if batches.dropped_samples:
            print(f"data: dropped {batches.dropped_samples} samples at ragged epoch tails",
                  flush=True)
        if not math.isfinite(final_loss):
            print(f"RESULT fail loss={final_loss} steps={step} world={world}", flush=True)
            return EXIT_CONFIG
        print(f"RESULT ok loss={final_loss:.6f} steps={step} world={world}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
