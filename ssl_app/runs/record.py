"""The run record: ``run.json`` in every run folder, the one place a run's status is kept.

Every process that trains or evaluates (``fit``, ``validate``, ``test``, a linear probe) writes
one through :func:`start_record` when it starts and :func:`finish_record` when it ends, atomically,
from every path out (finished, exception, signal, non-finite values). The sweep and the report
read it and trust nothing else: a run is a result only when its record says ``done``.

Statuses: ``running`` (being written, or its process died without a word: see
:func:`effective_status`), ``done``, ``failed`` (an exception), ``interrupted`` (SIGINT/SIGTERM;
resumable), ``diverged`` (non-finite values; the last good checkpoint is kept). A folder made by
an older version has no record: its status is ``unknown``, and the report does not average it.

Fields (``RunRecord``): what ran (``kind``, ``config``, ``config_hash``, ``identity``, ``data``),
where it came from (``parent`` for an evaluation or a probe of another run, ``checkpoint`` it
started from, ``resumes``), how it ended (``status``, ``exit_reason``, ``epoch``, ``step``,
``ended``, ``results``: the final logged scalars, ``collapse``), and which code made it
(``version``, ``git_commit``), with ``host`` and ``pid`` of the last writer.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ssl_app.io.atomic import write_json
from ssl_app.io.lock import RUN_LOCK, is_locked
from ssl_app.runs.identity import config_hash, identity

RECORD_FILE = "run.json"
SCHEMA = 1

RUNNING, DONE, FAILED, INTERRUPTED, DIVERGED = "running", "done", "failed", "interrupted", "diverged"
FINAL_STATUSES = (DONE, FAILED, INTERRUPTED, DIVERGED)
#: What the report calls a folder without a record (an older version made it).
UNKNOWN = "unknown"
#: A ``running`` record whose writer is gone (its lock is free): killed without a word.
VANISHED = "vanished"

KINDS = ("fit", "validate", "test", "linear")


class RecordError(ValueError):
    """``run.json`` exists but cannot be read as a run record (the message says why)."""


@dataclass
class RunRecord:
    """One run's record (module docstring). ``kind``: fit, validate, test or linear."""

    kind: str
    status: str = RUNNING
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: str = ""
    ended: Optional[str] = None
    exit_reason: Optional[str] = None
    config: dict[str, Any] = field(default_factory=dict)
    config_hash: str = ""
    identity: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    parent: Optional[str] = None
    checkpoint: Optional[str] = None
    resumes: list[dict[str, Any]] = field(default_factory=list)
    epoch: Optional[int] = None
    step: Optional[int] = None
    results: dict[str, float] = field(default_factory=dict)
    collapse: Optional[dict[str, Any]] = None
    version: str = ""
    git_commit: Optional[str] = None
    host: str = ""
    pid: Optional[int] = None
    schema: int = SCHEMA

    @property
    def finished(self) -> bool:
        """Whether the run ended and produced its results (``done``)."""
        return self.status == DONE

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """A record from its JSON; unknown keys (a newer version's) are ignored, missing ones defaulted."""
        if not isinstance(data, dict):
            raise RecordError("not a JSON object")
        if not all(isinstance(data.get(key), str) for key in ("kind", "status")):
            raise RecordError("no 'kind' or 'status'")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})


def now() -> str:
    """The current time as an ISO 8601 string with the UTC offset."""
    return datetime.datetime.now(datetime.timezone.utc).astimezone().isoformat(timespec="seconds")


def record_path(folder: str | os.PathLike[str]) -> Path:
    return Path(folder) / RECORD_FILE


def read_record(folder: str | os.PathLike[str]) -> Optional[RunRecord]:
    """The record of ``folder``; ``None`` if it has none; ``RecordError`` if it is unreadable."""
    path = record_path(folder)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise RecordError(f"{path} is unreadable ({type(error).__name__}: {error})".split("\n")[0]) from None
    try:
        return RunRecord.from_dict(data)
    except (RecordError, TypeError) as error:
        raise RecordError(f"{path} is not a run record ({error})") from None


def write_record(folder: str | os.PathLike[str], record: RunRecord) -> None:
    """Write ``record`` into ``folder`` atomically (a reader sees the old or the new one)."""
    record.host, record.pid = socket.gethostname(), os.getpid()
    write_json(record_path(folder), record.to_dict())


def start_record(
    folder: str | os.PathLike[str],
    kind: str,
    config: dict[str, Any],
    *,
    parent: Optional[str] = None,
    checkpoint: Optional[str] = None,
    resume_changes: Optional[dict[str, Any]] = None,
    run_id: Optional[str] = None,
) -> RunRecord:
    """Write the ``running`` record of a process starting in ``folder``; return it.

    A fit resumed into its own folder continues that folder's record: same ``run_id`` and start
    time, one more entry in ``resumes`` (the checkpoint, the time and ``resume_changes``, the
    options that differ from the checkpoint's run). ``run_id``: the id the checkpoint carries, if
    any (kept when the folder has no record yet).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    try:
        previous = read_record(folder)
    except RecordError:
        previous = None  # an unreadable record is replaced, not trusted
    record = RunRecord(kind=kind, started=now())
    if run_id:
        record.run_id = run_id
    same_run = previous is not None and (run_id is None or previous.run_id == run_id)
    if same_run and previous.kind == kind and checkpoint is not None and kind in ("fit", "linear"):
        record.run_id, record.started, record.resumes = previous.run_id, previous.started, list(previous.resumes)
        record.collapse = previous.collapse
        record.resumes.append({"at": now(), "checkpoint": checkpoint, "changed": resume_changes or {}})
    record.config = config
    record.config_hash = config_hash(config)
    record.identity = identity(config)
    record.parent, record.checkpoint = parent, checkpoint
    record.version, record.git_commit = package_version(), git_commit()
    write_record(folder, record)
    return record


def finish_record(
    folder: str | os.PathLike[str],
    record: RunRecord,
    status: str,
    reason: str,
    *,
    epoch: Optional[int] = None,
    step: Optional[int] = None,
    results: Optional[dict[str, float]] = None,
    collapse: Optional[dict[str, Any]] = None,
) -> RunRecord:
    """Write the final state of ``record``: ``status`` (one of ``FINAL_STATUSES``) and why."""
    if status not in FINAL_STATUSES:
        raise ValueError(f"status must be one of {FINAL_STATUSES}, got {status!r}")
    record.status, record.exit_reason, record.ended = status, reason, now()
    if epoch is not None:
        record.epoch = epoch
    if step is not None:
        record.step = step
    if results:
        record.results = dict(results)
    if collapse is not None:
        record.collapse = collapse
    write_record(folder, record)
    return record


def effective_status(folder: str | os.PathLike[str], record: Optional[RunRecord]) -> str:
    """The status to believe: the record's, except a ``running`` one whose folder nobody holds is
    ``vanished`` (its process was killed without a word); ``unknown`` without a record."""
    if record is None:
        return UNKNOWN
    if record.status == RUNNING and not is_locked(folder, RUN_LOCK):
        return VANISHED
    return record.status


def package_version() -> str:
    from ssl_app import __version__

    return __version__


_GIT_COMMIT: Optional[tuple[Optional[str]]] = None


def git_commit() -> Optional[str]:
    """The commit of the checkout this package runs from (``+dirty`` with local changes); ``None``
    when it is not a git checkout (an installed wheel) or git is missing. Asked once per process."""
    global _GIT_COMMIT
    if _GIT_COMMIT is None:
        _GIT_COMMIT = (_ask_git(),)
    return _GIT_COMMIT[0]


def _ask_git() -> Optional[str]:
    source = Path(__file__).resolve().parents[2]
    if not (source / ".git").exists():
        return None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=source, capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}+dirty" if dirty else commit or None
