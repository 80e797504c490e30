"""Comparisons the table shows beside its numbers: the paper's cell and the difference
(``--reference table1``), and which accuracy cells the seeds cannot tell apart from the best.

Significance markers (accuracy columns only, ``RANKED_COLUMNS``, where higher is better):

- ``★`` on the configuration with the highest mean of the column (when two or more have one);
- ``≈`` on every other configuration whose interval ``mean ± std`` overlaps the best one's
  (``|mean − best mean| ≤ std + best std``): one sample std apart or less, the seeds do not
  separate it from the best. Both need n ≥ 2 (a single run has no std and gets no ``≈``).
"""

from __future__ import annotations

from ssl_app.report.reference import Match, reference_cell
from ssl_app.report.summary import Row, Stat

RANKED_COLUMNS = ("linear_top1", "knn_acc")
BEST = "★"
OVERLAPS_BEST = "≈"
SIGNIFICANCE_NOTE = (
    f"{BEST}: highest mean of an accuracy column; {OVERLAPS_BEST}: its mean ± std interval overlaps the {BEST} "
    f"one's (|Δmean| ≤ sum of the two stds, both n ≥ 2), so the seeds do not separate it from the best."
)


def matches(rows: list[Row]) -> list[Match]:
    """The Table-1 cell of each row's configuration, in the rows' order."""
    return [reference_cell(row.configuration.settings, row.configuration.loss, row.configuration.temperature) for row in rows]


def significance(rows: list[Row], key: str) -> list[str]:
    """The marker of each row's cell in column ``key`` ('' for none); all '' for a column not ranked."""
    markers = [""] * len(rows)
    if key not in RANKED_COLUMNS:
        return markers
    stats = [row.stat(key) for row in rows]
    valued = [index for index, stat in enumerate(stats) if stat.mean is not None]
    if len(valued) < 2:
        return markers  # nothing to rank
    best = max(valued, key=lambda index: stats[index].mean)
    markers[best] = BEST
    for index in valued:
        if index != best and overlaps(stats[index], stats[best]):
            markers[index] = OVERLAPS_BEST
    return markers


def overlaps(a: Stat, b: Stat) -> bool:
    """Whether the intervals mean ± std of ``a`` and ``b`` intersect (False without two stds)."""
    if a.mean is None or b.mean is None or a.std is None or b.std is None:
        return False
    return abs(a.mean - b.mean) <= a.std + b.std


def difference(stat: Stat, paper: float | None) -> float | None:
    """Measured mean minus the paper's value, or None when either is missing."""
    if stat.mean is None or paper is None:
        return None
    return stat.mean - paper
