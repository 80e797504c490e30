"""Split a metric's anchor rows across DDP ranks, and combine the partial results.

Every rank holds the same *gathered* embeddings [N, d]. Rank r of W takes the contiguous anchor
rows ``[floor(r·N/W), floor((r+1)·N/W))`` (slice sizes differ by at most one), computes a
partial result for those rows against all N candidates, and one collective combines the
partials, so every rank returns the single-process value after doing 1/W of the work.

With ``world_size == 1`` nothing is communicated: that is also how a caller that runs on one
rank only (while a process group exists) must call the metrics, or the collectives would hang.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from ssl_app import distributed


def resolve_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Return ``(rank, world_size)`` for the metric functions' keyword arguments.

    ``None`` means "from the default process group" when ``torch.distributed`` is initialised,
    and ``(0, 1)`` otherwise. ``world_size=1`` always means a local, communication-free
    computation. A ``world_size > 1`` must match the initialised default group, since the
    partial results are reduced over it.
    """
    initialised = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if initialised else 1
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if world_size > 1:
        if not initialised:
            raise ValueError(f"world_size={world_size} needs an initialised torch.distributed process group")
        if world_size != dist.get_world_size():
            raise ValueError(f"world_size={world_size} does not match the process group size {dist.get_world_size()}")
    if rank is None:
        rank = dist.get_rank() if world_size > 1 else 0
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, world_size={world_size}), got {rank!r}")
    if world_size > 1 and rank != dist.get_rank():
        raise ValueError(f"rank={rank} does not match this process's rank {dist.get_rank()}")
    return rank, world_size


def row_range(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """The anchor rows ``[start, stop)`` of ``rank``: ``start = floor(rank·n / world_size)``."""
    return n * rank // world_size, n * (rank + 1) // world_size


def all_reduce_sum(tensor: Tensor, world_size: int) -> Tensor:
    """Sum ``tensor`` over ranks in place (a no-op when ``world_size == 1``) and return it."""
    return distributed.all_reduce_sum(tensor) if world_size > 1 else tensor


def all_logsumexp(log_value: Tensor, world_size: int) -> Tensor:
    """``log Σ_ranks exp(log_value)`` for a 0-d tensor, without leaving log space.

    Partial sums are kept as logarithms so that no rank's sum can over- or underflow.
    """
    if world_size == 1:
        return log_value
    return torch.logsumexp(distributed.gather(log_value.reshape(1)), dim=0)


def all_gather_rows(local: Tensor, n: int, world_size: int) -> Tensor:
    """Concatenate every rank's ``row_range`` slice (``local``, [rows, ...]) into the full [n, ...]."""
    if world_size == 1:
        return local
    counts = [stop - start for start, stop in (row_range(n, r, world_size) for r in range(world_size))]
    return distributed.gather_uneven(local, counts)
