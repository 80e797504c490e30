"""SupCon: the supervised contrastive loss (Khosla et al. 2020) over a similarity matrix."""

from __future__ import annotations

import torch

from ssl_app.losses.base import LossTerms, MaskedSimilarities, Tau, Temperature, masked_mean
from ssl_app.losses.info_nce import InfoNCE
from ssl_app.losses.registry import LOSSES


@LOSSES.register
class SupCon(InfoNCE):
    """Supervised contrastive loss ("L_out" form) with temperature τ.

    Every candidate with the anchor's label is a positive: the method builds
    ``pos_mask`` = same label and not the anchor itself, ``neg_mask`` = different label
    (``uses_labels = True`` tells it to). Per anchor i, with A(i) = P(i) ∪ N(i) (all
    candidates but the anchor):

        L_i = -1/|P(i)| Σ_{p∈P(i)} log( exp(s_ip/τ) / Σ_{a∈A(i)} exp(s_ia/τ) )

    and the loss is the mean over anchors with at least one positive; an anchor without one
    (a class seen once in the batch) contributes nothing and gets zero, not NaN, gradient.
    Runs in float32 even under autocast. Its diagnostics add ``num_positives`` (mean |P(i)|)
    and ``has_positive`` (fraction of anchors with a positive).

    Args:
        temperature: τ > 0 (the paper: 0.1).

    Example:
        >>> loss_fn = SupCon(temperature=0.1)
        >>> same = labels[:, None] == candidate_labels[None, :]
        >>> loss = loss_fn(MaskedSimilarities(sim, same & ~is_self, ~same & ~is_self)).value
    """

    uses_labels = True

    def __init__(self, temperature: Temperature = 0.1) -> None:
        super().__init__(temperature)

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        # InfoNCE already averages over several positives and skips anchors without one.
        terms = super().terms(handover, tau, with_stats)
        if with_stats:
            with torch.no_grad():
                has_pos = handover.pos_mask.any(dim=1)
                all_anchors = torch.ones_like(has_pos)
                terms.extra["num_positives"] = masked_mean(handover.pos_mask.sum(dim=1).float(), all_anchors)
                terms.extra["has_positive"] = masked_mean(has_pos.float(), all_anchors)
        return terms
