"""Runs the integration test files side by side, each in a process of its own.

    TESSERA_BIN=build/dev/bin/tessera python3 tests/integration/run_parallel.py [--jobs N]
        [--suite NAME=COMMAND ...] [FILE...]

Most of an integration test's time is spent waiting: on a head's timers, a worker's steps, an
etcd election. Run one file after another, the stage is mostly idle cores; run a few at once, it
takes a fraction of the time. The tests allow for it: every cluster takes its ports from 0 and
its state from a temporary directory of its own, and every wait is on a condition with a
generous deadline, not a fixed sleep.

The files start longest first: their times from the last run on this machine (kept in
build/integration-times.json), else from durations.json beside this script (a measured run,
committed, so a fresh clone orders them too); a file timed in neither starts first, so a new one
never ends the stage alone. Each file's output is printed whole when it ends, with its time; a failed file's
output comes last again, just above the summary. Exit status 1 when any file failed.

--suite NAME=COMMAND adds a shell command run from the repository's root as one more job of the
pool (scripts/test.sh gives it the Python SDK's, the example server's and the dashboard's
tests): a suite that keeps one core busy no longer leaves the other idle in a stage of its own.
It is timed and ordered like a file, under NAME.

Every job runs with ASAN_OPTIONS=POOL_ASAN_OPTIONS (below) unless ASAN_OPTIONS is set (the
pool's tessera processes are the dev build, AddressSanitizer's; docs/testing.md, "AddressSanitizer
in the pool"): LeakSanitizer's check at exit stops the world in a forked tracer, 40-45 ms of CPU
at the end of every CLI call, and the stack of each malloc and free is kept at
5 frames instead of 30. ctest keeps both: leaks are checked there.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TIMES = os.path.join(HERE, "..", "..", "build", "integration-times.json")
COMMITTED_TIMES = os.path.join(HERE, "durations.json")
# AddressSanitizer's options for the pool's processes (the module docstring says why).
POOL_ASAN_OPTIONS = "detect_leaks=0:malloc_context_size=5"


def discover():
    return sorted(f[:-3] for f in os.listdir(HERE) if f.startswith("test_") and f.endswith(".py"))


def load_times(path):
    try:
        with open(path) as f:
            times = json.load(f)
        return {k: float(v) for k, v in times.items()} if isinstance(times, dict) else {}
    except (OSError, ValueError):
        return {}


def save_times(times):
    try:
        os.makedirs(os.path.dirname(TIMES), exist_ok=True)
        with open(TIMES + ".tmp", "w") as f:
            json.dump(times, f, indent=1, sort_keys=True)
        os.replace(TIMES + ".tmp", TIMES)
    except OSError as e:
        print("run_parallel: could not keep the times in %s: %s" % (TIMES, e), file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.environ.get("TESSERA_IT_JOBS", "2"),
                        help="files run at once (default 2, or TESSERA_IT_JOBS)")
    parser.add_argument("--suite", action="append", default=[], metavar="NAME=COMMAND",
                        help="a shell command run from the repository's root as one more job")
    parser.add_argument("files", nargs="*", help="test modules (test_x or test_x.py); all if none")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs: %d is not a count of files; give 1 or more" % args.jobs)
    known = discover()
    files = [f[:-3] if f.endswith(".py") else f for f in args.files] or known
    for f in files:
        if f not in known:
            parser.error("%s: no such test file in %s; the files are: %s" %
                         (f, HERE, ", ".join(known)))
    suites = {}  # name -> shell command
    for suite in args.suite:
        name, eq, command = suite.partition("=")
        if not eq or not name or not command or name in known or name in suites:
            parser.error("--suite %r: give NAME=COMMAND with a NAME that is not a test file's "
                         "or another suite's" % suite)
        suites[name] = command
    files += list(suites)

    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", POOL_ASAN_OPTIONS)

    times = load_times(COMMITTED_TIMES)
    times.update(load_times(TIMES))
    # Untimed files first (they may be long), then the longest.
    queue = sorted(files, key=lambda f: (f in times, -times.get(f, 0.0)))
    lock = threading.Lock()
    results = {}  # file -> (returncode, seconds, output)
    started = time.monotonic()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                name = queue.pop(0)
            t0 = time.monotonic()
            if name in suites:
                proc = subprocess.run(suites[name], shell=True, cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL)
            else:
                proc = subprocess.run([sys.executable, "-m", "unittest", "-v", name], cwd=HERE,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL)
            took = time.monotonic() - t0
            out = proc.stdout.decode(errors="replace")
            with lock:
                results[name] = (proc.returncode, took, out)
                print("=== %s: %s in %.0f s (at +%.0f s)\n%s" % (
                    name, "ok" if proc.returncode == 0 else "FAILED (exit %d)" % proc.returncode,
                    took, time.monotonic() - started, out), flush=True)

    threads = [threading.Thread(target=worker) for _ in range(min(args.jobs, len(files)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    times.update({name: round(took, 1) for name, (_, took, _) in results.items()})
    save_times(times)
    failed = sorted(name for name, (code, _, _) in results.items() if code != 0)
    for name in failed:
        print("=== FAILED %s, again:\n%s" % (name, results[name][2]))
    print("run_parallel: %d files, %d at once, %.0f s; by time: %s" % (
        len(files), args.jobs, time.monotonic() - started,
        ", ".join("%s %.0f s" % (n, results[n][1])
                  for n in sorted(results, key=lambda n: -results[n][1]))))
    if failed:
        print("run_parallel: FAILED: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
