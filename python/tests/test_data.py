import json
import os
import random
import unittest

from tessera import data

# Property tests draw a fresh seed each run; set TESSERA_TEST_SEED to replay a failure.
BASE_SEED = int(os.environ.get("TESSERA_TEST_SEED", random.randrange(1 << 31)))
TRIALS = 300


def make_group(n, world, batch, policy, seed, state):
    dataset = [f"s{i}" for i in range(n)]  # samples differ from indices; pads are None
    group = [
        data.ShardedBatches(dataset, batch_size=batch, rank=r, world_size=world, seed=seed,
                            last_batch=policy, pad_value=None, num_epochs=1)
        for r in range(world)
    ]
    if state is not None:
        for it in group:
            it.load_state_dict(state)
    return group


def simulate(rng, policy):
    """Runs epoch 0 of a random dataset through attempts whose world and batch sizes change
    at random restart points. Returns what every step handed out, in global order."""
    n = rng.randint(1, 120)
    seed = rng.randrange(1000)
    state = None
    order = []  # dataset indices in the order the group consumed them
    pads = []  # (pads in the step, global batch size) for each step that padded
    attempts = []
    raised = None
    while raised is None:
        while True:
            world, batch = rng.randint(1, 5), rng.randint(1, 9)
            at_epoch_start = state is None or state["offset"] == 0
            if not (policy == "drop" and at_epoch_start and world * batch > n):
                break
        group = make_group(n, world, batch, policy, seed, state)
        attempts.append((world, batch))
        steps = rng.randint(1, 4)
        finished = False
        for _ in range(steps):
            outcomes = []
            for it in group:  # every rank calls next(), as in training, whatever happens
                try:
                    outcomes.append(next(it))
                except (StopIteration, data.RaggedBatchError) as e:
                    outcomes.append(e)
            kinds = {type(o) for o in outcomes}
            assert len(kinds) == 1, outcomes  # all ranks agree
            if kinds == {StopIteration}:
                finished = True
                break
            if kinds == {data.RaggedBatchError}:
                raised = outcomes[0]
                break
            batches = outcomes
            for b in batches:
                real = len(b.samples) - b.num_pad
                assert len(b.samples) == batch and len(b.indices) == real
                assert b.samples[:real] == [f"s{i}" for i in b.indices]
                assert b.samples[real:] == [None] * b.num_pad
                assert b.epoch == 0 and b.offset == batches[0].offset
                order.extend(b.indices)
            step_pads = sum(b.num_pad for b in batches)
            if step_pads:
                pads.append((step_pads, world * batch))
        states = [it.state_dict() for it in group]
        assert all(s == states[0] for s in states), states
        state = json.loads(json.dumps(states[0]))  # what a checkpoint would carry
        if finished:
            break
    return n, seed, order, pads, state, raised, attempts


class ShardedBatchesPropertyTest(unittest.TestCase):
    def check_policy(self, policy):
        for trial in range(TRIALS):
            seed = BASE_SEED + trial
            rng = random.Random(seed)
            n, data_seed, order, pads, state, raised, attempts = simulate(rng, policy)
            msg = f"replay with TESSERA_TEST_SEED={seed} (trial seed), attempts={attempts}"
            # Every sample handed out follows the epoch's permutation: none twice, none skipped.
            self.assertEqual(order, data.permutation(n, data_seed, 0)[: len(order)], msg)
            if policy == "raise":
                if raised is None:
                    self.assertEqual(len(order), n, msg)
                else:
                    remaining = n - len(order)
                    world, batch = attempts[-1]
                    self.assertTrue(0 < remaining < world * batch, msg)
                    text = str(raised)
                    for part in ("last_batch='raise'", f"{remaining} samples left",
                                 f"of {n}", f"global batch of {world * batch}"):
                        self.assertIn(part, text, msg)
            else:
                self.assertIsNone(raised, msg)
            if policy == "pad":
                self.assertEqual(len(order), n, msg)
                # At most one padded step, the epoch's last, and it holds at least one sample.
                self.assertLessEqual(len(pads), 1, msg)
                if pads:
                    step_pads, global_batch = pads[0]
                    self.assertLess(step_pads, global_batch, msg)
            if policy == "drop":
                self.assertEqual(len(order) + state["dropped_samples"], n, msg)
                self.assertEqual(pads, [], msg)

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

    def test_state_from_another_dataset_is_rejected(self):
        state = data.ShardedBatches(range(10), batch_size=2, seed=1).state_dict()
        for kwargs in ({"dataset": range(11)}, {"seed": 2}, {"shuffle": False}):
            args = {"dataset": range(10), "batch_size": 2, "seed": 1, **kwargs}
            with self.assertRaises(ValueError, msg=kwargs):
                data.ShardedBatches(**args).load_state_dict(state)
        with self.assertRaises(ValueError):
            data.ShardedBatches(range(10), batch_size=2, seed=1).load_state_dict(
                {**state, "offset": 11})

    def test_bad_arguments(self):
        for kwargs in ({"batch_size": 0}, {"world_size": 0}, {"rank": 2, "world_size": 2},
                       {"last_batch": "keep"}, {"dataset": []}, {"rank": -1}):
            args = {"dataset": range(4), "batch_size": 1, **kwargs}
            with self.assertRaises(ValueError, msg=kwargs):
                data.ShardedBatches(**args)


if __name__ == "__main__":
    unittest.main()
