"""The end of a finished command: its headline numbers on the console.

After ``fit``, ``validate``, ``test`` and a linear probe finish, the CLI (global rank 0) prints a
few aligned lines, whatever ``--trainer.enable_progress_bar`` says (a batch job's log wants the
result too)::

    fit done, finished at epoch 10, step 40: runs/quickstart/version_0
      kNN (%)          41.20
      uniformity       2.871
      ...

The lines are the run's final values (the last logged value of each tag, the numbers
``run.json`` records as ``results``) of the *headline* columns, ``HEADLINE`` below: a few of the
report's Table-1 columns (``ssl_app.runs.headline``: their header, tag, scale and decimals), in
that order, each shown when the run logged it. The HParams tab reads the same tags' last values
from their own series (``ssl_app.runs.panel`` writes its config); TensorBoard keeps only the first
hyper-parameter summary of a run folder, so the CLI turns off the placeholder (``hp_metric``) that
Lightning would write at the start (``without_placeholder``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ssl_app.runs.headline import Column, RunOptions, read_options, table_columns
from ssl_app.runs.record import RunRecord
from ssl_app.runs.spec import RunSpec

#: The report's columns a run's console summary shows, by key, in this order (when logged).
HEADLINE = ("linear_top1", "linear_top5", "knn_acc", "uniformity", "tolerance", "effective_rank")
#: Headline columns that Table 1 does not have.
EXTRA_COLUMNS = (
    Column(
        "linear_top5",
        "linear top-5 (%)",
        "linear/top5",
        "linear-probe top-5 accuracy on the test split, %",
        source="linear",
        scale=100.0,
        digits=2,
    ),
)


def headline_columns() -> list[Column]:
    """The columns of ``HEADLINE``; a key that is no column (a renamed metric) is a ``KeyError`` here, not a silent gap."""
    columns = {column.key: column for column in (*table_columns(), *EXTRA_COLUMNS)}
    missing = [key for key in HEADLINE if key not in columns]
    if missing:
        raise KeyError(f"HEADLINE names {missing}, which are not report columns; known: {sorted(columns)}")
    return [columns[key] for key in HEADLINE]


def headline(values: Mapping[str, float], options: RunOptions | None = None) -> list[tuple[str, str]]:
    """``(header, formatted value)`` of each headline column found in ``values`` (``{tag: final value}``)."""
    options = options or RunOptions()
    found = []
    for column in headline_columns():
        value = values.get(options.fill(column.tag))
        if value is not None and math.isfinite(value):
            found.append((options.fill(column.header), f"{value * column.scale:.{column.digits}f}"))
    return found


def summary_lines(
    kind: str,
    ending: str,
    folder: Path | None,
    values: Mapping[str, float],
    config: Mapping[str, Any] | None = None,
    *,
    nowhere: str | None = None,
) -> list[str]:
    """The console summary: one line naming the command, how it ended and its folder (else why there is none:
    ``nowhere``, by default the lack of a folder logger), then the headline."""
    options = read_options(dict(config) if config else None, [])
    why = nowhere or "no TensorBoard/CSV logger"
    where = f": {shown_path(folder)}" if folder is not None else f" (no run folder: {why})"
    lines = [f"{kind} {ending}{where}"]
    rows = headline(values, options)
    width = max((len(header) for header, _ in rows), default=0)
    lines += [f"  {header:<{width}}  {value:>8}" for header, value in rows]
    return lines


def record_summary_lines(record: RunRecord, folder: Path) -> list[str]:
    """The console summary of a run from its record (``results``, ``exit_reason``): what the command
    that finished it printed, and what a re-run of the finished run prints again."""
    label = "linear probe" if record.kind == "linear" else record.kind
    return summary_lines(label, f"{record.status}, {record.exit_reason}", folder, record.results, record.config)


def shown_path(folder: Path) -> str:
    """``folder`` relative to the current folder when it lies inside it, else absolute."""
    absolute = folder.absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def hparams_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """The flattened config less the keys that only say where the run writes (``RunSpec.settings``)."""
    return RunSpec.from_config(config).flat


def without_placeholder(loggers: list[Any]) -> None:
    """Stop Lightning writing ``hp_metric = -1`` as the run's hyper-parameter summary at the start:
    TensorBoard would show that one and ignore the curated one (module docstring)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            logger._default_hp_metric = False  # the constructor's default_hp_metric, read by log_hyperparams
