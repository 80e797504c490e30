"""The measured hardness profile (ssl_app.losses.hardness): each negative's share of its anchor's
penalty, from autograd on the similarities, against closed forms, for any loss with no code of its own."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ssl_app.losses import ContrastiveLoss, HardContrastive, InfoNCE, LossTerms, MaskedSimilarities
from ssl_app.losses.base import mean_over_anchors
from ssl_app.losses.hardness import BINS, HardnessProfile, bin_edges, negative_shares, profile_of
from tests.generic import handover, pair_masks

B, TAU = 12, 0.2


def views(seed: int = 0) -> MaskedSimilarities:
    """SimCLR's hand-over of 2B random unit views, the encoder's graph attached (sim requires grad)."""
    g = torch.Generator().manual_seed(seed)
    z = F.normalize(torch.randn(2 * B, 6, generator=g), dim=1).requires_grad_(True)
    pos, neg = pair_masks(B)
    return MaskedSimilarities(z @ z.T, pos, neg)


def binned_mean(values: torch.Tensor, sim: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    """Mean of ``values`` per profile bin over the entries in ``mask`` (NaN where a bin is empty)."""
    s = sim.detach()[mask].double().numpy()
    v = values.detach()[mask].double().numpy()
    edges = bin_edges().numpy()
    index = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, BINS - 1)
    sums, counts = np.bincount(index, v, BINS), np.bincount(index, minlength=BINS)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def test_infonce_profile_is_the_softmax_over_negatives():
    """The done-when check: catches a share normalised over positives and negatives (the full
    softmax), the positive's gradient counted as a negative's, a sign error, bins shifted when
    summed, or the encoder's graph touched (a second forward or a backward into z)."""
    contrast = views()
    loss = InfoNCE(temperature=TAU)
    result = loss(contrast, with_stats=True)

    closed = torch.softmax((contrast.sim.detach() / TAU).masked_fill(~contrast.neg_mask, float("-inf")), dim=1)
    shares = negative_shares(lambda detached: loss.terms(detached, TAU, with_stats=False).value, contrast)
    torch.testing.assert_close(shares, closed.masked_fill(~contrast.neg_mask, 0.0), atol=1e-4, rtol=0)

    sums, counts = result.hardness
    assert counts.sum() == contrast.neg_mask.sum()  # every negative of every anchor, once
    assert sums.sum().item() == pytest.approx(2 * B, abs=1e-4)  # each anchor's shares sum to 1
    measured = np.where(counts.numpy() > 0, (sums / counts.clamp_min(1)).numpy(), np.nan)
    np.testing.assert_allclose(measured, binned_mean(closed, contrast.sim, contrast.neg_mask), atol=1e-4, equal_nan=True)
    assert contrast.sim.grad_fn is not None and contrast.sim.requires_grad  # the hand-over is untouched
    result.value.backward()  # and the step's own backward still runs through it


def test_a_hard_loss_gives_the_negatives_it_drops_no_share():
    """Catches the share of the unselected negatives leaking in (the profile would be InfoNCE's)."""
    contrast = views(1)
    loss = HardContrastive(temperature=TAU, num_negatives=4)
    shares = negative_shares(lambda detached: loss.terms(detached, TAU, with_stats=False).value, contrast)
    kept = loss.select_negatives(contrast.sim.detach(), contrast.neg_mask)
    closed = torch.softmax((contrast.sim.detach() / TAU).masked_fill(~kept, float("-inf")), dim=1)
    torch.testing.assert_close(shares, closed.masked_fill(~kept, 0.0), atol=1e-4, rtol=0)
    assert (kept.sum(dim=1) == 4).all() and (shares[contrast.neg_mask & ~kept] == 0).all()


class QuadraticPush(ContrastiveLoss):
    """A user's own loss, unknown to the hardness code: L_i = −s_ip + ½ Σ_{k∈neg(i)} (1 + s_ik)²,
    whose penalty on negative j is 1 + s_ij, so its share is (1 + s_ij) / Σ_k (1 + s_ik)."""

    def terms(self, handover: MaskedSimilarities, with_stats: bool) -> LossTerms:
        sim, pos, neg = handover.sim, handover.pos_mask, handover.neg_mask
        per_anchor = -torch.where(pos, sim, 0.0).sum(dim=1) + 0.5 * torch.where(neg, (1 + sim) ** 2, 0.0).sum(dim=1)
        return LossTerms(mean_over_anchors(per_anchor, pos.any(dim=1)))


def test_a_users_own_loss_gets_its_profile_with_no_code():
    """Catches a profile that reads a loss's logits or temperature (a user's loss has neither)."""
    contrast = views(2)
    sums, counts = QuadraticPush()(contrast, with_stats=True).hardness
    push = torch.where(contrast.neg_mask, 1 + contrast.sim.detach(), 0.0)
    closed = push / push.sum(dim=1, keepdim=True)
    measured = np.where(counts.numpy() > 0, (sums / counts.clamp_min(1)).numpy(), np.nan)
    np.testing.assert_allclose(measured, binned_mean(closed, contrast.sim, contrast.neg_mask), atol=1e-4, equal_nan=True)


def test_every_registered_loss_measures_a_profile(loss_first_case):
    """Catches a registered loss (a new one included) whose profile is missing, empty or not shares
    (each counted anchor's negatives share a penalty of 1)."""
    g = torch.Generator().manual_seed(0)
    z = F.normalize(torch.randn(2 * 4, 16, generator=g), dim=1)
    loss = loss_first_case.ready(5)
    contrast = handover(loss, z @ z.T, torch.arange(4) % 3, features=torch.randn(8, 5, generator=g))
    sums, counts = loss(contrast, with_stats=True).hardness
    assert counts.sum() > 0 and sums.isfinite().all()
    anchors = sums.sum().item()
    assert anchors == pytest.approx(round(anchors), abs=1e-4) and 1 <= round(anchors) <= 8
    assert loss(contrast).hardness is None  # only on the steps with diagnostics


def test_the_epoch_profile_is_the_mean_share_over_its_steps():
    """Catches a mean of per-step means (steps with few negatives in a bin would weigh as much)."""
    metric = HardnessProfile()
    first, second = torch.zeros(2, BINS), torch.zeros(2, BINS)
    first[:, 3] = torch.tensor([0.3, 1.0])
    second[:, 3] = torch.tensor([0.3, 3.0])
    metric.update(first)
    metric.update(second)
    mean, negatives = metric.compute()
    assert mean[3].item() == pytest.approx(0.15) and negatives[3] == 4 and mean.sum().item() == pytest.approx(0.15)


def test_a_non_finite_similarity_leaves_out_only_what_it_touches():
    """Catches a NaN where the loss ignores an entry crashing the binning (a NaN index), or a NaN in
    one anchor's negatives spreading into the other anchors' profile."""
    contrast = views(3)
    sim = contrast.sim.detach().clone()
    sim[1, 2] = float("nan")  # a negative of anchor 1: its shares are undefined
    sums, counts = InfoNCE(TAU)(MaskedSimilarities(sim, contrast.pos_mask, contrast.neg_mask), with_stats=True).hardness
    assert sums.isfinite().all() and sums.sum().item() == pytest.approx(2 * B - 1, abs=1e-4)
    assert counts.sum() == contrast.neg_mask.sum() - contrast.neg_mask[1].sum()
    sim[1, 2] = sim[1, 1] = float("nan")  # ... and the anchor itself, in neither mask, whose share is 0
    shares = torch.zeros_like(sim).masked_fill(contrast.neg_mask, 0.5)
    sums, counts = profile_of(shares, MaskedSimilarities(sim, contrast.pos_mask, contrast.neg_mask))
    assert counts.sum() == contrast.neg_mask.sum() - 1 and sums.isfinite().all()  # all but the NaN negative
