"""The run record of this process, kept from the first line of work to the last (a Lightning callback).

The CLI calls :meth:`RunRecorder.begin` before ``trainer.fit/validate/test`` and
:meth:`RunRecorder.end` on every way out, with the status the way out means (``done``, ``failed``,
``interrupted``, ``diverged``). In between the callback

- claims the run folder: an automatic ``version_<n>`` (or ``validate_<n>`` …) is created with
  ``mkdir``, which only one process can win, so two starts racing for one number get two folders;
- holds the folder's lock (``ssl_app.io.lock``) so no second process writes into it;
- refuses to start a *new* run in a folder that already holds a run's checkpoints or events (an
  explicit ``--trainer.logger.init_args.version`` used twice), instead of mixing two runs;
- adds what identifies the data once the datamodule is set up (class, root, split sizes);
- puts the run's id and resolved config into every checkpoint (``state_dict``), so a resume can
  be checked against the experiment that wrote it (``ssl_app.resume``).

Only global rank 0 writes; the other ranks keep the config for their checkpoints' state.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import lightning as L
from lightning.pytorch.callbacks import Callback

from ssl_app.errors import ConfigError
from ssl_app.io.lock import RunLock
from ssl_app.runs.layout import CHECKPOINTS_DIR, has_event_file
from ssl_app.runs.record import RUNNING, RecordError, RunRecord, finish_record, read_record, start_record, write_record

#: ``claim``'s way to name the next free folder when the logger's version is chosen automatically.
NextName = Callable[[Path], str]


class RunRecorder(Callback):
    """Keeps this process's ``run.json`` (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.folder: Optional[Path] = None
        self.record: Optional[RunRecord] = None
        self.lock: Optional[RunLock] = None
        self.config: dict[str, Any] = {}
        self.run_id: Optional[str] = None
        self.training_started = False
        self.in_training = False

    # --- called by the CLI ----------------------------------------------------------------------
    def begin(
        self,
        trainer: L.Trainer,
        kind: str,
        config: dict[str, Any],
        *,
        checkpoint: Optional[str] = None,
        parent: Optional[str] = None,
        resume_changes: Optional[dict[str, Any]] = None,
        run_id: Optional[str] = None,
        next_name: Optional[NextName] = None,
    ) -> Optional[Path]:
        """Claim and lock the logger's folder and write the ``running`` record; return the folder.

        ``next_name``: when the logger's version was chosen automatically, how to name the next
        folder if another process took this one first. Returns None without a folder logger.
        """
        self.config, self.run_id = config, run_id
        logger = trainer.logger
        if logger is None or logger.log_dir is None or not trainer.is_global_zero:
            return None  # no logger, or Lightning's stand-in for one (``fast_dev_run``): nothing is recorded
        folder = claim(logger, next_name)
        lock = RunLock(folder)
        if not lock.acquire():
            raise ConfigError(
                f"{folder} is in use by {lock.holder()}: another process is writing this run; wait for it, or write "
                "elsewhere (--trainer.logger.init_args.version)"
            )
        try:
            resuming = checkpoint is not None and kind in ("fit", "linear")
            if not resuming or not is_own_folder(folder, checkpoint, run_id):
                refuse_second_run(folder)
            self.record = start_record(
                folder, kind, config, parent=parent, checkpoint=checkpoint, resume_changes=resume_changes, run_id=run_id
            )
        except BaseException:
            lock.release()
            raise
        self.folder, self.lock, self.run_id = folder, lock, self.record.run_id
        return folder

    def end(self, trainer: L.Trainer, status: str, reason: str) -> None:
        """Write the final status (rank 0) and release the folder; safe to call when ``begin`` did nothing."""
        self.in_training = False
        try:
            if self.record is not None and self.folder is not None and self.folder.is_dir():
                finish_record(
                    self.folder,
                    self.record,
                    status,
                    reason,
                    epoch=trainer.current_epoch,
                    step=trainer.global_step,
                    results=final_scalars(trainer),
                    collapse=collapse_summary(trainer),
                )
        finally:
            if self.lock is not None:
                self.lock.release()
            self.lock = None

    # --- Lightning hooks --------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.record is None or self.folder is None or self.record.status != RUNNING:
            return
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is not None:
            self.record.data = describe_data(datamodule)
            write_record(self.folder, self.record)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.training_started = self.in_training = True

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.in_training = False

    def state_dict(self) -> dict[str, Any]:
        # The data's description too: what a run read from its data (an image folder's crop size and
        # normalisation when the config leaves them null) must travel with the weights it trained.
        data = self.record.data if self.record is not None else None
        return {"run_id": self.run_id, "config": self.config, "data": data}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass  # the CLI reads it from the checkpoint file before the run starts (ssl_app.resume)


def claim(logger: Any, next_name: Optional[NextName]) -> Path:
    """The logger's folder, created by this call when the version is automatic (``next_name``)."""
    folder = Path(logger.log_dir)
    if next_name is None:
        _make_folder(folder)
        return folder
    _make_folder(folder.parent)
    for _ in range(1000):
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            logger._version = next_name(folder.parent)  # Lightning's loggers keep the chosen version here
            folder = Path(logger.log_dir)
    raise ConfigError(f"could not claim a free run folder under {folder.parent}")


#: Why a run folder cannot be made that no folder permission explains: a missing or unwritable root
#: (``/proc``), a file in the way, a name or path too long for the filesystem.
_UNMAKEABLE = {errno.ENOENT, errno.ENOTDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.EINVAL}


def _make_folder(folder: Path) -> None:
    """``folder`` and its parents, or a ConfigError naming it (a permission or a full disk: OutputError, ssl_app.cli)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        if error.errno not in _UNMAKEABLE:
            raise
        where = f" ({error.filename})" if error.filename and str(error.filename) != str(folder) else ""
        raise ConfigError(
            f"trainer.logger: cannot create the run folder {folder}{where}: {error.strerror} "
            "(check trainer.logger.init_args.save_dir, name and version)"
        ) from None


def is_own_folder(folder: Path, checkpoint: str, run_id: Optional[str]) -> bool:
    """Whether ``checkpoint`` resumes into its own run's folder: it lies in ``folder/checkpoints/``, or
    the run id it carries is the one of ``folder``'s record."""
    if Path(checkpoint).absolute().parent == (folder / CHECKPOINTS_DIR).absolute():
        return True
    try:
        previous = read_record(folder)
    except RecordError:
        return False
    return previous is not None and run_id is not None and previous.run_id == run_id


def refuse_second_run(folder: Path) -> None:
    """A new run must not write into a folder whose run left checkpoints or events."""
    checkpoints = folder / CHECKPOINTS_DIR
    left = (checkpoints.is_dir() and any(checkpoints.glob("*.ckpt"))) or has_event_file(folder)
    if not left:
        return
    try:
        previous = read_record(folder)
    except RecordError:
        previous = None
    what = (
        f"a {previous.status} run started {previous.started}" if previous is not None else "another run's checkpoints or events"
    )
    raise ConfigError(
        f"{folder} already holds {what}; resume it with --ckpt_path last (or a checkpoint in it), or write the new run "
        "elsewhere (another --trainer.logger.init_args.version)"
    )


def describe_data(datamodule: Any) -> dict[str, Any]:
    """What identifies a datamodule's data: its class, its root (absolute) and its split sizes."""
    described = getattr(datamodule, "describe", None)
    if callable(described):
        return described()
    kind = type(datamodule)
    info: dict[str, Any] = {"class_path": f"{kind.__module__}.{kind.__qualname__}"}
    root = getattr(datamodule, "root", None)
    if root is not None:
        info["root"] = os.path.abspath(os.fspath(root))
    return info


def final_scalars(trainer: L.Trainer) -> dict[str, float]:
    """The last logged scalar of every tag (``trainer.callback_metrics``), finite ones only."""
    values = {}
    for name, value in trainer.callback_metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError, RuntimeError):
            continue
        if math.isfinite(number):
            values[name] = number
    return values


def collapse_summary(trainer: L.Trainer) -> Optional[dict[str, Any]]:
    """The first collapse any callback reports (``collapse_summary()``), or None."""
    for callback in trainer.callbacks:
        summary = getattr(callback, "collapse_summary", None)
        if callable(summary):
            found = summary()
            if found:
                return found
    return None
