"""The singular-value spectrum of a set of embeddings, exact and DDP-sharded: the effective rank
(RankMe, Garrido et al. 2023) and the power-law exponent α (α-ReQ, Agrawal et al. 2022)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ssl_app.metrics.rows import accumulation_dtype, check_chunk, check_rows, unit_rows
from ssl_app.metrics.sharding import all_reduce_sum, resolve_world, row_range

_ROW_CHUNK = 16384


@dataclass(frozen=True)
class Moments:
    """The sufficient statistics of N rows u_i [d]: ``count`` N, ``total`` Σ_i u_i [d] and ``gram``
    Σ_i u_i u_iᵀ [d, d], float64 on the CPU. Every second-order metric here reads them: the singular
    values (of ``gram``), the mean and covariance (−W₂, ``ssl_app.metrics.geometry``)."""

    count: int
    total: Tensor
    gram: Tensor

    @property
    def mean(self) -> Tensor:
        """μ = Σ u_i / N, [d]."""
        return self.total / self.count

    @property
    def covariance(self) -> Tensor:
        """Σ = Σ_i (u_i − μ)(u_i − μ)ᵀ / N = gram / N − μ μᵀ, [d, d] (the 1/N, maximum-likelihood fit)."""
        mean = self.mean
        return self.gram / self.count - torch.outer(mean, mean)


@torch.no_grad()
def moments(
    z: Tensor,
    *,
    chunk_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    normalize: bool = True,
) -> Moments:
    """``Moments`` of U [N, d]: ``z`` with L2-normalised rows, or ``z`` itself with ``normalize=False``.

    Accumulated in float64 (float32 on MPS), ``chunk_size`` rows at a time; under DDP each rank sums
    its ``row_range`` of the gathered rows and the partial sums are all-reduced (one collective), so
    every rank holds the same statistics, exactly the single-process ones up to summation order.

    Args:
        z: [N, d] embeddings, N ≥ 1 (gathered from every rank under DDP).
        chunk_size, rank, world_size: as for ``uniformity`` (see ``ssl_app.metrics.embedding``).
        normalize: L2-normalise the rows first (``False``: the rows as given).
    """
    check_rows("z", z, 1)
    chunk = check_chunk(chunk_size, _ROW_CHUNK)
    rank, world_size = resolve_world(rank, world_size)
    d = z.shape[1]
    with torch.autocast(z.device.type, enabled=False):
        start, stop = row_range(z.shape[0], rank, world_size)
        sums = torch.zeros(d + 1, d, dtype=accumulation_dtype(z), device=z.device)  # [Σ u_i; Σ u_i u_iᵀ]
        for a in range(start, stop, chunk):
            rows = z[a : min(a + chunk, stop)]
            rows = (unit_rows(rows) if normalize else rows).to(sums.dtype)
            sums[0] += rows.sum(dim=0)
            sums[1:] += rows.T @ rows
        sums = all_reduce_sum(sums, world_size).cpu().double()
    return Moments(z.shape[0], sums[0], sums[1:])


def gram_singular_values(gram: Tensor) -> Tensor:
    """σ_k = sqrt(λ_k(G)) of a Gram matrix G = UᵀU, descending, eigenvalues clamped at 0 (float64, CPU)."""
    return torch.linalg.eigvalsh(gram.cpu().double()).clamp(min=0).sqrt().flip(0)


@torch.no_grad()
def singular_values(
    z: Tensor,
    *,
    chunk_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    normalize: bool = True,
) -> Tensor:
    """The singular values σ_1 ≥ … ≥ σ_d ≥ 0 of U [N, d], exactly, as a float64 CPU tensor [d].

    U is ``z`` with L2-normalised rows, or ``z`` itself with ``normalize=False``. They are computed
    from the d × d Gram matrix ``G = Uᵀ U = Σ_i u_i u_iᵀ`` of ``moments``: ``σ_k = sqrt(λ_k(G))``
    (eigenvalues clamped at 0). G is accumulated in float64 (float32 on MPS), ``chunk_size`` rows at
    a time; under DDP each rank sums its ``row_range`` of the gathered rows and the partial Gram
    matrices are all-reduced, so every rank decomposes the same matrix. The eigen-decomposition runs
    on the CPU in float64 (d × d is small), so the result does not depend on the device.

    Args:
        z: [N, d] embeddings, N ≥ 1 (gathered from every rank under DDP).
        chunk_size, rank, world_size: as for ``uniformity`` (see ``ssl_app.metrics.embedding``).
        normalize: L2-normalise the rows first (``False``: the rows as given).
    """
    stats = moments(z, chunk_size=chunk_size, rank=rank, world_size=world_size, normalize=normalize)
    return gram_singular_values(stats.gram)


@torch.no_grad()
def effective_rank(
    z: Tensor,
    *,
    chunk_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    normalize: bool = True,
) -> Tensor:
    """Effective rank ``exp(H(p))``, ``p_k = σ_k / Σ_j σ_j``, of the singular values σ of U [N, d].

    U is ``z`` with L2-normalised rows (the embeddings on the sphere, as every metric here), or
    ``z`` itself with ``normalize=False`` (RankMe's definition, on unnormalised features);
    ``H(p) = −Σ_k p_k log p_k`` (with 0·log 0 = 0). 1 when every row lies on one line
    (collapse), d when the d singular values are equal (e.g. the rows of an orthogonal matrix),
    so it measures how many directions the embeddings use (dimensional collapse). RankMe adds
    ε = 1e-7 to ``p_k``; this is the exact value without it. σ: ``singular_values`` (exact, from
    the Gram matrix, DDP-sharded); returned as a 0-d float64 CPU tensor.
    """
    sigma = singular_values(z, chunk_size=chunk_size, rank=rank, world_size=world_size, normalize=normalize)
    return spectrum_effective_rank(sigma)


def spectrum_effective_rank(singular_values: Tensor) -> Tensor:
    """``exp(−Σ p log p)`` with ``p = σ / Σσ`` (σ ≥ 0, not all 0); a 0-d float64 tensor."""
    p = singular_values / singular_values.sum()
    entropy = -torch.special.xlogy(p, p).sum()
    return entropy.exp()


#: Singular values below this fraction of the largest are numerically zero (left out of the α fit).
SPECTRUM_FLOOR = 1e-6


def power_law_exponent(singular_values: Tensor, floor: float = SPECTRUM_FLOOR) -> Tensor:
    """α of the power law ``σ_i ∝ i^(−α)`` (α-ReQ, Agrawal et al., NeurIPS 2022), a 0-d float64 tensor.

    The least-squares fit ``log σ_i ≈ c − α log i`` over the ranks i = 1 … m, m the number of
    singular values (sorted descending) above ``floor × σ_1``: every rank the matrix has, the
    numerically zero ones left out (log 0 is not a point). Larger α: a faster-decaying spectrum,
    fewer directions used (α → ∞ at collapse onto a line); α = 0: all σ equal. Agrawal et al. fit
    the covariance eigenvalues λ_i = σ_i²/N, whose exponent is 2α. NaN with fewer than 2 ranks.
    """
    sigma = singular_values.double().flatten().sort(descending=True).values
    if sigma.numel() == 0 or not sigma[0] > 0:
        return torch.tensor(float("nan"), dtype=torch.float64)
    kept = sigma[sigma > floor * sigma[0]]
    if kept.numel() < 2:
        return torch.tensor(float("nan"), dtype=torch.float64)
    x = torch.arange(1, kept.numel() + 1, dtype=torch.float64).log()
    y = kept.log()
    x_centred = x - x.mean()
    slope = (x_centred * (y - y.mean())).sum() / (x_centred * x_centred).sum()
    return -slope
