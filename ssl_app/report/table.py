"""Table 1 as Markdown (cells ``mean ± std``, footnotes) and as CSV (mean, std, n per column)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ssl_app.report.compare import difference, matches
from ssl_app.report.groups import Configuration
from ssl_app.report.paired import PAIRED_HEADING, reference_index
from ssl_app.report.reference import METRICS
from ssl_app.report.runs import Evaluation, Run
from ssl_app.report.significance import PAIRED_PARTS, family, marks_legend, paired_cells, paired_markdown, too_few_warning
from ssl_app.report.summary import EPOCH_TAG, Row, Stat, TableColumn, resolve_columns
from ssl_app.runs.headline import callback_args
from ssl_app.runs.record import DONE, UNKNOWN

COLLAPSED_TAG = "metrics/collapsed"
#: The first table's columns (when logged): the study's headline numbers; the others go to the secondary tables.
HEADLINE_KEYS = ("linear_top1", "knn_acc", "uniformity", "tolerance")
#: At most this many metric columns in one table, so that each fits a page.
MAX_METRIC_COLUMNS = 6
SECONDARY_HEADING = "### Secondary metrics"
NO_CELL = "—"
REFERENCE_NOTE = (
    "paper: Wang & Liu's Table 1 (docs/science.md), the cell of the row's data set (its data class; an image "
    "folder whose class_list names imagenet100) and loss column (loss class and τ); Δ = measured mean − paper; "
    f"{NO_CELL}: no such cell."
)


class Footnotes:
    """Numbered notes; ``add`` returns the marker to put in a cell (``[1]``)."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def add(self, text: str) -> str:
        self.notes.append(text)
        return f"[{len(self.notes)}]"

    def markdown(self) -> str:
        return "\n".join(f"[{number}] {note}  " for number, note in enumerate(self.notes, start=1))


def format_stat(stat: Stat, digits: int) -> str:
    """``mean ± std`` (``mean`` alone for one run, empty for none)."""
    if stat.mean is None:
        return ""
    if stat.std is None:
        return f"{stat.mean:.{digits}f}"
    return f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f}"


def signed(value: float | None, digits: int) -> str:
    """``+0.13`` / ``−0.13`` (the minus sign), ``—`` for None."""
    if value is None:
        return NO_CELL
    return f"{'−' if value < 0 else '+'}{abs(value):.{digits}f}"


def paper_value(value: float | None, digits: int) -> str:
    return NO_CELL if value is None else f"{value:.{digits}f}"


def markdown_table(
    rows: list[Row],
    configurations: list[Configuration],
    title: str | None = None,
    orphans: list[Evaluation] | None = None,
    reference: str | None = None,
    baseline: str | None = None,
    brief: bool = False,
) -> str:
    """The tables, their marks, a one-line legend, what each column is, the footnotes and the paired
    differences against the reference ★ (``baseline``: its label; ``ssl_app.report.significance``), as Markdown.

    The headline columns (``HEADLINE_KEYS``) make the first table, the others the secondary tables of at most
    ``MAX_METRIC_COLUMNS`` each, so a table fits a page; a column no run logged is left out (and named).
    ``orphans``: evaluation records whose run is not among the report's runs (listed in one note).
    ``reference="table1"``: a ``Table-1 cell`` column, and beside linear top-1, uniformity and
    tolerance the paper's value and the difference (``ssl_app.report.reference``). ``brief``: the first table
    with its warning, marks and footnotes only (what a sweep prints at its end)."""
    notes = Footnotes()
    cells_of = matches(rows) if reference else []
    resolved = resolve_columns(rows)
    absent = [column for column in resolved if all(row.stat(column.key).n == 0 for row in rows)]
    columns = [column for column in resolved if column not in absent]
    star = reference_index(rows, baseline)
    found = family(rows, columns, star)
    headline = [column for column in columns if column.key in HEADLINE_KEYS]
    others = [column for column in columns if column.key not in HEADLINE_KEYS]
    if not headline:  # a study without its headline numbers: the first others lead
        headline, others = others[:MAX_METRIC_COLUMNS], others[MAX_METRIC_COLUMNS:]
    secondary = [] if brief else others
    shown = headline + secondary
    headers = {}
    for column in shown:
        markers = []
        if column.differs:
            markers.append(
                notes.add(f"{column.shown.header}: {column.differs}; each run's value is its own `{column.column.tag}`.")
            )
        headers[column.key] = " ".join([column.shown.header, *markers])
    labels, table1_cells, missing = [], [], []
    for index, row in enumerate(rows):
        markers = [notes.add(text) for text in _configuration_notes(row.configuration)]
        labels.append(" ".join([row.configuration.label, *markers]))
        match = cells_of[index] if reference else None
        if match is not None:
            why_not = [notes.add(f"{row.configuration.label}: no Table-1 cell, {match.why_not}.")] if match.why_not else []
            table1_cells.append(" ".join([match.name, *why_not]))
        missing.append(_missing_value_notes(row, shown, notes, skip=[]))

    def table(part: list[TableColumn], first: bool) -> list[str]:
        header = ["configuration", "n"] + (["Table-1 cell"] if reference and first else [])
        for column in part:
            header.append(headers[column.key])
            if reference and column.key in METRICS:
                header += [f"paper {column.shown.header}", f"Δ {column.shown.header}"]
        marks = {column.key: found.marks(column.key, len(rows)) for column in part}
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for index, row in enumerate(rows):
            cells = [labels[index] if first else row.configuration.label, str(row.n)]
            cells += [table1_cells[index]] if reference and first else []
            for column in part:
                stat = row.stat(column.key)
                cell = format_stat(stat, column.shown.digits)
                cells.append(" ".join(bit for bit in (cell, marks[column.key][index], missing[index].get(column.key, "")) if bit))
                if reference and column.key in METRICS:
                    paper = cells_of[index].value(column.key)
                    cells += [paper_value(paper, column.shown.digits), signed(difference(stat, paper), column.shown.digits)]
            lines.append("| " + " | ".join(cells) + " |")
        return lines

    with_rows = {id(row.configuration) for row in rows}
    for configuration in configurations:
        if id(configuration) not in with_rows:
            for text in _configuration_notes(configuration):
                notes.add(f"{configuration.label} (no row: no finished run): {text}")
    if orphans:
        listed = "; ".join(f"`{e.name}` ({e.kind}, {e.status}{f', of {e.parent}' if e.parent else ''})" for e in orphans)
        notes.add(f"evaluations whose training run is not under this folder, not in the table: {listed}.")
    parts = [f"## {title}", ""] if title else []
    warning = too_few_warning(rows, found)
    if warning:
        parts += [warning, ""]
    parts += table(headline, first=True)
    if found.keys:
        parts += ["", marks_legend(found)]
    if secondary:
        parts += ["", SECONDARY_HEADING]
        for start in range(0, len(secondary), MAX_METRIC_COLUMNS):
            parts += ["", *table(secondary[start : start + MAX_METRIC_COLUMNS], first=False)]
    if not brief:
        legend = [LEGEND] + ([REFERENCE_NOTE] if reference else [])
        if absent:
            legend.append("Not shown, logged by no run: " + ", ".join(f"`{column.shown.tag}`" for column in absent) + ".")
        parts += ["", " ".join(legend), "", *column_glossary(shown)]
    if notes.notes:
        parts += ["", notes.markdown()]
    paired = [] if brief else paired_markdown(rows, shown, found, PAIRED_HEADING)
    if paired:
        parts += ["", *paired]
    return "\n".join(parts) + "\n"


def column_glossary(columns: list[TableColumn]) -> list[str]:
    """One Markdown list line per column: its header, what the number is, and the tag it is read from."""
    return [f"- {column.shown.header}: {column.shown.meaning} (`{column.shown.tag}`)" for column in columns]


LEGEND = (
    "mean ± sample std (n − 1) over the n seeds of each configuration; final values: last logged epoch, "
    "linear evaluation's last value; eff. negatives: mean over the final epoch's steps "
    f"(the last step's value when a run does not log `{EPOCH_TAG}`)."
)


def write_csv(rows: list[Row], path: Path, reference: str | None = None, baseline: str | None = None) -> None:
    """One line per row: configuration, n, ``paired_reference`` (1 on ★), then ``<column>_mean``, ``_std``,
    ``_n`` (empty when absent) and the paired difference to ★ ``_paired_delta``, ``_low``, ``_high``,
    ``_n``, ``_p`` (the paired t-test) and ``_holm_p`` (``ssl_app.report.significance``; empty on ★ and
    below 2 pairs but ``_n``, ``_holm_p`` empty when not tested), every column, logged or not; ``<column>`` the
    column's key as the table shows it (``top10_neg_sim``). With ``reference``: ``table1_cell``
    after n, and ``<column>_paper``, ``<column>_delta`` for the paper's metrics."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = resolve_columns(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    star = reference_index(rows, baseline)
    found = family(rows, columns, star)
    fields = ["configuration", "n"] + (["table1_cell"] if reference else []) + ["paired_reference"]
    for c in columns:
        fields += [f"{c.shown.key}_{part}" for part in ("mean", "std", "n")]
        fields += [f"{c.shown.key}_paired_{part}" for part in PAIRED_PARTS]
        if reference and c.key in METRICS:
            fields += [f"{c.shown.key}_paper", f"{c.shown.key}_delta"]
    writer.writerow(fields)
    cells_of = matches(rows) if reference else []
    for index, row in enumerate(rows):
        line: list[object] = [row.configuration.label, row.n]
        if reference:
            line.append(cells_of[index].name if cells_of[index].values is not None else "")
        line.append(int(index == star))
        for column in columns:
            stat = row.stat(column.key)
            line += [_number(stat.mean), _number(stat.std), stat.n]
            line += paired_cells(found, index, column.key)
            if reference and column.key in METRICS:
                paper = cells_of[index].value(column.key)
                line += [_number(paper), _number(difference(stat, paper))]
        writer.writerow(line)
    path.write_text(buffer.getvalue(), encoding="utf-8")


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _configuration_notes(configuration: Configuration) -> list[str]:
    """Notes on a configuration's runs: not averaged (failed, running, no events), unreadable
    files, collapse."""
    notes = []
    left_out = [_describe_left_out(run) for run in configuration.runs if not run.usable]
    if left_out:
        notes.append("not averaged: " + "; ".join(left_out) + ".")
    for run in configuration.runs:
        if run.usable and run.problems:
            notes.append(f"run `{run.name}`: " + "; ".join(run.problems) + ".")
        if run.usable:
            collapsed = _collapse_note(run)
            if collapsed:
                notes.append(f"run `{run.name}`: {collapsed}")
    augmented = [run.name for run in configuration.usable_runs if _uniformity_inputs(run) == "augmented"]
    if augmented:
        notes.append(
            "uniformity and tolerance computed on augmented views (`uniformity_inputs: augmented`) in "
            + ", ".join(f"`{name}`" for name in augmented)
            + ": lower than on clean embeddings, not comparable with Table 1."
        )
    return notes


def _uniformity_inputs(run: Run) -> str | None:
    """The ``uniformity_inputs`` option of the run's EmbeddingMetrics callback, if its config says."""
    return (callback_args(run.config, "EmbeddingMetrics") or {}).get("uniformity_inputs")


def _collapse_note(run: Run) -> str | None:
    """What the run recorded of a collapse (mode, since when), or its final ``metrics/collapsed`` = 1."""
    collapse = run.collapse
    if collapse:
        mode, since = collapse.get("mode", "collapse"), collapse.get("since_epoch")
        reasons = "; ".join(str(reason) for reason in collapse.get("reasons") or [])
        when = f" since epoch {since}" if since is not None else ""
        return (
            f"representation collapsed ({mode}{when}{': ' + reasons if reasons else ''}); averaged, as a result of its setting."
        )
    if run.events is not None and (run.events.last(COLLAPSED_TAG) or 0) >= 1:
        return f"representation collapsed (`{COLLAPSED_TAG}` = 1 at the final epoch); averaged, as a result of its setting."
    return None


def _describe_left_out(run: Run) -> str:
    """Why a run is not averaged: its status and exit reason (the record's), or what could not be read."""
    if run.status != DONE:
        reason = "status unknown" if run.status == UNKNOWN else run.status
        if run.record is not None and run.record.exit_reason:
            reason += f": {run.record.exit_reason}"
        if run.problems:
            reason += f"; {'; '.join(run.problems)}"
    else:
        reason = "; ".join(run.problems) or "no events"
    log = run.sweep.logs.get("fit") if run.sweep is not None else None
    return f"run `{run.name}` ({reason}{f', log: `{log}`' if log else ''})"


def _missing_value_notes(row: Row, columns: list[TableColumn], notes: Footnotes, skip: list) -> dict[str, str]:
    """One note per set of runs missing values in this row (columns in ``skip`` have their own
    note); returns each affected column's marker."""
    by_missing_runs: dict[tuple[str, ...], list] = {}
    for column in columns:
        if column in skip:
            continue
        missing = tuple(run.name for run, value in zip(row.runs, row.values[column.key]) if value is None)
        if missing:
            by_missing_runs.setdefault(missing, []).append(column)
    markers = {}
    for missing, affected in by_missing_runs.items():
        tags = ", ".join(f"`{column.shown.tag}`" for column in affected)
        names = ", ".join(f"`{name}`" for name in missing)
        have = row.n - len(missing)
        summary = f"those cells are the mean over the other {have} of {row.n} runs" if have else "those cells are empty"
        marker = notes.add(f"{row.configuration.label}: {tags} not logged by {names}; {summary}.")
        markers.update((column.key, marker) for column in affected)
    return markers
