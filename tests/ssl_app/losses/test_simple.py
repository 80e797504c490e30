"""Simple and HardSimple: linear losses whose gradient does not depend on the similarities."""

from __future__ import annotations

import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.losses import HardSimple, Simple
from tests.helpers import loss_stats, loss_value


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


@pytest.mark.parametrize("k", [1, 3, 50])
def test_hard_simple_against_loop(k):
    sim, pos, neg = ragged_inputs(3)
    loss = loss_value(HardSimple(k), sim, pos, neg)
    assert abs(loss.item() - simple_loop(sim, pos, neg, keep_top=k)) < 1e-5


def test_hard_simple_with_k_at_least_all_is_simple():
    sim, pos, neg = ragged_inputs(4)
    assert torch.allclose(loss_value(HardSimple(100), sim, pos, neg), loss_value(Simple(), sim, pos, neg))


def test_hard_simple_gradient_only_on_the_kept_negatives():
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


def test_diagnostics_count_the_negatives_used():
    sim, pos, neg = ragged_inputs(6)
    has_neg = neg.any(dim=1)
    loss_fn = Simple()
    stats = loss_stats(loss_fn, sim, pos, neg)
    mean_count = neg.sum(dim=1)[has_neg].float().mean()
    assert torch.allclose(stats["effective_negatives"], mean_count)
    assert torch.allclose(stats["mean_neg_sim"], sim[neg].mean())
    assert torch.allclose(stats["pos_sim"], sim[pos].mean())
    loss_fn = HardSimple(3)
    stats = loss_stats(loss_fn, sim, pos, neg)
    capped = neg.sum(dim=1)[has_neg].clamp(max=3).float().mean()
    assert torch.allclose(stats["effective_negatives"], capped)
    assert stats["effective_negatives"] <= 3
    assert torch.allclose(stats["mean_neg_sim"], sim[neg].mean())


@pytest.mark.parametrize("lam", [0, -1.0, float("inf"), float("nan"), True, "0.5"])
def test_simple_bad_lam(lam):
    with pytest.raises(ConfigError, match="^Simple: lam"):
        Simple(lam)


@pytest.mark.parametrize("k", [0, -3, 2.5, True, None])
def test_hard_simple_bad_k(k):
    with pytest.raises(ConfigError, match="^HardSimple: num_negatives"):
        HardSimple(k)
