"""The numbers of the table: its columns, one value per run and column, then mean ± std over seeds.

Every value is the run's *final* one: the last logged value of a per-epoch tag (the final
epoch), the linear evaluation's last logged value, and for the per-step
``loss/effective_negatives`` the mean over the steps of the final epoch.

Where the columns come from (``table_columns``), in this order:

1. Table 1 of Wang & Liu (``TABLE_ORDER``): linear top-1, kNN, uniformity, tolerance,
   alignment, positive similarity, top-k negative similarity, effective negatives;
2. then every other field of the metric registry (``ssl_app.metrics.families``), in
   registration order (effective rank, and any metric registered later);
3. then the many/medium/few-shot accuracies (kNN, linear probe, a method's classifier), each
   only in a table where some run logged it.

A registered field is a column with no edit here: its tag is ``metrics/<tag>``, its meaning the
registered formula, its header the tag with spaces (``HEADERS`` keeps the paper's short ones).
The columns that are not registered metrics are declared once, in ``OWN_COLUMNS``. A column's
texts may hold ``{k}`` (``EmbeddingMetrics.top_k``), ``{knn_k}`` and ``{knn_temperature}``
(``KNNMonitor``'s k and σ): each run's tag is read with its own saved options
(``ssl_app.runs.headline.RunOptions``), and ``resolve_columns`` fills the texts for a table. The columns
are declared in ``ssl_app.runs.headline``, below the report, since a run's console summary shows some of them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from ssl_app.report.events import EventData
from ssl_app.report.groups import Configuration
from ssl_app.report.runs import Run
from ssl_app.runs.headline import Column, RunOptions, fill, table_columns

EPOCH_TAG = "epoch"  # Lightning logs the epoch index at every step it logs anything
#: How a placeholder reads in a column whose runs differ in it.
SYMBOLS = {"k": "k", "knn_k": "k", "knn_temperature": "σ"}
#: Which callback option each placeholder is, for the note on runs that differ.
OPTION_NAMES = {"k": "EmbeddingMetrics.top_k", "knn_k": "KNNMonitor.k", "knn_temperature": "KNNMonitor.temperature"}


def placeholders(column: Column) -> list[str]:
    """The run options (``RunOptions.fill``'s names) that a column's texts depend on."""
    texts = (column.key, column.header, column.tag, column.meaning)
    return [name for name in SYMBOLS if any("{" + name + "}" in text for text in texts)]


def fill_column(column: Column, options: RunOptions) -> Column:
    """The column with the placeholders of its texts filled with ``options``."""
    return _filled(column, options.fill)


def _filled(column: Column, with_values) -> Column:
    return replace(
        column,
        key=with_values(column.key),
        header=with_values(column.header),
        tag=with_values(column.tag),
        meaning=with_values(column.meaning),
    )


@dataclass(frozen=True)
class TableColumn:
    """A column as one table shows it: ``shown`` holds the filled texts (``{k}`` → 10 when every run
    of the table shares it; otherwise → ``k``, the tag left as its template); ``differs`` says, when
    its runs differ in an option its texts depend on, which configuration has which value (each
    run's own tag is still read)."""

    column: Column
    shown: Column
    differs: str = ""

    @property
    def key(self) -> str:
        return self.column.key


def resolve_columns(rows: list[Row], columns: list[Column] | None = None) -> list[TableColumn]:
    """``columns`` (default: ``table_columns()``) as the table of ``rows`` shows them; a ``when_logged``
    column that no run of ``rows`` logged is left out."""
    resolved = []
    for column in table_columns() if columns is None else columns:
        if column.when_logged and not any(value is not None for row in rows for value in row.values.get(column.key, [])):
            continue
        names = placeholders(column)
        if not names:
            resolved.append(TableColumn(column, column))
            continue
        by_label: dict[str, set[str]] = {}
        for row in rows:
            for run in row.runs:
                by_label.setdefault(row.configuration.label, set()).add(run.options.fill(_settings(names)))
        settings = set().union(*by_label.values()) if by_label else set()
        if len(settings) <= 1:
            options = rows[0].runs[0].options if rows and rows[0].runs else RunOptions()
            resolved.append(TableColumn(column, fill_column(column, options)))
            continue
        generic = replace(_filled(column, lambda text: fill(text, SYMBOLS)), tag=column.tag)  # the tag as a template
        listed = "; ".join(f"{label}: {' / '.join(sorted(values))}" for label, values in by_label.items())
        option_names = ", ".join(OPTION_NAMES[name] for name in names)
        resolved.append(TableColumn(column, generic, f"the runs differ in {option_names} ({listed})"))
    return resolved


def _settings(names: list[str]) -> str:
    """``EmbeddingMetrics.top_k={k}``-style text for the placeholders ``names`` (filled per run)."""
    return ", ".join(f"{OPTION_NAMES[name]}={{{name}}}" for name in names)


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


def build_rows(configurations: list[Configuration], columns: list[Column] | None = None) -> list[Row]:
    """One row per configuration with at least one finished run, in the given order, with a value
    per run for every column (default: ``table_columns()``)."""
    columns = table_columns() if columns is None else columns
    rows = []
    for configuration in configurations:
        runs = configuration.usable_runs
        if runs:
            rows.append(Row(configuration, runs, {column.key: [column_value(column, run) for run in runs] for column in columns}))
    return rows


def column_value(column: Column, run: Run) -> float | None:
    """``column``'s number for one run, or None when the run did not log it (or logged NaN)."""
    events = run.linear if column.source == "linear" else run.events
    if events is None:
        return None
    tag = column.tag_of(run)
    value = final_epoch_mean(events, tag) if column.per_step else events.last(tag)
    if value is None or not math.isfinite(value):
        return None
    return value * column.scale


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
