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

import signal

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader, Dataset

from ssl_app.checkpointing import InterruptCheckpoint
from ssl_app.methods import MoCo
from ssl_app.optim import Optimization
from tests.generic import method_cases
from tests.helpers import tiny_data, tiny_trainer

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


def make(method_case, **overrides):
    """The method of ``method_case`` with BatchNorm on (running statistics are state too), a
    momentum optimiser and a cosine schedule with warm-up."""
    # MemoryBank's ``num_negatives`` resume: test_memory_bank.py (the examples keep every bank entry).
    return method_case.build(optim=OPTIM, **overrides)


class MomentumLog(L.Callback):
    """The key-encoder EMA coefficient MoCo used at each optimiser step of this run."""

    def __init__(self) -> None:
        self.values = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if isinstance(pl_module, MoCo):
            self.values.append(pl_module.momentum_at(trainer.global_step - 1))


def fit(method_case, root, ckpt_path=None, **overrides):
    model = make(method_case, **overrides)
    checkpoints = ModelCheckpoint(dirpath=root / "ckpt", every_n_epochs=1, save_top_k=-1, filename="{epoch}")
    momentum = MomentumLog()
    trainer = tiny_trainer(root, max_epochs=EPOCHS, enable_checkpointing=True, callbacks=[checkpoints, momentum])
    trainer.fit(model, FixedData(), ckpt_path=ckpt_path, weights_only=False)
    return model, trainer, momentum


def test_resume_then_continue_equals_the_uninterrupted_run(tmp_path, method_case):
    """Catches state that a checkpoint loses or restores wrongly: a queue or bank, a key encoder,
    BatchNorm statistics, optimiser momentum, the LR-schedule step (every registered method:
    tests/generic.py)."""
    straight, straight_trainer, _ = fit(method_case, tmp_path / "straight")
    assert straight_trainer.global_step == EPOCHS * STEPS_PER_EPOCH
    halfway = tmp_path / "straight" / "ckpt" / "epoch=0.ckpt"
    assert torch.load(halfway, map_location="cpu", weights_only=False)["global_step"] == STEPS_PER_EPOCH

    resumed, resumed_trainer, _ = fit(method_case, tmp_path / "resumed", ckpt_path=halfway)
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


def test_moco_resumes_its_cosine_momentum_schedule_where_it_stopped(tmp_path):
    """Catches a resumed MoCo run that restarts its momentum schedule from m (the key encoder would
    then move faster than in the uninterrupted run)."""
    moco = next(case for case in method_cases() if case.target is MoCo)
    schedule = {"momentum": 0.9, "momentum_schedule": "cosine"}
    _, _, straight = fit(moco, tmp_path / "straight", **schedule)
    halfway = tmp_path / "straight" / "ckpt" / "epoch=0.ckpt"
    _, _, resumed = fit(moco, tmp_path / "resumed", ckpt_path=halfway, **schedule)
    # The resumed run continues the cosine schedule where the straight run was, not from its start.
    assert resumed.values == straight.values[STEPS_PER_EPOCH:]
    assert straight.values[0] == 0.9 and straight.values == sorted(set(straight.values))


def test_a_step_checkpoint_holds_the_state_after_that_step(tmp_path, method_case):
    """Catches a mid-epoch checkpoint taken before the step's state was complete: a queue or bank
    written in the module's ``on_train_batch_end``, which Lightning calls after the callbacks'
    (the checkpoint's), would be saved without that step's keys / entries."""
    model = make(method_case)
    every = 2
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=every, save_top_k=-1, filename="{step}")
    trainer = tiny_trainer(tmp_path, max_steps=every, enable_checkpointing=True, callbacks=[checkpoints])
    trainer.fit(model, FixedData())
    saved = torch.load(tmp_path / "ckpt" / f"step={every}.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] == every
    state = saved["state_dict"]
    assert state.keys() == model.state_dict().keys()
    for key, value in model.state_dict().items():
        assert torch.equal(state[key], value), key


class EpochLosses(L.Callback):
    """``train/loss_epoch`` of every epoch this run finished, as the logger received it; asks for a
    stop (as the signal handler does) after step ``stop_at``."""

    def __init__(self, interrupt: InterruptCheckpoint, stop_at: int | None = None) -> None:
        self.interrupt, self.stop_at = interrupt, stop_at
        self.values: dict[int, float] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.stop_at:
            self.interrupt.requested = signal.SIGTERM

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._take(trainer, trainer.current_epoch - 1)

    def on_train_end(self, trainer, pl_module) -> None:
        self._take(trainer, trainer.current_epoch - 1)

    def _take(self, trainer, epoch: int) -> None:
        value = trainer.callback_metrics.get("train/loss_epoch")
        if value is not None and epoch >= 0 and epoch not in self.values:
            self.values[epoch] = value.item()


def test_a_resume_in_the_middle_of_the_last_epoch_logs_that_epochs_mean_loss_as_the_uninterrupted_run(tmp_path):
    """Catches the resumed epoch's ``train/loss_epoch`` averaging only the steps after the resume
    (Lightning's own epoch aggregate is not in a checkpoint), and the mean of a checkpoint saved at an
    epoch's end carried into the next epoch. The real datamodule (its place in the epoch and its
    views resume exactly) and the interrupt checkpoint, stopped mid-epoch 1 of 2 and at the end of 0."""
    batches = 6  # tiny_data: 48 training samples in batches of 8

    def run(root, stop_at=None, ckpt_path=None):
        L.seed_everything(0)
        interrupt = InterruptCheckpoint()
        losses = EpochLosses(interrupt, stop_at)
        trainer = tiny_trainer(root, max_epochs=EPOCHS, callbacks=[losses, interrupt])
        model = method_cases()[0].build(optim=OPTIM)
        if stop_at is None:
            trainer.fit(model, datamodule=tiny_data(), ckpt_path=ckpt_path, weights_only=False)
        else:
            with pytest.raises(SIGTERMException):
                trainer.fit(model, datamodule=tiny_data())
        return losses.values

    straight = run(tmp_path / "straight")
    assert sorted(straight) == [0, 1] and straight[0] != straight[1]
    for name, stop in (("mid", batches + 2), ("end", batches)):
        run(tmp_path / name, stop_at=stop)
        saved = tmp_path / name / "checkpoints" / "last.ckpt"
        assert torch.load(saved, weights_only=False)["global_step"] == stop
        resumed = run(tmp_path / f"{name}_resumed", ckpt_path=str(saved))
        assert resumed == {1: straight[1]}, name
