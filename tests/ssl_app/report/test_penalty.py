"""The relative-penalty curve from the all-negatives histogram, through TensorBoard and back."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter

from callbacks.distributions import NEGATIVE_HISTOGRAM_TAG, POSITIVE_HISTOGRAM_TAG, write_histogram
from ssl_app.metrics import positive_and_topk_negatives
from ssl_app.metrics.histogram import SimilarityHistogram
from ssl_app.report.events import read_events
from ssl_app.report.penalty import penalty_curves

N, TAU = 60, 0.5


def logged_run(directory, za: torch.Tensor, zb: torch.Tensor, step: int = 3) -> SimpleNamespace:
    """A run as the report sees it, whose events hold what EmbeddingMetrics logs of ``za``, ``zb``."""
    histogram = SimilarityHistogram()
    sims = positive_and_topk_negatives(za, zb, k=5, world_size=1, histogram=histogram)
    writer = SummaryWriter(str(directory))
    write_histogram(writer, NEGATIVE_HISTOGRAM_TAG, histogram.summary(), step)
    write_histogram(writer, POSITIVE_HISTOGRAM_TAG, SimilarityHistogram.of(sims.positive).summary(), step)
    writer.close()
    return SimpleNamespace(events=read_events(directory), options=SimpleNamespace(top_k=5, fill=lambda tag: tag))


def test_curve_over_all_negatives_matches_the_exact_mean_normaliser(tmp_path):
    """Catches Z taken over the top-k instead of all negatives, m not the negatives per anchor
    (N − 1 here), the logged fixed bins shifted when read back, or the curve off the exact
    r(s) = exp(s/τ) / mean_i Σ_{j≠i} exp(s_ij/τ) by more than the bins' half-width allows
    (|Δs| ≤ 0.005, so ≤ exp(0.005/τ) − 1 ≈ 1% at τ = 0.5)."""
    g = torch.Generator().manual_seed(0)
    za = torch.randn(N, 8, generator=g, dtype=torch.float64)
    zb = za + 0.4 * torch.randn(N, 8, generator=g, dtype=torch.float64)
    run = logged_run(tmp_path, za, zb)
    configuration = SimpleNamespace(temperature=TAU, label="InfoNCE τ=0.5", series="InfoNCE")
    [curve] = penalty_curves([SimpleNamespace(configuration=configuration, runs=[run])])

    assert curve.negatives == "all" and curve.k == pytest.approx(N - 1)
    sims = F.normalize(za, dim=1) @ F.normalize(zb, dim=1).T
    off_diagonal = ~torch.eye(N, dtype=torch.bool)
    per_anchor = torch.where(off_diagonal, torch.exp(sims / TAU), 0.0).sum(dim=1).numpy()  # Z_i
    expected = np.exp(curve.similarity / TAU) / per_anchor.mean()
    np.testing.assert_allclose(curve.penalty, expected, rtol=0.012)
    # the per-anchor average exp(s/τ)·mean_i(1/Z_i) lies above by the Jensen gap (0.5% here)
    averaged = np.exp(curve.similarity / TAU) * np.mean(1 / per_anchor)
    assert np.all(curve.penalty <= averaged * 1.012)
    np.testing.assert_allclose(curve.penalty, averaged, rtol=0.02)
    assert curve.k * np.sum(curve.weight * curve.penalty) == pytest.approx(1.0)


def test_runs_without_the_all_negatives_histogram_fall_back_to_the_top_k(tmp_path):
    """Catches a configuration whose runs logged only ``similarity/top{k}_negative`` losing its curve."""
    writer = SummaryWriter(str(tmp_path))
    writer.add_histogram("similarity/top5_negative", torch.linspace(0.2, 0.6, 100), 1)
    writer.close()
    run = SimpleNamespace(events=read_events(tmp_path), options=SimpleNamespace(top_k=5, fill=lambda t: t.format(k=5)))
    configuration = SimpleNamespace(temperature=TAU, label="InfoNCE τ=0.5", series="InfoNCE")
    [curve] = penalty_curves([SimpleNamespace(configuration=configuration, runs=[run])])
    assert curve.negatives == "top5" and curve.k == 5
