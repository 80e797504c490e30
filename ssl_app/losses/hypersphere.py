"""Hypersphere loss (Wang & Isola, ICML 2020): alignment + λ · uniformity, trained directly."""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

from ssl_app import distributed
from ssl_app.errors import ConfigError
from ssl_app.losses.base import ContrastiveLoss, LossTerms, MaskedSimilarities, Tau, mean_over_anchors
from ssl_app.losses.registry import LOSSES


def global_log_mean_exp(values: Tensor, mask: Tensor) -> Tensor:
    """``log mean_{(i,j): mask_ij} exp(values_ij)`` over every rank's entries; 0 when there are none.

    Shifted by the global maximum (detached), so it neither overflows nor underflows. Under DDP the
    value is the global one on every rank, and its gradient is scaled so that DDP's average of the
    ranks' gradients is the gradient of the global value: rank r contributes ``W · ∇S_r / S`` (S the
    sum of every rank's ``S_r``, W the number of ranks). Sync-free.
    """
    masked = torch.where(mask, values, float("-inf")).detach()
    # Every rank joins each collective, also one with an empty matrix (no amax of nothing).
    top = distributed.all_reduce_max(masked.amax() if masked.numel() else masked.new_tensor(float("-inf")))
    top = torch.where(torch.isfinite(top), top, 0.0)
    local = torch.where(mask, values - top, float("-inf")).exp().sum()
    count = mask.sum().to(local.dtype)
    world = distributed.world_size()
    if world == 1:
        total, total_count, scaled = local, count, local
    else:
        totals = distributed.all_reduce_sum(torch.stack([local.detach(), count]))
        total, total_count = totals[0], totals[1]
        scaled = totals[0] + world * (local - local.detach())  # the global value, a W-fold local gradient
    tiny = torch.finfo(local.dtype).tiny
    value = torch.log(scaled.clamp_min(tiny) / total_count.clamp_min(1)) + top
    return torch.where((total_count > 0) & (total > 0), value, 0.0)


@LOSSES.register
class Hypersphere(ContrastiveLoss):
    """Alignment and uniformity on the hypersphere (Wang & Isola, ICML 2020, arXiv 2005.10242).

    For unit vectors ‖a − b‖² = 2 − 2s, so the loss reads the similarity matrix alone:

        L_align   = mean_i 1/|P(i)| Σ_{p∈P(i)} (2 − 2 s_ip)^{α/2}        (= E‖f(x) − f(y)‖^α)
        L_uniform = log mean_{(i,k): k∈N(i)} exp(−t (2 − 2 s_ik))       (= log E e^{−t‖f(x) − f(x⁻)‖²})
        L         = L_align + λ · L_uniform

    the alignment averaged over the anchors with a positive, the uniformity over every negative
    entry of the step (all ranks': under DDP its value is the global one, so 2 ranks = 1 process).
    Which pairs enter the uniformity is the method's negatives: SimCLR, every pair of embeddings of
    different images, across and within the views; MoCo, each query with the other images' keys and
    the queue; the memory bank, each anchor with its bank negatives. The authors' code
    (github.com/SsnL/align_uniform) and lightly's ``HypersphereLoss`` take the mean of two per-view
    terms, (L_unif(x) + L_unif(y))/2, each over the pairs within one view; given each view as its own
    anchors against that view's other images, this loss is theirs (tests/ssl_app/losses/test_hypersphere.py).

    The uniformity's gradient on a negative is ∝ exp(2t s_ik): a softmax over all negative pairs at
    "temperature" 1/(2t), hardness-aware like InfoNCE's at τ = 1/(2t) but normalised over the whole
    batch rather than per anchor (the diagnostics read the logits 2t·s); the alignment pulls every
    positive with the same weight at α = 2. No chance value (the alignment moves with the common
    similarity).

    Args:
        lam: λ ≥ 0, the weight of the uniformity (default 1.0, lightly's; the authors leave it to tune).
        alpha: α > 0, the power of the alignment distance (default 2, the authors' ``align_loss``).
        t: t > 0, the uniformity's Gaussian scale (default 2, the authors' ``uniform_loss``; lightly's is 1).
    """

    def __init__(self, lam: float = 1.0, alpha: float = 2.0, t: float = 2.0) -> None:
        super().__init__()
        for name, value, zero_allowed in (("lam", lam, True), ("alpha", alpha, False), ("t", t, False)):
            finite = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
            if not finite or value < 0 or (value == 0 and not zero_allowed):
                relation = ">=" if zero_allowed else ">"
                raise ConfigError(f"Hypersphere: {name} must be {relation} 0 and finite, got {value!r}")
        self.lam, self.alpha, self.t = float(lam), float(alpha), float(t)

    def hparams(self) -> dict[str, object]:
        return {"lam": self.lam, "alpha": self.alpha, "t": self.t}

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        sim, pos_mask, neg_mask = handover.sim.float(), handover.pos_mask, handover.neg_mask
        # 2 − 2s rounds below 0 for s just above 1; a floor keeps the power's gradient finite for α < 2.
        distance = torch.where(pos_mask, 2 - 2 * sim, 1.0).clamp_min(1e-12)
        num_pos = pos_mask.sum(dim=1)
        align = torch.where(pos_mask, distance.pow(self.alpha / 2), 0.0).sum(dim=1) / num_pos.clamp_min(1)
        uniform = global_log_mean_exp(2 * self.t * (sim - 1), neg_mask)
        value = mean_over_anchors(align, num_pos > 0) + self.lam * uniform
        return LossTerms(value, logits=2 * self.t * sim if with_stats else None)
