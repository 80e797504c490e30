"""Tiny models, data and runs shared by the callback tests, and reading TensorBoard event files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from datamodules.synthetic import SYNTHETIC_AUGMENTATION, SyntheticDataModule
from ssl_app.methods import SimCLR
from tests import helpers as shared

EPOCHS = 2
VAL_SIZE = 45  # odd, and not a multiple of the batch size
#: LiDAR in the tiny fit: 3 augmented views of each of the first 40 val images (fewer than VAL_SIZE: the limit is read).
LIDAR_VIEWS, LIDAR_SAMPLES = 3, 40


def tiny_data(**overrides: Any) -> SyntheticDataModule:
    """The callback tests' shapes: 4 classes of 16-px images, an odd validation split."""
    sizes = dict(num_classes=4, train_size=64, val_size=VAL_SIZE, test_size=30, image_size=16, batch_size=16)
    return shared.tiny_data(**{**sizes, "augmentation": SYNTHETIC_AUGMENTATION, **overrides})


def tiny_model(cls: type = SimCLR, **overrides: Any) -> SimCLR:
    torch.manual_seed(0)
    return cls(**{**dict(backbone="small_cnn", proj_dim=16, proj_hidden_dim=32), **overrides})


def tiny_trainer(callbacks: list, logger: Any = False, **overrides: Any) -> L.Trainer:
    """Two short epochs (2 training batches each) with full validation, where the callbacks act."""
    options = dict(max_epochs=EPOCHS, limit_train_batches=2, limit_val_batches=1.0, logger=logger, callbacks=callbacks)
    return shared.tiny_trainer(**{**options, **overrides})


def tensorboard(tmp_path: Path) -> TensorBoardLogger:
    return TensorBoardLogger(str(tmp_path), name="run")


class RecordingLogger(Logger):
    """Keeps every ``log_metrics`` call: ``history`` is a list of (step, {name: value})."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[tuple[Optional[int], dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: Optional[int] = None) -> None:
        self.history.append((step, dict(metrics)))

    def values(self, name: str) -> list[float]:
        return [metrics[name] for _, metrics in self.history if name in metrics]


def events(log_dir: Path | str) -> EventAccumulator:
    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "histograms": 0, "images": 0})
    accumulator.Reload()
    return accumulator


def last_scalars(log_dir: Path | str, prefix: str = "metrics/") -> dict[str, float]:
    accumulator = events(log_dir)
    return {tag: accumulator.Scalars(tag)[-1].value for tag in accumulator.Tags()["scalars"] if tag.startswith(prefix)}


@torch.no_grad()
def embed_views(model: SimCLR, loader: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(indices, labels, z of view 1, z of view 2)`` of a val-style loader, model in eval mode."""
    model.eval()
    indices, labels, za, zb = [], [], [], []
    for views, label, index in loader:
        za.append(model.embed(views[0]))
        zb.append(model.embed(views[1]) if len(views) > 1 else za[-1])
        labels.append(label)
        indices.append(index)
    return torch.cat(indices), torch.cat(labels), torch.cat(za), torch.cat(zb)
