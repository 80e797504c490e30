"""The report's PNG figures, drawn on matplotlib's Agg canvas (headless, no pyplot state).

Each ``draw_*`` function returns a ``FigureResult``: the file it wrote, or why it skipped
(the data it needs is absent), never an exception for missing data.

What every figure shares, so that figures compare (issue 40):

- a run is named by its configuration's canonical label (``Configuration.label``, the table's row:
  ``InfoNCE τ=cosine:0.1-1:T=200``), never by a value it ended at, and keeps one colour and line style
  in every figure that draws one line per configuration (``configuration_styles``);
- every per-epoch figure has one x axis, ``EPOCH_AXIS_LABEL``: the epochs trained, 0 at the start of
  training, a value measured at the end of Lightning's epoch e (TensorBoard's ``epoch`` scalar e, the
  checkpoint ``epoch=e``) at e + 1, the last at ``trainer.max_epochs``; every such figure spans the same
  range (``epoch_axis``);
- legends sit outside the panels (``legend_beside``, ``legend_below``), never over the data.
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ssl_app.report.events import Histogram
from ssl_app.report.hardness import SHARE_TAG, hardness_curves
from ssl_app.report.penalty import ALL_NEGATIVE_TAG, NEGATIVE_TAG, penalty_curves, rebin
from ssl_app.report.reference import TABLE1, Match, column_name
from ssl_app.report.runs import Run
from ssl_app.report.summary import EPOCH_TAG, Row, TableColumn, resolve_columns, summarise

POSITIVE_TAG = "similarity/positive"
#: The similarity panels' shared x-range and bins: every configuration on the same axes.
SIMILARITY_EDGES = np.linspace(-1.0, 1.0, 51)
#: The least y-span of the panels against τ, so a negligible difference does not look steep: a
#: tenth of uniformity's range [0, 4] (docs/science.md) and a twentieth of tolerance's [−1, 1].
MIN_SPAN = {"uniformity": 0.4, "tolerance": 0.1}
CURVES_PER_LINE = 4  # panels per line of the metric-curves figure
PANELS_PER_LINE = 4  # the similarity figure's panels per line (a loss with more τs wraps)
DPI = 110
#: The x axis of every per-epoch figure (module docstring).
EPOCH_AXIS_LABEL = "epochs trained"
#: Line styles that tell configurations apart once the ten colours repeat.
LINE_STYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class Style:
    """How a configuration's lines are drawn: ``colour`` and ``linestyle``."""

    colour: str
    linestyle: str


def configuration_styles(rows: list[Row]) -> dict[str, Style]:
    """One style per configuration label, in the rows' order: the ten default colours, then the same colours
    dashed, dotted, … (a schedule and the constants it moves between are different configurations)."""
    return {
        row.configuration.label: Style(f"C{index % 10}", LINE_STYLES[(index // 10) % len(LINE_STYLES)])
        for index, row in enumerate(rows)
    }


def epochs_trained(rows: list[Row]) -> int:
    """The most epochs any run trained: its last logged ``epoch`` + 1 (without ``epoch``, its longest
    per-epoch ``metrics/*`` series); at least 1. The common end of every per-epoch figure's x axis."""
    most = 1
    for row in rows:
        for run in row.runs:
            if run.events is None:
                continue
            epochs = run.events.scalars.get(EPOCH_TAG)
            if epochs:
                most = max(most, int(max(value for _, value in epochs)) + 1)
            else:
                lengths = [len(series) for tag, series in run.events.scalars.items() if tag.startswith("metrics/")]
                most = max(most, *lengths) if lengths else most
    return most


def epoch_axis(axis, end: int, label: bool = True) -> None:
    """The shared epoch axis: [0, ``end``] epochs trained (a small margin each side), integer ticks;
    ``label``: name it (False for a panel whose neighbour below names the shared axis)."""
    margin = 0.03 * end
    axis.set_xlim(-margin, end + margin)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    if label:
        axis.set_xlabel(EPOCH_AXIS_LABEL)


def legend_beside(target, handles=None, labels=None, **options) -> None:
    """A legend to the right of ``target`` (an axis, or a figure: then beside all its panels), outside the data;
    constrained layout makes room for it."""
    if handles is None:
        handles, labels = target.get_legend_handles_labels()
    if not handles:
        return
    if isinstance(target, Figure):
        target.legend(handles, labels, loc="outside right upper", fontsize="small", **options)
    else:
        outside = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0}
        target.legend(handles, labels, fontsize="small", **outside, **options)


def legend_below(figure: Figure, handles, labels, **options) -> None:
    """A legend under all of ``figure``'s panels, as many columns as fit (at most four)."""
    if handles:
        figure.legend(handles, labels, loc="outside lower center", ncol=min(4, len(labels)), fontsize="small", **options)


def run_label(label: str, runs: int, *details: str) -> str:
    """A legend entry for a configuration: its canonical ``label``, then ``(n=runs; details…)``."""
    return f"{label} ({'; '.join((f'n={runs}', *details))})"


def curve_columns(rows: list[Row]) -> list[TableColumn]:
    """The metrics drawn over epochs: every per-epoch column of the table (kNN accuracy and each
    registered metric's field), in the table's order."""
    return [column for column in resolve_columns(rows) if column.column.per_epoch_metric]


@dataclass(frozen=True)
class FigureResult:
    """``path`` of the PNG written, or None and ``note`` saying why the figure was skipped;
    ``figure``: the matplotlib figure drawn (for reading its axes)."""

    name: str
    path: Path | None
    note: str = ""
    figure: Figure | None = field(default=None, compare=False, repr=False)


def draw_all(
    rows: list[Row], out_dir: Path, title: str | None = None, reference: list[Match] | None = None
) -> list[FigureResult]:
    """Every figure of the report, written to ``out_dir``; ``reference``: the rows' Table-1 cells
    (``--reference table1``), whose data sets' paper points join the uniformity–tolerance plane."""
    out_dir.mkdir(parents=True, exist_ok=True)
    colours = _series_colours(rows)
    paper = paper_points(reference) if reference is not None else None
    return [
        draw_against_temperature(rows, out_dir / "uniformity_tolerance_vs_temperature.png", colours, title),
        draw_dilemma_plane(rows, out_dir / "uniformity_tolerance_plane.png", colours, title, paper),
        draw_similarity_distributions(rows, out_dir / "similarity_distributions.png", title),
        draw_metric_curves(rows, out_dir / "metric_curves.png", title),
        draw_penalty_curves(rows, out_dir / "relative_penalty.png", title),
        draw_hardness_profiles(rows, out_dir / "hardness_profile.png", title),
    ]


@dataclass(frozen=True)
class PaperPoint:
    """One column of the paper's Table 1 in the uniformity–tolerance plane."""

    label: str
    uniformity: float
    tolerance: float


def paper_points(matches: list[Match]) -> list[PaperPoint]:
    """Every Table-1 column with uniformity and tolerance for each data set some row matched
    (the paper gives them for CIFAR-10 and CIFAR-100 only)."""
    data_sets = list(dict.fromkeys(match.data_set for match in matches if match.values is not None))
    points = []
    for data_set in data_sets:
        for column, values in TABLE1[data_set].items():
            if "uniformity" in values and "tolerance" in values:
                name = f"paper {column_name(column)}" + (f" ({data_set})" if len(data_sets) > 1 else "")
                points.append(PaperPoint(name, values["uniformity"], values["tolerance"]))
    return points


#: What the penalty figure's counts are, and why they differ from ``loss/used_negatives``.
PENALTY_COUNTS = (
    "Negatives per anchor counted in the evaluation (EmbeddingMetrics): each of the N evaluation samples' first view "
    "against the other N − 1 samples' second views (N − 1, e.g. 499 for 500 samples; top-k: its k hardest). "
    "The training loss's loss/used_negatives counts a training batch's candidates instead: 2(B − 1) for SimCLR's two "
    "views of B images (254 at B = 128), the queue or bank for MoCo and the memory bank, K for a loss that keeps K."
)


def draw_penalty_curves(rows: list[Row], path: Path, title: str | None) -> FigureResult:
    """The relative penalty r(s) against s, one curve per τ, one panel per loss (see
    ``ssl_app.report.penalty`` for what is computed from which histograms)."""
    curves = penalty_curves(rows)
    if not curves:
        negative = NEGATIVE_TAG.replace("{k}", "<k>")
        return FigureResult(
            path.name, None, f"skipped: no configuration with a τ logged the histogram {ALL_NEGATIVE_TAG} or {negative}"
        )
    by_series: dict[str, list] = defaultdict(list)
    for curve in curves:
        by_series[curve.series].append(curve)
    styles = configuration_styles(rows)
    figure, axes = new_figure(1, len(by_series), (9 * len(by_series), 4.4))
    for axis, (series, series_curves) in zip(axes, by_series.items()):
        words = {_negatives_words(curve) for curve in series_curves}
        for curve in series_curves:
            style = styles[curve.label]
            details = [] if len(words) == 1 else [_negatives_words(curve)]
            if curve.scheduled:  # its r(s) is drawn at the τ it ended at; the policy names it
                details.append(f"at its final τ {curve.temperature:.3g}")
            axis.plot(
                curve.similarity,
                curve.penalty,
                marker=".",
                color=style.colour,
                linestyle=style.linestyle,
                label=run_label(curve.label, curve.runs, *details),
            )
        axis.set_yscale("log")
        axis.set_xlabel("similarity s of a negative")
        axis.set_ylabel("relative penalty r(s)")
        axis.set_title(series, fontsize="small")
        axis.grid(alpha=0.3)
        legend_beside(axis, title=words.pop() if len(words) == 1 else None, title_fontsize="small")
    kinds = sorted({"all negatives" if curve.negatives == "all" else "top-k negatives" for curve in curves})
    figure.supxlabel(textwrap.fill(PENALTY_COUNTS, width=int(16 * figure.get_figwidth())), fontsize="x-small")
    return save_figure(figure, path, title, f"relative penalty r(s) over {' / '.join(kinds)}, final epoch")


def draw_hardness_profiles(rows: list[Row], path: Path, title: str | None) -> FigureResult:
    """The measured hardness profile, one curve per configuration on one log-scale panel: the mean
    share of its anchor's penalty a negative at similarity s received (``ssl_app.report.hardness``),
    with the equal share 1/K dotted when every configuration had the same K."""
    curves = hardness_curves(rows)
    if not curves:
        return FigureResult(path.name, None, f"skipped: no run logged the histogram {SHARE_TAG}")
    styles = configuration_styles(rows)
    figure, [axis] = new_figure(1, 1, (10, 4.8))
    for curve in curves:
        style = styles[curve.label]
        axis.plot(
            curve.similarity,
            curve.share,
            marker=".",
            color=style.colour,
            linestyle=style.linestyle,
            label=run_label(curve.label, curve.runs),
        )
    per_anchor = {round(curve.per_anchor, 1) for curve in curves}
    if len(per_anchor) == 1 and math.isfinite(curves[0].per_anchor):
        k = curves[0].per_anchor
        axis.axhline(1 / k, color="grey", linestyle=":", label=f"equal share 1/K (K = {k:.0f} negatives)")
    axis.set_yscale("log")
    axis.set_xlabel("similarity s of a negative")
    axis.set_ylabel("mean share of its anchor's penalty")
    axis.grid(alpha=0.3)
    legend_beside(axis)
    return save_figure(figure, path, title, "measured hardness profile, final epoch")


def _negatives_words(curve) -> str:
    """Which negatives a penalty curve's N(i) holds, for its legend entry."""
    if curve.negatives == "all":
        return f"all {curve.k:.0f} evaluation negatives per anchor"
    return f"top-{curve.negatives.removeprefix('top')} evaluation negatives per anchor"


def draw_against_temperature(rows: list[Row], path: Path, colours: dict[str, str], title: str | None) -> FigureResult:
    """Uniformity and tolerance against τ, one line per loss (error bars: std over seeds).

    Configurations without τ (Simple, HardSimple) are dashed horizontal reference lines.
    """
    with_tau = [row for row in rows if row.configuration.temperature is not None]
    by_series: dict[str, list[Row]] = defaultdict(list)
    for row in with_tau:
        by_series[row.configuration.series].append(row)
    if not any(len({r.configuration.temperature for r in series}) > 1 for series in by_series.values()):
        return FigureResult(path.name, None, "skipped: no loss was run at more than one temperature τ")
    figure, axes = new_figure(1, 2, (11, 4.8))
    for axis, (key, label) in zip(axes, (("uniformity", "uniformity (−L_unif)"), ("tolerance", "tolerance"))):
        for series, series_rows in by_series.items():
            points = [(r.configuration.temperature, r.stat(key)) for r in series_rows]
            points = [(tau, stat) for tau, stat in points if stat.mean is not None]
            if points:
                axis.errorbar(
                    [tau for tau, _ in points],
                    [s.mean for _, s in points],
                    yerr=[s.std or 0.0 for _, s in points],
                    marker="o",
                    capsize=3,
                    color=colours[series],
                    label=series,
                )
        for row in rows:
            stat = row.stat(key)
            if row.configuration.temperature is None and stat.mean is not None:
                axis.axhline(stat.mean, linestyle="--", color=colours[row.configuration.series], label=row.configuration.label)
        taus = sorted({row.configuration.temperature for row in with_tau})
        axis.set_xscale("log")
        axis.set_xticks(taus, [f"{tau:g}" for tau in taus])
        axis.minorticks_off()
        axis.set_xlabel("temperature τ")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        widen_to(axis, MIN_SPAN[key])
    legend_below(figure, *axes[0].get_legend_handles_labels())
    return save_figure(figure, path, title, "uniformity and tolerance against τ")


def draw_dilemma_plane(
    rows: list[Row], path: Path, colours: dict[str, str], title: str | None, paper: list[PaperPoint] | None = None
) -> FigureResult:
    """One point per configuration in the uniformity–tolerance plane (mean over seeds, error bars:
    std over seeds); ``paper``: Table 1's points, drawn as labelled grey crosses."""
    points = [(row, row.stat("uniformity"), row.stat("tolerance")) for row in rows]
    points = [(row, u, t) for row, u, t in points if u.mean is not None and t.mean is not None]
    if not points:
        return FigureResult(path.name, None, "skipped: no configuration has both uniformity and tolerance")
    figure, axes = new_figure(1, 1, (9 if paper else 7, 5.5))
    axis = axes[0]
    for index, (row, u, t) in enumerate(points):
        axis.errorbar(
            u.mean, t.mean, xerr=u.std or 0.0, yerr=t.std or 0.0, marker="o", capsize=3, color=colours[row.configuration.series]
        )
        # Staggered offsets keep the labels of neighbouring points (near the uniformity cap) apart.
        axis.annotate(
            row.configuration.label,
            (u.mean, t.mean),
            textcoords="offset points",
            xytext=(6, 4 + 9 * (index % 3)),
            fontsize="small",
            color=colours[row.configuration.series],
        )
    for index, point in enumerate(paper or []):
        legend = "Wang & Liu, Table 1" if index == 0 else None
        axis.plot(point.uniformity, point.tolerance, marker="x", markersize=8, color="0.35", linestyle="none", label=legend)
        axis.annotate(
            point.label,
            (point.uniformity, point.tolerance),
            textcoords="offset points",
            xytext=(5, -10 - 8 * (index % 4)),  # staggered: the hard-loss points crowd near the cap
            fontsize="x-small",
            color="0.35",
        )
    axis.set_xlabel("uniformity (−L_unif, higher = more uniform)")
    axis.set_ylabel("tolerance (same-class similarity)")
    axis.grid(alpha=0.3)
    if paper:
        legend_beside(axis)
    return save_figure(figure, path, title, "the uniformity–tolerance plane")


def draw_similarity_distributions(rows: list[Row], path: Path, title: str | None) -> FigureResult:
    """Positive vs top-k negative similarity densities of the final epoch (Wang & Liu, Fig. 8).

    One panel per configuration (seeds pooled), one line of panels per loss (wrapped at
    ``PANELS_PER_LINE``), τ left to right; each panel's title names its configuration and the means of
    both distributions, one legend below the panels says which colour is which; each run's k is its own
    ``EmbeddingMetrics.top_k``. Every panel has the same x-range [−1, 1],
    the same 50 bins (``SIMILARITY_EDGES``) and the same y-range (the largest density of any panel).
    """
    panels = [(row, _final(row.runs, POSITIVE_TAG), _final(row.runs, NEGATIVE_TAG)) for row in rows]
    panels = [(row, pos, neg) for row, pos, neg in panels if pos and neg]
    if not panels:
        negative = NEGATIVE_TAG.replace("{k}", "<k>")
        return FigureResult(path.name, None, f"skipped: no run logged the histograms {POSITIVE_TAG} and {negative}")
    by_series: dict[str, list] = defaultdict(list)
    for panel in panels:
        by_series[panel[0].configuration.series].append(panel)
    wrap = PANELS_PER_LINE
    lines = [line[start : start + wrap] for line in by_series.values() for start in range(0, len(line), wrap)]
    width = max(len(line) for line in lines)
    figure, axes = new_figure(len(lines), width, (3.6 * width, 2.9 * len(lines) + 0.5), squeeze=False)
    edges, highest = SIMILARITY_EDGES, 0.0
    for line_index, line in enumerate(lines):
        for column in range(width):
            axis = axes[line_index][column]
            if column >= len(line):
                axis.set_visible(False)
                continue
            row, positives, negatives = line[column]
            top_k = "/".join(sorted({str(run.options.top_k) for run in row.runs}, key=int))
            means = []
            for histograms, colour, name in ((positives, "tab:blue", "positive"), (negatives, "tab:red", "top-k negative")):
                density, mean = _pooled_density(histograms, edges)
                highest = max(highest, float(density.max(initial=0.0)))
                axis.stairs(density, edges, fill=True, alpha=0.5, color=colour, label=name)
                means.append(mean)
            # the means in the title, the colours in one legend below the panels: nothing over the densities
            heading = run_label(row.configuration.label, len(positives))
            axis.set_title(f"{heading}\nmean pos. {means[0]:.3f} · top-{top_k} neg. {means[1]:.3f}", fontsize="small")
            axis.set_xlabel("cosine similarity", fontsize="small")
            axis.set_ylabel("density", fontsize="small")
    for axis in axes.ravel():
        axis.set_xlim(edges[0], edges[-1])
        axis.set_ylim(0.0, 1.05 * highest or 1.0)
    legend_below(figure, *axes[0][0].get_legend_handles_labels())
    return save_figure(figure, path, title, "positive vs top-k negative similarities, final epoch")


def draw_metric_curves(rows: list[Row], path: Path, title: str | None) -> FigureResult:
    """Every per-epoch metric (``curve_columns``: kNN accuracy and the registered metrics) over
    epochs, one panel each, one line (own colour) per configuration: mean over seeds, band ± std.
    A metric no run logged (e.g. the train-set negatives without ``negatives_from: train``) gets
    no panel."""
    panels = [(column, [(row, _mean_curve(row.runs, column)) for row in rows]) for column in curve_columns(rows)]
    panels = [(column, pairs) for column, pairs in panels if any(curve for _, curve in pairs)]  # no empty panel
    if not panels:
        return FigureResult(path.name, None, "skipped: no run logged a per-epoch metric (metrics/*)")
    columns, curves = [column for column, _ in panels], [pairs for _, pairs in panels]
    ncols = min(CURVES_PER_LINE, len(columns))
    nrows = math.ceil(len(columns) / ncols)
    figure, axes = new_figure(nrows, ncols, (5 * ncols, 4.2 * nrows + 0.3 * math.ceil(len(rows) / 4)))
    for axis in axes[len(columns) :]:
        axis.set_visible(False)
    styles, end = configuration_styles(rows), epochs_trained(rows)
    for axis, column, pairs in zip(axes, columns, curves):
        for row, curve in pairs:
            if not curve:
                continue
            epochs, means, stds = (np.asarray(values) for values in zip(*curve))
            style = styles[row.configuration.label]
            label = run_label(row.configuration.label, len(row.runs))
            axis.plot(epochs, means, marker=".", color=style.colour, linestyle=style.linestyle, label=label)
            axis.fill_between(epochs, means - stds, means + stds, color=style.colour, alpha=0.15)
        epoch_axis(axis, end)
        axis.set_ylabel(column.shown.header)
        axis.grid(alpha=0.3)
    handles, labels = max((axis.get_legend_handles_labels() for axis in axes), key=lambda pair: len(pair[0]))
    legend_below(figure, handles, labels)
    return save_figure(figure, path, title, "metrics over epochs")


def widen_to(axis, span: float) -> None:
    """Widen the y-range of ``axis`` about its centre to at least ``span``."""
    low, high = axis.get_ylim()
    if high - low < span:
        centre = (low + high) / 2
        axis.set_ylim(centre - span / 2, centre + span / 2)


def new_figure(nrows: int, ncols: int, size: tuple[float, float], squeeze: bool = True):
    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(nrows, ncols, squeeze=False)
    return figure, (axes if not squeeze else list(axes.ravel()))


def save_figure(figure: Figure, path: Path, title: str | None, subject: str) -> FigureResult:
    text = f"{title}: {subject}" if title else subject
    heading = figure.suptitle(text)
    clear_of_legends(figure, heading, text)
    figure.savefig(path, format="png")
    return FigureResult(path.name, path, figure=figure)


def clear_of_legends(figure: Figure, heading, text: str) -> None:
    """Wrap the figure's heading into shorter lines until it runs over no legend: centred over the whole figure, a
    long heading reaches into the column of a legend beside the panels (constrained layout tops that legend at the
    heading's height)."""
    for width in (None, 80, 64, 52, 42, 34):
        heading.set_text(text if width is None else textwrap.fill(text, width))
        figure.draw_without_rendering()  # runs the layout, so the boxes below are where they will be drawn
        renderer = figure.canvas.get_renderer()
        box = heading.get_window_extent(renderer)
        legends = [*figure.legends, *(axis.get_legend() for axis in figure.axes)]
        if not any(legend is not None and box.overlaps(legend.get_window_extent(renderer)) for legend in legends):
            return


def _series_colours(rows: list[Row]) -> dict[str, str]:
    palette = [f"C{index}" for index in range(10)]
    series = list(dict.fromkeys(row.configuration.series for row in rows))
    return {name: palette[index % len(palette)] for index, name in enumerate(series)}


def _final(runs: list[Run], tag: str) -> list[Histogram]:
    """The last histogram of ``tag`` (filled with each run's own options) of each run that logged one."""
    found = []
    for run in runs:
        histograms = run.events.histograms.get(run.options.fill(tag)) if run.events else None
        if histograms:
            found.append(histograms[-1])
    return found


def _pooled_density(histograms: list[Histogram], edges: np.ndarray) -> tuple[np.ndarray, float]:
    """Histograms re-binned onto ``edges`` (each bin's count spread evenly over its width),
    summed, as a density; and the pooled mean of the values (exact: from the recorded sums)."""
    pooled = rebin(histograms, edges)
    total = pooled.sum()
    mean = sum(h.value_sum for h in histograms) / sum(h.total for h in histograms)
    return (pooled / (total * np.diff(edges)) if total else pooled), mean


def _mean_curve(runs: list[Run], column: TableColumn) -> list[tuple[float, float, float]]:
    """``(epochs trained, mean, std)`` of ``column`` (scaled) over the runs that logged its tag at that
    epoch (std 0 for one run); each run's tag is read with its own options.

    A value logged at the end of epoch e (the ``epoch`` scalar at its step, else its position) is at
    e + 1 epochs trained (``EPOCH_AXIS_LABEL``).
    """
    by_epoch: dict[float, list[float]] = defaultdict(list)
    for run in runs:
        if run.events is None:
            continue
        epoch_at = dict(run.events.scalars.get(EPOCH_TAG, []))
        for position, (step, value) in enumerate(run.events.scalars.get(column.column.tag_of(run), [])):
            if np.isfinite(value):
                by_epoch[epoch_at.get(step, position) + 1].append(value * column.column.scale)
    curve = []
    for epoch in sorted(by_epoch):
        stat = summarise(by_epoch[epoch])
        curve.append((float(epoch), stat.mean, stat.std or 0.0))
    return curve
