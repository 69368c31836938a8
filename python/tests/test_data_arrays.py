"""tessera.data over NumPy arrays (ArrayBatches), the background Prefetch and to_torch().

ArrayBatches is checked against ShardedBatches over range(n), which test_data.py checks for
exactly-once resume at any world size, so the positions agree by construction and the rows
are checked against the arrays themselves.
"""
import os
import random
import threading
import time
import unittest

from tessera import data

try:
    import numpy as np
except ImportError:  # scripts/test.sh runs Debian's python3, which has python3-numpy
    np = None
try:
    import torch
except ImportError:
    torch = None

BASE_SEED = int(os.environ.get("TESSERA_TEST_SEED", random.randrange(1 << 31)))


def wait_for(what, fn, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.005)
    raise AssertionError("timed out waiting for " + what)


@unittest.skipUnless(np is not None, "needs numpy (Debian: python3-numpy)")
class ArrayBatchesTest(unittest.TestCase):
    def arrays(self, n):
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        y = np.arange(n, dtype=np.int64) * 10
        return x, y

    def test_rows_match_the_index_order_for_every_policy(self):
        rng = random.Random(BASE_SEED)
        for trial in range(60):
            n, world, batch = rng.randint(1, 40), rng.randint(1, 4), rng.randint(1, 6)
            policy = rng.choice(data.LAST_BATCH_POLICIES)
            seed = rng.randrange(1000)
            msg = f"seed {BASE_SEED} trial {trial}: n={n} world={world} batch={batch} {policy}"
            x, y = self.arrays(n)
            for rank in range(world):
                kw = dict(batch_size=batch, rank=rank, world_size=world, seed=seed,
                          last_batch=policy, num_epochs=2)
                plain = data.ShardedBatches(range(n), **kw)
                arrays = data.ArrayBatches({"x": x, "y": y}, pad_value=-1, **kw)
                while True:
                    try:
                        want = next(plain)
                    except (StopIteration, ValueError, data.RaggedBatchError) as e:
                        with self.assertRaises(type(e), msg=msg):
                            next(arrays)
                        break
                    got = next(arrays)
                    self.assertEqual(got.indices.tolist(), want.indices, msg)
                    self.assertEqual((got.num_pad, got.epoch, got.offset),
                                     (want.num_pad, want.epoch, want.offset), msg)
                    real = batch - want.num_pad
                    self.assertEqual(got.data["x"].shape, (batch, 3), msg)
                    np.testing.assert_array_equal(got.data["x"][:real], x[want.indices])
                    np.testing.assert_array_equal(got.data["y"][:real], y[want.indices])
                    self.assertTrue((got.data["y"][real:] == -1).all(), msg)
                    self.assertEqual(got.mask.tolist(), [True] * real + [False] * want.num_pad)
                    self.assertEqual(arrays.state_dict(), plain.state_dict(), msg)

    def test_one_array_and_tuples_keep_their_form(self):
        x, y = self.arrays(8)
        one = next(data.ArrayBatches(x, batch_size=4, shuffle=False))
        self.assertIsInstance(one.data, np.ndarray)
        np.testing.assert_array_equal(one.data, x[:4])
        pair = next(data.ArrayBatches((x, y), batch_size=4, shuffle=False))
        self.assertIsInstance(pair.data, tuple)
        np.testing.assert_array_equal(pair.data[1], y[:4])
        self.assertEqual(pair.data[0].dtype, np.float32)

    def test_resume_at_another_world_size_sees_each_row_once(self):
        n = 48
        x = np.arange(n, dtype=np.int32)
        first = [data.ArrayBatches(x, batch_size=3, rank=r, world_size=4, seed=7)
                 for r in range(4)]
        seen = []
        for _ in range(2):
            for it in first:
                seen.extend(next(it).data.tolist())
        state = first[0].state_dict()
        second = [data.ArrayBatches(x, batch_size=2, rank=r, world_size=3, seed=7)
                  for r in range(3)]
        for it in second:
            it.load_state_dict(state)
        while len(seen) < n:
            for it in second:
                seen.extend(next(it).data.tolist())
        self.assertEqual(sorted(seen), list(range(n)))

    def test_bad_arrays_are_refused_naming_the_problem(self):
        x, y = self.arrays(5)
        with self.assertRaisesRegex(ValueError, r"first axes differ in length \[4, 5\]"):
            data.ArrayBatches({"x": x, "y": y[:4]}, batch_size=1)
        with self.assertRaisesRegex(TypeError, r"arrays\[0\]: a numpy.ndarray, not list"):
            data.ArrayBatches([1, 2, 3], batch_size=1)
        with self.assertRaisesRegex(ValueError, "scalar"):
            data.ArrayBatches(np.array(1.0), batch_size=1)
        with self.assertRaisesRegex(ValueError, "not none"):
            data.ArrayBatches({}, batch_size=1)


class Failing:
    """A source that yields 0, 1, 2 and then raises."""

    def __init__(self):
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i == 3:
            raise KeyError("sample 3 is corrupt")
        self.i += 1
        return self.i - 1


class PrefetchTest(unittest.TestCase):
    def test_same_items_and_exact_resume_whatever_was_prefetched(self):
        kw = dict(batch_size=2, world_size=2, rank=1, seed=3, last_batch="pad", num_epochs=3)
        plain = list(data.ShardedBatches(range(11), **kw))
        with data.ShardedBatches(range(11), **kw).prefetch(depth=4) as p:
            taken = [next(p) for _ in range(3)]
            wait_for("the queue to fill", p._queue.full)  # produced well past what was taken
            state = p.state_dict()
        self.assertEqual(taken, plain[:3])
        resumed = data.ShardedBatches(range(11), **kw)
        resumed.load_state_dict(state)
        rest = list(data.Prefetch(resumed, depth=2))
        self.assertEqual(taken + rest, plain)
        loaded = data.Prefetch(data.ShardedBatches(range(11), **kw))
        loaded.load_state_dict(state)  # through the Prefetch, before iteration
        self.assertEqual(list(loaded), plain[3:])
        with self.assertRaisesRegex(RuntimeError, "iteration has started"):
            loaded.load_state_dict(state)

    def test_a_source_error_comes_after_the_items_before_it(self):
        p = data.Prefetch(Failing(), depth=8)
        self.assertEqual([next(p), next(p), next(p)], [0, 1, 2])
        for _ in range(2):  # and again on every later call
            with self.assertRaisesRegex(KeyError, "sample 3 is corrupt"):
                next(p)
        p.close()
        with self.assertRaises(TypeError):  # Failing has no position to report
            p.state_dict()

    def test_ragged_raise_keeps_the_position_of_the_last_batch_taken(self):
        it = data.ShardedBatches(range(5), batch_size=2, last_batch="raise", shuffle=False)
        p = it.prefetch()
        self.assertEqual([next(p).indices, next(p).indices], [[0, 1], [2, 3]])
        with self.assertRaises(data.RaggedBatchError):
            next(p)
        self.assertEqual((p.state_dict()["epoch"], p.state_dict()["offset"]), (0, 4))

    def test_close_stops_a_blocked_producer_and_next_then_refuses(self):
        produced = []

        def endless():
            while True:
                produced.append(len(produced))
                yield produced[-1]
        p = data.Prefetch(endless(), depth=2)
        self.assertEqual(next(p), 0)
        wait_for("the queue to fill", p._queue.full)
        thread = p._thread
        p.close()
        self.assertFalse(thread.is_alive())
        self.assertLessEqual(len(produced), 5)  # bounded: depth + one taken + one in hand
        with self.assertRaisesRegex(RuntimeError, "closed"):
            next(p)
        never = data.Prefetch(endless())
        never.close()  # before it started: nothing to join
        with self.assertRaisesRegex(RuntimeError, "closed"):
            next(never)
        with self.assertRaisesRegex(ValueError, "depth"):
            data.Prefetch([], depth=0)
        self.assertEqual(list(data.Prefetch([])), [])

    def test_the_consumer_runs_while_the_next_batch_is_produced(self):
        started = threading.Event()
        release = threading.Event()

        def source():
            yield "first"
            started.set()
            release.wait(30)
            yield "second"
        p = data.Prefetch(source(), depth=1)
        self.assertEqual(next(p), "first")
        self.assertTrue(started.wait(30))  # produced ahead, while the consumer holds "first"
        release.set()
        self.assertEqual(next(p), "second")
        p.close()


@unittest.skipUnless(np is not None and torch is not None, "needs numpy and torch")
class ToTorchTest(unittest.TestCase):
    def test_batches_become_tensors_without_a_copy(self):
        x = np.arange(12, dtype=np.float32).reshape(6, 2)
        b = next(data.ArrayBatches({"x": x}, batch_size=4, shuffle=False, last_batch="pad"))
        t = b.to_torch()
        self.assertIsInstance(t.data["x"], torch.Tensor)
        self.assertEqual(t.data["x"].dtype, torch.float32)
        self.assertEqual(t.mask.dtype, torch.bool)
        self.assertEqual(t.indices.tolist(), [0, 1, 2, 3])
        b.data["x"][0, 0] = 42.0  # shares memory with the batch's array
        self.assertEqual(float(t.data["x"][0, 0]), 42.0)
        self.assertEqual(data.to_torch(("a", np.zeros(2)))[0], "a")


if __name__ == "__main__":
    unittest.main()
