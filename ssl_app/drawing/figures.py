"""The evaluation figures as plain data, drawn on matplotlib's Agg canvas and encoded as PNG.

A figure is a small frozen dataclass holding only what it shows (a few hundred numbers and a title), so
it pickles in microseconds and can be drawn in another process (``ssl_app.drawing.worker``) exactly as
here: :func:`render` gives the same PNG bytes wherever it runs, the pixels TensorBoard's ``add_figure``
writes for the same figure (the RGB of the Agg canvas at the figure's dpi, PNG through Pillow).

- :class:`SimilarityDensities`: positive vs top-k negative similarity densities (Wang & Liu, Fig. 8) on
  fixed bins and axes;
- :class:`PlanePathFigure`: a run's path on the uniformity–tolerance plane, on fixed axes;
- :class:`SpectrumFigure`: σ_i / σ_1 against the rank i on log–log axes, one curve per set of features.

Every figure is built on the Agg canvas directly, without pyplot (no global backend is switched and no
figure is registered anywhere), with fixed margins (``fixed_margins``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from matplotlib import ticker
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Bins of the similarity figure over its x-range (fixed, so every epoch and run bins alike).
SIMILARITY_BINS = 50
#: The similarity figure's fixed density axis [0, this]: 12 is 48% of the values in one bin of the
#: full range; a taller bar (a run concentrating, or collapsing) is cut there and marked ▲.
DENSITY_LIMIT = 12.0
#: The plane's fixed uniformity axis: [0, 2t] at t = 2.
UNIFORMITY_RANGE = (0.0, 4.0)
#: The spectrum's y-axis floor: σ_i / σ_1 below it is drawn at it (numerically zero; the same value as
#: ``ssl_app.metrics.rank.SPECTRUM_FLOOR``, which this torch-free module does not import).
SPECTRUM_FLOOR = 1e-6


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


def agg_figure(width: float, height: float) -> tuple[Figure, object]:
    """A one-panel figure of ``width`` × ``height`` inches at 100 dpi on its own Agg canvas, and its axes."""
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


@dataclass(frozen=True)
class Rendered:
    """A figure drawn: PNG bytes of ``height`` × ``width`` RGB pixels."""

    png: bytes
    height: int
    width: int


def render(figure: Figure) -> Rendered:
    """Draw ``figure`` on its Agg canvas and encode its RGB pixels as PNG (what ``add_figure`` writes)."""
    from PIL import Image  # matplotlib needs Pillow; imported here, where it is used

    canvas = figure.canvas if isinstance(figure.canvas, FigureCanvasAgg) else FigureCanvasAgg(figure)
    canvas.draw()
    pixels = np.ascontiguousarray(np.asarray(canvas.buffer_rgba())[:, :, :3])
    output = io.BytesIO()
    Image.fromarray(pixels).save(output, format="PNG")
    return Rendered(output.getvalue(), pixels.shape[0], pixels.shape[1])


@dataclass(frozen=True)
class SimilarityDensities:
    """Overlaid density histograms of positive and top-k negative similarities (Wang & Liu, Fig. 8).

    ``positive`` and ``negative`` are the densities of the ``SIMILARITY_BINS`` equal bins of
    ``x_range`` (values outside it counted in its edge bins), ``positive_mean`` and ``negative_mean``
    the means of the values themselves. The x-axis is ``x_range`` and the y-axis density [0,
    ``DENSITY_LIMIT``], whatever the values, so the figures of every epoch and every run share their
    axes and bins; a bar taller than the axis is cut at its top and marked ▲.
    """

    positive: tuple[float, ...]
    negative: tuple[float, ...]
    positive_mean: float
    negative_mean: float
    k: int
    title: str
    x_range: tuple[float, float] = (-1.0, 1.0)

    def figure(self) -> Figure:
        low, high = self.x_range
        bins = np.linspace(low, high, SIMILARITY_BINS + 1)
        figure, axes = agg_figure(5.5, 3.5)
        series = (
            (self.positive, self.positive_mean, "tab:blue", "positive"),
            (self.negative, self.negative_mean, "tab:red", f"top-{self.k} negatives"),
        )
        for density, mean, colour, name in series:
            density = np.asarray(density, dtype=np.float64)
            axes.bar(
                bins[:-1],
                np.minimum(density, DENSITY_LIMIT),
                width=np.diff(bins),
                align="edge",
                alpha=0.55,
                color=colour,
                label=f"{name} (mean {mean:.3f})",
            )
            cut = density > DENSITY_LIMIT
            if cut.any():
                centres = (bins[:-1] + bins[1:]) / 2
                axes.plot(centres[cut], np.full(int(cut.sum()), DENSITY_LIMIT), "^", color=colour, clip_on=False)
        axes.set_xlim(low, high)
        axes.set_ylim(0.0, DENSITY_LIMIT)
        axes.set_xlabel("cosine similarity")
        axes.set_ylabel("density")
        axes.set_title(self.title, fontsize="small")
        axes.legend(loc="upper left", fontsize="small")
        fixed_margins(figure)
        return figure


def densities(values: np.ndarray, x_range: tuple[float, float]) -> tuple[float, ...]:
    """The ``SIMILARITY_BINS`` densities of ``values`` over ``x_range``, values outside it in its edge bins."""
    low, high = x_range
    bins = np.linspace(low, high, SIMILARITY_BINS + 1)
    density, _ = np.histogram(np.clip(values, low, high), bins=bins, density=True)
    return tuple(float(d) for d in density)


@dataclass(frozen=True)
class PlanePathFigure:
    """A run's evaluations ``(epoch, uniformity, tolerance)``, in order, on the uniformity–tolerance
    plane, with the start (○) and the last point (★) marked.

    Uniformity (``−L_unif``, t = 2) on [0, 4] (0: collapsed; 4: its cap for many points; the axis
    reaches a larger value when a handful of points passes it), tolerance on [0, 1], or [−1, 1] once a
    point lies below 0: the same axes at every step and in every run.
    """

    points: tuple[tuple[int, float, float], ...]
    title: str

    def figure(self) -> Figure:
        epochs = [point[0] for point in self.points]
        us = [point[1] for point in self.points]
        ts = [point[2] for point in self.points]
        figure, axes = agg_figure(5.0, 4.0)
        axes.plot(us, ts, "-", color="0.6", linewidth=1)
        axes.scatter(us, ts, c=range(len(us)), cmap="viridis", s=14, zorder=3)
        axes.plot(us[0], ts[0], "o", markersize=9, markerfacecolor="none", color="tab:blue", label=f"start (epoch {epochs[0]})")
        axes.plot(us[-1], ts[-1], "*", markersize=13, color="tab:red", label=f"now (epoch {epochs[-1]})")
        axes.set_xlim(UNIFORMITY_RANGE[0], max(UNIFORMITY_RANGE[1], max(us) * 1.02))
        axes.set_ylim(-1.0 if min(ts) < 0 else 0.0, 1.0)
        axes.set_xlabel("uniformity (−L_unif, higher = more uniform)")
        axes.set_ylabel("tolerance (same-class similarity)")
        axes.grid(alpha=0.3)
        axes.legend(loc="upper right", fontsize="small")
        axes.set_title(self.title, fontsize="small")
        fixed_margins(figure, left=0.13, bottom=0.12, top=0.88)
        return figure


@dataclass(frozen=True)
class SpectrumCurve:
    """One curve of the spectrum: ``relative`` = σ_i / σ_1 (descending, clamped at ``SPECTRUM_FLOOR``),
    its power-law exponent ``alpha`` and effective rank ``effective_rank``."""

    name: str
    relative: tuple[float, ...]
    alpha: float
    effective_rank: float


@dataclass(frozen=True)
class SpectrumFigure:
    """σ_i / σ_1 against i on log–log axes, one curve per entry of ``curves`` (the fixed y-range
    [``SPECTRUM_FLOOR``, 1]; x from rank 1 to the largest dimension). Dimensional collapse (Jing et
    al., ICLR 2022) shows as a cliff."""

    curves: tuple[SpectrumCurve, ...]
    title: str

    def figure(self) -> Figure:
        figure, axes = agg_figure(5.5, 3.8)
        widest = 1
        for curve, colour in zip(self.curves, ("tab:blue", "tab:orange")):
            size = len(curve.relative)
            widest = max(widest, size)
            label = f"{curve.name} (d={size}): α={curve.alpha:.2f}, eff. rank {curve.effective_rank:.1f}"
            axes.plot(range(1, size + 1), curve.relative, color=colour, label=label)
        axes.set_xscale("log")
        axes.set_yscale("log")
        plain_log_labels(axes.xaxis)
        plain_log_labels(axes.yaxis)
        axes.set_xlim(1, max(widest, 2))
        axes.set_ylim(SPECTRUM_FLOOR, 1.5)
        axes.set_xlabel("rank i")
        axes.set_ylabel("σ_i / σ_1")
        axes.grid(alpha=0.3, which="both")
        axes.legend(loc="lower left", fontsize="small")
        axes.set_title(self.title, fontsize="small")
        fixed_margins(figure, left=0.17, bottom=0.13)
        return figure


#: A figure to draw under a TensorBoard tag: ``(tag, figure)``.
Drawing = tuple[str, "SimilarityDensities | PlanePathFigure | SpectrumFigure"]


def draw(drawings: list[Drawing]) -> list[tuple[str, Rendered]]:
    """Each figure of ``drawings`` rendered, with its tag."""
    return [(tag, render(spec.figure())) for tag, spec in drawings]
