"""Every strategy under training-step conditions: mixed-precision autocast and no host syncs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ssl_app.losses import HardContrastive, HardSimple, InfoNCE, PaCo, Simple, SupCon
from tests.helpers import loss_and_stats


def _fp16_autocast_on_cpu() -> bool:
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            return (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16
    except (RuntimeError, AssertionError):
        return False


AMP_DTYPES = [
    torch.bfloat16,
    pytest.param(
        torch.float16,
        marks=pytest.mark.skipif(
            not _fp16_autocast_on_cpu(),
            reason="this torch build has no float16 autocast on CPU (added in torch 2.x); bf16 covers CPU",
        ),
    ),
]

STRATEGIES = {
    "info_nce": lambda tau: InfoNCE(tau),
    "hard_top_k": lambda tau: HardContrastive(tau, num_negatives=5),
    "hard_quantile": lambda tau: HardContrastive(tau, quantile=0.2),
    "simple": lambda tau: Simple(),
    "simple_lam": lambda tau: Simple(lam=0.1),
    "hard_simple": lambda tau: HardSimple(5),
    "supcon": lambda tau: SupCon(tau),
    # The sample terms only (no centres); with centre logits: tests/ssl_app/losses/test_paco.py.
    "paco": lambda tau: PaCo(tau, alpha=0.5),
}


def masks(batch: int, labels: torch.Tensor | None):
    """SimCLR masks over 2B views (positive = other view), or label masks when labels are given."""
    n = 2 * batch
    is_self = torch.eye(n, dtype=torch.bool)
    if labels is None:
        idx = torch.arange(n)
        pos = torch.zeros(n, n, dtype=torch.bool)
        pos[idx, (idx + batch) % n] = True
    else:
        both = labels.repeat(2)
        pos = (both[:, None] == both[None, :]) & ~is_self
    return pos, ~pos & ~is_self


@pytest.mark.parametrize("collapsed", [False, True], ids=["spread", "collapsed"])
@pytest.mark.parametrize("amp_dtype", AMP_DTYPES)
@pytest.mark.parametrize("tau", [0.01, 0.05])
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_finite_under_autocast(name, tau, amp_dtype, collapsed):
    torch.manual_seed(0)
    batch, dim = 16, 32
    base = torch.randn(2 * batch, dim)
    if collapsed:  # every embedding nearly the same: logits ≈ 1/τ everywhere, the overflow case
        base = torch.randn(1, dim) + 1e-3 * base
    emb = base.requires_grad_(True)
    labels = torch.arange(batch) % 5 if STRATEGIES[name](tau).uses_labels else None
    pos, neg = masks(batch, labels)
    loss_fn = STRATEGIES[name](tau)
    with torch.autocast("cpu", dtype=amp_dtype):
        z = F.normalize(emb, dim=1)
        sim = z @ z.T
        assert sim.dtype == amp_dtype  # the similarity really is low precision
        loss, stats = loss_and_stats(loss_fn, sim, pos, neg)
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss), loss
    loss.backward()
    assert torch.isfinite(emb.grad).all()
    assert emb.grad.abs().sum() > 0
    for key in ("effective_negatives", "pos_sim", "mean_neg_sim"):
        value = stats[key]
        assert value.dim() == 0 and not value.requires_grad and torch.isfinite(value), key


class HostSyncRecorder(TorchDispatchMode):
    """Records the aten ops that make a GPU step wait for the device.

    ``.item()`` / ``bool(tensor)`` / ``float(tensor)`` dispatch to ``_local_scalar_dense``;
    boolean indexing (``x[mask]``, ``x[mask] = v``), ``nonzero``, ``masked_select`` and
    ``unique`` need the data to know their output size.
    """

    SYNCING = {
        "aten._local_scalar_dense",
        "aten.nonzero",
        "aten.nonzero_static",
        "aten.masked_select",
        "aten.is_nonzero",
        "aten.equal",
        "aten._unique",
        "aten._unique2",
        "aten.unique_dim",
        "aten.unique_consecutive",
        "aten.repeat_interleave",
    }
    INDEXING = {"aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_"}

    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if name in self.SYNCING:
            self.syncs.append(name)
        elif name in self.INDEXING:
            indices = args[1] if len(args) > 1 else ()
            if any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in indices):
                self.syncs.append(f"{name} with a boolean mask")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_forward_and_backward_have_no_host_sync(name):
    loss_fn = STRATEGIES[name](0.1)
    batch = 6
    labels = torch.arange(batch) % 3 if loss_fn.uses_labels else None
    pos, neg = masks(batch, labels)
    sim = (torch.rand(2 * batch, 2 * batch) * 2 - 1).requires_grad_(True)
    with HostSyncRecorder() as recorder:
        loss, stats = loss_and_stats(loss_fn, sim, pos, neg)
        loss.backward()
    assert recorder.syncs == []
    assert set(stats) >= {"effective_negatives", "pos_sim", "mean_neg_sim"}


def test_the_sync_check_can_fail():
    """Control: the recorder does see .item(), bool(tensor) and boolean indexing."""
    sim = torch.rand(8, 8, requires_grad=True)
    pos, neg = masks(4, None)
    with HostSyncRecorder() as recorder:
        loss = sim[neg].mean() * sim.max().item()
        if loss > 0:
            loss.backward()
    assert recorder.syncs.count("aten._local_scalar_dense") == 2
    assert "aten.index with a boolean mask" in recorder.syncs
