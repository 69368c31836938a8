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

ArrayBatches is the same iterator over NumPy arrays (one array, or a dict or tuple of arrays
sharing their first axis): each batch is gathered with one take() per array, pads are rows of
pad_value with a False `mask`, and to_torch() turns a batch into tensors without copying.
Prefetch (or .prefetch(depth)) produces batches ahead in a background thread through a bounded
queue; its state_dict() is the position after the last batch handed out, not after the last
one produced, so resume stays exact. NumPy is imported when an ArrayBatches is made, torch
only by to_torch().

Thread-safety: a ShardedBatches or ArrayBatches is not thread-safe; use one per consumer. A
Prefetch owns its source (only its thread touches it once iteration starts) and is itself used
by one consumer thread; close() may be called from any thread.
"""

from __future__ import annotations

import dataclasses
import queue
import random
import threading
from typing import Any, Iterable, Iterator, Optional, Sequence

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
        indices, num_pad, epoch, offset = self._take()
        samples = [self._dataset[i] for i in indices] + [self.pad_value] * num_pad
        return Batch(samples, indices, num_pad, epoch, offset)

    def prefetch(self, depth: int = 2) -> "Prefetch":
        """These batches, produced ahead by a background thread (see Prefetch)."""
        return Prefetch(self, depth=depth)

    def _take(self) -> tuple[list, int, int, int]:
        """Advances by one global step: this rank's dataset indices, the number of pads after
        them, and the (epoch, offset) the step started at. Raises as __next__ documents."""
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
        taken = (indices, num_pad, self.epoch, self.offset)
        self.offset += g
        if self.offset >= self._n:
            # Advance eagerly so the state of a finished epoch reads the same on every rank
            # and in every attempt: (epoch + 1, 0), never (epoch, num_samples).
            self._next_epoch()
        return taken

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


@dataclasses.dataclass(frozen=True)
class ArrayBatch:
    """One rank's batch from ArrayBatches: always batch_size rows."""

    data: Any  # an ndarray, or a dict / tuple of them, as the dataset was given
    mask: Any  # bool ndarray (batch_size,): False on pad rows (which are at the end)
    indices: Any  # int64 ndarray: the dataset index of each real row
    num_pad: int
    epoch: int
    offset: int  # global offset of the step this batch belongs to, before it was taken

    def to_torch(self) -> "ArrayBatch":
        """The same batch with torch tensors (torch.from_numpy: no copy) for data, mask and
        indices."""
        return dataclasses.replace(self, data=to_torch(self.data), mask=to_torch(self.mask),
                                   indices=to_torch(self.indices))


def to_torch(value: Any) -> Any:
    """torch.from_numpy over an ndarray, or over each array of a dict, tuple or list (other
    values are left as they are). Imports torch."""
    import torch  # only here: the SDK does not need torch otherwise

    def convert(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: convert(x) for k, x in v.items()}
        if isinstance(v, (tuple, list)):
            return type(v)(convert(x) for x in v)
        if hasattr(v, "__array_interface__") and not isinstance(v, torch.Tensor):
            return torch.from_numpy(v)
        return v

    return convert(value)


class ArrayBatches(ShardedBatches):
    """ShardedBatches over NumPy arrays, yielding ArrayBatch: `arrays` is one array, a dict of
    arrays or a tuple of arrays whose first axes have the same length (the samples). Same
    order, policies, state_dict and resume as ShardedBatches over range(num_samples); pad rows
    are `pad_value` (default 0) and have mask False."""

    def __init__(self, arrays: Any, *, batch_size: int, rank: int = 0, world_size: int = 1,
                 seed: int = 0, shuffle: bool = True, last_batch: str = "drop",
                 pad_value: Any = 0, num_epochs: Optional[int] = None) -> None:
        import numpy as np  # only here: ShardedBatches needs the standard library only

        self._np = np
        if isinstance(arrays, dict):
            names = list(arrays)
            parts = [arrays[k] for k in names]
            self._pack = lambda out: dict(zip(names, out))
        elif isinstance(arrays, tuple):
            parts = list(arrays)
            self._pack = tuple
        else:
            parts = [arrays]
            self._pack = lambda out: out[0]
        if not parts:
            raise ValueError("arrays: give one array, or a dict or tuple of arrays, not none")
        self._parts = []
        for i, a in enumerate(parts):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"arrays[{i}]: a numpy.ndarray, not {type(a).__name__}")
            if a.ndim == 0:
                raise ValueError(f"arrays[{i}]: needs a first axis of samples, got a scalar")
            self._parts.append(a)
        lengths = {a.shape[0] for a in self._parts}
        if len(lengths) != 1:
            raise ValueError(f"arrays: first axes differ in length {sorted(lengths)}; every "
                             "array needs one row per sample")
        super().__init__(range(lengths.pop()), batch_size=batch_size, rank=rank,
                         world_size=world_size, seed=seed, shuffle=shuffle,
                         last_batch=last_batch, pad_value=pad_value, num_epochs=num_epochs)

    def __next__(self) -> ArrayBatch:  # type: ignore[override]
        np = self._np
        indices, num_pad, epoch, offset = self._take()
        idx = np.asarray(indices, dtype=np.int64)
        real = len(idx)
        out = []
        for a in self._parts:
            rows = np.empty((self.batch_size,) + a.shape[1:], dtype=a.dtype)
            np.take(a, idx, axis=0, out=rows[:real])
            if num_pad:
                rows[real:] = self.pad_value
            out.append(rows)
        mask = np.zeros(self.batch_size, dtype=bool)
        mask[:real] = True
        return ArrayBatch(self._pack(out), mask, idx, num_pad, epoch, offset)


_ITEM, _END, _ERROR = "item", "end", "error"


class Prefetch(Iterator[Any]):
    """Iterates `source` ahead of its consumer in a background thread, keeping at most
    `depth` items waiting in a bounded queue, so producing the next batch overlaps the
    consumer's work on this one.

    - An exception raised by the source (RaggedBatchError, a bad sample, ...) is raised by
      the next() that reaches it, after every item before it, and by every next() after.
    - state_dict() is the source's position after the last item next() returned (taken by the
      thread right after producing it), so saving it and loading it into a fresh source
      resumes exactly, whatever was prefetched. load_state_dict() only before iteration.
    - close() (or leaving a `with` block) stops the thread: it finishes the item it is
      producing, if any, and exits; close() waits for that. Items not consumed are dropped.
    """

    def __init__(self, source: Iterable[Any], depth: int = 2) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an int >= 1, got {depth!r}")
        self._source = iter(source)
        self.depth = depth
        self._queue: "queue.Queue[tuple]" = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._done: Optional[tuple] = None  # the _END or _ERROR item, once reached
        self._state = self._source_state()

    def _source_state(self) -> Optional[dict]:
        state_dict = getattr(self._source, "state_dict", None)
        return state_dict() if state_dict else None

    def state_dict(self) -> dict:
        if self._state is None:
            raise TypeError(f"{type(self._source).__name__} has no state_dict()")
        return dict(self._state)

    def load_state_dict(self, state: dict) -> None:
        if self._thread is not None:
            raise RuntimeError("load_state_dict: iteration has started; load the state into "
                               "a fresh Prefetch (or its source) before the first next()")
        self._source.load_state_dict(state)  # type: ignore[attr-defined]
        self._state = self._source_state()

    def _put(self, item: tuple) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                value = next(self._source)
                if not self._put((_ITEM, value, self._source_state())):
                    return
        except StopIteration:
            self._put((_END, None, None))
        except BaseException as e:  # handed to the consumer, raised there
            self._put((_ERROR, e, None))

    def __iter__(self) -> "Prefetch":
        return self

    def __next__(self) -> Any:
        if self._done is None and self._thread is None:
            if self._stop.is_set():
                raise RuntimeError("next() on a closed Prefetch")
            self._thread = threading.Thread(target=self._run, name="tessera-data-prefetch",
                                            daemon=True)
            self._thread.start()
        if self._done is None:
            while True:
                try:
                    item = self._queue.get(timeout=0.1)
                    break
                except queue.Empty:
                    if self._stop.is_set():
                        raise RuntimeError("next() on a closed Prefetch") from None
                    if not self._thread.is_alive() and self._queue.empty():  # type: ignore
                        raise RuntimeError("the prefetch thread ended without a result")
            if item[0] == _ITEM:
                self._state = item[2]
                return item[1]
            self._done = item
        if self._done[0] == _END:
            raise StopIteration
        raise self._done[1]

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        while True:  # drop what was produced and not consumed
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break

    def __enter__(self) -> "Prefetch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
