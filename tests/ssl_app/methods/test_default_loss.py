"""A method built without a loss gets its own, real InfoNCE (τ = 0.5), whose diagnostics reach the method."""

from __future__ import annotations

import torch

from ssl_app.losses import InfoNCE
from ssl_app.methods import MoCo, SimCLR
from tests.helpers import loss_stats


def test_the_default_loss_is_a_real_instance_of_its_own_whose_stats_the_method_reads():
    """Catches the default ``lazy_instance`` copied as it is: the copy forwarded every call to the
    shared original, so a method built in Python never logged ``loss/*`` (the collapse alarm's
    ``loss/chance`` included), and two models shared one loss object."""
    first = SimCLR(backbone="small_cnn", proj_dim=16, proj_hidden_dim=32)
    second = MoCo(backbone="small_cnn", proj_dim=16, proj_hidden_dim=32, queue_size=8)
    assert type(first.loss) is InfoNCE and first.loss.temperature.constant == 0.5 and first.loss is not second.loss
    sim = torch.randn(4, 4)
    pos = torch.eye(4, dtype=torch.bool)
    assert {"effective_negatives", "chance"} <= set(loss_stats(first.loss, sim, pos, ~pos))
