"""Per-rank batches over a dataset whose position survives restarts at any world size.

Every epoch has a permutation of the dataset's indices fixed by (seed, epoch). The position is a
global sample offset into that permutation, the same on every rank: each global step consumes
world_size * batch_size samples, and rank r takes the r-th contiguous batch_size of them. Since
the offset does not depend on the world size, a state_dict() saved at world size w can be loaded
at world size w': the new group continues from the same offset, so within an epoch no sample is
seen twice and none is skipped.

The last global step of an epoch may be ragged (fewer than world_size * batch_size samples
remain). The policy for it is explicit:
  'drop'  - skip the remaining samples and start the next epoch; they are counted in
            `dropped_samples` (persisted in the state dict) and `last_dropped`. A dataset
            smaller than one global batch would be dropped whole: next() raises ValueError.
  'pad'   - every rank gets a full batch; missing samples are `pad_value` and counted in the
            batch's `num_pad` (pads always sit at the end of `samples`).
  'raise' - next() raises RaggedBatchError, leaving the position unchanged.

Thread-safety: a ShardedBatches is not thread-safe; use one per consumer.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Iterator, Optional, Sequence

LAST_BATCH_POLICIES = ("drop", "pad", "raise")
_STATE_VERSION = 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class RaggedBatchError(RuntimeError):
    """Raised by last_batch='raise' when an epoch's last global step would be short."""


@dataclasses.dataclass(frozen=True)
class Batch:
    samples: list  # batch_size items; with 'pad', the last num_pad of them are pad_value
    indices: list  # dataset index of each real sample (len(samples) - num_pad items)
    num_pad: int
    epoch: int
    offset: int  # global offset of the step this batch belongs to, before it was taken


def permutation(num_samples: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The order of dataset indices in `epoch`. Depends only on its arguments (not on
    PYTHONHASHSEED or the Python process), so every rank and every attempt agree."""
    order = list(range(num_samples))
    if shuffle:
        # A str seed is hashed with SHA-512 by random.seed(version=2): stable across runs.
        random.Random(f"tessera.data/{seed}/{epoch}").shuffle(order)
    return order


class ShardedBatches(Iterator[Batch]):
    """Iterator over this rank's batches of `dataset` (any sequence: len() and [i]).

    num_epochs=None iterates forever; otherwise StopIteration after that many epochs (counted
    from epoch 0, so a restored position keeps its place in the count).
    """

    def __init__(
        self,
        dataset: Sequence[Any],
        *,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        last_batch: str = "drop",
        pad_value: Any = None,
        num_epochs: Optional[int] = None,
    ) -> None:
        if last_batch not in LAST_BATCH_POLICIES:
            raise ValueError(f"last_batch must be one of {LAST_BATCH_POLICIES}, got {last_batch!r}")
        for name, value, minimum in (("batch_size", batch_size, 1), ("world_size", world_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
        if num_epochs is not None and num_epochs < 0:
            raise ValueError(f"num_epochs must be None or >= 0, got {num_epochs}")
        if len(dataset) == 0:
            raise ValueError("dataset is empty")
        self._dataset = dataset
        self._n = len(dataset)
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle = shuffle
        self.last_batch = last_batch
        self.pad_value = pad_value
        self.num_epochs = num_epochs
        self.epoch = 0
        self.offset = 0  # global samples of `epoch` already consumed by all ranks together
        self.dropped_samples = 0  # total over all epochs, all attempts
        self.last_dropped = 0  # dropped at the end of the most recently finished epoch
        self._order: Optional[list[int]] = None
        self._order_epoch = -1

    @property
    def global_batch_size(self) -> int:
        return self.world_size * self.batch_size

    def _epoch_order(self) -> list[int]:
        if self._order_epoch != self.epoch:
            self._order = permutation(self._n, self.seed, self.epoch, self.shuffle)
            self._order_epoch = self.epoch
        return self._order  # type: ignore[return-value]

    def _next_epoch(self) -> None:
        self.epoch += 1
        self.offset = 0

    def __iter__(self) -> "ShardedBatches":
        return self

    def __next__(self) -> Batch:
        g = self.global_batch_size
        while True:
            if self.num_epochs is not None and self.epoch >= self.num_epochs:
                raise StopIteration
            remaining = self._n - self.offset
            if remaining >= g or self.last_batch == "pad":
                break
            if self.last_batch == "raise":
                raise RaggedBatchError(
                    f"last_batch='raise': epoch {self.epoch} has {remaining} samples left at "
                    f"offset {self.offset} of {self._n}, fewer than one global batch of {g} "
                    f"(world_size {self.world_size} x batch_size {self.batch_size})"
                )
            if self.offset == 0:
                # Every epoch would be dropped whole and iteration would never yield.
                raise ValueError(
                    f"last_batch='drop' with {self._n} samples and a global batch of {g} "
                    f"(world_size {self.world_size} x batch_size {self.batch_size}) "
                    "drops every sample"
                )
            self.dropped_samples += remaining
            self.last_dropped = remaining
            self._next_epoch()
        order = self._epoch_order()
        start = self.offset + self.rank * self.batch_size
        indices = order[start : min(start + self.batch_size, self._n)]
        num_pad = self.batch_size - len(indices)
        samples = [self._dataset[i] for i in indices] + [self.pad_value] * num_pad
        batch = Batch(samples, indices, num_pad, self.epoch, self.offset)
        self.offset += g
        if self.offset >= self._n:
            # Advance eagerly so the state of a finished epoch reads the same on every rank
            # and in every attempt: (epoch + 1, 0), never (epoch, num_samples).
            self._next_epoch()
        return batch

    def state_dict(self) -> dict:
        """The position, as plain ints (JSON- and torch.save-friendly). Identical on every rank
        after the same number of steps; save the chief's."""
        return {
            "version": _STATE_VERSION,
            "epoch": self.epoch,
            "offset": self.offset,
            "num_samples": self._n,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "dropped_samples": self.dropped_samples,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores a position saved at any world size and batch size. Raises ValueError if the
        state belongs to a different dataset length, seed or shuffle setting (the permutation
        would differ, so exactly-once could not hold)."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported data state version {state.get('version')!r}")
        for key, mine in (("num_samples", self._n), ("seed", self.seed), ("shuffle", self.shuffle)):
            if state.get(key) != mine:
                raise ValueError(
                    f"data state has {key}={state.get(key)!r}, this iterator has {mine!r}"
                )
        epoch, offset = state.get("epoch"), state.get("offset")
        if not (_is_int(epoch) and _is_int(offset) and epoch >= 0):
            raise ValueError(f"bad data position epoch={epoch!r} offset={offset!r}")
        if not 0 <= offset <= self._n:
            raise ValueError(f"data offset {offset} outside [0, {self._n}]")
        dropped = state.get("dropped_samples", 0)
        if not (_is_int(dropped) and dropped >= 0):
            raise ValueError(f"bad data state dropped_samples={dropped!r}")
        if offset == self._n:
            # A finished epoch (written by hand or by another tool): the next one starts here.
            # Left as is, 'pad' would yield a batch of pads only and 'raise' would raise.
            epoch, offset = epoch + 1, 0
        self.epoch = epoch
        self.offset = offset
        self.dropped_samples = dropped
        self.last_dropped = 0
