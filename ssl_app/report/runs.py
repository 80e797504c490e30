"""Finding run folders and reading what each holds.

A *run* is a folder holding a TensorBoard event file (a LightningCLI version directory), or a
``sweep.json`` written by the sweep tool (a failed run may have no events). Beside its events it
may hold ``config.yaml`` (the resolved LightningCLI config), ``sweep.json``
(``{"sweep", "point", "grid", "seed", "status", "log"}``) and a ``linear/`` subfolder with the
linear evaluation's own event file. Nothing here needs the trainer: runs made by hand read the same.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ssl_app.errors import ConfigError
from ssl_app.report.events import EventData, has_event_file, read_events

CONFIG_FILE = "config.yaml"
SWEEP_FILE = "sweep.json"
LINEAR_DIR = "linear"
DONE = "done"


@dataclass
class Run:
    """One run folder.

    ``status`` is the sweep's (``done``/``failed``/``running``) or ``done`` for a run made by
    hand; only a done run with events is averaged. ``problems`` lists what could not be read
    (each becomes a footnote).
    """

    path: Path
    name: str
    config: dict[str, Any] | None = None
    sweep: dict[str, Any] | None = None
    events: EventData | None = None
    linear: EventData | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        status = (self.sweep or {}).get("status", DONE)
        return status if isinstance(status, str) else str(status)

    @property
    def usable(self) -> bool:
        """Done and with events: its numbers go into the means."""
        return self.status == DONE and self.events is not None

    @property
    def seed(self) -> Any:
        if self.sweep and "seed" in self.sweep:
            return self.sweep["seed"]
        return (self.config or {}).get("seed_everything")


def find_run_dirs(root: Path) -> list[Path]:
    """Folders under ``root`` (itself included) holding an event file or ``sweep.json``, sorted.

    The walk does not descend into a run (its ``linear/`` and ``checkpoints/`` belong to it) nor
    into hidden folders.
    """
    found = []
    for directory, subdirs, files in os.walk(root):
        here = Path(directory)
        if SWEEP_FILE in files or has_event_file(here):
            found.append(here)
            subdirs[:] = []
        else:
            subdirs[:] = sorted(name for name in subdirs if not name.startswith("."))
    return sorted(found)


def load_runs(root: Path) -> list[Run]:
    """Every run under ``root``, read. Raises ``ConfigError`` when ``root`` is not a directory
    or holds no run."""
    if not root.exists():
        raise ConfigError(f"runs directory {str(root)!r} does not exist")
    if not root.is_dir():
        raise ConfigError(f"runs directory {str(root)!r} is not a directory")
    directories = find_run_dirs(root)
    if not directories:
        raise ConfigError(
            f"no runs under {str(root)!r}: no folder holds a TensorBoard event file (events.out.tfevents.*) or {SWEEP_FILE}"
        )
    return [read_run(directory, root) for directory in directories]


def read_run(directory: Path, root: Path) -> Run:
    """Read one run folder; anything unreadable is recorded in ``Run.problems``, never raised."""
    name = directory.relative_to(root).as_posix() if directory != root else directory.name
    run = Run(path=directory, name=name)
    run.sweep = _read_sidecar(directory / SWEEP_FILE, json.loads, run.problems)
    if run.sweep is not None and not isinstance(run.sweep, dict):
        run.problems.append(f"{SWEEP_FILE} is not a JSON object")
        run.sweep = None
    run.config = _read_sidecar(directory / CONFIG_FILE, yaml.safe_load, run.problems)
    if run.config is not None and not isinstance(run.config, dict):
        run.problems.append(f"{CONFIG_FILE} is not a mapping")
        run.config = None
    if run.config is None and not (directory / CONFIG_FILE).exists():
        run.problems.append(f"no {CONFIG_FILE}")
    if run.status != DONE:
        return run  # listed, not averaged: no need to read its events
    if has_event_file(directory):
        run.events = _read_events_safely(directory, run.problems)
    else:
        run.problems.append("no event file")
    linear_dirs = find_run_dirs(directory / LINEAR_DIR) if (directory / LINEAR_DIR).is_dir() else []
    if linear_dirs:
        run.linear = _read_events_safely(linear_dirs[-1], run.problems)
    return run


def _read_sidecar(path: Path, parse, problems: list[str]) -> Any:
    if not path.is_file():
        return None
    try:
        return parse(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as error:  # a broken sidecar is a footnote, not a crash
        problems.append(f"{path.name} unreadable ({type(error).__name__}: {error})".split("\n")[0])
        return None


def _read_events_safely(directory: Path, problems: list[str]) -> EventData | None:
    try:
        return read_events(directory)
    except Exception as error:  # noqa: BLE001 - the reader's errors vary; a corrupt event file is a footnote
        problems.append(f"event file in {directory.name!r} unreadable ({type(error).__name__}: {error})".split("\n")[0])
        return None
