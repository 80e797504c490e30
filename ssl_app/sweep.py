"""``python -m ssl_app.sweep``: one ``fit`` (and optionally one linear evaluation) per grid point and seed.

    python -m ssl_app.sweep --config configs/quickstart.yaml \\
        --grid model.init_args.loss.init_args.temperature=0.07,0.3,0.7,1.0 --seeds 0,1 \\
        [--linear configs/linear.yaml] [--name tau] [--out runs/sweeps] [--jobs 2] [--dry-run] [-- extra fit args]

Every point × seed is a run folder ``OUT/NAME/<point>/seed<k>/`` (the TensorBoard log dir of
that fit, with ``config.yaml``, ``checkpoints/``, the fit's console output ``fit.log``, and
``sweep.json``: the point's grid values, seed, command and status). A linear evaluation goes
to ``<run>/linear/``. ``python -m ssl_app.report OUT/NAME`` reads the folders.

- Every point is parsed (``--print_config``) before anything runs: a grid key that does not
  exist, or a value of the wrong type, is one ``error:`` line and nothing starts.
- A re-run skips the runs whose status is ``done``, resumes interrupted ones from their
  ``last.ckpt`` and starts the rest; a failed run does not stop the others and is listed at
  the end with its log. The exit status is 1 if any run failed.
- ``--jobs N`` runs N at once; with GPUs each job is pinned to one (``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

STATUS_FILE = "sweep.json"


@dataclass
class Run:
    """One grid point with one seed, and where it lives."""

    point: str
    grid: dict[str, str]
    seed: int
    directory: Path
    fit_args: list[str]
    linear_args: Optional[list[str]] = None
    status: dict = field(default_factory=dict)

    @property
    def checkpoint(self) -> Path:
        return self.directory / "checkpoints" / "last.ckpt"

    def load_status(self) -> None:
        path = self.directory / STATUS_FILE
        self.status = json.loads(path.read_text()) if path.is_file() else {}

    def save_status(self, **changes: object) -> None:
        self.status.update(changes)
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / (STATUS_FILE + ".tmp")
        tmp.write_text(json.dumps(self.status, indent=2, sort_keys=True))
        tmp.replace(self.directory / STATUS_FILE)  # atomic: a reader never sees half a file


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
    """A folder name from the point's values: the last part of each key, ``=`` its value."""
    if not values:
        return "base"
    parts = []
    for key, value in values.items():
        short_value = value.rsplit(".", 1)[-1] if re.fullmatch(r"[A-Za-z_][\w.]*\.[A-Za-z_]\w*", value) else value
        parts.append(f"{key.rsplit('.', 1)[-1]}={short_value}")
    return re.sub(r"[^\w.,=+-]", "_", ",".join(parts))


def plan(
    configs: list[str],
    grid: list[tuple[str, list[str]]],
    seeds: list[int],
    sweep_dir: Path,
    extra: list[str],
    linear_config: Optional[str],
) -> list[Run]:
    """Every (point, seed) run with its fit (and linear) command line arguments."""
    runs = []
    keys = [k for k, _ in grid]
    for combination in itertools.product(*[values for _, values in grid]):
        values = dict(zip(keys, combination))
        point = point_name(values)
        for seed in seeds:
            directory = sweep_dir / point / f"seed{seed}"
            config_args = [a for c in configs for a in ("--config", c)]
            grid_args = [f"--{k}={v}" for k, v in values.items()]
            seed_arg = f"--seed_everything={seed}"
            fit_args = ["fit", *config_args, *grid_args, seed_arg, *logger_args(sweep_dir, point, f"seed{seed}"), *extra]
            linear_args = None
            if linear_config is not None:
                checkpoint = f"--model.init_args.checkpoint={directory / 'checkpoints' / 'last.ckpt'}"
                linear_args = ["fit", "--config", linear_config, checkpoint, seed_arg, *logger_args(directory, "", "linear")]
            runs.append(Run(point, values, seed, directory, fit_args, linear_args))
    return runs


def logger_args(save_dir: Path, name: str, version: str) -> list[str]:
    return [
        f"--trainer.logger.init_args.save_dir={save_dir}",
        f"--trainer.logger.init_args.name={name}",
        f"--trainer.logger.init_args.version={version}",
    ]


def validate(runs: list[Run]) -> None:
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


def launch(args: list[str], log: Path, device: Optional[int]) -> subprocess.Popen:
    env = dict(os.environ)
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device)
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = log.open("a")
    handle.write(f"$ {shlex.join([sys.executable, '-m', 'ssl_app', *args])}\n")
    handle.flush()
    process = subprocess.Popen([sys.executable, "-m", "ssl_app", *args], stdout=handle, stderr=subprocess.STDOUT, env=env)
    handle.close()
    return process


def stages(run: Run) -> list[tuple[str, list[str]]]:
    """What ``run`` still needs: ``fit`` (resumed if it has a checkpoint) and/or ``linear``."""
    todo = []
    if run.status.get("fit") != "done":
        args = run.fit_args
        if run.checkpoint.is_file():
            args = [*args, f"--ckpt_path={run.checkpoint}"]
        todo.append(("fit", args))
    if run.linear_args is not None and run.status.get("linear") != "done":
        todo.append(("linear", run.linear_args))
    return todo


def execute(runs: list[Run], jobs: int) -> list[Run]:
    """Run every pending stage, ``jobs`` at a time; return the runs that failed."""
    devices = _gpu_count()
    pending = [run for run in runs if stages(run)]
    active: dict[int, tuple[Run, str, subprocess.Popen, Optional[int]]] = {}
    failed: list[Run] = []
    free = list(range(devices)) if devices else []
    while pending or active:
        while pending and len(active) < jobs:
            run = pending.pop(0)
            stage, args = stages(run)[0]
            device = free.pop(0) if free else None
            log = run.directory / f"{stage}.log"
            command = shlex.join(["python", "-m", "ssl_app", *args])
            started = {stage: "running", f"{stage}_command": command, f"{stage}_log": str(log)}
            run.save_status(point=run.point, grid=run.grid, seed=run.seed, **started)
            print(f"[sweep] start {run.point} seed {run.seed}: {stage}", flush=True)
            process = launch(args, log, device)
            active[process.pid] = (run, stage, process, device)
        time.sleep(0.2)
        for pid, (run, stage, process, device) in list(active.items()):
            if process.poll() is None:
                continue
            del active[pid]
            if device is not None:
                free.append(device)
            ok = process.returncode == 0
            run.save_status(**{stage: "done" if ok else "failed", f"{stage}_returncode": process.returncode})
            print(f"[sweep] {'done' if ok else 'FAILED'} {run.point} seed {run.seed}: {stage}", flush=True)
            if not ok:
                failed.append(run)
            elif stages(run):
                pending.insert(0, run)  # its linear evaluation next
    return failed


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no usable CUDA means CPU jobs
        return 0


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ssl_app.sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--config", action="append", required=True, help="a fit config; repeat to compose")
    parser.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,... (a fit option); repeat for a product")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--linear", default=None, help="a linear-evaluation config to run on each finished fit")
    parser.add_argument("--out", default="runs/sweeps", help="where sweeps are written (default runs/sweeps)")
    parser.add_argument("--name", default=None, help="the sweep's folder name (default: the grid keys)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: options passed to every fit")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        fail(f"--jobs must be >= 1, got {args.jobs}")
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        fail(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    for path in [*args.config, *([args.linear] if args.linear else [])]:
        if not Path(path).is_file():
            fail(f"config file {path} does not exist")
    args.extra = [a for a in args.extra if a != "--"]
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    grid = parse_grid(args.grid)
    name = args.name or ("+".join(k.rsplit(".", 1)[-1] for k, _ in grid) or "base")
    sweep_dir = Path(args.out) / name
    runs = plan(args.config, grid, args.seed_list, sweep_dir, args.extra, args.linear)
    validate(runs)
    for run in runs:
        run.load_status()
    if args.dry_run:
        for run in runs:
            for _, stage_args in stages(run):
                print(shlex.join(["python", "-m", "ssl_app", *stage_args]))
        return 0
    todo = [run for run in runs if stages(run)]
    print(f"[sweep] {sweep_dir}: {len(runs)} runs, {len(runs) - len(todo)} already done, {len(todo)} to run", flush=True)
    failed = execute(todo, args.jobs)
    if failed:
        print(f"[sweep] {len(failed)} run(s) failed:", file=sys.stderr)
        for run in failed:
            stage = "linear" if run.status.get("linear") == "failed" else "fit"
            print(f"  {run.point} seed {run.seed} ({stage}): {run.status.get(f'{stage}_log')}", file=sys.stderr)
        return 1
    print(f"[sweep] all {len(runs)} runs done; report: python -m ssl_app.report {sweep_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
