"""MACL, the model-aware contrastive loss (Huang et al., ICML 2023): InfoNCE with a temperature that
follows the batch's alignment, and each positive reweighted by 1/(1 − P_pos)."""

from __future__ import annotations

import torch
from torch import Tensor

from ssl_app.checks import ClosedUnitInterval
from ssl_app.errors import ConfigError
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
from ssl_app.temperature import Adaptive, TemperaturePolicy
from ssl_app.temperature.adaptive import adaptive_temperature, check_stays_positive, check_unit_interval, global_mean_positive

__all__ = ["EPS", "MACL", "adaptive_temperature", "global_mean_positive"]

#: Keeps 1/(1 − P) finite when the positive holds all the softmax (lightly's ``MACLLoss.eps``).
EPS = 1e-8


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
    InfoNCE does. Its τ is the policy ``ssl_app.temperature.Adaptive(temperature, alpha, a_0)``; a policy
    given as ``temperature`` replaces that rule (then alpha and a_0 stay at their defaults), and MACL is
    its reweighting at that τ. The diagnostics' ``temperature`` is the step's τ, as for every loss with one.

    Chance value: with every similarity equal each P_ip = 1/|A(i)|, so
    ``L = mean_i log|A(i)| / (1 − 1/|A(i)| + ε)`` (τ does not matter).

    Args:
        temperature: τ₀ > 0 (default 0.1, lightly's), or a policy (``ssl_app.temperature``) in place of the rule.
        alpha: α ∈ [0, 1], how strongly τ follows the alignment (default 0.5, lightly's).
        a_0: A₀ ∈ [0, 1], the alignment at which τ = τ₀ (default 0, lightly's). α · (1 + A₀) must
            be < 1, so that τ > 0 for every Ā⁺ ≥ −1.
    """

    def __init__(self, temperature: Temperature = 0.1, alpha: ClosedUnitInterval = 0.5, a_0: ClosedUnitInterval = 0.0) -> None:
        super().__init__()
        self.alpha = check_unit_interval(alpha, "MACL: alpha")
        self.a_0 = check_unit_interval(a_0, "MACL: a_0")
        self.base_temperature: float | None = None
        if isinstance(temperature, TemperaturePolicy):
            if (self.alpha, self.a_0) != (0.5, 0.0):
                raise ConfigError(
                    "MACL: alpha and a_0 shape its own adaptive τ from a number temperature; with temperature given as a "
                    "policy, leave them at their defaults (set alpha and a0 on ssl_app.temperature.Adaptive instead)"
                )
            self.temperature = temperature
        else:
            self.base_temperature = check_temperature(temperature, "MACL").constant
            check_stays_positive(self.alpha, self.a_0, "MACL", ("alpha", "a_0"))
            self.temperature = Adaptive(self.base_temperature, self.alpha, self.a_0)

    def hparams(self) -> dict[str, object]:
        tau = self.base_temperature if self.base_temperature is not None else self.temperature_setting()
        return {"temperature": tau, "alpha": self.alpha, "a_0": self.a_0}

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
        has_pos = pos_mask.any(dim=1)
        candidates = (pos_mask | neg_mask).sum(dim=1).clamp_min(1).float()
        per_anchor = torch.where(has_pos, candidates.log() / (1 - 1 / candidates + EPS), 0.0)
        mean = per_anchor.sum() / has_pos.sum().clamp_min(1)
        return torch.where(has_pos.any(), mean, float("nan"))

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        sim, pos_mask, neg_mask = handover.sim.float(), handover.pos_mask, handover.neg_mask
        logits = sim / tau
        num_pos = pos_mask.sum(dim=1)
        has_pos = num_pos > 0
        # As in masked_info_nce: excluded entries at -inf, or at 0 in a row without a positive.
        fill = torch.where(has_pos, float("-inf"), 0.0).unsqueeze(1)
        log_prob = torch.log_softmax(torch.where(pos_mask | neg_mask, logits, fill), dim=1)
        weight = 1 / (1 - log_prob.detach().exp() + EPS)
        per_anchor = -torch.where(pos_mask, weight * log_prob, 0.0).sum(dim=1) / num_pos.clamp_min(1)
        return LossTerms(mean_over_anchors(per_anchor, has_pos), logits=logits)
