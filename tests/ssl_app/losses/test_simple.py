"""Simple: a linear loss whose gradient does not depend on the similarities (HardSimple: test_hardsimple.py)."""

from __future__ import annotations

import math

import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.losses import Simple
from tests.helpers import loss_and_stats, loss_stats, loss_value
from tests.ssl_app.losses import test_chance as chance


def ragged_inputs(seed: int = 0, n: int = 8, m: int = 16):
    """Positive at column i (two for anchor 4, none for anchor 5); ragged negatives; ignored entries."""
    g = torch.Generator().manual_seed(seed)
    sim = torch.rand(n, m, generator=g) * 2 - 1
    pos = torch.zeros(n, m, dtype=torch.bool)
    pos[torch.arange(n), torch.arange(n)] = True
    neg = (torch.rand(n, m, generator=g) < 0.75) & ~pos
    pos[4, 12] = True
    neg[4, 12] = False
    pos[5] = False  # no positive: skipped
    neg[6] = False  # no negative: only the positive term
    neg[7] = False
    neg[7, [2, 9]] = True  # two negatives
    return sim, pos, neg


def simple_loop(sim, pos, neg, lam=None, keep_top=None):
    terms = []
    for i in range(sim.shape[0]):
        positives = [float(sim[i, j]) for j in range(sim.shape[1]) if pos[i, j]]
        if not positives:
            continue
        negatives = sorted((float(sim[i, j]) for j in range(sim.shape[1]) if neg[i, j]), reverse=True)
        if keep_top is not None:
            negatives = negatives[:keep_top]
        weight = (1.0 / len(negatives) if negatives else 0.0) if lam is None else lam
        terms.append(-sum(positives) / len(positives) + weight * sum(negatives))
    return sum(terms) / len(terms)


@pytest.mark.parametrize("lam", [None, 0.3, 2.0])
def test_simple_closed_form(lam):
    sim, pos, neg = ragged_inputs()
    loss = loss_value(Simple(lam), sim, pos, neg)
    assert abs(loss.item() - simple_loop(sim, pos, neg, lam)) < 1e-5


@pytest.mark.parametrize("lam", [None, 0.3])
def test_simple_gradient_is_constant_in_s(lam):
    sim_a, pos, neg = ragged_inputs(1)
    sim_b = ragged_inputs(2)[0]
    assert not torch.allclose(sim_a, sim_b)
    grads = []
    for sim in (sim_a, sim_b):
        sim = sim.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(loss_value(Simple(lam), sim, pos, neg), sim)
        grads.append(grad)
    assert torch.equal(grads[0], grads[1])
    # closed form: -1/|P(i)| on positives, λ_i on negatives, over the anchors with a positive
    has_pos = pos.any(dim=1)
    n_valid = has_pos.sum()
    expected = torch.zeros_like(sim_a)
    for i in range(sim_a.shape[0]):
        if not has_pos[i]:
            continue
        expected[i][pos[i]] = -1.0 / pos[i].sum() / n_valid
        weight = (1.0 / neg[i].sum().clamp_min(1)) if lam is None else lam
        expected[i][neg[i]] = weight / n_valid
    assert torch.allclose(grads[0], expected, atol=1e-7)


def test_diagnostics_count_the_negatives_used():
    sim, pos, neg = ragged_inputs(6)
    has_neg = neg.any(dim=1)
    loss_fn = Simple()
    stats = loss_stats(loss_fn, sim, pos, neg)
    mean_count = neg.sum(dim=1)[has_neg].float().mean()
    assert torch.allclose(stats["effective_negatives"], mean_count)
    assert torch.allclose(stats["mean_neg_sim"], sim[neg].mean())
    assert torch.allclose(stats["pos_sim"], sim[pos].mean())


@pytest.mark.parametrize("lam", [0, -1.0, float("inf"), float("nan"), True, "0.5"])
def test_simple_bad_lam(lam):
    with pytest.raises(ConfigError, match="^Simple: lam"):
        Simple(lam)


def test_hparams_and_repr_name_lambda_and_its_default():
    """Catches run reports / reprs that drop λ, or the documented default (None: 1/|neg|) changing."""
    assert Simple().hparams() == {"lam": None} and "Simple(lam=None)" in repr(Simple())
    assert Simple(lam=0.25).hparams() == {"lam": 0.25} and "Simple(lam=0.25)" in repr(Simple(lam=0.25))


@pytest.mark.parametrize("several_positives", [False, True], ids=["one_positive", "several_positives"])
def test_chance_value_is_zero(several_positives):
    """Catches a chance value of −c (the positive term alone) for the default λ = 1/|neg|."""
    pos, neg = chance.masks(several_positives)
    for c in (-0.4, 0.9):
        value, stats = loss_and_stats(Simple(), torch.full((chance.N, chance.M), c), pos, neg)
        assert stats["chance"].item() == 0.0 and value.item() == pytest.approx(0.0, abs=1e-6)


def test_a_fixed_lambda_declares_no_chance_value():
    """Catches a chance value declared where there is none: with a fixed λ the loss at "all equal" is
    c(λ|N| − 1), which moves with c, so a "0" would flag healthy runs (or miss stuck ones)."""
    pos, neg = chance.masks(several_positives=False)
    simple = Simple(lam=0.5)
    at = [loss_value(simple, torch.full((chance.N, chance.M), c), pos, neg).item() for c in (0.2, 0.8)]
    assert at[0] != pytest.approx(at[1])  # the premise: no single value at "all equal"
    assert simple.chance_value(pos, neg) is None
    assert "chance" not in loss_stats(simple, torch.full((chance.N, chance.M), 0.5), pos, neg)


def test_an_anchor_with_a_positive_but_no_negative_makes_the_chance_value_nan():
    """Catches 0 declared where Simple has no chance value: an anchor with a positive and no
    negative has L_i = −c."""
    pos, neg = chance.masks(several_positives=False)
    lacking = neg.clone()
    lacking[0] = False
    assert math.isnan(Simple().chance_value(pos, lacking).item())
    assert Simple().chance_value(pos, neg).item() == 0.0
