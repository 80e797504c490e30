"""The spectral contrastive loss against a transcription of the authors' ``D`` (HaoChen et al.,
github.com/jhaochenz96/spectral_contrastive_learning, ``models/spectral.py``), SimCLR's masks
against the formula computed from the embeddings, and its option's check."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssl_app.errors import ConfigError
from ssl_app.losses import MaskedSimilarities, Spectral
from tests.ssl_app.losses.in_batch import assert_same_value_and_gradient, embeddings, simclr_handover


def authors_spectral(z1: torch.Tensor, z2: torch.Tensor, mu: float) -> torch.Tensor:
    """The authors' ``D(z1, z2, mu)``, transcribed (reading only): rows of norm ≥ √μ are moved onto the
    sphere of radius √μ; then −2 × (the elementwise mean of z1 ⊙ z2) × d, plus the mean of the squared
    off-diagonal entries of z1 z2ᵀ over all B² entries rescaled by B/(B − 1); the sum over μ."""
    radius = mu**0.5
    z1 = torch.where(z1.norm(dim=1, keepdim=True) < radius, z1, F.normalize(z1, dim=1) * radius)
    z2 = torch.where(z2.norm(dim=1, keepdim=True) < radius, z2, F.normalize(z2, dim=1) * radius)
    batch, dim = z1.shape
    part1 = -2 * (z1 * z2).mean() * dim
    squares = (z1 @ z2.T) ** 2
    off_diagonal = squares.triu(diagonal=1) + squares.tril(diagonal=-1)
    part2 = off_diagonal.mean() * batch / (batch - 1)
    return (part1 + part2) / mu


def cross_view_handover(out0: torch.Tensor, out1: torch.Tensor) -> MaskedSimilarities:
    """The authors' pairs: view-1 anchors against view-2 candidates, the same image the positive."""
    a, b = F.normalize(out0, dim=1), F.normalize(out1, dim=1)
    eye = torch.eye(a.shape[0], dtype=torch.bool)
    return MaskedSimilarities(a @ b.T, eye, ~eye)


@pytest.mark.parametrize("mu", [1.0, 0.5, 2.0])
def test_equals_the_authors_spectral_loss_on_normalised_embeddings(mu):
    """Catches a missing factor 2 on the positives, a square left off the negatives, the diagonal counted
    among the negatives, a mean over B² instead of B(B − 1) pairs, and the √μ clip or the division by μ
    forgotten (μ = 0.5 clips every unit vector, μ = 2 none), in value and gradient (1e-5)."""
    out0, out1 = embeddings(3, batch=9)
    ours = Spectral(mu=mu)
    assert_same_value_and_gradient(
        lambda a, b: ours(cross_view_handover(a, b)).value,
        lambda a, b: authors_spectral(F.normalize(a, dim=1), F.normalize(b, dim=1), mu),
        out0,
        out1,
    )


def test_with_simclr_masks_it_averages_over_each_anchors_positive_and_its_negatives():
    """Catches a loss that reads the anchor itself or another view of its image as a negative, or averages
    the squares over all pairs at once: SimCLR's hand-over against −2 s(i, i⁺) + mean over the 2B − 2
    embeddings of other images of s², averaged over the 2B anchors, from the embeddings (1e-5)."""
    out0, out1 = embeddings(5, batch=6)

    def definition(a, b):
        z = F.normalize(torch.cat([a, b]), dim=1)
        batch = a.shape[0]
        image = torch.arange(2 * batch) % batch
        sim = z @ z.T
        other_image = image[:, None] != image[None, :]
        positive = (z * torch.cat([z[batch:], z[:batch]])).sum(dim=1)
        negative = torch.where(other_image, sim**2, 0.0).sum(dim=1) / other_image.sum(dim=1)
        return (negative - 2 * positive).mean()

    assert_same_value_and_gradient(lambda a, b: Spectral()(simclr_handover(a, b)).value, definition, out0, out1)


def test_its_hardness_profile_pushes_each_negative_in_proportion_to_its_similarity():
    """Catches a gradient that is not 2 s/|N(i)| on a negative (the measured shares are s_ik / Σ_k s_ik)."""
    from ssl_app.losses.hardness import negative_shares

    out0, out1 = embeddings(1, batch=5)
    handover = cross_view_handover(out0.abs(), out1.abs())  # positive similarities: no share flips sign
    loss = Spectral()
    shares = negative_shares(lambda h: loss.call_terms(h, None, False).value, handover)
    sim = torch.where(handover.neg_mask, handover.sim, 0.0)
    torch.testing.assert_close(shares, sim / sim.sum(dim=1, keepdim=True), atol=1e-6, rtol=0)


@pytest.mark.parametrize("mu", [0.0, -1.0, float("inf")])
def test_a_bad_mu_is_one_config_error_naming_it(mu):
    with pytest.raises(ConfigError, match="Spectral: mu"):
        Spectral(mu=mu)
