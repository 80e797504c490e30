"""The datamodule builds only the training views a method consumes (the memory bank uses one)."""

from __future__ import annotations

import pytest
import torch

from ssl_app.losses import InfoNCE
from ssl_app.methods import MemoryBank, MoCo, SimCLR
from tests.helpers import tiny_data, tiny_trainer

SMALL = dict(
    loss=InfoNCE(0.2), backbone="small_cnn", backbone_norm="group", proj_batch_norm=False, proj_hidden_dim=16, proj_dim=8
)


@pytest.mark.parametrize("method,views", [(SimCLR, 2), (MoCo, 2), (MemoryBank, 1)], ids=["simclr", "moco", "memory_bank"])
def test_training_batches_carry_the_views_the_method_uses(method, views, tmp_path):
    torch.manual_seed(0)
    model = method(**SMALL, **({"queue_size": 16} if method is MoCo else {}))
    seen = []
    model.on_train_batch_start = lambda batch, batch_idx: seen.append(len(batch[0]))
    tiny_trainer(tmp_path, max_steps=2).fit(model, datamodule=tiny_data())
    assert model.train_views == views and seen == [views, views]
