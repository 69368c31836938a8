#!/usr/bin/env python3
"""Starts one replica of examples/serve/server.py by hand (a group of --group-size processes
on loopback, no tessera), runs loadgen.py against its leader, and stops it.

Prints the machine load (`uptime`) before and after, the server's command, then loadgen's
report. Every argument after `--` goes to loadgen.py (its --url is filled in). Server flags go
in --server-args. Ports come from the kernel (port 0, a free MASTER_PORT).

  bench/serving/run_local.py --group-size 2 -- --time-scale 1 --duration 60
"""

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SERVER = os.path.join(REPO, "examples", "serve", "server.py")
LOADGEN = os.path.join(HERE, "loadgen.py")
PYTHON = "/usr/bin/python3"  # Debian's: it has python3-torch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def healthy(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def main():
    argv = sys.argv[1:]
    loadgen_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, loadgen_args = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--group-size", type=int, default=1)
    p.add_argument("--server-args", default="", help="extra server flags, one string")
    p.add_argument("--ready-timeout-s", type=float, default=120)
    args = p.parse_args(argv)
    if args.group_size < 1:
        p.error("--group-size must be at least 1")

    tmp = tempfile.mkdtemp(prefix="serving-bench-")
    port_file = os.path.join(tmp, "port")
    master_port = str(free_port())
    server_cmd = [PYTHON, SERVER, "--host", "127.0.0.1", *shlex.split(args.server_args)]
    procs = []
    logs = []
    try:
        for worker in range(args.group_size):
            env = dict(os.environ, TESSERA_GROUP_SIZE=str(args.group_size),
                       TESSERA_WORKER_INDEX=str(worker), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=master_port, PORT="0")
            log = open(os.path.join(tmp, f"server-{worker}.log"), "w")
            logs.append(log)
            cmd = server_cmd + (["--port-file", port_file] if worker == 0 else [])
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=log))
        deadline = time.monotonic() + args.ready_timeout_s
        port = None
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                raise SystemExit(f"run_local: a server process exited; logs in {tmp}")
            if port is None and os.path.exists(port_file):
                with open(port_file) as f:
                    port = int(f.read())
            if port is not None and healthy(port):
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"run_local: the server was not ready in {args.ready_timeout_s} s")

        print(f"uptime before: {uptime()}")
        print(f"server: {args.group_size} process(es): TESSERA_GROUP_SIZE={args.group_size} "
              f"{' '.join(shlex.quote(a) for a in server_cmd[1:])}")
        cmd = [PYTHON, LOADGEN, "--url", f"http://127.0.0.1:{port}", *loadgen_args]
        print(f"loadgen: {' '.join(shlex.quote(a) for a in cmd[1:])}", flush=True)
        code = subprocess.run(cmd).returncode
        print(f"uptime after: {uptime()}")
        return code
    finally:
        if procs and procs[0].poll() is None:
            procs[0].send_signal(signal.SIGTERM)  # the leader stops its followers
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()


if __name__ == "__main__":
    sys.exit(main())
