"""What a sweep prints from its run folders: a finished run's headline numbers on one line, and the study's
first table.

The sweep (``ssl_app.sweep``: each run's ``done`` line, the end of a local sweep, ``--status``) calls these, so
its console reads the folders as the report does: a run through ``runs.read_run`` (its record, config and
events, its newest finished probe), its numbers through ``summary.column_value`` (the final values, each run's
own tags), the table through ``table.markdown_table(brief=True)`` (the report's first table with its warning,
marks and footnotes).
"""

from __future__ import annotations

from pathlib import Path

from ssl_app.errors import ConfigError
from ssl_app.report.groups import group_runs
from ssl_app.report.runs import load_study, read_run
from ssl_app.report.summary import build_rows, column_value, fill_column
from ssl_app.report.table import HEADLINE_KEYS, markdown_table
from ssl_app.runs.headline import table_columns


def run_numbers(directory: Path) -> str:
    """``linear top-1 (%) 81.20, kNN (%) 52.00, uniformity 3.610, tolerance 0.179``: the headline columns
    (``HEADLINE_KEYS``) the finished run in ``directory`` logged; "" for a run that is not finished or logged none."""
    run = read_run(directory, directory.name)
    if not run.usable:
        return ""
    by_key = {column.key: column for column in table_columns()}
    parts = []
    for key in HEADLINE_KEYS:
        column = fill_column(by_key[key], run.options)
        value = column_value(by_key[key], run)
        if value is not None:
            parts.append(f"{column.header} {value:.{column.digits}f}")
    return ", ".join(parts)


def study_table(root: Path) -> str:
    """The report's first table of the runs under ``root`` (Markdown, with its warning, marks and footnotes);
    "" while no run under ``root`` has finished."""
    try:
        study = load_study(root)
    except ConfigError:
        return ""
    configurations = group_runs(study.runs)
    rows = build_rows(configurations)
    if not rows:
        return ""
    return markdown_table(rows, configurations, brief=True)
