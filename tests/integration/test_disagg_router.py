"""Prefill/decode disaggregation through `tessera router`: the router sends a disaggregated
Service's requests to its decode replica and names the prefill replica on the same slice; the
decode replica (examples/serve --mode decode) hands the prompt to the prefill replica and pulls
its KV; the router counts the pairing, where decode prefilled, and a stream's output tokens,
time to first token (for the prefill role) and time per output token (for decode). Then the
prefill replica is killed (SIGKILL) and the next request is still answered, by a local
prefill, counted as a fallback.

Real processes because what is tested is the path across three of them (router, decode,
prefill) and the headers between them; the pairing rules and the KV format are unit tests
(src/proxy/disagg_pairing_test.cc, examples/serve/test_kvwire.py). About 10 s.
"""
import http.client
import json
import os
import signal
import subprocess
import tempfile
import unittest

from test_router import PYTHON, TESSERA, Router, metric, wait_for

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SERVER = os.path.join(REPO, "examples", "serve", "server.py")
PROMPT = "A prompt long enough to be prefilled by the prefill replica, not by decode."


class Server:
    def __init__(self, tmp, name, *args):
        self.port_file = os.path.join(tmp, name + ".port")
        self.log = open(os.path.join(tmp, name + ".log"), "w")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TESSERA_", "MASTER_", "PORT"))}
        self.proc = subprocess.Popen([PYTHON, SERVER, "--host", "127.0.0.1", "--port", "0",
                                      "--port-file", self.port_file, *args],
                                     stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.port = None

    def wait_ready(self):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("server exited with %d; see %s" %
                                     (self.proc.returncode, self.log.name))
            if self.port is None and os.path.exists(self.port_file):
                with open(self.port_file) as f:
                    self.port = int(f.read())
            return self.port is not None and status(self.port, "/healthz") == 200
        wait_for("the server to be ready", ready, timeout=120)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


def status(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def complete(port, headers=None, stream=False):
    """(text, X-Tessera-Prefilled) of one completion; streamed: the tokens' text joined."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 1, "seed": 5}
        if stream:
            body["stream"] = True
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        raw = r.read()
        assert r.status == 200, (r.status, raw)
        if stream:
            events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
            text = "".join(c["choices"][0]["text"] for c in map(json.loads, events[:-1])
                           if c["choices"])
            return text, r.getheader("X-Tessera-Prefilled")
        return json.loads(raw)["choices"][0]["text"], r.getheader("X-Tessera-Prefilled")
    finally:
        conn.close()


@unittest.skipUnless(os.path.exists(TESSERA), "needs the tessera binary ($TESSERA_BIN)")
class DisaggRouterTest(unittest.TestCase):
    def test_router_pairs_decode_with_prefill_counts_handoffs_and_survives_a_dead_prefill(self):
        with tempfile.TemporaryDirectory() as tmp:
            prefill = Server(tmp, "prefill", "--mode", "prefill")
            decode = Server(tmp, "decode", "--mode", "decode")
            self.addCleanup(prefill.stop)
            self.addCleanup(decode.stop)
            prefill.wait_ready()
            decode.wait_ready()
            # Two prefill replicas: one on the decode replica's slice, one elsewhere (nothing
            # listens there: were it picked, the request would fall back, not fail).
            endpoints = os.path.join(tmp, "endpoints.json")
            with open(endpoints, "w") as f:
                json.dump({"services": [{
                    "name": "llm", "role": "decode",
                    "endpoints": [{"address": "127.0.0.1", "port": decode.port,
                                   "slice": "cube-1"}],
                    "prefillEndpoints": [
                        {"address": "127.0.0.1", "port": 9, "slice": "cube-0"},
                        {"address": "127.0.0.1", "port": prefill.port, "slice": "cube-1"}]}]},
                    f)
            router = Router(tmp, "--static-endpoints", endpoints)
            self.addCleanup(router.stop)

            want, source = complete(decode.port)  # no prefill named: a local prefill
            self.assertEqual(source, "local")
            got, source = complete(router.port)
            self.assertEqual(source, "remote")
            self.assertEqual(got, want)
            text = router.metrics()
            self.assertEqual(metric(text, "tessera_router_prefill_pairings_total", service="llm",
                                    placement="same_slice"), 1)
            self.assertEqual(metric(text, "tessera_router_prefills_total", service="llm",
                                    where="remote"), 1)
            self.assertEqual(metric(text, "tessera_router_prefill_queued_prompt_tokens",
                                    service="llm"), 0)
            # A stream: its 12 tokens counted for decode, its time to first token for the
            # prefill role (which prefilled it), its time per output token for decode.
            got, source = complete(router.port, stream=True)
            self.assertEqual((got, source), (want, "remote"))
            text = router.metrics()
            self.assertEqual(metric(text, "tessera_router_output_tokens_total", service="llm",
                                    role="decode"), 12)
            self.assertEqual(metric(text, "tessera_router_time_per_output_token_seconds_count",
                                    service="llm", role="decode"), 1)
            self.assertEqual(metric(text, "tessera_router_time_to_first_token_seconds_count",
                                    service="llm", role="prefill"), 1)
            self.assertIsNone(metric(text, "tessera_router_time_to_first_token_seconds_count",
                                     service="llm", role="decode"))

            prefill.proc.send_signal(signal.SIGKILL)
            prefill.proc.wait()
            got, source = complete(router.port)
            self.assertEqual(source, "fallback:unreachable")
            self.assertEqual(got, want)
            text = router.metrics()
            self.assertEqual(metric(text, "tessera_router_prefills_total", service="llm",
                                    where="fallback", reason="unreachable"), 1)
            self.assertEqual(metric(text, "tessera_router_requests_total", service="llm",
                                    code="200"), 3)


if __name__ == "__main__":
    unittest.main()
