"""A stop that comes during the validation of ``fit`` (InterruptCheckpoint agrees to it at
``on_validation_batch_end``): the resumed run redoes that whole validation, logs its metrics and
writes the epoch's ModelCheckpoint, as the uninterrupted run did.

In-process ``Trainer.fit`` runs of the real ``SyntheticDataModule``; the stop flag is the one a
SIGTERM sets, so the checkpoint is written by ``InterruptCheckpoint.on_exception`` as in a real run.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ssl_app.checkpointing import InterruptCheckpoint
from ssl_app.losses import InfoNCE
from ssl_app.methods import SimCLR
from tests.helpers import tiny_data, tiny_trainer

EPOCHS = 2
TRAIN_BATCHES = 6  # 48 samples in batches of 8
VAL_BATCHES = 3  # 24 samples


class Record(L.Callback):
    """Training batch indices, validation batches run and ``val/loss`` of each validation; asks for a
    stop after validation batch ``stop_at_val_batch`` of epoch 0."""

    def __init__(self, interrupt: InterruptCheckpoint, stop_at_val_batch: int | None = None) -> None:
        self.interrupt, self.stop_at_val_batch = interrupt, stop_at_val_batch
        self.train: list[tuple[int, list[int]]] = []
        self.val_batches: list[tuple[int, int]] = []
        self.val_loss: dict[int, torch.Tensor] = {}
        self.last_train_loss: torch.Tensor | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.train.append((trainer.current_epoch, batch[2].tolist()))

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.sanity_checking:
            return
        self.val_batches.append((trainer.current_epoch, batch_idx))
        if trainer.current_epoch == 0 and batch_idx == self.stop_at_val_batch:
            self.interrupt.requested = signal.SIGTERM

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.last_train_loss = trainer.callback_metrics["train/loss_epoch"].clone()  # the last epoch's mean

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.val_loss[trainer.current_epoch] = trainer.callback_metrics["val/loss"].clone()


def fit(root: Path, seed: int, *, stop_at_val_batch: int | None = None, ckpt_path: str | None = None) -> Record:
    L.seed_everything(seed)
    interrupt = InterruptCheckpoint()
    record = Record(interrupt, stop_at_val_batch)  # before InterruptCheckpoint: it agrees in the same batch
    epochs = ModelCheckpoint(dirpath=root / "checkpoints", filename="epoch{epoch}", save_top_k=-1, auto_insert_metric_name=False)
    model = SimCLR(loss=InfoNCE(), backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
    trainer = tiny_trainer(
        root,
        max_epochs=EPOCHS,
        limit_val_batches=VAL_BATCHES,
        num_sanity_val_steps=1,
        enable_checkpointing=True,
        callbacks=[record, interrupt, epochs],
    )
    data = tiny_data(val_size=8 * VAL_BATCHES)
    if stop_at_val_batch is None:
        trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    else:
        with pytest.raises(SIGTERMException):
            trainer.fit(model, datamodule=data)
        assert interrupt.saved_path == str(root / "checkpoints" / "last.ckpt")
    return record


def test_a_stop_during_validation_redoes_that_validation_on_resume(tmp_path):
    """Catches a resume that skips the interrupted validation (its metrics and its epoch
    checkpoint lost: Lightning restarts at the training batch before it as if it had finished),
    one that validates only the batches that were left (Lightning's own mid-validation restart
    counts from the first batch again), and a next epoch drawn from a loader left at the end."""
    straight = fit(tmp_path / "straight", 0)
    assert straight.val_batches == [(e, b) for e in range(EPOCHS) for b in range(VAL_BATCHES)]

    interrupted = fit(tmp_path / "interrupted", 0, stop_at_val_batch=1)
    assert interrupted.val_batches == [(0, 0), (0, 1)] and interrupted.val_loss == {}
    folder = tmp_path / "interrupted" / "checkpoints"
    assert sorted(path.name for path in folder.iterdir()) == ["last.ckpt"]

    resumed = fit(tmp_path / "interrupted", 1, ckpt_path=str(folder / "last.ckpt"))
    assert resumed.val_batches == straight.val_batches
    # Epoch 0's weights are the straight run's; later epochs' augmentations come from the global RNG.
    assert sorted(resumed.val_loss) == list(range(EPOCHS))
    assert torch.equal(resumed.val_loss[0], straight.val_loss[0])
    assert sorted(path.name for path in folder.iterdir()) == ["epoch0.ckpt", "epoch1.ckpt", "last.ckpt"]
    saved = torch.load(folder / "epoch0.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] == TRAIN_BATCHES and saved["epoch"] == 0
    # The next epoch trains on the uninterrupted run's order, and its mean loss is of its own steps only
    # (not also of the interrupted epoch's, whose mean the checkpoint carried).
    assert interrupted.train + resumed.train == straight.train
    assert torch.equal(resumed.last_train_loss, straight.last_train_loss)
