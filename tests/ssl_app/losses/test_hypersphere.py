"""The hypersphere loss (alignment + λ·uniformity) against lightly's ``HypersphereLoss`` on the per-view
candidate sets, SimCLR's masks against the definition from the embeddings, and the options' checks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from lightly.loss.hypersphere_loss import HypersphereLoss

from ssl_app.errors import ConfigError
from ssl_app.losses import Hypersphere, MaskedSimilarities
from tests.ssl_app.losses.in_batch import assert_same_value_and_gradient, embeddings, simclr_handover


def per_view_handover(anchors: torch.Tensor, others: torch.Tensor) -> MaskedSimilarities:
    """One view's B anchors against [that view; the other view]: positive the other view of the same
    image, negatives the other images *of the anchor's view* — the pairs lightly's (and the authors')
    per-view uniformity term reads."""
    batch = anchors.shape[0]
    a, b = F.normalize(anchors, dim=1), F.normalize(others, dim=1)
    sim = a @ torch.cat([a, b]).T
    eye = torch.eye(batch, dtype=torch.bool)
    pos = torch.cat([torch.zeros_like(eye), eye], dim=1)
    neg = torch.cat([~eye, torch.zeros_like(eye)], dim=1)
    return MaskedSimilarities(sim, pos, neg)


def test_equals_lightly_hypersphere_loss_in_value_and_gradient_on_the_per_view_pairs():
    """Catches a wrong distance (1 − s instead of 2 − 2s), α or t applied in the wrong place, the mean
    of logs instead of the log of the mean, and a sum instead of a mean, against the reference
    ``lightly.loss.hypersphere_loss.HypersphereLoss`` (value and gradient, 1e-5): its
    (L_unif(x) + L_unif(y))/2 is the mean of this loss over each view's own anchors and negatives."""
    out0, out1 = embeddings(7)
    ours = Hypersphere(lam=0.7, alpha=2.0, t=2.0)

    def both_views(a, b):
        return (ours(per_view_handover(a, b)).value + ours(per_view_handover(b, a)).value) / 2

    assert_same_value_and_gradient(both_views, HypersphereLoss(t=2.0, lam=0.7, alpha=2.0), out0, out1)


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_with_simclr_masks_uniformity_covers_every_pair_of_different_images(alpha):
    """Catches a uniformity that averages per anchor, or leaves out the cross-view pairs SimCLR's masks
    make negatives: checked against the definition computed from the embeddings (1e-5)."""
    out0, out1 = embeddings(8)
    ours = Hypersphere(lam=1.0, alpha=alpha, t=2.0)

    def definition(a, b):
        x, y = F.normalize(a, dim=1), F.normalize(b, dim=1)
        z = torch.cat([x, y])
        batch = x.shape[0]
        image = torch.arange(2 * batch) % batch
        different = image[:, None] != image[None, :]
        squared = (z[:, None, :] - z[None, :, :]).pow(2).sum(-1)
        align = (x - y).norm(dim=1).pow(alpha).mean()
        return align + squared[different].mul(-2.0).exp().mean().log()

    assert_same_value_and_gradient(lambda a, b: ours(simclr_handover(a, b)).value, definition, out0, out1)


def test_a_step_without_negatives_has_no_uniformity_term():
    """Catches log(0 / 0) (NaN) when no candidate is a negative (a memory bank's first, empty steps)."""
    sim = torch.tensor([[1.0, 0.6], [0.6, 1.0]], requires_grad=True)
    pos = torch.tensor([[False, True], [True, False]])
    value = Hypersphere()(MaskedSimilarities(sim, pos, torch.zeros_like(pos))).value
    assert value.item() == pytest.approx(2 - 2 * 0.6, abs=1e-6)


@pytest.mark.parametrize(
    "options,message",
    [
        ({"lam": -0.1}, "lam must be >= 0"),
        ({"alpha": 0.0}, "alpha must be > 0"),
        ({"t": -1.0}, "t must be > 0"),
        ({"t": float("inf")}, "t must be > 0 and finite"),
    ],
)
def test_bad_options_are_one_error_naming_them(options, message):
    with pytest.raises(ConfigError, match=rf"^Hypersphere: {message}"):
        Hypersphere(**options)
