"""Checkpoint-commit fencing: a worker of an older attempt can never overwrite a newer one's
checkpoints (docs/ha.md "Fencing").

Each checkpoint directory holds two small files besides the checkpoints:

- `.tessera-attempt`: the newest attempt that has started in this directory, as JSON
  {"uid": U, "attempt": N, "pid": ..., "time": ...}. It only grows, ordered by (uid, attempt):
  the job's uid (TESSERA_JOB_UID) first, since a head never reuses a uid and a job created
  later over the same directory (to continue from its checkpoints) is newer than every
  attempt of the one before. It is replaced atomically (written to a
  temporary file, fsynced, renamed over), so a reader sees the old or the new one, never half.
- `.tessera-lock`: the lock (flock, exclusive) held while the marker is read and changed, and
  while a checkpoint is committed (its rename) and old ones pruned.

begin_attempt() records an attempt as started: under the lock, refuses (StaleAttempt) when a
newer attempt has already started, else raises the marker to it. commit() wraps a checkpoint's
commit: under the lock, refuses when a newer attempt has started, raises the marker to this one
when it is behind, and holds the lock while the caller renames its file into place. Because the
check and the rename happen under one lock, once begin_attempt(N) has returned no attempt older
than N can commit anything in the directory, however its clock, its agent or the network
behave: a zombie worker (its host frozen and given up on, then resumed) is refused and learns
that it is one.

The attempt comes from TESSERA_ATTEMPT (set by the head for every worker) unless given; with
neither (a local run) nothing is fenced and nothing is written.

The lock is flock(2): it holds between processes of one machine and on local file systems;
on NFS use a version and mount options that support it (or keep checkpoints on a file system
where rename and flock are atomic). Thread-safety: every function may be called from several
threads and processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from typing import Iterator, Mapping, Optional

ATTEMPT_FILE = ".tessera-attempt"
LOCK_FILE = ".tessera-lock"
ATTEMPT_VAR = "TESSERA_ATTEMPT"
UID_VAR = "TESSERA_JOB_UID"


class StaleAttempt(RuntimeError):
    """This attempt is older than the newest one that has started in the checkpoint directory:
    a newer attempt of the job runs, and this process must stop instead of writing."""

    def __init__(self, directory: str, attempt: int, newest: int, uid: int = 0,
                 newest_uid: int = 0) -> None:
        other = f"attempt {newest}" if newest_uid == uid else f"attempt {newest} of job uid {newest_uid}"
        super().__init__(
            f"{directory}: attempt {attempt} may not write checkpoints: {other} has "
            f"started in this directory (this worker is a leftover of an earlier attempt; "
            f"exit instead of writing. If no earlier attempt can be running, e.g. the head's "
            f"store was replaced, delete {ATTEMPT_FILE} there)")
        self.uid = uid
        self.newest_uid = newest_uid
        self.directory = directory
        self.attempt = attempt
        self.newest = newest


def attempt_from_env(env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """TESSERA_ATTEMPT as an int, or None when unset or empty. ValueError naming the variable
    when it is not an integer >= 0."""
    env = os.environ if env is None else env
    raw = (env.get(ATTEMPT_VAR) or "").strip()
    if raw == "":
        return None
    try:
        value = int(raw, 10)
    except ValueError:
        raise ValueError(f"{ATTEMPT_VAR}: must be an integer >= 0, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{ATTEMPT_VAR}: must be an integer >= 0, got {raw!r}")
    return value


def uid_from_env(env: Optional[Mapping[str, str]] = None) -> int:
    """TESSERA_JOB_UID as an int (0 when unset: a head older than it, or a local run)."""
    env = os.environ if env is None else env
    raw = (env.get(UID_VAR) or "").strip()
    if raw == "":
        return 0
    try:
        value = int(raw, 10)
    except ValueError:
        raise ValueError(f"{UID_VAR}: must be an integer >= 1, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{UID_VAR}: must be an integer >= 1, got {raw!r}")
    return value


def _check_attempt(attempt: object) -> int:
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise ValueError(f"attempt must be an int >= 0, got {attempt!r}")
    return attempt


def newest_attempt(directory: str) -> Optional[int]:
    """The newest attempt that has started in `directory`, or None when none has been recorded.
    ValueError naming the file when the marker is not {"attempt": N}."""
    newest = _newest(directory)
    return None if newest is None else newest[1]


def _newest(directory: str) -> Optional[tuple[int, int]]:
    """(uid, attempt) of the marker, or None."""
    path = os.path.join(directory, ATTEMPT_FILE)
    try:
        with open(path, "rb") as f:
            text = f.read(4096)
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
        value, uid = doc["attempt"], doc.get("uid", 0)
    except (ValueError, KeyError, TypeError, AttributeError):
        value = uid = None
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (value, uid)):
        raise ValueError(f"{path}: not an attempt marker {{\"attempt\": N}}; delete it only if "
                         f"no older attempt of the job can still be running")
    return uid, value


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_marker(directory: str, uid: int, attempt: int) -> None:
    data = json.dumps({"uid": uid, "attempt": attempt, "pid": os.getpid(),
                       "time": time.time()}).encode()
    fd, temp = tempfile.mkstemp(prefix=".tmp-attempt-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, os.path.join(directory, ATTEMPT_FILE))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _claim_locked(directory: str, uid: int, attempt: int) -> None:
    newest = _newest(directory)
    if newest is not None and newest > (uid, attempt):
        raise StaleAttempt(directory, attempt, newest[1], uid, newest[0])
    if newest != (uid, attempt):
        _write_marker(directory, uid, attempt)


def begin_attempt(directory: str, attempt: Optional[int] = None, *,
                  env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """Records `attempt` (default: TESSERA_ATTEMPT) of this job (TESSERA_JOB_UID) as started
    in `directory` (created if needed) and returns it; from then on no older attempt can commit
    there. Returns None, doing nothing, when no attempt is known. Raises StaleAttempt when a
    newer attempt has started, ValueError for a bad attempt or marker, OSError on I/O failure.
    Idempotent."""
    attempt = attempt_from_env(env) if attempt is None else _check_attempt(attempt)
    if attempt is None:
        return None
    os.makedirs(directory, exist_ok=True)
    with _locked(directory):
        _claim_locked(directory, uid_from_env(env), attempt)
    return attempt


@contextlib.contextmanager
def commit(directory: str, attempt: Optional[int]) -> Iterator[None]:
    """Holds the directory's lock around a commit (the caller's rename into place) by
    `attempt`, after checking that no newer attempt has started (StaleAttempt otherwise) and
    recording this one as started. attempt None: no fencing, no lock."""
    if attempt is None:
        yield
        return
    attempt = _check_attempt(attempt)
    with _locked(directory):
        _claim_locked(directory, uid_from_env(), attempt)
        yield
