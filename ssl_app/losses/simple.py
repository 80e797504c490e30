"""Simple and HardSimple: the linear losses of Wang & Liu 2021, with no hardness-awareness."""

from __future__ import annotations

import torch
from torch import Tensor

from ssl_app.checks import PositiveFinite, PositiveInt, check
from ssl_app.losses.base import (
    ContrastiveLoss,
    LossTerms,
    MaskedSimilarities,
    Tau,
    check_num_negatives,
    mean_over_anchors,
    top_k_negatives,
)
from ssl_app.losses.registry import LOSSES


def linear_contrast_chance(pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
    """0, the value of ``−mean_P s + mean_N s`` when every similarity is c; NaN when undefined.

    Undefined (NaN): no anchor has a positive, or one with a positive has no negative (its
    ``L_i = −c`` then depends on c). Sync-free.
    """
    has_pos = pos_mask.any(dim=1)
    lacks_negatives = has_pos & ~neg_mask.any(dim=1)
    defined = has_pos.any() & ~lacks_negatives.any()
    return torch.where(defined, 0.0, float("nan"))


def linear_contrast(sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, lam: float | None) -> tuple[Tensor, Tensor]:
    """Per-anchor ``-mean_{p∈P(i)} s_ip + λ_i Σ_{k∈neg(i)} s_ik`` in float32, sync-free.

    ``lam=None`` means λ_i = 1 / |neg(i)| (the mean over the anchor's negatives; 0 terms for an
    anchor without negatives). Returns ``(L [N], has_positive [N] bool)``; anchors without a
    positive get L_i = 0 and zero gradient.
    """
    sim = sim.float()
    has_pos = pos_mask.any(dim=1)
    num_pos = pos_mask.sum(dim=1).clamp_min(1).to(sim.dtype)
    positive_term = sim.masked_fill(~pos_mask, 0.0).sum(dim=1) / num_pos
    negative_sum = sim.masked_fill(~neg_mask, 0.0).sum(dim=1)
    if lam is None:
        negative_term = negative_sum / neg_mask.sum(dim=1).clamp_min(1).to(sim.dtype)
    else:
        negative_term = lam * negative_sum
    per_anchor = negative_term - positive_term
    return per_anchor.masked_fill(~has_pos, 0.0), has_pos


@LOSSES.register
class Simple(ContrastiveLoss):
    """The Simple loss (Wang & Liu 2021): a linear pull on positives, push on negatives.

    Per anchor i, with positives P(i) and negatives neg(i):

        L_i = -1/|P(i)| Σ_{p∈P(i)} s_ip + λ Σ_{k∈neg(i)} s_ik

    and the loss is the mean over anchors with a positive. ``lam=None`` (the authors' code)
    means λ = 1/|neg(i)|, i.e. the mean negative similarity. There is no temperature and no
    hardness-awareness: the gradient w.r.t. every similarity is a constant (-1/|P(i)| on
    positives, λ on negatives), so every negative is pushed equally (``effective_negatives``
    is the number of negatives). The paper shows it gives a far less uniform embedding.

    Chance value (``stats["chance"]``): with λ = 1/|neg(i)| (``lam=None``) and every
    similarity equal to c, ``L_i = −c + c = 0``. With another λ, ``L_i = c(λ|neg(i)| − 1)``
    depends on c, so there is none (``chance_value`` returns ``None``; no loss-at-chance check).

    Args:
        lam: λ > 0, or None for the mean over negatives.

    Example:
        >>> loss_fn = Simple()
        >>> loss = loss_fn(MaskedSimilarities(sim, pos_mask, neg_mask)).value
    """

    examples = ({}, {"lam": 0.5})

    def __init__(self, lam: PositiveFinite | None = None) -> None:
        super().__init__()
        self.lam = check(PositiveFinite, lam, "Simple: lam", none=True)  # None: the mean over negatives

    def hparams(self) -> dict[str, object]:
        return {"lam": self.lam}

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor | None:
        return linear_contrast_chance(pos_mask, neg_mask) if self.lam is None else None

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        per_anchor, has_pos = linear_contrast(handover.sim, handover.pos_mask, handover.neg_mask, self.lam)
        return LossTerms(mean_over_anchors(per_anchor, has_pos))  # logits None: every negative the same penalty


@LOSSES.register
class HardSimple(ContrastiveLoss):
    """HardSimple (Wang & Liu 2021): Simple restricted to each anchor's K hardest negatives.

    Per anchor i, with H(i) the min(K, |neg(i)|) negatives of highest similarity:

        L_i = -1/|P(i)| Σ_{p∈P(i)} s_ip + 1/|H(i)| Σ_{k∈H(i)} s_ik

    and the loss is the mean over anchors with a positive. The selection is not differentiated
    through; the kept negatives get the constant gradient 1/|H(i)|, the others zero.
    Chance value: 0, as Simple's with λ = 1/|neg(i)|.

    Args:
        num_negatives: K ≥ 1, the number of hardest negatives averaged per anchor.

    Example:
        >>> loss_fn = HardSimple(num_negatives=4095)
        >>> loss = loss_fn(MaskedSimilarities(sim, pos_mask, neg_mask)).value
    """

    same_as_with_every_negative = "Simple"  # with num_negatives >= the negatives an anchor has

    examples = ({"num_negatives": 3},)

    def __init__(self, num_negatives: PositiveInt) -> None:
        super().__init__()
        self.num_negatives = check_num_negatives(num_negatives, "HardSimple")

    def hparams(self) -> dict[str, object]:
        return {"num_negatives": self.num_negatives}

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
        """0 (NaN when undefined: ``linear_contrast_chance``); ``neg_mask`` is the kept H."""
        return linear_contrast_chance(pos_mask, neg_mask)

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        sim32 = handover.sim.float()
        kept = top_k_negatives(sim32, handover.neg_mask, self.num_negatives)
        per_anchor, has_pos = linear_contrast(sim32, handover.pos_mask, kept, None)
        return LossTerms(mean_over_anchors(per_anchor, has_pos), used_negatives=kept)
