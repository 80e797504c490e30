"""What both launchers share: a planned run, its stages, starting one, and when one is done.

A run (one grid point, one seed) is a folder; what it still needs is read from that folder each time
it is asked (:meth:`PlannedRun.stages`): ``fit`` unless its record says ``done`` (resumed from its
``last.ckpt`` when there is one), then ``linear`` unless a probe of it is done. Each stage is a
``python -m ssl_app`` child process writing ``<run>/<stage>.log``; its exit status is kept in
``sweep.json`` (:func:`note_exit`), and a stage is done when its record says so and it exited 0.
The local launcher (``ssl_app.sweep.local``) and a SLURM array task (``ssl_app.sweep.slurm.PointJob``)
run stages the same way, through these functions.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ssl_app.runs.layout import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    EVENTS_GLOB,
    SweepPoint,
    evaluation_folders,
    newest_done_evaluation,
    read_sweep_point,
    write_sweep_point,
)
from ssl_app.runs.record import DONE, RECORD_FILE, RecordError, effective_status, read_record


@dataclass
class PlannedRun:
    """One grid point with one seed: where it lives and the command line of each stage."""

    sweep: str
    point: str
    grid: dict[str, str]
    seed: int
    directory: Path
    fit_args: list[str]
    linear_args: Optional[list[str]] = None

    @property
    def checkpoint(self) -> Path:
        return self.directory / CHECKPOINTS_DIR / "last.ckpt"

    @property
    def label(self) -> str:
        return f"{self.point} seed {self.seed}"

    def exits(self) -> dict[str, int]:
        """Each stage's last exit status, as the sweep noted it in ``sweep.json`` (a stage not in it: not known)."""
        point = read_sweep_point(self.directory)
        return dict(point.exits) if point is not None else {}

    def exit_status(self, stage: str) -> Optional[int]:
        """The stage's last exit status (None: not known)."""
        return self.exits().get(stage)

    def fit_status(self, exits: Optional[dict[str, int]] = None) -> str:
        """The fit's status as its record says (``vanished`` when its process died without a word), unless
        its process exited non-zero after recording ``done``: then both must agree, and it is failed.
        ``exits``: :meth:`exits`, when the caller read them already."""
        try:
            status = effective_status(self.directory, read_record(self.directory))
        except RecordError:
            return "unreadable record"
        code = (self.exits() if exits is None else exits).get("fit")
        return f"failed (exit status {code})" if status == DONE and code else status

    def probe_done(self, exits: Optional[dict[str, int]] = None) -> bool:
        """Whether a linear probe of this run finished (the newest done one is what the report reads:
        ``newest_done_evaluation``) and the last one's process did not exit non-zero."""
        if (self.exits() if exits is None else exits).get("linear"):
            return False
        return newest_done_evaluation(self.directory, "linear") is not None

    def stages(self) -> list[tuple[str, list[str]]]:
        """What the run still needs: ``fit`` (resumed if it has a checkpoint) and/or ``linear``."""
        todo = []
        exits = self.exits()  # read once for both stages
        if self.fit_status(exits) != DONE:
            args = self.fit_args
            if self.checkpoint.is_file():
                args = [*args, f"--ckpt_path={self.checkpoint}"]
            todo.append(("fit", args))
        if self.linear_args is not None and not self.probe_done(exits):
            todo.append(("linear", self.linear_args))
        return todo

    def sidecar(self) -> SweepPoint:
        return SweepPoint(sweep=self.sweep, point=self.point, grid=self.grid, seed=self.seed, probed=self.linear_args is not None)


def launch(args: list[str], log: Path, device: Optional[int], env: Optional[dict[str, str]] = None) -> subprocess.Popen:
    """Start ``python -m ssl_app ARGS`` writing into ``log`` (``device``: the one GPU it may see)."""
    env = dict(os.environ if env is None else env)
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device)
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = log.open("a")
    handle.write(f"$ {shlex.join([sys.executable, '-m', 'ssl_app', *args])}\n")
    handle.flush()
    process = subprocess.Popen([sys.executable, "-m", "ssl_app", *args], stdout=handle, stderr=subprocess.STDOUT, env=env)
    handle.close()
    return process


def clear_attempt(directory: Path) -> None:
    """Remove what a previous attempt of a fit left without a checkpoint (its record, config, events,
    empty checkpoint folder), so a fresh start does not mix into it; logs and ``sweep.json`` stay."""
    for name in (RECORD_FILE, CONFIG_FILE, "hparams.yaml"):
        (directory / name).unlink(missing_ok=True)
    for events in directory.glob(EVENTS_GLOB):
        events.unlink()
    checkpoints = directory / CHECKPOINTS_DIR
    if checkpoints.is_dir() and not any(checkpoints.glob("*.ckpt")):
        shutil.rmtree(checkpoints, ignore_errors=True)


def prepare_stage(run: PlannedRun, stage: str, args: list[str]) -> Path:
    """Before a stage starts: a fresh fit clears what a failed attempt left; ``sweep.json`` gets the
    stage's command and log. Returns the log's path (``<run>/<stage>.log``)."""
    if stage == "fit" and not run.checkpoint.is_file():
        clear_attempt(run.directory)
    log = run.directory / f"{stage}.log"
    point = run.sidecar()
    existing = read_sweep_point(run.directory)
    point.commands = {**(existing.commands if existing else {}), stage: shlex.join(["python", "-m", "ssl_app", *args])}
    point.logs = {**(existing.logs if existing else {}), stage: str(log)}
    point.exits = {k: v for k, v in (existing.exits if existing else {}).items() if k != stage}  # running: not known
    write_sweep_point(run.directory, point)
    return log


def note_exit(run: PlannedRun, stage: str, code: Optional[int]) -> None:
    """Keep the stage's exit status in ``sweep.json``: with the run's record, it says whether the stage is done."""
    point = read_sweep_point(run.directory) or run.sidecar()
    point.exits = {**point.exits, stage: int(code if code is not None else 1)}
    write_sweep_point(run.directory, point)


def stage_done(run: PlannedRun, stage: str) -> bool:
    """Whether the stage that just ended is done: its record says so and its process exited 0 (``note_exit``)."""
    return run.fit_status() == DONE if stage == "fit" else run.probe_done()


def why_failed(run: PlannedRun, stage: str) -> str:
    """The failed stage's exit reason from its record, or its status when the record says none."""
    folders = [run.directory] if stage == "fit" else evaluation_folders(run.directory, "linear")[-1:]
    for folder in folders:
        try:
            record = read_record(folder)
        except RecordError as error:
            return str(error)
        if record is not None:
            status = effective_status(folder, record)
            code = run.exit_status(stage)
            if status == DONE and code:
                return f"exit status {code} (its record says done: {record.exit_reason})"
            return f"{status}: {record.exit_reason}" if record.exit_reason else status
    return "no run record (it failed before it started)"
