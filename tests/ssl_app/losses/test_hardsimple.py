"""HardSimple: Simple over each anchor's K hardest negatives (its gradient is still constant in s)."""

from __future__ import annotations

import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.losses import HardSimple, Simple
from tests.helpers import loss_and_stats, loss_stats, loss_value
from tests.ssl_app.losses import test_chance as chance
from tests.ssl_app.losses.test_simple import ragged_inputs, simple_loop


@pytest.mark.parametrize("k", [1, 3, 50])
def test_hardsimple_against_loop(k):
    sim, pos, neg = ragged_inputs(3)
    loss = loss_value(HardSimple(k), sim, pos, neg)
    assert abs(loss.item() - simple_loop(sim, pos, neg, keep_top=k)) < 1e-5


def test_hardsimple_with_k_at_least_all_is_simple():
    sim, pos, neg = ragged_inputs(4)
    assert torch.allclose(loss_value(HardSimple(100), sim, pos, neg), loss_value(Simple(), sim, pos, neg))


def test_hardsimple_gradient_only_on_the_kept_negatives():
    sim, pos, neg = ragged_inputs(5)
    sim.requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_value(HardSimple(2), sim, pos, neg), sim)
    n_valid = pos.any(dim=1).sum()
    for i in range(sim.shape[0]):
        if not pos[i].any() or not neg[i].any():
            assert torch.all(grad[i][neg[i]] == 0)
            continue
        top = sim.detach()[i].masked_fill(~neg[i], -2).topk(min(2, int(neg[i].sum()))).indices
        kept = torch.zeros_like(neg[i])
        kept[top] = True
        assert torch.allclose(grad[i][kept], 1.0 / kept.sum() / n_valid)
        assert torch.all(grad[i][neg[i] & ~kept] == 0)


def test_hardsimple_diagnostics_count_the_negatives_kept():
    sim, pos, neg = ragged_inputs(6)
    has_neg = neg.any(dim=1)
    stats = loss_stats(HardSimple(3), sim, pos, neg)
    capped = neg.sum(dim=1)[has_neg].clamp(max=3).float().mean()
    assert torch.allclose(stats["effective_negatives"], capped)
    assert stats["effective_negatives"] <= 3
    assert torch.allclose(stats["mean_neg_sim"], sim[neg].mean())


@pytest.mark.parametrize("k", [0, -3, 2.5, True, None])
def test_hardsimple_bad_k(k):
    with pytest.raises(ConfigError, match="^HardSimple: num_negatives"):
        HardSimple(k)


def test_hparams_and_repr_name_k():
    """Catches run reports / reprs that drop K."""
    assert HardSimple(9).hparams() == {"num_negatives": 9} and "HardSimple(num_negatives=9)" in repr(HardSimple(9))


def test_chance_value_is_zero_over_the_kept_negatives():
    """Catches a chance value other than Simple's 0 (e.g. −c, the positive term alone)."""
    pos, neg = chance.masks(several_positives=True)
    value, stats = loss_and_stats(HardSimple(3), torch.full((chance.N, chance.M), 0.9), pos, neg)
    assert stats["chance"].item() == 0.0 and value.item() == pytest.approx(0.0, abs=1e-6)
