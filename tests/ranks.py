"""One rank of a test's gloo process group, for the tests that spawn real processes (``mp.spawn``)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from collections.abc import Iterator

import torch.distributed as dist


@contextlib.contextmanager
def gloo_rank(rank: int, world: int, init_file: str) -> Iterator[None]:
    """Join the group (``file://init_file``) for the block; leave it however the block ends.

    When the block succeeds in a spawned process, the ranks meet at a barrier, the group is
    destroyed and the process ends at once (``os._exit(0)``), skipping the interpreter's shutdown:
    gloo's threads can abort it (``terminate called without an active exception``, SIGABRT, seen
    once under CI load after a test's results were saved), which would fail a test for what
    torch does after the test is over. A failure leaves normally, so ``mp.spawn`` reports it.
    """
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        yield
    except BaseException:
        dist.destroy_process_group()
        raise
    dist.barrier()  # no rank tears its connections down while another still uses them
    dist.destroy_process_group()
    if multiprocessing.parent_process() is not None:  # never in the test runner's own process
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
