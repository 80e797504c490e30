"""``python -m ssl_app {fit,validate,test} --config X.yaml``: LightningCLI in subclass mode.

Any method (``--model ssl_app.methods.SimCLR``) and any datamodule
(``--data datamodules.CIFAR10DataModule``) is chosen by class path, from YAML or the command
line. Every run gets a ``ModelCheckpoint`` that also keeps ``last.ckpt`` (options under
``--checkpoint.*``), a learning-rate monitor, and a TensorBoard logger writing to
``runs/<name>/version_<n>/``.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn, Optional

from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from ssl_app import __version__
from ssl_app.errors import ConfigError


DEFAULT_RUN_DIR = "runs"


class _Parser(LightningArgumentParser):
    """A parser whose errors are the message alone, not the 80-line usage that precedes it."""

    def error(self, message: str, ex: Optional[Exception] = None) -> NoReturn:
        if not self.exit_on_error:
            super().error(message, ex)
        prog = self.prog.replace(" [options]", "")
        sys.stderr.write(f"error: {message}\n(options: {prog} --help)\n")
        sys.exit(2)


class SSLCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.save_last": True, "checkpoint.filename": "epoch{epoch:03d}-step{step}", "checkpoint.auto_insert_metric_name": False})


def trainer_defaults() -> dict:
    return {
        "logger": {
            "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
            "init_args": {"save_dir": DEFAULT_RUN_DIR, "name": "default"},
        },
        "callbacks": [LearningRateMonitor(logging_interval="step")],
    }


def main(args: Optional[list[str]] = None) -> LightningCLI:
    """Run the CLI and return it; a ``ConfigError`` becomes one ``error: ...`` line and exit 2."""
    try:
        return SSLCLI(
            LightningModule,  # any method of ssl_app.methods, or ssl_app.evaluation.LinearProbe
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            auto_configure_optimizers=False,
            trainer_defaults=trainer_defaults(),
            save_config_kwargs={"overwrite": True},
            args=args,
            parser_class=_Parser,
            parser_kwargs={"prog": "python -m ssl_app", "dump_header": [f"ssl_app {__version__}"]},
        )
    except Exception as error:
        config_error = _find_config_error(error)
        if config_error is None:
            raise
        print(f"error: {config_error}", file=sys.stderr)
        sys.exit(2)


def _find_config_error(error: BaseException) -> Optional[ConfigError]:
    """The ConfigError behind ``error``: jsonargparse wraps errors raised while instantiating."""
    seen: set[int] = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ConfigError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
