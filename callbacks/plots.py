"""The TensorBoard side of the metrics: finding the logger, histograms, and the Fig. 8 overlay."""

from __future__ import annotations

from typing import Optional

import lightning as L
import numpy as np
from lightning.pytorch.loggers import TensorBoardLogger
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor


def find_tensorboard(trainer: L.Trainer) -> Optional[TensorBoardLogger]:
    """The first TensorBoardLogger among the trainer's loggers, or None."""
    return next((logger for logger in trainer.loggers if isinstance(logger, TensorBoardLogger)), None)


def similarity_figure(positive: Tensor, negatives: Tensor, k: int, title: str) -> Figure:
    """Overlaid density histograms of positive and top-k negative similarities (Wang & Liu, Fig. 8).

    Built on the Agg canvas directly, without pyplot, so no global backend is switched and no
    figure is registered anywhere; the caller hands it to ``add_figure`` (which closes it).
    """
    pos = positive.detach().float().cpu().numpy()
    neg = negatives.detach().float().cpu().numpy().ravel()
    low = float(min(pos.min(), neg.min()))
    bins = np.linspace(low, 1.0, 51) if low < 1.0 else np.linspace(0.99, 1.0, 51)
    figure = Figure(figsize=(5.5, 3.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.hist(pos, bins=bins, density=True, alpha=0.55, color="tab:blue", label=f"positive (mean {pos.mean():.3f})")
    axes.hist(neg, bins=bins, density=True, alpha=0.55, color="tab:red", label=f"top-{k} negatives (mean {neg.mean():.3f})")
    axes.set_xlabel("cosine similarity")
    axes.set_ylabel("density")
    axes.set_title(title)
    axes.legend(loc="upper left", fontsize="small")
    figure.tight_layout()
    return figure
