"""HCL, hard negative sampling (Robinson et al., ICLR 2021): the debiased loss with its negatives
importance-weighted towards the hard ones."""

from __future__ import annotations

from torch import Tensor

from ssl_app.checks import NonNegativeFinite, UnitIntervalOpenAbove, check
from ssl_app.losses.base import (
    ContrastiveLoss,
    LossTerms,
    MaskedSimilarities,
    Tau,
    Temperature,
    check_temperature,
    mean_over_anchors,
)
from ssl_app.losses.debiased import check_class_prior, debiased_loss, one_per_pair_chance
from ssl_app.losses.registry import LOSSES


@LOSSES.register
class HCL(ContrastiveLoss):
    """Hard negative sampling (Robinson et al., ICLR 2021, arXiv 2010.04592).

    The negatives' sum of the debiased loss (:class:`~ssl_app.losses.debiased.Debiased`) becomes an
    importance-weighted one that samples negatives in proportion to exp(β s/τ). For each positive p
    of anchor i with n negatives, e_j = exp(s_ij/τ) and q_k = exp(β s_ik/τ) / Σ_{k'} exp(β s_ik'/τ):

        R    = n · Σ_{k∈N(i)} q_k e_k
        Ng_p = max( (−τ⁺ n e_p + R) / (1 − τ⁺),  n e^{−1/τ} )
        L_i  = −1/|P(i)| Σ_{p∈P(i)} log( e_p / (e_p + Ng_p) )

    and the loss is the mean over anchors with a positive. This is the authors' code
    (github.com/joshr17/HCL, ``image/main.py``, ``criterion`` with ``estimator='hard'``): q is not
    detached, n is the anchor's number of negatives, and their clamp n e^{−1/τ} is kept. β = 0 is
    the debiased loss; β = 0, τ⁺ = 0 is InfoNCE with one positive. A negative's share of R is
    ∝ exp((1 + β) s_ik/τ), so its penalty is sharper than InfoNCE's at the same τ (the diagnostics'
    ``effective_negatives`` read these logits, (1 + β) s/τ); the gradient through q also pulls
    back the negatives easier than R's weighted mean.

    Chance value: with every similarity equal, q is uniform, R = n e^{c/τ} and
    ``L = mean_i log(1 + |N(i)|)`` (as the debiased loss).

    Args:
        temperature: τ > 0 (default 0.5, the authors' ``image/main.py``).
        beta: β ≥ 0, the concentration on hard negatives (default 1.0, the authors' ``image/main.py``).
        tau_plus: τ⁺ ∈ [0, 1), the class prior (default 0.1, the authors' ``image/main.py``).
    """

    def __init__(
        self, temperature: Temperature = 0.5, beta: NonNegativeFinite = 1.0, tau_plus: UnitIntervalOpenAbove = 0.1
    ) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, "HCL")
        self.beta = check(NonNegativeFinite, beta, "HCL: beta")
        self.tau_plus = check_class_prior(tau_plus, "HCL")

    def hparams(self) -> dict[str, object]:
        return {"temperature": self.temperature_setting(), "beta": self.beta, "tau_plus": self.tau_plus}

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
        return one_per_pair_chance(pos_mask, neg_mask)

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        logits = handover.sim.float() / tau
        pos_mask, neg_mask = handover.pos_mask, handover.neg_mask
        per_anchor = debiased_loss(logits, pos_mask, neg_mask, self.tau_plus, tau, beta=self.beta)
        penalty_logits = (1 + self.beta) * logits if with_stats else None
        return LossTerms(mean_over_anchors(per_anchor, pos_mask.any(dim=1)), logits=penalty_logits)
