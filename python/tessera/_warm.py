"""A warm worker: a Python interpreter started ahead of time by the tessera agent.

The agent keeps a few of these per host (its warm pool, docs/agent-protocol.md "Warm workers").
Each one imports the framework modules it is told to (``--preload torch``), says it is ready,
and then blocks reading its channel (file descriptor 0, a Unix socket connected to the agent)
until the agent hands it an assignment. From then on it *is* that worker: it takes the
assignment's environment, working directory, log file and argv, and runs the script
(``runpy.run_path``) or module (``runpy.run_module``) as ``__main__`` in this same process. A
worker started this way skips the interpreter start and the imports, which for PyTorch is most
of a restart (``import torch`` alone takes 1.5 s or more on a small host).

Channel (one JSON object per line, UTF-8):

- warm -> agent, once the preload is done:
  ``{"ready": true, "pid": N, "preloaded": ["torch"], "seconds": 1.73}``
- agent -> warm, the assignment:
  ``{"command": ["/usr/bin/python3", "train.py", "--lr", "0.1"], "env": {...},
  "workingDir": "/abs/dir", "logPath": "/abs/worker-0.log"}``
  ``command[1:]`` is either ``script [args...]`` or ``-m module [args...]``; ``env`` is the
  worker's whole environment (TESSERA_PROGRESS_FILE included); ``workingDir`` "" = stay.
- warm -> agent, before the script runs: ``{"ok": true}``, or ``{"ok": false, "error": "..."}``
  when the working directory or the log file cannot be used (the process then exits 127), or
  ``{"ok": false, "cold": true, "error": "..."}`` when a preloaded module read, at import, an
  environment variable the assignment gives another value (the process exits 0 and the agent
  starts the worker cold: a module never keeps a value the attempt changed).

End of file on the channel while waiting means the agent is done with this process: it exits 0.

Environment read at import: every variable the preload reads through ``os.environ`` (get,
``[]``, ``in``, ``os.getenv``; iterating or copying it counts as reading every variable) is
recorded, and the handoff is refused (``cold``) when the assignment's value differs from the one
the import saw, unset included. Reads from C (``getenv(3)`` in an extension) are not seen: the
agent starts a job's warm processes with the job's environment less the per-attempt variables
(docs/agent-protocol.md, "Warm workers"), so only those can differ, and torch 1.13 reads none
at import (``OMP_NUM_THREADS`` is applied again with ``torch.set_num_threads``). What is *not*
like a fresh interpreter (see docs/agent-protocol.md): the interpreter's
own start-up settings (hash seed, ``-X`` options, PYTHONHOME, ...) are the warm process's (the
agent does not use a warm process for an assignment that changes them); tracebacks of uncaught
exceptions leave out this module's frames.

Standard library only. Not part of the worker SDK's public API.
"""

import argparse
import importlib
import importlib.util
import json
import os
import runpy
import socket
import sys
import time

CHANNEL_FD = 0
EXIT_SETUP_FAILED = 127
PR_SET_PDEATHSIG = 1


def _send(channel, message):
    channel.sendall((json.dumps(message) + "\n").encode())


def _read_line(channel):
    """One line from the agent, without the newline; None at end of file."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = channel.recv(1 << 16)
        if not chunk:
            return None
        data += chunk
    return data[:-1].decode()


def _pythonpath_entries(value, cwd):
    """sys.path entries the interpreter makes of PYTHONPATH (absolute; empty = cwd)."""
    if not value:
        return []
    return [os.path.join(cwd, p) if p else cwd for p in value.split(os.pathsep)]


def _clear_death_signal():
    """A handed-over worker must outlive the agent like a cold-started one does."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class _EnvReads:
    """Records the names read through os.environ while active (os.environ's class is patched,
    so reads through any reference to it count). `everything` is set when something iterated
    over it (a copy, a loop): every variable may have been read."""

    def __init__(self):
        self.names = set()
        self.everything = False

    def __enter__(self):
        cls = type(os.environ)
        self._saved = (cls.__getitem__, cls.__iter__)
        getitem, iterate = self._saved
        reads = self

        def recording_getitem(env, key):
            reads.names.add(key)
            return getitem(env, key)

        def recording_iter(env):
            reads.everything = True
            return iterate(env)

        cls.__getitem__, cls.__iter__ = recording_getitem, recording_iter
        return self

    def __exit__(self, *exc):
        cls = type(os.environ)
        cls.__getitem__, cls.__iter__ = self._saved
        return False

    def stale(self, seen, env):
        """Names read at import whose value in `env` (the assignment's) differs from `seen`
        (the warm process's environment), sorted; unset counts as a value."""
        names = set(seen) | set(env) if self.everything else self.names
        return sorted(n for n in names if seen.get(n) != env.get(n))


class _Target:
    """What command[1:] asks for: a script path or a module name, and sys.argv."""

    def __init__(self, args):
        if len(args) >= 2 and args[0] == "-m" and args[1]:
            self.module, self.path, self.argv = args[1], None, [args[1]] + list(args[2:])
        elif args and args[0] and not args[0].startswith("-"):
            self.module, self.path, self.argv = None, args[0], list(args)
        else:
            raise ValueError("command must be PYTHON SCRIPT [ARGS] or PYTHON -m MODULE [ARGS]")


def _become_worker(channel, assignment, base_path, preloaded, reads=None):
    """Applies the assignment to this process. Returns the target to run, or None when the
    preload read a variable the assignment changes (the agent then starts it cold)."""
    target = _Target(assignment["command"][1:])
    env = {str(k): str(v) for k, v in assignment.get("env", {}).items()}
    stale = reads.stale(dict(os.environ), env) if reads is not None else []
    if stale:
        shown = ", ".join(stale[:5]) + (" and %d more" % (len(stale) - 5) if len(stale) > 5 else "")
        _send(channel, {"ok": False, "cold": True,
                        "error": "preloaded modules read %s at import; the assignment sets "
                                 "another value" % shown})
        return None
    working_dir = assignment.get("workingDir") or ""
    log_path = assignment["logPath"]
    what = "workingDir " + working_dir
    try:
        if working_dir:
            os.chdir(working_dir)
        what = "log file " + log_path
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        what = os.devnull
        null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        _send(channel, {"ok": False, "error": "%s: %s" % (what, e.strerror or e)})
        os._exit(EXIT_SETUP_FAILED)

    os.environ.clear()
    os.environ.update(env)
    cwd = os.getcwd()
    first = cwd if target.module else os.path.dirname(os.path.realpath(target.path))
    sys.path[:] = [first] + _pythonpath_entries(env.get("PYTHONPATH"), cwd) + base_path
    sys.argv[:] = target.argv
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    # The SDK this module was imported from must not shadow the one the job's PYTHONPATH names.
    for name in [m for m in sys.modules if m == "tessera" or m.startswith("tessera.")]:
        if name not in preloaded:
            del sys.modules[name]
    importlib.invalidate_caches()
    if "torch" in sys.modules and env.get("OMP_NUM_THREADS", "").isdigit():
        threads = int(env["OMP_NUM_THREADS"])
        if threads > 0:
            sys.modules["torch"].set_num_threads(threads)
    _clear_death_signal()

    _send(channel, {"ok": True})
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.dup2(null_fd, 0, inheritable=True)
    os.dup2(log_fd, 1, inheritable=True)
    os.dup2(log_fd, 2, inheritable=True)
    os.close(null_fd)
    os.close(log_fd)
    channel.detach()  # fd 0 is /dev/null now; the socket object must not close it
    if env.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.reconfigure(write_through=True)
            except (AttributeError, ValueError):
                pass
    return target


def _without_our_frames(tb):
    """The traceback from the user's first frame on (skips this module and runpy)."""
    skip = {__file__, runpy.__file__, "<frozen runpy>"}  # runpy is frozen from 3.11 on
    while tb is not None and tb.tb_frame.f_code.co_filename in skip:
        tb = tb.tb_next
    return tb


def _run(target):
    """Runs the worker's code as __main__, with the exit semantics of `python script.py`."""
    if target.module:
        try:
            found = importlib.util.find_spec(target.module)
        except (ImportError, ValueError) as e:
            found, reason = None, str(e)
        else:
            reason = "No module named %s" % target.module
        if found is None:
            sys.stderr.write("%s: %s\n" % (sys.executable, reason))
            sys.exit(1)
    elif not os.path.exists(target.path):
        sys.stderr.write("%s: can't open file %r: [Errno 2] No such file or directory\n"
                         % (sys.executable, os.path.abspath(target.path)))
        sys.exit(2)
    try:
        if target.module:
            runpy.run_module(target.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target.path, run_name="__main__")
    except Exception as e:  # SystemExit and KeyboardInterrupt keep the interpreter's handling
        tb = _without_our_frames(e.__traceback__)
        sys.excepthook(type(e), e.with_traceback(tb), tb)  # it prints e.__traceback__
        sys.exit(1)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tessera._warm")
    parser.add_argument("--preload", action="append", default=[],
                        help="modules to import before waiting (comma list, repeatable)")
    args = parser.parse_args(argv)
    modules = [m.strip() for spec in args.preload for m in spec.split(",") if m.strip()]

    # What sys.path would hold without this start's sys.path[0] and PYTHONPATH entries.
    startup_pythonpath = _pythonpath_entries(os.environ.get("PYTHONPATH"), os.getcwd())
    base_path = list(sys.path[1 + len(startup_pythonpath):])

    channel = socket.socket(fileno=CHANNEL_FD)

    started = time.monotonic()
    with _EnvReads() as reads:
        for module in modules:
            importlib.import_module(module)  # an error ends the process: the agent logs it
    _send(channel, {"ready": True, "pid": os.getpid(), "preloaded": modules,
                    "seconds": round(time.monotonic() - started, 3)})

    line = _read_line(channel)
    if line is None:
        return 0
    try:
        assignment = json.loads(line)
        target = _become_worker(channel, assignment, base_path, set(modules), reads)
    except (ValueError, KeyError, TypeError) as e:
        _send(channel, {"ok": False, "error": "bad assignment: %s" % e})
        return EXIT_SETUP_FAILED
    if target is None:
        return 0  # refused: the agent starts this worker cold
    _run(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
