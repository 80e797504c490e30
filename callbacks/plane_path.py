"""The run's path on the uniformity–tolerance plane (Wang & Liu's dilemma), one point per evaluation.

The points are the values ``EmbeddingMetrics`` logged as ``metrics/uniformity`` and
``metrics/tolerance``; they live in the callback's checkpoint state, so a resumed run draws the
whole path. The axes are fixed, so the image at every step and of every run can be compared:

- uniformity (``−L_unif``, t = 2) on [0, 4]: 0 for a collapsed set, 2t = 4 its cap for many
  points (docs/science.md, "Uniformity"; a handful of points can pass 4 slightly, and then the
  axis reaches the largest value);
- tolerance (a mean cosine similarity) on [0, 1], or on [−1, 1] once a point lies below 0.

The figure is drawn from the points alone (``ssl_app.drawing.figures.PlanePathFigure``).
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass
from typing import Any

from matplotlib.figure import Figure

from ssl_app.drawing.figures import PlanePathFigure

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

    def drawing(self, title: str, current: PlanePoint | None = None) -> PlanePathFigure | None:
        """The path as a figure to draw (``ssl_app.drawing.figures.PlanePathFigure``: start ○, current
        point ★, fixed axes); ``current``: an evaluation not recorded (``validate``), drawn after the
        path. ``None`` when there is no point."""
        points = self.points + ([current] if current is not None else [])
        if not points:
            return None
        return PlanePathFigure(tuple(astuple(point) for point in points), title)

    def figure(self, title: str, current: PlanePoint | None = None) -> Figure | None:
        """``drawing``'s matplotlib figure (``None`` when there is no point)."""
        drawing = self.drawing(title, current)
        return None if drawing is None else drawing.figure()
