"""tessera worker SDK: what a training process launched by the tessera agent needs.

- tessera.worker: the environment the agent sets (context()) and progress reports.
- tessera.checkpoint: atomic, verifiable checkpoint files; finding the newest complete one.
- tessera.data: per-rank batches whose position survives a restart at any world size.
- tessera.rendezvous: wait_for_master() before init_process_group (no 1 s store-client retry).

Standard library only; torch is imported only by the torch helpers, and only when called.
"""

__all__ = ["checkpoint", "data", "rendezvous", "worker"]
