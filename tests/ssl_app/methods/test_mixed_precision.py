"""Every registered loss with every registered method (each in each of its ``examples``: tests/generic.py)
through training steps: ``Trainer.fit`` in bf16-mixed, and fp16 autocast with a gradient scaler, at
τ = 0.01 for a loss with a temperature (CPU autocast)."""

from __future__ import annotations

import itertools
import math

import torch

from tests.generic import set_up
from tests.helpers import tiny_data, tiny_trainer

STEPS = 2


def build(method_case, loss_case):
    return method_case.build(loss=loss_case.build(**loss_case.at_small_temperature()))


def test_bf16_mixed_training_stays_finite_at_small_temperature(method_case, loss_case, tmp_path):
    """Catches a loss that a method cannot train or validate (masks, labels or anchor features it
    does not hand over, data-sized state not prepared at ``setup``), and a loss or a similarity computed in
    half precision (s/τ at τ = 0.01 loses every digit)."""
    model = build(method_case, loss_case)
    trainer = tiny_trainer(
        tmp_path, max_steps=STEPS, precision="bf16-mixed", log_every_n_steps=1, limit_train_batches=STEPS, limit_val_batches=1
    )
    trainer.fit(model, datamodule=tiny_data())  # one epoch of STEPS steps, then validation
    assert trainer.global_step == STEPS  # no step was skipped or stopped by the non-finite guard
    assert math.isfinite(trainer.callback_metrics["train/loss_step"].item())
    assert math.isfinite(trainer.callback_metrics["val/loss"].item())  # the evaluation path too
    assert "loss/pos_sim" in trainer.callback_metrics  # the diagnostics reached the logger
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_fp16_autocast_with_a_gradient_scaler_stays_finite_at_small_temperature(method_case, loss_case):
    """fp16 as on a GPU (Lightning maps 16-mixed to bf16 on the CPU, so autocast and the scaler are driven here)."""
    data = tiny_data()
    model = set_up(build(method_case, loss_case), data).train()
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
        if applied == 2:  # the scale halves from 2^16 on each overflow: up to 9 steps before the first
            break
    assert applied > 0  # the scaler found a scale at which the gradients are finite, and stepped
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
