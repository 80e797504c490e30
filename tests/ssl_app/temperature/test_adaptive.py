"""The adaptive τ: MACL's rule as a policy, with any loss."""

from __future__ import annotations

import torch

from ssl_app.losses import MACL, InfoNCE
from ssl_app.methods import SimCLR
from ssl_app.temperature import Adaptive, Constant
from tests.generic import TINY_MODEL


def test_infonce_with_the_adaptive_policy_under_simclr_has_macl_s_temperature():
    """Catches an adaptive τ from the wrong mean (per anchor, over the negatives too, or over the
    diagonal of the anchors with themselves), one that differs from MACL's for the same batch, and a
    loss that does not divide by it."""
    torch.manual_seed(0)
    model = SimCLR(**TINY_MODEL)
    generator = torch.Generator().manual_seed(1)
    views = (torch.randn(6, 3, 8, 8, generator=generator), torch.randn(6, 3, 8, 8, generator=generator))
    contrast = model.contrast((views, torch.zeros(6, dtype=torch.long), torch.arange(6)))
    sim, pos = contrast.sim.detach(), contrast.pos_mask
    expected = 0.1 * (1 + 0.5 * (sim[pos].mean() - 0.2))
    macl = MACL(temperature=0.1, alpha=0.5, a_0=0.2)(contrast, with_stats=True)
    adaptive = InfoNCE(Adaptive(base=0.1, alpha=0.5, a0=0.2))(contrast, with_stats=True)
    assert adaptive.stats["temperature"].item() == macl.stats["temperature"].item()
    torch.testing.assert_close(adaptive.stats["temperature"], expected)
    torch.testing.assert_close(adaptive.value, InfoNCE(Constant(expected.item()))(contrast).value)
