"""tessera worker SDK: what a training process launched by the tessera agent needs.

- tessera.worker: the environment the agent sets (context()) and progress reports.
- tessera.checkpoint: atomic, verifiable checkpoint files; finding the newest complete one.
- tessera.data: per-rank batches (lists, or NumPy arrays with to_torch()) whose position
  survives a restart at any world size; a background Prefetch that keeps it exact.
- tessera.client: the head's API for users, tests and benchmarks (apply, watch, wait,
  reserve_slices).
- tessera.rendezvous: wait_for_master() before init_process_group (no 1 s store-client retry).
- tessera.peer_ckpt: in-memory peer checkpoints (a keeper per host, a copy on a peer host).

Standard library only; numpy is imported by data.ArrayBatches and torch by the torch
helpers, each only when used.
"""

__all__ = ["checkpoint", "client", "data", "peer_ckpt", "rendezvous", "worker"]
