"""Every registered loss (each of its ``examples``) under bf16 autocast on CPU against its float32
value, with a tolerance measured, not assumed (``loss_case``: tests/generic.py).

``test_autocast`` only checks "finite". Here, at τ = 0.05 for a loss with a temperature:

1. Given the *same* bf16 similarity matrix, the loss must equal the loss of that matrix cast to
   float32 (to 1e-5): every loss promises to compute in float32 internally, so rounding logits
   s/τ (up to 20 here) to bf16 inside the loss shows up as an error of ~0.1.
2. End to end (embeddings → bf16 matmul → loss) the error is bounded by the loss's Lipschitz
   constant in the max-norm of s times the measured bf16 rounding of s:
   |L(s̃) − L(s)| ≤ C · max|s̃ − s|, where C is *measured*: the ℓ1 norm of ∂L/∂s (the dual of the
   max-norm) at both ends, the larger one, with a factor 2 for the curvature between them. A loss
   that loses precision inside pays far more than that; each loss's own constant (2/τ for the
   InfoNCE family, 1 + λ·|neg| for Simple) is a gradient fact of its own unit tests.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.generic import handover

BATCH, DIM = 16, 32
TEMPERATURE = 0.05


def embeddings(seed: int) -> torch.Tensor:
    """Two views per image, the second a perturbation of the first: realistic positive similarities."""
    g = torch.Generator().manual_seed(seed)
    first = torch.randn(BATCH, DIM, generator=g)
    return torch.cat([first, first + 0.5 * torch.randn(BATCH, DIM, generator=g)])


def value_and_gradient_norm(loss_fn, sim: torch.Tensor, features: torch.Tensor) -> tuple[float, float]:
    """``L(s)`` and ``||∂L/∂s||_1`` (float32 ``sim``)."""
    leaf = sim.detach().float().requires_grad_(True)
    value = loss_fn(handover(loss_fn, leaf, torch.arange(BATCH) % 3, features=features)).value
    (grad,) = torch.autograd.grad(value, leaf)
    return value.item(), grad.abs().sum().item()


@pytest.mark.parametrize("seed", [0, 1])
def test_bf16_autocast_is_within_the_measured_lipschitz_bound_of_float32(loss_case, seed):
    """Catches a loss that computes its logits or log-sum-exp in bf16 under autocast."""
    overrides = {"temperature": TEMPERATURE} if loss_case.accepts("temperature") else {}
    loss_fn = loss_case.ready(DIM, **overrides)
    emb = embeddings(seed)
    features = emb.detach()  # the anchors' "backbone features", for a loss that reads them
    labels = torch.arange(BATCH) % 3

    z32 = F.normalize(emb, dim=1)
    sim32 = z32 @ z32.T
    exact = loss_fn(handover(loss_fn, sim32, labels, features=features)).value

    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = F.normalize(emb, dim=1)
        sim = z @ z.T
        assert sim.dtype == torch.bfloat16
        amp = loss_fn(handover(loss_fn, sim, labels, features=features)).value
    assert amp.dtype == torch.float32

    # 1. inside the loss, nothing is lost beyond the bf16 input itself
    same_input = loss_fn(handover(loss_fn, sim.float(), labels, features=features)).value
    assert amp.item() == pytest.approx(same_input.item(), abs=1e-5)

    # 2. end to end, within C · max|Δs| (Δs measured, C measured at both ends)
    delta = (sim.float() - sim32).abs().max().item()
    assert 0 < delta < 0.02  # bf16 rounding of cosine similarities: ~2^-8
    _, at_exact = value_and_gradient_norm(loss_fn, sim32, features)
    _, at_rounded = value_and_gradient_norm(loss_fn, sim.float(), features)
    bound = 2 * max(at_exact, at_rounded) * delta
    error = abs(amp.item() - exact.item())
    assert error <= bound + 1e-6, f"|ΔL| = {error:.4g} > C·max|Δs| = {bound:.4g}"
