"""The embedding metrics' precision and input contracts: float64 stays float64 end to end, mixed
dtypes are accepted, d = 1 is allowed, large t on near-collapsed sets does not overflow, and bad
arguments are rejected with the type named. Written to kill mutants that survived ``mutmut``."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ssl_app.metrics import positive_and_topk_negatives, tolerance, uniformity


def rows(n: int, d: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def naive_uniformity(z: torch.Tensor, t: float) -> float:
    u = F.normalize(z.double(), dim=1)
    squared = torch.pdist(u) ** 2
    return -(torch.logsumexp(-t * squared, dim=0) - math.log(squared.numel())).item()


def test_float64_uniformity_is_float64_accurate():
    """Catches float64 input silently computed in float32 (errors ~1e-7 instead of ~1e-14)."""
    z = rows(300, 16, 0)
    assert uniformity(z, t=2.0, chunk_size=64).item() == pytest.approx(naive_uniformity(z, 2.0), abs=1e-11)


def test_float64_tolerance_is_float64_accurate():
    """Catches class sums accumulated in float32 (or float64 rows added into a float32 buffer)."""
    z = rows(200, 12, 1)
    labels = torch.arange(200) % 7
    u = F.normalize(z, dim=1)
    same = (labels[:, None] == labels[None, :]) & ~torch.eye(200, dtype=torch.bool)
    expected = (u @ u.T)[same].mean().item()
    assert tolerance(z, labels, chunk_size=33).item() == pytest.approx(expected, abs=1e-13)


def test_topk_with_mixed_precision_inputs_matches_float64():
    """Catches anchors and candidates of different dtypes reaching one matmul (a RuntimeError)."""
    za, zb = rows(40, 8, 2), rows(40, 8, 3)
    positive, negatives = positive_and_topk_negatives(za, zb.float(), k=3, chunk_size=16)
    ref_positive, ref_negatives = positive_and_topk_negatives(za, zb, k=3, chunk_size=16)
    torch.testing.assert_close(positive.double(), ref_positive.double(), atol=1e-6, rtol=0)
    torch.testing.assert_close(negatives.double(), ref_negatives.double(), atol=1e-6, rtol=0)


def test_one_dimensional_embeddings_are_valid():
    """Catches d = 1 rejected: S^0 = {−1, +1} is a legal (if degenerate) sphere."""
    z = torch.tensor([[2.0], [-1.0], [0.5], [-3.0]])
    # unit rows +1, −1, +1, −1: 2 pairs at distance 0 and 4 at distance² 4
    expected = -math.log((2 * 1.0 + 4 * math.exp(-2.0 * 4)) / 6)
    assert uniformity(z, t=2.0).item() == pytest.approx(expected, abs=1e-6)  # float32 input


@pytest.mark.parametrize("t", [60.0, 200.0])
def test_large_t_on_a_near_collapsed_set_does_not_overflow(t):
    """Catches the per-tile shift removed: exp(2t·s) with s ≈ 1 leaves float32's range for t > ~44."""
    z = torch.randn(1, 8).repeat(50, 1) + 0.02 * rows(50, 8, 4, torch.float32)
    value = uniformity(z, t=t, chunk_size=16).item()
    assert math.isfinite(value)
    assert value == pytest.approx(naive_uniformity(z, t), abs=1e-4)


def test_non_tensor_input_error_names_its_type():
    """Catches an error that hides what the caller passed."""
    with pytest.raises(ValueError, match="z must be a torch.Tensor, got list"):
        uniformity([[1.0, 0.0], [0.0, 1.0]])


@pytest.mark.parametrize("chunk_size", [True, 2.5, 0])
def test_chunk_size_must_be_a_positive_int(chunk_size):
    """Catches a bool or float chunk size accepted (True would silently mean 1)."""
    with pytest.raises(ValueError, match="chunk_size"):
        uniformity(rows(5, 3, 5), chunk_size=chunk_size)
