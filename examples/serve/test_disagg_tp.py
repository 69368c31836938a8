"""Prefill/decode disaggregation between tensor-parallel groups, against real processes on
loopback (gloo): a prefill group and a decode group of 2 processes each, then of 4 each, the
decode group's text checked against a colocated group of the same size, and a failure injected
on one prefill rank's KV listener (--test-kv-fault) making the whole decode group prefill
locally, with the same text.

Each process of a group holds heads/N attention heads and so its own shard of a prompt's KV:
rank r of the decode group pulls rank r's shard (disagg.py). The model is small (2 layers,
d_model 64, 4 heads) so that 16 processes start and run on a 2-core machine.

Run: /usr/bin/python3 -m unittest discover -s examples/serve -p 'test_disagg_tp.py' -v
"""

import http.client
import json
import tempfile
import unittest

from test_disagg import disagg_stats, post
from test_server import DEADLINE_S, PYTHON, Group, wait_for

SMALL = ("--layers", "2", "--d-model", "64", "--heads", "4", "--d-ff", "128", "--context",
         "512", "--threads", "1")
LONG = "Tensor-parallel disaggregation: every rank of the decode group pulls its own shard."
BODIES = [
    {"prompt": LONG, "max_tokens": 24, "temperature": 0},
    {"prompt": LONG * 3, "max_tokens": 16, "temperature": 0},
    {"prompt": "x" * 100 + LONG, "max_tokens": 16, "temperature": 1, "seed": 7},
    {"prompt": LONG[::-1], "max_tokens": 16, "temperature": 0.7, "seed": 12345},
]


def stream_text(port, body, headers):
    """A streamed completion's text and its X-Tessera-Prefilled header."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}),
                     headers={"Content-Type": "application/json", **headers})
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        text = []
        for line in resp.read().decode().splitlines():
            if line.startswith("data: {"):
                text.append(json.loads(line[6:])["choices"][0]["text"])
        return "".join(text), resp.headers.get("X-Tessera-Prefilled")
    finally:
        conn.close()


class _TpDisagg:
    """The tests, run by the subclasses for a group size (SIZE) and an injected fault (FAULT:
    which prefill rank's listener fails, and how; REASON: the fallback reason it causes)."""

    SIZE = 0
    FAULT = ""
    REASON = ""
    EXTRA_GROUPS = False  # a prefill group of one too (the size-mismatch test)

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.groups = []

        def start(size, *args):
            group = Group(size, cls.tmp.name, SMALL + args)
            cls.groups.append(group)
            return group

        n = cls.SIZE
        try:
            cls.prefill = start(n, "--mode", "prefill", "--kv-timeout-s", "10")
            cls.faulty = start(n, "--mode", "prefill", "--test-kv-fault", cls.FAULT)
            cls.decode = start(n, "--mode", "decode", "--kv-timeout-s", "30")
            cls.colocated = start(n)
            if cls.EXTRA_GROUPS:
                cls.prefill_one = start(1, "--mode", "prefill")
                cls.decode_one = start(1, "--mode", "decode", "--kv-timeout-s", "30")
            for g in cls.groups:
                g.wait_ready()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for g in cls.groups:
            g.stop()
        cls.tmp.cleanup()

    def via(self, group):
        return {"X-Tessera-Prefill": f"127.0.0.1:{group.port}"}

    def completion(self, group, headers=None, **body):
        status, data, resp_headers = post(group.port, body, headers)
        self.assertEqual(status, 200, data)
        return data["choices"][0]["text"], resp_headers.get("X-Tessera-Prefilled")

    def test_the_decode_group_makes_the_colocated_groups_text_through_the_handoff(self):
        before = disagg_stats(self.decode.port)
        for body in BODIES:
            want, _ = self.completion(self.colocated, **body)
            got, source = self.completion(self.decode, self.via(self.prefill), **body)
            self.assertEqual(source, "remote", body)
            self.assertEqual(got, want, body)
        body = BODIES[2]
        want, _ = self.completion(self.colocated, **body)
        self.assertEqual(stream_text(self.decode.port, body, self.via(self.prefill)),
                         (want, "remote"))
        stats = disagg_stats(self.decode.port)
        self.assertEqual(stats.get("handoffs", 0) - before.get("handoffs", 0),
                         len(BODIES) + 1)
        self.assertEqual(stats.get("fallbacks", 0), before.get("fallbacks", 0))
        prefill = disagg_stats(self.prefill.port)
        self.assertGreaterEqual(prefill["exports"], len(BODIES) + 1)
        wait_for(lambda: disagg_stats(self.prefill.port)["kvHeld"] == 0,
                 "the prefill leader to free every pulled shard")

    def test_the_prefill_leader_lists_every_ranks_kv_listener(self):
        status, data, _ = post(self.prefill.port, {
            "prompt": LONG, "max_tokens": 1, "temperature": 0,
            "kv_transfer_params": {"do_remote_decode": True, "group_size": self.SIZE}})
        self.assertEqual(status, 200, data)
        ranks = data["kv_transfer_params"]["ranks"]
        self.assertEqual(len(ranks), self.SIZE)
        self.assertEqual(len(set(ranks)), self.SIZE, ranks)
        self.assertEqual(ranks[0], f"127.0.0.1:{data['kv_transfer_params']['port']}")

    def test_one_ranks_failed_transfer_makes_the_whole_group_prefill_locally(self):
        before = disagg_stats(self.decode.port)
        for body in BODIES[:3]:
            want, _ = self.completion(self.colocated, **body)
            got, source = self.completion(self.decode, self.via(self.faulty), **body)
            self.assertEqual(source, f"fallback:{self.REASON}", body)
            self.assertEqual(got, want, body)
            # The group did not diverge: the next handoff from a sound group still matches.
            got, source = self.completion(self.decode, self.via(self.prefill), **body)
            self.assertEqual((got, source), (want, "remote"), body)
        stats = disagg_stats(self.decode.port)
        for name in ("fallbacks", "followerFallbacks", f"fallback_{self.REASON}"):
            self.assertEqual(stats.get(name, 0) - before.get(name, 0), 3, (name, stats))


@unittest.skipIf(PYTHON is None, "needs an interpreter with torch (Debian's python3-torch)")
class TpDisaggOfTwoTest(_TpDisagg, unittest.TestCase):
    SIZE = 2
    FAULT = "1:corrupt"  # rank 1 damages its shard: its puller's crc32 check refuses it
    REASON = "bad_kv"
    EXTRA_GROUPS = True

    def test_groups_of_different_sizes_are_not_paired_and_prefill_locally(self):
        body = BODIES[0]
        want, _ = self.completion(self.colocated, **body)
        got, source = self.completion(self.decode, self.via(self.prefill_one), **body)
        self.assertEqual((got, source), (want, "fallback:mismatch"))
        got, source = self.completion(self.decode_one, self.via(self.prefill), **body)
        self.assertEqual((got, source), (want, "fallback:mismatch"))
        status, data, _ = post(self.prefill.port, {
            "prompt": LONG, "max_tokens": 1,
            "kv_transfer_params": {"do_remote_decode": True, "group_size": 4}})
        self.assertEqual(status, 400, data)
        self.assertEqual(data["error"]["param"], "kv_transfer_params.group_size")
        self.assertIn("same group size", data["error"]["message"])


@unittest.skipIf(PYTHON is None, "needs an interpreter with torch (Debian's python3-torch)")
class TpDisaggOfFourTest(_TpDisagg, unittest.TestCase):
    SIZE = 4
    FAULT = "2:refuse"  # rank 2's listener answers ERR: its puller's transfer fails
    REASON = "transfer"


if __name__ == "__main__":
    unittest.main()
