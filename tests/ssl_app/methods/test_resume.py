"""Resume-then-continue equals an uninterrupted run, bit for bit, on CPU.

Train 2N optimiser steps straight (checkpointing after the first N) and, separately, resume
that checkpoint and train to 2N: weights, key encoder, optimiser state, LR schedule position,
MoCo's momentum-schedule value and queue, and the memory bank must be identical.

The data order is made deterministic in the test (fixed tensors, no augmentation, no shuffling):
the datamodules draw their augmentations from the global RNG, whose state a checkpoint does not
carry, so with them the two runs would see different views by design, not by a bug (the shuffle
order is restored exactly: tests/datamodules/test_resume_order.py).
"""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, Dataset

from ssl_app.losses import InfoNCE
from ssl_app.methods import MemoryBank, MoCo
from ssl_app.optim import Optimization
from tests.helpers import tiny_trainer

SAMPLES = 12
BATCH = 4
STEPS_PER_EPOCH = SAMPLES // BATCH  # N = one epoch
EPOCHS = 2


class FixedViews(Dataset):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.views = torch.randn(2, SAMPLES, 3, 8, 8, generator=g)
        self.labels = torch.arange(SAMPLES) % 3

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int):
        return (self.views[0, i], self.views[1, i]), self.labels[i], i


class FixedData(L.LightningDataModule):
    batch_size = BATCH

    def num_samples(self, split: str) -> int:
        return SAMPLES

    def train_dataloader(self) -> DataLoader:
        return DataLoader(FixedViews(), batch_size=BATCH, shuffle=False, num_workers=0)


OPTIM = Optimization(lr=0.2, momentum=0.9, weight_decay=5e-4, schedule="cosine", warmup_epochs=0.5)


def make(method: str):
    torch.manual_seed(0)
    common = {"backbone": "small_cnn", "proj_dim": 16, "optim": OPTIM}  # BatchNorm on: running stats are state too
    if method == "moco":
        return MoCo(
            loss=InfoNCE(temperature=0.2),
            proj_hidden_dim=32,
            queue_size=10,
            momentum=0.9,
            momentum_schedule="cosine",
            split_bn_groups=2,
            **common,
        )
    # All bank entries as candidates: ``num_negatives`` would draw from the global RNG, whose
    # state a checkpoint does not carry.
    return MemoryBank(loss=InfoNCE(temperature=0.1), bank_momentum=0.3, **common)


class MomentumLog(L.Callback):
    """The key-encoder EMA coefficient MoCo used at each optimiser step of this run."""

    def __init__(self) -> None:
        self.values = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if isinstance(pl_module, MoCo):
            self.values.append(pl_module.momentum_at(trainer.global_step - 1))


def fit(method: str, root, ckpt_path=None):
    model = make(method)
    checkpoints = ModelCheckpoint(dirpath=root / "ckpt", every_n_epochs=1, save_top_k=-1, filename="{epoch}")
    momentum = MomentumLog()
    trainer = tiny_trainer(root, max_epochs=EPOCHS, enable_checkpointing=True, callbacks=[checkpoints, momentum])
    trainer.fit(model, FixedData(), ckpt_path=ckpt_path, weights_only=False)
    return model, trainer, momentum


@pytest.mark.parametrize("method", ["moco", "memory_bank"])
def test_resume_then_continue_equals_the_uninterrupted_run(tmp_path, method):
    """Catches state that a checkpoint loses or restores wrongly: queue/bank, key encoder, optimiser
    momentum, LR-schedule step or the momentum schedule's position."""
    straight, straight_trainer, straight_momentum = fit(method, tmp_path / "straight")
    assert straight_trainer.global_step == EPOCHS * STEPS_PER_EPOCH
    halfway = tmp_path / "straight" / "ckpt" / "epoch=0.ckpt"
    assert torch.load(halfway, map_location="cpu", weights_only=False)["global_step"] == STEPS_PER_EPOCH

    resumed, resumed_trainer, resumed_momentum = fit(method, tmp_path / "resumed", ckpt_path=halfway)
    assert resumed_trainer.global_step == EPOCHS * STEPS_PER_EPOCH

    a, b = straight.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    opt_a, opt_b = straight_trainer.optimizers[0].state_dict(), resumed_trainer.optimizers[0].state_dict()
    assert opt_a["param_groups"] == opt_b["param_groups"]  # lr at the schedule's position
    for index, state in opt_a["state"].items():
        assert torch.equal(state["momentum_buffer"], opt_b["state"][index]["momentum_buffer"]), index
    sched_a = straight_trainer.lr_scheduler_configs[0].scheduler.state_dict()
    sched_b = resumed_trainer.lr_scheduler_configs[0].scheduler.state_dict()
    assert sched_a["last_epoch"] == sched_b["last_epoch"] == EPOCHS * STEPS_PER_EPOCH
    assert sched_a["_last_lr"] == sched_b["_last_lr"]
    if method == "moco":
        # The resumed run continues the cosine schedule where the straight run was, not from its start.
        assert resumed_momentum.values == straight_momentum.values[STEPS_PER_EPOCH:]
        assert straight_momentum.values[0] == 0.9 and straight_momentum.values == sorted(set(straight_momentum.values))


@pytest.mark.parametrize("method", ["moco", "memory_bank"])
def test_step_checkpoint_holds_the_queue_and_bank_after_that_step(tmp_path, method):
    """Catches a mid-epoch checkpoint taken before the step's keys / bank entries were stored."""
    model = make(method)
    every = 2
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=every, save_top_k=-1, filename="{step}")
    trainer = tiny_trainer(tmp_path, max_steps=every, enable_checkpointing=True, callbacks=[checkpoints])
    trainer.fit(model, FixedData())
    saved = torch.load(tmp_path / "ckpt" / f"step={every}.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] == every
    state = saved["state_dict"]
    if method == "moco":
        assert state["queue.filled"].item() == every * BATCH  # found: (every - 1) * BATCH
    else:
        assert (state["bank.labels"] >= 0).sum().item() == every * BATCH
    for key, value in model.state_dict().items():
        if key.startswith(("queue.", "bank.")):
            assert torch.equal(state[key], value), key
