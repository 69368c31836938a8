"""Atomic, self-verifying checkpoint files in one directory.

A checkpoint is the file `<dir>/ckpt-<step:010d>`: a fixed header (magic, step, payload length,
CRC-32 of the payload) followed by the payload bytes. save() writes a temporary file in the same
directory, fsyncs it, renames it into place and fsyncs the directory, so a crash at any moment
leaves either the old set of checkpoints or the new one, never a half-written `ckpt-*`. latest()
still verifies each candidate (length and checksum), so a file damaged afterwards, or copied in
truncated, is skipped in favour of the next older good one.

Fencing (attempt_fence.py): in a worker (TESSERA_ATTEMPT set, or attempt= given) latest()
records the attempt as started in the directory and save() commits only while no newer attempt
has started there (StaleAttempt otherwise), so a leftover worker of an earlier attempt never
overwrites a newer attempt's checkpoints. Outside a worker nothing changes.

Thread-safety: functions hold no state. Several processes may save into one directory as long
as they save different steps; in practice only the chief rank saves.
"""

from __future__ import annotations

import io
import os
import re
import struct
import tempfile
import time
import zlib
from typing import Any, Callable, NamedTuple, Optional, Union

from . import attempt_fence
from .attempt_fence import StaleAttempt  # noqa: F401  (re-exported: callers catch it here)

_MAGIC = b"TESSCKP1"
_HEADER = struct.Struct("<8sQQI")  # magic, step, payload length, crc32(payload)
_NAME = re.compile(r"^ckpt-(\d{10})$")
_TEMP_PREFIX = ".tmp-ckpt-"
_CHUNK = 1 << 20

State = Union[bytes, bytearray, memoryview, Callable[[], Union[bytes, bytearray, memoryview]]]


class CorruptCheckpoint(ValueError):
    """A checkpoint file is truncated, damaged or not a checkpoint at all."""


class Saved(NamedTuple):
    path: str
    seconds: float  # wall time of save(), serialization (when a callable is given) included


def checkpoint_name(step: int) -> str:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    if step >= 10**10:
        raise ValueError(f"step must be < 10**10 to fit the file name, got {step}")
    return f"ckpt-{step:010d}"


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(directory: str, step: int, state: State, *, keep_last: Optional[int] = None,
         attempt: Optional[int] = None) -> Saved:
    """Writes `state` (bytes, or a callable returning bytes) as the checkpoint of `step`.

    Creates `directory` if needed. Replaces an existing checkpoint of the same step. With
    keep_last=N (N >= 1), then deletes all but the N newest complete checkpoints. Returns the
    final path and the seconds taken. Raises OSError on I/O failure (no `ckpt-*` file is left
    behind for this step in that case) and ValueError/TypeError for bad arguments.

    `attempt` (default TESSERA_ATTEMPT, unset outside a worker: no fencing): the commit is
    refused with StaleAttempt, leaving the directory as it was, when a newer attempt has
    started in `directory` (attempt_fence.py).
    """
    name = checkpoint_name(step)
    if keep_last is not None and (isinstance(keep_last, bool) or keep_last < 1):
        raise ValueError(f"keep_last must be None or >= 1, got {keep_last!r}")
    start = time.monotonic()
    payload = state() if callable(state) else state
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(f"checkpoint state must be bytes, got {type(payload).__name__}")
    payload = memoryview(payload).cast("B")
    if attempt is None:
        attempt = attempt_fence.attempt_from_env()

    os.makedirs(directory, exist_ok=True)
    header = _HEADER.pack(_MAGIC, step, payload.nbytes, zlib.crc32(payload))
    fd, temp_path = tempfile.mkstemp(prefix=f"{_TEMP_PREFIX}{step:010d}-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp_path, 0o644)
        final_path = os.path.join(directory, name)
        # The check, the rename and the prune under the directory's lock: an older attempt
        # can neither commit nor delete once a newer one has started.
        with attempt_fence.commit(directory, attempt):
            os.replace(temp_path, final_path)
            _fsync_dir(directory)
            if keep_last is not None:
                prune(directory, keep_last)
    except BaseException:
        try:
            os.unlink(temp_path)
        except FileNotFoundError:
            pass
        raise
    return Saved(final_path, time.monotonic() - start)


def _read_verified(path: str, expected_step: Optional[int] = None) -> bytes:
    with open(path, "rb") as f:
        header = f.read(_HEADER.size)
        if len(header) < _HEADER.size:
            raise CorruptCheckpoint(f"{path}: truncated header ({len(header)} bytes)")
        magic, step, length, crc = _HEADER.unpack(header)
        if magic != _MAGIC:
            raise CorruptCheckpoint(f"{path}: not a tessera checkpoint (bad magic)")
        if expected_step is not None and step != expected_step:
            raise CorruptCheckpoint(f"{path}: header says step {step}, name says {expected_step}")
        payload = f.read(length + 1)
    if len(payload) != length:
        raise CorruptCheckpoint(
            f"{path}: payload is {len(payload)} bytes, header says {length}"
            + (" (trailing data)" if len(payload) > length else " (truncated)")
        )
    if zlib.crc32(payload) != crc:
        raise CorruptCheckpoint(f"{path}: checksum mismatch")
    return payload


def _step_of(path: str) -> Optional[int]:
    m = _NAME.match(os.path.basename(path))
    return int(m.group(1)) if m else None


def load(path: str) -> bytes:
    """Returns the payload of the checkpoint at `path`. Raises CorruptCheckpoint if it is
    truncated or damaged, OSError if it cannot be read."""
    return _read_verified(path, _step_of(path))


def _complete_steps(directory: str) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    steps = []
    for n in names:
        m = _NAME.match(n)
        if m:
            steps.append(int(m.group(1)))
    return sorted(steps, reverse=True)


def latest(directory: str, *, attempt: Optional[int] = None) -> Optional[tuple[int, str]]:
    """Returns (step, path) of the newest checkpoint in `directory` that verifies, or None if
    there is none (or the directory does not exist). Temporaries and files that fail
    verification are skipped, not deleted. Reads each candidate fully to check its checksum.

    In a worker (`attempt`, default TESSERA_ATTEMPT) it first records the attempt as started
    in `directory` (creating it), so no older attempt commits there from now on; StaleAttempt
    when a newer one has started already."""
    attempt_fence.begin_attempt(directory, attempt)
    for step in _complete_steps(directory):
        path = os.path.join(directory, checkpoint_name(step))
        try:
            _read_verified(path, step)
        except (CorruptCheckpoint, OSError):
            continue
        return step, path
    return None


def prune(directory: str, keep_last: int) -> list[str]:
    """Deletes all but the `keep_last` newest checkpoints that verify, and any damaged checkpoint
    older than the oldest one kept. Temporaries are left alone (another process may be writing
    one). Returns the deleted paths."""
    if isinstance(keep_last, bool) or keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last!r}")
    kept = 0
    deleted = []
    for step in _complete_steps(directory):
        path = os.path.join(directory, checkpoint_name(step))
        if kept < keep_last:
            try:
                _read_verified(path, step)
                kept += 1
                continue
            except (CorruptCheckpoint, OSError):
                # A damaged file newer than the kept ones is left for inspection; it never
                # shadows a good one because latest() skips it.
                continue
        try:
            os.unlink(path)
            deleted.append(path)
        except FileNotFoundError:
            pass
    if deleted:
        _fsync_dir(directory)
    return deleted


def save_torch(
    directory: str, step: int, obj: Any, *, keep_last: Optional[int] = None,
    attempt: Optional[int] = None
) -> Saved:
    """save() of `obj` (e.g. a dict of state dicts) serialized with torch.save. Imports torch."""

    def serialize() -> bytes:
        import torch  # deferred: the SDK must not pay torch's import time unless asked

        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.getbuffer()

    return save(directory, step, serialize, keep_last=keep_last, attempt=attempt)


def load_torch(path: str, *, map_location: Any = "cpu") -> Any:
    """load() followed by torch.load. Imports torch. Raises CorruptCheckpoint like load()."""
    import torch

    return torch.load(io.BytesIO(load(path)), map_location=map_location)
