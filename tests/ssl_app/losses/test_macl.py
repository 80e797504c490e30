"""MACL (model-aware contrastive loss) against lightly's ``MACLLoss``, its adaptive temperature and
chance value, and the options' checks."""

from __future__ import annotations

import math

import pytest
from lightly.loss import MACLLoss

from ssl_app.errors import ConfigError
from ssl_app.losses import MACL, InfoNCE
from ssl_app.losses.macl import EPS
from tests.ssl_app.losses import test_chance as chance
from tests.ssl_app.losses.in_batch import assert_same_value_and_gradient, embeddings, simclr_handover


@pytest.mark.parametrize("options", [{}, {"temperature": 0.2, "alpha": 0.3, "a_0": 0.2}], ids=["defaults", "other"])
def test_equals_lightly_macl_loss_in_value_and_gradient(options):
    """Catches a temperature from the wrong mean (per anchor, or with gradient), a weight 1/(1 − P) that
    carries gradient or sits on the negatives, against the reference ``lightly.loss.MACLLoss`` (value
    and gradient, 1e-5), at its defaults and at other settings."""
    out0, out1 = embeddings(9)
    ours = MACL(**options)
    reference = MACLLoss(*options.values()) if options else MACLLoss()
    assert_same_value_and_gradient(lambda a, b: ours(simclr_handover(a, b)).value, reference, out0, out1)


def test_the_temperature_follows_the_mean_positive_similarity_and_is_reported():
    """Catches a fixed τ (MACL = reweighted InfoNCE) and a reported temperature that is not the step's."""
    handover = simclr_handover(*embeddings(10))
    result = MACL(temperature=0.1, alpha=0.5, a_0=0.1)(handover, with_stats=True)
    mean_positive = handover.sim[handover.pos_mask].mean()
    expected = 0.1 * (1 + 0.5 * (mean_positive - 0.1))
    assert result.stats["temperature"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert MACL(alpha=0.0)(handover).value != MACL(alpha=0.5)(handover).value
    assert InfoNCE(temperature=0.1)(handover).value < MACL(alpha=0.0)(handover).value  # weights 1/(1 − P) > 1


def test_the_chance_value_is_log_of_the_candidates_over_one_minus_their_inverse():
    """Catches InfoNCE's chance value declared for MACL (the 1/(1 − P) weight at P = 1/|A(i)| left out)."""
    pos, neg = chance.masks(several_positives=True)
    sizes = [int(pos[i].sum() + neg[i].sum()) for i in range(chance.N) if pos[i].any()]
    expected = sum(math.log(a) / (1 - 1 / a + EPS) for a in sizes) / len(sizes)
    assert MACL().chance_value(pos, neg).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    "options,message",
    [
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"alpha": 1.5}, r"alpha must be in \[0, 1\]"),
        ({"a_0": -0.1}, r"a_0 must be in \[0, 1\]"),
        ({"alpha": 0.6, "a_0": 0.8}, r"alpha \* \(1 \+ a_0\) must be < 1"),
    ],
)
def test_bad_options_are_one_error_naming_them(options, message):
    with pytest.raises(ConfigError, match=rf"^MACL: {message}"):
        MACL(**options)
