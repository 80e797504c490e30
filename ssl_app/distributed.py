"""Small helpers over ``torch.distributed`` that are no-ops in a single process."""

from __future__ import annotations

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
    """Concatenate ``x`` from every rank along dim 0, rank-major, without gradient."""
    if world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=0)
