"""Each loss under bf16 autocast on CPU against its float32 value, with a derived tolerance.

``test_autocast`` only checks "finite". Here, at τ = 0.05 and 0.1:

1. Given the *same* bf16 similarity matrix, the loss must equal the loss of that matrix cast to
   float32 (to 1e-5): every strategy promises to compute in float32 internally, so rounding
   logits s/τ (up to 20 here) to bf16 inside the loss shows up as an error of ~0.1.
2. End to end (embeddings → bf16 matmul → loss) the error is bounded by the Lipschitz constant of
   the loss in the max-norm of s times the measured bf16 rounding of s:
   |L(s̃) − L(s)| ≤ C · max|s̃ − s|, with C = 2/τ for the InfoNCE family (per anchor,
   Σ_j |∂L_i/∂s_ij| = 2/τ · Σ_{k∈neg} P_ik ≤ 2/τ; SupCon and centre-free PaCo average such terms; top-k and quantile
   selections keep the log-sum-exp 1-Lipschitz), C = 1 + λ·|neg| for Simple (λ = 1/|neg| by
   default), C = 2 for HardSimple. The bound is tight to a small factor, not a loose "finite".
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssl_app.losses import HardContrastive, HardSimple, InfoNCE, PaCo, Simple, SupCon
from tests.helpers import loss_value

BATCH, DIM = 16, 32
N = 2 * BATCH

STRATEGIES = {
    "info_nce": (lambda tau: InfoNCE(tau), lambda tau, n_neg: 2 / tau),
    "hard_top_k": (lambda tau: HardContrastive(tau, num_negatives=5), lambda tau, n_neg: 2 / tau),
    "hard_quantile": (lambda tau: HardContrastive(tau, quantile=0.2), lambda tau, n_neg: 2 / tau),
    "simple": (lambda tau: Simple(), lambda tau, n_neg: 2.0),
    "simple_lam": (lambda tau: Simple(lam=0.1), lambda tau, n_neg: 1 + 0.1 * n_neg),
    "hard_simple": (lambda tau: HardSimple(5), lambda tau, n_neg: 2.0),
    "supcon": (lambda tau: SupCon(tau), lambda tau, n_neg: 2 / tau),
    # Without centres PaCo's weighted mean is SupCon (the weights α cancel).
    "paco": (lambda tau: PaCo(tau, alpha=0.5), lambda tau, n_neg: 2 / tau),
}


def masks(uses_labels: bool):
    is_self = torch.eye(N, dtype=torch.bool)
    if uses_labels:
        labels = (torch.arange(BATCH) % 5).repeat(2)
        pos = (labels[:, None] == labels[None, :]) & ~is_self
    else:
        idx = torch.arange(N)
        pos = torch.zeros(N, N, dtype=torch.bool)
        pos[idx, (idx + BATCH) % N] = True
    return pos, ~pos & ~is_self


def embeddings(seed: int) -> torch.Tensor:
    """Two views per image, the second a perturbation of the first: realistic positive similarities."""
    g = torch.Generator().manual_seed(seed)
    first = torch.randn(BATCH, DIM, generator=g)
    return torch.cat([first, first + 0.5 * torch.randn(BATCH, DIM, generator=g)])


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tau", [0.05, 0.1])
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_bf16_autocast_is_within_the_lipschitz_bound_of_float32(name, tau, seed):
    """Catches a strategy that computes its logits or log-sum-exp in bf16 under autocast."""
    build, lipschitz = STRATEGIES[name]
    loss_fn = build(tau)
    pos, neg = masks(loss_fn.uses_labels)
    emb = embeddings(seed)

    z32 = F.normalize(emb, dim=1)
    sim32 = z32 @ z32.T
    exact = loss_value(loss_fn, sim32, pos, neg)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = F.normalize(emb, dim=1)
        sim = z @ z.T
        assert sim.dtype == torch.bfloat16
        amp = loss_value(loss_fn, sim, pos, neg)
    assert amp.dtype == torch.float32

    # 1. inside the loss, nothing is lost beyond the bf16 input itself
    same_input = loss_value(loss_fn, sim.float(), pos, neg)
    assert amp.item() == pytest.approx(same_input.item(), abs=1e-5)

    # 2. end to end, within C · max|Δs| (Δs measured, not assumed)
    delta = (sim.float() - sim32).abs().max().item()
    assert 0 < delta < 0.02  # bf16 rounding of cosine similarities: ~2^-8
    bound = lipschitz(tau, int(neg.sum(dim=1).max())) * delta
    error = abs(amp.item() - exact.item())
    assert error <= bound + 1e-6, f"|ΔL| = {error:.4g} > C·max|Δs| = {bound:.4g}"
