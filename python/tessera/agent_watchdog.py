"""The worker's side of agent fencing (docs/ha.md "Fencing"): exit when the agent goes silent.

An agent that cannot reach a head for its fence time stops its training workers itself. An
agent that is frozen (SIGSTOP, a long pause, a wedged machine daemon) cannot, yet the head
restarts the job elsewhere once the fence time has passed. So the worker watches its agent: the
agent writes the time of its last answered heartbeat (CLOCK_MONOTONIC milliseconds, shared by
every process of the machine) into TESSERA_AGENT_CONTACT_FILE after every heartbeat the head
answers, and a daemon thread here reads it every tenth of the fence time (at most every second).
Once it is TESSERA_FENCE_MS old, whatever the reason (the agent frozen, or alive but cut off from
every head), the worker kills its process group (itself and its children) with SIGKILL: by then
the head may already be starting the next attempt.

Why in the worker rather than a separate watchdog process: the check runs inside the very
process that must stop, so nothing else has to be kept alive, found or trusted, and it keeps
running whatever happens to the agent. Its limit: a worker that does not use the SDK (or has not
called report_progress yet) is fenced by its agent only; the checkpoint fence (attempt_fence.py)
still keeps such a leftover from overwriting newer checkpoints.

The agent sets both variables for training workers only; serving replicas keep serving when
their agent is fenced, so they get neither. Thread-safety: start_from_env() may be called from
any thread, any number of times (one watchdog per process).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Callable, Mapping, Optional

CONTACT_FILE_VAR = "TESSERA_AGENT_CONTACT_FILE"
FENCE_MS_VAR = "TESSERA_FENCE_MS"


def read_contact_ms(path: str) -> Optional[int]:
    """The last contact the agent wrote, or None when the file is missing or unreadable (the
    agent replaces it atomically, so a partial read cannot happen)."""
    try:
        with open(path, "rb") as f:
            return int(f.read(64).strip() or b"x")
    except (OSError, ValueError):
        return None


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def _kill_own_group(silent_ms: int, fence_ms: int) -> None:
    sys.stderr.write(
        f"tessera: fenced: the agent has not reached a head for {silent_ms / 1000:.1f} s "
        f"(fence {fence_ms / 1000:.1f} s); this worker and its process group stop now, since "
        f"the head may already run the next attempt\n")
    sys.stderr.flush()
    if os.getpgid(0) == os.getpid():  # started by the agent: leader of its own group
        os.killpg(0, signal.SIGKILL)
    os._exit(137)  # not a group leader: this process only


class Watchdog:
    """Calls on_fenced(silent_ms, fence_ms) once the contact file is fence_ms old. check() is
    one look (for tests); start() runs the looks on a daemon thread."""

    def __init__(self, contact_file: str, fence_ms: int, *,
                 clock: Callable[[], int] = _monotonic_ms,
                 on_fenced: Callable[[int, int], None] = _kill_own_group) -> None:
        if fence_ms <= 0:
            raise ValueError(f"{FENCE_MS_VAR}: must be > 0, got {fence_ms}")
        self.contact_file = contact_file
        self.fence_ms = fence_ms
        self._clock = clock
        self._on_fenced = on_fenced
        self._last_seen: Optional[int] = None
        self.fenced = False

    def check(self) -> bool:
        """One look: True (and on_fenced called, once) when the agent has been silent for the
        fence time. A missing file counts from the last contact read before (none: not
        fenced)."""
        if self.fenced:
            return True
        contact = read_contact_ms(self.contact_file)
        if contact is not None:
            self._last_seen = max(contact, self._last_seen or contact)
        if self._last_seen is None:
            return False
        silent = self._clock() - self._last_seen
        if silent < self.fence_ms:
            return False
        self.fenced = True
        self._on_fenced(silent, self.fence_ms)
        return True

    def start(self) -> threading.Thread:
        interval = min(1.0, max(0.05, self.fence_ms / 10000))
        tick = threading.Event()  # never set: wait() is the interval timer

        def run() -> None:
            while not self.check():
                tick.wait(interval)

        thread = threading.Thread(target=run, name="tessera-fence", daemon=True)
        thread.start()
        return thread


_lock = threading.Lock()
_started_pid = 0


def start_from_env(env: Optional[Mapping[str, str]] = None) -> Optional[Watchdog]:
    """Starts this process's watchdog when the agent asked for one (both variables set);
    returns it, or None when there is nothing to watch or it runs already. ValueError naming
    the variable when TESSERA_FENCE_MS is not an integer > 0."""
    global _started_pid
    env = os.environ if env is None else env
    path = (env.get(CONTACT_FILE_VAR) or "").strip()
    raw = (env.get(FENCE_MS_VAR) or "").strip()
    if not path or not raw:
        return None
    try:
        fence_ms = int(raw, 10)
    except ValueError:
        raise ValueError(f"{FENCE_MS_VAR}: must be an integer > 0, got {raw!r}") from None
    with _lock:
        if _started_pid == os.getpid():  # a forked child has no thread: start its own
            return None
        watchdog = Watchdog(path, fence_ms)
        watchdog.start()
        _started_pid = os.getpid()
    return watchdog
