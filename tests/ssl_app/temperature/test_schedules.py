"""The schedules' formulas, their labels, and the one ConfigError each bad option value gives."""

from __future__ import annotations

import math

import pytest

from ssl_app.errors import ConfigError
from ssl_app.losses import MACL, HardContrastive, InfoNCE
from ssl_app.temperature import Adaptive, Constant, Cosine, Learnable, Linear, Progress


def test_cosine_and_linear_follow_their_formulas_in_epochs_or_steps():
    """Catches a cosine that starts at ``low`` or has half the period (cos(π t/T)), a schedule that
    counts the wrong unit or whole epochs only, and a ramp that does not stop at ``end``."""
    cosine = Cosine(low=0.1, high=1.0, period=4)
    for epoch in (0.0, 0.5, 1.0, 2.0, 3.25, 4.0, 9.0):
        expected = 0.1 + 0.9 * (1 + math.cos(2 * math.pi * epoch / 4)) / 2
        assert cosine.value(Progress(epoch=epoch, step=999)) == pytest.approx(expected, abs=1e-12)
    assert cosine.value(Progress()) == 1.0 and cosine.value(Progress(epoch=2.0)) == pytest.approx(0.1)
    by_step = Cosine(low=0.2, high=0.6, period=10, unit="step")
    assert by_step.value(Progress(epoch=7.3, step=5)) == pytest.approx(0.2)
    ramp = Linear(start=0.5, end=0.1, length=8, unit="step")
    assert [ramp.value(Progress(epoch=100.0, step=s)) for s in (0, 2, 8, 20)] == pytest.approx([0.5, 0.4, 0.1, 0.1])
    assert Linear(start=0.1, end=0.5, length=2).value(Progress(epoch=0.5)) == pytest.approx(0.2)
    assert Constant(0.3).value(Progress(epoch=5.0, step=50)) == 0.3


def test_labels_are_short_and_readable():
    """Catches labels that run folders and report rows could not tell apart (the period, the unit)."""
    assert Constant(0.5).label() == "0.5"
    assert Cosine().label() == "cosine:0.1-1"
    assert Cosine(0.1, 1.0, period=200).label() == "cosine:0.1-1:T=200"
    assert Cosine(0.1, 1.0, period=200, unit="step").label() == "cosine:0.1-1:T=200:unit=step"
    assert Linear(0.1, 0.5, 10).label() == "linear:0.1-0.5:L=10"
    assert Learnable().label() == "learnable:0.07" and Adaptive().label() == "adaptive:0.1"
    assert repr(InfoNCE(Cosine())) == "InfoNCE(temperature=cosine:0.1-1)" and repr(InfoNCE(0.5)) == "InfoNCE(temperature=0.5)"


BAD = [
    (lambda: Cosine(low=1.0, high=0.1), "Cosine: low must be <= high"),
    (lambda: Cosine(low=0.0), "Cosine: low must be > 0"),
    (lambda: Cosine(period=0), "Cosine: period must be > 0"),
    (lambda: Cosine(unit="epochs"), "Cosine: unit must be epoch or step"),
    (lambda: Linear(start=0.1, end=-1, length=3), "Linear: end must be > 0"),
    (lambda: Linear(start=0.1, end=0.5, length=0), "Linear: length must be > 0"),
    (lambda: Constant(float("nan")), "Constant: value must be > 0"),
    (lambda: Learnable(min=0.5, max=0.5, init=0.5), "Learnable: min must be < max"),
    (lambda: Learnable(init=2.0), "Learnable: init must be in [min, max]"),
    (lambda: Learnable(min=0.0), "Learnable: min must be > 0"),
    (lambda: Adaptive(base=-0.1), "Adaptive: base must be > 0"),
    (lambda: Adaptive(alpha=1.5), "Adaptive: alpha must be in [0, 1]"),
    (lambda: Adaptive(alpha=0.6, a0=1.0), "Adaptive: alpha * (1 + a0) must be < 1"),
    (lambda: InfoNCE(temperature=0), "InfoNCE: temperature must be > 0"),
    (lambda: HardContrastive(temperature=[0.5], num_negatives=3), "HardContrastive: temperature must be a number > 0 or"),
    (lambda: MACL(temperature=Cosine(), alpha=0.3), "MACL: alpha and a_0 shape its own adaptive"),
]


def test_each_bad_value_is_one_config_error_naming_the_option():
    """Catches a policy that accepts a value that would train with τ ≤ 0 or a schedule that never moves,
    and a message that does not name the policy and its option."""
    for build, message in BAD:
        with pytest.raises(ConfigError) as error:
            build()
        assert str(error.value).startswith(message), str(error.value)
