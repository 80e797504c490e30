"""What every loss promises beyond its formula: its diagnostics change nothing, its state survives a
state dict, its repr names its settings (every registered loss in each of its ``examples``:
``loss_case``, tests/generic.py), and the one entrance rejects bad input naming the argument.

Each loss's own settings (its hyper-parameters and defaults, its selection's edge cases) are
tested in its own file (``test_<name>.py``). Written partly to kill mutants that survived
``mutmut`` (docs/testing.md).
"""

from __future__ import annotations

import math

import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.losses import InfoNCE, MaskedSimilarities
from ssl_app.losses.base import check_temperature
from ssl_app.temperature import Constant, Cosine, Learnable, Progress
from tests.helpers import loss_value

FEATURES = 5


def problem(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """6 anchors × 9 candidates: a positive on the diagonal (two for anchor 0), the rest negatives;
    anchor features and labels for a loss that reads them."""
    sim = torch.rand(6, 9, generator=generator) * 2 - 1
    pos = torch.zeros(6, 9, dtype=torch.bool)
    pos[torch.arange(6), torch.arange(6)] = True
    pos[0, 7] = True
    anchors = {"anchor_features": torch.randn(6, FEATURES, generator=generator), "anchor_labels": torch.arange(6) % 3}
    return sim, pos, ~pos, anchors


def test_turning_the_diagnostics_off_changes_neither_the_loss_nor_its_gradient(loss_case):
    """Catches a loss whose value or gradient depends on whether it computed its diagnostics, and
    one that keeps stale or fresh statistics while they are off (a method would log them)."""
    sim, pos, neg, anchors = problem(torch.Generator().manual_seed(3))
    loss = loss_case.ready(FEATURES)
    if not loss.needs_anchor_features:
        anchors = {}
    results = []
    for with_stats in (True, False):
        leaf = sim.clone().requires_grad_(True)
        # Fresh mask tensors: both calls take the same path (a second call with the very same
        # tensors would run InfoNCE's precomputed MaskPlan, equal only to rounding).
        result = loss(MaskedSimilarities(leaf, pos.clone(), neg.clone(), **anchors), with_stats)
        result.value.backward()
        results.append((result.value.detach(), leaf.grad, result.stats))
    (on_value, on_grad, on_stats), (off_value, off_grad, off_stats) = results
    assert torch.equal(on_value, off_value) and torch.equal(on_grad, off_grad)
    assert on_stats and {"effective_negatives", "pos_sim", "mean_neg_sim"} <= set(on_stats)
    assert off_stats == {}


def test_a_state_dict_round_trip_gives_the_same_loss(loss_case):
    """Catches state a loss owns but does not put in its state dict (a checkpoint would lose it), or
    cannot load into a fresh instance of its example (data-sized state must size itself on load)."""
    sim, pos, neg, anchors = problem(torch.Generator().manual_seed(4))
    trained = loss_case.ready(FEATURES)
    with torch.no_grad():
        for tensor in [*trained.parameters(), *trained.buffers()]:
            if tensor.is_floating_point():
                tensor.add_(0.1 * torch.randn(tensor.shape, generator=torch.Generator().manual_seed(5)))
    state = trained.state_dict()
    fresh = loss_case.build()  # as a checkpoint is loaded: the data-sized state comes from the state dict
    fresh.load_state_dict(state)
    assert fresh.state_dict().keys() == state.keys()
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, state[key]), key
    if not trained.needs_anchor_features:
        anchors = {}
    for loss in (trained, fresh):
        loss.train()
    expected = trained(MaskedSimilarities(sim, pos, neg, **anchors)).value
    assert torch.equal(fresh(MaskedSimilarities(sim, pos.clone(), neg.clone(), **anchors)).value, expected)


def test_the_repr_and_hparams_name_the_example_s_settings(loss_case):
    """Catches run reports and reprs that drop or mislabel a setting the loss was built with."""
    loss = loss_case.build()
    shown = loss.hparams()
    for option, value in loss_case.options.items():
        if option in shown:
            assert shown[option] == value, option
            assert f"{option}={value}" in repr(loss), option
    assert all(isinstance(key, str) for key in shown)


@pytest.mark.parametrize(
    "sim,pos,neg,message",
    [
        (
            torch.zeros(4),
            torch.zeros(4, dtype=torch.bool),
            torch.zeros(4, dtype=torch.bool),
            r"sim must be a 2-D .* got shape \(4,\)",
        ),
        (
            torch.zeros(2, 3),
            torch.zeros(2, 2, dtype=torch.bool),
            torch.zeros(2, 3, dtype=torch.bool),
            r"pos_mask must have the shape of sim \(2, 3\), got \(2, 2\)",
        ),
        (
            torch.zeros(2, 3),
            torch.zeros(2, 3, dtype=torch.bool),
            torch.zeros(3, 3, dtype=torch.bool),
            r"neg_mask must have the shape of sim \(2, 3\), got \(3, 3\)",
        ),
        (
            torch.zeros(2, 3),
            torch.zeros(2, 3),
            torch.zeros(2, 3, dtype=torch.bool),
            r"pos_mask must be a bool tensor, got torch.float32",
        ),
        (
            torch.zeros(2, 3),
            torch.zeros(2, 3, dtype=torch.bool),
            torch.zeros(2, 3, dtype=torch.int64),
            r"neg_mask must be a bool tensor, got torch.int64",
        ),
    ],
)
def test_bad_inputs_name_the_argument_and_the_shapes(sim, pos, neg, message):
    """Catches an error message that names the wrong mask or hides the shapes a user needs to fix the
    call (the base class's check, which every loss's one entrance runs)."""
    with pytest.raises(ValueError, match=message):
        loss_value(InfoNCE(), sim, pos, neg)


def test_temperature_errors_name_the_owner():
    """Catches a temperature error that does not say which option is wrong."""
    with pytest.raises(ConfigError, match=r"^loss: temperature must be > 0"):
        check_temperature(0.0)
    with pytest.raises(ConfigError, match=r"^InfoNCE: temperature"):
        InfoNCE(math.inf)


def test_a_temperature_policy_gives_the_loss_at_the_tau_in_force(loss_first_case):
    """Catches a loss that reads a number where a policy is in force (the policy object, or the
    schedule's start), diagnostics that do not report that τ or are not computed at it, a learnable τ that gets no gradient,
    and a loss without a temperature that reports one. Every registered loss whose constructor has a
    ``temperature`` (tests/generic.py), none named."""
    case = loss_first_case
    sim, pos, neg, anchors = problem(torch.Generator().manual_seed(6))
    if not case.ready(FEATURES).needs_anchor_features:
        anchors = {}

    def handover() -> MaskedSimilarities:
        return MaskedSimilarities(sim.clone().requires_grad_(False), pos.clone(), neg.clone(), **anchors)

    if not case.accepts("temperature"):
        loss = case.ready(FEATURES)
        assert not loss.has_temperature and "temperature" not in loss(handover(), with_stats=True).stats
        return

    def ready(policy):
        torch.manual_seed(0)  # a loss's own parameters (PaCo's centres) drawn alike
        return case.ready(FEATURES, temperature=policy)

    scheduled = ready(Cosine(low=0.2, high=0.8, period=4))
    scheduled.set_progress(Progress(epoch=1.0, step=3))  # a quarter period: τ = 0.5
    result = scheduled(handover(), with_stats=True)
    at_half = ready(Constant(0.5))(handover(), with_stats=True)
    torch.testing.assert_close(result.value, at_half.value)
    assert result.stats["temperature"].item() == pytest.approx(0.5) and at_half.stats["temperature"].item() == 0.5
    # the τ-dependent diagnostics at the τ in force: effective negatives, the measured hardness profile
    torch.testing.assert_close(result.stats["effective_negatives"], at_half.stats["effective_negatives"])
    torch.testing.assert_close(result.hardness, at_half.hardness)
    assert not torch.isclose(ready(Constant(0.8))(handover()).value, at_half.value)  # the start τ differs
    learnable = ready(Learnable(init=0.5))
    value = learnable(handover()).value
    value.backward()
    torch.testing.assert_close(value, at_half.value)
    gradient = learnable.temperature.log_scale.grad
    assert gradient is not None and torch.isfinite(gradient) and gradient != 0
