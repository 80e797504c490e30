"""SupCon: every candidate with the anchor's label is a positive; anchors without one are skipped."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ssl_app.errors import ConfigError
from ssl_app.losses import InfoNCE, SupCon
from tests.helpers import loss_and_stats, loss_value
from tests.ssl_app.losses import test_chance as chance


def labelled_inputs(seed: int = 0, n: int = 20, m: int = 40):
    """n anchors are the first n of m candidates (self excluded); anchor 7 has a label seen nowhere else."""
    g = torch.Generator().manual_seed(seed)
    z = F.normalize(torch.randn(m, 8, generator=g), dim=1)
    labels = torch.randint(0, 4, (m,), generator=g)
    labels[7] = 99
    sim = z[:n] @ z.T
    same = labels[:n, None] == labels[None, :]
    is_self = torch.zeros(n, m, dtype=torch.bool)
    is_self[torch.arange(n), torch.arange(n)] = True
    return sim, same & ~is_self, ~same & ~is_self, is_self


def supcon_loop(sim, pos, is_self, tau):
    """L_i = -1/|P(i)| Σ_p log(exp(s_ip/τ) / Σ_{a≠i} exp(s_ia/τ)), float64, mean over anchors with a positive."""
    terms = []
    for i in range(sim.shape[0]):
        positives = [j for j in range(sim.shape[1]) if pos[i, j]]
        if not positives:
            continue
        denominator = sum(math.exp(float(sim[i, a]) / tau) for a in range(sim.shape[1]) if not is_self[i, a])
        terms.append(-sum(math.log(math.exp(float(sim[i, p]) / tau) / denominator) for p in positives) / len(positives))
    return sum(terms) / len(terms)


@pytest.mark.parametrize("tau", [0.1, 0.5])
def test_equals_loop_formula(tau):
    sim, pos, neg, is_self = labelled_inputs()
    assert not pos[7].any() and pos.sum(dim=1).max() > 1  # a no-positive anchor and multi-positive ones
    loss = loss_value(SupCon(tau), sim, pos, neg)
    expected = supcon_loop(sim, pos, is_self, tau)
    assert abs(loss.item() - expected) < 1e-5 * max(1.0, abs(expected))


def test_anchor_without_positive_gives_finite_gradients():
    sim, pos, neg, _ = labelled_inputs(1)
    sim.requires_grad_(True)
    loss_fn = SupCon(0.1)
    loss, stats = loss_and_stats(loss_fn, sim, pos, neg)
    (grad,) = torch.autograd.grad(loss, sim)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert torch.all(grad[7] == 0)
    assert grad[0].abs().sum() > 0
    assert stats["has_positive"].item() == pytest.approx(19 / 20)
    assert stats["num_positives"].item() == pytest.approx(pos.sum().item() / 20)
    assert {"effective_negatives", "pos_sim", "mean_neg_sim"} <= stats.keys()


def test_all_anchors_without_positive_is_zero_not_nan():
    sim, _, neg, _ = labelled_inputs(2)
    sim.requires_grad_(True)
    pos = torch.zeros_like(neg)
    loss = loss_value(SupCon(0.1), sim, pos, neg)
    loss.backward()
    assert loss.item() == 0.0 and torch.all(sim.grad == 0)


def test_uses_labels():
    assert SupCon.uses_labels is True and SupCon().uses_labels is True
    assert InfoNCE.uses_labels is False
    assert SupCon().temperature.constant == 0.1


@pytest.mark.parametrize("tau", [0, -0.1, float("nan")])
def test_bad_temperature(tau):
    with pytest.raises(ConfigError, match="^SupCon: temperature"):
        SupCon(tau)


def test_hparams_and_repr_name_the_temperature_and_its_default():
    """Catches run reports / reprs that mislabel τ, or the documented default changing."""
    assert SupCon().hparams() == {"temperature": 0.1}
    assert "SupCon(temperature=0.1)" in repr(SupCon())


@pytest.mark.parametrize("several_positives", [False, True], ids=["one_positive", "several_positives"])
def test_chance_value_is_the_log_of_the_candidates(several_positives):
    """Catches a SupCon chance value that counts one positive per anchor."""
    pos, neg = chance.masks(several_positives)
    _, stats = loss_and_stats(SupCon(0.1), torch.full((chance.N, chance.M), -0.4), pos, neg)
    assert stats["chance"].item() == pytest.approx(chance.log_candidates(pos, chance.negatives(neg)), abs=1e-5)
