#!/usr/bin/env python3
"""Serving load generator: replays an LLM inference trace (or a fixed rate) against an
OpenAI-compatible /v1/completions endpoint with "stream": true, open-loop.

Standard library only (threads and http.client). Each request starts at its scheduled time
whether or not earlier ones finished (one thread per request in flight), and is timed:
  TTFT  time to first token: request start to the first streamed chunk carrying text
  TPOT  time per output token after the first: (last token - first token) / (tokens - 1)
  E2E   request start to `data: [DONE]`
Reported as p50/p99 (and mean), with throughput (completed requests/s, output tokens/s over
the run's wall time) and errors by kind (http_503, connect_refused, timeout, ...), as text or,
with --json, one JSON object.

Trace mode (default): ../shared/traces/azure-llm-inference-2023/conv.csv, columns TIMESTAMP
(YYYY-MM-DD HH:MM:SS.fffffff), ContextTokens, GeneratedTokens. Arrival offsets from the first
row are divided by --time-scale (10 = ten times faster, ten times the request rate). A
request's prompt is min(ContextTokens, --max-prompt-tokens) ASCII characters and it asks for
min(GeneratedTokens, --max-output-tokens) tokens: the example server (examples/serve) counts
one byte as one token, has a 1,024-token context and never stops early, so those are the
prompt and output lengths it serves. A malformed row stops the run with an error naming the
file, line and column.

Fixed mode: --rate R --prompt-tokens P --max-tokens T (evenly spaced, or --poisson).

Either mode stops starting requests after --duration seconds or --max-requests requests,
then waits up to --timeout-s for the ones in flight.

  bench/serving/loadgen.py --url http://127.0.0.1:8000 --time-scale 2 --duration 60
  bench/serving/loadgen.py --url http://127.0.0.1:8000 --rate 5 --prompt-tokens 128 \
      --max-tokens 32 --duration 30 --json
"""

import argparse
import calendar
import collections
import dataclasses
import http.client
import json
import math
import os
import random
import socket
import ssl
import sys
import threading
import time
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TRACE = os.path.join(REPO, "..", "shared", "traces", "azure-llm-inference-2023",
                             "conv.csv")
TRACE_COLUMNS = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


class TraceError(ValueError):
    """A malformed trace; the message names the file, line and column."""


@dataclasses.dataclass(frozen=True)
class TraceRow:
    line: int  # 1-based line number in the file (the header is line 1)
    arrival_s: float  # seconds since the epoch, UTC
    context_tokens: int
    generated_tokens: int


@dataclasses.dataclass(frozen=True)
class Arrival:
    offset_s: float  # when to start, from the start of the run
    prompt_tokens: int
    max_tokens: int
    source: str  # where it came from, e.g. "conv.csv:17" or "fixed #3"


def parse_timestamp(text):
    """Seconds since the epoch (UTC) of 'YYYY-MM-DD HH:MM:SS[.fraction]'; ValueError if not."""
    if len(text) < 19 or text[4] != "-" or text[7] != "-" or text[10] != " " or \
            text[13] != ":" or text[16] != ":":
        raise ValueError("expected YYYY-MM-DD HH:MM:SS.fffffff")
    whole = time.strptime(text[:19], "%Y-%m-%d %H:%M:%S")
    fraction = 0.0
    rest = text[19:]
    if rest:
        if rest[0] != "." or not rest[1:].isdigit():
            raise ValueError("the fraction of a second must be '.' and digits")
        fraction = int(rest[1:]) / 10 ** (len(rest) - 1)
    return calendar.timegm(whole) + fraction


def read_trace(path):
    """Every row of an Azure LLM inference trace as TraceRows, in file order.

    Raises TraceError naming path:line and the column for: a header other than
    TIMESTAMP,ContextTokens,GeneratedTokens, a row without exactly three fields, a timestamp
    that does not parse or goes back in time, a token count that is not a whole number >= 0
    (ContextTokens >= 1)."""
    name = os.path.basename(path)
    rows = []
    with open(path, newline="") as f:
        header = f.readline().rstrip("\r\n")
        if header.split(",") != TRACE_COLUMNS:
            raise TraceError(f"{name}:1: the header must be {','.join(TRACE_COLUMNS)}, "
                             f"got {header!r}")
        previous = None
        for number, raw in enumerate(f, start=2):
            text = raw.rstrip("\r\n")
            if not text:
                continue
            fields = text.split(",")
            if len(fields) != 3:
                raise TraceError(f"{name}:{number}: expected 3 columns "
                                 f"({','.join(TRACE_COLUMNS)}), got {len(fields)}: {text!r}")
            try:
                arrival = parse_timestamp(fields[0])
            except ValueError as e:
                raise TraceError(f"{name}:{number}: column TIMESTAMP: {fields[0]!r} is not a "
                                 f"timestamp ({e})") from None
            if previous is not None and arrival < previous:
                raise TraceError(f"{name}:{number}: column TIMESTAMP: {fields[0]} is earlier "
                                 "than the row before it; the trace must be in arrival order")
            previous = arrival
            counts = []
            for column, value, minimum in (("ContextTokens", fields[1], 1),
                                           ("GeneratedTokens", fields[2], 0)):
                if not value.isdigit():
                    raise TraceError(f"{name}:{number}: column {column}: {value!r} is not a "
                                     "whole number")
                if int(value) < minimum:
                    raise TraceError(f"{name}:{number}: column {column}: must be at least "
                                     f"{minimum}, got {value}")
                counts.append(int(value))
            rows.append(TraceRow(number, arrival, counts[0], counts[1]))
    if not rows:
        raise TraceError(f"{name}: no requests after the header")
    return rows


def trace_schedule(rows, time_scale, max_prompt_tokens, max_output_tokens, skip_s=0.0,
                   name="trace"):
    """Arrivals from trace rows: offsets from the first row at or after skip_s (trace time),
    divided by time_scale; prompt and output lengths capped (an output of 0 becomes 1)."""
    if time_scale <= 0:
        raise ValueError("--time-scale must be positive")
    first = rows[0].arrival_s + skip_s
    out = []
    for r in rows:
        if r.arrival_s < first:
            continue
        out.append(Arrival((r.arrival_s - first) / time_scale,
                           min(r.context_tokens, max_prompt_tokens),
                           max(1, min(r.generated_tokens, max_output_tokens)),
                           f"{name}:{r.line}"))
    return out


def fixed_schedule(rate, prompt_tokens, max_tokens, count, poisson=False, seed=1):
    """`count` arrivals at `rate` per second: evenly spaced, or exponential gaps (Poisson)."""
    if rate <= 0:
        raise ValueError("--rate must be positive")
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(count):
        out.append(Arrival(t, prompt_tokens, max_tokens, f"fixed #{i}"))
        t += rng.expovariate(rate) if poisson else 1.0 / rate
    return out


def percentile(values, p):
    """The p-th percentile (0..100) by linear interpolation between closest ranks (numpy's
    default); None for no values."""
    if not values:
        return None
    if not 0 <= p <= 100:
        raise ValueError("a percentile is from 0 to 100")
    v = sorted(values)
    rank = (len(v) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(v) - 1)
    return v[low] + (v[high] - v[low]) * (rank - low)


def prompt_text(length, index):
    """`length` ASCII characters (one token each on a byte-level model), different for every
    request so no server-side cache can share work between them."""
    rng = random.Random(index)
    words = []
    size = -1  # the joined length: the first word has no space before it
    while size < length:
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8)))
        words.append(w)
        size += len(w) + 1
    return " ".join(words)[:length]


@dataclasses.dataclass
class Result:
    arrival: Arrival
    scheduled_s: float  # monotonic time the request was due
    start_s: float = 0.0
    first_token_s: float = None
    last_token_s: float = None
    end_s: float = None
    tokens: int = 0
    error: str = None  # a kind, e.g. "http_503"
    detail: str = None


def _error_kind(exc):
    if isinstance(exc, ConnectionRefusedError):
        return "connect_refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, ConnectionResetError):
        return "connection_reset"
    if isinstance(exc, (http.client.IncompleteRead, http.client.RemoteDisconnected)):
        return "incomplete_stream"
    if isinstance(exc, http.client.HTTPException):
        return "bad_response"
    return type(exc).__name__


def connect(parsed, timeout_s, ca_file=None):
    """A connection to the split URL `parsed`: HTTPS verified against `ca_file` (the cluster
    CA, for `tessera up`'s router; the system's CAs when None), or plain HTTP."""
    if parsed.scheme == "https":
        return http.client.HTTPSConnection(parsed.hostname, parsed.port or 443, timeout=timeout_s,
                                           context=ssl.create_default_context(cafile=ca_file))
    return http.client.HTTPConnection(parsed.hostname, parsed.port or 80, timeout=timeout_s)


def run_one(url, model, temperature, timeout_s, result, index, ca_file=None):
    """One streamed completion, timed into `result`; `ca_file` as connect's."""
    parsed = urllib.parse.urlsplit(url)
    a = result.arrival
    body = {"prompt": prompt_text(a.prompt_tokens, index), "max_tokens": a.max_tokens,
            "temperature": temperature, "stream": True,
            "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    data = json.dumps(body).encode()
    path = (parsed.path.rstrip("/") or "") + "/v1/completions"
    result.start_s = time.monotonic()
    conn = connect(parsed, timeout_s, ca_file)
    try:
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            result.error = f"http_{resp.status}"
            result.detail = resp.read(500).decode(errors="replace")
            return
        usage_tokens = None
        done = False
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            event = json.loads(payload)
            if "error" in event:
                result.error = "stream_error"
                result.detail = str(event["error"].get("message"))[:500]
                return
            if event.get("usage"):
                usage_tokens = event["usage"].get("completion_tokens")
            for choice in event.get("choices") or []:
                if choice.get("text"):
                    now = time.monotonic()
                    if result.first_token_s is None:
                        result.first_token_s = now
                    result.last_token_s = now
                    result.tokens += 1
        if not done:
            result.error = "incomplete_stream"
            return
        result.end_s = time.monotonic()
        if usage_tokens is not None:
            result.tokens = usage_tokens  # a chunk may carry more than one token
        if result.first_token_s is None:
            result.error = "no_tokens"
    except Exception as e:  # every failure is counted by kind, none stops the run
        result.error = _error_kind(e)
        result.detail = str(e)[:500]
    finally:
        conn.close()


def run(arrivals, url, model=None, temperature=0.0, duration_s=None, timeout_s=120.0,
        ca_file=None):
    """Starts every arrival on schedule (open-loop) until duration_s; waits for them; returns
    (results, wall seconds from the first start to the last end)."""
    results = []
    threads = []
    begin = time.monotonic()
    for index, a in enumerate(arrivals):
        if duration_s is not None and a.offset_s > duration_s:
            break
        due = begin + a.offset_s
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        r = Result(a, due)
        results.append(r)
        t = threading.Thread(target=run_one,
                             args=(url, model, temperature, timeout_s, r, index, ca_file),
                             daemon=True)
        t.start()
        threads.append(t)
    deadline = time.monotonic() + timeout_s + 5
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    for r, t in zip(results, threads):
        if t.is_alive() and r.error is None:
            r.error = "timeout"
    ends = [r.end_s or r.start_s for r in results]
    wall = (max(ends) - begin) if results else 0.0
    return results, wall


def _stats(values, scale=1000.0):
    if not values:
        return {"count": 0, "p50": None, "p99": None, "mean": None}
    return {"count": len(values), "p50": percentile(values, 50) * scale,
            "p99": percentile(values, 99) * scale, "mean": sum(values) / len(values) * scale}


def summarize(results, wall_s):
    """The report as a dict (times in ms, throughput per second of wall time)."""
    ok = [r for r in results if r.error is None]
    errors = collections.Counter(r.error for r in results if r.error is not None)
    ttft = [r.first_token_s - r.start_s for r in ok]
    tpot = [(r.last_token_s - r.first_token_s) / (r.tokens - 1) for r in ok if r.tokens > 1]
    e2e = [r.end_s - r.start_s for r in ok]
    lag = [r.start_s - r.scheduled_s for r in results]
    out_tokens = sum(r.tokens for r in ok)
    examples = {}
    for r in results:
        if r.error and r.error not in examples:
            examples[r.error] = f"{r.arrival.source}: {r.detail}"
    return {
        "requests": {"sent": len(results), "ok": len(ok), "errors": dict(errors),
                     "error_examples": examples},
        "ttft_ms": _stats(ttft), "tpot_ms": _stats(tpot), "e2e_ms": _stats(e2e),
        "start_lag_ms": _stats(lag),
        "throughput": {"wall_s": wall_s,
                       "req_per_s": len(ok) / wall_s if wall_s > 0 else 0.0,
                       "output_tokens_per_s": out_tokens / wall_s if wall_s > 0 else 0.0,
                       "output_tokens": out_tokens,
                       "prompt_tokens": sum(r.arrival.prompt_tokens for r in ok)},
    }


def _fmt(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"


def render_text(config, report):
    lines = [f"load: {config['load']}"]
    if config.get("caps"):
        lines.append(f"caps: {config['caps']}")
    req = report["requests"]
    lines.append(f"requests: {req['sent']} sent, {req['ok']} ok, "
                 f"{sum(req['errors'].values())} errors"
                 + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(req["errors"].items())) + ")"
                    if req["errors"] else ""))
    for kind, example in sorted(req["error_examples"].items()):
        lines.append(f"  first {kind}: {example}")
    lines.append(f"{'':8} {'p50':>10} {'p99':>10} {'mean':>10}   (ms)")
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E"),
                       ("start_lag_ms", "lag")):
        s = report[key]
        lines.append(f"{label:8} {_fmt(s['p50']):>10} {_fmt(s['p99']):>10} "
                     f"{_fmt(s['mean']):>10}")
    t = report["throughput"]
    lines.append(f"throughput: {t['req_per_s']:.2f} req/s, {t['output_tokens_per_s']:,.0f} "
                 f"output tokens/s ({t['output_tokens']:,} tokens over {t['wall_s']:.1f} s)")
    lines.append("lag: how late requests started against their schedule (open-loop fidelity)")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the server (or router)")
    p.add_argument("--ca-file", help="for an https:// URL: the CA its certificate is signed by "
                   "(<state-dir>/ca.crt for `tessera up`'s router)")
    p.add_argument("--model", help="the model field to send (default: none)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--trace", default=DEFAULT_TRACE)
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="speed-up of the trace's arrivals: 10 = ten times faster")
    p.add_argument("--skip-s", type=float, default=0.0,
                   help="start this many seconds (trace time) into the trace")
    p.add_argument("--max-prompt-tokens", type=int, default=512,
                   help="cap on a trace request's prompt (ContextTokens)")
    p.add_argument("--max-output-tokens", type=int, default=128,
                   help="cap on a trace request's output (GeneratedTokens)")
    p.add_argument("--rate", type=float, help="fixed mode: requests per second")
    p.add_argument("--prompt-tokens", type=int, default=128, help="fixed mode: prompt length")
    p.add_argument("--max-tokens", type=int, default=32, help="fixed mode: output length")
    p.add_argument("--poisson", action="store_true", help="fixed mode: exponential gaps")
    p.add_argument("--seed", type=int, default=1, help="fixed mode with --poisson: the seed")
    p.add_argument("--duration", type=float, default=60.0,
                   help="seconds (wall time) during which requests are started")
    p.add_argument("--max-requests", type=int, help="start at most this many requests")
    p.add_argument("--timeout-s", type=float, default=120.0, help="per request")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = p.parse_args(argv)

    for name in ("max_prompt_tokens", "max_output_tokens", "prompt_tokens", "max_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.duration <= 0 or args.timeout_s <= 0:
        p.error("--duration and --timeout-s must be positive")
    if args.max_requests is not None and args.max_requests < 1:
        p.error("--max-requests must be at least 1")

    if args.rate is not None:
        count = int(math.ceil(args.rate * args.duration)) + 1
        if args.max_requests is not None:
            count = min(count, args.max_requests)
        try:
            arrivals = fixed_schedule(args.rate, args.prompt_tokens, args.max_tokens, count,
                                      args.poisson, args.seed)
        except ValueError as e:
            p.error(str(e))
        config = {"mode": "fixed", "rate": args.rate, "prompt_tokens": args.prompt_tokens,
                  "max_tokens": args.max_tokens, "poisson": args.poisson,
                  "load": f"fixed {args.rate:g} req/s "
                          f"({'Poisson' if args.poisson else 'evenly spaced'}), prompt "
                          f"{args.prompt_tokens} tokens, output {args.max_tokens} tokens"}
    else:
        try:
            rows = read_trace(args.trace)
            arrivals = trace_schedule(rows, args.time_scale, args.max_prompt_tokens,
                                      args.max_output_tokens, args.skip_s,
                                      os.path.basename(args.trace))
        except (OSError, TraceError, ValueError) as e:
            print(f"loadgen: {e}", file=sys.stderr)
            return 2
        if args.max_requests is not None:
            arrivals = arrivals[:args.max_requests]
        in_window = [a for a in arrivals if a.offset_s <= args.duration]
        offered = len(in_window) / args.duration
        capped_p = sum(1 for r in rows if r.context_tokens > args.max_prompt_tokens)
        capped_o = sum(1 for r in rows if r.generated_tokens > args.max_output_tokens)
        config = {
            "mode": "trace", "trace": os.path.basename(args.trace), "rows": len(rows),
            "time_scale": args.time_scale, "skip_s": args.skip_s,
            "max_prompt_tokens": args.max_prompt_tokens,
            "max_output_tokens": args.max_output_tokens,
            "load": f"trace {os.path.basename(args.trace)} ({len(rows):,} rows) from "
                    f"{args.skip_s:g} s, time scale {args.time_scale:g}x (arrivals "
                    f"{args.time_scale:g} times faster than recorded): {len(in_window)} "
                    f"requests in {args.duration:g} s, {offered:.2f} req/s offered",
            "caps": f"prompt = min(ContextTokens, {args.max_prompt_tokens}) "
                    f"({capped_p / len(rows):.0%} of trace rows capped), output = "
                    f"min(GeneratedTokens, {args.max_output_tokens}) "
                    f"({capped_o / len(rows):.0%} capped); one ASCII character per token"}
    config.update(url=args.url, duration_s=args.duration, max_requests=args.max_requests,
                  temperature=args.temperature)

    results, wall = run(arrivals, args.url, args.model, args.temperature, args.duration,
                        args.timeout_s, args.ca_file)
    report = summarize(results, wall)
    if args.json:
        print(json.dumps({"config": config, **report}, indent=1))
    else:
        print(render_text(config, report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
