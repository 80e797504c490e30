"""MACL, the model-aware contrastive loss (Huang et al., ICML 2023): InfoNCE with a temperature that
follows the batch's alignment, and each positive reweighted by 1/(1 − P_pos)."""

from __future__ import annotations

import numbers

import torch
from torch import Tensor

from ssl_app import distributed
from ssl_app.errors import ConfigError
from ssl_app.losses.base import (
    ContrastiveLoss,
    LossTerms,
    MaskedSimilarities,
    check_temperature,
    mean_over_anchors,
)
from ssl_app.registry import LOSSES

#: Keeps 1/(1 − P) finite when the positive holds all the softmax (lightly's ``MACLLoss.eps``).
EPS = 1e-8


def adaptive_temperature(base: float, alpha: float, a_0: float, mean_positive: Tensor) -> Tensor:
    """MACL's τ = τ₀ · (1 + α (Ā⁺ − A₀)) from the step's mean positive similarity Ā⁺ (detached).

    The whole temperature rule of the loss: a temperature policy can take it over unchanged.
    """
    return base * (1 + alpha * (mean_positive - a_0))


@torch.no_grad()
def global_mean_positive(sim: Tensor, pos_mask: Tensor, default: float) -> Tensor:
    """Mean similarity of every rank's positive pairs, 0-d and detached (``default`` when there is
    none), so that 2 ranks see the temperature of one process. Sync-free."""
    sums = torch.stack([torch.where(pos_mask, sim, 0.0).sum(), pos_mask.sum().to(sim.dtype)])
    sums = distributed.all_reduce_sum(sums)
    return torch.where(sums[1] > 0, sums[0] / sums[1].clamp_min(1), default)


def check_unit_interval(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        raise ConfigError(f"MACL: {name} must be in [0, 1], got {value!r}")
    return float(value)


@LOSSES.register
class MACL(ContrastiveLoss):
    """Model-aware contrastive loss (Huang et al., ICML 2023, arXiv 2207.07874).

    InfoNCE with an adaptive temperature plus a reweighting of each positive's term. With Ā⁺ the
    mean positive similarity of the step (over every rank's pairs, detached):

        τ    = τ₀ · (1 + α (Ā⁺ − A₀))                              (:func:`adaptive_temperature`)
        P_ip = exp(s_ip/τ) / Σ_{a∈A(i)} exp(s_ia/τ),   A(i) = P(i) ∪ N(i)
        L_i  = −1/|P(i)| Σ_{p∈P(i)} log(P_ip) / (1 − P_ip + ε)     (the weight detached, ε = 1e-8)

    and the loss is the mean over anchors with a positive. A well-aligned model (large Ā⁺) gets a
    larger τ, a flatter penalty on its negatives (less uniformity pressure); the weight 1/(1 − P)
    cancels InfoNCE's 1 − P damping of the gradient on a positive that already dominates. Each
    negative's gradient is InfoNCE's softmax weight at τ, times the positive's weight. This is
    lightly's ``MACLLoss`` (tests/ssl_app/losses/test_macl.py), with several positives averaged as
    InfoNCE does. The diagnostics add ``temperature`` (the step's τ).

    Chance value: with every similarity equal each P_ip = 1/|A(i)|, so
    ``L = mean_i log|A(i)| / (1 − 1/|A(i)| + ε)`` (τ does not matter).

    Args:
        temperature: τ₀ > 0 (default 0.1, lightly's).
        alpha: α ∈ [0, 1], how strongly τ follows the alignment (default 0.5, lightly's).
        a_0: A₀ ∈ [0, 1], the alignment at which τ = τ₀ (default 0, lightly's). α · (1 + A₀) must
            be < 1, so that τ > 0 for every Ā⁺ ≥ −1.
    """

    def __init__(self, temperature: float = 0.1, alpha: float = 0.5, a_0: float = 0.0) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, "MACL")
        self.alpha = check_unit_interval(alpha, "alpha")
        self.a_0 = check_unit_interval(a_0, "a_0")
        if self.alpha * (1 + self.a_0) >= 1:
            raise ConfigError(
                f"MACL: alpha * (1 + a_0) must be < 1 so that the temperature stays > 0, got alpha={alpha!r}, a_0={a_0!r}"
            )

    def hparams(self) -> dict[str, object]:
        return {"temperature": self.temperature, "alpha": self.alpha, "a_0": self.a_0}

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
        has_pos = pos_mask.any(dim=1)
        candidates = (pos_mask | neg_mask).sum(dim=1).clamp_min(1).float()
        per_anchor = torch.where(has_pos, candidates.log() / (1 - 1 / candidates + EPS), 0.0)
        mean = per_anchor.sum() / has_pos.sum().clamp_min(1)
        return torch.where(has_pos.any(), mean, float("nan"))

    def terms(self, handover: MaskedSimilarities, with_stats: bool) -> LossTerms:
        sim, pos_mask, neg_mask = handover.sim.float(), handover.pos_mask, handover.neg_mask
        mean_positive = global_mean_positive(sim, pos_mask, self.a_0)
        tau = adaptive_temperature(self.temperature, self.alpha, self.a_0, mean_positive)
        logits = sim / tau
        num_pos = pos_mask.sum(dim=1)
        has_pos = num_pos > 0
        # As in masked_info_nce: excluded entries at -inf, or at 0 in a row without a positive.
        fill = torch.where(has_pos, float("-inf"), 0.0).unsqueeze(1)
        log_prob = torch.log_softmax(torch.where(pos_mask | neg_mask, logits, fill), dim=1)
        weight = 1 / (1 - log_prob.detach().exp() + EPS)
        per_anchor = -torch.where(pos_mask, weight * log_prob, 0.0).sum(dim=1) / num_pos.clamp_min(1)
        terms = LossTerms(mean_over_anchors(per_anchor, has_pos), logits=logits)
        if with_stats:
            terms.extra["temperature"] = tau.detach()
        return terms
