#!/usr/bin/env python3
"""Prefill/decode disaggregation against colocated serving, on the same chip budget, in one run.

Two model processes per configuration (examples/serve, a group of one each, standing for two
replicas of the same shape), each configuration behind its own `tessera router` with static
endpoints:
  colocated      two colocated replicas; the router balances requests over both
  disaggregated  one prefill and one decode replica; the router sends every request to decode
                 and names the prefill replica (X-Tessera-Prefill); decode hands prompts longer
                 than the threshold (8 tokens) to prefill and pulls their KV over TCP
The same slice of the Azure conversation trace (time-scaled, loadgen.py) is replayed through
each, in alternating windows (colocated, disaggregated, colocated, ...), so a disturbance from
the other work on the machine falls on both; one configuration's processes idle while the
other's run. Reported side by side: TTFT and TPOT p50/p99, throughput, and for the
disaggregated one the handoff time and KV bytes moved per request (the decode replica's
/healthz counters), handoffs and fallbacks.

--kill-prefill adds the fallback scenario: the disaggregated configuration under the same load
with its prefill replica killed (SIGKILL) part-way through; decode falls back to local prefill
and no request may fail.

  bench/serving/disagg.py --windows 4 --window-s 40 \\
      --time-scale 1 --kill-prefill
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import loadgen  # noqa: E402

SERVER = os.path.join(REPO, "examples", "serve", "server.py")
PYTHON = "/usr/bin/python3"


def uptime():
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def wait_for(what, fn, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout} s waiting for {what}")


def get_json(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


class Procs:
    """Every process started here, killed at the end."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def server(self, name, *args):
        port_file = os.path.join(self.tmp, f"{name}.port")
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        p = subprocess.Popen([PYTHON, SERVER, "--host", "127.0.0.1", "--port", "0",
                              "--port-file", port_file, *args],
                             stdout=subprocess.DEVNULL, stderr=log,
                             env={k: v for k, v in os.environ.items()
                                  if not k.startswith(("TESSERA_", "MASTER_", "PORT"))})
        self.procs.append(p)
        port = wait_for(f"{name} to listen", lambda: _read_int(port_file))
        wait_for(f"{name} to be ready",
                 lambda: (get_json(f"http://127.0.0.1:{port}/healthz") or {}).get("status") ==
                 "ok")
        return p, port

    def router(self, tessera, name, service):
        endpoints = os.path.join(self.tmp, f"{name}.json")
        with open(endpoints, "w") as f:
            json.dump({"services": [service]}, f)
        info = os.path.join(self.tmp, f"{name}.info")
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        p = subprocess.Popen([tessera, "router", "--static-endpoints", endpoints, "--port", "0",
                              "--info-file", info, "--plain-http"], stdout=subprocess.DEVNULL, stderr=log)
        self.procs.append(p)

        def port():
            try:
                with open(info) as f:
                    return json.load(f).get("port")
            except (OSError, ValueError):
                return None
        return wait_for(f"router {name}", port)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def endpoint(port, slice_name):
    return {"address": "127.0.0.1", "port": port, "slice": slice_name}


def disagg_counters(port):
    return (get_json(f"http://127.0.0.1:{port}/healthz") or {}).get("disagg", {})


def delta(after, before):
    return {k: after.get(k, 0) - before.get(k, 0) for k in after}


def pooled(results, wall):
    return loadgen.summarize(results, wall)


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--tessera", default=os.environ.get("TESSERA_BIN",
                                                        os.path.join(REPO, "build", "dev",
                                                                     "bin", "tessera")))
    p.add_argument("--trace", default=loadgen.DEFAULT_TRACE)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--windows", type=int, default=4,
                   help="alternating windows in all (half per configuration)")
    p.add_argument("--window-s", type=float, default=30.0, help="trace seconds per window")
    p.add_argument("--max-prompt-tokens", type=int, default=512)
    p.add_argument("--max-output-tokens", type=int, default=64)
    p.add_argument("--kill-prefill", action="store_true",
                   help="also: kill -9 the prefill replica under load")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.windows < 2 or args.windows % 2:
        p.error("--windows must be an even number >= 2 (half per configuration)")

    rows = loadgen.read_trace(args.trace)
    tmp = tempfile.mkdtemp(prefix="disagg-bench-")
    procs = Procs(tmp)
    load_before = uptime()
    try:
        # Colocated: two replicas of the same shape.
        _, c0 = procs.server("colocated-0")
        _, c1 = procs.server("colocated-1")
        colo_router = procs.router(args.tessera, "router-colocated", {
            "name": "llm", "maxOngoingRequests": 16,
            "endpoints": [endpoint(c0, "cube-0"), endpoint(c1, "cube-0")]})
        # Disaggregated: one prefill and one decode replica, the same two processes' worth.
        prefill, pf = procs.server("prefill", "--mode", "prefill")
        _, dc = procs.server("decode", "--mode", "decode")
        disagg_service = {"name": "llm", "role": "decode", "maxOngoingRequests": 16,
                          "endpoints": [endpoint(dc, "cube-0")],
                          "prefillEndpoints": [endpoint(pf, "cube-0")]}
        disagg_router = procs.router(args.tessera, "router-disagg", disagg_service)

        configs = {"colocated": {"url": f"http://127.0.0.1:{colo_router}", "results": [],
                                 "wall": 0.0},
                   "disaggregated": {"url": f"http://127.0.0.1:{disagg_router}", "results": [],
                                     "wall": 0.0}}
        before = disagg_counters(dc)
        for w in range(args.windows):
            name = "colocated" if w % 2 == 0 else "disaggregated"
            # Window w replays trace seconds [w//2 * window, ...): both configurations get the
            # same slices of the trace.
            schedule = loadgen.trace_schedule(rows, args.time_scale, args.max_prompt_tokens,
                                              args.max_output_tokens,
                                              skip_s=(w // 2) * args.window_s)
            results, wall = loadgen.run(schedule, configs[name]["url"],
                                        duration_s=args.window_s / args.time_scale,
                                        timeout_s=120)
            configs[name]["results"] += results
            configs[name]["wall"] += wall
            print(f"window {w}: {name}, {len(results)} requests, "
                  f"{sum(r.error is not None for r in results)} failed", file=sys.stderr)
        counters = delta(disagg_counters(dc), before)

        kill = None
        if args.kill_prefill:
            schedule = loadgen.trace_schedule(rows, args.time_scale, args.max_prompt_tokens,
                                              args.max_output_tokens, skip_s=0)
            window = args.window_s / args.time_scale
            before_kill = disagg_counters(dc)
            import threading
            killed_at = {}

            def killer():
                time.sleep(window / 3)
                prefill.send_signal(signal.SIGKILL)
                killed_at["s"] = window / 3
            threading.Thread(target=killer, daemon=True).start()
            results, wall = loadgen.run(schedule, configs["disaggregated"]["url"],
                                        duration_s=window, timeout_s=120)
            kill = {"report": pooled(results, wall),
                    "counters": delta(disagg_counters(dc), before_kill),
                    "killed_after_s": killed_at.get("s")}
    finally:
        procs.stop()

    report = {"load_before": load_before, "load_after": uptime(),
              "settings": {"time_scale": args.time_scale, "windows": args.windows,
                           "window_s": args.window_s,
                           "max_prompt_tokens": args.max_prompt_tokens,
                           "max_output_tokens": args.max_output_tokens},
              "colocated": pooled(configs["colocated"]["results"], configs["colocated"]["wall"]),
              "disaggregated": pooled(configs["disaggregated"]["results"],
                                      configs["disaggregated"]["wall"]),
              "handoffs": counters, "kill_prefill": kill}
    handoffs = counters.get("handoffs", 0)
    report["handoff_ms_mean"] = counters.get("handoffMsSum", 0) / handoffs if handoffs else None
    report["kv_bytes_per_handoff"] = counters.get("kvBytesIn", 0) / handoffs if handoffs else None
    n = report["disaggregated"]["requests"]["ok"]
    report["kv_bytes_per_request"] = counters.get("kvBytesIn", 0) / n if n else None
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"load average before {' '.join(load_before)}, after {' '.join(report['load_after'])}")
    print(f"{'':28} {'colocated':>14} {'disaggregated':>14}")
    for label, key, stat in (("TTFT p50 ms", "ttft_ms", "p50"), ("TTFT p99 ms", "ttft_ms", "p99"),
                             ("TPOT p50 ms", "tpot_ms", "p50"), ("TPOT p99 ms", "tpot_ms", "p99"),
                             ("E2E p50 ms", "e2e_ms", "p50"), ("E2E p99 ms", "e2e_ms", "p99")):
        print(f"{label:28} {fmt(report['colocated'][key][stat]):>14} "
              f"{fmt(report['disaggregated'][key][stat]):>14}")
    for label, key in (("requests ok / sent", None), ("output tokens/s", "output_tokens_per_s"),
                       ("requests/s", "req_per_s")):
        if key is None:
            vals = [f"{report[c]['requests']['ok']}/{report[c]['requests']['sent']}"
                    for c in ("colocated", "disaggregated")]
        else:
            vals = [fmt(report[c]["throughput"][key], 2) for c in ("colocated", "disaggregated")]
        print(f"{label:28} {vals[0]:>14} {vals[1]:>14}")
    print(f"handoffs {handoffs}, local prefills {counters.get('localPrefills', 0)}, "
          f"fallbacks {counters.get('fallbacks', 0)}; handoff mean "
          f"{fmt(report['handoff_ms_mean'])} ms, KV {fmt(report['kv_bytes_per_handoff'], 0)} "
          f"bytes per handoff, {fmt(report['kv_bytes_per_request'], 0)} per request")
    if kill:
        r = kill["report"]
        print(f"kill -9 of the prefill replica {fmt(kill['killed_after_s'])} s into a "
              f"{fmt(args.window_s / args.time_scale)} s window: {r['requests']['ok']} of "
              f"{r['requests']['sent']} requests ok, errors {r['requests']['errors']}; decode "
              f"handoffs {kill['counters'].get('handoffs', 0)}, fallbacks "
              f"{kill['counters'].get('fallbacks', 0)} "
              f"({ {k[9:]: v for k, v in kill['counters'].items() if k.startswith('fallback_')} })")
    return 0


if __name__ == "__main__":
    sys.exit(main())
