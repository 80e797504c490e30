"""The measured hardness profile: the share of an anchor's penalty each negative receives, by similarity.

Wang & Liu's argument is about how much penalty a hard negative gets. For any loss L over the
similarity matrix, the penalty on negative j of anchor i is the gradient ``g_ij = ∂L/∂s_ij`` (> 0:
the loss rises with the negative's similarity), and its **share** of the anchor's penalty is

    w_ij = g_ij / Σ_{k∈neg(i)} g_ik

measured by autograd on the similarity matrix alone (``s`` detached from the encoder, the loss's
:meth:`~ssl_app.losses.base.ContrastiveLoss.terms` run again on it: no second forward pass of
the encoder, and no code in the loss). For InfoNCE the share is the softmax over the negatives,
``w_ij = exp(s_ij/τ) / Σ_{k∈neg(i)} exp(s_ik/τ)`` (docs/science.md, "The measured hardness
profile"); a hard loss gives the negatives it drops a share of 0; Simple gives each 1/|neg(i)|.

The profile of a step is, per similarity bin (:data:`BINS` equal bins over [−1, 1]; a value a
hair past ±1 counts in the end bin), the sum of the shares of the negatives in the bin and their
count: a [2, BINS] float32 tensor, so steps and ranks add up (:class:`HardnessProfile`) and the
mean share of a negative at that similarity is sum / count. Anchors whose negatives receive no
penalty in total (no positive, no negative) are left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Optional

import torch
from torch import Tensor
from torchmetrics import Metric

from ssl_app.handover import MaskedSimilarities

#: A loss's value on a hand-over (its ``terms`` with the step's τ, without diagnostics): what the shares differentiate.
LossValue = Callable[[MaskedSimilarities], Tensor]

#: Equal similarity bins over [−1, 1] (width 0.1): coarse enough that each bin of a batch of 256
#: holds many negatives, fine enough to show the exp(s/τ) slope of τ = 0.1.
BINS = 20
LOW, HIGH = -1.0, 1.0
#: The TensorBoard histograms the profile is logged as (``write_profile``; the report reads them):
#: the mean share per bin, and the number of negatives per bin (the weights that pool runs).
SHARE_TAG = "hardness/mean_share"
COUNT_TAG = "hardness/negatives"


def bin_edges() -> Tensor:
    """The ``BINS + 1`` edges of the profile's bins, float64."""
    return torch.linspace(LOW, HIGH, BINS + 1, dtype=torch.float64)


def negative_shares(value_of: LossValue, handover: MaskedSimilarities) -> Optional[Tensor]:
    """``w`` [N, M]: each negative's share of its anchor's penalty (module docstring), 0 off the
    negatives and on anchors whose negatives receive no penalty; ``None`` when the loss does not
    depend on ``sim`` or autograd cannot run (inference mode). ``value_of``: the loss's value on a
    hand-over (:data:`LossValue`), called once, on the similarities detached from the encoder."""
    if torch.is_inference_mode_enabled():
        return None
    with torch.enable_grad(), torch.autocast(device_type=handover.sim.device.type, enabled=False):
        sim = handover.sim.detach().float().requires_grad_(True)
        detached = dataclasses.replace(
            handover,
            sim=sim,
            **{name: detach(getattr(handover, name)) for name in ("anchor_features", "anchor_norms", "candidate_norms")},
        )
        value = value_of(detached)
        if not value.requires_grad:
            return None
        (grad,) = torch.autograd.grad(value, sim, allow_unused=True)
    if grad is None:
        return None
    neg_mask = handover.neg_mask
    grad = torch.where(neg_mask, grad, 0.0)
    total = grad.sum(dim=1, keepdim=True)
    counted = (total != 0) & total.isfinite()
    return torch.where(counted & neg_mask, grad / torch.where(counted, total, 1.0), 0.0)


def profile_of(shares: Tensor, handover: MaskedSimilarities) -> Tensor:
    """``[sum of shares, count of negatives]`` per bin, [2, BINS] float32, sync-free: the finite
    negatives of the anchors ``shares`` counts (a row of zeros is an anchor left out)."""
    sim = handover.sim.detach().float()
    counted = handover.neg_mask & shares.sum(dim=1, keepdim=True).ne(0) & sim.isfinite()
    # Entries not counted may hold anything (a NaN where the loss ignores it): binned as 0, added as 0.
    sim = torch.where(counted, sim, 0.0)
    index = ((sim - LOW) * (BINS / (HIGH - LOW))).floor().clamp(0, BINS - 1).long().flatten()
    profile = torch.zeros(2, BINS, dtype=torch.float32, device=sim.device)
    profile[0].scatter_add_(0, index, torch.where(counted, shares, 0.0).flatten())
    profile[1].scatter_add_(0, index, counted.float().flatten())
    return profile


def hardness_profile(value_of: LossValue, handover: MaskedSimilarities) -> Optional[Tensor]:
    """One step's profile, [2, BINS] (sums of shares, counts), or ``None`` (``negative_shares``)."""
    shares = negative_shares(value_of, handover)
    return None if shares is None else profile_of(shares, handover)


class HardnessProfile(Metric):
    """The profiles of an epoch's steps, summed; ``compute`` sums them over processes too and
    returns ``(mean share [BINS], negatives [BINS])`` (mean 0 where a bin holds no negative).

    Every rank adds its own anchors, so 2 ranks equal 1 process on the same samples."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__(sync_on_compute=True)
        self.add_state("shares", default=torch.zeros(BINS), dist_reduce_fx="sum")
        self.add_state("negatives", default=torch.zeros(BINS), dist_reduce_fx="sum")

    def update(self, profile: Tensor) -> None:
        self.shares += profile[0].to(self.shares)
        self.negatives += profile[1].to(self.negatives)

    def compute(self) -> tuple[Tensor, Tensor]:
        mean = torch.where(self.negatives > 0, self.shares / self.negatives.clamp_min(1), 0.0)
        return mean, self.negatives


def write_profile(experiment, mean_share: Tensor, negatives: Tensor, step: int) -> None:
    """Log a profile as two TensorBoard histograms over the fixed bins (``add_histogram_raw``):
    ``SHARE_TAG`` (bin heights: the mean share of a negative there) and ``COUNT_TAG`` (the
    negatives). A leading empty bucket gives readers the first bin's left edge, as
    ``similarity/negative`` does. Nothing is written when no negative was counted."""
    count = float(negatives.sum())
    if count <= 0:
        return
    edges = bin_edges()
    centres = ((edges[:-1] + edges[1:]) / 2).tolist()
    limits = edges.tolist()
    for tag, heights in ((SHARE_TAG, mean_share), (COUNT_TAG, negatives)):
        values = heights.detach().double().cpu()
        experiment.add_histogram_raw(
            tag,
            min=LOW,
            max=HIGH,
            num=float(values.sum()),
            sum=float((values * torch.tensor(centres, dtype=torch.float64)).sum()),
            sum_squares=float((values * torch.tensor(centres, dtype=torch.float64) ** 2).sum()),
            bucket_limits=limits,
            bucket_counts=[0.0, *values.tolist()],
            global_step=step,
        )


def detach(tensor: Optional[Tensor]) -> Optional[Tensor]:
    """``tensor`` cut from the encoder's graph (``None`` stays ``None``)."""
    return None if tensor is None else tensor.detach()
