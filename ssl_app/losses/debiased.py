"""Debiased contrastive loss (Chuang et al., NeurIPS 2020): InfoNCE whose negatives' sum is corrected
for the false negatives a class prior τ⁺ predicts."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ssl_app.checks import UnitIntervalOpenAbove, check
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


def check_class_prior(tau_plus: float, owner: str) -> float:
    """Return τ⁺ as a float; raise ``ConfigError`` unless it is in [0, 1)."""
    return check(UnitIntervalOpenAbove, tau_plus, f"{owner}: tau_plus (the class prior)")


def masked_softmax(logits: Tensor, mask: Tensor) -> Tensor:
    """Row-wise softmax over the entries in ``mask`` [N, M]; exactly 0 outside it and on empty rows."""
    has_any = mask.any(dim=1, keepdim=True)
    filled = torch.where(mask, logits, torch.where(has_any, float("-inf"), 0.0))
    return torch.where(mask, torch.softmax(filled, dim=1), 0.0)


def debiased_loss(
    logits: Tensor, pos_mask: Tensor, neg_mask: Tensor, tau_plus: float, temperature: float, beta: Optional[float] = None
) -> Tensor:
    """Per-anchor debiased loss [N] (module docstring of :class:`Debiased`; HCL's with ``beta``).

    For anchor i with n = |N(i)| negatives and each positive p, with e_j = exp(l_ij):

        R    = Σ_{k∈N(i)} e_k                       (``beta=None``)
        R    = n · Σ_k q_k e_k,  q = softmax_{N(i)}(β l)   (HCL: negatives importance-weighted)
        Ng_p = max((−τ⁺ n e_p + R) / (1 − τ⁺),  n e^{−1/τ})
        L_ip = −log(e_p / (e_p + Ng_p))

    averaged over P(i); 0 for an anchor without a positive. Everything is shifted by each row's
    largest logit (detached; it cancels), so exp() neither overflows nor underflows at small τ.
    """
    used = pos_mask | neg_mask
    shift = torch.where(used, logits, float("-inf")).amax(dim=1, keepdim=True).detach()
    shift = torch.where(torch.isfinite(shift), shift, 0.0)
    shifted = torch.where(used, logits - shift, 0.0)  # excluded entries: a finite 0, never read
    exp = shifted.exp()
    count = neg_mask.sum(dim=1, keepdim=True).to(exp.dtype)
    if beta is None:
        negatives = torch.where(neg_mask, exp, 0.0).sum(dim=1, keepdim=True)
    else:
        weights = masked_softmax(beta * logits, neg_mask)
        negatives = count * (weights * exp).sum(dim=1, keepdim=True)
    floor = count * torch.exp(-1.0 / temperature - shift)
    estimate = torch.clamp((negatives - tau_plus * count * exp) / (1 - tau_plus), min=floor)
    per_pair = torch.log(exp + estimate) - shifted
    num_pos = pos_mask.sum(dim=1)
    return torch.where(pos_mask, per_pair, 0.0).sum(dim=1) / num_pos.clamp_min(1)


def one_per_pair_chance(pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
    """``mean_i log(1 + |N(i)|)`` over the anchors with a positive (NaN when there is none): the
    value of a loss that scores each positive against the negatives alone, ``−log(e_p/(e_p + Σ e_k))``,
    at "every similarity equal". Sync-free."""
    has_pos = pos_mask.any(dim=1)
    per_anchor = torch.where(has_pos, (1 + neg_mask.sum(dim=1)).float().log(), 0.0)
    mean = per_anchor.sum() / has_pos.sum().clamp_min(1)
    return torch.where(has_pos.any(), mean, float("nan"))


@LOSSES.register
class Debiased(ContrastiveLoss):
    """Debiased contrastive loss (Chuang et al., NeurIPS 2020, arXiv 2007.00224).

    Of an anchor's n "negatives", a fraction τ⁺ (the class prior) are in truth of its class; the
    loss replaces their sum by an estimate of the true negatives' sum. For each positive p of
    anchor i, with e_j = exp(s_ij/τ):

        Ng_p = max( (−τ⁺ n e_p + Σ_{k∈N(i)} e_k) / (1 − τ⁺),  n e^{−1/τ} )
        L_i  = −1/|P(i)| Σ_{p∈P(i)} log( e_p / (e_p + Ng_p) )

    and the loss is the mean over anchors with a positive. This is the authors' code
    (github.com/chingyaoc/DCL, ``main.py``, ``train``): n is the anchor's number of negatives
    (2B − 2 in their SimCLR batch), the lower clamp n e^{−1/τ} (Ng's theoretical minimum, every
    negative at s = −1) is theirs, and the loss is a mean over anchors. With τ⁺ = 0 it is InfoNCE
    with one positive; several positives are each scored against the negatives alone (the other
    positives are in neither sum). Each negative's gradient is InfoNCE's, exp(s_ik/τ), scaled by
    1/(1 − τ⁺) — the same relative penalty (zero where the clamp holds).

    Chance value: with every similarity equal, Ng = n e^{c/τ} and ``L = mean_i log(1 + |N(i)|)``.

    Args:
        temperature: τ > 0 (default 0.5, the authors' ``main.py``).
        tau_plus: τ⁺ ∈ [0, 1), the class prior (default 0.1, the authors' ``main.py``).
    """

    def __init__(self, temperature: Temperature = 0.5, tau_plus: UnitIntervalOpenAbove = 0.1) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, type(self).__name__)
        self.tau_plus = check_class_prior(tau_plus, type(self).__name__)

    def hparams(self) -> dict[str, object]:
        return {"temperature": self.temperature_setting(), "tau_plus": self.tau_plus}

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
        return one_per_pair_chance(pos_mask, neg_mask)

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        logits = handover.sim.float() / tau
        per_anchor = debiased_loss(logits, handover.pos_mask, handover.neg_mask, self.tau_plus, tau)
        return LossTerms(mean_over_anchors(per_anchor, handover.pos_mask.any(dim=1)), logits=logits)
