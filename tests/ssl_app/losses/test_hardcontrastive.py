"""HardContrastive: InfoNCE over each anchor's hardest negatives (top-K or upper quantile)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

from ssl_app.errors import ConfigError
from ssl_app.losses import HardContrastive, InfoNCE
from ssl_app.losses.hard_contrastive import upper_quantile_negatives
from tests.helpers import loss_and_stats, loss_stats, loss_value
from tests.ssl_app.losses import test_chance as chance


def ragged_inputs(seed: int = 0, n: int = 7, m: int = 15):
    """Positives at column i; rows with many, few (1, 2) and no negatives; ignored entries."""
    g = torch.Generator().manual_seed(seed)
    sim = torch.rand(n, m, generator=g) * 2 - 1
    pos = torch.zeros(n, m, dtype=torch.bool)
    pos[torch.arange(n), torch.arange(n)] = True
    neg = (torch.rand(n, m, generator=g) < 0.8) & ~pos
    neg[1] = False
    neg[1, 10] = True  # exactly one negative
    neg[2] = False
    neg[2, [3, 12]] = True  # two
    neg[3] = False  # none: loss -log(1) = 0
    pos[4, 9] = True  # two positives
    neg[4, 9] = False
    return sim, pos, neg


def reference(sim, pos, keep, tau):
    """Direct loop over anchors in float64."""
    losses = []
    for i in range(sim.shape[0]):
        positives = [j for j in range(sim.shape[1]) if pos[i, j]]
        if not positives:
            continue
        candidates = positives + [j for j in range(sim.shape[1]) if keep[i, j]]
        lse = math.log(sum(math.exp(float(sim[i, a]) / tau) for a in candidates))
        losses.append(-sum(float(sim[i, p]) / tau - lse for p in positives) / len(positives))
    return sum(losses) / len(losses)


def top_k_loop(sim, neg, k):
    keep = torch.zeros_like(neg)
    for i in range(sim.shape[0]):
        cols = [j for j in range(sim.shape[1]) if neg[i, j]]
        cols.sort(key=lambda j: -float(sim[i, j]))
        keep[i, cols[:k]] = True
    return keep


def quantile_loop(sim, neg, q):
    """k_i = max(1, ceil(q·n_i)) in exact arithmetic; keep every negative ≥ the k_i-th largest."""
    frac = Fraction(q).limit_denominator(10**6)
    keep = torch.zeros_like(neg)
    for i in range(sim.shape[0]):
        values = sorted((float(sim[i, j]) for j in range(sim.shape[1]) if neg[i, j]), reverse=True)
        if not values:
            continue
        k = max(1, math.ceil(frac * len(values)))
        for j in range(sim.shape[1]):
            keep[i, j] = bool(neg[i, j]) and float(sim[i, j]) >= values[k - 1]
    return keep


@pytest.mark.parametrize("extra", [0, 1, 100])
def test_k_at_least_all_negatives_is_exactly_info_nce(extra):
    sim, pos, neg = ragged_inputs()
    k = int(neg.sum(dim=1).max()) + extra
    sim_a = sim.clone().requires_grad_(True)
    sim_b = sim.clone().requires_grad_(True)
    hard = loss_value(HardContrastive(0.2, num_negatives=k), sim_a, pos, neg)
    plain = loss_value(InfoNCE(0.2), sim_b, pos, neg)
    assert torch.equal(hard, plain)
    hard.backward()
    plain.backward()
    assert torch.equal(sim_a.grad, sim_b.grad)


def test_k_one_is_the_hardest_negative_only():
    sim, pos, neg = ragged_inputs(1)
    pos[4, 9], neg[4, 9] = False, True  # single positive everywhere for the closed form
    tau = 0.3
    loss = loss_value(HardContrastive(tau, num_negatives=1), sim, pos, neg)
    terms = []
    for i in range(sim.shape[0]):
        if neg[i].any():
            hardest = sim[i][neg[i]].max()
            terms.append(F.softplus((hardest - sim[i, i]) / tau))  # -log(e^{s_ii/τ} / (e^{s_ii/τ} + e^{s_max/τ}))
        else:
            terms.append(torch.tensor(0.0))
    assert torch.allclose(loss, torch.stack(terms).mean(), atol=1e-6)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_top_k_against_loop(k):
    sim, pos, neg = ragged_inputs(2)
    tau = 0.25
    loss = loss_value(HardContrastive(tau, num_negatives=k), sim, pos, neg)
    expected = reference(sim, pos, top_k_loop(sim, neg, k), tau)
    assert abs(loss.item() - expected) < 1e-5


@pytest.mark.parametrize("q", [0.1, 0.25, 0.3, 0.5, 0.7, 0.9])
def test_quantile_against_loop(q):
    sim, pos, neg = ragged_inputs(3, n=9, m=40)
    tau = 0.4
    loss_fn = HardContrastive(tau, quantile=q)
    loss, stats = loss_and_stats(loss_fn, sim, pos, neg)
    keep = quantile_loop(sim, neg, q)
    assert abs(loss.item() - reference(sim, pos, keep, tau)) < 1e-5
    has = keep.any(dim=1)
    assert torch.allclose(stats["used_negatives"], keep.sum(dim=1)[has].float().mean())


def test_quantile_counts_are_exact_and_keep_ties():
    # 10 negatives: q = 0.3 keeps exactly 3 (a float ceil(0.3*10) would give 4)
    sim = torch.tensor([[0.9] + [0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, -0.1]])
    pos = torch.zeros_like(sim, dtype=torch.bool)
    pos[0, 0] = True
    loss_fn = HardContrastive(0.5, quantile=0.3)
    stats = loss_stats(loss_fn, sim, pos, ~pos)
    assert stats["used_negatives"].item() == 3
    # ties with the threshold are all kept: k = 1, but three negatives share the top value
    sim = torch.tensor([[0.9, 0.5, 0.5, 0.5, 0.1, 0.0, -0.2]])
    pos = torch.zeros_like(sim, dtype=torch.bool)
    pos[0, 0] = True
    loss_fn = HardContrastive(0.5, quantile=0.1)
    stats = loss_stats(loss_fn, sim, pos, ~pos)
    assert stats["used_negatives"].item() == 3


@pytest.mark.parametrize("kwargs", [{"num_negatives": 2}, {"quantile": 0.3}])
def test_excluded_negatives_get_no_gradient(kwargs):
    sim, pos, neg = ragged_inputs(4, n=6, m=20)
    sim.requires_grad_(True)
    loss_fn = HardContrastive(0.2, **kwargs)
    loss = loss_value(loss_fn, sim, pos, neg)
    (grad,) = torch.autograd.grad(loss, sim)
    kept = loss_fn.select_negatives(sim.detach(), neg)
    assert (kept & ~neg).sum() == 0
    assert (neg & ~kept).sum() > 10  # the test exercises exclusion
    assert torch.all(grad[neg & ~kept] == 0)
    assert torch.all(grad[kept] > 0)
    assert torch.all(grad[~pos & ~neg] == 0)


def test_diagnostics_with_k_five():
    torch.manual_seed(0)
    z = F.normalize(torch.randn(12, 8), dim=1)
    sim = z @ z.T
    pos = torch.zeros(12, 12, dtype=torch.bool)
    idx = torch.arange(12)
    pos[idx, (idx + 6) % 12] = True
    neg = ~pos & ~torch.eye(12, dtype=torch.bool)
    loss_fn = HardContrastive(0.5, num_negatives=5)
    stats = loss_stats(loss_fn, sim, pos, neg)
    assert {"effective_negatives", "pos_sim", "mean_neg_sim", "used_negatives", "used_neg_sim"} <= stats.keys()
    assert 1 <= stats["effective_negatives"].item() <= 5
    assert stats["used_negatives"].item() == 5
    assert stats["used_neg_sim"] > stats["mean_neg_sim"]  # the kept ones are the hardest
    assert torch.allclose(stats["mean_neg_sim"], sim[neg].mean())


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({}, "give exactly one of num_negatives or quantile"),
        ({"num_negatives": 5, "quantile": 0.1}, "give exactly one of num_negatives or quantile"),
        ({"num_negatives": 0}, "num_negatives"),
        ({"num_negatives": -3}, "num_negatives"),
        ({"num_negatives": 2.5}, "num_negatives"),
        ({"num_negatives": True}, "num_negatives"),
        ({"quantile": 0.0}, "quantile"),
        ({"quantile": 1.0}, "quantile"),
        ({"quantile": -0.2}, "quantile"),
        ({"quantile": 1.5}, "quantile"),
        ({"quantile": float("nan")}, "quantile"),
        ({"temperature": 0, "num_negatives": 5}, "temperature"),
        ({"temperature": -1.0, "quantile": 0.1}, "temperature"),
    ],
)
def test_bad_arguments(kwargs, name):
    with pytest.raises(ConfigError, match=f"^HardContrastive: {name}"):
        HardContrastive(**kwargs)


# --- settings, edge cases of the selection, diagnostics (from mutation testing: docs/testing.md) ----
@pytest.mark.parametrize(
    "build,hparams,text",
    [
        (lambda: HardContrastive(num_negatives=7), {"temperature": 0.5, "num_negatives": 7}, "temperature=0.5, num_negatives=7"),
        (lambda: HardContrastive(0.3, quantile=0.1), {"temperature": 0.3, "quantile": 0.1}, "temperature=0.3, quantile=0.1"),
    ],
    ids=["top-k", "quantile"],
)
def test_hparams_and_repr_name_the_selection(build, hparams, text):
    """Catches run reports / reprs that mislabel or drop a hyper-parameter (or the documented default τ changing)."""
    loss = build()
    assert loss.hparams() == hparams
    assert text in repr(loss)


def test_hard_contrastive_reports_only_the_selection_it_uses():
    """Catches a top-K loss that also claims a quantile (or vice versa)."""
    assert HardContrastive(num_negatives=3).quantile is None
    assert HardContrastive(quantile=0.2).num_negatives is None


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


# --- the chance value: InfoNCE's over the negatives this step kept ---------------------------------
@pytest.mark.parametrize(
    "build,kept_on_ties",
    [
        (lambda: HardContrastive(0.5, num_negatives=3), lambda neg: [3] * chance.N),
        # all similarities tied: the quantile keeps every negative tied with its threshold
        (lambda: HardContrastive(0.5, quantile=0.3), chance.negatives),
    ],
    ids=["top-3", "quantile-0.3"],
)
@pytest.mark.parametrize("several_positives", [False, True], ids=["one_positive", "several_positives"])
def test_chance_value_on_tied_similarities_counts_the_kept_negatives(build, kept_on_ties, several_positives):
    """Catches all negatives counted by a top-3 loss, or a quantile that drops the tied ones."""
    pos, neg = chance.masks(several_positives)
    _, stats = loss_and_stats(build(), torch.full((chance.N, chance.M), 0.9), pos, neg)
    assert stats["chance"].item() == pytest.approx(chance.log_candidates(pos, kept_on_ties(neg)), abs=1e-5)


@pytest.mark.parametrize(
    "build,kept",
    [
        (lambda: HardContrastive(0.5, num_negatives=3), lambda n: min(3, n)),
        (lambda: HardContrastive(0.5, quantile=0.3), lambda n: max(1, math.ceil(0.3 * n))),
    ],
    ids=["top-3", "quantile-0.3"],
)
def test_hard_chance_counts_the_negatives_this_step_kept(build, kept):
    """Catches a hard loss declaring InfoNCE's chance over all its negatives: on untied similarities
    the quantile keeps ceil(q·n), not n (a collapsed hard run would then sit log(n / ceil(q·n))
    nats below its "chance" and never be flagged)."""
    pos, neg = chance.masks(several_positives=True)
    stats = loss_stats(build(), torch.rand(chance.N, chance.M, generator=torch.Generator().manual_seed(0)), pos, neg)
    expected = chance.log_candidates(pos, [kept(n) for n in chance.negatives(neg)])
    assert stats["chance"].item() == pytest.approx(expected, abs=1e-5)
