"""Every registered loss (each of its ``examples``) under training-step conditions: mixed-precision
autocast and no host syncs (``loss_case``: tests/generic.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.generic import handover
from tests.helpers import HostSyncRecorder


def _fp16_autocast_on_cpu() -> bool:
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            return (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16
    except (RuntimeError, AssertionError):
        return False


AMP_DTYPES = [
    pytest.param(torch.bfloat16, id="bf16"),
    pytest.param(
        torch.float16,
        marks=pytest.mark.skipif(
            not _fp16_autocast_on_cpu(),
            reason="this torch build has no float16 autocast on CPU (added in torch 2.x); bf16 covers CPU",
        ),
        id="fp16",
    ),
]
BATCH, DIM = 16, 32


@pytest.mark.parametrize("collapsed", [False, True], ids=["spread", "collapsed"])
@pytest.mark.parametrize("amp_dtype", AMP_DTYPES)
def test_finite_under_autocast_at_small_temperature(loss_case, amp_dtype, collapsed):
    """Catches a loss computed in half precision: at τ = 0.01 (for a loss with a temperature) s/τ
    overflows fp16 and loses every digit in bf16, worst when every embedding is nearly the same."""
    torch.manual_seed(0)
    base = torch.randn(2 * BATCH, DIM)
    if collapsed:  # every embedding nearly the same: logits ≈ 1/τ everywhere, the overflow case
        base = torch.randn(1, DIM) + 1e-3 * base
    emb = base.requires_grad_(True)
    loss_fn = loss_case.ready(DIM, **loss_case.at_small_temperature())
    labels = torch.arange(BATCH) % 3
    with torch.autocast("cpu", dtype=amp_dtype):
        z = F.normalize(emb, dim=1)
        sim = z @ z.T
        assert sim.dtype == amp_dtype  # the similarity really is low precision
        result = loss_fn(handover(loss_fn, sim, labels, features=emb), with_stats=True)
    loss, stats = result.value, result.stats
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss), loss
    loss.backward()
    assert torch.isfinite(emb.grad).all()
    assert emb.grad.abs().sum() > 0
    assert stats, "no diagnostics with with_stats=True"
    for key, value in stats.items():
        assert value.dim() == 0 and not value.requires_grad and torch.isfinite(value), key


def test_forward_and_backward_have_no_host_sync(loss_case):
    """Catches a loss that asks the device for a value (``.item()``, boolean indexing, ``nonzero``)
    on the training step's path: on a GPU each one stalls the step."""
    batch = 6
    loss_fn = loss_case.ready(8)
    sim = (torch.rand(2 * batch, 2 * batch) * 2 - 1).requires_grad_(True)
    features = torch.randn(2 * batch, 8, requires_grad=True)
    contrast = handover(loss_fn, sim, torch.arange(batch) % 3, features=features)
    with HostSyncRecorder() as recorder:
        result = loss_fn(contrast, with_stats=True)
        result.value.backward()
    assert recorder.syncs == []
    assert set(result.stats) >= {"effective_negatives", "pos_sim", "mean_neg_sim"}


def test_the_sync_check_can_fail():
    """Control: the recorder does see .item(), bool(tensor) and boolean indexing."""
    sim = torch.rand(8, 8, requires_grad=True)
    neg = ~torch.eye(8, dtype=torch.bool)
    with HostSyncRecorder() as recorder:
        loss = sim[neg].mean() * sim.max().item()
        if loss > 0:
            loss.backward()
    assert recorder.syncs.count("aten._local_scalar_dense") == 2
    assert "aten.index with a boolean mask" in recorder.syncs
