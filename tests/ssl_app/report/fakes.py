"""Fake run folders for the report tests: what LightningCLI and the sweep tool would write,
made with ``SummaryWriter`` in milliseconds (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml
from torch.utils.tensorboard import SummaryWriter

STEPS_PER_EPOCH = 4
EPOCH_METRICS = ("knn_acc", "uniformity", "tolerance", "alignment", "pos_sim", "top10_neg_sim")


def run_config(
    loss: str,
    seed: int,
    temperature: float | None = None,
    num_negatives: int | None = None,
    save_dir: str = "runs",
    batch_size: int = 128,
) -> dict:
    """A resolved LightningCLI config (the keys the report reads, plus some it must ignore)."""
    loss_args = {}
    if temperature is not None:
        loss_args["temperature"] = temperature
    if num_negatives is not None:
        loss_args["num_negatives"] = num_negatives
    return {
        "seed_everything": seed,
        "trainer": {
            "max_epochs": 3,
            "logger": {
                "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                "init_args": {"save_dir": save_dir, "name": "study", "version": None},
            },
            "callbacks": [{"class_path": "callbacks.EmbeddingMetrics"}, {"class_path": "callbacks.KNNMonitor"}],
        },
        "model": {
            "class_path": "ssl_app.methods.MemoryBank",
            "init_args": {"backbone": "small_cnn", "loss": {"class_path": f"ssl_app.losses.{loss}", "init_args": loss_args}},
        },
        "data": {"class_path": "datamodules.SyntheticDataModule", "init_args": {"batch_size": batch_size}},
    }


def write_run(
    folder: Path,
    config: dict | None,
    final: dict[str, float],
    epochs: int = 3,
    effective_negatives: list[list[float]] | None = None,
    linear_top1: float | None = None,
    positive: np.ndarray | None = None,
    negatives: np.ndarray | None = None,
    sweep: dict | None = None,
    log_epoch: bool = True,
) -> Path:
    """A run folder whose per-epoch ``metrics/<name>`` end at ``final[name]`` (earlier epochs:
    ``final − 0.1 × epochs to go``); ``effective_negatives[e]`` are the per-step values of epoch e;
    histograms are logged at every epoch, the last one being ``positive`` / ``negatives``."""
    folder.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(log_dir=str(folder))
    for epoch in range(epochs):
        for step_in_epoch in range(STEPS_PER_EPOCH):
            step = epoch * STEPS_PER_EPOCH + step_in_epoch
            writer.add_scalar("train/loss_step", 5.0 - 0.1 * step, step)
            if effective_negatives is not None:
                writer.add_scalar("loss/effective_negatives", effective_negatives[epoch][step_in_epoch], step)
            if log_epoch:
                writer.add_scalar("epoch", epoch, step)
        end = (epoch + 1) * STEPS_PER_EPOCH - 1
        for name, value in final.items():
            writer.add_scalar(f"metrics/{name}", value - 0.1 * (epochs - 1 - epoch), end)
        writer.add_scalar("metrics/collapsed", 0.0, end)
        if positive is not None:
            shift = 0.05 * (epochs - 1 - epoch)
            writer.add_histogram("similarity/positive", positive - shift, end)
            writer.add_histogram("similarity/top10_negative", negatives - shift, end)
    writer.close()
    if config is not None:
        (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    if sweep is not None:
        (folder / "sweep.json").write_text(json.dumps(sweep), encoding="utf-8")
    if linear_top1 is not None:
        linear = SummaryWriter(log_dir=str(folder / "linear"))
        for epoch, value in enumerate((linear_top1 - 0.2, linear_top1)):
            linear.add_scalar("linear/val_top1", value + 0.01, epoch)
            linear.add_scalar("linear/top1", value, epoch)
            linear.add_scalar("linear/top5", min(1.0, value + 0.2), epoch)
        linear.close()
    return folder


def sweep_sidecar(point: str, grid: dict, seed: int, status: str = "done") -> dict:
    return {"sweep": "tau", "point": point, "grid": grid, "seed": seed, "status": status, "log": f"logs/{point}_s{seed}.log"}
