"""``python -m ssl_app.report RUNS_DIR [--out DIR] [--title TEXT] [--reference table1] [--baseline LABEL]``.

Prints the Markdown table on stdout; writes ``table.md``, ``table.csv``, ``runs.csv`` (each run's own numbers,
``ssl_app.report.per_seed``) and the PNG figures to
the out dir (default ``RUNS_DIR/report``) and says on stderr what it wrote or skipped. A user
error (no such directory, no run in it) is one line ``error: ...`` on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ssl_app.cli.endings import say_error
from ssl_app.cli.light_parser import CachedHelpParser, LazyChoices, keep_help
from ssl_app.errors import ConfigError
from ssl_app.quiet import known_noise_silenced

if TYPE_CHECKING:
    from ssl_app.report.figures import FigureResult

# The readers, the table and the figures (torch, matplotlib, TensorBoard's event reader) are imported below the
# parsing, so that --help (kept in the user's cache, ssl_app.cli.light_parser) and a bad option print before them.

TABLE_MD = "table.md"
TABLE_CSV = "table.csv"


@dataclass
class Report:
    """What ``make_report`` produced: the Markdown, the files written and the figures skipped."""

    markdown: str
    csv_path: Path
    figures: list[FigureResult]


def make_report(
    runs_dir: Path,
    out_dir: Path | None = None,
    title: str | None = None,
    reference: str | None = None,
    baseline: str | None = None,
) -> Report:
    """Read the runs under ``runs_dir``, write table and figures to ``out_dir``; raises
    ``ConfigError`` when there is nothing to report on. ``reference="table1"``: compare with the
    paper's Table 1 (``ssl_app.report.reference``). ``baseline``: the label of the configuration the
    others are compared with by paired differences (``ssl_app.report.paired``)."""
    from ssl_app.report.compare import matches
    from ssl_app.report.figures import draw_all
    from ssl_app.report.groups import group_runs
    from ssl_app.report.paired import reference_index
    from ssl_app.report.per_seed import RUNS_CSV, write_runs_csv
    from ssl_app.report.reference import REFERENCES
    from ssl_app.report.runs import load_study
    from ssl_app.report.summary import build_rows
    from ssl_app.report.table import markdown_table, write_csv
    from ssl_app.report.tau_figures import draw_tau_figures

    if reference is not None and reference not in REFERENCES:
        raise ConfigError(f"reference {reference!r} is not known; choose one of {', '.join(REFERENCES)}")
    out_dir = out_dir if out_dir is not None else runs_dir / "report"
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file, not a folder; name a folder for table.md, table.csv and the figures")
    study = load_study(runs_dir)
    runs = study.runs
    configurations = group_runs(runs)
    rows = build_rows(configurations)
    if not rows:
        statuses = ", ".join(f"{run.name}: {run.status}" for run in runs[:10])
        raise ConfigError(
            f"no finished run under {str(runs_dir)!r}: {len(runs)} run(s), none done with an event file ({statuses})"
        )
    reference_index(rows, baseline)  # an unknown --baseline stops here, before anything is written
    make_out_dir(out_dir)
    markdown = markdown_table(rows, configurations, title, study.orphans, reference, baseline)
    (out_dir / TABLE_MD).write_text(markdown, encoding="utf-8")
    write_csv(rows, out_dir / TABLE_CSV, reference, baseline)
    write_runs_csv(rows, out_dir / RUNS_CSV, runs_dir)
    figures = draw_all(rows, out_dir, title, matches(rows) if reference else None) + draw_tau_figures(rows, out_dir, title)
    return Report(markdown=markdown, csv_path=out_dir / TABLE_CSV, figures=figures)


def make_out_dir(out_dir: Path) -> None:
    """``out_dir`` and its parents, or a ConfigError naming it (a path that cannot be made); a failed
    attempt removes the parents it made."""
    created = out_dir.absolute()
    while not created.parent.exists():
        created = created.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        if created.is_dir() and created != out_dir.absolute():
            shutil.rmtree(created, ignore_errors=True)
        where = f" ({error.filename})" if error.filename and str(error.filename) != str(out_dir) else ""
        raise ConfigError(f"--out {out_dir}: cannot create it{where}: {error.strerror or error}") from None


def columns_epilog() -> str:
    """The table's columns, as the metric registry and the callbacks' defaults name them: the help's epilog."""
    from ssl_app.report.summary import fill_column
    from ssl_app.runs.headline import RunOptions, table_columns

    defaults = RunOptions()
    shown = [fill_column(column, defaults) for column in table_columns()]
    columns = "\n".join(f"  {column.header}: {column.meaning} ({column.tag})" for column in shown)
    return (
        f"columns (final epoch, mean ± std over seeds):\n{columns}\n"
        f"top-k (k={defaults.top_k}) and kNN's k and σ shown with the callbacks' defaults: the table reads each "
        "run's own from its saved config (EmbeddingMetrics.top_k, KNNMonitor.k/temperature)\nsee docs/report.md"
    )


def _references() -> tuple[str, ...]:
    from ssl_app.report.reference import REFERENCES

    return REFERENCES


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def build_parser() -> argparse.ArgumentParser:
    parser = CachedHelpParser(
        prog="python -m ssl_app.report",
        description="Table 1 (Markdown on stdout, CSV) and figures from a directory of runs.",
        epilog_from=columns_epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # --ref is no --reference: an abbreviation would be taken silently
    )
    parser.add_argument("runs_dir", type=Path, metavar="RUNS_DIR", help="directory searched for run folders")
    parser.add_argument(
        "--out", type=Path, default=None, help="where table.csv, table.md and the PNGs go (default: RUNS_DIR/report)"
    )
    parser.add_argument("--title", default=None, help="heading of the table and the figures")
    parser.add_argument(
        "--reference",
        choices=LazyChoices("python -m ssl_app.report --reference", _references),
        metavar="NAME",
        default=None,
        help="beside linear top-1, uniformity and tolerance: the paper's value (Wang & Liu, Table 1) and the "
        "difference; its points in the uniformity–tolerance plane (NAME: %(choices)s)",
    )
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="LABEL",
        help="the configuration (its label in the table) every other one is compared with by paired differences over "
        "shared seeds (default: the highest mean linear top-1, else kNN)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    keep_help(build_parser())  # its columns are read below anyway: the next --help needs no import
    try:
        with known_noise_silenced():
            report = make_report(args.runs_dir, args.out, args.title, args.reference, args.baseline)
    except ConfigError as error:
        return say_error(error)
    from ssl_app.report.per_seed import RUNS_CSV

    sys.stdout.write(report.markdown)
    print(
        f"wrote {report.csv_path}, {report.csv_path.with_name(TABLE_MD)} and {report.csv_path.with_name(RUNS_CSV)}",
        file=sys.stderr,
    )
    for figure in report.figures:
        print(f"wrote {figure.path}" if figure.path else f"{figure.name}: {figure.note}", file=sys.stderr)
    return 0
