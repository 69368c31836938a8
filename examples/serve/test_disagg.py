"""Prefill/decode disaggregation against real server processes on loopback: a prefill
replica, two decode replicas (one with a 1 s handoff timeout) and a colocated one.

Real processes because what is tested is the path between them: the prefill call over HTTP,
the KV pull over TCP, the fallbacks when the prefill side is gone or stalls, and what the
prefill side still holds afterwards. The model-level equivalence and the wire format are unit
tests in test_kvwire.py.

Run: /usr/bin/python3 -m unittest discover -s examples/serve -p 'test_disagg.py' -v
"""

import http.client
import json
import socket
import tempfile
import threading
import time
import unittest

from test_server import PYTHON, Group, get, wait_for

DEADLINE_S = 60
LONG = "Disaggregated serving: the prompt runs on one replica, the tokens come from another."


def post(port, body, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), resp.headers
    finally:
        conn.close()


def disagg_stats(port):
    status, body = get(port, "/healthz")
    assert status == 200, (status, body)
    return body["disagg"]


@unittest.skipIf(PYTHON is None, "needs an interpreter with torch (Debian's python3-torch)")
class DisaggTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.groups = []

        def start(*args):
            group = Group(1, cls.tmp.name, args)
            cls.groups.append(group)
            return group

        cls.prefill = start("--mode", "prefill", "--kv-hold-s", "2", "--kv-timeout-s", "1")
        cls.decode = start("--mode", "decode", "--kv-timeout-s", "30")
        cls.impatient = start("--mode", "decode", "--kv-timeout-s", "1")
        cls.colocated = start()
        try:
            for g in cls.groups:
                g.wait_ready()
        except BaseException:
            cls.tearDownClass()
            raise
        cls.via_prefill = {"X-Tessera-Prefill": f"127.0.0.1:{cls.prefill.port}"}

    @classmethod
    def tearDownClass(cls):
        for g in cls.groups:
            g.stop()
        cls.tmp.cleanup()

    def completion(self, group, headers=None, **body):
        status, data, resp_headers = post(group.port, body, headers)
        self.assertEqual(status, 200, data)
        return data["choices"][0]["text"], resp_headers.get("X-Tessera-Prefilled")

    def test_a_transferred_cache_gives_the_tokens_a_local_prefill_gives(self):
        for body in ({"prompt": LONG, "max_tokens": 40, "temperature": 0},
                     {"prompt": LONG, "max_tokens": 40, "temperature": 1, "seed": 7},
                     {"prompt": LONG * 8, "max_tokens": 20, "temperature": 0.7, "seed": 99}):
            want, _ = self.completion(self.colocated, **body)
            got, source = self.completion(self.decode, self.via_prefill, **body)
            self.assertEqual(source, "remote")
            self.assertEqual(got, want, body)
            local, source = self.completion(self.decode, **body)  # no prefill replica named
            self.assertEqual(source, "local")
            self.assertEqual(local, want)
        stats = disagg_stats(self.decode.port)
        self.assertGreaterEqual(stats["handoffs"], 3)
        self.assertGreater(stats["kvBytesIn"], 0)
        wait_for(lambda: disagg_stats(self.prefill.port)["kvHeld"] == 0,
                 "the prefill replica to free every pulled blob")

    def test_a_prompt_at_or_below_the_threshold_is_prefilled_locally(self):
        # BOS + 7 bytes = 8 tokens, the default threshold: not longer, so local.
        text, source = self.completion(self.decode, self.via_prefill, prompt="1234567",
                                       max_tokens=5, temperature=0)
        self.assertEqual(source, "local")
        self.assertEqual(text, self.completion(self.colocated, prompt="1234567", max_tokens=5,
                                               temperature=0)[0])
        _, source = self.completion(self.decode, self.via_prefill, prompt="12345678",
                                    max_tokens=5, temperature=0)
        self.assertEqual(source, "remote")

    def test_a_dead_or_stalling_prefill_replica_means_local_prefill_and_the_same_answer(self):
        body = {"prompt": LONG, "max_tokens": 10, "temperature": 1, "seed": 3}
        want, _ = self.completion(self.colocated, **body)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        got, source = self.completion(self.decode, {"X-Tessera-Prefill": f"127.0.0.1:{dead}"},
                                      **body)
        self.assertEqual((got, source), (want, "fallback:unreachable"))
        # A "replica" that accepts the connection and never answers.
        stall = socket.socket()
        stall.bind(("127.0.0.1", 0))
        stall.listen(8)
        self.addCleanup(stall.close)
        accepted = []
        threading.Thread(target=lambda: accepted.append(stall.accept()), daemon=True).start()
        self.addCleanup(lambda: [conn.close() for conn, _ in accepted])
        started = time.monotonic()
        got, source = self.completion(
            self.impatient, {"X-Tessera-Prefill": f"127.0.0.1:{stall.getsockname()[1]}"},
            **body)
        self.assertEqual((got, source), (want, "fallback:timeout"))
        self.assertLess(time.monotonic() - started, 30)
        stats = disagg_stats(self.impatient.port)
        self.assertEqual(stats.get("fallback_timeout"), 1)

    def test_kv_is_freed_when_the_decode_side_dies_mid_transfer_stalls_or_never_pulls(self):
        def prefill_handle(prompt):
            status, data, _ = post(self.prefill.port, {
                "prompt": prompt, "max_tokens": 1, "temperature": 0,
                "kv_transfer_params": {"do_remote_decode": True}})
            self.assertEqual(status, 200, data)
            return data["kv_transfer_params"]

        before = disagg_stats(self.prefill.port)
        # About 7 MB of KV (900 tokens): more than the loopback buffers take at once.
        params = prefill_handle("x" * 900)
        self.assertGreater(params["bytes"], 4 << 20)
        with socket.create_connection(("127.0.0.1", params["port"])) as s:
            s.sendall(b"GET %s\n" % params["handle"].encode())
            self.assertTrue(s.recv(4096).startswith(b"OK "))
        # ... and the decode side is gone, its socket closed with the blob half read.
        wait_for(lambda: disagg_stats(self.prefill.port).get("pullsBroken", 0) ==
                 before.get("pullsBroken", 0) + 1, "the prefill side to see the pull broken")
        self.assertEqual(disagg_stats(self.prefill.port)["kvHeld"], 0)
        # A puller that stops reading: the sender gives up after --kv-timeout-s (1 s).
        params = prefill_handle("y" * 900)
        stalled = socket.create_connection(("127.0.0.1", params["port"]))
        self.addCleanup(stalled.close)
        stalled.sendall(b"GET %s\n" % params["handle"].encode())
        wait_for(lambda: disagg_stats(self.prefill.port).get("pullsBroken", 0) ==
                 before.get("pullsBroken", 0) + 2, "the sender to give up on a stalled pull")
        # Never pulled: freed after --kv-hold-s (2 s).
        prefill_handle("z" * 300)
        self.assertEqual(disagg_stats(self.prefill.port)["kvHeld"], 1)
        wait_for(lambda: disagg_stats(self.prefill.port)["kvHeld"] == 0,
                 "an unpulled blob to expire")
        self.assertEqual(disagg_stats(self.prefill.port)["kvHeldBytes"], 0)

    def test_misused_kv_transfer_params_get_400_naming_the_field(self):
        cases = [
            (self.colocated, {"prompt": "p", "max_tokens": 1,
                              "kv_transfer_params": {"do_remote_decode": True}},
             "kv_transfer_params"),
            (self.prefill, {"prompt": "p", "max_tokens": 2,
                            "kv_transfer_params": {"do_remote_decode": True}}, "max_tokens"),
            (self.prefill, {"prompt": "p", "max_tokens": 1, "kv_transfer_params": "yes"},
             "kv_transfer_params"),
        ]
        for group, body, param in cases:
            status, data, _ = post(group.port, body)
            self.assertEqual(status, 400, (body, data))
            self.assertEqual(data["error"]["param"], param, body)


if __name__ == "__main__":
    unittest.main()
