"""Uniformity when one row block spans several column tiles (``_TILE_COLS`` small), against a naive
float64 double loop over i < j."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ssl_app.metrics import embedding, uniformity


def naive_uniformity(z: torch.Tensor, t: float) -> float:
    """−log( 2/(N(N−1)) Σ_{i<j} exp(−t‖u_i − u_j‖²) ), float64, every pair written out."""
    u = F.normalize(z.double(), dim=1)
    n = u.shape[0]
    terms = [-t * (u[i] - u[j]).pow(2).sum() for i in range(n) for j in range(i + 1, n)]
    return -(torch.logsumexp(torch.stack(terms), dim=0) - math.log(len(terms))).item()


@pytest.mark.parametrize("t", [2.0, 40.0])  # 40 > 30: the shifted-tile path
@pytest.mark.parametrize(
    "n,chunk,tile",
    [(23, 5, 3), (24, 6, 4), (17, 17, 5), (31, 4, 2), (12, 3, 1)],
)
def test_blocks_cut_into_many_column_tiles_match_the_naive_sum(monkeypatch, n, chunk, tile, t):
    """Catches a tile that drops or double-counts pairs: the diagonal or the half weight applied in the
    wrong tile when a block's own columns are split, or the wrap of the partner columns."""
    monkeypatch.setattr(embedding, "_TILE_COLS", tile)
    z = torch.randn(n, 6, generator=torch.Generator().manual_seed(n + chunk)) * 2.0
    value = uniformity(z, t=t, chunk_size=chunk).item()
    assert value == pytest.approx(naive_uniformity(z, t), abs=1e-5 if t < 30 else 1e-4)


def test_many_tiles_equal_one_tile(monkeypatch):
    """Catches a result that depends on the tile width (float32 tiles, float64 accumulation)."""
    z = torch.randn(40, 8, generator=torch.Generator().manual_seed(0))
    whole = uniformity(z, chunk_size=7).item()
    monkeypatch.setattr(embedding, "_TILE_COLS", 3)
    assert uniformity(z, chunk_size=7).item() == pytest.approx(whole, abs=1e-6)
