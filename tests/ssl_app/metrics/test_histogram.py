"""The all-negatives histogram of ``positive_and_topk_negatives`` against a brute-force one."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ssl_app.metrics import positive_and_topk_negatives
from ssl_app.metrics.histogram import SimilarityHistogram


def negatives_by_hand(za: torch.Tensor, zb: torch.Tensor) -> np.ndarray:
    """Every za_i·zb_j, j ≠ i, of the unit rows, from the whole matrix."""
    sims = F.normalize(za.double(), dim=1) @ F.normalize(zb.double(), dim=1).T
    return sims[~torch.eye(len(za), dtype=torch.bool)].numpy()


@pytest.mark.parametrize("chunk_size", [7, None])
def test_histogram_counts_every_negative_once_across_blocks(chunk_size):
    """Catches the diagonal (positives) counted as negatives, a block counted twice or skipped,
    bins shifted by one, and moments taken over the masked entries."""
    g = torch.Generator().manual_seed(0)
    za = torch.randn(50, 6, generator=g, dtype=torch.float64)
    zb = za + 0.5 * torch.randn(50, 6, generator=g, dtype=torch.float64)
    histogram = SimilarityHistogram(bins=200)
    positive_and_topk_negatives(za, zb, k=3, chunk_size=chunk_size, world_size=1, histogram=histogram)
    summary = histogram.summary()

    values = negatives_by_hand(za, zb)
    expected, edges = np.histogram(values, bins=200, range=(-1.0, 1.0))
    assert summary.edges == pytest.approx(edges.tolist())
    assert summary.counts == expected.tolist()
    assert summary.count == 50 * 49
    assert summary.sum == pytest.approx(values.sum(), rel=1e-12)
    assert summary.sum_squares == pytest.approx((values**2).sum(), rel=1e-12)
    assert (summary.min, summary.max) == pytest.approx((values.min(), values.max()), rel=1e-12)


def test_values_a_hair_past_one_count_in_the_last_bin():
    """Catches a collapsed set (every dot product 1 + rounding) losing its negatives off the end."""
    z = torch.ones(5, 4) + 1e-7 * torch.arange(20.0).reshape(5, 4)
    histogram = SimilarityHistogram(bins=10)
    positive_and_topk_negatives(z, z, k=1, world_size=1, histogram=histogram)
    counts = histogram.summary().counts
    assert counts[-1] == 20 and sum(counts) == 20
