"""InfoNCE over a similarity matrix: agreement with lightly, and the gradient facts of docs/science.md ("Gradient facts")."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from lightly.loss import NTXentLoss

from ssl_app.errors import ConfigError
from ssl_app.losses import InfoNCE
from ssl_app.losses.base import masked_mean
from ssl_app.losses.info_nce import PLAN_KEY
from ssl_app.methods import SimCLR
from tests.helpers import loss_and_stats, loss_stats, loss_value
from tests.ssl_app.losses import test_chance as chance


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
    ours = loss_value(InfoNCE(temperature), sim, pos, neg)
    theirs = NTXentLoss(temperature=temperature)(out0, out1)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0), (ours.item(), theirs.item())


@pytest.mark.parametrize("temperature", [0.07, 0.5, 2.0])
def test_gradient_facts(temperature):
    sim, pos, neg, ignored = hand_built()
    sim.requires_grad_(True)
    loss = loss_value(InfoNCE(temperature), sim, pos, neg) * sim.shape[0]  # summed over anchors
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
        scaled = loss_value(loss_fn, sim[i : i + 1], pos[i : i + 1], neg[i : i + 1]) * tau
        limit = max(sim[i, 1:].max().item() - sim[i, 0].item(), 0.0)
        # L·τ = margin + τ·log(1 + Σ smaller terms) ≤ margin + τ·log(M)
        assert abs(scaled.item() - limit) <= tau * math.log(sim.shape[1]) + 1e-6, (i, scaled.item(), limit)
    # at a large temperature it is nowhere near the limit: the test can tell
    assert abs(loss_value(InfoNCE(1.0), sim[:1], pos[:1], neg[:1]).item() - 0.5) > 0.1


def test_relative_penalties_concentrate_as_temperature_falls():
    n_neg = 50
    sim = torch.cat([torch.tensor([0.95]), torch.linspace(-0.9, 0.9, n_neg)])[None]
    pos = torch.zeros_like(sim, dtype=torch.bool)
    pos[0, 0] = True
    neg = ~pos
    loss_fn = InfoNCE(0.005)
    stats = loss_stats(loss_fn, sim, pos, neg)
    assert stats["effective_negatives"] < 1.05
    loss_fn = InfoNCE(1000.0)
    stats = loss_stats(loss_fn, sim, pos, neg)
    assert stats["effective_negatives"] > n_neg - 0.05
    # in between it is exp(entropy of r_i), r_i = softmax of the negative logits
    loss_fn = InfoNCE(0.3)
    stats = loss_stats(loss_fn, sim, pos, neg)
    r = torch.softmax(sim[0, 1:] / 0.3, dim=0)
    expected = torch.exp(-(r * r.log()).sum())
    assert torch.allclose(stats["effective_negatives"], expected, rtol=1e-5)
    assert 1.5 < expected < n_neg - 1


def test_anchor_without_positive_is_skipped_without_nan():
    sim, pos, neg, _ = hand_built(1)
    pos[2] = False
    sim.requires_grad_(True)
    loss = loss_value(InfoNCE(0.1), sim, pos, neg)
    keep = torch.tensor([0, 1, 3])
    expected = loss_value(InfoNCE(0.1), sim.detach()[keep], pos[keep], neg[keep])
    assert torch.allclose(loss, expected)
    (grad,) = torch.autograd.grad(loss, sim)
    assert torch.isfinite(grad).all()
    assert torch.all(grad[2] == 0)


def test_diagnostics():
    sim, pos, neg, ignored = hand_built(2)
    sim[ignored] = float("nan")  # never read: the ignored entries must not leak into the stats
    loss_fn = InfoNCE(0.5)
    stats = loss_stats(loss_fn, sim, pos, neg)
    stats = stats
    assert torch.allclose(stats["pos_sim"], sim[pos].mean().float())
    assert torch.allclose(stats["mean_neg_sim"], sim[neg].mean().float())
    assert stats["used_negatives"].item() == 5
    assert 1 <= stats["effective_negatives"].item() <= 5
    assert all(not v.requires_grad and v.dim() == 0 for v in stats.values())


def test_masked_mean_of_empty_mask_is_zero():
    assert masked_mean(torch.ones(3), torch.zeros(3, dtype=torch.bool)).item() == 0.0


@pytest.mark.parametrize("temperature", [0, -0.5, float("inf"), float("nan"), "0.1", True])
def test_bad_temperature(temperature):
    with pytest.raises(ConfigError, match="InfoNCE: temperature"):
        InfoNCE(temperature)


# --- masks reused from step to step: the precomputed MaskPlan ------------------------------


class OpRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """The aten ops a call runs (to tell which of InfoNCE's two paths it took)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def _mask_layouts():
    """(pos, neg) pairs of every kind a method hands over, each with ignored entries."""
    generator = torch.Generator().manual_seed(6)
    _, pos_simclr, neg_simclr = simclr_inputs(torch.randn(5, 8, generator=generator), torch.randn(5, 8, generator=generator))
    moco_pos = torch.zeros(4, 10, dtype=torch.bool)
    moco_pos[torch.arange(4), torch.arange(4)] = True
    moco_neg = ~moco_pos
    moco_neg[:, 7:] = False  # queue slots never written: in neither mask
    labels = torch.tensor([0, 0, 0, 1, 2, 2, 3])  # two positives for class 0; 1 and 3 without one
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(7, dtype=torch.bool)
    supcon_pos, supcon_neg = same & ~eye, ~same & ~eye
    supcon_neg[6] = False  # an anchor with no candidate at all
    return {"simclr": (pos_simclr, neg_simclr), "moco-filling": (moco_pos, moco_neg), "supcon": (supcon_pos, supcon_neg)}


@pytest.mark.parametrize("temperature", [0.05, 0.5])
@pytest.mark.parametrize("layout", ["simclr", "moco-filling", "supcon"])
def test_masks_with_a_memo_take_the_plan_with_the_same_loss_and_gradient(layout, temperature):
    """Catches a plan that differs from the masked loss (excluded entries leaking into the
    softmax, rows without a positive counted or turning NaN, several positives weighted wrongly)
    and a memo that is never read (the mask passes would still run every step)."""
    pos, neg = _mask_layouts()[layout]
    sim = torch.rand(pos.shape, generator=torch.Generator().manual_seed(7)) * 2 - 1
    loss_fn = InfoNCE(temperature)  # no diagnostics asked for: they read the masks on the steps they run
    leaf = sim.clone().requires_grad_(True)
    masked_value = loss_value(loss_fn, leaf, pos, neg)  # masks made for one step: no memo, the masked path
    masked_value.backward()
    masked_grad = leaf.grad
    assert torch.isfinite(masked_value) and torch.isfinite(masked_grad).all()
    memo: dict = {}
    for call in range(3):  # the plan is built into the memo; then read from it
        leaf = sim.clone().requires_grad_(True)
        with OpRecorder() as recorder:
            value = loss_value(loss_fn, leaf, pos, neg, mask_memo=memo)
            value.backward()
        mask_passes = recorder.ops & {"aten.where", "aten.bitwise_or", "aten.masked_fill"}
        assert bool(mask_passes) == (call == 0), (call, sorted(recorder.ops))
        torch.testing.assert_close(value.detach(), masked_value.detach(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(leaf.grad, masked_grad, rtol=1e-5, atol=1e-7)
        assert torch.all(leaf.grad[~(pos | neg)] == 0)
    assert list(memo) == [PLAN_KEY] and not hasattr(loss_fn, "mask_plans")  # the plan is the masks', not the loss's


def test_a_method_s_cached_masks_bring_their_memo_and_masks_made_for_one_step_none():
    """Catches a memo shared between two mask pairs (a plan of other masks would be read) or handed with
    masks the method built for one step (their plan would be built every step and never read again)."""
    model = SimCLR(backbone="small_cnn", proj_hidden_dim=8, proj_dim=4)
    built = []

    def build():
        built.append(1)
        return (m.clone() for m in _mask_layouts()["simclr"])

    pos, neg = model.cached_masks(("a",), build)
    again = model.cached_masks(("a",), build)
    other = model.cached_masks(("b",), build)
    memo = model.masks.memo(pos, neg)
    assert again[0] is pos and len(built) == 2 and memo == {}
    assert memo is model.masks.memo(*again) and memo is not model.masks.memo(*other)
    assert model.masks.memo(pos.clone(), neg.clone()) is None


def test_the_plan_is_stable_at_small_temperature_under_bf16_autocast():
    """Catches a plan whose excluded-entry constant overflows or turns into NaN once τ is small
    and the similarities arrive in bf16 (the sum runs in float32)."""
    pos, neg = _mask_layouts()["simclr"]
    sim = (torch.rand(pos.shape, generator=torch.Generator().manual_seed(9)) * 2 - 1).bfloat16()
    loss_fn = InfoNCE(0.01)
    values, memo = [], {}
    for _ in range(2):
        leaf = sim.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            value = loss_value(loss_fn, leaf, pos, neg, mask_memo=memo)
        value.backward()
        assert torch.isfinite(leaf.grad).all()
        values.append(value)
    expected = loss_value(InfoNCE(0.01), sim.float(), pos, neg)
    assert PLAN_KEY in memo
    torch.testing.assert_close(values[1], values[0])
    torch.testing.assert_close(values[1], expected)


def test_masks_made_under_inference_mode_are_not_planned_and_give_the_same_loss():
    """Catches a plan built from inference tensors (validation's): a training step that read it would fail
    to save it for backward. Evaluation is not the hot path; it keeps the masked path."""
    with torch.inference_mode():
        pos, neg = (m.clone() for m in _mask_layouts()["simclr"])
        sim = torch.rand(pos.shape, generator=torch.Generator().manual_seed(10)) * 2 - 1
        loss_fn, memo = InfoNCE(0.3), {}
        first, second = loss_value(loss_fn, sim, pos, neg, mask_memo=memo), loss_value(loss_fn, sim, pos, neg)
    assert torch.equal(first, second) and memo == {}


# --- settings and the chance value ----------------------------------------------------------------
def test_hparams_and_repr_name_the_temperature_and_its_default():
    """Catches run reports / reprs that mislabel τ, or the documented default changing."""
    assert InfoNCE().hparams() == {"temperature": 0.5}
    assert "InfoNCE(temperature=0.5)" in repr(InfoNCE())


@pytest.mark.parametrize("temperature", [0.1, 1.0])
@pytest.mark.parametrize("several_positives", [False, True], ids=["one_positive", "several_positives"])
def test_chance_value_is_the_log_of_the_candidates_whatever_the_temperature(temperature, several_positives):
    """Catches log(1 + K) hard-coded (wrong with several positives), a log(K) without the positives,
    or anchors without a positive counted in the mean."""
    pos, neg = chance.masks(several_positives)
    value, stats = loss_and_stats(InfoNCE(temperature), torch.full((chance.N, chance.M), 0.9), pos, neg)
    expected = chance.log_candidates(pos, chance.negatives(neg))
    assert stats["chance"].item() == pytest.approx(expected, abs=1e-5)
    assert value.item() == pytest.approx(expected, abs=1e-5)
