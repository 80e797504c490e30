"""``python -m ssl_app.sweep --launcher slurm``: the sweep's runs as one SLURM job array, through submitit.

Each array task is one run folder (one grid point and seed). The task runs :class:`PointJob`: it
holds the folder's sweep lock and runs what the run still needs (``fit``, resumed from its
``last.ckpt`` if it has one, then ``linear``), each stage a ``python -m ssl_app`` child process
writing ``<stage>.log`` in the run folder, started and judged as the local launcher's are
(``ssl_app.sweep.stages``: one way to run a stage). A folder another
process writes (its run lock held: a fit started by hand) is not launched into: the task fails, naming it.

One signal path. Before the time limit (and on pre-emption) SLURM signals every process of the job
step (``--signal=USR2@90``: the task, the fit and its data workers). The fit stops on it after its
step, as on SIGTERM (``ssl_app.checkpointing.InterruptCheckpoint``: ``last.ckpt``, recorded
``interrupted``; its data workers leave the signal to it, ``ssl_app.workers``). submitit catches it in
the task and calls :meth:`PointJob.checkpoint`, which sends the fit SIGTERM too (for a signal that
reached the task alone) and waits for it to exit. Then submitit requeues the task, and the requeued
task runs the same entry, which resumes the fit from that checkpoint in the same folder. A job that
warns with the other signal (``--signal=USR1@N``) is checkpointed and requeued the same way.
Lightning's SLURM auto-requeue (SIGUSR1, an ``hpc_ckpt_<n>.ckpt`` in the Trainer's root folder,
resumed without the project's checks) is turned off in every fit (``InterruptCheckpoint.setup``),
and a sweep's fits do not treat the job as an ``srun`` launch (:func:`child_environment`).

The submitting process writes ``slurm.json`` (``ssl_app.runs.layout.JobRecord``) into each run
folder; ``--status`` reads it beside the run record. ``--slurm.cluster local`` runs the same array
with submitit's local executor (processes on this machine): the tests use it, and it is a way to
try a grid before sending it to a cluster.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ssl_app.errors import ConfigError
from ssl_app.io.lock import RUN_LOCK, SWEEP_LOCK, RunLock, is_locked
from ssl_app.runs.layout import JobRecord, read_job_record, write_job_record
from ssl_app.runs.record import now
from ssl_app.signals import WARNING_SIGNALS
from ssl_app.sweep.stages import PlannedRun, launch, note_exit, prepare_stage, stage_done, why_failed

#: Seconds a fit gets, after the SIGTERM, to finish its step and write ``last.ckpt`` before the task is requeued.
STOP_GRACE_S = 80
#: Scheduler states in which a submitted job will still run (or is running): such a run is not submitted again.
LIVE_STATES = ("PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "CONFIGURING", "COMPLETING")


@dataclass
class SlurmOptions:
    """The ``--slurm.*`` options: where and how long each run's job runs."""

    partition: Optional[str] = None
    time_min: int = 240
    gpus_per_run: int = 1
    cpus_per_run: Optional[int] = None
    account: Optional[str] = None
    sbatch: dict[str, str] = field(default_factory=dict)
    cluster: str = "slurm"
    parallel: Optional[int] = None

    def parameters(self, name: str) -> dict[str, Any]:
        """``executor.update_parameters`` keywords (submitit's shared names, ``slurm_*`` for the rest)."""
        params: dict[str, Any] = {
            "name": name,
            "timeout_min": self.time_min,
            "gpus_per_node": self.gpus_per_run,
            "tasks_per_node": 1,
            "nodes": 1,
            "slurm_additional_parameters": dict(self.sbatch),
        }
        if self.cpus_per_run is not None:
            params["cpus_per_task"] = self.cpus_per_run
        if self.partition:
            params["slurm_partition"] = self.partition
        if self.account:
            params["slurm_account"] = self.account
        if self.parallel:
            params["slurm_array_parallelism"] = self.parallel
        return params


def child_environment() -> dict[str, str]:
    """The environment of a sweep job's fits: the job's, marked as not an ``srun`` launch.

    A fit started by the job is a single-node run Lightning must launch itself (one process, or its
    own DDP processes for ``--trainer.devices=2``); seeing the job's ``SLURM_NTASKS`` it would take
    the job for an ``srun`` launch of its ranks. ``SLURM_JOB_NAME=interactive`` is Lightning's
    documented way out of its SLURM detection (``SLURMEnvironment.detect``).
    """
    env = dict(os.environ)
    if "SLURM_JOB_ID" in env:
        env["SLURM_JOB_NAME"] = "interactive"
    return env


class PointJob:
    """One run folder's stages, as a submitit job: callable, and checkpointable on pre-emption/timeout.

    submitit calls :meth:`checkpoint` from its signal handler and resubmits what it returns; a
    requeued task calls the same ``PointJob`` again, which continues from the run's own record.
    """

    def __init__(self, run: PlannedRun) -> None:
        self.run = run
        self._process: Any = None

    def __call__(self) -> str:
        run = self.run
        lock = RunLock(run.directory, SWEEP_LOCK)
        run.directory.mkdir(parents=True, exist_ok=True)
        if not lock.acquire():
            raise RuntimeError(f"{run.label}: {run.directory} is held by {lock.holder()}")
        if is_locked(run.directory, RUN_LOCK):  # a process writing the run itself (a fit started by hand)
            lock.release()
            raise RuntimeError(f"{run.label}: {run.directory} is held by {RunLock(run.directory).holder()}")
        previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, *WARNING_SIGNALS)}
        # SLURM's own SIGTERM (scancel, the end of the time limit) reaches this task: pass it on, so the fit saves.
        signal.signal(signal.SIGTERM, lambda signum, frame: self._stop_fit())
        # SLURM's warning (--signal=USR1@N, USR2@N) reaches every process of the job step, the fit included (which
        # stops on it with its checkpoint): submitit checkpoints and requeues on the signal it asked for, and on
        # the other one too, so a job that warns with USR1 is requeued in place as well.
        requeue = next((previous[signum] for signum in WARNING_SIGNALS if callable(previous[signum])), None)
        for signum in WARNING_SIGNALS:
            if requeue is not None and not callable(previous[signum]):
                signal.signal(signum, requeue)
        try:
            while True:
                stages = run.stages()
                if not stages:
                    return "done"
                stage, args = stages[0]
                log = prepare_stage(run, stage, args)
                print(f"[sweep] start {run.label}: {stage}", flush=True)
                self._process = launch(args, log, None, env=child_environment())
                while self._process.poll() is None:
                    time.sleep(0.5)
                note_exit(run, stage, self._process.returncode)
                if not stage_done(run, stage):
                    raise RuntimeError(f"{run.label} ({stage}): {why_failed(run, stage)}; log: {log}")
                print(f"[sweep] done {run.label}: {stage}", flush=True)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            lock.release()

    def _stop_fit(self) -> None:
        """SIGTERM to the running stage (the project's checkpoint-and-stop), then wait for it to exit."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(OSError):
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            # os.waitpid, not Popen.wait: this runs in a signal handler that may have interrupted a poll()
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(process.pid, os.WNOHANG)
                if pid == 0:
                    time.sleep(0.2)
                    continue
            return
        print(f"[sweep] {self.run.label}: the fit did not stop within {STOP_GRACE_S} s", file=sys.stderr, flush=True)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on pre-emption or timeout: stop the fit with its checkpoint; requeue this run."""
        import submitit

        print(f"[sweep] {self.run.label}: pre-empted or out of time; saving and requeueing", flush=True)
        self._stop_fit()
        return submitit.helpers.DelayedSubmission(PointJob(self.run))


def executor(folder: Path, options: SlurmOptions, name: str) -> Any:
    """submitit's executor writing into ``folder`` itself: its files are named by job id already, and a
    ``%j`` in the folder would be created literally (an empty ``.slurm/%j``) by its local executor."""
    import submitit

    try:
        ex = submitit.AutoExecutor(folder=folder, cluster=options.cluster)
    except RuntimeError as error:  # no srun/sbatch on this machine
        raise ConfigError(f"--launcher slurm: {error} (--slurm.cluster local runs the array on this machine)") from None
    ex.update_parameters(**options.parameters(name))
    return ex


def submit(runs: list[PlannedRun], options: SlurmOptions, sweep_dir: Path) -> list[tuple[Any, str]]:
    """Submit one array task per run that still needs work and has no live job; write each ``slurm.json``.

    Returns ``(run, job id)`` for the submitted runs.
    """
    folder = sweep_dir / ".slurm"
    todo = []
    for run in runs:
        state = job_state(run.directory)
        if state in LIVE_STATES:
            print(f"[sweep] skip {run.label}: job {read_job_record(run.directory).job_id} is {state}", flush=True)
            continue
        todo.append(run)
    if not todo:
        return []
    created = _outermost_missing(folder)
    try:
        ex = executor(folder, options, f"ssl_app-{sweep_dir.name}")
        # submitit prints a refusing sbatch's stderr itself before raising it: said once, in the error line
        with contextlib.redirect_stderr(io.StringIO()), ex.batch():
            jobs = [ex.submit(PointJob(run)) for run in todo]
    except Exception as error:  # sbatch refused the array: what this call wrote goes, the reason is one line
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        if isinstance(error, ConfigError):
            raise
        reason = str(error).strip().splitlines()
        raise ConfigError(f"--launcher slurm: {reason[-1] if reason else type(error).__name__}") from None
    submitted = []
    for run, job in zip(todo, jobs):
        run.directory.mkdir(parents=True, exist_ok=True)
        record = JobRecord(
            cluster=options.cluster, job_id=str(job.job_id), folder=str(folder), submitted=now(), stdout=str(job.paths.stdout)
        )
        write_job_record(run.directory, record)
        submitted.append((run, str(job.job_id)))
    return submitted


def _outermost_missing(folder: Path) -> Optional[Path]:
    """The outermost folder that creating ``folder`` would create (None: it exists)."""
    if folder.exists():
        return None
    while not folder.parent.exists():
        folder = folder.parent
    return folder


def job_state(directory: Path) -> Optional[str]:
    """The scheduler's state of the run's job (``PENDING``, ``RUNNING``, ``COMPLETED``, ...); None when
    there is no ``slurm.json`` or the scheduler cannot be asked (a local job from another process)."""
    record = read_job_record(directory)
    if record is None or record.cluster != "slurm":
        return None
    try:
        import submitit

        state = submitit.SlurmJob(folder=record.folder, job_id=record.job_id).state
    except Exception:  # noqa: BLE001 - no sacct here, or the scheduler forgot the job: not known
        return None
    return None if state in ("UNKNOWN", "", None) else str(state).split()[0]


def status_lines(runs: list[PlannedRun]) -> list[str]:
    """One line per run: name, the run record's status (and the scheduler's state), the job id."""
    lines = []
    width = max((len(run.label) for run in runs), default=0)
    for run in runs:
        exits = run.exits()
        status = run.fit_status(exits)
        if run.linear_args is not None and status == "done":
            status = "done, probed" if run.probe_done(exits) else "done, not probed"
        record = read_job_record(run.directory)
        state = job_state(run.directory)
        job = f"job {record.job_id}" if record is not None else "no job"
        lines.append(f"{run.label:<{width}}  {status}{f' (slurm: {state})' if state else ''}  {job}")
    return lines
