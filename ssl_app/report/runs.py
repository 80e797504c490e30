"""Finding run folders and reading what each holds.

A *run* is a training run's folder (``ssl_app.runs.layout``): it holds a run record
(``run.json`` of kind ``fit``), or, from an older version, a TensorBoard event file or a
``sweep.json``. The record alone says whether its numbers are a result: only a ``done`` run with
readable events is averaged; ``failed``, ``interrupted``, ``diverged``, ``running`` and
``vanished`` (killed without a word) runs are listed in footnotes, and a folder without a record
has status ``unknown`` and is listed, never averaged.

A run's evaluations live inside it (``<run>/evaluations/``): ``validate_<n>``/``test_<n>`` are
never read as runs (nor as seeds), and the newest finished ``linear_<n>`` probe gives the run its
``linear/top1``. A probe written elsewhere (``--attach_to_run=false``) joins the run its record
names as ``parent``. Records of evaluations whose run is not in the report are listed apart.
A run's saved config also says how its callbacks named and measured what they logged
(``RunOptions``: the top-k of ``metrics/top{k}_neg_sim``, kNN's k and σ); the report reads each
run's tags with its own options. Nothing here needs the trainer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ssl_app.errors import ConfigError
from ssl_app.report.events import EventData, read_events
from ssl_app.runs.headline import RunOptions, read_options
from ssl_app.runs.layout import (
    CONFIG_FILE,
    SWEEP_FILE,
    SweepPoint,
    has_event_file,
    newest_done_evaluation,
    parent_folder,
    read_sweep_point,
)
from ssl_app.runs.panel import EVALUATION_GROUP
from ssl_app.runs.record import DONE, RECORD_FILE, RecordError, RunRecord, effective_status, read_record


@dataclass
class Run:
    """One training run folder as the report sees it.

    ``status`` is the record's (``unknown`` without one); ``problems`` lists what could not be read
    (each becomes a footnote). ``linear`` holds the events of the newest finished linear probe.
    """

    path: Path
    name: str
    record: RunRecord | None = None
    status: str = "unknown"
    config: dict[str, Any] | None = None
    sweep: SweepPoint | None = None
    events: EventData | None = None
    linear: EventData | None = None
    linear_name: str | None = None
    problems: list[str] = field(default_factory=list)
    options: RunOptions = field(default_factory=RunOptions)

    @property
    def usable(self) -> bool:
        """Finished (its record says ``done``) and with events: its numbers go into the means."""
        return self.status == DONE and self.events is not None

    @property
    def seed(self) -> Any:
        if self.sweep is not None:
            return self.sweep.seed
        return (self.config or {}).get("seed_everything")

    @property
    def collapse(self) -> dict[str, Any] | None:
        """The collapse the run recorded (mode, since which epoch), if any."""
        return self.record.collapse if self.record is not None else None


@dataclass
class Evaluation:
    """An evaluation or probe record whose run is not in the report (listed, never averaged)."""

    path: Path
    name: str
    kind: str
    status: str
    parent: str | None


@dataclass
class Study:
    """Everything under a report's root: the training runs and the evaluations without one."""

    runs: list[Run]
    orphans: list[Evaluation] = field(default_factory=list)


def find_run_dirs(root: Path) -> list[Path]:
    """Folders under ``root`` (itself included) that are runs, sorted.

    The walk does not descend into a run (its ``evaluations/`` and ``checkpoints/`` belong to it)
    nor into hidden folders.
    """
    found = []
    for directory, subdirs, files in os.walk(root):
        here = Path(directory)
        if RECORD_FILE in files or SWEEP_FILE in files or has_event_file(here):
            found.append(here)
            subdirs[:] = []
        else:
            subdirs[:] = sorted(name for name in subdirs if not name.startswith("."))
    return sorted(found)


def load_study(root: Path) -> Study:
    """Every run under ``root``, read, with the probes filed elsewhere joined to their runs.
    Raises ``ConfigError`` when ``root`` is not a directory or holds no run."""
    if not root.exists():
        raise ConfigError(f"runs directory {str(root)!r} does not exist")
    if not root.is_dir():
        raise ConfigError(f"runs directory {str(root)!r} is not a directory")
    directories = find_run_dirs(root)
    if not directories:
        raise ConfigError(
            f"no runs under {str(root)!r}: no folder holds a run record ({RECORD_FILE}), a TensorBoard event file "
            f"(events.out.tfevents.*) or {SWEEP_FILE}"
        )
    runs: list[Run] = []
    elsewhere: list[tuple[Path, RunRecord]] = []
    for directory in directories:
        name = directory.relative_to(root).as_posix() if directory != root else directory.name
        try:
            record = read_record(directory)
        except RecordError:
            record = None
        if record is not None and record.kind != "fit":
            elsewhere.append((directory, record))
            continue
        runs.append(read_run(directory, name))
    study = Study(runs=runs)
    by_path = {run.path.resolve(): run for run in runs}
    for directory, record in elsewhere:
        parent = parent_folder(directory, record.parent)
        run = by_path.get(parent.resolve()) if parent is not None else None
        if run is not None and record.kind == "linear" and record.status == DONE and run.linear is None:
            run.linear = _read_events_safely(directory, run.problems)
            run.linear_name = directory.name
            continue
        name = directory.relative_to(root).as_posix() if directory != root else directory.name
        study.orphans.append(Evaluation(directory, name, record.kind, effective_status(directory, record), record.parent))
    return study


def load_runs(root: Path) -> list[Run]:
    """The training runs under ``root`` (see :func:`load_study`)."""
    return load_study(root).runs


def read_run(directory: Path, name: str) -> Run:
    """Read one run folder; anything unreadable is recorded in ``Run.problems``, never raised."""
    run = Run(path=directory, name=name)
    try:
        run.record = read_record(directory)
    except RecordError as error:
        run.problems.append(str(error))
    run.status = effective_status(directory, run.record) if run.record is not None or not run.problems else "unreadable"
    if run.record is None and not run.problems:
        run.problems.append(f"no {RECORD_FILE} (an older version wrote it, or it was never started)")
    run.sweep = read_sweep_point(directory)
    if run.sweep is None and (directory / SWEEP_FILE).is_file():
        run.problems.append(f"{SWEEP_FILE} unreadable")
    run.config = run.record.config if run.record is not None and run.record.config else _read_config(directory, run.problems)
    run.options = read_options(run.config, run.problems)
    if run.status != DONE:
        return run  # listed, not averaged: no need to read its events
    if has_event_file(directory):
        run.events = _read_events_safely(directory, run.problems)
    else:
        run.problems.append("no event file")
    _read_probe(run)
    return run


def _read_probe(run: Run) -> None:
    """The newest finished linear probe filed in the run (``<run>/evaluations/linear_<n>``): its final values, from
    ``<run>/evaluations/linear/`` (what the fit's HParams row shows; the probe's curves are its folder's
    ``metrics.csv``, ``ssl_app.cli.plan.curves_as_csv``), or from its own events where an older version wrote them."""
    folder = newest_done_evaluation(run.path, "linear", run.problems)
    if folder is not None:
        values = folder if has_event_file(folder) else run.path / EVALUATION_GROUP.format(kind="linear")
        run.linear = _read_events_safely(values, run.problems)
        run.linear_name = folder.name


def _read_config(directory: Path, problems: list[str]) -> dict[str, Any] | None:
    path = directory / CONFIG_FILE
    if not path.is_file():
        problems.append(f"no {CONFIG_FILE}")
        return None
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as error:  # a broken sidecar is a footnote, not a crash
        problems.append(f"{CONFIG_FILE} unreadable ({type(error).__name__}: {error})".split("\n")[0])
        return None
    if not isinstance(config, dict):
        problems.append(f"{CONFIG_FILE} is not a mapping")
        return None
    return config


def _read_events_safely(directory: Path, problems: list[str]) -> EventData | None:
    try:
        return read_events(directory)
    except Exception as error:  # noqa: BLE001 - the reader's errors vary; a corrupt event file is a footnote
        problems.append(f"event file in {directory.name!r} unreadable ({type(error).__name__}: {error})".split("\n")[0])
        return None
