"""Small contracts of the loss strategies that the formula tests do not pin down: what they report
(hyper-parameters, repr, diagnostics), how they reject bad input, and edge shapes of the hard
negative selection. Written to kill mutants that survived ``mutmut`` (docs/testing.md)."""

from __future__ import annotations

import math

import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.losses import HardContrastive, HardSimple, InfoNCE, MaskedSimilarities, PaCo, Simple, SupCon
from ssl_app.losses.base import check_temperature
from ssl_app.losses.hard_contrastive import upper_quantile_negatives
from tests.helpers import loss_stats, loss_value


# Built inside the test (lambdas), so that mutation testing attributes the constructors to it.
@pytest.mark.parametrize(
    "build,hparams,text",
    [
        (lambda: InfoNCE(), {"temperature": 0.5}, "InfoNCE(temperature=0.5)"),
        (lambda: SupCon(), {"temperature": 0.1}, "SupCon(temperature=0.1)"),
        (lambda: HardContrastive(num_negatives=7), {"temperature": 0.5, "num_negatives": 7}, "temperature=0.5, num_negatives=7"),
        (lambda: HardContrastive(0.3, quantile=0.1), {"temperature": 0.3, "quantile": 0.1}, "temperature=0.3, quantile=0.1"),
        (lambda: Simple(), {"lam": None}, "Simple(lam=None)"),
        (lambda: Simple(lam=0.25), {"lam": 0.25}, "Simple(lam=0.25)"),
        (lambda: HardSimple(9), {"num_negatives": 9}, "HardSimple(num_negatives=9)"),
        (
            lambda: PaCo(),
            {"temperature": 0.05, "alpha": 0.05, "normalise_weights": True},
            "PaCo(temperature=0.05, alpha=0.05, normalise_weights=True)",
        ),
    ],
    ids=["InfoNCE", "SupCon", "Hard-topk", "Hard-quantile", "Simple", "Simple-lam", "HardSimple", "PaCo"],
)
def test_hparams_and_repr_name_the_strategy_settings(build, hparams, text):
    """Catches run reports / reprs that mislabel or drop a hyper-parameter (or the documented defaults changing)."""
    loss = build()
    assert loss.hparams() == hparams
    assert text in repr(loss)


def test_hard_contrastive_reports_only_the_selection_it_uses():
    """Catches a top-K loss that also claims a quantile (or vice versa)."""
    assert HardContrastive(num_negatives=3).quantile is None
    assert HardContrastive(quantile=0.2).num_negatives is None


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
    """Catches an error message that names the wrong mask or hides the shapes a user needs to fix the call."""
    with pytest.raises(ValueError, match=message):
        loss_value(InfoNCE(), sim, pos, neg)


def test_temperature_errors_name_the_owner():
    """Catches a temperature error that does not say which option is wrong."""
    with pytest.raises(ConfigError, match=r"^loss: temperature must be > 0"):
        check_temperature(0.0)
    with pytest.raises(ConfigError, match=r"^InfoNCE: temperature"):
        InfoNCE(math.inf)


@pytest.mark.parametrize("quantile", ["0.5", 0.5j, True])
def test_non_numeric_quantile_is_a_config_error(quantile):
    """Catches a quantile check that lets a string (or bool) through to a TypeError deep in the loss."""
    with pytest.raises(ConfigError, match="quantile"):
        HardContrastive(quantile=quantile)


def test_quantile_near_one_keeps_every_negative():
    """Catches an off-by-one threshold index when ceil(q·n) equals the number of candidates."""
    loss = HardContrastive(0.5, quantile=0.9)
    sim = torch.tensor([[0.1, 0.5, -0.2, 0.3, 0.0]])
    neg = torch.ones(1, 5, dtype=torch.bool)  # every candidate a negative: ceil(0.9·5) = 5
    assert torch.equal(loss.select_negatives(sim, neg), neg)


def test_quantile_selection_of_no_candidates_is_empty():
    """Catches a crash on an anchor set with zero candidates (e.g. an empty queue slice)."""
    empty = torch.zeros(3, 0, dtype=torch.bool)
    assert upper_quantile_negatives(torch.zeros(3, 0), empty, 1, 10).shape == (3, 0)


def test_hard_contrastive_effective_negatives_follow_the_softmax_weights():
    """Catches the hard loss reporting the plain count as ``effective_negatives`` (no hardness weighting)."""
    sim = torch.tensor([[0.9, 0.8, 0.1, -0.5, -0.9]])
    pos = torch.tensor([[True, False, False, False, False]])
    loss = HardContrastive(0.05, num_negatives=3)
    stats = loss_stats(loss, sim, pos, ~pos)
    weights = torch.softmax(torch.tensor([0.8, 0.1, -0.5]) / 0.05, dim=0)
    expected = math.exp(-(weights * weights.log()).sum().item())
    assert stats["used_negatives"].item() == 3
    assert stats["effective_negatives"].item() == pytest.approx(expected, rel=1e-5)
    assert expected < 1.01  # at τ = 0.05 the hardest negative takes nearly all the weight


@pytest.mark.parametrize(
    "build",
    [
        lambda: InfoNCE(0.3),
        lambda: SupCon(0.2),
        lambda: HardContrastive(0.3, num_negatives=3),
        lambda: HardContrastive(0.3, quantile=0.5),
        lambda: Simple(),
        lambda: HardSimple(3),
    ],
    ids=["InfoNCE", "SupCon", "Hard-topk", "Hard-quantile", "Simple", "HardSimple"],
)
def test_turning_the_diagnostics_off_changes_neither_the_loss_nor_its_gradient(build):
    """Catches a loss whose value or gradient depends on whether it computed its diagnostics, and
    one that keeps stale or fresh statistics while they are off (a method would log them)."""
    generator = torch.Generator().manual_seed(3)
    sim = torch.rand(6, 9, generator=generator) * 2 - 1
    pos = torch.zeros(6, 9, dtype=torch.bool)
    pos[torch.arange(6), torch.arange(6)] = True
    pos[0, 7] = True
    neg = ~pos
    results = []
    loss = build()
    for with_stats in (True, False):
        leaf = sim.clone().requires_grad_(True)
        # Fresh mask tensors: both calls take the same path (a second call with the very same
        # tensors would run InfoNCE's precomputed MaskPlan, equal only to rounding).
        result = loss(MaskedSimilarities(leaf, pos.clone(), neg.clone()), with_stats)
        result.value.backward()
        results.append((result.value.detach(), leaf.grad, result.stats))
    (on_value, on_grad, on_stats), (off_value, off_grad, off_stats) = results
    assert torch.equal(on_value, off_value) and torch.equal(on_grad, off_grad)
    assert on_stats and {"effective_negatives", "pos_sim", "mean_neg_sim"} <= set(on_stats)
    assert off_stats == {}
