#!/usr/bin/env python3
"""Measures one replica of a model server and writes a profile for `tessera sim-serve --profile`.

What it measures (each a median over repetitions, docs/simulator.md "Profiles"):
  startupSeconds          process start to the leader's health check answering 200, for a group
                          of --group-size processes started by this script (--startup-runs times)
  prefillTokensPerSecond  prompt tokens over time to first token, one request at a time with
                          max_tokens 1, at --prefill-tokens prompt tokens (more lengths in
                          details.prefill)
  decode                  for each concurrency c of --concurrency: c streams started at once
                          (--decode-prompt-tokens in, --decode-tokens out); over the window in
                          which all c decode (the last first token to the first last token), the
                          tokens every stream made per second (perGroupTokensPerSecond) and the
                          median of one stream's (perRequestTokensPerSecond)
plus the load average before and after, the command, and when and on what it was measured.

By default it starts examples/serve/server.py itself (port 0, a free MASTER_PORT, loopback only)
and stops it by its pid. --server-command measures another server started the same way (PORT
in its environment and {port} in the command are the port to listen on); --url measures a
server already running (no start-up measured: give --startup-seconds).

  bench/serving/profile.py --out bench/serving/profiles/example-cpu.json
  bench/serving/profile.py --group-size 2 --out bench/serving/profiles/example-cpu-tp2.json

Standard library only; /usr/bin/python3. A few minutes at most: every request has a timeout and
the whole run stops with an error past --max-seconds.
"""

import argparse
import datetime
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SERVER = os.path.join(REPO, "examples", "serve", "server.py")
PYTHON = "/usr/bin/python3"  # Debian's: it has python3-torch
sys.path.insert(0, HERE)

import loadgen  # noqa: E402  (prompt_text, connect)


class ProfileError(Exception):
    """A measurement that cannot be made; the message says why and what to change."""


# ---------------------------------------------------------------------------------------------
# Pure parts (test_profile.py)


def median(values):
    """The median (the mean of the two middle values for an even count); None for none."""
    v = sorted(values)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def parse_counts(text):
    """'1,2,4' -> [1, 2, 4]: whole numbers >= 1, strictly increasing, the first 1."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--concurrency {text!r}: expected whole numbers separated by commas, "
                         "e.g. 1,2,4,8,16") from None
    if not counts or counts[0] != 1:
        raise ValueError(f"--concurrency {text!r}: must start at 1 (one request alone)")
    for a, b in zip(counts, counts[1:]):
        if b <= a:
            raise ValueError(f"--concurrency {text!r}: must increase ({b} after {a})")
    return counts


def decode_window(streams):
    """The decode rates of streams that ran together.

    `streams`: per stream, the times its tokens arrived (the first from prefill) and the tokens
    each arrival stands for (1, or completion_tokens / arrivals when a server sends several per
    chunk). The window is from the last first token to the first last token: every stream is
    decoding in it, none is in prefill. Returns (window seconds, group tokens/s, median of one
    stream's tokens/s), counting the arrivals in (start, end]; raises ProfileError when the
    window is empty."""
    if not streams or any(len(times) < 2 for times, _ in streams):
        raise ProfileError("a stream made fewer than 2 tokens: raise --decode-tokens")
    start = max(times[0] for times, _ in streams)
    end = min(times[-1] for times, _ in streams)
    if end <= start:
        raise ProfileError("no window in which every stream decodes (the last one started after "
                           "the first one ended): raise --decode-tokens")
    seconds = end - start
    per_stream = [sum(1 for t in times if start < t <= end) * scale / seconds
                  for times, scale in streams]
    return seconds, sum(per_stream), median(per_stream)


def decode_rows(samples):
    """The profile's decode table from {concurrency: [(group, per_request), ...]}: medians."""
    rows = []
    for concurrency in sorted(samples):
        runs = samples[concurrency]
        rows.append({"concurrency": concurrency,
                     "perRequestTokensPerSecond": round(median([r for _, r in runs]), 1),
                     "perGroupTokensPerSecond": round(median([g for g, _ in runs]), 1)})
    return rows


def build_profile(name, measured_on, command, server, group_size, load_before, load_after,
                  prefill, prefill_tokens, decode, startup, details):
    """The profile as a dict, in the fields `tessera sim-serve --profile` reads.

    prefill: {prompt tokens: [tokens/s, ...]}; decode: {concurrency: [(group, per request)]};
    startup: [seconds, ...] measured, or a number stated by the caller."""
    if prefill_tokens not in prefill:
        raise ProfileError(f"no prefill measured at {prefill_tokens} prompt tokens")
    measured = isinstance(startup, list)
    profile = {
        "name": name,
        "measuredOn": measured_on,
        "command": command,
        "server": server,
        "groupSize": group_size,
        "loadAverage": {"before": [round(x, 2) for x in load_before],
                        "after": [round(x, 2) for x in load_after]},
        "prefillTokensPerSecond": round(median(prefill[prefill_tokens]), 1),
        "decode": decode_rows(decode),
        "startupSeconds": round(median(startup) if measured else startup, 2),
        "details": dict(details),
    }
    profile["details"]["prefill"] = [
        {"promptTokens": n, "tokensPerSecond": [round(x, 1) for x in prefill[n]]}
        for n in sorted(prefill)]
    profile["details"]["decode"] = [
        {"concurrency": c, "perGroupTokensPerSecond": [round(g, 1) for g, _ in decode[c]],
         "perRequestTokensPerSecond": [round(r, 1) for _, r in decode[c]]}
        for c in sorted(decode)]
    profile["details"]["startupSeconds"] = (
        [round(s, 2) for s in startup] if measured else "stated (--startup-seconds), not measured")
    return profile


def machine_description(cpuinfo_text, cores):
    """'2 cores, Intel(R) Xeon(R) ...' from /proc/cpuinfo's text."""
    model = "unknown CPU"
    for line in cpuinfo_text.splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{cores} cores, {model}"


# ---------------------------------------------------------------------------------------------
# Talking to the server


class Stream:
    """One streamed completion: when it started, when each token chunk came, the usage."""

    def __init__(self):
        self.start = None
        self.times = []
        self.prompt_tokens = None
        self.completion_tokens = None
        self.error = None


def stream_completion(url, prompt, max_tokens, model, extra_body, timeout_s, ca_file, out):
    """POSTs one streamed completion and records it into `out` (a Stream)."""
    parsed = urllib.parse.urlsplit(url)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, **extra_body}
    if model:
        body["model"] = model
    path = (parsed.path.rstrip("/") or "") + "/v1/completions"
    conn = loadgen.connect(parsed, timeout_s, ca_file)
    try:
        out.start = time.monotonic()
        conn.request("POST", path, body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            out.error = f"HTTP {resp.status}: {resp.read(300).decode(errors='replace')}"
            return
        while True:
            line = resp.readline()
            if not line:
                out.error = "the stream ended without data: [DONE]"
                return
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            event = json.loads(payload)
            if "error" in event:
                out.error = f"stream error: {event['error']}"
                return
            if event.get("usage"):
                out.prompt_tokens = event["usage"].get("prompt_tokens")
                out.completion_tokens = event["usage"].get("completion_tokens")
            if any(c.get("text") for c in event.get("choices") or []):
                out.times.append(time.monotonic())
    except (OSError, http.client.HTTPException, ValueError) as e:
        out.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()


def run_streams(url, count, prompt_tokens, max_tokens, args, seed):
    """`count` streams started at once; their Streams, or ProfileError naming the first error."""
    streams = [Stream() for _ in range(count)]
    threads = [threading.Thread(target=stream_completion, daemon=True,
                                args=(url, loadgen.prompt_text(prompt_tokens, seed + i),
                                      max_tokens, args.model, args.extra_body, args.timeout_s,
                                      args.ca_file, s))
               for i, s in enumerate(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(args.timeout_s + 5)
    for s in streams:
        if s.error or not s.times:
            raise ProfileError(f"a request to {url} failed: {s.error or 'no tokens'}")
    return streams


def measure_prefill(url, args, deadline):
    """{prompt tokens: [tokens/s per request]}, one request at a time."""
    out = {}
    for rep in range(args.repetitions):
        for n in args.prefill_lengths:
            check_deadline(deadline)
            (s,) = run_streams(url, 1, n, 1, args, seed=1000 * rep + n)
            tokens = s.prompt_tokens or n
            out.setdefault(n, []).append(tokens / (s.times[0] - s.start))
    return out


def measure_decode(url, args, deadline):
    """{concurrency: [(group tokens/s, per-request tokens/s)]}; repetitions interleave the
    concurrencies so a passing load on the machine spreads over all of them."""
    out = {}
    for rep in range(args.repetitions):
        for c in args.concurrency:
            check_deadline(deadline)
            streams = run_streams(url, c, args.decode_prompt_tokens, args.decode_tokens, args,
                                  seed=100_000 * (rep + 1) + 1000 * c)
            timed = [(s.times, (s.completion_tokens or len(s.times)) / len(s.times))
                     for s in streams]
            _, group, per_request = decode_window(timed)
            out.setdefault(c, []).append((group, per_request))
    return out


def check_deadline(deadline):
    if time.monotonic() > deadline:
        raise ProfileError("the run passed --max-seconds; lower --repetitions or --concurrency, "
                           "or raise --max-seconds")


# ---------------------------------------------------------------------------------------------
# Starting and stopping the group


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url, health_path, ca_file):
    parsed = urllib.parse.urlsplit(url)
    conn = loadgen.connect(parsed, 2, ca_file)
    try:
        conn.request("GET", (parsed.path.rstrip("/") or "") + health_path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


class Group:
    """One replica started by this script: the example server's group of --group-size
    processes, or --server-command. Stopped by the pids it started."""

    def __init__(self, args, tmp):
        self.args = args
        self.procs = []
        self.logs = []
        self.tmp = tmp
        self.starts = 0

    def start(self, deadline):
        """Starts the group and waits for its health check; returns (url, seconds)."""
        args = self.args
        began = time.monotonic()
        self.starts += 1
        if args.server_command:
            port = free_port()
            cmd = shlex.split(args.server_command.replace("{port}", str(port)))
            log = open(os.path.join(self.tmp, f"server-{self.starts}.log"), "w")
            self.logs.append(log)
            self.procs.append(subprocess.Popen(cmd, env=dict(os.environ, PORT=str(port)),
                                               stdout=log, stderr=log))
        else:
            port = None
            port_file = os.path.join(self.tmp, f"port-{self.starts}")
            master_port = str(free_port())
            for worker in range(args.group_size):
                env = dict(os.environ, TESSERA_GROUP_SIZE=str(args.group_size),
                           TESSERA_WORKER_INDEX=str(worker), MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=master_port, PORT="0")
                log = open(os.path.join(self.tmp, f"server-{self.starts}-{worker}.log"), "w")
                self.logs.append(log)
                cmd = self.example_command() + (["--port-file", port_file] if worker == 0 else [])
                self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=log))
        ready_by = min(deadline, began + args.ready_timeout_s)
        while time.monotonic() < ready_by:
            if any(p.poll() is not None for p in self.procs):
                raise ProfileError(f"a server process exited before it was ready; its log is "
                                   f"in {self.tmp}")
            if port is None and os.path.exists(port_file):
                with open(port_file) as f:
                    text = f.read().strip()
                port = int(text) if text else None
            if port is not None:
                url = f"{args.scheme}://127.0.0.1:{port}"
                if healthy(url, args.health_path, args.ca_file):
                    return url, time.monotonic() - began
            time.sleep(0.05)
        raise ProfileError(f"the server was not ready within {args.ready_timeout_s:g} s "
                           f"(--ready-timeout-s); its log is in {self.tmp}")

    def example_command(self):
        return [PYTHON, SERVER, "--host", "127.0.0.1", *shlex.split(self.args.server_args)]

    def describe(self):
        if self.args.server_command:
            return self.args.server_command
        rel = os.path.relpath(SERVER, REPO)
        extra = " " + self.args.server_args if self.args.server_args else ""
        return (f"{rel}{extra} (its defaults otherwise), a group of {self.args.group_size} "
                f"process(es) on loopback")

    def stop(self):
        if self.procs and self.procs[0].poll() is None:
            self.procs[0].send_signal(signal.SIGTERM)  # the leader stops its followers
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in self.logs:
            log.close()
        self.procs, self.logs = [], []


# ---------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="write the profile (JSON) here")
    p.add_argument("--name", help="the profile's name (default example-cpu, or "
                   "example-cpu-tpN for a group of N; required with --url or --server-command)")
    p.add_argument("--group-size", type=int, default=1,
                   help="processes of the example server's group (tensor-parallel)")
    p.add_argument("--server-args", default="", help="extra flags of examples/serve/server.py")
    p.add_argument("--server-command", help="start this server instead of the example one "
                   "({port} and $PORT are its port)")
    p.add_argument("--url", help="measure this running server (no start-up measurement)")
    p.add_argument("--startup-seconds", type=float,
                   help="with --url: the start-up time to write (measured elsewhere)")
    p.add_argument("--health-path", default="/healthz", help="200 when the server is ready")
    p.add_argument("--ca-file", help="CA to verify an https:// server against")
    p.add_argument("--model", help="the request's model field (when the server needs one)")
    p.add_argument("--extra-body", default="{}",
                   help="JSON merged into every request, e.g. '{\"ignore_eos\": true}'")
    p.add_argument("--startup-runs", type=int, default=3)
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--concurrency", default="1,2,4,8,16",
                   help="streams decoding at once, from 1, increasing")
    p.add_argument("--prefill-tokens", type=int, default=1000,
                   help="prompt length of prefillTokensPerSecond (the conv trace's median "
                   "prompt is 1,020 tokens; the example server's context is 1,024)")
    p.add_argument("--prefill-lengths", default="128,512",
                   help="other prompt lengths measured, in details.prefill")
    p.add_argument("--decode-prompt-tokens", type=int, default=256)
    p.add_argument("--decode-tokens", type=int, default=192, help="output tokens per stream")
    p.add_argument("--timeout-s", type=float, default=120, help="per request")
    p.add_argument("--ready-timeout-s", type=float, default=300)
    p.add_argument("--max-seconds", type=float, default=600, help="the whole run")
    args = p.parse_args(argv)
    try:
        args.concurrency = parse_counts(args.concurrency)
        extra = sorted({int(x) for x in args.prefill_lengths.split(",") if x.strip()})
    except ValueError as e:
        p.error(str(e))
    args.prefill_lengths = sorted(set(extra) | {args.prefill_tokens})
    try:
        args.extra_body = json.loads(args.extra_body)
    except ValueError as e:
        p.error(f"--extra-body: not JSON ({e})")
    if not isinstance(args.extra_body, dict):
        p.error("--extra-body: must be a JSON object")
    if args.group_size < 1 or args.startup_runs < 1 or args.repetitions < 1:
        p.error("--group-size, --startup-runs and --repetitions must be at least 1")
    if min(args.prefill_lengths) < 1 or args.decode_prompt_tokens < 1 or args.decode_tokens < 2:
        p.error("prompt lengths must be at least 1 and --decode-tokens at least 2")
    if args.url and args.server_command:
        p.error("--url measures a running server, --server-command starts one: pick one")
    if args.url and args.startup_seconds is None:
        p.error("--url measures no start-up: give --startup-seconds (placement to ready, e.g. "
                "from the Service's events in `tessera describe service`)")
    if args.startup_seconds is not None and not args.url:
        p.error("--startup-seconds is for --url; a started server's start-up is measured")
    if (args.url or args.server_command) and not args.name:
        p.error("--name is required with --url or --server-command")
    if not args.name:
        args.name = "example-cpu" if args.group_size == 1 else f"example-cpu-tp{args.group_size}"
    args.scheme = "http"
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    command = " ".join(["bench/serving/profile.py", *(shlex.quote(a) for a in argv)])
    deadline = time.monotonic() + args.max_seconds
    began = time.monotonic()
    load_before = os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="serving-profile-")
    group = Group(args, tmp)
    startup = args.startup_seconds
    try:
        if args.url:
            url, server = args.url, f"running at {args.url}"
        else:
            startup = []
            for run in range(args.startup_runs):
                url, seconds = group.start(deadline)
                startup.append(seconds)
                print(f"profile: start-up {run + 1}/{args.startup_runs}: {seconds:.2f} s",
                      flush=True)
                if run + 1 < args.startup_runs:
                    group.stop()
            server = group.describe()
        # One request first: the first call through a fresh server pays one-time costs.
        run_streams(url, 1, 16, 4, args, seed=7)
        prefill = measure_prefill(url, args, deadline)
        print("profile: prefill tokens/s " + ", ".join(
            f"{n}: {median(v):.0f}" for n, v in sorted(prefill.items())), flush=True)
        decode = measure_decode(url, args, deadline)
        print("profile: decode tokens/s (group / per request) " + ", ".join(
            f"{c}: {median([g for g, _ in v]):.0f} / {median([r for _, r in v]):.1f}"
            for c, v in sorted(decode.items())), flush=True)
    except ProfileError as e:
        print(f"profile: {e}", file=sys.stderr)
        return 1
    finally:
        group.stop()
    load_after = os.getloadavg()
    try:
        with open("/proc/cpuinfo") as f:
            machine = machine_description(f.read(), os.cpu_count())
    except OSError:
        machine = f"{os.cpu_count()} cores"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    details = {"decodePromptTokens": args.decode_prompt_tokens,
               "decodeOutputTokens": args.decode_tokens, "repetitions": args.repetitions,
               "seconds": round(time.monotonic() - began, 1)}
    try:
        profile = build_profile(args.name, f"{now}, {machine}", command, server,
                                args.group_size if not (args.url or args.server_command) else None,
                                load_before, load_after, prefill, args.prefill_tokens, decode,
                                startup, details)
    except ProfileError as e:
        print(f"profile: {e}", file=sys.stderr)
        return 1
    if profile["groupSize"] is None:
        del profile["groupSize"]
    with open(args.out, "w") as f:
        json.dump(profile, f, indent=2)
        f.write("\n")
    print(f"profile: wrote {args.out} in {details['seconds']:.0f} s (load average "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
