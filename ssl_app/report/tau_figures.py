"""The report's τ views: what a temperature policy did over a run, and where each run went on the plane.

- ``temperature_curves.png``: τ(t) above uniformity(t) and tolerance(t), one line per run (colour: its
  configuration), every run drawn, on the report's shared epoch axis (``figures.EPOCH_AXIS_LABEL``: epochs
  trained). A constant τ (a number, or a ``Constant`` policy) is a flat line at its configured value from the
  start of the run to its last epoch, however it was logged (once, on change, by older versions). Any other
  policy is its logged ``loss/temperature`` at its fractional epoch t = epoch + (step − the epoch's first step)
  / steps per epoch (``loss/temperature_epoch`` where the per-step tag is missing); a value logged once holds to
  the run's end. A metric measured at the end of epoch e is drawn at t = e + 1, after the epoch it measures.
- ``uniformity_tolerance_paths.png``: each run's path over epochs on the uniformity–tolerance plane, its
  first epoch an open circle and its last a filled square (the plane figure shows end points only).

Every y axis spans at least ``MIN_SPANS`` around its data, so a τ that moves by 0.003 reads as flat.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from ssl_app.report.events import EventData
from ssl_app.report.figures import (
    FigureResult,
    configuration_styles,
    epoch_axis,
    epochs_trained,
    legend_beside,
    new_figure,
    run_label,
    save_figure,
)
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
    return [
        draw_temperature_curves(rows, out_dir / "temperature_curves.png", title),
        draw_plane_paths(rows, out_dir / "uniformity_tolerance_paths.png", title),
    ]


def fractional_epochs(events: EventData, steps: list[int]) -> list[float] | None:
    """Each global step as t = epoch + (step − the epoch's first step) / steps per epoch; None when the run
    logged no ``epoch``.

    Lightning logs ``epoch`` every ``log_every_n_steps`` and at each epoch's last step (its epoch-end
    metrics), so the last logged steps of consecutive epochs are exactly an epoch apart: steps per epoch P is
    their median distance (one epoch: its last step + 1), and epoch e's first step is its last − P + 1 (the
    first *logged* step is up to ``log_every_n_steps`` − 1 later)."""
    epoch_at = dict(events.scalars.get(EPOCH_TAG, []))
    if not epoch_at:
        return None
    last: dict[int, int] = {}
    for step, epoch in sorted(epoch_at.items()):
        last[int(epoch)] = step
    epochs = sorted(last)
    gaps = [(last[b] - last[a]) / (b - a) for a, b in zip(epochs, epochs[1:])]
    per_epoch = statistics.median(gaps) if gaps else last[epochs[0]] + 1
    per_epoch = max(per_epoch, 1)
    times = []
    for step in steps:
        epoch = epoch_at.get(step)
        if epoch is None:  # not logged at this step: the first epoch that ended at or after it
            epoch = min((e for e in epochs if last[e] >= step), default=epochs[-1])
        start = last[int(epoch)] - per_epoch + 1
        times.append(int(epoch) + min(max((step - start) / per_epoch, 0.0), 1.0))
    return times


def tau_curve(run: Run, constant: float | None = None) -> list[tuple[float, float]]:
    """``(t, τ)`` of one run. A ``constant`` τ (the configured number): a flat line at it from t = 0 to the
    run's end, however it was logged. Otherwise its per-step τ, else its per-epoch τ (at t = epoch + 1, the end
    of the epoch it averages); a value logged once (written on change, never changed) holds to the run's end.
    Empty when the run has none of these."""
    events = run.events
    if events is None:
        return []
    end = run_end(events)
    if constant is not None:
        return [(0.0, constant), (end, constant)] if end > 0 else []
    curve: list[tuple[float, float]] = []
    series = events.scalars.get(TAU_TAG)
    if series:
        times = fractional_epochs(events, [step for step, _ in series])
        if times is not None:
            curve = list(zip(times, (value for _, value in series)))
    curve = curve or metric_curve(events, TAU_EPOCH_TAG)
    if len(curve) == 1 and end > curve[0][0]:
        curve.append((end, curve[0][1]))
    return curve


def run_end(events: EventData) -> float:
    """The epochs a run trained: its last logged ``epoch`` + 1, else its longest per-epoch metric; 0 without either."""
    epochs = events.scalars.get(EPOCH_TAG)
    if epochs:
        return float(max(value for _, value in epochs)) + 1
    ends = [t for t, _ in metric_curve(events, UNIFORMITY_TAG) or metric_curve(events, TOLERANCE_TAG)]
    return max(ends, default=0.0)


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


def draw_temperature_curves(rows: list[Row], path: Path, title: str | None) -> FigureResult:
    """τ(t), uniformity(t) and tolerance(t), one line per run, every run drawn, on the report's epoch axis
    (module docstring); the legend beside the panels names each configuration by its canonical label."""
    taus = {id(run): tau_curve(run, row.configuration.temperature) for row in rows for run in row.runs}
    if not any(taus.values()):
        return FigureResult(path.name, None, f"skipped: no run has a τ (configured, or logged as {TAU_TAG} or {TAU_EPOCH_TAG})")
    figure, axes = new_figure(3, 1, (10.5, 8.5))
    for axis in axes[1:]:
        axis.sharex(axes[0])
    panels = (("tau", "temperature τ"), ("uniformity", "uniformity (−L_unif)"), ("tolerance", "tolerance"))
    seen: dict[str, list[float]] = defaultdict(list)
    styles = configuration_styles(rows)
    handles: dict[str, object] = {}
    for row in rows:
        style = styles[row.configuration.label]
        label = run_label(row.configuration.label, len(row.runs))
        for run in row.runs:
            curves = {
                "tau": taus[id(run)],
                "uniformity": metric_curve(run.events, UNIFORMITY_TAG) if run.events else [],
                "tolerance": metric_curve(run.events, TOLERANCE_TAG) if run.events else [],
            }
            for axis, (key, _) in zip(axes, panels):
                if curves[key]:
                    times, values = zip(*curves[key])
                    marker = "." if len(times) == 1 else None  # a single value is a dot, not an invisible line
                    [line] = axis.plot(
                        times, values, color=style.colour, linestyle=style.linestyle, marker=marker, linewidth=1, alpha=0.8
                    )
                    handles.setdefault(label, line)
                    seen[key].extend(values)
    end = epochs_trained(rows)
    for axis, (key, name) in zip(axes, panels):
        if seen[key]:
            axis.set_ylim(*readable_limits(seen[key], MIN_SPANS[key]))
        axis.set_ylabel(name)
        axis.grid(alpha=0.3)
        epoch_axis(axis, end, label=axis is axes[-1])
    legend_beside(figure, list(handles.values()), list(handles))
    return save_figure(figure, path, title, "τ, uniformity and tolerance over training, one line per run")


def draw_plane_paths(rows: list[Row], path: Path, title: str | None) -> FigureResult:
    """Each run's path over epochs on the uniformity–tolerance plane, first epoch ○, last ■."""
    paths = [(row, run, plane_path(run.events)) for row in rows for run in row.runs if run.events is not None]
    paths = [(row, run, points) for row, run, points in paths if len(points) >= 2]
    if not paths:
        return FigureResult(path.name, None, "skipped: no run logged uniformity and tolerance at two epochs or more")
    figure, [axis] = new_figure(1, 1, (10, 5.8))
    styles = configuration_styles(rows)
    labelled: set[str] = set()
    for row, _, points in paths:
        style = styles[row.configuration.label]
        colour = style.colour
        label = None if row.configuration.label in labelled else run_label(row.configuration.label, len(row.runs))
        labelled.add(row.configuration.label)
        uniformity, tolerance = zip(*points)
        line = {"color": colour, "linestyle": style.linestyle, "linewidth": 1, "alpha": 0.8}
        axis.plot(uniformity, tolerance, marker=".", markersize=3, label=label, **line)
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
    legend_beside(axis)
    return save_figure(figure, path, title, "each run's path on the uniformity–tolerance plane")
