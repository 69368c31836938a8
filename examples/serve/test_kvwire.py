"""Unit tests of the KV handoff's parts in one process (no servers): the wire format and its
checks, an imported cache decoding exactly like a local prefill, the handle store's expiry,
and the KV listener freeing a blob whose puller died or stalled.

Run: /usr/bin/python3 -m unittest discover -s examples/serve -p 'test_kvwire.py' -v
"""

import os
import socket
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import disagg  # noqa: E402
import kvwire  # noqa: E402
import model  # noqa: E402

DEADLINE_S = 60
SMALL = model.Config(layers=2, d_model=64, heads=4, d_ff=128, context=256, seed=3)


def wait_for(condition, what, deadline_s=DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")


def generate(net, slot, logits, position, steps, seed):
    """Samples `steps` tokens from `slot` (temperature 1, seeded), as the engine does."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        index = int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=g))
        token = net.token_of(index)
        out.append(token)
        tokens, positions = [0] * (slot + 1), [0] * (slot + 1)
        tokens[slot], positions[slot] = token, position
        logits = net.decode(tokens, positions)[slot]
        position += 1
    return out


def blob_for(net, prompt):
    tokens = model.encode(prompt)
    logits = net.prefill(0, tokens)
    return tokens, kvwire.encode(kvwire.model_fields(net), tokens,
                                 net.export_kv(0, len(tokens)), logits)


class WireTest(unittest.TestCase):
    def setUp(self):
        self.net = model.ShardedTransformer(SMALL, max_batch=4)

    def test_an_imported_cache_generates_exactly_what_a_local_prefill_does(self):
        prompt = "Prefill here, decode there: the same tokens either way."
        tokens, blob = blob_for(self.net, prompt)
        self.assertEqual(len(blob), kvwire.blob_length(blob[:kvwire.HEADER.size]))
        # A second model (same seed), as on another replica, imports into another slot.
        other = model.ShardedTransformer(SMALL, max_batch=4)
        got_tokens, layers, logits = kvwire.decode(blob, kvwire.model_fields(other), tokens)
        self.assertEqual(got_tokens, tokens)
        other.import_kv(2, layers)
        local = model.ShardedTransformer(SMALL, max_batch=4)
        local_logits = local.prefill(2, tokens)
        self.assertTrue(torch.equal(logits, local_logits))
        for seed in (0, 11, 12345):
            self.assertEqual(generate(other, 2, logits, len(tokens), 40, seed),
                             generate(local, 2, local_logits, len(tokens), 40, seed),
                             f"seed {seed}")

    def test_a_damaged_or_truncated_blob_is_refused_by_its_checksum_or_length(self):
        _, blob = blob_for(self.net, "some prompt")
        damaged = bytearray(blob)
        damaged[kvwire.HEADER.size + 100] ^= 0x40
        with self.assertRaisesRegex(kvwire.WireError, "checksum mismatch"):
            kvwire.decode(bytes(damaged))
        with self.assertRaisesRegex(kvwire.WireError, "its header says"):
            kvwire.decode(blob[:-5])
        with self.assertRaisesRegex(kvwire.WireError, "not a KV blob"):
            kvwire.decode(b"XXXX" + blob[4:])

    def test_a_blob_from_another_model_or_prompt_is_refused_naming_what_differs(self):
        tokens, blob = blob_for(self.net, "some prompt")
        other = model.ShardedTransformer(
            model.Config(layers=2, d_model=64, heads=4, d_ff=128, context=256, seed=4))
        with self.assertRaisesRegex(kvwire.WireError, "seed 3 there, 4 here"):
            kvwire.decode(blob, kvwire.model_fields(other), tokens)
        with self.assertRaisesRegex(kvwire.WireError, "another prompt"):
            kvwire.decode(blob, kvwire.model_fields(self.net), model.encode("other prompt"))


class ShardTest(unittest.TestCase):
    """A tensor-parallel group's shards, built in one process: rank r of a group of N holds
    heads/N heads, so its blob is rank r's alone and only rank r of another group of N may
    import it."""

    def test_a_shard_carries_its_rank_and_is_imported_only_by_the_same_rank(self):
        tokens = model.encode("one shard per rank")
        shards = [model.ShardedTransformer(SMALL, rank, 2, max_batch=2) for rank in range(2)]
        blobs = []
        for net in shards:
            net.prefill(0, tokens, want_logits=False)  # no all-reduce: the KV is per rank
            blobs.append(kvwire.encode(kvwire.model_fields(net), tokens,
                                       net.export_kv(0, len(tokens)), torch.zeros(0)))
        # Half the heads: half the layer bytes of a group of one's blob.
        whole = blob_for(model.ShardedTransformer(SMALL, max_batch=2), "one shard per rank")[1]
        layer_bytes = (len(whole) - kvwire.HEADER.size - 4 * len(tokens) -
                       4 * len(model.GENERATABLE) - 4)
        self.assertEqual(len(blobs[0]), kvwire.HEADER.size + 4 * len(tokens) +
                         layer_bytes // 2 + 4)
        for rank, blob in enumerate(blobs):
            fields = kvwire.model_fields(shards[rank])
            _, layers, logits = kvwire.decode(blob, fields, tokens)
            self.assertEqual(tuple(layers[0][0].shape), (2, len(tokens), SMALL.d_model // 4))
            self.assertEqual(logits.numel(), 0)
            self.assertTrue(torch.equal(layers[1][1],
                                        shards[rank].export_kv(0, len(tokens))[1][1]))
        with self.assertRaisesRegex(kvwire.WireError, "rank 1 of a group of 2; this process "
                                    "is rank 0 of 2"):
            kvwire.decode(blobs[1], kvwire.model_fields(shards[0]), tokens)
        with self.assertRaisesRegex(kvwire.WireError, "rank 0 of a group of 2; this process "
                                    "is rank 0 of 1"):
            kvwire.decode(blobs[0], kvwire.model_fields(model.ShardedTransformer(SMALL)), tokens)

    def test_another_wire_version_or_an_impossible_rank_is_refused_clearly(self):
        _, blob = blob_for(model.ShardedTransformer(SMALL, max_batch=2), "version")
        v1 = bytearray(blob)
        v1[4:6] = (1).to_bytes(2, "little")
        with self.assertRaisesRegex(kvwire.WireError, "version 1; this server reads version 2 "
                                    r"\(run the same examples/serve/server.py"):
            kvwire.decode(bytes(v1))
        bad_rank = bytearray(blob)
        bad_rank[44:46] = (3).to_bytes(2, "little")  # the rank field: rank 3 of a group of 1
        with self.assertRaisesRegex(kvwire.WireError, "rank 3 of a group of 1"):
            kvwire.decode(bytes(bad_rank))


class HandleStoreTest(unittest.TestCase):
    def test_a_blob_is_taken_once_and_an_unpulled_one_expires(self):
        now = [100.0]
        store = disagg.HandleStore(hold_s=2.0, clock=lambda: now[0])
        a, b = store.put(b"a" * 10), store.put(b"b" * 5)
        self.assertEqual(store.held(), (2, 15))
        self.assertEqual(store.take(a), b"a" * 10)
        self.assertIsNone(store.take(a))
        now[0] += 2.0
        self.assertEqual(store.held(), (0, 0))
        self.assertEqual(store.expired, 1)
        self.assertIsNone(store.take(b))


class KvServerTest(unittest.TestCase):
    def setUp(self):
        self.store = disagg.HandleStore(hold_s=30.0)
        self.counters = disagg.Counters()
        self.server = disagg.KvServer(self.store, self.counters, "127.0.0.1", 0, timeout_s=0.5)
        self.server.start()
        self.addCleanup(self.server.stop)

    def test_a_pull_gets_the_blob_and_frees_it(self):
        handle = self.store.put(b"x" * 1000)
        blob = disagg.pull("127.0.0.1", self.server.port, handle, time.monotonic() + 10)
        self.assertEqual(blob, b"x" * 1000)
        self.assertEqual(self.store.held(), (0, 0))
        with self.assertRaisesRegex(disagg.HandoffFailed, "unknown or expired"):
            disagg.pull("127.0.0.1", self.server.port, handle, time.monotonic() + 10)

    def test_a_puller_that_dies_mid_transfer_leaves_nothing_held(self):
        # 32 MB: more than loopback buffers hold, so the sender is mid-blob when it goes.
        handle = self.store.put(b"k" * (32 << 20))
        with socket.create_connection(("127.0.0.1", self.server.port)) as s:
            s.sendall(b"GET %s\n" % handle.encode())
            self.assertTrue(s.recv(4096))
        wait_for(lambda: self.counters.snapshot().get("pullsBroken") == 1,
                 "the sender to see the puller gone")
        self.assertEqual(self.store.held(), (0, 0))
        self.assertNotIn("pulls", self.counters.snapshot())

    def test_a_puller_that_stalls_is_given_up_after_the_timeout(self):
        handle = self.store.put(b"k" * (32 << 20))
        s = socket.create_connection(("127.0.0.1", self.server.port))
        self.addCleanup(s.close)
        s.sendall(b"GET %s\n" % handle.encode())
        wait_for(lambda: self.counters.snapshot().get("pullsBroken") == 1,
                 "the sender to time out on a puller that reads nothing")
        self.assertEqual(self.store.held(), (0, 0))


class RemotePrefillFailureTest(unittest.TestCase):
    def test_a_prefill_replica_that_accepts_and_never_answers_times_out(self):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        self.addCleanup(listener.close)
        held = []
        threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
        self.addCleanup(lambda: [conn.close() for conn, _ in held])
        started = time.monotonic()
        with self.assertRaises(disagg.HandoffFailed) as caught:
            disagg.remote_prefill(f"127.0.0.1:{listener.getsockname()[1]}", "p", "m", 0.3,
                                  None, None)
        self.assertEqual(caught.exception.reason, "timeout")
        self.assertLess(time.monotonic() - started, 10)

    def test_nothing_listening_and_a_bad_address_fail_with_their_reason(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # closed again: nothing listens there
        with self.assertRaises(disagg.HandoffFailed) as caught:
            disagg.remote_prefill(f"127.0.0.1:{port}", "p", "m", 2, None, None)
        self.assertEqual(caught.exception.reason, "unreachable")
        with self.assertRaises(disagg.HandoffFailed) as caught:
            disagg.remote_prefill("no-port-here", "p", "m", 2, None, None)
        self.assertEqual(caught.exception.reason, "refused")


if __name__ == "__main__":
    unittest.main()
