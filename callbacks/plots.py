"""The TensorBoard side of the metrics: finding the logger, naming the run, and the Fig. 8 overlay."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from matplotlib.figure import Figure
from torch import Tensor

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


def figure_title(trainer: L.Trainer, pl_module: L.LightningModule, subject: str) -> str:
    """``<run> (<loss label>)`` over ``epoch <e>: <subject>`` (two lines): every figure names its run and loss."""
    label = loss_label(pl_module)
    return f"{run_name(trainer)}" + (f" ({label})" if label else "") + f"\nepoch {trainer.current_epoch}: {subject}"


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
