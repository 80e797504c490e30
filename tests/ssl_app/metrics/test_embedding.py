"""The metric functions against direct O(N²) formulas, in one process."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ssl_app.metrics import alignment, embedding, positive_and_topk_negatives, tolerance, uniformity

N, D = 2000, 128


def embeddings(n: int = N, d: int = D, seed: int = 0, scale: float = 3.0) -> torch.Tensor:
    """Random rows, deliberately *not* unit-norm: the functions normalise inside."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=generator) * scale


def unit64(z: torch.Tensor) -> torch.Tensor:
    return F.normalize(z.double(), dim=1)


# ---------------------------------------------------------------------------------- alignment
@pytest.mark.parametrize("alpha", [1.0, 2.0, 3.0])
def test_alignment_matches_direct_formula(alpha):
    za, zb = embeddings(seed=0), embeddings(seed=1)
    ua, ub = unit64(za), unit64(zb)
    expected = ((ua - ub) ** 2).sum(dim=1).pow(alpha / 2).mean()
    assert alignment(za, zb, alpha=alpha).item() == pytest.approx(expected.item(), abs=1e-5)


def test_alignment_in_chunks_that_do_not_divide_n(monkeypatch):
    za, zb = embeddings(1001, seed=0), embeddings(1001, seed=1)
    whole = alignment(za, zb).item()
    monkeypatch.setattr(embedding, "_ROW_CHUNK", 97)
    assert alignment(za, zb).item() == pytest.approx(whole, abs=1e-9)


def test_alignment_of_identical_and_opposite_views():
    z = embeddings()
    assert alignment(z, z).item() == pytest.approx(0.0, abs=1e-6)
    assert alignment(z, -z).item() == pytest.approx(4.0, abs=1e-5)


# --------------------------------------------------------------------------------- uniformity
def pdist_uniformity(z: torch.Tensor, t: float) -> float:
    """−log mean_{i<j} exp(−t ||z_i − z_j||²), straight from torch.pdist, in float64."""
    squared = torch.pdist(unit64(z)) ** 2
    return -(torch.logsumexp(-t * squared, dim=0) - math.log(squared.numel())).item()


@pytest.mark.parametrize("n", [N, N + 1])  # the pair band differs for odd and even N
@pytest.mark.parametrize("t", [0.5, 2.0])
def test_uniformity_matches_pdist(n, t):
    z = embeddings(n)
    assert uniformity(z, t=t).item() == pytest.approx(pdist_uniformity(z, t), abs=1e-5)


def test_uniformity_large_t_is_shifted_not_overflowed():
    # exp(2t·s) with t = 60 would overflow float32; the tiles are shifted by their maximum.
    z = embeddings(500)
    value = uniformity(z, t=60.0).item()
    assert math.isfinite(value)
    assert value == pytest.approx(pdist_uniformity(z, 60.0), rel=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 7, 333, 1000, 5000])
def test_uniformity_chunk_size_does_not_change_the_result(chunk_size):
    # Float32 tiles are summed in a different order for each chunk size: equal to ~1e-9, not bitwise.
    z = embeddings(1001)
    assert uniformity(z, chunk_size=chunk_size).item() == pytest.approx(uniformity(z).item(), abs=1e-7)


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_uniformity_tiny_sets(n):
    z = embeddings(n, d=3)
    assert uniformity(z).item() == pytest.approx(pdist_uniformity(z, 2.0), abs=1e-6)


def test_uniformity_of_random_sphere_points_is_the_papers_cap():
    # Exact expectation: E exp(4 s) for s = z_i·z_j on S^127 is 0F1(; 64; 4), and
    # 4 − log 0F1(; 64; 4) = 3.93753. Over 2000 points the estimate has a standard deviation of
    # ~4e-4 (measured over 10 seeds); a wrong t, a missing 2t offset or ||·|| instead of ||·||²
    # move it by more than 0.06, far outside the 2e-3 window.
    hypergeometric = sum(4.0**k / (math.factorial(k) * math.prod(64 + i for i in range(k))) for k in range(30))
    expected = 4.0 - math.log(hypergeometric)
    assert expected == pytest.approx(3.9375, abs=1e-4)
    values = [uniformity(embeddings(seed=seed)).item() for seed in range(2)]
    for value in values:
        assert value == pytest.approx(3.9375, abs=2e-3)


def test_uniformity_of_a_collapsed_set_is_zero():
    z = torch.ones(300, 16)
    assert uniformity(z).item() == pytest.approx(0.0, abs=1e-6)


def test_uniformity_ignores_autocast_and_scale():
    z = embeddings(600)
    reference = uniformity(z).item()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert uniformity(z).item() == pytest.approx(reference, abs=1e-9)
    assert uniformity(z * 100).item() == pytest.approx(reference, abs=1e-6)
    assert uniformity(z.double()).item() == pytest.approx(reference, abs=1e-6)


# ---------------------------------------------------------------------------------- tolerance
def direct_tolerance(z: torch.Tensor, labels: torch.Tensor) -> float:
    u = unit64(z)
    same = (labels[:, None] == labels[None, :]) & ~torch.eye(len(labels), dtype=torch.bool)
    return (u @ u.T)[same].mean().item()


def clustered(n: int = N, classes: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings with a class structure, so the tolerance is far from 0."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=generator)
    centres = torch.randn(classes, D, generator=generator)
    return centres[labels] + torch.randn(n, D, generator=generator), labels


def test_tolerance_matches_direct_formula():
    z, labels = clustered()
    expected = direct_tolerance(z, labels)
    assert expected > 0.3  # the data really has class structure
    assert tolerance(z, labels).item() == pytest.approx(expected, abs=1e-5)


def test_tolerance_with_arbitrary_label_values_and_singletons():
    z, labels = clustered(1001)
    labels = labels * 1000 - 7  # negative, non-contiguous values
    labels[:5] = torch.tensor([10**6, 10**6 + 1, 10**6 + 2, 10**6 + 3, 10**6 + 4])  # singletons
    assert tolerance(z, labels).item() == pytest.approx(direct_tolerance(z, labels), abs=1e-5)


@pytest.mark.parametrize("chunk_size", [1, 7, 333, 5000])
def test_tolerance_chunk_size_does_not_change_the_result(chunk_size):
    z, labels = clustered(1001)
    assert tolerance(z, labels, chunk_size=chunk_size).item() == pytest.approx(tolerance(z, labels).item(), abs=1e-12)


def test_tolerance_without_shared_labels_is_nan():
    assert math.isnan(tolerance(embeddings(10), torch.arange(10)).item())


# ------------------------------------------------------------------------- top-k negatives
def direct_topk(za, zb, k):
    sim = unit64(za) @ unit64(zb).T
    positive = sim.diagonal().clone()
    sim.fill_diagonal_(float("-inf"))
    return positive, sim.topk(k, dim=1).values


@pytest.mark.parametrize("chunk_size", [None, 7, 333])
def test_topk_matches_direct_formula(chunk_size):
    za, zb = embeddings(seed=0), embeddings(seed=1)
    za = za + 2 * zb  # correlated views, so the positive stands out
    positive, negatives = positive_and_topk_negatives(za, zb, k=10, chunk_size=chunk_size)
    expected_positive, expected_negatives = direct_topk(za, zb, 10)
    assert positive.shape == (N,) and negatives.shape == (N, 10)
    torch.testing.assert_close(positive.double(), expected_positive, atol=1e-5, rtol=0)
    torch.testing.assert_close(negatives.double(), expected_negatives, atol=1e-5, rtol=0)
    assert (negatives[:, :-1] >= negatives[:, 1:]).all()  # descending


def test_topk_excludes_only_the_positive():
    # Duplicate candidates: j ≠ i with zb_j == zb_i must still count as a negative.
    zb = embeddings(50, d=8).repeat(2, 1)
    positive, negatives = positive_and_topk_negatives(zb, zb, k=1, chunk_size=13)
    torch.testing.assert_close(positive, torch.ones(100), atol=1e-6, rtol=0)
    torch.testing.assert_close(negatives[:, 0], torch.ones(100), atol=1e-6, rtol=0)


def test_topk_with_all_negatives():
    za, zb = embeddings(30, d=4, seed=0), embeddings(30, d=4, seed=1)
    _, negatives = positive_and_topk_negatives(za, zb, k=29)
    torch.testing.assert_close(negatives.double(), direct_topk(za, zb, 29)[1], atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------ bad inputs
z2 = torch.zeros(4, 3) + 1.0
BAD_CALLS = [
    ("za", lambda: alignment(torch.ones(4), z2)),
    ("za and zb", lambda: alignment(z2, torch.ones(5, 3))),
    ("alpha", lambda: alignment(z2, z2, alpha=0)),
    ("z", lambda: uniformity(torch.ones(2, 3, 4))),
    ("z", lambda: uniformity(torch.ones(1, 3))),
    ("z", lambda: uniformity(torch.ones(4, 3, dtype=torch.long))),
    ("z", lambda: uniformity([[1.0, 0.0]])),
    ("t", lambda: uniformity(z2, t=-1.0)),
    ("chunk_size", lambda: uniformity(z2, chunk_size=0)),
    ("world_size", lambda: uniformity(z2, world_size=2)),
    ("rank", lambda: uniformity(z2, rank=1)),
    ("labels", lambda: tolerance(z2, torch.zeros(5, dtype=torch.long))),
    ("labels", lambda: tolerance(z2, torch.zeros(4, 1, dtype=torch.long))),
    ("labels", lambda: tolerance(z2, torch.zeros(4))),
    ("zb", lambda: positive_and_topk_negatives(z2, torch.ones(4))),
    ("za and zb", lambda: positive_and_topk_negatives(z2, torch.ones(4, 2))),
    ("k", lambda: positive_and_topk_negatives(z2, z2, k=4)),
    ("k", lambda: positive_and_topk_negatives(z2, z2, k=0)),
]


@pytest.mark.parametrize("name, call", BAD_CALLS, ids=[f"{i}-{name}" for i, (name, _) in enumerate(BAD_CALLS)])
def test_bad_inputs_raise_a_value_error_naming_the_argument(name, call):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()
