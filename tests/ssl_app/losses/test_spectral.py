"""The spectral contrastive loss against a transcription of the authors' ``D`` (HaoChen et al.,
github.com/jhaochenz96/spectral_contrastive_learning, ``models/spectral.py``) on unit-norm and on raw
projections, SimCLR's masks (and SimCLR itself) against the formula computed from the embeddings, and
its option's check."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssl_app.errors import ConfigError
from ssl_app.losses import MaskedSimilarities, Spectral
from ssl_app.methods import SimCLR
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


def raw_cross_view_handover(h1: torch.Tensor, h2: torch.Tensor) -> MaskedSimilarities:
    """:func:`cross_view_handover` of raw projections as a method builds it: the cosines of the
    normalised projections, and the projections' norms (with gradient) of the anchors and candidates."""
    handover = cross_view_handover(h1, h2)
    handover.anchor_norms, handover.candidate_norms = h1.norm(dim=1), h2.norm(dim=1)
    return handover


def straddling(out: torch.Tensor, mu: float) -> torch.Tensor:
    """``out``'s rows rescaled to norms spread from 0.3 √μ to 2 √μ: some inside the ball, some clipped."""
    scales = torch.linspace(0.3, 2.0, out.shape[0]) * mu**0.5
    return F.normalize(out, dim=1) * scales.roll(1)[:, None]


@pytest.mark.parametrize("mu", [1.0, 0.5, 2.0])
def test_equals_the_authors_spectral_loss_on_raw_projections(mu):
    """Catches the √μ clip left off (or applied to the cosines rather than to the embeddings), a norm
    clipped at 1 instead of √μ, the anchors' norms used for the candidates, and a gradient through the
    norm of a clipped embedding (the authors' has none): the hand-over of raw projections with norms on
    both sides of √μ against the authors' ``D`` on the same raw projections, in value and gradient (1e-5)."""
    out0, out1 = embeddings(11, batch=9)
    h1, h2 = straddling(out0, mu), straddling(out1.flip(0), mu).flip(0)
    for h in (h1, h2):
        assert (h.norm(dim=1) < mu**0.5).any() and (h.norm(dim=1) > mu**0.5).any()
    ours = Spectral(mu=mu)
    assert_same_value_and_gradient(
        lambda a, b: ours(raw_cross_view_handover(a, b)).value, lambda a, b: authors_spectral(a, b, mu), h1, h2
    )


@pytest.mark.parametrize("mu", [1.0, 0.5, 2.0])
def test_unit_norms_give_the_loss_of_a_hand_over_without_norms(mu):
    """Catches a loss that reads absent norms as anything but unit-norm embeddings (μ = 0.5 clips them)."""
    out0, out1 = embeddings(12, batch=7)
    without = cross_view_handover(out0, out1)
    with_ones = cross_view_handover(out0, out1)
    with_ones.anchor_norms, with_ones.candidate_norms = torch.ones(7), torch.ones(7)
    torch.testing.assert_close(Spectral(mu=mu)(with_ones).value, Spectral(mu=mu)(without).value, atol=1e-6, rtol=0)


def test_norms_that_do_not_fit_sim_are_one_error_naming_them():
    handover = cross_view_handover(*embeddings(13, batch=5))
    handover.anchor_norms, handover.candidate_norms = torch.ones(5), torch.ones(4)
    with pytest.raises(ValueError, match=r"candidate_norms must have shape \(5,\)"):
        Spectral()(handover)


class CapturedProjections:
    """The raw projections ``h`` of the last pass through a projection head (a forward hook), kept with gradient."""

    def __init__(self, head: torch.nn.Module) -> None:
        self.h: torch.Tensor | None = None
        head.register_forward_hook(self.keep)

    def keep(self, module, inputs, output) -> None:
        if output.requires_grad:
            output.retain_grad()
        self.h = output


@pytest.mark.parametrize("mu_at", [0.25, 0.5, 0.75])
def test_simclr_hands_over_what_clips_its_raw_projections(mu_at):
    """Catches a method whose norms are not those of its projections before normalisation, candidates'
    norms not in the order of sim's columns, and norms without gradient: SimCLR's loss on a batch equals
    the formula on its raw projections clipped to the ball of radius √μ, with √μ the given quantile of
    their norms (some clipped, some not), in value and in gradient with respect to the raw projections (1e-5)."""
    torch.manual_seed(0)
    model = SimCLR(backbone="small_cnn", proj_hidden_dim=16, proj_dim=8, loss=Spectral())
    captured = CapturedProjections(model.projection_head)
    images = torch.rand(2, 6, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    batch = ((images[0], images[1]), torch.arange(6) % 3, torch.arange(6))
    with torch.no_grad():
        model.contrast(batch)
    mu = float(captured.h.norm(dim=1).quantile(mu_at)) ** 2
    model.loss = Spectral(mu=mu)
    ours = model.compute_loss(model.contrast(batch)).value
    ours.backward()
    h = captured.h
    reference = h.detach().clone().requires_grad_(True)
    radius = mu**0.5
    clipped = reference * (radius / reference.norm(dim=1, keepdim=True)).clamp(max=1.0)
    image = torch.arange(12) % 6
    dot = clipped @ clipped.T
    other_image = image[:, None] != image[None, :]
    positive = (clipped * clipped.roll(6, dims=0)).sum(dim=1)
    negative = torch.where(other_image, dot**2, 0.0).sum(dim=1) / other_image.sum(dim=1)
    expected = ((negative - 2 * positive) / mu).mean()
    expected.backward()
    torch.testing.assert_close(ours.detach(), expected.detach(), atol=1e-5, rtol=0)
    assert reference.grad.abs().max() > 1e-3
    torch.testing.assert_close(h.grad, reference.grad, atol=1e-5, rtol=0)


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
