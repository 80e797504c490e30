"""The TensorBoard side of the metrics: finding the logger, naming the run, and the Fig. 8 overlay."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import lightning as L
import numpy as np
from lightning.pytorch.loggers import TensorBoardLogger
from matplotlib import ticker
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from ssl_app.errors import ConfigError

#: The similarity figure's default x-range: a cosine similarity lies in [−1, 1].
SIMILARITY_RANGE = (-1.0, 1.0)
#: Bins of the similarity figure over its x-range (fixed, so every epoch and run bins alike).
SIMILARITY_BINS = 50
#: The similarity figure's fixed density axis [0, this]: 12 is 48% of the values in one bin of the
#: full range; a taller bar (a run concentrating, or collapsing) is cut there and marked ▲.
DENSITY_LIMIT = 12.0


def fixed_margins(figure: Figure, left: float = 0.12, bottom: float = 0.14, top: float = 0.86) -> None:
    """Fixed margins for a one-panel figure with a two-line title, instead of ``tight_layout``, which
    measures every tick label and was half of an evaluation's figure cost; the figures' sizes, titles
    and labels are fixed, so their margins can be."""
    figure.subplots_adjust(left=left, right=0.97, bottom=bottom, top=top)


def plain_log_labels(axis: Axis) -> None:
    """Tick labels of a log axis as plain numbers (``0.001``, ``1e-06``), without mathtext, whose
    layout was most of the spectrum figure's cost; no labels on the minor ticks."""
    axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


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
    """Overlaid density histograms of positive and top-k negative similarities (Wang & Liu, Fig. 8).

    The x-axis is ``x_range`` (default [−1, 1]) with ``SIMILARITY_BINS`` equal bins and the y-axis
    density [0, ``DENSITY_LIMIT``], whatever the values, so the figures of every epoch and every run
    share their axes and bins; values outside the range are counted in its edge bins (clipped), so
    no sample disappears, and a bar taller than the axis is cut at its top and marked ▲. Built on the Agg
    canvas directly, without pyplot, so no global backend is switched and no figure is registered
    anywhere; the caller hands it to ``add_figure`` (which closes it). Fixed margins (``fixed_margins``).
    """
    low, high = x_range
    pos = positive.detach().float().cpu().numpy()
    neg = negatives.detach().float().cpu().numpy().ravel()
    bins = np.linspace(low, high, SIMILARITY_BINS + 1)
    figure = Figure(figsize=(5.5, 3.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for values, colour, name in ((pos, "tab:blue", "positive"), (neg, "tab:red", f"top-{k} negatives")):
        density, _ = np.histogram(np.clip(values, low, high), bins=bins, density=True)
        label = f"{name} (mean {values.mean():.3f})"
        axes.bar(
            bins[:-1],
            np.minimum(density, DENSITY_LIMIT),
            width=np.diff(bins),
            align="edge",
            alpha=0.55,
            color=colour,
            label=label,
        )
        cut = density > DENSITY_LIMIT
        if cut.any():
            centres = (bins[:-1] + bins[1:]) / 2
            axes.plot(centres[cut], np.full(int(cut.sum()), DENSITY_LIMIT), "^", color=colour, clip_on=False)
    axes.set_xlim(low, high)
    axes.set_ylim(0.0, DENSITY_LIMIT)
    axes.set_xlabel("cosine similarity")
    axes.set_ylabel("density")
    axes.set_title(title, fontsize="small")
    axes.legend(loc="upper left", fontsize="small")
    fixed_margins(figure)
    return figure
