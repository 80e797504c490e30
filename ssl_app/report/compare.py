"""The table against the paper (``--reference table1``): the paper's cell and the difference.
How configurations compare with each other: ``ssl_app.report.paired``.
"""

from __future__ import annotations

from ssl_app.report.reference import Match, reference_cell
from ssl_app.report.summary import Row, Stat


def matches(rows: list[Row]) -> list[Match]:
    """The Table-1 cell of each row's configuration, in the rows' order."""
    return [reference_cell(row.configuration.spec, row.configuration.loss, row.configuration.temperature) for row in rows]


def difference(stat: Stat, paper: float | None) -> float | None:
    """Measured mean minus the paper's value, or None when either is missing."""
    if stat.mean is None or paper is None:
        return None
    return stat.mean - paper
