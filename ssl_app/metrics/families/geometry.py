"""Geometry beyond uniformity: the Wasserstein uniformity (Fang et al., ICLR 2024) and LiDAR (Thilak et al., ICLR 2024).

    wasserstein_uniformity = −sqrt(‖μ‖² + 1 + tr Σ − (2/√d) tr Σ^{1/2}),  μ, Σ of the clean unit rows
    lidar = exp(entropy of the eigenvalues of (S_w + δI)^{-1/2} S_b (S_w + δI)^{-1/2}),  q views per sample

−W₂ reads the clean rows' sums and Gram matrix that the effective rank decomposes
(``EmbeddingInputs.moments``: no pass and no Gram matrix of its own); LiDAR reads the ``multiview``
input, which only the callback's ``lidar_views`` ≥ 2 provides (NaN, so not logged, otherwise).
"""

from torch import Tensor

from ssl_app.metrics.geometry import lidar, wasserstein_distance_to_uniform
from ssl_app.metrics.registry import EmbeddingInputs, register


@register(
    "wasserstein_uniformity",
    reads=("clean",),
    formula="−W₂ between the Gaussian fit N(μ, Σ) of the clean input and N(0, I/d): "
    "−sqrt(‖μ‖² + 1 + tr Σ − (2/√d) tr Σ^{1/2}) (Fang et al. 2024; 0 at best)",
)
def _wasserstein_uniformity(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"wasserstein_uniformity": -wasserstein_distance_to_uniform(x.moments("clean"))}


@register(
    "lidar",
    reads=("multiview",),
    formula="exp(entropy of the eigenvalues of (S_w + δI)^{-1/2} S_b (S_w + δI)^{-1/2}), S_b, S_w the between- and "
    "within-sample scatter of q = EmbeddingMetrics.lidar_views augmented views per sample (LiDAR, Thilak et al. 2024; "
    "δ = 1e-4, ε = 1e-8; off unless lidar_views ≥ 2)",
)
def _lidar(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"lidar": lidar(x.multiview)}
