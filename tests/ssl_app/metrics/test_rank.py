"""The singular-value spectrum and its power-law exponent α (α-ReQ), against numpy's SVD and polyfit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ssl_app.metrics.rank import effective_rank, power_law_exponent, singular_values, spectrum_effective_rank


def power_law_matrix(n: int, d: int, alpha: float, seed: int = 0) -> torch.Tensor:
    """Q1 diag(i^−α) Q2ᵀ with orthonormal Q1 [n, d], Q2 [d, d]: singular values exactly i^−α."""
    generator = torch.Generator().manual_seed(seed)
    q1, _ = torch.linalg.qr(torch.randn(n, d, dtype=torch.float64, generator=generator))
    q2, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=generator))
    sigma = torch.arange(1, d + 1, dtype=torch.float64) ** -alpha
    return q1 @ torch.diag(sigma) @ q2.T


def test_alpha_of_a_known_power_law_spectrum_and_the_svd_it_reads():
    z = power_law_matrix(200, 48, alpha=1.3)
    sigma = singular_values(z, normalize=False, chunk_size=17)
    assert torch.allclose(sigma, torch.from_numpy(np.linalg.svd(z.numpy(), compute_uv=False)), atol=1e-12)
    assert power_law_exponent(sigma).item() == pytest.approx(1.3, abs=1e-9)
    assert effective_rank(z, normalize=False).item() == pytest.approx(spectrum_effective_rank(sigma).item(), rel=1e-12)
    # a generic spectrum: α is numpy's least-squares slope of log σ on log rank, sign flipped
    noisy = torch.randn(300, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) @ torch.diag(
        torch.linspace(3, 0.1, 32, dtype=torch.float64)
    )
    s = np.linalg.svd(noisy.numpy(), compute_uv=False)
    expected = -np.polyfit(np.log(np.arange(1, s.size + 1)), np.log(s), 1)[0]
    assert power_law_exponent(singular_values(noisy, normalize=False)).item() == pytest.approx(expected, rel=1e-9)


def test_alpha_is_zero_for_equal_values_ignores_zero_ranks_and_is_nan_for_one_direction():
    assert power_law_exponent(torch.ones(16)).item() == pytest.approx(0.0, abs=1e-12)
    # 10 rows in 32 dimensions: 22 singular values are 0 and left out of the fit
    z = power_law_matrix(10, 10, alpha=0.7) @ torch.eye(10, 32, dtype=torch.float64)
    assert power_law_exponent(singular_values(z, normalize=False)).item() == pytest.approx(0.7, abs=1e-6)
    assert math.isnan(power_law_exponent(singular_values(torch.ones(5, 4))).item())  # collapsed onto one line
