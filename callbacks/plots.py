"""The TensorBoard side of the metrics: finding the logger, naming the run, and the Fig. 8 overlay."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.trainer.states import TrainerFn
from matplotlib.figure import Figure
from torch import Tensor

from ssl_app.checks import NonNegativeInt, is_a
from ssl_app.drawing.figures import SimilarityDensities, densities
from ssl_app.errors import ConfigError

#: The similarity figure's default x-range: a cosine similarity lies in [−1, 1].
SIMILARITY_RANGE = (-1.0, 1.0)


def find_tensorboard(trainer: L.Trainer) -> Optional[TensorBoardLogger]:
    """The first TensorBoardLogger among the trainer's loggers, or None."""
    return next((logger for logger in trainer.loggers if isinstance(logger, TensorBoardLogger)), None)


def run_name(trainer: L.Trainer) -> str:
    """The run as a reader finds it: the last two parts of the TensorBoard log folder
    (``<name>/version_<n>``, or a sweep's ``<point>/seed<k>``); ``run`` without a TensorBoardLogger."""
    tensorboard = find_tensorboard(trainer)
    if tensorboard is None:
        return "run"
    parts = Path(tensorboard.log_dir).parts
    return "/".join(parts[-2:])


def loss_label(pl_module: L.LightningModule) -> str:
    """The module's loss and its hyper-parameters as ``InfoNCE τ=0.5`` (``""`` without a loss).

    Values are formatted with ``str`` (a τ may be a number or a policy object); ``temperature``
    is written τ.
    """
    loss = getattr(pl_module, "loss", None)
    if loss is None or not hasattr(loss, "hparams"):
        return ""
    words = [("τ" if name == "temperature" else name) + f"={value}" for name, value in loss.hparams().items()]
    return " ".join([type(loss).__name__, *words])


@dataclass(frozen=True)
class Position:
    """Which run a figure shows and where in its training: ``run`` as :func:`run_name` names it, ``epoch``
    and ``step`` (the trainer's while fitting, the checkpoint's when a ``validate``/``test`` evaluates one),
    ``evaluation``: ``validate`` or ``test`` (``""`` while fitting)."""

    run: str
    epoch: int
    step: int
    evaluation: str = ""


def position(trainer: L.Trainer) -> Position:
    """Where the figures of this evaluation belong: during ``fit`` the run and the trainer's epoch and step; in a
    ``validate``/``test`` of a checkpoint (``trainer.ckpt_path``) the run that wrote it (``<run>/checkpoints/<file>``:
    the last two parts of ``<run>``, else the file's name) and the epoch and step saved in it (the trainer's own
    stay 0 there: Lightning restores only the weights)."""
    fitting = trainer.state.fn in (None, TrainerFn.FITTING)
    path = None if fitting else trainer.ckpt_path
    saved = _saved_position(str(path)) if path else None
    if saved is None:
        return Position(run_name(trainer), trainer.current_epoch, trainer.global_step, "" if fitting else trainer.state.fn.value)
    return replace(saved, evaluation=trainer.state.fn.value)


def _saved_position(path: str) -> Optional[Position]:
    """The run, epoch and step of the checkpoint at ``path`` (``None``: unreadable). The file is mapped, not read
    whole, and loaded with ``weights_only=True``; its position is cached by path and modification time."""
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return None
    return _read_position(path, stamp)


@functools.lru_cache(maxsize=8)
def _read_position(path: str, stamp: int) -> Optional[Position]:
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - not ours to judge here: the CLI checked the checkpoint; the title makes do
        return None
    epoch, step = (saved.get("epoch"), saved.get("global_step")) if isinstance(saved, dict) else (None, None)
    if not (is_a(NonNegativeInt, epoch) and is_a(NonNegativeInt, step)):
        return None
    file = Path(path)
    run = "/".join(file.parent.parent.parts[-2:]) if file.parent.name == "checkpoints" else file.name
    return Position(run, int(epoch), int(step))


def figure_title(trainer: L.Trainer, pl_module: L.LightningModule, subject: str) -> str:
    """``<run> (<loss label>)`` over ``epoch <e>, step <s>: <subject>`` (two lines): every figure names its run, its
    loss and where in the run's training it stands; an evaluation of a checkpoint names the run that wrote it and the
    checkpoint's epoch and step (``validate of epoch 9, step 450: …``, :func:`position`)."""
    label, where = loss_label(pl_module), position(trainer)
    evaluation = f"{where.evaluation} of " if where.evaluation else ""
    return f"{where.run}" + (f" ({label})" if label else "") + f"\n{evaluation}epoch {where.epoch}, step {where.step}: {subject}"


def check_similarity_range(x_range, owner: str) -> tuple[float, float]:
    """``x_range`` as two floats; ``ConfigError`` unless −1 ≤ low < high ≤ 1."""
    try:
        low, high = (float(value) for value in x_range)
    except (TypeError, ValueError):
        raise ConfigError(f"{owner}: similarity_range must be two numbers [low, high], got {x_range!r}") from None
    if not -1.0 <= low < high <= 1.0:
        raise ConfigError(f"{owner}: similarity_range must satisfy -1 <= low < high <= 1, got {x_range!r}")
    return low, high


def similarity_figure(
    positive: Tensor, negatives: Tensor, k: int, title: str, x_range: tuple[float, float] = SIMILARITY_RANGE
) -> Figure:
    """Overlaid density histograms of the ``positive`` and top-k ``negatives`` similarities (Wang & Liu,
    Fig. 8) on ``x_range`` in fixed bins and axes (``ssl_app.drawing.figures.SimilarityDensities``),
    binned here with NumPy; ``EmbeddingMetrics`` bins them on the device (``callbacks.distributions``)."""
    pos = positive.detach().float().cpu().numpy()
    neg = negatives.detach().float().cpu().numpy().ravel()
    low, high = x_range
    return SimilarityDensities(
        densities(pos, x_range), densities(neg, x_range), float(pos.mean()), float(neg.mean()), k, title, (low, high)
    ).figure()
