import json
import os
import random
import unittest

from tessera import data

# Property tests draw a fresh seed each run; set TESSERA_TEST_SEED to replay a failure.
BASE_SEED = int(os.environ.get("TESSERA_TEST_SEED", random.randrange(1 << 31)))
TRIALS = int(os.environ.get("TESSERA_TEST_TRIALS", 300))


def make_group(n, world, batch, policy, seed, num_epochs, state):
    dataset = [f"s{i}" for i in range(n)]  # samples differ from indices; pads are None
    group = [
        data.ShardedBatches(dataset, batch_size=batch, rank=r, world_size=world, seed=seed,
                            last_batch=policy, pad_value=None, num_epochs=num_epochs)
        for r in range(world)
    ]
    if state is not None:
        for it in group:
            it.load_state_dict(state)
    return group


def group_step(group, batch):
    """One global step: every rank calls next(), as in training, whatever happens. Returns the
    batches, or the exception every rank raised (they must agree)."""
    outcomes = []
    for it in group:
        try:
            outcomes.append(next(it))
        except (StopIteration, data.RaggedBatchError) as e:
            outcomes.append(e)
    kinds = {type(o) for o in outcomes}
    assert len(kinds) == 1, f"ranks disagree: {outcomes}"
    if kinds <= {StopIteration, data.RaggedBatchError}:
        return outcomes[0]
    for b in outcomes:
        real = len(b.samples) - b.num_pad
        assert len(b.samples) == batch and len(b.indices) == real, b
        assert b.samples[:real] == [f"s{i}" for i in b.indices], b
        assert b.samples[real:] == [None] * b.num_pad, b
        assert (b.epoch, b.offset) == (outcomes[0].epoch, outcomes[0].offset), outcomes
    return outcomes


class Run:
    """What a simulated training run consumed, counting only steps a checkpoint kept."""

    def __init__(self, n, seed, num_epochs):
        self.n, self.seed, self.num_epochs = n, seed, num_epochs
        self.order = {}  # epoch -> dataset indices in the order the group consumed them
        self.pads = {}  # epoch -> [(pads in the step, global batch, offset)] of padded steps
        self.attempts = []  # (world, batch, steps kept, steps lost)
        self.raised = None
        self.state = None


def simulate(rng, policy):
    """Runs a random dataset through attempts whose world and batch sizes change at random
    restart points. Each attempt takes some steps, checkpoints the position, takes a few more
    steps that are lost (the crash comes before the next checkpoint), and the next attempt
    resumes from the checkpoint. Ends when the epochs are done or 'raise' raised."""
    run = Run(n=rng.randint(1, 120), seed=rng.randrange(1000), num_epochs=rng.randint(1, 3))
    while True:
        while True:
            world, batch = rng.randint(1, 5), rng.randint(1, 9)
            # 'drop' with a global batch larger than the dataset would drop every epoch whole
            # (a ValueError, tested on its own).
            if not (policy == "drop" and world * batch > run.n):
                break
        group = make_group(run.n, world, batch, policy, run.seed, run.num_epochs, run.state)
        kept, lost = rng.randint(1, 4), rng.randint(0, 3)
        run.attempts.append((world, batch, kept, lost))
        done = False
        for _ in range(kept):
            out = group_step(group, batch)
            if isinstance(out, StopIteration):
                done = True
                break
            if isinstance(out, data.RaggedBatchError):
                run.raised, done = out, True
                break
            epoch = out[0].epoch
            for b in out:
                run.order.setdefault(epoch, []).extend(b.indices)
            step_pads = sum(b.num_pad for b in out)
            if step_pads:
                run.pads.setdefault(epoch, []).append((step_pads, world * batch, out[0].offset))
        states = [it.state_dict() for it in group]
        assert all(st == states[0] for st in states), states
        run.state = json.loads(json.dumps(states[0]))  # what the checkpoint carries
        if done:
            return run
        for _ in range(lost):  # work after the checkpoint, thrown away by the crash
            if not isinstance(group_step(group, batch), list):
                break


class ShardedBatchesPropertyTest(unittest.TestCase):
    def check_policy(self, policy):
        for trial in range(TRIALS):
            seed = BASE_SEED + trial
            try:
                run = simulate(random.Random(seed), policy)
            except AssertionError as e:
                raise AssertionError(f"replay with TESSERA_TEST_SEED={seed}: {e}") from e
            msg = (f"replay with TESSERA_TEST_SEED={seed} (trial seed), n={run.n}, "
                   f"epochs={run.num_epochs}, attempts (world, batch, kept, lost)={run.attempts}")
            epochs = sorted(run.order)
            self.assertEqual(epochs, list(range(len(epochs))), msg)
            for epoch, order in run.order.items():
                # Every sample handed out follows the epoch's permutation: none twice, none
                # skipped, across restarts at any world and batch size.
                self.assertEqual(order, data.permutation(run.n, run.seed, epoch)[: len(order)],
                                 f"epoch {epoch}: {msg}")
            largest_global_batch = max(w * b for w, b, _, _ in run.attempts)
            if policy == "raise":
                if run.raised is None:
                    self.assertEqual(len(epochs), run.num_epochs, msg)
                    self.assertTrue(all(len(o) == run.n for o in run.order.values()), msg)
                else:
                    # The position stays where the ragged tail starts (maybe at offset 0 of an
                    # epoch, when the global batch is larger than the dataset).
                    raised_epoch, offset = run.state["epoch"], run.state["offset"]
                    self.assertEqual(len(run.order.get(raised_epoch, [])), offset, msg)
                    remaining = run.n - offset
                    world, batch = run.attempts[-1][:2]
                    self.assertTrue(0 < remaining < world * batch, msg)
                    for part in ("last_batch='raise'", f"{remaining} samples left",
                                 f"of {run.n}", f"global batch of {world * batch}"):
                        self.assertIn(part, str(run.raised), msg)
                    for epoch in range(raised_epoch):
                        self.assertEqual(len(run.order[epoch]), run.n, msg)
            else:
                self.assertIsNone(run.raised, msg)
                self.assertEqual(len(epochs), run.num_epochs, msg)
            if policy == "pad":
                for epoch, order in run.order.items():
                    self.assertEqual(len(order), run.n, msg)
                    # At most one padded step, the epoch's last, and it holds >= 1 sample.
                    padded = run.pads.get(epoch, [])
                    self.assertLessEqual(len(padded), 1, msg)
                    for step_pads, global_batch, offset in padded:
                        self.assertLess(step_pads, global_batch, msg)
                        self.assertEqual(offset + global_batch - step_pads, run.n, msg)
            else:
                self.assertEqual(run.pads, {}, msg)
            if policy == "drop":
                dropped = [run.n - len(o) for o in run.order.values()]
                self.assertTrue(all(0 <= d < largest_global_batch for d in dropped), msg)
                self.assertEqual(sum(dropped), run.state["dropped_samples"], msg)

    def test_drop_every_sample_once_or_counted_as_dropped(self):
        self.check_policy("drop")

    def test_pad_every_sample_once_and_pads_marked(self):
        self.check_policy("pad")

    def test_raise_at_the_ragged_tail(self):
        self.check_policy("raise")


class ShardedBatchesTest(unittest.TestCase):
    def test_single_rank_defaults(self):
        it = data.ShardedBatches(list(range(10)), batch_size=4, shuffle=False, num_epochs=2)
        got = [(b.epoch, b.samples) for b in it]
        self.assertEqual(got, [(0, [0, 1, 2, 3]), (0, [4, 5, 6, 7]),
                               (1, [0, 1, 2, 3]), (1, [4, 5, 6, 7])])
        self.assertEqual((it.dropped_samples, it.last_dropped), (4, 2))

    def test_ranks_take_contiguous_parts_of_each_global_step(self):
        its = [data.ShardedBatches(range(12), batch_size=2, rank=r, world_size=3, shuffle=False)
               for r in range(3)]
        self.assertEqual([next(it).samples for it in its], [[0, 1], [2, 3], [4, 5]])
        self.assertEqual([next(it).samples for it in its], [[6, 7], [8, 9], [10, 11]])
        self.assertEqual({(s["epoch"], s["offset"]) for s in (it.state_dict() for it in its)},
                         {(1, 0)})

    def test_pad_when_the_world_is_larger_than_the_data(self):
        its = [data.ShardedBatches(range(3), batch_size=2, rank=r, world_size=3, shuffle=False,
                                   last_batch="pad", pad_value=-1, num_epochs=1)
               for r in range(3)]
        got = [next(it) for it in its]
        self.assertEqual([b.samples for b in got], [[0, 1], [2, -1], [-1, -1]])
        self.assertEqual([b.num_pad for b in got], [0, 1, 2])
        for it in its:
            self.assertRaises(StopIteration, next, it)

    def test_raise_leaves_the_position_unchanged(self):
        it = data.ShardedBatches(range(5), batch_size=2, shuffle=False, last_batch="raise")
        next(it), next(it)
        before = it.state_dict()
        for _ in range(2):
            with self.assertRaisesRegex(data.RaggedBatchError, r"1 samples left at offset 4"):
                next(it)
        self.assertEqual(it.state_dict(), before)

    def test_drop_everything_is_an_error_not_an_endless_loop(self):
        it = data.ShardedBatches(range(3), batch_size=2, world_size=2, last_batch="drop")
        with self.assertRaisesRegex(ValueError, "drops every sample"):
            next(it)

    def test_shuffle_is_deterministic_per_seed_and_epoch(self):
        a = data.permutation(100, seed=7, epoch=0)
        self.assertEqual(a, data.permutation(100, seed=7, epoch=0))
        self.assertEqual(sorted(a), list(range(100)))
        self.assertNotEqual(a, data.permutation(100, seed=7, epoch=1))
        self.assertNotEqual(a, data.permutation(100, seed=8, epoch=0))
        it = data.ShardedBatches(range(100), batch_size=10, seed=7, num_epochs=2)
        epochs = [[], []]
        for b in it:
            epochs[b.epoch].extend(b.indices)
        self.assertEqual(epochs, [a, data.permutation(100, seed=7, epoch=1)])

    def test_restore_continues_across_epochs(self):
        it = data.ShardedBatches(range(10), batch_size=3, seed=1, num_epochs=3)
        first = [next(it).indices for _ in range(4)]  # 3 in epoch 0 (1 dropped), 1 in epoch 1
        restored = data.ShardedBatches(range(10), batch_size=3, seed=1, num_epochs=3)
        restored.load_state_dict(it.state_dict())
        self.assertEqual([b.indices for b in restored], [b.indices for b in it])
        self.assertEqual(restored.dropped_samples, 3)
        self.assertEqual(len(first), 4)

    def test_a_finished_epoch_state_starts_the_next_epoch(self):
        # offset == num_samples is accepted (a hand-written or foreign state); it must not give
        # a batch of pads only ('pad') or an error with 0 samples left ('raise').
        state = {**data.ShardedBatches(range(6), batch_size=2).state_dict(), "offset": 6}
        for policy in ("pad", "raise", "drop"):
            it = data.ShardedBatches(range(6), batch_size=2, shuffle=False, last_batch=policy)
            it.load_state_dict({**state, "shuffle": False})
            b = next(it)
            self.assertEqual((b.epoch, b.offset, b.samples, b.num_pad), (1, 0, [0, 1], 0), policy)

    def test_state_from_another_dataset_is_rejected(self):
        state = data.ShardedBatches(range(10), batch_size=2, seed=1).state_dict()
        for kwargs in ({"dataset": range(11)}, {"seed": 2}, {"shuffle": False}):
            args = {"dataset": range(10), "batch_size": 2, "seed": 1, **kwargs}
            with self.assertRaises(ValueError, msg=kwargs):
                data.ShardedBatches(**args).load_state_dict(state)
        for bad in ({"offset": 11}, {"offset": -1}, {"epoch": -1}, {"epoch": True},
                    {"offset": 2.0}, {"dropped_samples": -3}, {"version": 2}, {"seed": None}):
            with self.assertRaises(ValueError, msg=bad):
                data.ShardedBatches(range(10), batch_size=2, seed=1).load_state_dict(
                    {**state, **bad})
        missing = dict(state)
        del missing["offset"]
        with self.assertRaises(ValueError):
            data.ShardedBatches(range(10), batch_size=2, seed=1).load_state_dict(missing)

    def test_bad_arguments(self):
        for kwargs in ({"batch_size": 0}, {"world_size": 0}, {"rank": 2, "world_size": 2},
                       {"last_batch": "keep"}, {"dataset": []}, {"rank": -1}):
            args = {"dataset": range(4), "batch_size": 1, **kwargs}
            with self.assertRaises(ValueError, msg=kwargs):
                data.ShardedBatches(**args)


if __name__ == "__main__":
    unittest.main()
