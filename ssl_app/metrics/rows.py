"""What every metric does first with its [N, d] embeddings: check them, put the rows on the unit
sphere, and pick the dtype its long sums accumulate in.

Shared by ``embedding`` (alignment, uniformity, tolerance, top-k negatives) and ``rank``
(effective rank), so both reject the same inputs with the same words and normalise alike.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ssl_app.checks import PositiveInt, is_a


def check_rows(name: str, z: object, min_rows: int) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``z`` is a floating [N, d] tensor, d ≥ 1, N ≥ ``min_rows``."""
    if not isinstance(z, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(z).__name__}")
    if z.dim() != 2 or z.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-D [N, d] tensor with d >= 1, got shape {tuple(z.shape)}")
    if z.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} rows, got shape {tuple(z.shape)}")
    if not z.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {z.dtype}")


def check_chunk(chunk_size: int | None, default: int) -> int:
    """``chunk_size`` (rows per block), or ``default`` for None; ``ValueError`` unless an int ≥ 1."""
    if chunk_size is None:
        return default
    if not is_a(PositiveInt, chunk_size):
        raise ValueError(f"chunk_size must be an int >= 1 or None, got {chunk_size!r}")
    return chunk_size


def unit_rows(z: Tensor) -> Tensor:
    """Detached, L2-normalised rows in float32 (float64 if given float64); an all-zero row stays zero."""
    z = z.detach()
    if z.dtype != torch.float64:
        z = z.float()
    return F.normalize(z, dim=1)


def accumulation_dtype(z: Tensor) -> torch.dtype:
    """The dtype sums of many terms are kept in: float64, except on MPS, which has none (float32)."""
    return torch.float32 if z.device.type == "mps" else torch.float64
