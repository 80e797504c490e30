"""InfoNCE (the contrastive loss of SimCLR, MoCo and the memory bank) over a similarity matrix."""

from __future__ import annotations

import torch
from torch import Tensor

from ssl_app.losses.base import ContrastiveLoss, check_temperature, negative_stats


def masked_info_nce(logits: Tensor, pos_mask: Tensor, neg_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-anchor InfoNCE over masked logits, in float32, stable for any logit scale.

    For anchor i with positives P(i) and negatives N(i), A(i) = P(i) ∪ N(i):

        L_i = -1/|P(i)| Σ_{p∈P(i)} [ l_ip − log Σ_{a∈A(i)} exp(l_ia) ]

    With one positive this is ``-log(exp(l_ii) / (exp(l_ii) + Σ_k exp(l_ik)))``; with several
    it is SupCon's "L_out" form. Returns ``(L [N], has_positive [N] bool)``; anchors without a
    positive get L_i = 0 and a zero (not NaN) gradient. Entries in neither mask are never read.
    """
    logits = logits.float()
    num_pos = pos_mask.sum(dim=1)
    has_pos = num_pos > 0
    # Excluded entries become -inf, which exp() turns into 0 on its fast path (a large finite
    # stand-in such as -1e30 sends exp() to its underflow path, ~4× slower per entry:
    # benchmarks/README.md). A row without a positive has its excluded entries at 0 instead, so
    # a row with no candidate at all keeps a finite log-softmax and gradient; its loss is masked
    # out below. The fused log-softmax is the cheapest form of this on every step's path.
    fill = torch.where(has_pos, float("-inf"), 0.0).unsqueeze(1)
    log_prob = torch.log_softmax(torch.where(pos_mask | neg_mask, logits, fill), dim=1)
    per_anchor = -torch.where(pos_mask, log_prob, 0.0).sum(dim=1) / num_pos.clamp_min(1)
    return per_anchor.masked_fill(~has_pos, 0.0), has_pos


def mean_over_anchors(per_anchor: Tensor, has_pos: Tensor) -> Tensor:
    """Mean of the per-anchor losses over anchors with a positive (0 if there is none)."""
    return per_anchor.sum() / has_pos.sum().clamp_min(1).to(per_anchor.dtype)


class InfoNCE(ContrastiveLoss):
    """InfoNCE / NT-Xent with temperature τ over a similarity matrix.

    Per anchor i (PAPER.md), with positive similarity s_ii and negatives s_ik:

        L_i = -log( exp(s_ii/τ) / (exp(s_ii/τ) + Σ_{k≠i} exp(s_ik/τ)) )

    and the loss is the mean over anchors. Rows with several positives average the
    per-positive terms (so this is also the core of SupCon); rows with none are skipped.
    The log-sum-exp runs in float32 even under bf16/fp16 autocast.

    Args:
        temperature: τ > 0. Small τ concentrates the penalty on the hardest negatives.

    Example:
        >>> loss_fn = InfoNCE(temperature=0.2)
        >>> loss = loss_fn(sim, pos_mask, neg_mask)
    """

    def __init__(self, temperature: float = 0.5) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, type(self).__name__)

    def hparams(self) -> dict[str, object]:
        return {"temperature": self.temperature}

    def forward(self, sim: Tensor, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
        self.check_inputs(sim, pos_mask, neg_mask)
        with torch.autocast(device_type=sim.device.type, enabled=False):
            logits = sim.float() / self.temperature
            per_anchor, has_pos = masked_info_nce(logits, pos_mask, neg_mask)
            self.last_stats = negative_stats(logits, sim, pos_mask, neg_mask) if self.stats_enabled else {}
            return mean_over_anchors(per_anchor, has_pos)
