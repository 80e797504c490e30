"""DCL (decoupled contrastive loss): lightly's ``DCLLoss`` through SimCLR's masks, its chance value, and
an anchor without negatives."""

from __future__ import annotations

import math

import pytest
import torch
from lightly.loss import DCLLoss

from ssl_app.errors import ConfigError
from ssl_app.losses import DCL, InfoNCE, MaskedSimilarities
from tests.ssl_app.losses import test_chance as chance
from tests.ssl_app.losses.in_batch import assert_same_value_and_gradient, embeddings, simclr_handover


def test_equals_lightly_dcl_loss_in_value_and_gradient():
    """Catches the positive left in the denominator (InfoNCE), a sum instead of a mean over anchors, and
    a wrong negative set, against the reference ``lightly.loss.DCLLoss`` (value and gradient, 1e-5)."""
    out0, out1 = embeddings(0)
    ours = DCL(temperature=0.2)
    assert_same_value_and_gradient(lambda a, b: ours(simclr_handover(a, b)).value, DCLLoss(temperature=0.2), out0, out1)
    infonce = InfoNCE(temperature=0.2)(simclr_handover(out0, out1)).value
    assert ours(simclr_handover(out0, out1)).value < infonce  # the positive's term left the denominator


def test_the_chance_value_is_the_mean_log_of_the_negatives_and_undefined_without_negatives():
    """Catches InfoNCE's log(|P| + K) declared for DCL, and a chance value declared where an anchor with
    a positive has no negative (its loss then moves with the common similarity)."""
    pos, neg = chance.masks(several_positives=True)
    counts = chance.negatives(neg)
    expected = sum(math.log(counts[i]) for i in range(chance.N) if pos[i].any()) / int(pos.any(dim=1).sum())
    assert DCL().chance_value(pos, neg).item() == pytest.approx(expected, rel=1e-6)
    neg[0] = False
    assert math.isnan(DCL().chance_value(pos, neg).item())


def test_an_anchor_without_negatives_keeps_only_its_positive_term_with_a_finite_gradient():
    """Catches log Σ over an empty set (−inf, and a NaN gradient) for a MoCo/bank anchor that has no negative."""
    sim = torch.tensor([[0.5, 0.1, -0.2], [0.3, 0.8, 0.4]], requires_grad=True)
    pos = torch.tensor([[True, False, False], [False, True, False]])
    neg = torch.tensor([[False, True, True], [False, False, False]])
    value = DCL(temperature=0.5)(MaskedSimilarities(sim, pos, neg)).value
    expected = (-0.5 / 0.5 + math.log(math.exp(0.1 / 0.5) + math.exp(-0.2 / 0.5)) - 0.8 / 0.5) / 2
    assert value.item() == pytest.approx(expected, rel=1e-6)
    value.backward()
    assert torch.isfinite(sim.grad).all() and sim.grad[1, 1].item() == pytest.approx(-1 / 0.5 / 2)


def test_a_bad_temperature_is_one_error_naming_it():
    with pytest.raises(ConfigError, match=r"^DCL: temperature must be > 0"):
        DCL(temperature=0.0)
