"""LongTailAccuracy: group accuracies of known logits through a real validation run, its setup
errors, and 2 gloo processes giving the single-process values."""

from __future__ import annotations

import lightning as L
import pytest
import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset

from callbacks import LongTailAccuracy
from ssl_app.errors import ConfigError
from tests.callbacks import long_tail_worker
from tests.callbacks.helpers import tiny_data, tiny_model, tiny_trainer
from tests.ssl_app.metrics.test_long_tail import SAMPLES, TRAIN_COUNTS, logits_of


class KnownLogits(L.LightningModule):
    """``class_logits`` of sample i is row i of a fixed table (the inputs are sample indices)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("table", table)
        self.seen_training: list[bool] = []

    def class_logits(self, indices: torch.Tensor) -> torch.Tensor:
        self.seen_training.append(self.training)
        return self.table[indices]

    def validation_step(self, batch, batch_idx):
        return None

    test_step = validation_step


class KnownData(L.LightningDataModule):
    """Training counts and (sample index, label) batches of the evaluation split."""

    classification_split = "val"

    def __init__(self, labels: torch.Tensor) -> None:
        super().__init__()
        self.labels = labels
        self.splits: list[str] = []

    def train_class_counts(self) -> list[int]:
        return list(TRAIN_COUNTS)

    def classification_dataloader(self, split, *, batch_size=None, rank=0, world_size=1):
        self.splits.append(split)
        indices = torch.arange(rank, len(self.labels), world_size)
        return DataLoader(TensorDataset(indices, self.labels[indices]), batch_size=batch_size or 5)

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.zeros(2)), batch_size=2)

    test_dataloader = val_dataloader


def test_validate_logs_the_hand_computed_group_accuracies():
    table, labels = logits_of(SAMPLES)
    model, data = KnownLogits(table), KnownData(labels)
    trainer = tiny_trainer([LongTailAccuracy()], limit_val_batches=1.0)
    trainer.validate(model, datamodule=data, verbose=False)
    logged = {k: float(v) for k, v in trainer.callback_metrics.items()}
    # the hand computation of tests/ssl_app/metrics/test_long_tail.py: pooled top-1, per-class group means
    expected = {"lt/top1": 7 / 12, "lt/many": (3 / 4 + 1 / 2) / 2, "lt/medium": 1 / 2, "lt/few": 1.0}
    assert logged == pytest.approx(expected)
    assert data.splits == ["val"] and model.seen_training and not any(model.seen_training)  # eval mode


def test_test_reads_the_test_split_and_an_empty_group_is_not_logged(caplog):
    table, labels = logits_of(SAMPLES)
    model, data = KnownLogits(table), KnownData(labels)
    callback = LongTailAccuracy(many_shot_above=200)  # no class has more than 200 training images
    trainer = tiny_trainer([callback], limit_test_batches=1.0)
    trainer.test(model, datamodule=data, verbose=False)
    assert data.splits == ["test"]
    assert set(trainer.callback_metrics) == {"lt/top1", "lt/medium", "lt/few"}
    assert "0 many-shot (>200)" in caplog.text and "not logged (no class): lt/many" in caplog.text


def test_a_model_without_class_logits_is_one_error_at_setup():
    trainer = tiny_trainer([LongTailAccuracy()], limit_val_batches=1.0)
    with pytest.raises(ConfigError, match=r"LongTailAccuracy needs a model with class_logits.*SimCLR has none"):
        trainer.validate(tiny_model(), datamodule=tiny_data(), verbose=False)


def test_a_datamodule_without_counts_is_one_error_at_setup():
    class Plain(L.LightningDataModule):
        def val_dataloader(self):
            return DataLoader(TensorDataset(torch.zeros(2)), batch_size=2)

    table, _ = logits_of(SAMPLES)
    trainer = tiny_trainer([LongTailAccuracy()], limit_val_batches=1.0)
    with pytest.raises(ConfigError, match="LongTailAccuracy needs a datamodule with train_class_counts and classification"):
        trainer.validate(KnownLogits(table), datamodule=Plain(), verbose=False)


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(many_shot_above=10, few_shot_below=20), r"few_shot_below \(20\) must be <= many_shot_above \(10\)"),
        (dict(few_shot_below=-1), "few_shot_below must be an int >= 0"),
        (dict(split="train"), "split must be val, test or null"),
    ],
)
def test_bad_options_are_named(options, message):
    with pytest.raises(ConfigError, match=message):
        LongTailAccuracy(**options)


def test_a_real_long_tailed_datamodule_gives_every_group():
    values = long_tail_worker.evaluate()
    assert set(values) == {"lt/top1", "lt/many", "lt/medium", "lt/few"}
    assert all(0.0 <= v <= 1.0 for v in values.values())


@pytest.mark.slow
def test_two_processes_log_the_single_process_values(tmp_path):
    """Each rank classifies its own shard of an odd split; the summed counts give exactly the
    values of one process over the whole split, on both ranks."""
    mp.spawn(long_tail_worker.worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=long_tail_worker.WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(long_tail_worker.WORLD)]
    single = long_tail_worker.evaluate()
    assert ranks[0] == ranks[1] == pytest.approx(single, abs=1e-12)
