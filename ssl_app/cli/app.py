"""``python -m ssl_app {fit,validate,test} --config X.yaml``: LightningCLI in subclass mode.

``python -m ssl_app list [KIND ...]``, ``export`` and ``embed`` are not Trainer subcommands: ``main``
hands them to ``ssl_app.cli.listing``, ``ssl_app.cli.export`` and ``ssl_app.cli.embed`` before LightningCLI
parses anything. Lightning's ``predict`` is not offered (``embed`` writes the features).

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
its first step is removed again).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, NoReturn, Optional

import yaml
from jsonargparse import Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ssl_app import __version__
from ssl_app.checkpointing import (
    LAST_CHECKPOINT,
    AtomicCheckpointIO,
    ConfigWinsOnResume,
    FitOnlyCheckpointState,
    InterruptCheckpoint,
    check_state_dict,
    checkpoint_method,
    is_weights_only,
    load_checkpoint,
    output_error,
    resume_hint,
)
from ssl_app.cli.listing import KINDS as LIST_KINDS
from ssl_app.errors import ConfigError, NonFiniteError, OutputError
from ssl_app.health import NumericalHealth
from ssl_app.normalisation import settle_input, trained_input
from ssl_app.quiet import PROBE_WARNINGS, known_noise_silenced
from ssl_app.resume import (
    Finished,
    check_same_experiment,
    checkpoint_config,
    checkpoint_run_id,
    describe_changes,
    find_last,
    finished_run,
)
from ssl_app.runs.identity import describe_differences, differences, flatten
from ssl_app.runs.layout import EVALUATIONS_DIR, next_evaluation_name, relative_parent, run_folder_of_checkpoint
from ssl_app.runs.record import DIVERGED, DONE, FAILED, INTERRUPTED
from ssl_app.runs.recorder import NextName, RunRecorder, final_scalars
from ssl_app.runs.summary import log_final_hparams, record_summary_lines, shown_path, summary_lines, without_placeholder
from ssl_app.runtime import keep_freed_memory
from ssl_app.signals import handling

DEFAULT_RUN_DIR = "runs"
LIST_HELP = (
    f"Also: python -m ssl_app list [{'|'.join(LIST_KINDS)}] prints what can be chosen, one line each, "
    "with the option that selects it; python -m ssl_app export --ckpt CKPT --out encoder.pt writes the trained "
    "backbone; python -m ssl_app embed --ckpt CKPT [--data PATH] --out features.npz writes features of a data set."
)
#: Subcommands ``main`` runs itself, not through LightningCLI: name → module with ``main(args) -> status``.
OWN_SUBCOMMANDS = {"list": "ssl_app.cli.listing", "export": "ssl_app.cli.export", "embed": "ssl_app.cli.embed"}

# Packages whose constructors validate their options: a ValueError/TypeError raised from one of
# them while the config is instantiated is a bad input, reported like a ConfigError.
_APP_PACKAGES = ("ssl_app", "callbacks", "datamodules")
_ROOT = Path(__file__).resolve().parents[2]


class _Parser(LightningArgumentParser):
    """A parser whose errors are one line, not the 80-line usage and nested report that precede it.

    It takes no abbreviations (``--trainer.max_epoch`` is not ``max_epochs``): the subcommands' parsers
    and the parsers jsonargparse makes for a class's options (``--model.init_args.*``) are of this class too.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:
            super().error(message, ex)
        prog = self.prog.replace(" [options]", "")
        sys.stderr.write(f"error: {condense_parser_error(message)}\n(options: {prog} --help)\n")
        sys.exit(2)


def condense_parser_error(message: str) -> str:
    """jsonargparse's nested report → ``<option>: <innermost reason>`` (one line).

    ``Parser key "model": ... Problem with given class_path 'X': Parser key "loss": ...
    Expected a <class 'float'>. Got value: nan`` becomes
    ``model.init_args.loss.init_args.temperature: Expected a <class 'float'>. Got value: nan``.
    Alternatives that merely say a value is not ``None`` are ignored. A message without that
    structure is returned with its lines joined.
    """
    lines = [line for line in message.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("Parser key"):
        return " ".join(line.strip() for line in lines)
    keys: list[str] = []
    depth_of: list[int] = []
    reason = ""
    class_path = ""
    skipping_indent: int | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if skipping_indent is not None:
            if indent > skipping_indent:
                continue
            skipping_indent = None
        if text.startswith(("- Expected a <class 'NoneType'>", "Given value")):
            skipping_indent = indent
            continue
        while depth_of and indent <= depth_of[-1]:
            depth_of.pop()
            keys.pop()
        match = re.match(r'(?:- )?Parser key "([^"]+)":', text)
        if match:
            prefix = "init_args." if class_path and keys else ""
            keys.append(prefix + match.group(1))
            depth_of.append(indent)
            class_path = ""
            continue
        match = re.match(r"(?:- )?Problem with given class_path '([^']+)':", text)
        if match:
            class_path = match.group(1)
            continue
        if text.startswith(("Does not validate against", "Subtypes:", "Errors:", "- Problem with")):
            continue
        if not reason:
            reason = text.lstrip("- ")
            if class_path and reason.startswith("Option"):
                reason += f" by {class_path}"
            break
    option = ".".join(keys)
    if not reason:
        return " ".join(line.strip() for line in lines)
    return f"{option}: {reason}" if option else reason


@dataclass
class RunPlan:
    """What the parsed command will do with run folders, decided before anything is built.

    ``kind``: fit, validate, test or linear (a fit of a linear probe). ``parent``: the run an
    evaluation or a probe belongs to. ``checkpoint``: the resolved ``--ckpt_path``. ``next_name``:
    how to name the next free folder when the logger's version is automatic. ``resume_changes``:
    the options this command changes on a resume, for the record. ``finished``: the checkpoint is
    the final state of a finished run that this command would not train further (a no-op re-run).
    """

    kind: str
    parent: Optional[Path] = None
    checkpoint: Optional[str] = None
    next_name: Optional[NextName] = None
    resume_changes: dict[str, Any] = field(default_factory=dict)
    run_id: Optional[str] = None
    finished: Optional[Finished] = None


class SSLCLI(LightningCLI):
    """LightningCLI plus the run folders: the record, the lock, resume checks, evaluations filed with their run."""

    _checkpoint: dict | None = None

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
        """Resolve ``--ckpt_path``, check it against the config, and decide which folder the run writes."""
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        model = config.get("model")
        class_path = model.get("class_path") if isinstance(model, Namespace) else None
        probe = subcommand == "fit" and _is_probe(class_path)
        plan = self.plan = RunPlan(kind="linear" if probe else subcommand)
        logger_args = _logger_init_args(config.get("trainer"))
        attach = bool(config.get("attach_to_run", True)) and logger_args is not None
        if probe and attach:
            encoder = model.get("init_args", Namespace()).get("checkpoint")
            plan.parent = run_folder_of_checkpoint(encoder) if encoder else None
        family = _family(plan, logger_args)
        ckpt_path = config.get("ckpt_path")
        if ckpt_path == "last":
            ckpt_path = config.ckpt_path = self._resolve_last(subcommand, family, logger_args)
        if ckpt_path is None or ckpt_path in ("best", "hpc") or str(ckpt_path).startswith("registry:"):
            self._choose_new_folder(plan, logger_args, family)
            return
        plan.checkpoint = str(ckpt_path)
        self._checkpoint = load_checkpoint(str(ckpt_path))
        wanted = class_path
        method = checkpoint_method(self._checkpoint)
        if method and wanted and method != wanted:
            raise ConfigError(
                f"--ckpt_path {ckpt_path} was written by {method}, but the model is {wanted}; "
                f"pass --model {method} (or its config) to use this checkpoint"
            )
        if not wanted and method and not method.startswith(_APP_PACKAGES):
            raise ConfigError(
                f"--ckpt_path {ckpt_path} was written by {method}, which is not part of ssl_app; name it with --model {method} "
                "to load it (its module is imported)"
            )
        if subcommand == "fit":
            self._plan_resume(plan, Path(ckpt_path), logger_args, family, bool(config.get("resume_anyway")))
        else:
            plan.parent = run_folder_of_checkpoint(ckpt_path) if attach else None
            self._choose_new_folder(plan, logger_args, family)

    def _resolve_last(
        self, subcommand: str, family: Optional[tuple[Path, str]], logger_args: Optional[Namespace]
    ) -> Optional[str]:
        """``--ckpt_path last``: the newest ``last.ckpt`` of this experiment in the run family (``ssl_app.resume``)."""
        if family is None:
            raise ConfigError("--ckpt_path last needs a TensorBoard or CSV logger with a save_dir (trainer.logger)")
        root, pattern = family
        current = self._current_config() if subcommand == "fit" else None
        found = find_last(root, pattern, current)
        for folder, why in found.passed_over:
            _info(f"--ckpt_path last: passing over {folder}: another experiment ({why})")
        where = f"{root}/{pattern}/checkpoints/"
        if found.path is None:
            if subcommand != "fit":
                raise ConfigError(f"--ckpt_path last: no last.ckpt under {where}")
            _info(f"--ckpt_path last: no last.ckpt of this experiment under {where} yet, so this starts a new run")
            return None
        return str(found.path)

    def _plan_resume(
        self, plan: RunPlan, path: Path, logger_args: Optional[Namespace], family: Optional[tuple[Path, str]], anyway: bool
    ) -> None:
        """A fit from a checkpoint: refuse weights-only files and other experiments; note what changes."""
        checkpoint = self._checkpoint
        assert checkpoint is not None
        if is_weights_only(checkpoint):
            raise ConfigError(
                f"--ckpt_path {path} holds only weights (no optimiser or loop state; saved with save_weights_only), so "
                "training cannot resume from it: evaluate it with validate/test, probe it (LinearProbe's checkpoint), "
                "or start a new run"
            )
        current = self._current_config()
        saved = checkpoint_config(checkpoint, path)
        for note in check_same_experiment(str(path), saved, current, anyway):
            _info(note)
        plan.finished = finished_run(checkpoint, path, current.get("trainer") or {})
        if plan.finished is not None:
            return  # nothing to train: _run_guarded says so and prints the run's summary from its record
        plan.resume_changes = describe_changes(saved, current)
        plan.run_id = checkpoint_run_id(checkpoint)
        folder = path.absolute().parent.parent
        if family is not None and logger_args is not None and logger_args.get("version") is None:
            root, pattern = family
            if (
                path.absolute().parent.name == "checkpoints"
                and folder.parent == root.absolute()
                and fnmatch(folder.name, pattern)
            ):
                logger_args.version = folder.name  # keep logging into the checkpoint's own run
                if plan.parent is not None:
                    logger_args.save_dir, logger_args.name = str(plan.parent), EVALUATIONS_DIR
            else:
                self._choose_new_folder(plan, logger_args, family)
        changes = "; every option as in the checkpoint's run"
        if plan.resume_changes:
            found = [(key, change["checkpoint"], change["now"]) for key, change in plan.resume_changes.items()]
            changes = "; from this command, not the checkpoint: " + describe_differences(found, "checkpoint", "now", limit=8)
        _info(f"--ckpt_path: resuming {path} (epoch {checkpoint.get('epoch')}, step {checkpoint.get('global_step')}){changes}")

    def _choose_new_folder(self, plan: RunPlan, logger_args: Optional[Namespace], family: Optional[tuple[Path, str]]) -> None:
        """A new folder: an evaluation inside its run, or the logger's next ``version_<n>``."""
        if logger_args is None:
            return
        if plan.parent is not None and plan.kind != "fit":
            parent, kind = plan.parent, plan.kind
            logger_args.save_dir, logger_args.name = str(parent), EVALUATIONS_DIR
            logger_args.version = next_evaluation_name(parent, kind)
            plan.next_name = lambda _root: next_evaluation_name(parent, kind)
        elif logger_args.get("version") is None:
            plan.next_name = _next_version_name

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
            _info(f"{subcommand}: the model is configured as in the checkpoint's run: {changes}")

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
        return super().instantiate_trainer(plugins=plugins, **kwargs)

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
            self._checkpoint = None
        elif plan.kind == "linear" and isinstance(getattr(model, "hparams", {}).get("checkpoint"), str):
            encoder = model.hparams["checkpoint"]
            self._settle_input("linear probe", load_checkpoint(encoder, option="LinearProbe: checkpoint"), encoder)
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
            without_placeholder(trainer.loggers)  # the HParams tab shows the final metrics (ssl_app.runs.summary)
            with known_noise_silenced(PROBE_WARNINGS, ()) if plan.kind == "linear" else nullcontext():
                getattr(trainer, subcommand)(model, **kwargs)
        except BaseException as error:
            _spare_this_process_from_the_child_observer()
            status, reason = ending(error, trainer, self.interrupt)
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
            _info(line)

    def _summarise(self, trainer: Any, kind: str, ending: str) -> None:
        """The final metrics beside the config in TensorBoard's HParams tab, and the console summary
        (``ssl_app.runs.summary``). A summary that cannot be written is one line: the run is done."""
        values = final_scalars(trainer)
        try:
            for logger in trainer.loggers:
                log_final_hparams(logger, self.config_snapshot, values, trainer.global_step)
        except OSError as error:
            _info(f"the final metrics were not added to TensorBoard's HParams tab: {error}")
        record, folder = self.recorder.record, self.recorder.folder
        if record is not None and folder is not None:  # from the record, as a re-run of the finished run prints it
            lines = record_summary_lines(record, folder)
        else:
            lines = summary_lines(_label(kind), ending, folder, values, self.config_snapshot)
        print("\n".join(lines), flush=True)

    def _already_finished(self, trainer: Any, kind: str, finished: Finished) -> None:
        """A re-run of a finished run (``RunPlan.finished``): one line saying so, then the run's summary
        from its record; nothing is trained, validated or written."""
        if not trainer.is_global_zero:
            return
        record = finished.record
        _info(
            f"{_label(kind)}: {shown_path(finished.folder)} is already {record.status} ({record.exit_reason}; {finished.why}): "
            "nothing to train, and its record is kept as it is; to train it further, raise --trainer.max_epochs "
            "(or --trainer.max_steps)"
        )
        print("\n".join(record_summary_lines(record, finished.folder)), flush=True)


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


def ending(error: BaseException, trainer: Any, interrupt: Optional[InterruptCheckpoint]) -> tuple[str, str]:
    """The record's status and exit reason for a run that ended with ``error``."""
    nonfinite = _find_in_chain(error, NonFiniteError)
    if nonfinite is not None:
        return DIVERGED, str(nonfinite).split("\n")[0]
    if isinstance(error, StartInterrupted):
        return INTERRUPTED, f"{signal.Signals(error.signum).name} before the first step"
    if isinstance(error, (SIGTERMException, KeyboardInterrupt)) or (
        isinstance(error, SystemExit) and isinstance(error.__context__, KeyboardInterrupt)
    ):
        number = interrupt.signal_number if interrupt is not None and interrupt.signal_number else signal.SIGINT
        where = f"{signal.Signals(number).name} at epoch {trainer.current_epoch}, step {trainer.global_step}"
        saved = interrupt.saved_path if interrupt is not None else None
        return INTERRUPTED, where + (f"; saved {saved}" if saved else "; nothing saved")
    if _peer_failed(error):
        return FAILED, "another process of this run failed"
    lines = [line for line in str(error).splitlines() if line.strip()]
    return FAILED, f"{type(error).__name__}: {lines[0] if lines else ''}".strip()


class StartInterrupted(BaseException):
    """SIGINT/SIGTERM before training started (before ``InterruptCheckpoint`` takes the signals over)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def signals_before_training(recorder: RunRecorder) -> Iterator[None]:
    """Until training starts, SIGINT and SIGTERM raise :class:`StartInterrupted`, so a start interrupted
    while it sets up still removes the folder it created and says one line; the previous handlers
    come back afterwards. From the first training step on, ``InterruptCheckpoint`` handles them (Lightning
    calls earlier SIGTERM handlers too, so this one stands down once ``recorder`` saw training start)."""
    owner = os.getpid()

    def as_if_unhandled(signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a forked DataLoader worker inherited this handler: behave as without it
            as_if_unhandled(signum)
        elif not recorder.training_started:
            raise StartInterrupted(signum)
        elif not recorder.in_training:  # after training: the default behaviour again
            as_if_unhandled(signum)
        # during training Lightning calls InterruptCheckpoint's handler first, which stops the run cleanly

    with handling(handler):
        yield


def _family(plan: RunPlan, logger_args: Optional[Namespace]) -> Optional[tuple[Path, str]]:
    """Where this command's runs live and which folder names belong to it: ``(root, glob)``."""
    if plan.kind == "linear" and plan.parent is not None:
        return plan.parent / EVALUATIONS_DIR, "linear_*"
    if logger_args is None:
        return None
    root = Path(str(logger_args.save_dir)) / str(logger_args.get("name") or "")
    return root, _version_name(logger_args.get("version")) or "version_*"


def _next_version_name(root: Path) -> str:
    numbers = [int(p.name.split("_", 1)[1]) for p in root.glob("version_*") if p.name.split("_", 1)[1].isdigit()]
    return f"version_{max(numbers, default=-1) + 1}"


def _is_probe(class_path: Any) -> bool:
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
            _info(f"model.init_args.checkpoint taken from the checkpoint: {container['checkpoint']}")
            continue
        saved = container.pop("checkpoint")
        if saved != mine:
            _info(f"model.init_args.checkpoint: kept {mine} (the checkpoint names {saved})")


def _info(message: str) -> None:
    if rank_zero_only.rank == 0 and os.environ.get("LOCAL_RANK", "0") == "0":
        print(message, file=sys.stderr)


def _version_name(version: Any) -> str | None:
    if version is None:
        return None
    return version if isinstance(version, str) else f"version_{version}"


def _logger_init_args(trainer: Any) -> Namespace | None:
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
    """Run the CLI and return it.

    A bad input becomes one ``error: ...`` line and exit status 2; a non-finite loss one
    ``error: ...`` line and status 1; a file that cannot be written (disk full, read-only
    folder) one line and status 1; SIGINT/SIGTERM during ``fit`` a checkpoint, a line naming
    it and the command that resumes, and status 128 + the signal number (130, 143).
    """
    argv = list(sys.argv[1:] if args is None else args)
    if argv[:1] and argv[0] in OWN_SUBCOMMANDS:  # not a Trainer subcommand: no Trainer, no run folder
        sys.exit(importlib.import_module(OWN_SUBCOMMANDS[argv[0]]).main(argv[1:]))
    keep_freed_memory()  # also for the ssl-app entry point (a no-op after python -m ssl_app)
    interrupt = InterruptCheckpoint()
    recorder = RunRecorder()
    try:
        with signals_before_training(recorder), known_noise_silenced():
            check_config_files(argv)
            return SSLCLI(
                LightningModule,  # any method of ssl_app.methods, or ssl_app.evaluation.LinearProbe
                LightningDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                auto_configure_optimizers=False,
                trainer_defaults=trainer_defaults(interrupt, recorder),
                save_config_callback=KeepFirstConfig,
                save_config_kwargs={"overwrite": True},
                args=args,
                parser_class=_Parser,
                parser_kwargs={"prog": "python -m ssl_app", "dump_header": [f"ssl_app {__version__}"], "epilog": LIST_HELP},
                recorder=recorder,
                interrupt=interrupt,
            )
    except StartInterrupted as stop:
        _report(f"Interrupted by {signal.Signals(stop.signum).name} before the first step; nothing to save")
        sys.exit(128 + stop.signum)
    except SIGTERMException:
        if interrupt.signal_number is None:
            raise
        name = signal.Signals(interrupt.signal_number).name
        if interrupt.saved_path is not None:
            _report(
                f"Interrupted by {name} at epoch {interrupt.epoch}, step {interrupt.step}: saved {interrupt.saved_path}\n"
                f"Resume with: {resume_hint(argv, interrupt.saved_path)}"
            )
        else:
            _report(f"Interrupted by {name} before the first step; nothing to save")
        sys.exit(128 + interrupt.signal_number)
    except SystemExit as stop:
        if isinstance(stop.__context__, KeyboardInterrupt):  # Lightning's own Ctrl-C path (exit 1)
            _report("Interrupted by SIGINT; nothing to save")
            sys.exit(128 + signal.SIGINT)
        raise
    except Exception as error:
        nonfinite = _find_in_chain(error, NonFiniteError)
        if nonfinite is not None:
            _report(f"error: {nonfinite}\n{last_good_state(argv, interrupt, recorder)}")
            sys.exit(1)
        saved = (
            f"\nThe state of step {interrupt.step} is saved in {interrupt.saved_path}; resume with: "
            f"{resume_hint(argv, interrupt.saved_path)}"
            if interrupt.saved_path is not None
            else ""
        )
        unwritable = _unwritable(error)
        if unwritable is not None:
            _report(f"error: {unwritable}{saved}", every_rank=True)
            sys.exit(1)
        bad_input = _bad_input(error)
        if bad_input is None:
            if _peer_failed(error):
                _report(
                    "error: another process of this run failed (its error is above), so this one stopped too", every_rank=True
                )
                sys.exit(1)
            if saved:
                _report(saved.strip())
            raise
        _report(f"error: {bad_input}{saved}", every_rank=True)
        sys.exit(2)


def check_config_files(argv: list[str]) -> None:
    """Raise a ConfigError naming the ``--config`` file (and the line) that is not a YAML mapping of options.

    jsonargparse says ``Problems parsing config`` or ``Unexpected config`` without the file's name, and
    composed configs include others (their ``config:`` key, relative to the including file's folder).
    """
    given = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in ("--config", "-c")]
    given += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
    for name in given:
        _check_config_file(Path(name), None, set())


def _check_config_file(path: Path, included_by: Optional[Path], seen: set[Path]) -> None:
    if not path.is_file() or path.resolve() in seen:
        return  # not a file (jsonargparse reports it), or already read
    seen.add(path.resolve())
    where = f"--config {path}" if included_by is None else f"--config {included_by}: the config it includes, {path},"
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{where} is not valid YAML{at}: {error.problem or error.context}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"{where} cannot be read: {error}") from None
    if loaded is None:
        raise ConfigError(f"{where} is empty; a config is a mapping of options (key: value)")
    if not isinstance(loaded, dict):
        raise ConfigError(f"{where} holds a {type(loaded).__name__}, not a mapping of options (key: value)")
    included = loaded.get("config")
    for name in included if isinstance(included, list) else [included]:
        if isinstance(name, str):
            _check_config_file(path.parent / name, path, seen)


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


def last_good_state(argv: list[str], interrupt: InterruptCheckpoint, recorder: RunRecorder) -> str:
    """The line after a divergence: where the last good state is and the command that resumes it with
    a lower learning rate (a resume takes this command's learning rate: ``ConfigWinsOnResume``)."""
    lower = _lower_lr(recorder.config)
    replace = [f"--model.init_args.optim.lr={lower:g}"] if lower else []
    advice = (
        " (a tenth of the learning rate that diverged; lower it further if it diverges again)"
        if lower
        else " (with a lower learning rate, or --health.on_nonfinite=skip)"
    )
    if interrupt.saved_path is not None:
        path = interrupt.saved_path
        return f"The last good state is in {path}; resume with: {resume_hint(argv, path, replace)}{advice}"
    previous = _previous_last_checkpoint(recorder.folder)
    reason = f"{interrupt.unsaved_reason}; " if interrupt.unsaved_reason else "no checkpoint was written for this step; "
    reason = reason[0].upper() + reason[1:]
    if previous is not None:
        return f"{reason}the last good state is {previous}; resume with: {resume_hint(argv, str(previous), replace)}{advice}"
    return f"{reason}no earlier checkpoint exists: start again{advice}"


def _lower_lr(config: dict[str, Any]) -> float | None:
    """A tenth of the run's ``model.init_args.optim.lr``, when the config has one."""
    lr = flatten(config).get("model.init_args.optim.lr")
    if isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > 0:
        return lr / 10
    return None


def _previous_last_checkpoint(folder: Path | None) -> Path | None:
    if folder is None:
        return None
    found = [path for path in (folder / "checkpoints").glob("*.ckpt") if LAST_CHECKPOINT.fullmatch(path.name)]
    return max(found, key=lambda path: path.stat().st_mtime, default=None)


def _unwritable(error: BaseException) -> str | None:
    """``cannot write <file>: <reason>`` when ``error`` comes from a full disk or an unwritable folder."""
    found = _find_in_chain(error, OutputError)
    if found is not None:
        return str(found)
    reason = output_error(error)
    if reason is None:
        return None
    current: BaseException | None = error
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.filename:
            return f"cannot write {current.filename}: {reason}"
        current = current.__cause__ or current.__context__
    return f"cannot write the run's files: {reason}"


def _report(message: str, every_rank: bool = False) -> None:
    rank = rank_zero_only.rank
    if rank == 0:
        print(message, file=sys.stderr)
    elif every_rank:
        print(f"(rank {rank}) {message}", file=sys.stderr)


_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing")


def _peer_failed(error: BaseException) -> bool:
    """A collective failed because another rank exited (gloo/NCCL report a closed connection)."""
    from torch.distributed import DistNetworkError

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DistNetworkError) or (
            isinstance(current, RuntimeError) and any(text in str(current) for text in _PEER_GONE)
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def _find_in_chain(error: BaseException, kind: type) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _find_config_error(error: BaseException) -> ConfigError | None:
    """The ConfigError behind ``error``: jsonargparse wraps errors raised while instantiating."""
    found = _find_in_chain(error, ConfigError)
    return found if isinstance(found, ConfigError) else None


def _bad_input(error: BaseException) -> str | None:
    """The one-line message if ``error`` is a rejected input, else None (a bug: keep the traceback).

    Rejected inputs: a ConfigError anywhere in the chain; a ValueError or TypeError raised
    inside a constructor of this application's packages (callback and datamodule options
    validated with plain ValueErrors); Lightning's MisconfigurationException (trainer options).
    """
    config_error = _find_config_error(error)
    if config_error is not None:
        return _without_worker_traceback(str(config_error))
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MisconfigurationException):
            return f"trainer: {current}"
        owner = _app_constructor(current) if isinstance(current, (ValueError, TypeError)) else None
        if owner is not None:
            message = str(current)
            return message if message.startswith(owner) else f"{owner}: {message}"
        current = current.__cause__ or current.__context__
    return None


def _without_worker_traceback(message: str) -> str:
    """A DataLoader worker's error re-raised in the main process carries the worker's traceback:
    keep its last line, the original message."""
    if "Original Traceback" not in message:
        return message
    last = [line for line in message.splitlines() if line.strip()][-1]
    return re.sub(r"^[\w.]+(Error|Exception): ", "", last)


def _app_constructor(error: BaseException) -> str | None:
    """The class whose ``__init__`` (in this application's packages) ``error`` passed through, else None."""
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        try:
            relative = Path(code.co_filename).resolve().relative_to(_ROOT)
        except ValueError:
            relative = None
        constructor = code.co_name == "__init__" and relative is not None and relative != Path("ssl_app", "cli", "app.py")
        if constructor and relative.parts[0] in _APP_PACKAGES:
            owner = tb.tb_frame.f_locals.get("self")
            return type(owner).__name__ if owner is not None else relative.stem
        tb = tb.tb_next
    return None
