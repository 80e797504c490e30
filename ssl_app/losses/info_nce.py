"""InfoNCE (the contrastive loss of SimCLR, MoCo and the memory bank) over a similarity matrix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch
from torch import Tensor

from ssl_app.losses.base import (
    EXCLUDED_LOGIT,
    ContrastiveLoss,
    LossTerms,
    MaskedSimilarities,
    Tau,
    Temperature,
    check_temperature,
    masked_info_nce,
    mean_over_anchors,
    uniform_softmax_loss,
)
from ssl_app.losses.registry import LOSSES

#: Where a hand-over's ``mask_memo`` keeps InfoNCE's plan of its masks.
PLAN_KEY = "InfoNCE.plan"


@dataclass(frozen=True)
class MaskPlan:
    """What InfoNCE reads from a ``(pos_mask, neg_mask)`` pair, precomputed once for reused masks.

    Methods hand the same mask tensors to every step when the masks depend only on shapes
    (``ContrastiveMethod.cached_masks``), with a ``mask_memo`` that lives as long as they do: the
    plan is built there on the first call and read on the later ones. Masks made for one step
    (labels, a filling queue) come without a memo and take the masked path.

    With ``bias`` = 0 on A(i) and a large negative constant elsewhere, and ``weight`` =
    1/|P(i)| on P(i) (0 elsewhere, so 0 on whole rows without a positive):

        loss = −Σ_i Σ_j weight_ij · log_softmax(s/τ + bias)_ij / anchors

    equals :func:`masked_info_nce`'s mean: the bias makes exp() of an excluded entry an exact 0
    (and, unlike −inf, leaves its log-probability finite, so 0 · it is 0; inside the fused
    log-softmax it costs what −inf costs: benchmarks/README.md, "Tuning notes"). Per step that is
    one fused add, one log-softmax and one weighted sum — no mask passes. The price is memory: two
    float32 [N, M] tensors (8 bytes per entry) for as long as the masks are reused.
    """

    bias: Tensor  # [N, M] float32
    weight: Tensor  # [N, M] float32
    anchors: Tensor  # () float32: anchors with a positive, at least 1

    @staticmethod
    def of(pos_mask: Tensor, neg_mask: Tensor) -> MaskPlan:
        num_pos = pos_mask.sum(dim=1, keepdim=True)
        bias = torch.where(pos_mask | neg_mask, 0.0, EXCLUDED_LOGIT)
        weight = pos_mask.float() / num_pos.clamp_min(1)
        return MaskPlan(bias, weight, (num_pos > 0).sum().clamp_min(1).float())

    def mean_loss(self, sim: Tensor, temperature: Union[float, Tensor]) -> Tensor:
        """The mean InfoNCE at τ = ``temperature`` (a number, or a 0-d tensor: a learnable or adaptive τ)."""
        if isinstance(temperature, Tensor):
            scaled = self.bias + sim.float() / temperature
        else:
            scaled = torch.add(self.bias, sim.float(), alpha=1.0 / temperature)
        log_prob = torch.log_softmax(scaled, dim=1)
        return -torch.linalg.vecdot(log_prob, self.weight).sum() / self.anchors


@LOSSES.register
class InfoNCE(ContrastiveLoss):
    """InfoNCE / NT-Xent with temperature τ over a similarity matrix.

    Per anchor i (docs/science.md, "InfoNCE"), with positive similarity s_ii and negatives s_ik:

        L_i = -log( exp(s_ii/τ) / (exp(s_ii/τ) + Σ_{k≠i} exp(s_ik/τ)) )

    and the loss is the mean over anchors. Rows with several positives average the
    per-positive terms (so this is also the core of SupCon); rows with none are skipped.
    The log-sum-exp runs in float32 even under bf16/fp16 autocast.

    Chance value (``stats["chance"]``): with every similarity equal the softmax is uniform
    and ``L = mean_i log(|P(i)| + |N(i)|)``, i.e. ``log(1 + K)`` with one positive and K negatives.

    Args:
        temperature: τ > 0, or a policy (``ssl_app.temperature``: a schedule, a learnable or an adaptive τ).
            Small τ concentrates the penalty on the hardest negatives.

    Example:
        >>> loss_fn = InfoNCE(temperature=0.2)
        >>> loss = loss_fn(MaskedSimilarities(sim, pos_mask, neg_mask)).value
    """

    def __init__(self, temperature: Temperature = 0.5) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, type(self).__name__)

    def hparams(self) -> dict[str, object]:
        return {"temperature": self.temperature_setting()}

    def chance_value(self, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
        return uniform_softmax_loss(pos_mask, neg_mask)

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        sim, pos_mask, neg_mask = handover.sim, handover.pos_mask, handover.neg_mask
        memo = handover.mask_memo
        # Masks reused from step to step: their plan lives beside them. Not from inference tensors (validation's
        # masks), which a training step could not save for backward; evaluation is not the hot path.
        if memo is not None and not (pos_mask.is_inference() or neg_mask.is_inference()):
            plan = memo.get(PLAN_KEY)
            if plan is None:
                plan = memo[PLAN_KEY] = MaskPlan.of(pos_mask, neg_mask)
            value = plan.mean_loss(sim, tau)
        else:
            per_anchor, has_pos = masked_info_nce(sim.float() / tau, pos_mask, neg_mask)
            value = mean_over_anchors(per_anchor, has_pos)
        return LossTerms(value, logits=sim.float() / tau if with_stats else None)
