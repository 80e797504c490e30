"""LongTailAccuracy on each rank of a 2-process gloo group, and the pieces its tests share.

An importable module because ``torch.multiprocessing.spawn`` imports the worker in each child.
"""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import lightning as L
import torch
from torch import Tensor, nn

from callbacks import LongTailAccuracy
from tests.helpers import tiny_data
from tests.ranks import gloo_rank

WORLD = 2
TEST_SIZE = 45  # odd: shards of 23 and 22 samples
# 4 classes of 40 training images at IF = 8: 40, 20, 10, 5; with thresholds 30/8: many {0}, medium {1, 2}, few {3}.
CALLBACK_OPTIONS = dict(many_shot_above=30, few_shot_below=8)


def long_tailed_data():
    return tiny_data(num_classes=4, train_size=160, test_size=TEST_SIZE, imbalance_factor=8)


class FixedClassifier(L.LightningModule):
    """A fixed random linear classifier on the pixels: deterministic logits, whatever the rank."""

    def __init__(self, num_classes: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(3 * 8 * 8, num_classes)
        self.logged: dict[str, float] = {}

    def class_logits(self, images: Tensor) -> Tensor:
        return self.linear(images.flatten(1))

    def log(self, name: str, value, **kwargs) -> None:  # type: ignore[override]
        self.logged[name] = float(value)


def stub_trainer(data, rank: int = 0, world_size: int = 1) -> SimpleNamespace:
    """What ``LongTailAccuracy.setup``/``evaluate`` read of a Trainer."""
    return SimpleNamespace(
        datamodule=data, global_rank=rank, world_size=world_size, precision_plugin=SimpleNamespace(forward_context=nullcontext)
    )


def evaluate(rank: int = 0, world_size: int = 1) -> dict[str, float]:
    data, model = long_tailed_data(), FixedClassifier()
    trainer = stub_trainer(data, rank, world_size)
    callback = LongTailAccuracy(**CALLBACK_OPTIONS)
    callback.setup(trainer, model, "validate")
    returned = callback.evaluate(trainer, model, "test")
    assert {f"lt/{name}": value for name, value in returned.items()} == model.logged
    return model.logged


def worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    with gloo_rank(rank, WORLD, init_file):
        torch.save(evaluate(rank, WORLD), f"{out_dir}/rank{rank}.pt")
