"""Rendezvous helpers for the training script's process group.

wait_for_master() makes a restart's `init_process_group` take milliseconds instead of a second:
a rank that connects before rank 0's store listens is refused, and torch's store client (1.13
and later) then waits a whole second before it tries again. On a restart where every rank
starts within milliseconds of the others (warm workers, docs/agent-protocol.md), that second
was most of the restart (bench/recovery/README.md, "Where the restart time goes").

Standard library only.
"""

from __future__ import annotations

import socket
import time
from typing import Optional

from . import worker


def wait_for_master(ctx: Optional[worker.WorkerContext] = None, *, timeout_s: float = 60.0,
                    poll_s: float = 0.005) -> bool:
    """On a rank other than 0 of a multi-process group, waits until rank 0's rendezvous store
    (MASTER_ADDR:MASTER_PORT) accepts TCP connections. Returns True once it does; False at the
    timeout, and at once on rank 0 or in a world of 1, so the caller goes on either way.

    Call it just before torch.distributed.init_process_group(..., init_method="env://"). It
    polls every `poll_s`; the store server takes each probe as a client that left at once."""
    ctx = worker.context() if ctx is None else ctx
    if ctx.rank == 0 or ctx.world_size <= 1:
        return False
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((ctx.master_addr, ctx.master_port), timeout=1.0) as probe:
                # A probe whose own ephemeral port is the master port connects to itself
                # (TCP simultaneous open) while nothing listens: that is not the store.
                if probe.getsockname() != probe.getpeername():
                    return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
