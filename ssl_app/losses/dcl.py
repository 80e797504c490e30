"""DCL and DCLW: InfoNCE without the positive in its denominator (Yeh et al., ECCV 2022)."""

from __future__ import annotations

import torch
from torch import Tensor

from ssl_app import distributed
from ssl_app.checks import PositiveFinite, check
from ssl_app.losses.base import (
    ContrastiveLoss,
    LossTerms,
    MaskedSimilarities,
    Tau,
    Temperature,
    check_temperature,
    mean_over_anchors,
)
from ssl_app.losses.registry import LOSSES


def masked_logsumexp(logits: Tensor, mask: Tensor) -> Tensor:
    """``log Σ_{j: mask_ij} exp(logits_ij)`` per row [N]; 0 (and zero gradient) for a row with no entry.

    Entries outside the mask are never read; a row without any entry would be ``log 0 = −inf``.
    """
    has_any = mask.any(dim=1, keepdim=True)
    filled = torch.where(mask, logits, torch.where(has_any, float("-inf"), 0.0))
    return torch.logsumexp(filled, dim=1).masked_fill(~has_any.squeeze(1), 0.0)


def decoupled_loss(logits: Tensor, pos_mask: Tensor, neg_mask: Tensor, pos_weight: Tensor | None = None) -> Tensor:
    """Per-anchor ``−1/|P(i)| Σ_p w_ip l_ip + log Σ_{k∈N(i)} exp(l_ik)`` [N] (``w`` = 1 if ``None``).

    Anchors without a positive get 0; an anchor without negatives keeps only its positive term.
    """
    num_pos = pos_mask.sum(dim=1)
    weighted = logits if pos_weight is None else logits * pos_weight
    positive = torch.where(pos_mask, weighted, 0.0).sum(dim=1) / num_pos.clamp_min(1)
    per_anchor = masked_logsumexp(logits, neg_mask) - positive
    return per_anchor.masked_fill(num_pos == 0, 0.0)


def decoupled_chance(pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
    """``mean_i log |N(i)|`` over the anchors with a positive: DCL at "every similarity equal" (c),
    where ``L_i = −c/τ + log(|N(i)| e^{c/τ})``. NaN (no chance value) when no anchor has a positive
    or one with a positive has no negative (its ``L_i = −c/τ`` moves with c). Sync-free."""
    has_pos = pos_mask.any(dim=1)
    count = neg_mask.sum(dim=1)
    defined = has_pos.any() & ~(has_pos & (count == 0)).any()
    mean = torch.where(has_pos, count.clamp_min(1).float().log(), 0.0).sum() / has_pos.sum().clamp_min(1)
    return torch.where(defined, mean, float("nan"))


@torch.no_grad()
def von_mises_fisher_weights(sim: Tensor, pos_mask: Tensor, sigma: float) -> Tensor:
    """DCLW's positive weights ``w = 2 − P · softmax(s⁺/σ)`` [N, M] (1 off the positives), detached.

    The softmax runs over every positive pair of the step on every rank and P counts them, so
    2 ranks weigh as one process; with SimCLR's two views (each pair seen from both sides) this
    is lightly's ``2 − B · softmax`` over the batch's B pairs. Sync-free.
    """
    scaled = sim / sigma
    masked = torch.where(pos_mask, scaled, float("-inf"))
    # Every rank joins each collective, also one with an empty matrix (no amax of nothing).
    top = distributed.all_reduce_max(masked.amax() if masked.numel() else masked.new_tensor(float("-inf")))
    top = torch.where(torch.isfinite(top), top, 0.0)
    exp = torch.where(pos_mask, (scaled - top).exp(), 0.0)
    totals = distributed.all_reduce_sum(torch.stack([exp.sum(), pos_mask.sum().to(exp.dtype)]))
    weights = 2 - totals[1] * exp / totals[0].clamp_min(torch.finfo(exp.dtype).tiny)
    return torch.where(pos_mask, weights, 1.0)


@LOSSES.register
class DCL(ContrastiveLoss):
    """Decoupled contrastive loss (Yeh et al., ECCV 2022): InfoNCE without the positive in its denominator.

    Per anchor i (arXiv 2110.06848) with positives P(i) and negatives N(i):

        L_i = −1/|P(i)| Σ_{p∈P(i)} s_ip/τ + log Σ_{k∈N(i)} exp(s_ik/τ)

    and the loss is the mean over anchors with a positive (an anchor without negatives keeps only
    its positive term). The gradient on a negative is InfoNCE's softmax weight over the negatives
    alone, exp(s_ik/τ)/Σ_{k'} exp(s_ik'/τ); the positive's pull is a constant 1/τ, no longer damped
    by 1 − P(positive) (the "negative–positive coupling" the paper removes). With SimCLR's two views
    it is lightly's ``DCLLoss`` (tests/ssl_app/losses/test_dcl.py).

    Chance value: with every similarity equal, ``L = mean_i log |N(i)|`` (none when an anchor with a
    positive has no negative).

    Args:
        temperature: τ > 0 (default 0.1, lightly's ``DCLLoss``).
    """

    def __init__(self, temperature: Temperature = 0.1) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, type(self).__name__)

    def hparams(self) -> dict[str, object]:
        return {"temperature": self.temperature_setting()}

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
        return decoupled_chance(pos_mask, neg_mask)

    def positive_weights(self, sim: Tensor, pos_mask: Tensor) -> Tensor | None:
        """The weights on the positive terms (``None``: 1)."""
        return None

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        sim = handover.sim.float()
        logits = sim / tau
        weights = self.positive_weights(sim, handover.pos_mask)
        per_anchor = decoupled_loss(logits, handover.pos_mask, handover.neg_mask, weights)
        return LossTerms(mean_over_anchors(per_anchor, handover.pos_mask.any(dim=1)), logits=logits)


@LOSSES.register
class DCLW(DCL):
    """DCLW (Yeh et al., ECCV 2022): DCL with each positive weighted by a von Mises–Fisher term.

    The weight is ``w = 2 − P · softmax(s⁺/σ)`` (detached; the softmax over the step's P positive pairs):

        L_i = −1/|P(i)| Σ_{p∈P(i)} w_ip s_ip/τ + log Σ_{k∈N(i)} exp(s_ik/τ)

    so a pair that already agrees (large s⁺) is pulled less and a disagreeing one more; weights
    average 1. The negatives' gradient is DCL's. Under DDP the softmax runs over every rank's pairs
    (2 ranks = 1 process; lightly's ``DCLWLoss`` uses each process's own batch). With SimCLR's two
    views it is lightly's ``DCLWLoss`` (tests/ssl_app/losses/test_dclw.py). Chance value: DCL's (every
    w is 1 when the similarities are equal).

    Args:
        temperature: τ > 0 (default 0.1, lightly's).
        sigma: σ > 0, the scale of the weight's softmax (default 0.5, the paper's and lightly's).
    """

    def __init__(self, temperature: Temperature = 0.1, sigma: PositiveFinite = 0.5) -> None:
        super().__init__(temperature)
        self.sigma = check(PositiveFinite, sigma, "DCLW: sigma")

    def hparams(self) -> dict[str, object]:
        return {"temperature": self.temperature_setting(), "sigma": self.sigma}

    def positive_weights(self, sim: Tensor, pos_mask: Tensor) -> Tensor:
        return von_mises_fisher_weights(sim, pos_mask, self.sigma)
