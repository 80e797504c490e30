"""``python -m ssl_app.sweep``: one ``fit`` (and optionally one linear evaluation) per grid point and seed.

    python -m ssl_app.sweep --config configs/quickstart.yaml \\
        --grid model.init_args.loss.init_args.temperature=0.07,0.3,0.7,1.0 --seeds 0,1 \\
        [--linear configs/linear.yaml] [--linear-args "--model.init_args.cache_features=flips"] \\
        [--name tau] [--out runs/sweeps] [--jobs 2] [--launcher slurm --slurm.partition gpu] [--status] [--dry-run] \\
        [-- extra fit args]
    python -m ssl_app.sweep --status OUT/NAME
    python -m ssl_app.sweep --plan table1 --data cifar10 [--seeds 0,1,2] [--data-root DIR] [--estimate] [--dry-run] \\
        [-- extra fit args]

Every point × seed is a run folder ``OUT/NAME/<point>/seed<k>/`` (the fit's run folder:
``run.json``, ``config.yaml``, ``checkpoints/``, events, the console output ``fit.log``, and
``sweep.json``: which point and seed it is and the commands). A linear evaluation is filed in
the run it evaluates, ``<run>/evaluations/linear_<n>/`` (``ssl_app.runs.layout``).
``python -m ssl_app.report OUT/NAME`` reads the folders.

- ``--out`` is checked first, then every point is parsed (``--print_config``) before anything
  runs: a grid key that does not exist, a value of the wrong type or an unwritable ``--out`` is
  one ``error:`` line and nothing starts.
- Point names are the grid values' short forms (``loss=InfoNCE``); points whose short forms
  would coincide (``ssl_app.losses.InfoNCE`` and ``mylosses.InfoNCE``) get a hash of their
  full values appended, so two points never share a folder.
- What a run still needs is read from the run records (``ssl_app.runs.record``), which the runs
  write themselves: a re-run skips runs whose record says ``done``, resumes the others from their
  ``last.ckpt`` and starts the rest afresh; a failed run does not stop the others and is listed at
  the end with its exit reason and log. The exit status is 1 if any run failed. A stage's exit
  status is kept in ``sweep.json``: one that exited non-zero is failed, whatever its record says.
- A sweep holds each run folder (``.sweep.lock``) while it runs its stages: a second sweep started
  into the same ``--out`` skips those runs and says so, so two sweeps share the work instead of
  training one run twice.
- Ctrl-C (or SIGTERM) stops the running fits, which save their ``last.ckpt``; the same command
  resumes them.
- ``--jobs N`` runs N at once; with GPUs each job is pinned to one (``CUDA_VISIBLE_DEVICES``), the least
  busy, so N above the number of GPUs shares them evenly.
- ``--launcher slurm`` submits the runs as one SLURM job array instead (``ssl_app.sweep.slurm``), each
  task running the same stages; ``--status`` prints each run's state and job. A launch writes its
  runs into ``OUT/NAME/sweep_plan.json`` (merged with earlier launches'), so ``--status OUT/NAME``
  alone prints the same lines without the original command.
- ``--linear-args`` are options for the linear evaluations only; after ``--``, options for the fits.
- ``--plan table1 --data D`` (``ssl_app.sweep.plans``) stands for ``--config`` (D's recipe), one point per
  Table-1 column (its loss overlay) and ``--linear`` (D's linear evaluation), in ``OUT/table1_D/``;
  ``--data-root DIR`` gives the data's folder to every fit and every linear evaluation (each
  stage's config keeps it under its own key); ``--estimate`` times a few training steps of the
  plan's model on this machine and prints the plan's expected device-hours, running nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ssl_app.quiet import known_noise_silenced
from ssl_app.runs.atomic import write_json
from ssl_app.runs.layout import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    EVENTS_GLOB,
    SWEEP_FILE,
    SweepPoint,
    evaluation_folders,
    read_sweep_point,
    write_sweep_point,
)
from ssl_app.runs.lock import RUN_LOCK, SWEEP_LOCK, RunLock, is_locked
from ssl_app.runs.record import DONE, RECORD_FILE, RecordError, effective_status, read_record
from ssl_app.signals import handling
from ssl_app.sweep.plans import DATA_SETS, PLANS, plan_points, recipe_paths, root_options

#: The sweep's runs, written into its folder at launch: what ``--status DIR`` reads.
PLAN_FILE = "sweep_plan.json"
#: Exit status of a sweep stopped by a signal: 128 + the signal, as the fits it stopped.
_STOPPED = {signal.SIGINT: 130, signal.SIGTERM: 143}


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

    def fit_status(self) -> str:
        """The fit's status as its record says (``vanished`` when its process died without a word), unless
        its process exited non-zero after recording ``done``: then both must agree, and it is failed."""
        try:
            status = effective_status(self.directory, read_record(self.directory))
        except RecordError:
            return "unreadable record"
        code = self.exit_status("fit")
        return f"failed (exit status {code})" if status == DONE and code else status

    def exit_status(self, stage: str) -> Optional[int]:
        """The stage's last exit status, as the sweep noted it in ``sweep.json`` (None: not known)."""
        point = read_sweep_point(self.directory)
        return point.exits.get(stage) if point is not None else None

    def probe_done(self) -> bool:
        """Whether a linear probe of this run finished (any of them: the report reads the newest done one)
        and the last one's process did not exit non-zero."""
        if self.exit_status("linear"):
            return False
        for folder in evaluation_folders(self.directory, "linear"):
            try:
                record = read_record(folder)
            except RecordError:
                continue
            if record is not None and record.status == DONE:
                return True
        return False

    def stages(self) -> list[tuple[str, list[str]]]:
        """What the run still needs: ``fit`` (resumed if it has a checkpoint) and/or ``linear``."""
        todo = []
        if self.fit_status() != DONE:
            args = self.fit_args
            if self.checkpoint.is_file():
                args = [*args, f"--ckpt_path={self.checkpoint}"]
            todo.append(("fit", args))
        if self.linear_args is not None and not self.probe_done():
            todo.append(("linear", self.linear_args))
        return todo

    def sidecar(self) -> SweepPoint:
        return SweepPoint(sweep=self.sweep, point=self.point, grid=self.grid, seed=self.seed)


def parse_grid(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``["a.b=1,2", "c=x"]`` → ``[("a.b", ["1", "2"]), ("c", ["x"])]``; bad specs are ``SystemExit(2)``."""
    grid = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or not items:
            fail(f"--grid must be KEY=V1,V2,..., got {spec!r}")
        grid.append((key.strip().lstrip("-"), items))
    keys = [k for k, _ in grid]
    if len(set(keys)) != len(keys):
        fail(f"--grid names a key twice: {keys}")
    return grid


def point_name(values: dict[str, str]) -> str:
    """A folder name from the point's values: the last part of each key, ``=`` its value's short form
    (the last part of a class path). Not unique on its own: see :func:`point_names`."""
    if not values:
        return "base"
    parts = []
    for key, value in values.items():
        short_value = value.rsplit(".", 1)[-1] if re.fullmatch(r"[A-Za-z_][\w.]*\.[A-Za-z_]\w*", value) else value
        parts.append(f"{key.rsplit('.', 1)[-1]}={short_value}")
    return re.sub(r"[^\w.,=+-]", "_", ",".join(parts))


def point_names(points: list[dict[str, str]]) -> list[str]:
    """One folder name per point, unique: :func:`point_name`, plus ``-<hash of the full values>``
    for the points whose short names coincide (names compared as a case-insensitive filesystem would)."""
    short = [point_name(values) for values in points]
    counts = Counter(name.lower() for name in short)
    names = []
    for name, values in zip(short, points):
        if counts[name.lower()] > 1:
            digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:8]
            name = f"{name}-{digest}"
        names.append(name)
    return names


def plan(
    configs: list[str],
    grid: list[tuple[str, list[str]]],
    seeds: list[int],
    sweep_dir: Path,
    extra: list[str],
    linear_config: Optional[str],
    linear_extra: Sequence[str] = (),
) -> list[PlannedRun]:
    """Every (point, seed) run with its fit (and linear) command line arguments; ``extra`` goes to
    every fit, ``linear_extra`` to every linear evaluation."""
    keys = [k for k, _ in grid]
    points = [dict(zip(keys, combination)) for combination in itertools.product(*[values for _, values in grid])]
    named = [(name, values, [f"--{k}={v}" for k, v in values.items()]) for values, name in zip(points, point_names(points))]
    return expand_points(configs, named, seeds, sweep_dir, extra, linear_config, linear_extra)


def expand_points(
    configs: list[str],
    points: list[tuple[str, dict[str, str], list[str]]],
    seeds: list[int],
    sweep_dir: Path,
    extra: list[str],
    linear_config: Optional[str],
    linear_extra: Sequence[str] = (),
) -> list[PlannedRun]:
    """Runs of named points ``(folder name, values for sweep.json, the fit arguments that make the point)``,
    one per seed: what :func:`plan` does for a grid and ``--plan`` for a plan's columns."""
    runs = []
    for point, values, grid_args in points:
        for seed in seeds:
            directory = sweep_dir / point / f"seed{seed}"
            config_args = [a for c in configs for a in ("--config", c)]
            seed_arg = f"--seed_everything={seed}"
            fit_args = ["fit", *config_args, *grid_args, seed_arg, *logger_args(sweep_dir, point, f"seed{seed}"), *extra]
            linear_args = None
            if linear_config is not None:
                # Filed by the CLI in <run>/evaluations/linear_<n>/ (the probe belongs to the run it evaluates).
                checkpoint = f"--model.init_args.checkpoint={directory / CHECKPOINTS_DIR / 'last.ckpt'}"
                linear_args = ["fit", "--config", linear_config, checkpoint, seed_arg, *linear_extra]
            runs.append(PlannedRun(sweep_dir.name, point, values, seed, directory, fit_args, linear_args))
    return runs


def logger_args(save_dir: Path, name: str, version: str) -> list[str]:
    return [
        f"--trainer.logger.init_args.save_dir={save_dir}",
        f"--trainer.logger.init_args.name={name}",
        f"--trainer.logger.init_args.version={version}",
    ]


def check_out(out: Path) -> None:
    """``--out`` must be (or be creatable as) a folder this process can write in; nothing is created."""
    existing = out
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        fail(f"--out {out}: {existing} is a file, not a folder")
    try:
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".ssl_app_sweep_probe_")
        os.close(handle)
        os.remove(probe)
    except OSError as error:
        fail(f"--out {out}: cannot write in {existing} ({error.strerror or error})")


def validate(runs: list[PlannedRun]) -> None:
    """Parse every distinct command with ``--print_config``; the first error ends the sweep."""
    from ssl_app.cli import main  # heavy: imports torch and Lightning

    seen: set[tuple[str, ...]] = set()
    for run in runs:
        for args in (run.fit_args, run.linear_args):
            if args is None:
                continue
            key = tuple(
                a for a in args if not a.startswith(("--seed_everything", "--trainer.logger", "--model.init_args.checkpoint"))
            )
            if key in seen:
                continue
            seen.add(key)
            errors = io.StringIO()
            code = 0
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
                try:
                    main([*args, "--print_config"])
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else 1
            if code != 0:
                message = errors.getvalue().strip().splitlines()
                first = next((line for line in message if line.startswith("error:")), message[0] if message else "")
                fail(f"point {run.point}: {first.removeprefix('error: ')}")


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


@dataclass
class Outcome:
    """What ``execute`` did: runs that failed (with the stage), runs held by another process, and
    the signal that stopped the sweep (None: it ran to the end)."""

    failed: list[tuple[PlannedRun, str]]
    held: list[PlannedRun]
    stopped_by: Optional[int] = None


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGINT/SIGTERM raise ``_Stop`` in the sweep's loop (main thread only), previous handlers restored after."""

    def handler(signum: int, frame: object) -> None:
        raise _Stop(signum)

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
                    ok = _stage_done(run, stage)
                    print(f"[sweep] {'done' if ok else 'FAILED'} {run.label}: {stage}", flush=True)
                    if not ok:
                        outcome.failed.append((run, stage))
                        locks.pop(run.directory).release()
                    elif run.stages():
                        pending.insert(0, run)  # its linear evaluation next, still held
                    else:
                        locks.pop(run.directory).release()
    except _Stop as stop:
        outcome.stopped_by = stop.signum
        _stop_children(active)
    finally:
        for lock in locks.values():
            lock.release()
    return outcome


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


def _stage_done(run: PlannedRun, stage: str) -> bool:
    """Whether the stage that just ended is done: its record says so and its process exited 0 (``note_exit``)."""
    return run.fit_status() == DONE if stage == "fit" else run.probe_done()


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
    except _Stop:
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


def print_to_reader(lines: Iterable[str]) -> int:
    """Print ``lines`` to stdout and return 0; a reader that leaves early (``--dry-run | head``) ends
    the printing quietly, as shell tools do, instead of with a BrokenPipeError traceback."""
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush has nowhere to fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _joined_linear_args(argv: list[str]) -> list[str]:
    """``--linear-args "--x=1"`` as ``--linear-args=--x=1``: argparse takes a lone value that starts
    with ``--`` for an option of its own."""
    joined: list[str] = []
    items = iter(argv)
    for item in items:
        if item == "--":
            joined.extend([item, *items])
            break
        if item == "--linear-args":
            item = f"--linear-args={next(items, '')}"
        joined.append(item)
    return joined


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ssl_app.sweep", description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--config", action="append", default=[], help="a fit config; repeat to compose")
    parser.add_argument(
        "--plan", choices=sorted(PLANS), default=None, help="a named plan (ssl_app.sweep.plans), instead of --config"
    )
    parser.add_argument("--data", choices=sorted(DATA_SETS), default=None, help="the plan's data set")
    parser.add_argument("--data-root", default=None, metavar="PATH",
                        help="with --plan: the data's folder, for every fit and linear evaluation")  # fmt: skip
    parser.add_argument("--estimate", action="store_true", help="with --plan: time a few steps here, print device-hours")
    parser.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,... (a fit option); repeat for a product")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--linear", default=None, help="a linear-evaluation config to run on each finished fit")
    parser.add_argument("--out", default="runs/sweeps", help="where sweeps are written (default runs/sweeps)")
    parser.add_argument("--name", default=None, help="the sweep's folder name (default: the grid keys)")
    parser.add_argument("--linear-args", default="", help="options for every linear evaluation, one quoted string")
    parser.add_argument("--jobs", type=int, default=None, help="runs at once (default: 1; all with --launcher slurm)")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local", help="local processes or a SLURM array")
    parser.add_argument("--status", nargs="?", const=True, default=False, metavar="DIR",
                        help="print each run's state (and its SLURM job), run nothing; with DIR (OUT/NAME) alone: "
                        "that sweep's runs, read from its folder")  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    slurm = parser.add_argument_group("--launcher slurm (submitit; docs/slurm.md)")
    slurm.add_argument("--slurm.partition", dest="slurm_partition", default=None, help="the partition to run in")
    slurm.add_argument("--slurm.time", dest="slurm_time", type=int, default=240, help="minutes per job (default 240)")
    slurm.add_argument("--slurm.gpus_per_run", dest="slurm_gpus", type=int, default=1, help="GPUs per run (default 1)")
    slurm.add_argument("--slurm.cpus_per_run", dest="slurm_cpus", type=int, default=None, help="CPUs per run")
    slurm.add_argument("--slurm.account", dest="slurm_account", default=None, help="the account to charge")
    slurm.add_argument("--slurm.sbatch", dest="slurm_sbatch", action="append", default=[], metavar="KEY=VALUE",
                       help="any other sbatch option, without its dashes (qos=high, constraint=a100); repeat")  # fmt: skip
    slurm.add_argument("--slurm.cluster", dest="slurm_cluster", choices=("slurm", "local"), default="slurm",
                       help="local: the same job array as processes on this machine (submitit's local executor)")  # fmt: skip
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: options passed to every fit")
    args = parser.parse_args(_joined_linear_args(sys.argv[1:] if argv is None else argv))
    if isinstance(args.status, str):
        if args.plan is not None or args.config:
            fail("--status DIR reads the runs from the sweep's folder: give it alone, or --status with the sweep's command")
        return args
    if args.plan is None and not args.config:
        fail("give --config (a fit config) or --plan with --data")
    if args.plan is not None and (args.config or args.grid or args.linear):
        fail("--plan replaces --config, --grid and --linear (the plan names them); give one or the other")
    if (args.plan is None) != (args.data is None):
        fail("--plan and --data go together")
    if args.estimate and args.plan is None:
        fail("--estimate needs --plan (the plan gives the data set's size)")
    if args.data_root is not None and args.plan is None:
        fail("--data-root needs --plan (without one, give the data's root option after -- yourself)")
    if args.jobs is not None and args.jobs < 1:
        fail(f"--jobs must be >= 1, got {args.jobs}")
    try:
        args.linear_extra = shlex.split(args.linear_args)
    except ValueError as error:
        fail(f"--linear-args {args.linear_args!r}: {error}")
    if args.linear_extra and args.linear is None and args.plan is None:
        fail("--linear-args needs --linear (the linear evaluation's config)")
    if args.slurm_time < 1:
        fail(f"--slurm.time must be >= 1 (minutes), got {args.slurm_time}")
    if args.slurm_gpus < 0:
        fail(f"--slurm.gpus_per_run must be >= 0, got {args.slurm_gpus}")
    args.sbatch = {}
    for item in args.slurm_sbatch:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().lstrip("-"):
            fail(f"--slurm.sbatch must be KEY=VALUE (an sbatch option without its dashes), got {item!r}")
        args.sbatch[key.strip().lstrip("-")] = value
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        fail(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    for path in [*args.config, *([args.linear] if args.linear else [])]:
        if not Path(path).is_file():
            fail(f"config file {path} does not exist")
    args.extra = [a for a in args.extra if a != "--"]
    if args.data_root is not None:
        try:
            runs = not (args.dry_run or args.status or args.estimate)  # a preview may name another machine's folder
            fit_root, linear_root = root_options(args.data, args.data_root, runs)
        except ValueError as error:
            fail(str(error))
        # First, so that a root given after -- or in --linear-args still wins.
        args.extra.insert(0, fit_root)
        args.linear_extra.insert(0, linear_root)
    return args


def main(argv: Optional[list[str]] = None) -> int:
    with known_noise_silenced():  # the runs are `python -m ssl_app` processes, which silence the same themselves
        return _main(argv)


def planned_runs(args: argparse.Namespace) -> tuple[Path, list[PlannedRun]]:
    """The sweep's folder and runs: from ``--config``/``--grid``/``--linear``, or from ``--plan``/``--data``."""
    if args.plan is not None:
        data, points = plan_points(args.plan, args.data)
        recipe, linear = recipe_paths(data)
        sweep_dir = Path(args.out) / (args.name or f"{args.plan}_{args.data}")
        named = [(p.name, {"config": p.overlay}, p.args) for p in points]
        return sweep_dir, expand_points([recipe], named, args.seed_list, sweep_dir, args.extra, linear, args.linear_extra)
    grid = parse_grid(args.grid)
    name = args.name or ("+".join(k.rsplit(".", 1)[-1] for k, _ in grid) or "base")
    sweep_dir = Path(args.out) / name
    return sweep_dir, plan(args.config, grid, args.seed_list, sweep_dir, args.extra, args.linear, args.linear_extra)


def _main(argv: Optional[list[str]]) -> int:
    args = parse_args(argv)
    if isinstance(args.status, str):
        from ssl_app.sweep.slurm import status_lines

        return print_to_reader(status_lines(recorded_runs(Path(args.status))))
    sweep_dir, runs = planned_runs(args)
    if args.status:
        from ssl_app.sweep.slurm import status_lines

        return print_to_reader(status_lines(runs))
    if args.estimate:
        from ssl_app.sweep.estimate import print_estimate

        validate(runs)
        print_estimate(args.plan, args.data, runs)
        return 0
    check_out(Path(args.out))
    validate(runs)
    if args.dry_run:  # one line per run: its stages joined with &&, as a shell would run them in turn
        lines = (
            " && ".join(shlex.join(["python", "-m", "ssl_app", *stage_args]) for _, stage_args in stages)
            for stages in (run.stages() for run in runs)
            if stages
        )
        return print_to_reader(lines)
    todo = [run for run in runs if run.stages()]
    print(f"[sweep] {sweep_dir}: {len(runs)} runs, {len(runs) - len(todo)} already done, {len(todo)} to run", flush=True)
    if args.launcher == "slurm":
        code = submit_to_slurm(todo, args, sweep_dir)  # a submission that fails writes nothing
        write_plan(sweep_dir, runs)
        return code
    write_plan(sweep_dir, runs)
    outcome = execute(todo, args.jobs or 1)
    if outcome.stopped_by is not None:
        print(
            f"[sweep] stopped by {signal.Signals(outcome.stopped_by).name}; the same command resumes the unfinished runs",
            file=sys.stderr,
        )
        return _STOPPED.get(outcome.stopped_by, 1)
    if outcome.held:
        print(f"[sweep] {len(outcome.held)} run(s) skipped: another process holds them; re-run this command after it ends")
    if outcome.failed:
        print(f"[sweep] {len(outcome.failed)} run(s) failed:", file=sys.stderr)
        for run, stage in outcome.failed:
            print(f"  {run.label} ({stage}): {_why(run, stage)}; log: {run.directory / f'{stage}.log'}", file=sys.stderr)
        return 1
    done = len(runs) - len(outcome.held)
    print(f"[sweep] {done} of {len(runs)} runs done; report: python -m ssl_app.report {sweep_dir}", flush=True)
    return 0


def write_plan(sweep_dir: Path, runs: list[PlannedRun]) -> None:
    """Write the runs into ``sweep_dir/sweep_plan.json`` (with those of earlier launches into the same folder),
    so that ``--status sweep_dir`` needs nothing else."""
    known = {(run.point, run.seed): run for run in _planned_from(sweep_dir)}
    known.update({(run.point, run.seed): run for run in runs})  # in the plan's order, new runs after the earlier ones
    entries = [
        {"point": run.point, "grid": run.grid, "seed": run.seed, "fit_args": run.fit_args, "linear_args": run.linear_args}
        for run in known.values()
    ]
    sweep_dir.mkdir(parents=True, exist_ok=True)
    write_json(sweep_dir / PLAN_FILE, {"sweep": sweep_dir.name, "runs": entries})


def _planned_from(sweep_dir: Path) -> list[PlannedRun]:
    """The runs ``sweep_plan.json`` names (none when it is missing or unreadable), each in its folder under ``sweep_dir``."""
    try:
        entries = json.loads((sweep_dir / PLAN_FILE).read_text(encoding="utf-8"))["runs"]
        runs = []
        for e in entries:
            point, seed, linear = str(e["point"]), int(e["seed"]), e.get("linear_args")
            directory = sweep_dir / point / f"seed{seed}"
            linear_args = None if linear is None else list(linear)
            runs.append(PlannedRun(sweep_dir.name, point, dict(e["grid"]), seed, directory, list(e["fit_args"]), linear_args))
        return runs
    except (OSError, ValueError, KeyError, TypeError):
        return []


def recorded_runs(sweep_dir: Path) -> list[PlannedRun]:
    """The sweep's runs from its folder alone (``--status DIR``): its ``sweep_plan.json``, or, for a sweep
    written without one, the run folders that hold a ``sweep.json``."""
    if not sweep_dir.is_dir():
        fail(f"--status {sweep_dir}: no such folder")
    runs = _planned_from(sweep_dir)
    if not runs:
        for sidecar in sorted(sweep_dir.glob(f"*/seed*/{SWEEP_FILE}")):
            point = read_sweep_point(sidecar.parent)
            if point is not None:
                commands = {stage: shlex.split(command)[3:] for stage, command in point.commands.items()}
                runs.append(PlannedRun(point.sweep, point.point, point.grid, point.seed, sidecar.parent,
                                       commands.get("fit", []), commands.get("linear")))  # fmt: skip
    if not runs:
        fail(f"--status {sweep_dir}: not a sweep's folder (no {PLAN_FILE}, no run folder with a {SWEEP_FILE})")
    return runs


def submit_to_slurm(todo: list[PlannedRun], args: argparse.Namespace, sweep_dir: Path) -> int:
    """Submit the runs that need work as one job array; print the job ids and how to follow them."""
    from ssl_app.errors import ConfigError
    from ssl_app.sweep.slurm import SlurmOptions, submit

    options = SlurmOptions(
        partition=args.slurm_partition, time_min=args.slurm_time, gpus_per_run=args.slurm_gpus, cpus_per_run=args.slurm_cpus,
        account=args.slurm_account, sbatch=args.sbatch, cluster=args.slurm_cluster, parallel=args.jobs,
    )  # fmt: skip
    try:
        submitted = submit(todo, options, sweep_dir)
    except ConfigError as error:
        fail(str(error))
    for run, job_id in submitted:
        print(f"[sweep] submitted {run.label}: job {job_id}", flush=True)
    print(f"[sweep] {len(submitted)} job(s) submitted; follow them with the same command and --status", flush=True)
    return 0


def _why(run: PlannedRun, stage: str) -> str:
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


if __name__ == "__main__":
    sys.exit(main())
