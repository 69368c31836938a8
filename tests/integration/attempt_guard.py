"""Runs a training script after recording, exactly, whether any worker of an earlier attempt of
the same job is still alive: the check behind "no two attempts of one job ever run at once".

Every worker takes a POSIX read lock on <ATTEMPT_GUARD_DIR>/attempt-<N> (N = TESSERA_ATTEMPT)
for its whole life; the kernel drops the lock when the process dies, even by SIGKILL. Before
running the script, the worker asks (F_GETLK, which takes no lock, so workers starting at the
same moment cannot see each other's checks) whether a write lock on the file of any earlier
attempt would conflict: a conflict means a worker of that attempt still runs. It appends one
JSON line to <ATTEMPT_GUARD_DIR>/records.jsonl: {"attempt", "rank", "overlap": [attempts still
alive]}.

Usage: attempt_guard.py SCRIPT [ARGS...]  (the script runs in this process, as __main__).
"""
import fcntl
import json
import os
import runpy
import struct
import sys

# struct flock on Linux x86_64: l_type, l_whence, (pad), l_start, l_len, l_pid, (pad).
FLOCK = "hhxxxxqqixxxx"


def held_by_someone(fd):
    """True if some process holds a lock on the file that a write lock would conflict with."""
    query = struct.pack(FLOCK, fcntl.F_WRLCK, 0, 0, 0, 0)
    l_type = struct.unpack(FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))[0]
    return l_type != fcntl.F_UNLCK


def main():
    directory = os.environ["ATTEMPT_GUARD_DIR"]
    attempt = int(os.environ.get("TESSERA_ATTEMPT", "0"))
    rank = int(os.environ.get("RANK", "0"))
    mine = os.open(os.path.join(directory, "attempt-%d" % attempt), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(mine, fcntl.LOCK_SH)  # held until this process is gone
    overlap = []
    for earlier in range(attempt):
        path = os.path.join(directory, "attempt-%d" % earlier)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if held_by_someone(fd):
                overlap.append(earlier)
        finally:
            os.close(fd)
    line = json.dumps({"attempt": attempt, "rank": rank, "overlap": overlap}) + "\n"
    fd = os.open(os.path.join(directory, "records.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                 0o644)
    os.write(fd, line.encode())
    os.close(fd)
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
