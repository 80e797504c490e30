"""``python -m ssl_app {fit,validate,test} --config X.yaml``: LightningCLI in subclass mode.

``python -m ssl_app list [KIND ...]``, ``export`` and ``embed`` are not Trainer subcommands: ``ssl_app.cli.entry``
hands them, before Lightning is imported, to ``ssl_app.cli.listing``, ``ssl_app.cli.export`` and
``ssl_app.cli.embed``. Lightning's ``predict`` is not offered (``embed`` writes the features).

Any method (``--model ssl_app.methods.SimCLR``) and any datamodule
(``--data datamodules.CIFAR10DataModule``) is chosen by class path, from YAML or the command
line. Every run gets a ``ModelCheckpoint`` that also keeps ``last.ckpt`` (options under
``--checkpoint.*``), a ``NumericalHealth`` check (``--health.*``), a checkpoint of the current
step on SIGINT/SIGTERM, atomic checkpoint writes, a learning-rate monitor, and a TensorBoard
logger writing to ``runs/<name>/version_<n>/``.

``--ckpt_path last`` resumes the newest ``last.ckpt`` under ``runs/<name>/version_*/`` and keeps
logging into that version folder (so do explicit paths inside one); without any checkpoint
yet it starts a new run, so one command line serves the first start and every restart. Of a
finished run it trains and writes nothing and prints the run's summary again (``finished_run``).

A finished command prints a short summary (its folder and headline metrics) and puts its final
metrics beside its config in TensorBoard's HParams tab (``ssl_app.runs.summary``); while it runs,
the known third-party warnings are silenced (``ssl_app.quiet``).

Errors before work: every rejected input is one ``error: ...`` line naming the option or file,
exit status 2, and nothing is written (a run folder created by a start that then failed before
its first step is removed again). Which folder and checkpoint a command uses is decided by
``ssl_app.cli.plan``; every way a command ends (its line and exit status) by ``ssl_app.cli.endings``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Optional

import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.plugins.io import CheckpointIO

from ssl_app import __version__
from ssl_app.checkpointing import (
    AtomicCheckpointIO,
    ConfigWinsOnResume,
    FitOnlyCheckpointState,
    InterruptCheckpoint,
)
from ssl_app.cli.early import LIST_HELP, check_config_files
from ssl_app.cli.endings import command_ending, record_ending, report, signals_before_training
from ssl_app.cli.parsing import OneLineParser
from ssl_app.cli.plan import RunPlan, info, plan_run
from ssl_app.cli.tau_presets import expand_in_argv
from ssl_app.cli.trainer_values import devices_problem, trainer_problem
from ssl_app.errors import ConfigError
from ssl_app.health import NumericalHealth
from ssl_app.normalisation import settle_input, trained_input
from ssl_app.quiet import PROBE_WARNINGS, known_noise_silenced
from ssl_app.resume import Finished, check_state_dict, checkpoint_config, load_checkpoint
from ssl_app.runs.headline import read_options
from ssl_app.runs.identity import describe_differences, differences, flatten
from ssl_app.runs.layout import read_sweep_point, relative_parent
from ssl_app.runs.panel import describe_scalars, write_evaluation, write_hparams, write_layout
from ssl_app.runs.record import DONE
from ssl_app.runs.recorder import RunRecorder, final_scalars
from ssl_app.runs.summary import record_summary_lines, shown_path, summary_lines, without_placeholder
from ssl_app.runtime import keep_freed_memory

DEFAULT_RUN_DIR = "runs"


class SSLCLI(LightningCLI):
    """LightningCLI plus the run folders: the record, the lock, resume checks, evaluations filed with their run."""

    _checkpoint: dict | None = None
    #: The global step of the checkpoint an evaluation or a probe reads (its values sit at that step in HParams).
    _evaluated_step: int = 0

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Lightning's subcommands without ``predict``: no method has a predict step, and
        ``python -m ssl_app embed`` is what writes features."""
        return {name: skipped for name, skipped in LightningCLI.subcommands().items() if name != "predict"}

    def __init__(self, *args: Any, recorder: Optional[RunRecorder] = None, interrupt: Optional[InterruptCheckpoint] = None,
                 **kwargs: Any) -> None:  # fmt: skip
        self.recorder = recorder or RunRecorder()
        self.interrupt = interrupt
        self.plan: Optional[RunPlan] = None
        self.config_snapshot: dict[str, Any] = {}
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.save_last": True,
                "checkpoint.filename": "epoch{epoch:03d}-step{step}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        parser.add_lightning_class_args(NumericalHealth, "health")
        parser.add_argument(
            "--resume_anyway",
            type=bool,
            default=False,
            help="fit --ckpt_path: resume a checkpoint even when it was trained with another method, backbone, loss or data",
        )
        parser.add_argument(
            "--attach_to_run",
            type=bool,
            default=True,
            help="validate/test --ckpt_path and linear probes: write into the evaluated run's folder "
            "(<run>/evaluations/<kind>_<n>/) instead of a new run folder of the configured logger",
        )

    # --- before anything is instantiated -----------------------------------------------------
    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        # Runs before LightningCLI reads the checkpoint's hyper-parameters into the config.
        self._plan_run()

    def _current_config(self) -> dict[str, Any]:
        """The resolved config of the subcommand as plain data (what ``config.yaml`` holds)."""
        subcommand = self.config["subcommand"]
        return yaml.safe_load(self._parser(subcommand).dump(self.config[subcommand], skip_unset=False)) or {}

    def _plan_run(self) -> None:
        """The run plan (``ssl_app.cli.plan``): which folder, which checkpoint, what resumes."""
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        self.plan = plan_run(subcommand, self.config[subcommand], self._current_config)
        # The CLI holds the loaded checkpoint until the run has checked it (then drops it: training does not keep it).
        self._checkpoint, self.plan.loaded = self.plan.loaded, None

    def _parse_ckpt_path(self) -> None:
        """``validate``/``test``: the model as the checkpoint's run configured it (its loss too), except
        paths this command gives; ``fit``: the config as given (its differences were checked and named)."""
        subcommand = self.config.get("subcommand")
        if not subcommand or subcommand == "fit" or self._checkpoint is None:
            return
        config = self.config[subcommand]
        path = config.get("ckpt_path")
        saved = checkpoint_config(self._checkpoint, path)
        saved_model = saved.get("model") if isinstance(saved, dict) else None
        if isinstance(saved_model, dict):
            update: dict[str, Any] = dict(saved_model)
        else:  # an older checkpoint: the hyper-parameters LightningCLI saved (no loss among them)
            hparams = _plain(dict(self._checkpoint.get("hyper_parameters") or {}))
            hparams.pop("_instantiator", None)
            if not hparams:
                return
            update = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams} if "_class_path" in hparams else hparams
        _keep_given_paths(update, config.get("model"))
        before = flatten({"model": self._current_config().get("model")})
        self.config = self.parser.parse_object({subcommand: {"model": update}}, self.config)
        after = flatten({"model": self._current_config().get("model")})
        found = differences(before, after)
        if found:
            changes = describe_differences(found, "config", "checkpoint")
            info(f"{subcommand}: the model is configured as in the checkpoint's run: {changes}")

    def before_instantiate_classes(self) -> None:
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        trainer = self.config[subcommand].get("trainer") or Namespace()
        _check_devices(trainer.get("accelerator"), trainer.get("devices"))
        if self.config[subcommand].get("weights_only") is False:
            raise ConfigError(
                "--weights_only=false would let a checkpoint run code when it is loaded; ssl_app loads them with true"
            )
        self.config_snapshot = self._current_config()

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        """The configured trainer, writing checkpoints atomically unless a CheckpointIO is configured."""
        plugins = (self._get(self.config_init, "trainer", default={}) or {}).get("plugins")
        plugins = [] if plugins is None else list(plugins) if isinstance(plugins, list) else [plugins]
        if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
            plugins.append(AtomicCheckpointIO())
        problem = trainer_problem(self._get(self.config_init, "trainer", default={}))
        if problem is not None:  # said before the imports too (ssl_app.cli.early_values); here for what that missed
            raise ConfigError(problem)
        try:
            trainer = super().instantiate_trainer(plugins=plugins, **kwargs)
        except (TypeError, ValueError) as error:  # Lightning's own checks of a Trainer option (issue 40)
            options = self._get(self.config_init, "trainer", default={}) or {}
            raise ConfigError(trainer_option_error(error, options)) from error
        if trainer.fast_dev_run:
            # fast_dev_run saves no checkpoint, but ModelCheckpoint's on_train_end still writes last.ckpt when
            # save_last is set (Lightning 2.6), into ./checkpoints since no logger names a folder
            for callback in trainer.checkpoint_callbacks:
                callback.save_last = False
        return trainer

    # --- the subcommands: vet the checkpoint, keep the record, remove what a failed start left ----
    def fit(self, model: Any, **kwargs: Any) -> None:
        self._run_guarded("fit", model, **kwargs)

    def validate(self, model: Any, **kwargs: Any) -> None:
        self._run_guarded("validate", model, **kwargs)

    def test(self, model: Any, **kwargs: Any) -> None:
        self._run_guarded("test", model, **kwargs)

    def _run_guarded(self, subcommand: str, model: Any, **kwargs: Any) -> None:
        trainer = self.trainer
        plan = self.plan or RunPlan(kind=subcommand)
        if plan.finished is not None:
            self._already_finished(trainer, plan.kind, plan.finished)
            return
        reason = None
        if self._checkpoint is not None:
            check_state_dict(self._checkpoint, model, str(kwargs.get("ckpt_path")))
            self._settle_input(subcommand, self._checkpoint, str(kwargs.get("ckpt_path")))
            if subcommand != "fit":  # an evaluation: the trainer's own epoch and step stay 0
                reason = f"checkpoint of epoch {self._checkpoint.get('epoch')}, step {self._checkpoint.get('global_step')}"
                self._evaluated_step = _step_of(self._checkpoint)
            self._checkpoint = None
        elif plan.kind == "linear" and isinstance(getattr(model, "hparams", {}).get("checkpoint"), str):
            encoder = model.hparams["checkpoint"]
            encoder_checkpoint = load_checkpoint(encoder, option="LinearProbe: checkpoint")
            self._evaluated_step = _step_of(encoder_checkpoint)
            self._settle_input("linear probe", encoder_checkpoint, encoder)
        kwargs["weights_only"] = True  # no checkpoint runs code when loaded (checked in before_instantiate_classes)
        for callback in trainer.callbacks:
            if isinstance(callback, KeepFirstConfig):
                callback.resuming = plan.checkpoint is not None and subcommand == "fit"
        log_dir = _log_dir(trainer)
        created_root = _first_missing_ancestor(Path(log_dir)) if log_dir is not None else None
        try:
            folder = self.recorder.begin(
                trainer,
                plan.kind,
                self.config_snapshot,
                checkpoint=plan.checkpoint,
                parent=relative_parent(Path(log_dir), plan.parent) if plan.parent is not None and log_dir else None,
                resume_changes=plan.resume_changes,
                run_id=plan.run_id,
                next_name=plan.next_name,
            )
            if folder is not None and log_dir is not None and folder.absolute() != Path(log_dir).absolute():
                created_root = folder  # another process took the first free number; this one claimed the next
            if plan.kind == "fit" and folder is not None and read_sweep_point(folder) is not None:
                share_study_texts(trainer.callbacks, folder)
            without_placeholder(trainer.loggers)  # the HParams config is the curated one (ssl_app.runs.panel)
            options = read_options(self.config_snapshot, [])
            describe_scalars(trainer.loggers, options)
            if plan.kind != "linear":
                write_layout(trainer.loggers, options)
            if plan.kind == "linear" and plan.parent is not None and trainer.is_global_zero and log_dir is not None:
                keep_earlier_curves(Path(log_dir))
            with known_noise_silenced(PROBE_WARNINGS, ()) if plan.kind == "linear" else nullcontext():
                getattr(trainer, subcommand)(model, **kwargs)
        except BaseException as error:
            _spare_this_process_from_the_child_observer()
            status, reason = record_ending(error, trainer, self.interrupt)
            self.recorder.end(trainer, status, reason)
            if created_root is not None and trainer.is_global_zero and trainer.global_step == 0:
                _remove_failed_start(created_root)
            raise
        reason = reason or f"finished at epoch {trainer.current_epoch}, step {trainer.global_step}"
        self.recorder.end(trainer, DONE, reason)
        if trainer.is_global_zero:
            self._summarise(trainer, plan.kind, f"{DONE}, {reason}")

    def _settle_input(self, command: str, checkpoint: dict[str, Any], path: str) -> None:
        """The encoder's crop size and normalisation as trained, unless set (``ssl_app.normalisation``), said in one line."""
        line = settle_input(self.datamodule, trained_input(checkpoint, path), command)
        if line is not None:
            info(line)

    def _summarise(self, trainer: Any, kind: str, ending: str) -> None:
        """The run's config in TensorBoard's HParams tab (``ssl_app.runs.panel``), and the console summary
        (``ssl_app.runs.summary``). A summary that cannot be written is one line: the run is done."""
        values = final_scalars(trainer)
        folder, parent = self.recorder.folder, self.plan.parent if self.plan is not None else None
        try:
            if kind == "fit":  # the fit's row; an evaluation's values go on its fit's row, never a row of their own
                point = read_sweep_point(folder) if folder is not None else None
                for logger in trainer.loggers:
                    write_hparams(logger, self.config_snapshot, values, point)
            elif parent is not None and not trainer.fast_dev_run:  # a smoke test's values are no evaluation's
                write_evaluation(parent, kind, values, self._evaluated_step)
        except OSError as error:
            info(f"the run's values were not added to TensorBoard's HParams tab: {error}")
        record = self.recorder.record
        if record is not None and folder is not None:  # from the record, as a re-run of the finished run prints it
            lines = record_summary_lines(record, folder)
        else:
            nowhere = "fast_dev_run logs and saves nothing" if trainer.fast_dev_run else None
            lines = summary_lines(_label(kind), ending, folder, values, self.config_snapshot, nowhere=nowhere)
        print("\n".join(lines), flush=True)

    def _already_finished(self, trainer: Any, kind: str, finished: Finished) -> None:
        """A re-run of a finished run (``RunPlan.finished``): one line saying so, then the run's summary
        from its record; nothing is trained, validated or written."""
        if not trainer.is_global_zero:
            return
        record = finished.record
        info(
            f"{_label(kind)}: {shown_path(finished.folder)} is already {record.status} ({record.exit_reason}; {finished.why}): "
            "nothing to train, and its record is kept as it is; to train it further, raise --trainer.max_epochs "
            "(or --trainer.max_steps)"
        )
        print("\n".join(record_summary_lines(record, finished.folder)), flush=True)


def keep_earlier_curves(folder: Path) -> None:
    """A probe resumed in its folder: its earlier ``metrics.csv`` (its curves so far, ``ssl_app.cli.plan.curves_as_csv``)
    becomes ``metrics_<n>.csv`` (n the next free), since Lightning's CSVLogger deletes the file it finds."""
    earlier = folder / "metrics.csv"
    if earlier.is_file():
        taken = {path.name for path in folder.glob("metrics_*.csv")}
        earlier.rename(folder / next(f"metrics_{n}.csv" for n in range(len(taken) + 1) if f"metrics_{n}.csv" not in taken))


def share_study_texts(callbacks: list[Any], folder: Path) -> None:
    """A sweep's fit (``<out>/<sweep>/<point>/seed<k>``, ``ssl_app.runs.layout``): the texts every fit of the study
    would repeat (``metrics/inputs``) are written once per study, by the first fit to write each."""
    for callback in callbacks:
        share = getattr(callback, "describe_inputs_once_in", None)
        if callable(share):
            share(folder.absolute().parent.parent)


def _step_of(checkpoint: Any) -> int:
    step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else 0


def _label(kind: str) -> str:
    return "linear probe" if kind == "linear" else kind


def _spare_this_process_from_the_child_observer() -> None:
    """Let this process finish its own way out when a DDP child failed.

    Lightning's subprocess launcher watches its child processes from a thread
    (``child-process-observer``) and, when one exits with an error, SIGKILLs every process within
    five seconds, this one included: under load that cut off this process's record and one-line
    error (exit -9). This process is stopping anyway; the watcher still stops the children.
    """
    for thread in threading.enumerate():
        children = getattr(thread, "_child_processes", None)
        if thread.name == "child-process-observer" and children is not None:
            thread._terminate_all = lambda children=children: [child.kill() for child in children]  # type: ignore[attr-defined]


def _plain(value: Any) -> Any:
    """Saved hyper-parameters as plain data: dataclasses (``Optimization``) become dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _keep_given_paths(update: dict[str, Any], model: Any) -> None:
    """A saved model option that names a file never replaces one this command gives (a probe's encoder
    ``checkpoint``): drop it from ``update`` and say which was kept."""
    given = model.get("init_args") if isinstance(model, Namespace) else None
    for container in (update.get("init_args"), update.get("dict_kwargs"), update):
        if not isinstance(container, dict) or "checkpoint" not in container:
            continue
        mine = given.get("checkpoint") if isinstance(given, Namespace) else None
        if mine is None:
            info(f"model.init_args.checkpoint taken from the checkpoint: {container['checkpoint']}")
            continue
        saved = container.pop("checkpoint")
        if saved != mine:
            info(f"model.init_args.checkpoint: kept {mine} (the checkpoint names {saved})")


def _check_devices(accelerator: Any, devices: Any) -> None:
    """``trainer.devices`` beyond the CPU cores (CPU runs); Lightning itself checks GPUs."""
    import torch

    on_cpu = accelerator == "cpu" or (accelerator in (None, "auto") and not torch.cuda.is_available())
    if not on_cpu:
        return
    try:
        count = int(devices)
    except (TypeError, ValueError):
        return
    available = os.cpu_count() or 1
    if count > available:
        raise ConfigError(
            f"trainer.devices={devices}: this machine has {available} CPU core(s) for accelerator={accelerator}; "
            f"use at most {available} (or -1 for all)"
        )


def trainer_option_error(error: BaseException, given: Any) -> str:
    """One line for ``error``, raised by Lightning while the Trainer is built from the user's ``given`` options:
    the option it names in backquotes, with its value (``trainer.devices: `devices` selected with `CPUAccelerator`
    should be an int > 0, got 'abc'``), else the whole ``trainer``. Lightning raises a ``TypeError`` or a
    ``ValueError`` (its ``MisconfigurationException`` is one) for a value it cannot use."""
    devices = devices_problem(given.get("devices")) if isinstance(given, (dict, Namespace)) else None
    if devices is not None:
        return devices  # the words said before the imports too
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    for name in re.findall(r"`(\w+)`", message):
        if isinstance(given, (dict, Namespace)) and name in given:
            return f"trainer.{name}: {message.rstrip('.')}, got {given[name]!r}"
    return f"trainer: {message}"


def _log_dir(trainer: Any) -> str | None:
    logger = trainer.logger
    if logger is None:
        return None
    try:
        return logger.log_dir  # computes (and fixes) the version without creating anything
    except Exception:  # noqa: BLE001 - a custom logger without a usable log_dir: nothing to clean up
        return None


def _first_missing_ancestor(path: Path) -> Path | None:
    """The top-most folder of ``path`` that does not exist yet (None if ``path`` exists)."""
    path = path.absolute()
    if _exists(path):
        return None
    while not _exists(path.parent):
        path = path.parent
    return path


def _exists(path: Path) -> bool:
    """``path.exists()``, False for a path the filesystem cannot even look up (a name too long)."""
    try:
        return path.exists()
    except OSError:
        return False


def _remove_failed_start(root: Path) -> None:
    """Remove ``root`` (created by this start) unless it holds a checkpoint."""
    if root.is_dir() and not any(root.rglob("*.ckpt")):
        shutil.rmtree(root, ignore_errors=True)


def trainer_defaults(interrupt: InterruptCheckpoint | None = None, recorder: RunRecorder | None = None) -> dict:
    return {
        "logger": {
            "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
            "init_args": {"save_dir": DEFAULT_RUN_DIR, "name": "default"},
        },
        "callbacks": [
            LearningRateMonitor(logging_interval="step"),
            interrupt or InterruptCheckpoint(),
            recorder or RunRecorder(),
            ConfigWinsOnResume(),
            FitOnlyCheckpointState(),
        ],
    }


def main(args: list[str] | None = None) -> LightningCLI:
    """Run a Trainer command (``fit``, ``validate``, ``test``) and return its CLI (``python -m ssl_app`` comes here
    through ``ssl_app.cli.entry.main``, which answers the other commands, ``--help`` and what it can refuse
    before Lightning is imported).

    A bad input becomes one ``error: ...`` line and exit status 2; a non-finite loss one
    ``error: ...`` line and status 1; a file that cannot be written (disk full, read-only
    folder) one line and status 1; SIGINT/SIGTERM during ``fit`` a checkpoint, a line naming
    it and the command that resumes, and status 128 + the signal number (130, 143).
    """
    argv = list(sys.argv[1:] if args is None else args)
    keep_freed_memory()  # also for the ssl-app entry point (a no-op after python -m ssl_app)
    interrupt = InterruptCheckpoint()
    recorder = RunRecorder()
    try:
        with signals_before_training(recorder), known_noise_silenced():
            check_config_files(argv)
            given = expand_in_argv(argv)  # τ as the sweep spells it (cosine:0.1-1), as its policy's config
            return SSLCLI(
                LightningModule,  # any method of ssl_app.methods, or ssl_app.evaluation.LinearProbe
                LightningDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                auto_configure_optimizers=False,
                trainer_defaults=trainer_defaults(interrupt, recorder),
                save_config_callback=KeepFirstConfig,
                save_config_kwargs={"overwrite": True},
                args=given if given != argv else args,
                parser_class=OneLineParser,
                parser_kwargs={"prog": "python -m ssl_app", "dump_header": [f"ssl_app {__version__}"], "epilog": LIST_HELP},
                recorder=recorder,
                interrupt=interrupt,
            )
    except BaseException as error:
        end = command_ending(error, argv, interrupt, recorder)
        if end is None:
            raise
        if end.message:
            report(end.message, every_rank=end.every_rank)
        if end.status is None:  # a bug: its traceback follows the line that says where the state is saved
            raise
        sys.exit(end.status)


class KeepFirstConfig(SaveConfigCallback):
    """``config.yaml`` of the run's first start: a resume into the same folder leaves it as it is (the
    record lists what the resume changed), so the file always says how the run began."""

    resuming = False  # set by the CLI for a fit from a checkpoint (Lightning sets trainer.ckpt_path after setup)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit" and self.resuming and not self.already_saved:
            log_dir = trainer.log_dir
            if log_dir is not None and (Path(log_dir) / self.config_filename).is_file():
                self.already_saved = True
                return
        super().setup(trainer, pl_module, stage)
