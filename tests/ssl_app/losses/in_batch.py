"""The in-batch (SimCLR) setup the reference checks run every loss through, built by the method's own
mask builder (``ssl_app.methods.masks``), and a helper that compares value and gradient with a reference."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ssl_app.losses import MaskedSimilarities
from ssl_app.methods.masks import contrast_masks, views_of


def simclr_handover(out0: torch.Tensor, out1: torch.Tensor) -> MaskedSimilarities:
    """What SimCLR hands its loss for two views of a batch in one process: the 2B normalised
    embeddings (view-major) against themselves, the other view the positive, the anchor ignored."""
    batch = out0.shape[0]
    z = F.normalize(torch.cat([out0, out1]), dim=1)
    members = views_of(0, batch, 2, None, z.device)
    pos_mask, neg_mask = contrast_masks(members, members, uses_labels=False)
    return MaskedSimilarities(z @ z.T, pos_mask, neg_mask)


def embeddings(seed: int, batch: int = 8, dim: int = 16, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Two views of a batch, the second a perturbation of the first (realistic positive similarities)."""
    g = torch.Generator().manual_seed(seed)
    first = torch.randn(batch, dim, generator=g, dtype=dtype)
    return first, first + 0.7 * torch.randn(batch, dim, generator=g, dtype=dtype)


def value_and_grads(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], out0: torch.Tensor, out1: torch.Tensor):
    """``fn(out0, out1)`` and its gradient with respect to both (fresh leaves)."""
    a, b = out0.detach().clone().requires_grad_(True), out1.detach().clone().requires_grad_(True)
    value = fn(a, b)
    grads = torch.autograd.grad(value, (a, b))
    return value.detach(), grads


def assert_same_value_and_gradient(ours, reference, out0: torch.Tensor, out1: torch.Tensor, atol: float = 1e-5) -> None:
    """``ours`` and ``reference`` (each ``(out0, out1) -> scalar``) agree in value and in their
    gradient with respect to the embeddings, within ``atol``; the gradient must not be zero."""
    value, grads = value_and_grads(ours, out0, out1)
    expected, expected_grads = value_and_grads(reference, out0, out1)
    torch.testing.assert_close(value.double(), expected.double(), atol=atol, rtol=0)
    for grad, expected_grad in zip(grads, expected_grads):
        assert expected_grad.abs().max() > 1e-3  # a reference with no gradient would check nothing
        torch.testing.assert_close(grad.double(), expected_grad.double(), atol=atol, rtol=0)
