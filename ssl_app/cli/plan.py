"""The run plan: which folder a command writes, which checkpoint it loads, what a resume changes.

Plain functions of the parsed config (a ``jsonargparse.Namespace`` of one subcommand), decided before
anything is built; :func:`plan_run` returns a :class:`RunPlan` and is testable without a Trainer.

- ``fit`` without ``--ckpt_path``: the logger's next free ``version_<n>`` (claimed when the run starts).
- ``fit --ckpt_path C``: C's own folder when C is ``<run>/checkpoints/*.ckpt`` of this logger's family
  (the resume keeps logging there), else a new folder; weights-only files and other experiments are refused.
- ``--ckpt_path last``: the newest ``last.ckpt`` of this experiment in the family (none yet: a new run).
- ``validate``/``test --ckpt_path C`` and a linear probe: ``<run>/evaluations/<kind>_<n>/`` of the run
  they evaluate (``--attach_to_run=false``: the logger's own folder).

The logger's ``init_args`` in ``config`` are set in place (``save_dir``, ``name``, ``version``), so the
Trainer LightningCLI builds next writes where the plan says.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Optional

from jsonargparse import Namespace
from lightning.fabric.utilities.rank_zero import rank_zero_only

from ssl_app.cli.endings import APP_PACKAGES
from ssl_app.errors import ConfigError
from ssl_app.resume import (
    Finished,
    check_same_experiment,
    checkpoint_config,
    checkpoint_method,
    checkpoint_run_id,
    describe_changes,
    find_last,
    finished_run,
    is_weights_only,
    load_checkpoint,
)
from ssl_app.runs.identity import describe_differences
from ssl_app.runs.layout import EVALUATIONS_DIR, next_evaluation_name, run_folder_of_checkpoint
from ssl_app.runs.recorder import NextName


@dataclass
class RunPlan:
    """What the parsed command will do with run folders, decided before anything is built.

    ``kind``: fit, validate, test or linear (a fit of a linear probe). ``parent``: the run an
    evaluation or a probe belongs to. ``checkpoint``: the resolved ``--ckpt_path``. ``next_name``:
    how to name the next free folder when the logger's version is automatic. ``resume_changes``:
    the options this command changes on a resume, for the record. ``finished``: the checkpoint is
    the final state of a finished run that this command would not train further (a no-op re-run).
    ``run_id``: the resumed run's id, kept in its record.
    """

    kind: str
    parent: Optional[Path] = None
    checkpoint: Optional[str] = None
    next_name: Optional[NextName] = None
    resume_changes: dict[str, Any] = field(default_factory=dict)
    run_id: Optional[str] = None
    finished: Optional[Finished] = None
    #: The checkpoint's contents, loaded once to check it (None: no checkpoint).
    loaded: Optional[dict[str, Any]] = field(default=None, repr=False)


def plan_run(subcommand: str, config: Namespace, current: Callable[[], dict[str, Any]]) -> RunPlan:
    """Resolve ``--ckpt_path``, check it against the config, and decide which folder the run writes.

    ``config``: the subcommand's parsed config (its logger's ``init_args`` and ``ckpt_path`` are set in
    place); ``current``: the resolved config as plain data (what ``config.yaml`` holds), asked only when needed.
    A probe filed in its run logs its curves as CSV (:func:`curves_as_csv`).
    """
    plan = _plan_run(subcommand, config, current)
    if plan.kind == "linear" and plan.parent is not None:
        curves_as_csv(config.get("trainer"))
    return plan


#: The options of Lightning's ``CSVLogger`` that a TensorBoardLogger's config may also hold.
CSV_LOGGER_OPTIONS = ("save_dir", "name", "version", "prefix", "flush_logs_every_n_steps")


def curves_as_csv(trainer: Any) -> None:
    """A linear probe filed in the run it evaluates writes its training curves into its own folder as
    ``metrics.csv`` (Lightning's ``CSVLogger``, the same folder), not as TensorBoard events: TensorBoard makes
    every folder with events a run of its own, and a sweep's run list showed each fit three times (the fit, its
    probe's curves, its probe's values). The probe's final values go on the fit's row in
    ``<run>/evaluations/linear/`` (``ssl_app.runs.panel.write_evaluation``), the only run of the probe that
    TensorBoard lists. ``--attach_to_run=false`` keeps the configured logger. Changes ``trainer``'s logger in place."""
    logger = trainer.get("logger") if isinstance(trainer, Namespace) else None
    if isinstance(logger, list) and len(logger) == 1:
        logger = logger[0]
    if not isinstance(logger, Namespace) or str(logger.get("class_path", "")).rsplit(".", 1)[-1] != "TensorBoardLogger":
        return
    init_args = logger.get("init_args")
    if not isinstance(init_args, Namespace):
        return
    for key in [key for key in vars(init_args) if key not in CSV_LOGGER_OPTIONS]:
        delattr(init_args, key)
    logger.class_path = "lightning.pytorch.loggers.CSVLogger"


def _plan_run(subcommand: str, config: Namespace, current: Callable[[], dict[str, Any]]) -> RunPlan:
    model = config.get("model")
    class_path = model.get("class_path") if isinstance(model, Namespace) else None
    probe = subcommand == "fit" and is_probe(class_path)
    plan = RunPlan(kind="linear" if probe else subcommand)
    logger_args = logger_init_args(config.get("trainer"))
    attach = bool(config.get("attach_to_run", True)) and logger_args is not None
    if probe and attach:
        encoder = model.get("init_args", Namespace()).get("checkpoint")
        plan.parent = run_folder_of_checkpoint(encoder) if encoder else None
    family = run_family(plan, logger_args)
    ckpt_path = config.get("ckpt_path")
    if ckpt_path == "last":
        ckpt_path = config.ckpt_path = resolve_last(subcommand, family, current)
    if ckpt_path is None or ckpt_path in ("best", "hpc") or str(ckpt_path).startswith("registry:"):
        choose_new_folder(plan, logger_args)
        return plan
    plan.checkpoint = str(ckpt_path)
    plan.loaded = load_checkpoint(str(ckpt_path))
    method = checkpoint_method(plan.loaded)
    if method and class_path and method != class_path:
        raise ConfigError(
            f"--ckpt_path {ckpt_path} was written by {method}, but the model is {class_path}; "
            f"pass --model {method} (or its config) to use this checkpoint"
        )
    if not class_path and method and not method.startswith(APP_PACKAGES):
        raise ConfigError(
            f"--ckpt_path {ckpt_path} was written by {method}, which is not part of ssl_app; name it with --model {method} "
            "to load it (its module is imported)"
        )
    if subcommand == "fit":
        plan_resume(plan, Path(ckpt_path), logger_args, family, current(), bool(config.get("resume_anyway")))
    else:
        plan.parent = run_folder_of_checkpoint(ckpt_path) if attach else None
        choose_new_folder(plan, logger_args)
    return plan


def resolve_last(subcommand: str, family: Optional[tuple[Path, str]], current: Callable[[], dict[str, Any]]) -> Optional[str]:
    """``--ckpt_path last``: the newest ``last.ckpt`` of this experiment in the run family (``ssl_app.resume``)."""
    if family is None:
        raise ConfigError("--ckpt_path last needs a TensorBoard or CSV logger with a save_dir (trainer.logger)")
    root, pattern = family
    found = find_last(root, pattern, current() if subcommand == "fit" else None)
    for folder, why in found.passed_over:
        info(f"--ckpt_path last: passing over {folder}: another experiment ({why})")
    where = f"{root}/{pattern}/checkpoints/"
    if found.path is None:
        if subcommand != "fit":
            raise ConfigError(f"--ckpt_path last: no last.ckpt under {where}")
        info(f"--ckpt_path last: no last.ckpt of this experiment under {where} yet, so this starts a new run")
        return None
    return str(found.path)


def plan_resume(
    plan: RunPlan,
    path: Path,
    logger_args: Optional[Namespace],
    family: Optional[tuple[Path, str]],
    current: dict[str, Any],
    anyway: bool,
) -> None:
    """A fit from a checkpoint: refuse weights-only files and other experiments; note what changes."""
    checkpoint = plan.loaded
    assert checkpoint is not None
    if is_weights_only(checkpoint):
        raise ConfigError(
            f"--ckpt_path {path} holds only weights (no optimiser or loop state; saved with save_weights_only), so "
            "training cannot resume from it: evaluate it with validate/test, probe it (LinearProbe's checkpoint), "
            "or start a new run"
        )
    saved = checkpoint_config(checkpoint, path)
    for note in check_same_experiment(str(path), saved, current, anyway):
        info(note)
    plan.finished = finished_run(checkpoint, path, current.get("trainer") or {})
    if plan.finished is not None:
        return  # nothing to train: the CLI says so and prints the run's summary from its record
    plan.resume_changes = describe_changes(saved, current)
    plan.run_id = checkpoint_run_id(checkpoint)
    folder = path.absolute().parent.parent
    if family is not None and logger_args is not None and logger_args.get("version") is None:
        root, pattern = family
        if path.absolute().parent.name == "checkpoints" and folder.parent == root.absolute() and fnmatch(folder.name, pattern):
            logger_args.version = folder.name  # keep logging into the checkpoint's own run
            if plan.parent is not None:
                logger_args.save_dir, logger_args.name = str(plan.parent), EVALUATIONS_DIR
        else:
            choose_new_folder(plan, logger_args)
    changes = "; every option as in the checkpoint's run"
    if plan.resume_changes:
        found = [(key, change["checkpoint"], change["now"]) for key, change in plan.resume_changes.items()]
        changes = "; from this command, not the checkpoint: " + describe_differences(found, "checkpoint", "now", limit=8)
    info(f"--ckpt_path: resuming {path} (epoch {checkpoint.get('epoch')}, step {checkpoint.get('global_step')}){changes}")


def choose_new_folder(plan: RunPlan, logger_args: Optional[Namespace]) -> None:
    """A new folder: an evaluation inside its run, or the logger's next ``version_<n>``."""
    if logger_args is None:
        return
    if plan.parent is not None and plan.kind != "fit":
        parent, kind = plan.parent, plan.kind
        logger_args.save_dir, logger_args.name = str(parent), EVALUATIONS_DIR
        logger_args.version = next_evaluation_name(parent, kind)
        plan.next_name = lambda _root: next_evaluation_name(parent, kind)
    elif logger_args.get("version") is None:
        plan.next_name = next_version_name


def run_family(plan: RunPlan, logger_args: Optional[Namespace]) -> Optional[tuple[Path, str]]:
    """Where this command's runs live and which folder names belong to it: ``(root, glob)``."""
    if plan.kind == "linear" and plan.parent is not None:
        return plan.parent / EVALUATIONS_DIR, "linear_*"
    if logger_args is None:
        return None
    root = Path(str(logger_args.save_dir)) / str(logger_args.get("name") or "")
    return root, version_name(logger_args.get("version")) or "version_*"


def next_version_name(root: Path) -> str:
    numbers = [int(p.name.split("_", 1)[1]) for p in root.glob("version_*") if p.name.split("_", 1)[1].isdigit()]
    return f"version_{max(numbers, default=-1) + 1}"


def is_probe(class_path: Any) -> bool:
    """Whether ``class_path`` names ``ssl_app.evaluation.LinearProbe`` or a subclass."""
    if not isinstance(class_path, str) or "." not in class_path:
        return False
    from ssl_app.evaluation import LinearProbe

    module_name, _, name = class_path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), name, None)
    except ImportError:
        return False
    return isinstance(found, type) and issubclass(found, LinearProbe)


def info(message: str) -> None:
    if rank_zero_only.rank == 0 and os.environ.get("LOCAL_RANK", "0") == "0":
        print(message, file=sys.stderr)


def version_name(version: Any) -> str | None:
    if version is None:
        return None
    return version if isinstance(version, str) else f"version_{version}"


def logger_init_args(trainer: Any) -> Namespace | None:
    """The ``init_args`` of a single TensorBoard/CSV logger in the trainer config, else None."""
    logger = trainer.get("logger") if isinstance(trainer, Namespace) else None
    if isinstance(logger, list) and len(logger) == 1:
        logger = logger[0]
    if isinstance(logger, dict):  # a default given as a dict: make it a Namespace we can edit in place
        logger = trainer.logger = Namespace(logger)
    if not isinstance(logger, Namespace):
        return None
    if str(logger.get("class_path", "")).rsplit(".", 1)[-1] not in ("TensorBoardLogger", "CSVLogger"):
        return None
    init_args = logger.get("init_args")
    if isinstance(init_args, dict):
        init_args = logger.init_args = Namespace(init_args)
    if init_args is None or init_args.get("save_dir") is None:
        return None
    return init_args
