"""Where a run's files live, and how a checkpoint leads back to the run that wrote it.

::

    <run>/                       a fit: runs/<name>/version_<n>/, or a sweep's <out>/<sweep>/<point>/seed<k>/
      run.json                   the record (ssl_app.runs.record)
      .lock                      held while a process writes here (ssl_app.io.lock)
      config.yaml                the resolved config of the first start
      events.out.tfevents.*      TensorBoard
      checkpoints/               last.ckpt and the epoch checkpoints
      sweep.json                 which sweep point and seed this run is (sweeps only)
      slurm.json                 the cluster job that runs it (sweeps with --launcher slurm only)
      evaluations/               what was measured on this run's checkpoints
        validate_0/  test_0/     a validate / test --ckpt_path <run>/checkpoints/...: run.json, events, config.yaml
        linear_0/                a linear probe of one of the run's checkpoints (its own checkpoints/ too)
        linear/ validate/ test/  the newest evaluation's final values of each kind: the fit's HParams row shows them

An evaluation never becomes a ``version_<n>`` of its own, so nothing mistakes it for another
training run with the same config (another seed); its record names its ``parent``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar

from ssl_app.io.atomic import write_json
from ssl_app.runs.record import DONE, RECORD_FILE, RecordError, read_record

T = TypeVar("T")

EVALUATIONS_DIR = "evaluations"
CHECKPOINTS_DIR = "checkpoints"
CONFIG_FILE = "config.yaml"
EVENTS_GLOB = "events.out.tfevents.*"
SWEEP_FILE = "sweep.json"
JOB_FILE = "slurm.json"
_EVALUATION_NAME = re.compile(r"(validate|test|linear)_(\d+)")


def has_event_file(folder: Path) -> bool:
    """True when ``folder`` itself (not a subfolder) holds a TensorBoard event file."""
    return any(path.is_file() for path in folder.glob(EVENTS_GLOB))


def is_run_folder(folder: Path) -> bool:
    """A folder some run wrote: a record, a resolved config or an event file."""
    return (folder / RECORD_FILE).is_file() or (folder / CONFIG_FILE).is_file() or has_event_file(folder)


def run_folder_of_checkpoint(checkpoint: str | os.PathLike[str]) -> Optional[Path]:
    """``<run>`` when ``checkpoint`` is ``<run>/checkpoints/<file>`` and ``<run>`` is a run folder, else None."""
    path = Path(checkpoint).absolute()
    if path.parent.name != CHECKPOINTS_DIR:
        return None
    run = path.parent.parent
    return run if is_run_folder(run) else None


def evaluation_folders(run: Path, kind: Optional[str] = None) -> list[Path]:
    """``run``'s evaluation folders (of one ``kind``: validate, test or linear), oldest index first."""
    root = run / EVALUATIONS_DIR
    if not root.is_dir():
        return []
    found = []
    for folder in root.iterdir():
        match = _EVALUATION_NAME.fullmatch(folder.name)
        if match and folder.is_dir() and (kind is None or match.group(1) == kind):
            found.append((match.group(1), int(match.group(2)), folder))
    return [folder for _, _, folder in sorted(found)]


def newest_done_evaluation(run: Path, kind: str, problems: Optional[list[str]] = None) -> Optional[Path]:
    """The newest of ``run``'s ``kind`` evaluations whose record says done (None: none did). An unreadable
    record is passed over, its error added to ``problems``. The report reads this probe; the sweep asks it
    whether a run's probe is done."""
    for folder in reversed(evaluation_folders(run, kind)):
        try:
            record = read_record(folder)
        except RecordError as error:
            if problems is not None:
                problems.append(str(error))
            continue
        if record is not None and record.status == DONE:
            return folder
    return None


def next_evaluation_name(run: Path, kind: str) -> str:
    """``<kind>_<n>`` with ``n`` one past the highest index of ``run``'s ``kind`` evaluations."""
    taken = [int(_EVALUATION_NAME.fullmatch(folder.name).group(2)) for folder in evaluation_folders(run, kind)]
    return f"{kind}_{max(taken, default=-1) + 1}"


def parent_folder(folder: Path, parent: Optional[str]) -> Optional[Path]:
    """The folder a record's ``parent`` names (stored relative to ``folder`` when possible)."""
    if not parent:
        return None
    path = Path(parent)
    return (folder / path).resolve() if not path.is_absolute() else path


def relative_parent(folder: Path, parent: Path) -> str:
    """How ``folder``'s record names ``parent``: a relative path when both are on one tree (so a
    moved study keeps its links), else the absolute path."""
    try:
        return os.path.relpath(parent.resolve(), folder.resolve())
    except ValueError:  # another drive (Windows)
        return str(parent.resolve())


@dataclass
class SweepPoint:
    """``sweep.json``: which sweep, grid point and seed a run folder is, and its stages' commands.

    Status is not kept here: it is the run record's (``run.json``) and its probe's. ``exits`` is each
    stage's last exit status (absent while it runs): a stage whose process failed after its record
    said ``done`` is not done (``ssl_app.sweep.stages.PlannedRun.fit_status``). ``probed``: the sweep runs a
    linear probe after the fit (HParams shows the probe's top-1 beside kNN, ``ssl_app.runs.panel``).
    """

    sweep: str
    point: str
    grid: dict[str, str]
    seed: int
    probed: bool = False
    commands: dict[str, str] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    exits: dict[str, int] = field(default_factory=dict)


def write_sweep_point(folder: Path, point: SweepPoint) -> None:
    write_json(folder / SWEEP_FILE, asdict(point))


def read_json_as(path: Path, build: Callable[[Any], T]) -> Optional[T]:
    """``build`` of the JSON in ``path``, or None where the file is missing, unreadable or not what
    ``build`` expects (it raises ``ValueError``, ``KeyError`` or ``TypeError``)."""
    if not path.is_file():
        return None
    try:
        return build(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_sweep_point(folder: Path) -> Optional[SweepPoint]:
    """The folder's ``sweep.json``, or None (missing, unreadable, or not a sweep point)."""
    return read_json_as(
        folder / SWEEP_FILE,
        lambda data: SweepPoint(
            sweep=str(data["sweep"]),
            point=str(data["point"]),
            grid={str(k): str(v) for k, v in dict(data["grid"]).items()},
            seed=int(data["seed"]),
            probed=bool(data.get("probed", False)),
            commands=dict(data.get("commands") or {}),
            logs=dict(data.get("logs") or {}),
            exits={str(k): int(v) for k, v in dict(data.get("exits") or {}).items()},
        ),
    )


@dataclass
class JobRecord:
    """``slurm.json``: the cluster job a sweep submitted for this run folder (``--launcher slurm``).

    Written once by the submitting process, never by the job, so nothing races on it; a new
    submission replaces it. The run's status stays the run record's; this says only where to ask
    the scheduler (``cluster``, ``job_id``) and where the job's own output is (``folder``).
    """

    cluster: str
    job_id: str
    folder: str
    submitted: str
    stdout: str = ""


def write_job_record(folder: Path, job: JobRecord) -> None:
    write_json(folder / JOB_FILE, asdict(job))


def read_job_record(folder: Path) -> Optional[JobRecord]:
    """The folder's ``slurm.json``, or None (missing or unreadable)."""
    return read_json_as(
        folder / JOB_FILE,
        lambda data: JobRecord(
            **{key: str(data[key]) for key in ("cluster", "job_id", "folder", "submitted")}, stdout=str(data.get("stdout") or "")
        ),
    )
