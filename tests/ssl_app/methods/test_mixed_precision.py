"""Mixed precision stays finite at τ = 0.01 for every loss with every method (CPU autocast)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ssl_app.losses import HardContrastive, HardSimple, InfoNCE, PaCo, Simple, SupCon
from ssl_app.methods import MemoryBank, MoCo, SimCLR
from tests.helpers import tiny_data, tiny_trainer

LOSSES = {
    "InfoNCE": lambda: InfoNCE(temperature=0.01),
    "HardContrastive": lambda: HardContrastive(temperature=0.01, num_negatives=4),
    "Simple": lambda: Simple(),
    "HardSimple": lambda: HardSimple(num_negatives=4),
    "SupCon": lambda: SupCon(temperature=0.01),
    # tiny_data: 16 training images per class; the classifier's width is the datamodule's 3 classes.
    "PaCo": lambda: PaCo(temperature=0.01, alpha=0.05, class_counts=[16, 16, 16]),
}
METHODS = {
    "SimCLR": (SimCLR, {}),
    "MoCo": (MoCo, {"queue_size": 16, "split_bn_groups": 2}),
    "MemoryBank": (MemoryBank, {"bank_size": 48}),  # tiny_data's training split
}


def build(method: str, loss: str):
    torch.manual_seed(0)
    cls, options = METHODS[method]
    model = cls(loss=LOSSES[loss](), backbone="small_cnn", proj_hidden_dim=16, proj_dim=8, **options)
    if loss == "PaCo":  # the fp16 loop below runs without a Trainer: build the centres as setup would
        model.loss.prepare(model.feature_dim, 3, None, fitting=False)
    return model


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("loss", LOSSES)
def test_bf16_mixed_training_stays_finite_at_small_temperature(method, loss, tmp_path):
    """Catches a loss or a similarity computed in half precision (s/τ at τ = 0.01 loses every digit)."""
    model = build(method, loss)
    trainer = tiny_trainer(tmp_path, max_steps=3, precision="bf16-mixed")
    trainer.fit(model, datamodule=tiny_data())
    assert trainer.global_step == 3  # no step was skipped or stopped by the non-finite guard
    assert math.isfinite(trainer.callback_metrics["train/loss_step"].item())
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("loss", LOSSES)
def test_fp16_autocast_with_a_gradient_scaler_stays_finite_at_small_temperature(method, loss):
    """fp16 as on a GPU (Lightning maps 16-mixed to bf16 on the CPU, so autocast and the scaler are driven here)."""
    model = build(method, loss).train()
    data = tiny_data()
    data.setup("fit")
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    applied = 0
    for step, batch in zip(range(12), itertools.cycle(data.train_dataloader())):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            contrast = model.contrast(batch)
            loss_value = model.compute_loss(contrast).value
        assert loss_value.dtype == torch.float32 and torch.isfinite(loss_value), step
        scale = scaler.get_scale()
        scaler.scale(loss_value).backward()
        scaler.step(optimizer)  # skipped when the scaled gradients overflowed
        scaler.update()
        applied += scaler.get_scale() >= scale
        model.on_after_backward()
        assert all(torch.isfinite(p).all() for p in model.parameters()), step
    assert applied > 0  # the scaler found a scale at which the gradients are finite, and stepped
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
