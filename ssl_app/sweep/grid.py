"""Which runs a sweep stands for: a grid of options × seeds (``--config``/``--grid``/``--linear``) or a
named plan (``--plan``/``--data``, ``ssl_app.sweep.plans``), each run a folder ``OUT/NAME/<point>/seed<k>/``
with its stages' command lines; and ``sweep_plan.json``, the runs a launch wrote, which ``--status DIR`` reads.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import re
import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ssl_app.cli.endings import fail
from ssl_app.errors import ConfigError
from ssl_app.io.atomic import write_json
from ssl_app.runs.layout import CHECKPOINTS_DIR, SWEEP_FILE, read_sweep_point
from ssl_app.runs.spec import ENCODER_CHECKPOINT_KEY, LOGGER_KEYS, LOSS_CLASS_KEY, LOSS_KEY, TAU_KEY
from ssl_app.sweep.plans import plan_points, recipe_paths
from ssl_app.sweep.stages import PlannedRun
from ssl_app.sweep.tau_axis import TAU_ALIAS, expand_axis, is_tau_key

#: The sweep's runs, written into its folder at launch: what ``--status DIR`` reads.
PLAN_FILE = "sweep_plan.json"


def parse_grid(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``["a.b=1,2", "c=x"]`` → ``[("a.b", ["1", "2"]), ("c", ["x"])]``; bad specs are ``SystemExit(2)``."""
    grid = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        items = [v.strip() for v in values.split(",")]
        if not sep or not key.strip() or not values.strip():
            fail(f"--grid must be KEY=V1,V2,..., got {spec!r}")
        empty = [str(i) for i, item in enumerate(items, 1) if not item]
        if empty:
            fail(f"--grid {key.strip()}: value {' and '.join(empty)} of {values!r} is empty (two commas, or one at an end)")
        grid.append((key.strip().lstrip("-"), items))
    keys = [k for k, _ in grid]
    if len(set(keys)) != len(keys):
        fail(f"--grid names a key twice: {keys}")
    return grid


#: The short names of common grid keys in run folders and the default sweep name (``tau=0.2``, ``loss=Simple``);
#: any other key is named by its last part (``batch_size``).
KEY_ALIASES = {TAU_KEY: TAU_ALIAS, LOSS_KEY: "loss", LOSS_CLASS_KEY: "loss"}
#: Key parts that say nothing about what a key sets (jsonargparse's nesting).
_NESTING = ("init_args", "class_path")


def _parts(key: str) -> list[str]:
    return [part for part in key.split(".") if part not in _NESTING] or key.split(".")


def axis_aliases(keys: Sequence[str]) -> dict[str, str]:
    """Each grid key's short name: ``KEY_ALIASES`` (a loss's temperature at any path is ``tau``), else its last
    part. Keys whose short names coincide (``data.init_args.batch_size`` and ``model.init_args.batch_size``) are
    named by as many of their last parts as tell them apart (``data.batch_size``, ``model.batch_size``; the full
    key where none do), so two axes never share a name."""

    def alias(key: str) -> str:
        return KEY_ALIASES.get(key) or (TAU_ALIAS if is_tau_key(key) else _parts(key)[-1])

    names = {key: alias(key) for key in keys}
    counts = Counter(name.lower() for name in names.values())
    for key in keys:
        if counts[names[key].lower()] > 1:
            rivals = [k for k in keys if k != key and names[k].lower() == names[key].lower()]
            parts = _parts(key)
            found = next(
                (".".join(parts[-n:]) for n in range(2, len(parts) + 1)
                 if all(".".join(_parts(r)[-n:]).lower() != ".".join(parts[-n:]).lower() for r in rivals)),
                key,
            )  # fmt: skip
            names[key] = found
    if len({name.lower() for name in names.values()}) != len(names):  # a suffix that is another's alias
        names = {key: key for key in keys}
    return names


def _short_value(value: str) -> str:
    """A value's short form: the last part of a class path, else the value."""
    return value.rsplit(".", 1)[-1] if re.fullmatch(r"[A-Za-z_][\w.]*\.[A-Za-z_]\w*", value) else value


def point_name(values: dict[str, str], aliases: Optional[dict[str, str]] = None) -> str:
    """A folder name from the point's values: each key's short name (``aliases``, by default :func:`axis_aliases`),
    ``=``, its value's short form (the last part of a class path), in the order given. Not unique on its own:
    see :func:`point_names`."""
    if not values:
        return "base"
    aliases = aliases or axis_aliases(list(values))
    parts = [f"{aliases[key]}={_short_value(value)}" for key, value in values.items()]
    return re.sub(r"[^\w.,=+-]", "_", ",".join(parts))


def axis_order(points: list[dict[str, str]]) -> list[str]:
    """The grid's keys, those with the shortest values first (the longest value of each key decides; ties keep
    the grid's order): TensorBoard cuts a run's name at its run list's edge (docs/linear-and-sweeps.md), and a
    long value (a loss's class) last keeps the short ones (τ) in sight."""
    keys = list(points[0]) if points else []
    longest = {key: max(len(_short_value(point[key])) for point in points) for key in keys}
    return sorted(keys, key=lambda key: longest[key])


def point_names(points: list[dict[str, str]]) -> list[str]:
    """One folder name per point, unique: :func:`point_name` with the keys in :func:`axis_order`, plus
    ``-<hash of the full values>`` for the points whose short names coincide (names compared as a
    case-insensitive filesystem would)."""
    order = axis_order(points)
    aliases = axis_aliases(order)
    return _unique([point_name({key: values[key] for key in order}, aliases) for values in points], points)


def legacy_point_names(points: list[dict[str, str]]) -> list[str]:
    """The folder names sweeps gave points before the short names (issue 40): each key's last part and the value's
    short form in the grid's order (``temperature=0.2``), made unique as :func:`point_names` does. A re-run finds
    the runs of such a sweep under them (:func:`plan`)."""
    short = [
        re.sub(r"[^\w.,=+-]", "_", ",".join(f"{key.rsplit('.', 1)[-1]}={_short_value(v)}" for key, v in values.items()))
        if values else "base"
        for values in points
    ]  # fmt: skip
    return _unique(short, points)


def _unique(short: list[str], points: list[dict[str, str]]) -> list[str]:
    counts = Counter(name.lower() for name in short)
    names = []
    for name, values in zip(short, points):
        if counts[name.lower()] > 1:
            digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:8]
            name = f"{name}-{digest}"
        names.append(name)
    return names


def found_names(sweep_dir: Path, names: list[str], legacy: list[str]) -> list[str]:
    """``names``, except where a sweep of the old naming holds a point (``legacy``'s folder is there and ``names``'
    is not): that folder, so a re-run of the same command skips its done runs and resumes the others."""
    return [old if not (sweep_dir / new).exists() and (sweep_dir / old).is_dir() else new for new, old in zip(names, legacy)]


def sweep_name(out: Path, keys: list[str]) -> str:
    """The default sweep name: the axes' short names (``tau``, ``loss+tau``; ``base`` without a grid), or the one
    sweeps gave before (the keys' last parts, ``temperature``) where ``out`` holds such a sweep and not the new."""
    if not keys:
        return "base"
    aliases = axis_aliases(keys)
    new = "+".join(aliases[key] for key in keys)
    old = "+".join(key.rsplit(".", 1)[-1] for key in keys)
    return old if not (out / new).exists() and (out / old).is_dir() else new


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
    try:
        axes = [expand_axis(key, values) for key, values in grid]  # τ presets → the policy's class-path config
    except ConfigError as error:
        fail(str(error))
    keys = [k for k, _ in axes]
    if len(set(keys)) != len(keys):
        fail(f"--grid names a key twice ({TAU_ALIAS} is {TAU_KEY}): {[k for k, _ in grid]}")
    combinations = list(itertools.product(*[values for _, values in axes]))
    named_values = [{k: v.name for k, v in zip(keys, combination)} for combination in combinations]
    names = found_names(sweep_dir, point_names(named_values), legacy_point_names(named_values))
    order = axis_order(named_values)
    named = []
    for name, combination in zip(names, combinations):
        given = {k: v.value for k, v in zip(keys, combination)}
        values = {k: given[k] for k in order}  # sweep.json's grid in the folder's order: HParams names a row by it
        named.append((name, values, [f"--{k}={v}" for k, v in given.items()]))  # as given: a class before its options
    return expand_points(named, seeds, sweep_dir, configs, StageOptions(extra, linear_config, linear_extra))


@dataclass(frozen=True)
class StageOptions:
    """What each run's stages add to its point: ``extra`` options for every fit, and the linear
    evaluation's config and options (``linear_config`` None: no linear evaluation)."""

    extra: Sequence[str] = ()
    linear_config: Optional[str] = None
    linear_extra: Sequence[str] = ()


def expand_points(
    points: list[tuple[str, dict[str, str], list[str]]],
    seeds: list[int],
    sweep_dir: Path,
    configs: list[str],
    stages: StageOptions,
) -> list[PlannedRun]:
    """Runs of named points ``(folder name, values for sweep.json, the fit arguments that make the point)``,
    one per seed: what :func:`plan` does for a grid and ``--plan`` for a plan's columns."""
    extra, linear_config, linear_extra = stages.extra, stages.linear_config, stages.linear_extra
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
                checkpoint = f"--{ENCODER_CHECKPOINT_KEY}={directory / CHECKPOINTS_DIR / 'last.ckpt'}"
                linear_args = ["fit", "--config", linear_config, checkpoint, seed_arg, *linear_extra]
            runs.append(PlannedRun(sweep_dir.name, point, values, seed, directory, fit_args, linear_args))
    return runs


def logger_args(save_dir: Path, name: str, version: str) -> list[str]:
    return [f"--{key}={value}" for key, value in zip(LOGGER_KEYS, (save_dir, name, version))]


def planned_runs(args: argparse.Namespace) -> tuple[Path, list[PlannedRun]]:
    """The sweep's folder and runs: from ``--config``/``--grid``/``--linear``, or from ``--plan``/``--data``."""
    if args.plan is not None:
        data, points = plan_points(args.plan, args.data)
        recipe, linear = recipe_paths(data)
        sweep_dir = Path(args.out) / (args.name or f"{args.plan}_{args.data}")
        named = [(p.name, p.values, p.args) for p in points]
        stages = StageOptions(args.extra, linear, args.linear_extra)
        return sweep_dir, expand_points(named, args.seed_list, sweep_dir, [recipe], stages)
    grid = parse_grid(args.grid)
    keys = [TAU_KEY if k == TAU_ALIAS else k for k, _ in grid]
    sweep_dir = Path(args.out) / (args.name or sweep_name(Path(args.out), keys))
    return sweep_dir, plan(args.config, grid, args.seed_list, sweep_dir, args.extra, args.linear, args.linear_extra)


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
