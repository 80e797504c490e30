"""Every collective the application uses, in one place; each is a no-op in a single process.

- ``gather_with_grad``: concatenate equal-shape tensors from every rank, keeping the autograd
  graph (SimCLR's global negatives);
- ``gather``: the same without gradient;
- ``gather_uneven``: concatenate tensors whose first dimension differs per rank (the metric
  callbacks' rows, the metric shards);
- ``all_reduce_sum``: sum in place over ranks.

All results are rank-major: rank 0's rows first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
import torch.distributed as dist
from lightly.utils import dist as lightly_dist
from torch import Tensor


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def gather_with_grad(x: Tensor) -> Tensor:
    """Concatenate ``x`` from every rank along dim 0, rank-major, keeping the autograd graph.

    The backward pass all-reduces the incoming gradients (lightly's ``GatherLayer``), so a
    rank's embeddings receive the gradient of every rank's loss terms that used them. All
    ranks must pass tensors of the same shape.
    """
    if world_size() == 1:
        return x
    return torch.cat(lightly_dist.gather(x), dim=0)


@torch.no_grad()
def gather(x: Tensor) -> Tensor:
    """Concatenate ``x`` (the same shape on every rank) along dim 0, rank-major, without gradient."""
    if world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=0)


@torch.no_grad()
def gather_uneven(rows: Tensor, counts: Optional[Sequence[int]] = None) -> Tensor:
    """Concatenate every rank's ``rows`` [n_r, ...] along dim 0, rank-major, when the n_r differ.

    ``all_gather`` needs equal shapes, so each rank pads its rows to the longest n_r and the
    padding is dropped after the gather. ``counts`` (every rank's n_r, if the caller knows
    them) saves the collective that exchanges them. Trailing dimensions must agree.
    """
    if world_size() == 1:
        return rows
    if counts is None:
        counts = gather(torch.tensor([rows.shape[0]], device=rows.device)).tolist()
    longest = max(counts)
    padded = rows.new_zeros((longest, *rows.shape[1:]))
    padded[: rows.shape[0]] = rows
    gathered = gather(padded)
    return torch.cat([gathered[r * longest : r * longest + n] for r, n in enumerate(counts)])


def all_reduce_sum(tensor: Tensor) -> Tensor:
    """Sum ``tensor`` over ranks in place and return it."""
    if world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_max(tensor: Tensor) -> Tensor:
    """Elementwise maximum of ``tensor`` over ranks, in place, and return it."""
    if world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor
