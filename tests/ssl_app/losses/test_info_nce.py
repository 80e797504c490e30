"""InfoNCE over a similarity matrix: agreement with lightly, and the gradient facts of PAPER.md."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from lightly.loss import NTXentLoss

from ssl_app.errors import ConfigError
from ssl_app.losses import InfoNCE
from ssl_app.losses.base import masked_mean


def simclr_inputs(out0: torch.Tensor, out1: torch.Tensor):
    """sim / masks as a SimCLR method builds them: 2B anchors against the same 2B candidates."""
    z = F.normalize(torch.cat([out0, out1]), dim=1)
    n = 2 * out0.shape[0]
    idx = torch.arange(n)
    pos = torch.zeros(n, n, dtype=torch.bool)
    pos[idx, (idx + out0.shape[0]) % n] = True
    neg = ~pos & ~torch.eye(n, dtype=torch.bool)
    return z @ z.T, pos, neg


def hand_built(seed: int = 0):
    """4 anchors x 7 candidates: positive at column i, one ignored entry per row, the rest negatives."""
    g = torch.Generator().manual_seed(seed)
    sim = torch.rand(4, 7, generator=g, dtype=torch.float64) * 2 - 1
    pos = torch.zeros(4, 7, dtype=torch.bool)
    ignored = torch.zeros(4, 7, dtype=torch.bool)
    for i in range(4):
        pos[i, i] = True
        ignored[i, (i + 1) % 4] = True
    return sim, pos, ~pos & ~ignored, ignored


@pytest.mark.parametrize("temperature", [0.1, 0.5, 1.0])
def test_equals_lightly_ntxent(temperature):
    torch.manual_seed(0)
    out0, out1 = torch.randn(8, 16), torch.randn(8, 16)
    sim, pos, neg = simclr_inputs(out0, out1)
    ours = InfoNCE(temperature)(sim, pos, neg)
    theirs = NTXentLoss(temperature=temperature)(out0, out1)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0), (ours.item(), theirs.item())


@pytest.mark.parametrize("temperature", [0.07, 0.5, 2.0])
def test_gradient_facts(temperature):
    sim, pos, neg, ignored = hand_built()
    sim.requires_grad_(True)
    loss = InfoNCE(temperature)(sim, pos, neg) * sim.shape[0]  # summed over anchors
    (grad,) = torch.autograd.grad(loss, sim)
    logits = (sim.detach() / temperature).masked_fill(ignored, float("-inf"))
    p = torch.softmax(logits, dim=1)  # P_ij over the positive and all negatives
    for i in range(sim.shape[0]):
        expected_pos = -(p[i][neg[i]].sum()) / temperature
        assert torch.allclose(grad[i, i], expected_pos, rtol=1e-5, atol=1e-7)
        assert torch.allclose(grad[i][neg[i]], p[i][neg[i]] / temperature, rtol=1e-5, atol=1e-7)
        assert torch.all(grad[i][ignored[i]] == 0)
        # Σ_{k≠i} |∂L/∂s_ik| = |∂L/∂s_ii|
        assert torch.allclose(grad[i][neg[i]].abs().sum(), grad[i, i].abs(), rtol=1e-5)
        assert grad[i, i] < 0


def test_small_temperature_limit_is_the_hardest_negative_margin():
    # rows: hardest negative above the positive, and positive above all negatives (limit 0)
    sim = torch.tensor(
        [
            [0.20, 0.70, 0.10, -0.30, 0.55],
            [0.90, 0.40, 0.85, -0.20, 0.10],
            [-0.10, 0.30, 0.25, 0.29, -0.50],
        ]
    )
    pos = torch.zeros_like(sim, dtype=torch.bool)
    pos[:, 0] = True
    neg = ~pos
    tau = 1e-3
    loss_fn = InfoNCE(tau)
    for i in range(sim.shape[0]):
        scaled = loss_fn(sim[i : i + 1], pos[i : i + 1], neg[i : i + 1]) * tau
        limit = max(sim[i, 1:].max().item() - sim[i, 0].item(), 0.0)
        # L·τ = margin + τ·log(1 + Σ smaller terms) ≤ margin + τ·log(M)
        assert abs(scaled.item() - limit) <= tau * math.log(sim.shape[1]) + 1e-6, (i, scaled.item(), limit)
    # at a large temperature it is nowhere near the limit: the test can tell
    assert abs(InfoNCE(1.0)(sim[:1], pos[:1], neg[:1]).item() - 0.5) > 0.1


def test_relative_penalties_concentrate_as_temperature_falls():
    n_neg = 50
    sim = torch.cat([torch.tensor([0.95]), torch.linspace(-0.9, 0.9, n_neg)])[None]
    pos = torch.zeros_like(sim, dtype=torch.bool)
    pos[0, 0] = True
    neg = ~pos
    loss_fn = InfoNCE(0.005)
    loss_fn(sim, pos, neg)
    assert loss_fn.last_stats["effective_negatives"] < 1.05
    loss_fn = InfoNCE(1000.0)
    loss_fn(sim, pos, neg)
    assert loss_fn.last_stats["effective_negatives"] > n_neg - 0.05
    # in between it is exp(entropy of r_i), r_i = softmax of the negative logits
    loss_fn = InfoNCE(0.3)
    loss_fn(sim, pos, neg)
    r = torch.softmax(sim[0, 1:] / 0.3, dim=0)
    expected = torch.exp(-(r * r.log()).sum())
    assert torch.allclose(loss_fn.last_stats["effective_negatives"], expected, rtol=1e-5)
    assert 1.5 < expected < n_neg - 1


def test_anchor_without_positive_is_skipped_without_nan():
    sim, pos, neg, _ = hand_built(1)
    pos[2] = False
    sim.requires_grad_(True)
    loss = InfoNCE(0.1)(sim, pos, neg)
    keep = torch.tensor([0, 1, 3])
    expected = InfoNCE(0.1)(sim.detach()[keep], pos[keep], neg[keep])
    assert torch.allclose(loss, expected)
    (grad,) = torch.autograd.grad(loss, sim)
    assert torch.isfinite(grad).all()
    assert torch.all(grad[2] == 0)


def test_last_stats():
    sim, pos, neg, ignored = hand_built(2)
    sim[ignored] = float("nan")  # never read: the ignored entries must not leak into the stats
    loss_fn = InfoNCE(0.5)
    loss_fn(sim, pos, neg)
    stats = loss_fn.last_stats
    assert torch.allclose(stats["pos_sim"], sim[pos].mean().float())
    assert torch.allclose(stats["neg_sim"], sim[neg].mean().float())
    assert stats["used_negatives"].item() == 5
    assert 1 <= stats["effective_negatives"].item() <= 5
    assert all(not v.requires_grad and v.dim() == 0 for v in stats.values())


def test_masked_mean_of_empty_mask_is_zero():
    assert masked_mean(torch.ones(3), torch.zeros(3, dtype=torch.bool)).item() == 0.0


@pytest.mark.parametrize("temperature", [0, -0.5, float("inf"), float("nan"), "0.1", True])
def test_bad_temperature(temperature):
    with pytest.raises(ConfigError, match="InfoNCE: temperature"):
        InfoNCE(temperature)
