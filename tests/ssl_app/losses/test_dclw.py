"""DCLW (DCL with von Mises–Fisher positive weights): lightly's ``DCLWLoss`` through SimCLR's masks, and σ's check."""

from __future__ import annotations

import pytest
import torch
from lightly.loss import DCLLoss, DCLWLoss

from ssl_app.errors import ConfigError
from ssl_app.losses import DCLW
from ssl_app.losses.dcl import von_mises_fisher_weights
from tests.ssl_app.losses.in_batch import assert_same_value_and_gradient, embeddings, simclr_handover


@pytest.mark.filterwarnings("ignore:To copy construct from a tensor")  # lightly's weight function
def test_equals_lightly_dclw_loss_in_value_and_gradient():
    """Catches a weight on the negatives instead of the positive, a softmax over the wrong pairs (each
    anchor's own instead of the batch's), and a weight that carries gradient, against the reference
    ``lightly.loss.DCLWLoss`` (value and gradient, 1e-5), at a non-default σ."""
    out0, out1 = embeddings(1)
    ours = DCLW(temperature=0.2, sigma=0.3)
    reference = DCLWLoss(temperature=0.2, sigma=0.3)
    assert_same_value_and_gradient(lambda a, b: ours(simclr_handover(a, b)).value, reference, out0, out1)
    unweighted = DCLLoss(temperature=0.2)(out0, out1)
    assert abs(ours(simclr_handover(out0, out1)).value - unweighted) > 1e-3  # the weight changed something


def test_the_weights_average_one_over_the_positive_pairs_and_are_one_elsewhere():
    """Catches weights normalised per anchor or counted over the wrong pairs (their mean is 1 by construction)."""
    handover = simclr_handover(*embeddings(2))
    weights = von_mises_fisher_weights(handover.sim, handover.pos_mask, 0.5)
    assert weights[handover.pos_mask].mean().item() == pytest.approx(1.0, abs=1e-6)
    assert weights[handover.pos_mask].std() > 0.01
    assert torch.equal(weights[~handover.pos_mask], torch.ones(int((~handover.pos_mask).sum())))


@pytest.mark.parametrize("sigma", [0.0, -0.5, float("inf")])
def test_a_bad_sigma_is_one_error_naming_it(sigma):
    with pytest.raises(ConfigError, match=r"^DCLW: sigma must be > 0"):
        DCLW(sigma=sigma)
