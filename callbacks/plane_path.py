"""The run's path on the uniformity–tolerance plane (Wang & Liu's dilemma), one point per evaluation.

The points are the values ``EmbeddingMetrics`` logged as ``metrics/uniformity`` and
``metrics/tolerance``; they live in the callback's checkpoint state, so a resumed run draws the
whole path. The axes are fixed, so the image at every step and of every run can be compared:

- uniformity (``−L_unif``, t = 2) on [0, 4]: 0 for a collapsed set, 2t = 4 its cap for many
  points (docs/science.md, "Uniformity"; a handful of points can pass 4 slightly, and then the
  axis reaches the largest value);
- tolerance (a mean cosine similarity) on [0, 1], or on [−1, 1] once a point lies below 0.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from callbacks.plots import fixed_margins

#: The fixed uniformity axis: [0, 2t] at t = 2.
UNIFORMITY_RANGE = (0.0, 4.0)
PLANE_PATH_TAG = "figures/uniformity_tolerance_path"


@dataclass(frozen=True)
class PlanePoint:
    epoch: int
    uniformity: float
    tolerance: float


class PlanePath:
    """The evaluations' (epoch, uniformity, tolerance) so far, in order; picklable state."""

    def __init__(self) -> None:
        self.points: list[PlanePoint] = []

    def add(self, epoch: int, uniformity: float, tolerance: float) -> None:
        """Record one evaluation (skipped when either value is NaN, e.g. on data without labels);
        an evaluation of an epoch already recorded replaces it (a re-run validation)."""
        if math.isnan(uniformity) or math.isnan(tolerance):
            return
        self.points = [point for point in self.points if point.epoch != epoch]
        self.points.append(PlanePoint(int(epoch), float(uniformity), float(tolerance)))

    def state_dict(self) -> list[tuple[int, float, float]]:
        return [astuple(point) for point in self.points]

    def load_state_dict(self, state: list[Any]) -> None:
        self.points = [PlanePoint(int(e), float(u), float(t)) for e, u, t in state]

    def figure(self, title: str, current: PlanePoint | None = None) -> Figure | None:
        """The path with its start (○) and current point (★) marked; ``current``: an evaluation
        not recorded (``validate``), drawn after the path. ``None`` when there is no point."""
        points = self.points + ([current] if current is not None else [])
        if not points:
            return None
        us = [point.uniformity for point in points]
        ts = [point.tolerance for point in points]
        figure = Figure(figsize=(5.0, 4.0), dpi=100)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        axes.plot(us, ts, "-", color="0.6", linewidth=1)
        axes.scatter(us, ts, c=range(len(points)), cmap="viridis", s=14, zorder=3)
        start = f"start (epoch {points[0].epoch})"
        axes.plot(us[0], ts[0], "o", markersize=9, markerfacecolor="none", color="tab:blue", label=start)
        axes.plot(us[-1], ts[-1], "*", markersize=13, color="tab:red", label=f"now (epoch {points[-1].epoch})")
        axes.set_xlim(UNIFORMITY_RANGE[0], max(UNIFORMITY_RANGE[1], max(us) * 1.02))
        axes.set_ylim(-1.0 if min(ts) < 0 else 0.0, 1.0)
        axes.set_xlabel("uniformity (−L_unif, higher = more uniform)")
        axes.set_ylabel("tolerance (same-class similarity)")
        axes.grid(alpha=0.3)
        axes.legend(loc="upper right", fontsize="small")
        axes.set_title(title, fontsize="small")
        fixed_margins(figure, left=0.13, bottom=0.12, top=0.88)
        return figure
