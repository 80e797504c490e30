"""``python -m ssl_app {fit,validate,test} --config X.yaml``: LightningCLI in subclass mode.

Any method (``--model ssl_app.methods.SimCLR``) and any datamodule
(``--data datamodules.CIFAR10DataModule``) is chosen by class path, from YAML or the command
line. Every run gets a ``ModelCheckpoint`` that also keeps ``last.ckpt`` (options under
``--checkpoint.*``), a ``NumericalHealth`` check (``--health.*``), a checkpoint of the current
step on SIGINT/SIGTERM, atomic checkpoint writes, a learning-rate monitor, and a TensorBoard
logger writing to ``runs/<name>/version_<n>/``.

``--ckpt_path last`` resumes the newest ``last.ckpt`` under ``runs/<name>/version_*/`` and keeps
logging into that version folder (so do explicit paths inside one); without any checkpoint
yet it starts a new run, so one command line serves the first start and every restart.

Errors before work: every rejected input is one ``error: ...`` line naming the option or file,
exit status 2, and nothing is written (a run folder created by a start that then failed before
its first step is removed again).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

from jsonargparse import Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ssl_app import __version__
from ssl_app.checkpointing import (
    AtomicCheckpointIO,
    InterruptCheckpoint,
    check_state_dict,
    checkpoint_method,
    find_last_checkpoint,
    load_checkpoint,
    resume_hint,
    version_folder,
)
from ssl_app.errors import ConfigError, NonFiniteError
from ssl_app.health import NumericalHealth
from ssl_app.runtime import keep_freed_memory

DEFAULT_RUN_DIR = "runs"

# Packages whose constructors validate their options: a ValueError/TypeError raised from one of
# them while the config is instantiated is a bad input, reported like a ConfigError.
_APP_PACKAGES = ("ssl_app", "callbacks", "datamodules")
_ROOT = Path(__file__).resolve().parents[1]


class _Parser(LightningArgumentParser):
    """A parser whose errors are one line, not the 80-line usage and nested report that precede it."""

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


class SSLCLI(LightningCLI):
    _checkpoint: dict | None = None

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

    # --- before anything is instantiated -----------------------------------------------------
    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        # Runs before LightningCLI reads the checkpoint's hyper-parameters into the config.
        self._resolve_ckpt_path()

    def _resolve_ckpt_path(self) -> None:
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        ckpt_path = config.get("ckpt_path")
        if ckpt_path is None or ckpt_path in ("best", "hpc") or str(ckpt_path).startswith("registry:"):
            return
        logger_args = _logger_init_args(config.get("trainer"))
        run_root = Path(str(logger_args.save_dir)) / str(logger_args.name or "") if logger_args is not None else None
        if ckpt_path == "last":
            version = _version_name(logger_args.get("version")) if logger_args is not None else None
            found = find_last_checkpoint(run_root, version) if run_root is not None else None
            if found is None:
                where = f"{run_root}/{version or 'version_*'}/checkpoints/" if run_root is not None else "the logger's folder"
                if subcommand != "fit":
                    raise ConfigError(f"--ckpt_path last: no last.ckpt under {where}")
                _info(f"--ckpt_path last: no last.ckpt under {where} yet, so this starts a new run")
                config.ckpt_path = None
                return
            _info(f"--ckpt_path last: resuming {found}")
            config.ckpt_path = ckpt_path = str(found)
        self._checkpoint = load_checkpoint(str(ckpt_path))
        method = checkpoint_method(self._checkpoint)
        model = config.get("model")
        wanted = model.get("class_path") if isinstance(model, Namespace) else None
        if method and wanted and method != wanted:
            raise ConfigError(
                f"--ckpt_path {ckpt_path} was written by {method}, but the model is {wanted}; "
                f"pass --model {method} (or its config) to use this checkpoint"
            )
        _note_replaced_options(self._checkpoint, model)
        if subcommand == "fit" and logger_args is not None and logger_args.get("version") is None:
            version = version_folder(Path(ckpt_path), run_root)
            if version is not None:
                logger_args.version = version  # keep logging into the checkpoint's run

    def before_instantiate_classes(self) -> None:
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        trainer = self.config[subcommand].get("trainer") or Namespace()
        _check_devices(trainer.get("accelerator"), trainer.get("devices"))

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        """The configured trainer, writing checkpoints atomically unless a CheckpointIO is configured."""
        plugins = (self._get(self.config_init, "trainer", default={}) or {}).get("plugins")
        plugins = [] if plugins is None else list(plugins) if isinstance(plugins, list) else [plugins]
        if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
            plugins.append(AtomicCheckpointIO())
        return super().instantiate_trainer(plugins=plugins, **kwargs)

    # --- the subcommands: vet the checkpoint, then remove what a failed start left behind --------
    def fit(self, model: Any, **kwargs: Any) -> None:
        self._run_guarded("fit", model, **kwargs)

    def validate(self, model: Any, **kwargs: Any) -> None:
        self._run_guarded("validate", model, **kwargs)

    def test(self, model: Any, **kwargs: Any) -> None:
        self._run_guarded("test", model, **kwargs)

    def _run_guarded(self, subcommand: str, model: Any, **kwargs: Any) -> None:
        trainer = self.trainer
        if self._checkpoint is not None:
            check_state_dict(self._checkpoint, model, str(kwargs.get("ckpt_path")))
            self._checkpoint = None
        log_dir = _log_dir(trainer)
        created_root = _first_missing_ancestor(Path(log_dir)) if log_dir is not None else None
        try:
            getattr(trainer, subcommand)(model, **kwargs)
        except BaseException:
            if created_root is not None and trainer.is_global_zero and trainer.global_step == 0:
                _remove_failed_start(created_root)
            raise


def _note_replaced_options(checkpoint: dict, model: Any) -> None:
    """Say which model options LightningCLI is about to take from the checkpoint instead of the config."""
    hparams = checkpoint.get("hyper_parameters")
    init_args = model.get("init_args") if isinstance(model, Namespace) else None
    if not isinstance(hparams, dict) or not isinstance(init_args, Namespace):
        return
    replaced = []
    for key, saved in hparams.items():
        if key.startswith("_") or key not in init_args:
            continue
        current = init_args[key]
        current = current.as_dict() if isinstance(current, Namespace) else current
        if current != saved:
            replaced.append(f"{key}={saved!r} (config: {current!r})")
    if replaced:
        _info("--ckpt_path: the checkpoint's model options replace the config's: " + ", ".join(replaced))


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
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def _remove_failed_start(root: Path) -> None:
    """Remove ``root`` (created by this start) unless it holds a checkpoint."""
    if root.is_dir() and not any(root.rglob("*.ckpt")):
        shutil.rmtree(root, ignore_errors=True)


def trainer_defaults(interrupt: InterruptCheckpoint | None = None) -> dict:
    return {
        "logger": {
            "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
            "init_args": {"save_dir": DEFAULT_RUN_DIR, "name": "default"},
        },
        "callbacks": [LearningRateMonitor(logging_interval="step"), interrupt or InterruptCheckpoint()],
    }


def main(args: list[str] | None = None) -> LightningCLI:
    """Run the CLI and return it.

    A bad input becomes one ``error: ...`` line and exit status 2; a non-finite loss one
    ``error: ...`` line and status 1; SIGINT/SIGTERM during ``fit`` a checkpoint, a line naming
    it and the command that resumes, and status 128 + the signal number (130, 143).
    """
    keep_freed_memory()  # also for the ssl-app entry point (a no-op after python -m ssl_app)
    interrupt = InterruptCheckpoint()
    argv = list(sys.argv[1:] if args is None else args)
    try:
        return SSLCLI(
            LightningModule,  # any method of ssl_app.methods, or ssl_app.evaluation.LinearProbe
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            auto_configure_optimizers=False,
            trainer_defaults=trainer_defaults(interrupt),
            save_config_kwargs={"overwrite": True},
            args=args,
            parser_class=_Parser,
            parser_kwargs={"prog": "python -m ssl_app", "dump_header": [f"ssl_app {__version__}"]},
        )
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
    except Exception as error:
        nonfinite = _find_in_chain(error, NonFiniteError)
        if nonfinite is not None:
            message = f"error: {nonfinite}"
            if interrupt.saved_path is not None:
                message += (
                    f"\nThe last good state is in {interrupt.saved_path}; resume with: "
                    f"{resume_hint(argv, interrupt.saved_path)} (e.g. with a lower learning rate, or --health.on_nonfinite=skip)"
                )
            elif interrupt.unsaved_reason:
                message += f"\n{interrupt.unsaved_reason}; the previous last.ckpt, if any, is the last good state"
            _report(message)
            sys.exit(1)
        saved = (
            f"\nThe state of step {interrupt.step} is saved in {interrupt.saved_path}; resume with: "
            f"{resume_hint(argv, interrupt.saved_path)}"
            if interrupt.saved_path is not None
            else ""
        )
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
        if relative is not None and relative.parts[0] in _APP_PACKAGES and code.co_name == "__init__":
            owner = tb.tb_frame.f_locals.get("self")
            return type(owner).__name__ if owner is not None else relative.stem
        tb = tb.tb_next
    return None
