"""The numbers of the table: one value per run and column, then mean ± std over seeds.

Every value is the run's *final* one: the last logged value of a per-epoch tag (the final
epoch), the linear evaluation's last logged value, and for the per-step
``loss/effective_negatives`` the mean over the steps of the final epoch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ssl_app.report.events import EventData
from ssl_app.report.groups import Configuration
from ssl_app.report.runs import Run

EPOCH_TAG = "epoch"  # Lightning logs the epoch index at every step it logs anything


@dataclass(frozen=True)
class Column:
    """One column of the table.

    ``tag`` is read from the run's events (``source="run"``) or from its ``linear/`` events
    (``source="linear"``); the value shown is ``scale ×`` the final value (see ``final_value``),
    with ``digits`` decimals.
    """

    key: str
    header: str
    tag: str
    meaning: str
    source: str = "run"
    scale: float = 1.0
    digits: int = 3
    per_step: bool = False

    def value(self, run: Run) -> float | None:
        """This column's number for one run, or None when the run did not log it (or logged NaN)."""
        events = run.linear if self.source == "linear" else run.events
        if events is None:
            return None
        value = final_epoch_mean(events, self.tag) if self.per_step else events.last(self.tag)
        if value is None or not math.isfinite(value):
            return None
        return value * self.scale


COLUMNS = (
    Column(
        "linear_top1",
        "linear top-1 (%)",
        "linear/top1",
        "linear-probe top-1 accuracy on the test split, %",
        source="linear",
        scale=100.0,
        digits=2,
    ),
    Column("knn_acc", "kNN (%)", "metrics/knn_acc", "weighted kNN accuracy (k=200, σ=0.07), %", scale=100.0, digits=2),
    Column(
        "uniformity", "uniformity", "metrics/uniformity", "−L_unif, higher is more uniform (≈3.94 for random points on S^127)"
    ),
    Column("tolerance", "tolerance", "metrics/tolerance", "mean similarity of same-class pairs of different images"),
    Column("alignment", "alignment", "metrics/alignment", "mean ‖z_a − z_b‖² over two views, 0 = views coincide"),
    Column("pos_sim", "pos. sim.", "metrics/pos_sim", "mean positive similarity s_ii"),
    Column(
        "top10_neg_sim", "top-10 neg. sim.", "metrics/top10_neg_sim", "mean of each sample's 10 largest negative similarities"
    ),
    Column(
        "effective_negatives",
        "eff. negatives",
        "loss/effective_negatives",
        "exp(entropy of the relative penalties r_i), mean over the final epoch's steps",
        digits=1,
        per_step=True,
    ),
)


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation (n − 1) of ``n`` runs' values; std is None for n < 2."""

    mean: float | None
    std: float | None
    n: int


@dataclass
class Row:
    """One configuration's numbers: ``values[column.key][i]`` is run ``runs[i]``'s value (or None)."""

    configuration: Configuration
    runs: list[Run]
    values: dict[str, list[float | None]]

    def stat(self, key: str) -> Stat:
        return summarise([value for value in self.values[key] if value is not None])

    @property
    def n(self) -> int:
        return len(self.runs)


def summarise(values: list[float]) -> Stat:
    if not values:
        return Stat(mean=None, std=None, n=0)
    if len(values) == 1:
        return Stat(mean=values[0], std=None, n=1)
    return Stat(mean=statistics.fmean(values), std=statistics.stdev(values), n=len(values))


def build_rows(configurations: list[Configuration]) -> list[Row]:
    """One row per configuration with at least one finished run, in the given order."""
    rows = []
    for configuration in configurations:
        runs = configuration.usable_runs
        if runs:
            rows.append(Row(configuration, runs, {column.key: [column.value(run) for run in runs] for column in COLUMNS}))
    return rows


def final_epoch_mean(events: EventData, tag: str) -> float | None:
    """Mean of a per-step tag over the steps of its final epoch.

    The epoch of a step is read from the ``epoch`` scalar logged at the same step; when a step's
    epoch is unknown (the run did not log ``epoch``), the last value is returned instead.
    """
    series = events.scalars.get(tag)
    if not series:
        return None
    epoch_at = dict(events.scalars.get(EPOCH_TAG, []))
    epochs = [epoch_at.get(step) for step, _ in series]
    if any(epoch is None for epoch in epochs):
        return series[-1][1]
    final = epochs[-1]
    return statistics.fmean(value for (_, value), epoch in zip(series, epochs) if epoch == final)
