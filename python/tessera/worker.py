"""What a worker process is told by the tessera agent, and how it reports back.

context() reads the environment contract (see README.md in this folder) into a frozen
WorkerContext; it also reads torchrun's (TorchElastic's) environment, so one training script
runs unchanged under either launcher. report_progress(), report_checkpoint() and
report_restore() append one JSON line each to the file named by TESSERA_PROGRESS_FILE, which
the agent tails to detect hangs (no progress) and to relay progress to the head (which computes
time to restore and steps lost from the restore line).

Thread-safety: every function here is safe to call from several threads and processes; each
report is a single O_APPEND write, so lines from different ranks never interleave.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import time
from typing import Mapping, Optional

from . import agent_watchdog

PROGRESS_FILE_VAR = "TESSERA_PROGRESS_FILE"
# Milliseconds between liveness ticks; 0 turns them off.
ALIVE_INTERVAL_VAR = "TESSERA_ALIVE_INTERVAL_MS"
DEFAULT_ALIVE_INTERVAL_MS = 1000


class EnvError(ValueError):
    """The environment contract is broken: a variable is missing, malformed or inconsistent.

    `variable` names the offending variable so the launcher's bug is easy to find.
    """

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


@dataclasses.dataclass(frozen=True)
class WorkerContext:
    """Who this process is. Defaults describe a single local process (rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    slice_id: int = 0  # MEGASCALE_SLICE_ID
    num_slices: int = 1  # MEGASCALE_NUM_SLICES
    worker_id: int = 0  # TPU_WORKER_ID, the host's index inside its slice
    # TESSERA_ATTEMPT, 0 on the first start, +1 on each restart; under torchrun (no
    # TESSERA_ATTEMPT) TORCHELASTIC_RESTART_COUNT, which counts the local agent's failure
    # restarts only: membership changes and agents that join later do not advance it.
    attempt: int = 0
    job: str = "local"  # TESSERA_JOB; under torchrun TORCHELASTIC_RUN_ID
    checkpoint_dir: Optional[str] = None  # TESSERA_CHECKPOINT_DIR; None: no checkpoints
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    @property
    def is_chief(self) -> bool:
        """True on global rank 0, the rank that writes checkpoints and prints results."""
        return self.rank == 0


def _get(env: Mapping[str, str], name: str) -> Optional[str]:
    # A variable set to the empty string is treated as unset: launchers commonly write
    # NAME= when they have no value, and that must not read as a malformed integer.
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = int(raw, 10)
    except ValueError:
        raise EnvError(name, f"must be an integer, got {raw!r}") from None
    if value < minimum:
        raise EnvError(name, f"must be >= {minimum}, got {value}")
    return value


def _require_together(env: Mapping[str, str], names: tuple[str, ...]) -> None:
    present = [n for n in names if _get(env, n) is not None]
    if present and len(present) != len(names):
        missing = next(n for n in names if _get(env, n) is None)
        raise EnvError(missing, f"is required when {', '.join(present)} is set")


def _attempt(env: Mapping[str, str]) -> int:
    if _get(env, "TESSERA_ATTEMPT") is not None:
        return _int(env, "TESSERA_ATTEMPT", 0)
    return _int(env, "TORCHELASTIC_RESTART_COUNT", 0)


def context(env: Optional[Mapping[str, str]] = None) -> WorkerContext:
    """Reads the environment contract. Raises EnvError naming the variable at fault.

    `env` defaults to os.environ; pass a dict in tests. Nothing set gives WorkerContext().
    torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT itself; its
    TORCHELASTIC_RESTART_COUNT and TORCHELASTIC_RUN_ID stand in for TESSERA_ATTEMPT and
    TESSERA_JOB when those are unset (tessera's win when both are set).
    """
    env = os.environ if env is None else env
    _require_together(env, ("RANK", "WORLD_SIZE"))
    _require_together(env, ("MEGASCALE_SLICE_ID", "MEGASCALE_NUM_SLICES"))

    world_size = _int(env, "WORLD_SIZE", 1, minimum=1)
    rank = _int(env, "RANK", 0)
    if rank >= world_size:
        raise EnvError("RANK", f"must be < WORLD_SIZE ({world_size}), got {rank}")
    num_slices = _int(env, "MEGASCALE_NUM_SLICES", 1, minimum=1)
    slice_id = _int(env, "MEGASCALE_SLICE_ID", 0)
    if slice_id >= num_slices:
        raise EnvError(
            "MEGASCALE_SLICE_ID", f"must be < MEGASCALE_NUM_SLICES ({num_slices}), got {slice_id}"
        )
    if world_size > 1:
        # A multi-process group cannot rendezvous without these; failing here is clearer
        # than a torch.distributed timeout minutes later.
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if _get(env, name) is None:
                raise EnvError(name, f"is required when WORLD_SIZE > 1 (WORLD_SIZE={world_size})")
    master_port = _int(env, "MASTER_PORT", 29500, minimum=1)
    if master_port > 65535:
        raise EnvError("MASTER_PORT", f"must be a TCP port (1..65535), got {master_port}")

    return WorkerContext(
        rank=rank,
        world_size=world_size,
        local_rank=_int(env, "LOCAL_RANK", 0),
        slice_id=slice_id,
        num_slices=num_slices,
        worker_id=_int(env, "TPU_WORKER_ID", 0),
        attempt=_attempt(env),
        job=_get(env, "TESSERA_JOB") or _get(env, "TORCHELASTIC_RUN_ID") or "local",
        checkpoint_dir=_get(env, "TESSERA_CHECKPOINT_DIR"),
        master_addr=_get(env, "MASTER_ADDR") or "127.0.0.1",
        master_port=master_port,
    )


def _check_step(step: object) -> int:
    # bool is an int subclass; True as a step is always a bug.
    if not isinstance(step, int) or isinstance(step, bool):
        raise TypeError(f"step must be an int, got {type(step).__name__}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return step


def _append_line(path: str, record: dict) -> None:
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        # One write call: with O_APPEND the kernel positions and writes it as a unit, so lines
        # from concurrent ranks do not interleave.
        written = os.write(fd, line)
    finally:
        os.close(fd)
    if written != len(line):
        raise OSError(f"short write to {path}: {written} of {len(line)} bytes")


def _report(record: dict, env: Optional[Mapping[str, str]]) -> bool:
    env = os.environ if env is None else env
    path = _get(env, PROGRESS_FILE_VAR)
    if path is None:
        return False
    ctx = context(env)
    record.update(rank=ctx.rank, attempt=ctx.attempt, time=time.time())
    _append_line(path, record)
    return True


class _Liveness:
    """A daemon thread that appends {"type": "alive", "step": last reported step} every
    interval. It keeps ticking while the main thread waits inside a collective (collectives
    release the GIL) and stops when the process is stopped or wedged, which is how the head
    names the stuck rank of a hang instead of every rank that waits for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._pid = 0
        self.step = 0

    def ensure_started(self, step: int, env: Mapping[str, str]) -> None:
        with self._lock:
            self.step = step
            # A forked child has no thread even though the object says so.
            if self._thread is not None and self._pid == os.getpid():
                return
            interval_ms = _int(env, ALIVE_INTERVAL_VAR, DEFAULT_ALIVE_INTERVAL_MS)
            if interval_ms == 0:
                return
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run,
                                            args=(interval_ms / 1000, dict(env)),
                                            name="tessera-alive", daemon=True)
            self._thread.start()

    def _run(self, interval_s: float, env: Mapping[str, str]) -> None:
        tick = threading.Event()  # never set: wait() is the interval timer
        while not tick.wait(interval_s):
            try:
                _report({"type": "alive", "step": self.step}, env)
            except OSError:
                return  # the progress file is gone: the worker is being torn down


_liveness = _Liveness()


def report_progress(step: int, *, env: Optional[Mapping[str, str]] = None) -> bool:
    """Records that `step` (>= 0) completed. Returns False, doing nothing, when
    TESSERA_PROGRESS_FILE is unset; True after the line is written. Raises OSError if the
    file cannot be written, TypeError/ValueError for a bad step.

    The first call also starts liveness ticks (every TESSERA_ALIVE_INTERVAL_MS, default 1000;
    0 turns them off) when reporting from the process's own environment, and the fence
    watchdog (agent_watchdog.py: the worker exits once its agent has not reached a head for
    the fence time, also when the agent itself is frozen)."""
    written = _report({"type": "progress", "step": _check_step(step)}, env)
    if written and env is None:
        _liveness.ensure_started(step, os.environ)
        agent_watchdog.start_from_env()
    return written


def _check_seconds(name: str, seconds: object) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {seconds}")
    return float(seconds)


def report_checkpoint(
    step: int, seconds_to_save: float, *, env: Optional[Mapping[str, str]] = None
) -> bool:
    """Records that a checkpoint of `step` completed and took `seconds_to_save` to write.
    Same return values and errors as report_progress."""
    _check_step(step)
    seconds = _check_seconds("seconds_to_save", seconds_to_save)
    return _report({"type": "checkpoint", "step": step, "seconds": seconds}, env)


def report_restore(
    step: int, seconds_to_load: float, *, env: Optional[Mapping[str, str]] = None
) -> bool:
    """Records that this attempt resumed from the checkpoint of `step` (0: started from
    scratch) and that loading it took `seconds_to_load`. Call it once per attempt, after the
    state is loaded and before the first step. The head takes steps lost (the last step before
    the failure minus `step`) and time to restore from it. Same return values and errors as
    report_checkpoint."""
    _check_step(step)
    seconds = _check_seconds("seconds_to_load", seconds_to_load)
    return _report({"type": "restore", "step": step, "seconds": seconds}, env)
