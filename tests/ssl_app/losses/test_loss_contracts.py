"""What every loss promises beyond its formula: its diagnostics change nothing, its state survives a
state dict, its repr names its settings (every registered loss in each of its ``examples``:
``loss_case``, tests/generic.py), and the one entrance rejects bad input naming the argument.

Each loss's own settings (its hyper-parameters and defaults, its selection's edge cases) are
tested in its own file (``test_<name>.py``). Written partly to kill mutants that survived
``mutmut`` (docs/testing.md).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.losses import ContrastiveLoss, InfoNCE, LossTerms, MaskedSimilarities
from ssl_app.losses.base import Temperature, check_temperature, masked_info_nce, mean_over_anchors
from ssl_app.temperature import Constant, Cosine, Learnable, Progress
from tests.helpers import loss_value
from tests.ssl_app.cli.test_cli import QUICKSTART, TINY, error_lines

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


# --- a call is explicit: τ in, terms out, nothing left behind ---------------------------------------------
def loss_state(loss: torch.nn.Module) -> dict:
    """Every attribute of the loss and its submodules, tensors cloned (parameters and buffers included)."""
    state = {}
    for prefix, module in loss.named_modules():
        for name, value in vars(module).items():
            if name in ("_modules", "_parameters", "_buffers"):
                continue
            state[f"{prefix}.{name}"] = value.detach().clone() if isinstance(value, torch.Tensor) else copy.copy(value)
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            state[f"{prefix}.{name}"] = tensor.detach().clone()
    return state


def assert_same_state(before: dict, after: dict) -> None:
    assert before.keys() == after.keys(), sorted(set(before) ^ set(after))
    for key, value in before.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, after[key]), key
        else:
            assert value == after[key] or value is after[key], key


def test_calling_terms_twice_gives_the_same_result_and_changes_no_state(loss_case):
    """Catches per-call state kept on a loss (a τ stashed on the instance, a cache of the last masks, a
    counter): the hardness profile calls ``terms`` a second time on every step with diagnostics, so a
    second call must give the same terms and leave every attribute, parameter and buffer as it was; and a
    whole call of the loss (τ computed once, passed in) must leave nothing behind either."""
    sim, pos, neg, anchors = problem(torch.Generator().manual_seed(7))
    loss = loss_case.ready(FEATURES)
    if not loss.needs_anchor_features:
        anchors = {}
    loss.set_progress(Progress(epoch=2.5, step=7, fraction=0.4))
    handover = MaskedSimilarities(sim, pos, neg, **anchors)
    tau = loss.tau(handover) if loss.has_temperature else None
    before = loss_state(loss)
    first, second = (loss.terms(handover, tau, True) for _ in range(2))
    assert_same_state(before, loss_state(loss))
    assert torch.equal(first.value, second.value)
    for name in ("logits", "used_negatives"):
        one, other = getattr(first, name), getattr(second, name)
        assert (one is None and other is None) or torch.equal(one, other), name
    assert first.extra.keys() == second.extra.keys() and all(torch.equal(first.extra[k], second.extra[k]) for k in first.extra)
    results = [loss(handover, with_stats=True) for _ in range(2)]
    assert_same_state(before, loss_state(loss))
    assert torch.equal(results[0].value, results[1].value) and torch.equal(results[0].value, first.value)
    assert results[0].tau == tau or torch.equal(results[0].tau, tau)


class WrittenBeforeTauWasPassedIn(ContrastiveLoss):
    """InfoNCE as a loss written to the earlier contract: ``terms(handover, with_stats)`` reads ``self.tau``."""

    def __init__(self, temperature: Temperature = 0.5) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, "WrittenBeforeTauWasPassedIn")

    def terms(self, handover: MaskedSimilarities, with_stats: bool) -> LossTerms:
        per_anchor, has_pos = masked_info_nce(handover.sim / self.tau(handover), handover.pos_mask, handover.neg_mask)
        return LossTerms(mean_over_anchors(per_anchor, has_pos), logits=handover.sim / self.tau(handover))


class TemperatureAsANumber(ContrastiveLoss):
    """A loss written when ``self.temperature`` was a number: it divides by it."""

    def __init__(self, temperature: float = 0.5) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, "TemperatureAsANumber")

    def terms(self, handover: MaskedSimilarities, with_stats: bool) -> LossTerms:
        per_anchor, has_pos = masked_info_nce(handover.sim / self.temperature, handover.pos_mask, handover.neg_mask)
        return LossTerms(mean_over_anchors(per_anchor, has_pos))


def test_a_loss_written_before_tau_was_passed_in_still_runs_at_the_tau_in_force():
    """Catches the earlier form of ``terms`` (docs/extending.md before τ was passed in) breaking, or reading
    another τ than the policy's at the progress the method handed over."""
    sim, pos, neg, _ = problem(torch.Generator().manual_seed(8))
    earlier = WrittenBeforeTauWasPassedIn(Cosine(low=0.2, high=0.8, period=4))
    earlier.set_progress(Progress(epoch=1.0, step=3))  # τ = 0.5
    result = earlier(MaskedSimilarities(sim, pos, neg), with_stats=True)
    expected = InfoNCE(0.5)(MaskedSimilarities(sim, pos.clone(), neg.clone()), with_stats=True)
    torch.testing.assert_close(result.value, expected.value)
    assert result.tau == pytest.approx(0.5) and result.stats["temperature"].item() == pytest.approx(0.5)
    torch.testing.assert_close(result.hardness, expected.hardness)


def test_a_loss_that_divides_by_its_temperature_policy_gets_one_error_naming_the_change():
    """Catches a loss written when ``self.temperature`` was a number failing with a TypeError deep in a step
    (``unsupported operand type(s) for /: 'Tensor' and 'Constant'``) instead of one line saying what changed."""
    sim, pos, neg, _ = problem(torch.Generator().manual_seed(9))
    with pytest.raises(ConfigError) as error:
        TemperatureAsANumber()(MaskedSimilarities(sim, pos, neg))
    message = str(error.value)
    assert message.startswith("TemperatureAsANumber: self.temperature is a temperature policy (0.5), not a number")
    assert "terms(handover, tau, with_stats)" in message and "docs/extending.md" in message and "\n" not in message


def test_through_the_cli_that_loss_is_one_error_line(tmp_path, monkeypatch, capsys):
    """The same loss as a user's module named on the command line: one ``error:`` line (status 2) naming the
    loss and the change, not a traceback from inside the first step."""
    (tmp_path / "old_losses.py").write_text(
        "from ssl_app.losses.base import ContrastiveLoss, LossTerms, check_temperature, masked_info_nce, mean_over_anchors\n"
        "class Old(ContrastiveLoss):\n"
        "    def __init__(self, temperature: float = 0.5) -> None:\n"
        "        super().__init__()\n"
        "        self.temperature = check_temperature(temperature, 'Old')\n"
        "    def terms(self, handover, with_stats):\n"
        "        per_anchor, has_pos = masked_info_nce(handover.sim / self.temperature, handover.pos_mask, handover.neg_mask)\n"
        "        return LossTerms(mean_over_anchors(per_anchor, has_pos))\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    lines = error_lines(["fit", "--config", QUICKSTART, *TINY, "--model.init_args.loss=old_losses.Old"], capsys)
    assert len(lines) == 1 and lines[0].startswith("error: Old: self.temperature is a temperature policy"), lines
