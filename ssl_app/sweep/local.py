"""The local launcher: every run's pending stages as child processes on this machine, ``--jobs`` at a
time, each pinned to the least busy GPU; a run's folder is held (``.sweep.lock``) while its stages run,
so a second sweep into the same ``--out`` skips it. Each stage that finishes prints one line with the
run's headline numbers so far (``ssl_app.report.overview``). SIGINT/SIGTERM stop the running fits, which save
their ``last.ckpt``; the same command resumes them."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ssl_app.io.lock import RUN_LOCK, SWEEP_LOCK, RunLock, is_locked
from ssl_app.signals import handling
from ssl_app.sweep.stages import PlannedRun, launch, note_exit, prepare_stage, stage_done


@dataclass
class Outcome:
    """What ``execute`` did: runs that failed (with the stage), runs held by another process, and
    the signal that stopped the sweep (None: it ran to the end)."""

    failed: list[tuple[PlannedRun, str]]
    held: list[PlannedRun]
    stopped_by: Optional[int] = None


class Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGINT/SIGTERM raise ``Stopped`` in the sweep's loop (main thread only), previous handlers restored after."""

    def handler(signum: int, frame: object) -> None:
        raise Stopped(signum)

    with handling(handler):
        yield


def execute(runs: list[PlannedRun], jobs: int) -> Outcome:
    """Run every pending stage, ``jobs`` at a time; hold each run's folder while its stages run."""
    devices = _gpu_count()
    pending = [run for run in runs if run.stages()]
    active: dict[int, tuple[PlannedRun, str, subprocess.Popen, Optional[int]]] = {}
    locks: dict[Path, RunLock] = {}
    outcome = Outcome(failed=[], held=[])
    # jobs per GPU: a job takes the least busy one, so more jobs than GPUs share them evenly and every
    # job is pinned (an unpinned one would see every GPU and use the first)
    load = Counter({device: 0 for device in range(devices)})
    try:
        with _stop_on_signals():
            while pending or active:
                while pending and len(active) < jobs:
                    run = pending.pop(0)
                    if not _hold(run, locks, outcome):
                        continue
                    stages = run.stages()
                    if not stages:  # another sweep finished it meanwhile
                        locks.pop(run.directory).release()
                        continue
                    stage, args = stages[0]
                    log = prepare_stage(run, stage, args)
                    device = min(load, key=load.__getitem__) if load else None
                    if device is not None:
                        load[device] += 1
                    print(f"[sweep] start {run.label}: {stage}", flush=True)
                    process = launch(args, log, device)
                    active[process.pid] = (run, stage, process, device)
                time.sleep(0.2)
                for pid, (run, stage, process, device) in list(active.items()):
                    if process.poll() is None:
                        continue
                    del active[pid]
                    if device is not None:
                        load[device] -= 1
                    note_exit(run, stage, process.returncode)
                    ok = stage_done(run, stage)
                    numbers = _headline(run) if ok else ""
                    print(f"[sweep] {'done' if ok else 'FAILED'} {run.label}: {stage}{numbers}", flush=True)
                    if not ok:
                        outcome.failed.append((run, stage))
                        locks.pop(run.directory).release()
                    elif run.stages():
                        pending.insert(0, run)  # its linear evaluation next, still held
                    else:
                        locks.pop(run.directory).release()
    except Stopped as stop:
        outcome.stopped_by = stop.signum
        _stop_children(active)
    finally:
        for lock in locks.values():
            lock.release()
    return outcome


def _headline(run: PlannedRun) -> str:
    """`` — kNN (%) 52.00, uniformity 3.610, …``: the run's headline numbers so far, read as the report reads them."""
    from ssl_app.report.overview import run_numbers  # the event reader: only once a stage has finished

    numbers = run_numbers(run.directory)
    return f" — {numbers}" if numbers else ""


def _hold(run: PlannedRun, locks: dict[Path, RunLock], outcome: Outcome) -> bool:
    """Take the run's sweep lock (kept from its previous stage); a run held by another sweep or written by
    another process is skipped."""
    if run.directory in locks:
        return True
    lock = RunLock(run.directory, SWEEP_LOCK)
    if is_locked(run.directory, RUN_LOCK) or not lock.acquire():
        holder = lock.holder() if not is_locked(run.directory, RUN_LOCK) else RunLock(run.directory).holder()
        print(f"[sweep] skip {run.label}: {run.directory} is held by {holder}", flush=True)
        outcome.held.append(run)
        return False
    locks[run.directory] = lock
    return True


def _stop_children(active: dict[int, tuple[PlannedRun, str, subprocess.Popen, Optional[int]]]) -> None:
    """SIGTERM to every running fit (each saves ``last.ckpt`` after its current step), then wait for
    them; a second signal kills them at once. SIGTERM, not SIGINT: a fit that already got the
    terminal's Ctrl-C would read a second SIGINT as "quit without a checkpoint"."""
    processes = [process for _, _, process, _ in active.values()]
    print(f"[sweep] stopping {len(processes)} running job(s); each saves its last.ckpt (again to kill them now)", flush=True)
    for process in processes:
        with contextlib.suppress(OSError):
            process.send_signal(signal.SIGTERM)
    try:
        with _stop_on_signals():
            for process in processes:
                process.wait()
    except Stopped:
        for process in processes:
            with contextlib.suppress(OSError):
                process.kill()
        for process in processes:
            process.wait()


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no usable CUDA means CPU jobs
        return 0
