"""Geometry beyond Wang–Isola uniformity, exact and DDP-summed (docs/science.md, "Geometry beyond uniformity").

    wasserstein_uniformity(z)   −W₂(N(μ, Σ), N(0, I/d)) = −sqrt(‖μ‖² + 1 + tr Σ − (2/√d) tr Σ^{1/2})
                                (Fang et al., ICLR 2024), μ, Σ the mean and covariance of the unit rows
    lidar(views)                exp(entropy of the eigenvalues of S_w^{-1/2} S_b S_w^{-1/2}), the LDA of
                                q augmented views per sample (Thilak et al., ICLR 2024)

Both read sufficient statistics only (sums and Gram matrices), each rank summing its ``row_range`` of
the gathered rows and one all-reduce adding them, so every rank gets the single-process value; the
d × d algebra runs on the CPU in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ssl_app.metrics.rank import Moments, moments
from ssl_app.metrics.rows import accumulation_dtype, check_chunk
from ssl_app.metrics.sharding import all_reduce_sum, resolve_world, row_range

#: LiDAR's regulariser δ of the within-class scatter and ε of the eigenvalue entropy: the values of
#: stable-pretraining's ``callbacks/lidar.py`` (its docstring: as the paper).
LIDAR_DELTA = 1e-4
LIDAR_EPSILON = 1e-8
#: Views per sample for LiDAR when the callback turns it on: the default of both reference implementations
#: (stable-pretraining's ``samples_per_class`` and reptrix's ``num_augmentations``, 10).
DEFAULT_LIDAR_VIEWS = 10
_SAMPLE_CHUNK = 4096


def wasserstein_distance_to_uniform(stats: Moments) -> Tensor:
    """W₂ between the Gaussian fit N(μ, Σ) of the rows in ``stats`` and N(0, I/d), in closed form.

    N(0, I/d) stands for the uniform distribution on the unit sphere of R^d (same mean and covariance),
    so W₂² = ‖μ‖² + tr Σ + tr(I/d) − 2 tr((I/d)^{1/2} Σ (I/d)^{1/2})^{1/2} = ‖μ‖² + 1 + tr Σ − (2/√d) Σ_k sqrt(λ_k),
    λ_k the eigenvalues of Σ (clamped at 0). Σ is the 1/N covariance (``Moments.covariance``). A 0-d float64
    tensor; 0 for the isotropic Gaussian itself, √2 for rows all at one point of the sphere.
    """
    d = stats.gram.shape[0]
    mean, covariance = stats.mean, stats.covariance
    eigenvalues = torch.linalg.eigvalsh(0.5 * (covariance + covariance.T)).clamp(min=0)
    squared = mean @ mean + 1.0 + covariance.trace() - 2.0 / math.sqrt(d) * eigenvalues.sqrt().sum()
    return squared.clamp(min=0).sqrt()


@torch.no_grad()
def wasserstein_uniformity(
    z: Tensor, *, chunk_size: int | None = None, rank: int | None = None, world_size: int | None = None
) -> Tensor:
    """−W₂ of the L2-normalised rows of ``z`` [N, d] (``wasserstein_distance_to_uniform`` of their ``moments``):
    larger is more uniform, 0 at best; a 0-d float64 CPU tensor. Sharded and summed like ``singular_values``."""
    return -wasserstein_distance_to_uniform(moments(z, chunk_size=chunk_size, rank=rank, world_size=world_size))


@dataclass(frozen=True)
class ViewStatistics:
    """LiDAR's sufficient statistics of n samples' q views e_ij [d] (float64, CPU): ``samples`` n, ``views`` q,
    ``mean_sum`` Σ_i μ_i, ``mean_gram`` Σ_i μ_i μ_iᵀ and ``view_gram`` Σ_ij e_ij e_ijᵀ, μ_i = Σ_j e_ij / q."""

    samples: int
    views: int
    mean_sum: Tensor
    mean_gram: Tensor
    view_gram: Tensor

    def between(self) -> Tensor:
        """S_b = Σ_i (μ_i − μ)(μ_i − μ)ᵀ / (n − 1), μ = Σ_i μ_i / n (the between-sample scatter)."""
        mu = self.mean_sum / self.samples
        return (self.mean_gram - self.samples * torch.outer(mu, mu)) / (self.samples - 1)

    def within(self) -> Tensor:
        """S_w = Σ_ij (e_ij − μ_i)(e_ij − μ_i)ᵀ / (n (q − 1)) (the within-sample scatter of the augmentations)."""
        return (self.view_gram - self.views * self.mean_gram) / (self.samples * (self.views - 1))


@torch.no_grad()
def view_statistics(
    views: Tensor, *, chunk_size: int | None = None, rank: int | None = None, world_size: int | None = None
) -> ViewStatistics:
    """``ViewStatistics`` of ``views`` [n, q, d] (rows as given), each rank summing its ``row_range`` of the
    n samples, one all-reduce adding the sums."""
    if not isinstance(views, Tensor) or views.dim() != 3 or not views.is_floating_point():
        raise ValueError(f"views must be a floating [n, q, d] tensor, got {getattr(views, 'shape', type(views).__name__)}")
    n, q, d = views.shape
    if n < 2 or q < 2:
        raise ValueError(f"LiDAR needs at least 2 samples of at least 2 views each, got shape {tuple(views.shape)}")
    chunk = check_chunk(chunk_size, _SAMPLE_CHUNK)
    rank, world_size = resolve_world(rank, world_size)
    with torch.autocast(views.device.type, enabled=False):
        start, stop = row_range(n, rank, world_size)
        sums = torch.zeros(2 * d + 1, d, dtype=accumulation_dtype(views), device=views.device)
        for a in range(start, stop, chunk):
            block = views[a : min(a + chunk, stop)].detach().to(sums.dtype)
            means = block.mean(dim=1)
            flat = block.reshape(-1, d)
            sums[0] += means.sum(dim=0)
            sums[1 : d + 1] += means.T @ means
            sums[d + 1 :] += flat.T @ flat
        sums = all_reduce_sum(sums, world_size).cpu().double()
    return ViewStatistics(n, q, sums[0], sums[1 : d + 1], sums[d + 1 :])


def lidar_from_statistics(stats: ViewStatistics, delta: float = LIDAR_DELTA, epsilon: float = LIDAR_EPSILON) -> Tensor:
    """LiDAR = exp(−Σ_k p_k log p_k), p_k = (λ_k + ε) / Σ_j (λ_j + ε), λ the eigenvalues (clamped at 0) of
    Σ_lidar = (S_w + δI)^{-1/2} S_b (S_w + δI)^{-1/2}; a 0-d float64 tensor in [1, d]."""
    d = stats.mean_sum.shape[0]
    within = stats.within() + delta * torch.eye(d, dtype=torch.float64)
    w_values, w_vectors = torch.linalg.eigh(0.5 * (within + within.T))
    inverse_root = (w_vectors * w_values.clamp(min=epsilon).rsqrt()) @ w_vectors.T
    matrix = inverse_root @ stats.between() @ inverse_root
    eigenvalues = torch.linalg.eigvalsh(0.5 * (matrix + matrix.T)).clamp(min=0) + epsilon
    p = eigenvalues / eigenvalues.sum()
    return torch.exp(-(p * p.log()).sum())


@torch.no_grad()
def lidar(
    views: Tensor,
    *,
    delta: float = LIDAR_DELTA,
    epsilon: float = LIDAR_EPSILON,
    chunk_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> Tensor:
    """LiDAR (Thilak et al., ICLR 2024) of ``views`` [n, q, d]: q augmented embeddings of each of n samples,
    each sample a class of an LDA (``lidar_from_statistics`` of ``view_statistics``). Rows as given."""
    stats = view_statistics(views, chunk_size=chunk_size, rank=rank, world_size=world_size)
    return lidar_from_statistics(stats, delta, epsilon)
