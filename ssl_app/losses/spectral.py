"""Spectral contrastive loss (HaoChen et al., NeurIPS 2021): no softmax and no temperature."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ssl_app.checks import PositiveFinite, check
from ssl_app.losses.base import ContrastiveLoss, LossTerms, MaskedSimilarities, Tau, mean_over_anchors
from ssl_app.losses.registry import LOSSES


@LOSSES.register
class Spectral(ContrastiveLoss):
    """Spectral contrastive loss (HaoChen et al., NeurIPS 2021): −2·E[z·z⁺] + E[(z·z⁻)²], no softmax, no τ.

    The authors' code (github.com/jhaochenz96/spectral_contrastive_learning, ``models/spectral.py``,
    ``D(z1, z2, mu)``) first moves every embedding of norm ≥ √μ onto the sphere of radius √μ,
    ``z̃ = z · min(1, √μ/‖z‖)``, then takes the mean over the B positive pairs of ``−2 z̃1_i·z̃2_i``, plus
    the mean over the B(B−1) pairs of different images of ``(z̃1_i·z̃2_j)²``, and divides the sum by μ.
    The loss reads the norms ``n`` of the projections before their normalisation
    (``needs_embedding_norms``: ``MaskedSimilarities.anchor_norms``/``candidate_norms``, which every
    method fills) beside their cosines ``s``, so ``z̃_i·z̃_j = s_ij · min(n_i, √μ) · min(n_j, √μ)``, and
    per anchor i with positives P(i) and negatives N(i):

        L_i = ( −2/|P(i)| Σ_{p∈P(i)} z̃_i·z̃_p + 1/|N(i)| Σ_{k∈N(i)} (z̃_i·z̃_k)² ) / μ

    averaged over the anchors with a positive (an anchor without negatives keeps its positive term).
    With two views and anchors z1 against candidates z2 this is the authors' ``D`` on the raw
    projections, in value and gradient (tests/ssl_app/losses/test_spectral.py); with SimCLR, MoCo or
    the memory bank the expectations run over that method's positives and negatives. A hand-over
    without norms is read as unit-norm embeddings (``z̃_i·z̃_j = min(1, μ) s_ij``).

    The gradient on a negative's similarity is ``2 c_ik² s_ik / (μ |N(i)|)``, with ``c_ik = min(n_i, √μ)
    min(n_k, √μ)``: proportional to the similarity itself, so a negative is pushed towards orthogonality,
    not away without end, and one with s < 0 is pulled back to 0 (its share in the hardness profile is
    negative). No chance value (the value moves with the common
    similarity).

    Args:
        mu: μ > 0, the squared radius the authors clip the embeddings to (their default 1).
    """

    needs_embedding_norms = True

    def __init__(self, mu: PositiveFinite = 1.0) -> None:
        super().__init__()
        self.mu = check(PositiveFinite, mu, "Spectral: mu")

    def hparams(self) -> dict[str, object]:
        return {"mu": self.mu}

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        pos_mask, neg_mask = handover.pos_mask, handover.neg_mask
        dot = clipped_products(handover, self.mu)
        num_pos, num_neg = pos_mask.sum(dim=1), neg_mask.sum(dim=1)
        positive = torch.where(pos_mask, dot, 0.0).sum(dim=1) / num_pos.clamp_min(1)
        negative = torch.where(neg_mask, dot.square(), 0.0).sum(dim=1) / num_neg.clamp_min(1)
        has_pos = num_pos > 0
        per_anchor = torch.where(has_pos, (negative - 2 * positive) / self.mu, 0.0)
        return LossTerms(mean_over_anchors(per_anchor, has_pos), logits=penalty_logits(dot) if with_stats else None)


def clipped_products(handover: MaskedSimilarities, mu: float) -> Tensor:
    """``z̃_i·z̃_j = s_ij · min(n_i, √μ) · min(n_j, √μ)`` [N, M] in float32: the products of the embeddings
    clipped to the ball of radius √μ, from the cosines and the norms (absent norms: 1)."""
    sim = handover.sim.float()
    if handover.anchor_norms is None or handover.candidate_norms is None:
        return sim * min(1.0, mu)
    radius = math.sqrt(mu)
    anchors = handover.anchor_norms.float().clamp(max=radius)
    candidates = handover.candidate_norms.float().clamp(max=radius)
    return sim * anchors[:, None] * candidates[None, :]


def penalty_logits(dot: Tensor) -> Tensor:
    """``log |z̃_i·z̃_k|``: each negative's penalty is ∝ its product, so its relative penalty (what
    ``effective_negatives`` reads) is ∝ its magnitude."""
    return dot.detach().abs().clamp_min(torch.finfo(torch.float32).tiny).log()
