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
- Point names are short, as TensorBoard cuts a run's name at its run list's edge: each axis by its short
  name (``tau`` for the loss's temperature, ``loss``, else the key's last part) and its value's short form,
  the shortest values first (``tau=0.2,loss=InfoNCE``); the default ``--name`` is the axes' short names
  (``tau``, ``loss+tau``). Points whose short forms would coincide (``ssl_app.losses.InfoNCE`` and
  ``mylosses.InfoNCE``) get a hash of their full values appended, so two points never share a folder. A re-run
  in a sweep written with the older names (``temperature/temperature=0.2/seed0``) finds its runs there.
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
- Each finished stage prints one line with the run's headline numbers (linear top-1 once probed, kNN,
  uniformity, tolerance: what it logged); the end of a local sweep and ``--status`` print the report's first
  table of the finished runs (``ssl_app.report.overview``: the report's own readers and table).
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
- ``--plan hardness --data cifar10``: one point per loss of the hardness-aware family on one SimCLR
  recipe (``ssl_app.sweep.plans.HARDNESS_LOSSES``), in ``OUT/hardness_cifar10/``.
- ``--plan beyond_softmax --data {cifar10,cifar100}``: InfoNCE at τ 0.2 and 0.5, DCL, Spectral and Sigmoid, one
  overlay each (``configs/losses/beyond_softmax/``) on the data set's memory-bank recipe, as Table 1 (issue 41).
- ``--plan tau_schedules --data {cifar10_lt,cifar100_lt}``: constant τ against Kukleva et al.'s cosine
  schedule on SimCLR ResNet-18, long-tailed data (``ssl_app.sweep.plans.TAU_SCHEDULE_COLUMNS``).
- ``--grid tau=0.1,cosine:0.1-1.0:T=200,learnable:0.07``: τ policies as a grid axis (``ssl_app.sweep.tau_axis``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ssl_app.cli.endings import fail, signal_status
from ssl_app.cli.light_parser import CachedHelpParser, LazyChoices, keep_help
from ssl_app.errors import ConfigError
from ssl_app.quiet import known_noise_silenced

if TYPE_CHECKING:
    from ssl_app.sweep.local import Outcome
    from ssl_app.sweep.stages import PlannedRun

# The sweep's own modules read the run spec and the τ policies (torch): imported below the parsing, so that
# --help (kept in the user's cache, ssl_app.cli.light_parser) and a bad option print before any of it.


def _plan_names() -> list[str]:
    from ssl_app.sweep.plans import PLANS

    return sorted(PLANS)


def _data_set_names() -> list[str]:
    from ssl_app.sweep.plans import DATA_SETS

    return sorted(DATA_SETS)


def validate(runs: list[PlannedRun]) -> None:
    """Every run's config parsed before anything starts (``ssl_app.sweep.preflight.validate``)."""
    from ssl_app.sweep.preflight import validate as parse_every_run

    parse_every_run(runs)


def execute(todo: list[PlannedRun], jobs: int) -> Outcome:
    """Run ``todo``'s stages here, ``jobs`` at once (``ssl_app.sweep.local.execute``)."""
    from ssl_app.sweep.local import execute as run_here

    return run_here(todo, jobs)


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


def build_parser() -> argparse.ArgumentParser:
    """The sweep's options: what to run (``--config``/``--grid``/``--linear`` or ``--plan``/``--data``), how
    (``--jobs``, ``--launcher``, ``--slurm.*``), and the previews (``--status``, ``--dry-run``, ``--estimate``)."""
    parser = CachedHelpParser(prog="python -m ssl_app.sweep", description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--config", action="append", default=[], help="a fit config; repeat to compose")
    parser.add_argument(
        "--plan", choices=LazyChoices("python -m ssl_app.sweep --plan", _plan_names), default=None, metavar="PLAN",
        help="a named plan (ssl_app.sweep.plans), instead of --config: %(choices)s",
    )  # fmt: skip
    parser.add_argument(
        "--data", choices=LazyChoices("python -m ssl_app.sweep --data", _data_set_names), default=None, metavar="DATA",
        help="the plan's data set: %(choices)s",
    )  # fmt: skip
    parser.add_argument("--data-root", default=None, metavar="PATH",
                        help="with --plan: the data's folder, for every fit and linear evaluation")  # fmt: skip
    parser.add_argument("--estimate", action="store_true", help="with --plan: time a few steps here, print device-hours")
    parser.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,... (a fit option); repeat for a product")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--linear", default=None, help="a linear-evaluation config to run on each finished fit")
    parser.add_argument("--out", default="runs/sweeps", help="where sweeps are written (default runs/sweeps)")
    parser.add_argument(
        "--name", default=None, help="the sweep's folder name (default: the grid axes' short names, tau or loss+tau)"
    )
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
    return parser


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    """The sweep's options, checked (a bad one is one ``error:`` line and ``SystemExit(2)``), with the
    derived ``seed_list``, ``linear_extra`` and ``sbatch``; ``--data-root`` becomes the first extra option."""
    args = build_parser().parse_args(_joined_linear_args(sys.argv[1:] if argv is None else argv))
    if isinstance(args.status, str):
        if args.plan is not None or args.config:
            fail("--status DIR reads the runs from the sweep's folder: give it alone, or --status with the sweep's command")
        return args
    check_combinations(args)
    args.linear_extra = _split_linear_args(args)
    args.sbatch = _sbatch_options(args.slurm_sbatch)
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        fail(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    for path in [*args.config, *([args.linear] if args.linear else [])]:
        if not Path(path).is_file():
            fail(f"config file {path} does not exist")
    args.extra = [a for a in args.extra if a != "--"]
    if args.data_root is not None:
        from ssl_app.sweep.plans import root_options

        try:
            runs = not (args.dry_run or args.status or args.estimate)  # a preview may name another machine's folder
            fit_root, linear_root = root_options(args.data, args.data_root, runs)
        except ValueError as error:
            fail(str(error))
        # First, so that a root given after -- or in --linear-args still wins.
        args.extra.insert(0, fit_root)
        args.linear_extra.insert(0, linear_root)
    return args


def check_combinations(args: argparse.Namespace) -> None:
    """Options that go together, or not at all, and numbers in range."""
    if args.plan is None and not args.config:
        fail("give --config (a fit config) or --plan with --data")
    if args.plan is not None and (args.config or args.grid or args.linear):
        fail("--plan replaces --config, --grid and --linear (the plan names them); give one or the other")
    if (args.plan is None) != (args.data is None):
        fail("--plan and --data go together")
    if args.plan is not None:
        from ssl_app.sweep.plans import plan_points

        try:
            plan_points(args.plan, args.data)
        except (ValueError, FileNotFoundError) as error:
            fail(str(error))
    if args.estimate and args.plan is None:
        fail("--estimate needs --plan (the plan gives the data set's size)")
    if args.data_root is not None and args.plan is None:
        fail("--data-root needs --plan (without one, give the data's root option after -- yourself)")
    if args.jobs is not None and args.jobs < 1:
        fail(f"--jobs must be >= 1, got {args.jobs}")
    if args.slurm_time < 1:
        fail(f"--slurm.time must be >= 1 (minutes), got {args.slurm_time}")
    if args.slurm_gpus < 0:
        fail(f"--slurm.gpus_per_run must be >= 0, got {args.slurm_gpus}")


def _split_linear_args(args: argparse.Namespace) -> list[str]:
    """``--linear-args`` as a list of options (it needs ``--linear`` or ``--plan``)."""
    try:
        linear_extra = shlex.split(args.linear_args)
    except ValueError as error:
        fail(f"--linear-args {args.linear_args!r}: {error}")
    if linear_extra and args.linear is None and args.plan is None:
        fail("--linear-args needs --linear (the linear evaluation's config)")
    return linear_extra


def _sbatch_options(items: list[str]) -> dict[str, str]:
    """``--slurm.sbatch KEY=VALUE`` (repeated) as ``{KEY: VALUE}``, dashes dropped."""
    sbatch = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().lstrip("-"):
            fail(f"--slurm.sbatch must be KEY=VALUE (an sbatch option without its dashes), got {item!r}")
        sbatch[key.strip().lstrip("-")] = value
    return sbatch


def main(argv: Optional[list[str]] = None) -> int:
    with known_noise_silenced():  # the runs are `python -m ssl_app` processes, which silence the same themselves
        return _main(argv)


def _main(argv: Optional[list[str]]) -> int:
    args = parse_args(argv)
    from ssl_app.sweep.grid import planned_runs, recorded_runs, write_plan
    from ssl_app.sweep.preflight import check_out
    from ssl_app.sweep.stages import why_failed

    keep_help(build_parser())  # its plans are imported now: the next --help needs none of it
    if isinstance(args.status, str):
        return print_status(Path(args.status), recorded_runs(Path(args.status)))
    sweep_dir, runs = planned_runs(args)
    if args.status:
        return print_status(sweep_dir, runs)
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
        return signal_status(outcome.stopped_by)
    print_to_reader(comparison_lines(sweep_dir))
    if outcome.held:
        print(f"[sweep] {len(outcome.held)} run(s) skipped: another process holds them; re-run this command after it ends")
    if outcome.failed:
        print(f"[sweep] {len(outcome.failed)} run(s) failed:", file=sys.stderr)
        for run, stage in outcome.failed:
            print(f"  {run.label} ({stage}): {why_failed(run, stage)}; log: {run.directory / f'{stage}.log'}", file=sys.stderr)
        return 1
    done = len(runs) - len(outcome.held)
    print(f"[sweep] {done} of {len(runs)} runs done; report: python -m ssl_app.report {sweep_dir}", flush=True)
    return 0


def comparison_lines(sweep_dir: Path) -> list[str]:
    """The report's first table of the sweep's finished runs, after a blank line (none while no run finished)."""
    from ssl_app.report.overview import study_table  # the event reader: only for a table

    table = study_table(sweep_dir)
    return ["", *table.rstrip("\n").split("\n")] if table else []


def print_status(sweep_dir: Path, runs: list[PlannedRun]) -> int:
    """``--status``: each run's state (and its SLURM job), then the comparison table of those finished."""
    from ssl_app.sweep.slurm import status_lines  # submitit, only for --status

    table = comparison_lines(sweep_dir)
    report = [f"every metric, the paired intervals and the figures: python -m ssl_app.report {sweep_dir}"] if table else []
    return print_to_reader([*status_lines(runs), *table, *report])


def submit_to_slurm(todo: list[PlannedRun], args: argparse.Namespace, sweep_dir: Path) -> int:
    """Submit the runs that need work as one job array; print the job ids and how to follow them."""
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


if __name__ == "__main__":
    sys.exit(main())
