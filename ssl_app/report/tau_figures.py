"""The report's τ views: what a temperature policy did over a run, and where each run went on the plane.

- ``temperature_curves.png``: τ(t) above uniformity(t) and tolerance(t), one line per run (colour: its
  configuration), on one shared x axis of epochs. τ is the logged ``loss/temperature`` at its fractional
  epoch t = epoch + (step − the epoch's first step) / steps per epoch (``loss/temperature_epoch`` where the
  per-step tag is missing; a run that logged neither, with a number for τ, a flat line at it). A metric
  measured at the end of epoch e is drawn at t = e + 1, after the epoch it measures.
- ``uniformity_tolerance_paths.png``: each run's path over epochs on the uniformity–tolerance plane, its
  first epoch an open circle and its last a filled square (the plane figure shows end points only).

Every y axis spans at least ``MIN_SPANS`` around its data, so a τ that moves by 0.003 reads as flat.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from ssl_app.report.events import EventData
from ssl_app.report.figures import FigureResult, new_figure, save_figure
from ssl_app.report.runs import Run
from ssl_app.report.summary import EPOCH_TAG, Row

TAU_TAG = "loss/temperature"
TAU_EPOCH_TAG = "loss/temperature_epoch"
UNIFORMITY_TAG = "metrics/uniformity"
TOLERANCE_TAG = "metrics/tolerance"
#: The least span of each y axis: a smaller range is centred on the data and widened to it.
MIN_SPANS = {"tau": 0.1, "uniformity": 0.2, "tolerance": 0.05}


def draw_tau_figures(rows: list[Row], out_dir: Path, title: str | None) -> list[FigureResult]:
    """Both τ views, written to ``out_dir`` (or skipped with a note when their data is absent)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    colours = _configuration_colours(rows)
    return [
        draw_temperature_curves(rows, out_dir / "temperature_curves.png", colours, title),
        draw_plane_paths(rows, out_dir / "uniformity_tolerance_paths.png", colours, title),
    ]


def fractional_epochs(events: EventData, steps: list[int]) -> list[float] | None:
    """Each global step as t = epoch + (step − the epoch's first logged step) / steps per epoch (the median
    distance between the first logged steps of consecutive epochs); None when the run logged no ``epoch``."""
    epoch_at = dict(events.scalars.get(EPOCH_TAG, []))
    if not epoch_at:
        return None
    first: dict[int, int] = {}
    for step, epoch in sorted(epoch_at.items()):
        first.setdefault(int(epoch), step)
    epochs = sorted(first)
    gaps = [(first[b] - first[a]) / (b - a) for a, b in zip(epochs, epochs[1:])]
    per_epoch = statistics.median(gaps) if gaps else max(1, max(epoch_at) - first[epochs[0]] + 1)
    times = []
    for step in steps:
        epoch = epoch_at.get(step)
        if epoch is None:  # not logged at this step: the last epoch that began at or before it
            epoch = max((e for e in epochs if first[e] <= step), default=epochs[0])
        times.append(int(epoch) + (step - first[int(epoch)]) / per_epoch)
    return times


def tau_curve(run: Run, constant: float | None = None) -> list[tuple[float, float]]:
    """``(t, τ)`` of one run: its per-step τ, else its per-epoch τ (at t = epoch + 1, the end of the epoch it
    averages), else a flat line at ``constant`` over the epochs its metrics cover; empty when none of these."""
    events = run.events
    if events is None:
        return []
    series = events.scalars.get(TAU_TAG)
    if series:
        times = fractional_epochs(events, [step for step, _ in series])
        if times is not None:
            return list(zip(times, (value for _, value in series)))
    per_epoch = metric_curve(events, TAU_EPOCH_TAG)
    if per_epoch:
        return per_epoch
    ends = [t for t, _ in metric_curve(events, UNIFORMITY_TAG) or metric_curve(events, TOLERANCE_TAG)]
    if constant is None or not ends:
        return []
    return [(0.0, constant), (max(ends), constant)]


def metric_curve(events: EventData, tag: str) -> list[tuple[float, float]]:
    """``(e + 1, value)`` of a per-epoch tag logged at the end of epoch e (its position + 1 without ``epoch``)."""
    epoch_at = dict(events.scalars.get(EPOCH_TAG, []))
    return [
        (float(epoch_at.get(step, position)) + 1, value) for position, (step, value) in enumerate(events.scalars.get(tag, []))
    ]


def plane_path(events: EventData) -> list[tuple[float, float]]:
    """``(uniformity, tolerance)`` at each epoch that logged both, in epoch order."""
    uniformity = dict(metric_curve(events, UNIFORMITY_TAG))
    tolerance = dict(metric_curve(events, TOLERANCE_TAG))
    return [(uniformity[t], tolerance[t]) for t in sorted(uniformity) if t in tolerance]


def readable_limits(values: list[float], min_span: float) -> tuple[float, float]:
    """The data's range with a 5% margin, widened about its centre to at least ``min_span``."""
    low, high = min(values), max(values)
    margin = 0.05 * (high - low)
    low, high = low - margin, high + margin
    if high - low < min_span:
        centre = (low + high) / 2
        low, high = centre - min_span / 2, centre + min_span / 2
    return low, high


def draw_temperature_curves(rows: list[Row], path: Path, colours: dict[str, str], title: str | None) -> FigureResult:
    """τ(t), uniformity(t) and tolerance(t), one line per run, on a shared epoch axis (module docstring)."""
    taus = {id(run): tau_curve(run, row.configuration.temperature) for row in rows for run in row.runs}
    if not any(tau_curve(run) for row in rows for run in row.runs):
        return FigureResult(path.name, None, f"skipped: no run logged {TAU_TAG} or {TAU_EPOCH_TAG}")
    figure, axes = new_figure(3, 1, (8, 8.5))
    for axis in axes[1:]:
        axis.sharex(axes[0])
    panels = (("tau", "temperature τ"), ("uniformity", "uniformity (−L_unif)"), ("tolerance", "tolerance"))
    seen: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        colour = colours[row.configuration.label]
        for index, run in enumerate(row.runs):
            label = f"{row.configuration.label} (n={len(row.runs)})" if index == 0 else None
            curves = {
                "tau": taus[id(run)],
                "uniformity": metric_curve(run.events, UNIFORMITY_TAG) if run.events else [],
                "tolerance": metric_curve(run.events, TOLERANCE_TAG) if run.events else [],
            }
            for axis, (key, _) in zip(axes, panels):
                if curves[key]:
                    times, values = zip(*curves[key])
                    axis.plot(times, values, color=colour, linewidth=1, alpha=0.8, label=label if key == "tau" else None)
                    seen[key].extend(values)
    for axis, (key, name) in zip(axes, panels):
        if seen[key]:
            axis.set_ylim(*readable_limits(seen[key], MIN_SPANS[key]))
        axis.set_ylabel(name)
        axis.grid(alpha=0.3)
    axes[-1].set_xlabel("epochs trained")
    axes[0].legend(fontsize="small")
    return save_figure(figure, path, title, "τ, uniformity and tolerance over training, one line per run")


def draw_plane_paths(rows: list[Row], path: Path, colours: dict[str, str], title: str | None) -> FigureResult:
    """Each run's path over epochs on the uniformity–tolerance plane, first epoch ○, last ■."""
    paths = [(row, run, plane_path(run.events)) for row in rows for run in row.runs if run.events is not None]
    paths = [(row, run, points) for row, run, points in paths if len(points) >= 2]
    if not paths:
        return FigureResult(path.name, None, "skipped: no run logged uniformity and tolerance at two epochs or more")
    figure, [axis] = new_figure(1, 1, (7.5, 5.8))
    labelled: set[str] = set()
    for row, _, points in paths:
        colour = colours[row.configuration.label]
        label = None if row.configuration.label in labelled else row.configuration.label
        labelled.add(row.configuration.label)
        uniformity, tolerance = zip(*points)
        axis.plot(uniformity, tolerance, color=colour, linewidth=1, marker=".", markersize=3, alpha=0.8, label=label)
        axis.plot(uniformity[0], tolerance[0], marker="o", markerfacecolor="none", color=colour, markersize=7)
        axis.plot(uniformity[-1], tolerance[-1], marker="s", color=colour, markersize=7)
    every = [point for _, _, points in paths for point in points]
    axis.set_xlim(*readable_limits([u for u, _ in every], MIN_SPANS["uniformity"]))
    axis.set_ylim(*readable_limits([t for _, t in every], MIN_SPANS["tolerance"]))
    axis.plot([], [], marker="o", markerfacecolor="none", color="0.3", linestyle="none", label="first epoch")
    axis.plot([], [], marker="s", color="0.3", linestyle="none", label="last epoch")
    axis.set_xlabel("uniformity (−L_unif, higher = more uniform)")
    axis.set_ylabel("tolerance (same-class similarity)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")
    return save_figure(figure, path, title, "each run's path on the uniformity–tolerance plane")


def _configuration_colours(rows: list[Row]) -> dict[str, str]:
    """One colour per configuration (not per series: a schedule and the constants it moves between differ)."""
    return {row.configuration.label: f"C{index % 10}" for index, row in enumerate(rows)}
