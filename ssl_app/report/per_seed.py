"""``runs.csv``: every run's own numbers beside the table's means, so a study's paired intervals can be recomputed.

The table keeps each configuration's mean, std and n; the paired differences (``ssl_app.report.paired``) need each
seed's value, and the run folders they came from are rarely kept as long as the study's text. One line per run that
went into the table: its configuration's label (as the table shows it), its seed, its folder (relative to the runs
directory), then every column's value (empty where the run did not log it), named as ``table.csv`` names them.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ssl_app.report.summary import Row, resolve_columns

RUNS_CSV = "runs.csv"


def write_runs_csv(rows: list[Row], path: Path, runs_dir: Path) -> None:
    """One line per run of ``rows`` (module docstring)."""
    columns = resolve_columns(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["configuration", "seed", "run", *(column.shown.key for column in columns)])
    for row in rows:
        for index, run in enumerate(row.runs):
            values = [row.values[column.key][index] for column in columns]
            writer.writerow(
                [
                    row.configuration.label,
                    "" if run.seed is None else run.seed,
                    _relative(run.path, runs_dir),
                    *("" if value is None else repr(float(value)) for value in values),
                ]
            )
    path.write_text(buffer.getvalue(), encoding="utf-8")


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()
