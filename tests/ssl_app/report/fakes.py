"""Fake run folders for the report tests: what the CLI and the sweep tool would write, made in
milliseconds (no training) by the code that writes the real thing: events with ``SummaryWriter``,
run records with ``ssl_app.runs.record`` (``start_record``/``finish_record``, as the CLI's
``RunRecorder`` does), ``sweep.json`` with ``ssl_app.runs.layout.write_sweep_point``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import yaml
from torch.utils.tensorboard import SummaryWriter

from ssl_app.io.changes import OnChange
from ssl_app.losses.hardness import HardnessProfile, write_profile
from ssl_app.report.paired import PAIRED_HEADING
from ssl_app.report.table import SECONDARY_HEADING
from ssl_app.runs.layout import EVALUATIONS_DIR, SweepPoint, write_sweep_point
from ssl_app.runs.record import DONE, RUNNING, finish_record, start_record

STEPS_PER_EPOCH = 4
EPOCH_METRICS = (
    "knn_acc",
    "uniformity",
    "tolerance",
    "alignment",
    "pos_sim",
    "top10_neg_sim",
    "effective_rank",
    "effective_rank_backbone",
    "spectrum_alpha",
    "spectrum_alpha_backbone",
    "wasserstein_uniformity",
    "lidar",
    "top10_train_neg_sim",
)


def run_config(
    loss: str,
    seed: int,
    temperature: float | None = None,
    num_negatives: int | None = None,
    save_dir: str = "runs",
    batch_size: int = 128,
    embedding_args: dict | None = None,
    knn_args: dict | None = None,
    data: str = "datamodules.SyntheticDataModule",
    data_args: dict | None = None,
) -> dict:
    """A resolved LightningCLI config (the keys the report reads, plus some it must ignore);
    ``embedding_args``/``knn_args``: the init_args of the EmbeddingMetrics/KNNMonitor callbacks;
    ``data``/``data_args``: the data's class path and init_args besides the batch size."""
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
            "callbacks": [
                {"class_path": "callbacks.EmbeddingMetrics", **({"init_args": embedding_args} if embedding_args else {})},
                {"class_path": "callbacks.KNNMonitor", **({"init_args": knn_args} if knn_args else {})},
            ],
        },
        "model": {
            "class_path": "ssl_app.methods.MemoryBank",
            "init_args": {"backbone": "small_cnn", "loss": {"class_path": f"ssl_app.losses.{loss}", "init_args": loss_args}},
        },
        "data": {"class_path": data, "init_args": {"batch_size": batch_size, **(data_args or {})}},
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
    sweep: SweepPoint | None = None,
    log_epoch: bool = True,
    status: str | None = DONE,
    collapse: dict | None = None,
    top_k: int = 10,
    hardness: torch.Tensor | list[torch.Tensor] | None = None,
    temperature=None,
    temperature_on_change: bool = False,
) -> Path:
    """A run folder whose per-epoch ``metrics/<name>`` end at ``final[name]`` (earlier epochs:
    ``final − 0.1 × epochs to go``); ``effective_negatives[e]`` are the per-step values of epoch e;
    histograms are logged at every epoch, the last one being ``positive`` / ``negatives`` (as
    ``similarity/top{top_k}_negative``, the tag of a run whose EmbeddingMetrics.top_k is ``top_k``).

    ``hardness``: a step's hardness profile ([2, BINS], ``ContrastiveLoss(..., with_stats=True).hardness``),
    logged at every epoch's end as a method logs its epoch's (``HardnessProfile``, ``write_profile``);
    a list: epoch e's profile is ``hardness[e]``.

    ``temperature``: τ as a function of the fractional epoch t = epoch + step in epoch / steps per epoch, logged as
    a method logs the τ in force: ``loss/temperature`` at every step, ``loss/temperature_epoch`` (the epoch's mean)
    at its end. ``temperature_on_change``: both written through ``OnChange.write`` instead (only when the value
    changes, as the methods wrote them before ``OnChange.hold``): a constant τ is one point at the first step.

    ``status``: the run record's final status (``running``: started, never finished; ``None``: no
    record at all, as an older version wrote). ``linear_top1``: a finished linear probe filed in the
    run, as the CLI files one.
    """
    folder.mkdir(parents=True, exist_ok=True)
    record = start_record(folder, "fit", config or {}) if status is not None else None
    writer = SummaryWriter(log_dir=str(folder))
    changes, loggers = OnChange(), [_WriterLogger(writer)]

    def write_tau(tag: str, value: float, step: int) -> None:
        if temperature_on_change:
            changes.write(loggers, {tag: value}, step)
        else:
            writer.add_scalar(tag, value, step)

    for epoch in range(epochs):
        for step_in_epoch in range(STEPS_PER_EPOCH):
            step = epoch * STEPS_PER_EPOCH + step_in_epoch
            writer.add_scalar("train/loss_step", 5.0 - 0.1 * step, step)
            if effective_negatives is not None:
                writer.add_scalar("loss/effective_negatives", effective_negatives[epoch][step_in_epoch], step)
            if log_epoch:
                writer.add_scalar("epoch", epoch, step)
            if temperature is not None:
                write_tau("loss/temperature", temperature(epoch + step_in_epoch / STEPS_PER_EPOCH), step)
        end = (epoch + 1) * STEPS_PER_EPOCH - 1
        if temperature is not None:
            taus = [temperature(epoch + i / STEPS_PER_EPOCH) for i in range(STEPS_PER_EPOCH)]
            write_tau("loss/temperature_epoch", sum(taus) / len(taus), end)
        for name, value in final.items():
            writer.add_scalar(f"metrics/{name}", value - 0.1 * (epochs - 1 - epoch), end)
        writer.add_scalar("metrics/collapsed", 0.0 if collapse is None else 1.0, end)
        if hardness is not None:
            profile = HardnessProfile()
            profile.update(hardness[epoch] if isinstance(hardness, list) else hardness)
            write_profile(writer, *profile.compute(), end)
        if positive is not None:
            shift = 0.05 * (epochs - 1 - epoch)
            writer.add_histogram("similarity/positive", positive - shift, end)
            writer.add_histogram(f"similarity/top{top_k}_negative", negatives - shift, end)
    writer.close()
    if config is not None:
        (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    if sweep is not None:
        write_sweep_point(folder, sweep)
    if record is not None and status != RUNNING:
        finish_record(folder, record, status, f"{status} (fake)", epoch=epochs, step=epochs * STEPS_PER_EPOCH, collapse=collapse)
    if linear_top1 is not None:
        write_probe(folder / EVALUATIONS_DIR / "linear_0", linear_top1)
    return folder


class _WriterLogger:
    """A ``SummaryWriter`` as the loggers ``OnChange`` writes to (``log_metrics``, as Lightning's TensorBoardLogger)."""

    def __init__(self, writer: SummaryWriter) -> None:
        self.writer = writer

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)


def write_probe(folder: Path, top1: float, status: str = DONE, parent: str = "../..") -> Path:
    """A linear probe's folder with its record (``parent``: the evaluated run, relative to ``folder``);
    the CLI files a probe of ``<run>`` in ``<run>/evaluations/linear_<n>/``, whose parent is ``../..``."""
    folder.mkdir(parents=True, exist_ok=True)
    record = start_record(folder, "linear", {"model": {"class_path": "ssl_app.evaluation.LinearProbe"}}, parent=parent)
    linear = SummaryWriter(log_dir=str(folder))
    for epoch, value in enumerate((top1 - 0.2, top1)):
        linear.add_scalar("linear/val_top1", value + 0.01, epoch)
        linear.add_scalar("linear/top1", value, epoch)
        linear.add_scalar("linear/top5", min(1.0, value + 0.2), epoch)
    linear.close()
    if status != RUNNING:
        finish_record(folder, record, status, f"{status} (fake)")
    return folder


def sweep_sidecar(point: str, grid: dict, seed: int) -> SweepPoint:
    """``sweep.json`` of a point of the sweep ``tau``, as the sweep writes it."""
    return SweepPoint(
        sweep="tau", point=point, grid={k: str(v) for k, v in grid.items()}, seed=seed, logs={"fit": f"logs/{point}_s{seed}.log"}
    )


def main_table(markdown: str) -> str:
    """The report's Markdown up to its secondary tables and its paired-differences section (whose rows are
    also ``| ...`` lines): the first table, one line per configuration."""
    return markdown.split(PAIRED_HEADING, 1)[0].split(SECONDARY_HEADING, 1)[0]


def all_tables(markdown: str) -> list[list[str]]:
    """Every table before the paired section joined into one, cell by cell: the header, then one list of cells
    per configuration (its label and n from the first table, the metric cells of every table in their order)."""
    tables: list[list[list[str]]] = []
    previous = ""
    for line in markdown.split(PAIRED_HEADING, 1)[0].splitlines():
        if line.startswith("| ") and not previous.startswith("|"):
            tables.append([])
        if line.startswith("| "):
            tables[-1].append([cell.strip() for cell in line.strip("|").split("|")])
        previous = line
    joined = tables[0]
    for table in tables[1:]:
        assert len(table) == len(joined), "every table has one line per configuration"
        for line, more in zip(joined, table):
            line += more[2:]
    return joined
