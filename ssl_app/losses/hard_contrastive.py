"""Hard contrastive loss: InfoNCE whose denominator keeps only each anchor's hardest negatives."""

from __future__ import annotations

from fractions import Fraction

from torch import Tensor

from ssl_app.checks import OpenUnitInterval, PositiveInt, check
from ssl_app.errors import ConfigError
from ssl_app.losses.base import (
    ContrastiveLoss,
    LossTerms,
    MaskedSimilarities,
    Tau,
    Temperature,
    check_num_negatives,
    check_temperature,
    masked_info_nce,
    mean_over_anchors,
    top_k_negatives,
    uniform_softmax_loss,
)
from ssl_app.losses.registry import LOSSES

# A quantile is read as the nearest fraction with at most this denominator, so that the
# per-anchor count ceil(q · n) is computed in exact integer arithmetic on the device.
_QUANTILE_MAX_DENOMINATOR = 10**6


def upper_quantile_negatives(scores: Tensor, neg_mask: Tensor, numerator: int, denominator: int) -> Tensor:
    """Bool mask [N, M] of the negatives at or above each anchor's upper-q quantile, q = num/den.

    For anchor i with n_i ≥ 1 negatives, let k_i = max(1, ceil(q · n_i)) and t_i the k_i-th
    largest negative score; the kept negatives are those with score ≥ t_i (so ties with t_i are
    all kept, and at least k_i are). Rows without negatives keep nothing. Sync-free: sort the
    masked row, count negatives per row, gather the threshold.
    """
    num_candidates = scores.shape[1]
    if num_candidates == 0:
        return neg_mask
    masked = scores.detach().masked_fill(~neg_mask, float("-inf"))
    ordered = masked.sort(dim=1, descending=True).values
    n = neg_mask.sum(dim=1)
    k = ((n * numerator + (denominator - 1)) // denominator).clamp(min=1)
    threshold = ordered.gather(1, (k - 1).clamp(max=num_candidates - 1)[:, None])
    return neg_mask & (scores.detach() >= threshold)


@LOSSES.register
class HardContrastive(ContrastiveLoss):
    """Hard contrastive loss (Wang & Liu 2021): InfoNCE over the informative negatives only.

    For anchor i with positive similarity s_ii and kept negatives H(i) ⊆ neg(i):

        L_i = -log( exp(s_ii/τ) / (exp(s_ii/τ) + Σ_{k∈H(i)} exp(s_ik/τ)) )

    and the loss is the mean over anchors (several positives are averaged as in InfoNCE).
    H(i) is chosen by exactly one of:

    - ``num_negatives`` = K: the K most similar negatives of the anchor (all of them if it has
      fewer; the paper used K = 4095 out of a 50,000-entry memory bank). With K ≥ the number
      of negatives this is InfoNCE exactly.
    - ``quantile`` = q ∈ (0, 1): with n_i negatives, k_i = max(1, ceil(q · n_i)) and t_i the
      k_i-th largest negative similarity; H(i) = {k ∈ neg(i) : s_ik ≥ t_i}. So q = 0.1 keeps
      the top 10% (rounded up, at least one, ties with t_i included). q is read as the
      nearest fraction with denominator ≤ 10^6, so 0.3 means exactly 3/10.

    The selection is not differentiated through (the excluded negatives get zero gradient);
    everything runs in float32 even under autocast, without host syncs. Its diagnostics'
    ``used_negatives`` / ``used_neg_sim`` describe the kept negatives, and ``chance`` =
    ``mean_i log(|P(i)| + |H(i)|)`` (InfoNCE's at a uniform softmax, over the negatives this step
    kept; with all similarities tied a quantile keeps every negative).

    Args:
        temperature: τ > 0.
        num_negatives: K ≥ 1, the number of hardest negatives kept per anchor.
        quantile: q ∈ (0, 1), the upper fraction of each anchor's negatives kept.

    Example:
        >>> loss_fn = HardContrastive(temperature=0.5, num_negatives=4095)
        >>> loss = loss_fn(MaskedSimilarities(sim, pos_mask, neg_mask)).value
        >>> loss_fn = HardContrastive(temperature=0.5, quantile=0.1)  # top 10% per anchor
    """

    same_as_with_every_negative = "InfoNCE"  # with num_negatives >= the negatives an anchor has

    examples = ({"num_negatives": 3}, {"quantile": 0.3})

    def __init__(
        self,
        temperature: Temperature = 0.5,
        num_negatives: PositiveInt | None = None,
        quantile: OpenUnitInterval | None = None,
    ) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, "HardContrastive")
        if (num_negatives is None) == (quantile is None):
            raise ConfigError(
                "HardContrastive: give exactly one of num_negatives or quantile, "
                f"got num_negatives={num_negatives!r}, quantile={quantile!r}"
            )
        self.num_negatives = None if num_negatives is None else check_num_negatives(num_negatives, "HardContrastive")
        self.quantile: float | None = None
        self._fraction: tuple[int, int] | None = None
        if quantile is not None:
            self.quantile = check(OpenUnitInterval, quantile, "HardContrastive: quantile")
            fraction = Fraction(self.quantile).limit_denominator(_QUANTILE_MAX_DENOMINATOR)
            self._fraction = (fraction.numerator, fraction.denominator)

    def hparams(self) -> dict[str, object]:
        if self.num_negatives is not None:
            return {"temperature": self.temperature_setting(), "num_negatives": self.num_negatives}
        return {"temperature": self.temperature_setting(), "quantile": self.quantile}

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
        """``mean_i log(|P(i)| + |H(i)|)``; ``neg_mask`` is the kept H (``select_negatives``)."""
        return uniform_softmax_loss(pos_mask, neg_mask)

    def select_negatives(self, sim: Tensor, neg_mask: Tensor) -> Tensor:
        """The bool mask [N, M] of the negatives that enter the loss."""
        if self.num_negatives is not None:
            return top_k_negatives(sim, neg_mask, self.num_negatives)
        assert self._fraction is not None
        return upper_quantile_negatives(sim, neg_mask, *self._fraction)

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        sim32 = handover.sim.float()
        logits = sim32 / tau
        kept = self.select_negatives(sim32, handover.neg_mask)
        per_anchor, has_pos = masked_info_nce(logits, handover.pos_mask, kept)
        return LossTerms(mean_over_anchors(per_anchor, has_pos), logits=logits, used_negatives=kept)
