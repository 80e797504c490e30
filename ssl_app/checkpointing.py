"""Checkpoints that survive interruption.

- :class:`AtomicCheckpointIO`: every checkpoint is written to a temporary file in its own folder
  and renamed over the old one, so a crash mid-save leaves the previous file intact.
- :class:`InterruptCheckpoint`: SIGINT (Ctrl-C) and SIGTERM (pre-emption) during ``fit`` stop
  the run after the current step, on every rank at the same step, and write ``last.ckpt`` of
  that step (model, optimiser, scheduler, queue/bank, callback state, loop counters).
- :func:`find_last_checkpoint`, :func:`load_checkpoint`, :func:`check_state_dict`: what the CLI
  needs to resolve and vet ``--ckpt_path`` before a run folder is created.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import lightning as L
import torch
from fsspec.utils import get_protocol
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ssl_app.errors import ConfigError, NonFiniteError

LAST_CHECKPOINT = re.compile(r"last(-v\d+)?\.ckpt")


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a temporary file beside the target, fsync, then ``os.replace``.

    Lightning's own ``_atomic_save`` commits an fsspec transaction whose local temporary file
    lives in the system temp folder; when that is another filesystem than the run folder (node
    -local ``/tmp``, runs on NFS or Lustre), the commit is a copy that truncates the old
    checkpoint first. A rename inside one folder is atomic on POSIX filesystems. Remote paths
    (``s3://`` ...) keep Lightning's behaviour.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if get_protocol(str(path)) not in ("file", "local"):
            super().save_checkpoint(checkpoint, path, storage_options=storage_options)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except BaseException:
            if os.path.exists(temporary):
                os.remove(temporary)
            raise
        try:  # make the rename itself durable
            directory = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError:
            pass


def _write(text: str) -> None:
    """Write to stderr from a signal handler (``print`` may be interrupted mid-call)."""
    try:
        os.write(2, text.encode())
    except OSError:
        pass


class InterruptCheckpoint(Callback):
    """Stop on SIGINT/SIGTERM after the current step and checkpoint it; resume with ``--ckpt_path``.

    The first signal only sets a flag. After each training (and validation) batch the ranks
    agree whether any of them got one (a one-element all-reduce under DDP; nothing in one
    process); if so, every rank sets Lightning's ``received_sigterm``, so Lightning's loop
    raises its ``SIGTERMException`` after the step on every rank, and :meth:`on_exception`
    writes ``last.ckpt`` (all ranks take part, so none waits in a collective for a saving one).
    A second Ctrl-C quits at once without a checkpoint.

    Lightning's own SIGTERM notifier is replaced for the run: it broadcasts from inside the
    signal handler and each rank then raises at its own step, so under DDP a rank can wait in
    a collective for one that is saving (Lightning issue #20806).

    After a stop, ``signal_number``, ``saved_path``, ``step`` and ``epoch`` describe it. In one
    process, any other exception after the first step also writes ``last.ckpt`` (no work is
    lost to a crash); under DDP only stops that all ranks agreed on do, since a failure on one
    rank cannot be waited for safely by the others.

    Resuming: a checkpoint written during ``fit``'s validation makes the resumed run redo that
    whole validation (so the epoch's metrics and epoch checkpoint are not lost), and a resumed run
    gives the training dataloader the position in the epoch that the checkpoint saved, where
    Lightning would drop it (so the epoch's sample order continues).
    """

    def __init__(self) -> None:
        super().__init__()
        self._reset()
        self._previous_sigint: Any = None
        self._trainer: L.Trainer | None = None
        self._saving_mid_validation = False

    def _reset(self) -> None:
        self.requested: int | None = None
        self._interrupts = 0
        self.stopping = False
        self.signal_number: int | None = None
        self.saved_path: str | None = None
        self.unsaved_reason: str | None = None
        self.step: int | None = None
        self.epoch: int | None = None

    # --- signals ----------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != TrainerFn.FITTING.value:
            return
        self._reset()
        self._trainer = trainer
        # Lightning registers ``_sigterm_notifier_fn`` as the SIGTERM handler just before training.
        trainer._signal_connector._sigterm_notifier_fn = self._on_signal  # type: ignore[method-assign]

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_signal)
        self._resume_dataloader_position(trainer)

    def _restore_sigint(self) -> None:
        if self._previous_sigint is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous_sigint)
        self._previous_sigint = None

    def _on_signal(self, signum: int, frame: Any) -> None:
        trainer = self._trainer
        if signum == signal.SIGINT:
            self._interrupts += 1
            if self._interrupts > 1:  # a second Ctrl-C (a SIGTERM forwarded by rank 0 does not count)
                _write("\nSecond Ctrl-C: quitting now, without a checkpoint.\n")
                self._kill_children(signal.SIGKILL)
                os._exit(128 + signal.SIGINT)
        if self.requested is not None:
            return
        self.requested = signum
        if trainer is None or trainer.is_global_zero:
            name = signal.Signals(signum).name
            _write(
                f"\n{name} received: stopping after the current step and saving a checkpoint (Ctrl-C again quits without one).\n"
            )
        # Processes started by this one (Lightning's DDP launcher) may not have got the signal.
        self._kill_children(signal.SIGTERM)

    def _kill_children(self, signum: int) -> None:
        launcher = getattr(getattr(self._trainer, "strategy", None), "launcher", None)
        if launcher is not None and hasattr(launcher, "kill") and getattr(launcher, "procs", None):
            with contextlib.suppress(OSError):  # a child already gone
                launcher.kill(signum)

    # --- the agreed stop ----------------------------------------------------------------------
    def _agree(self, trainer: L.Trainer) -> None:
        if self.stopping:
            return
        requested = self.requested is not None
        if trainer.world_size > 1:
            flag = torch.tensor(float(requested), device=trainer.strategy.root_device)
            requested = bool(trainer.strategy.reduce(flag, reduce_op="sum") > 0)
        if requested:
            self.stopping = True
            self.signal_number = self.requested or signal.SIGTERM
            # Lightning raises SIGTERMException after this step (after the module's hooks, the
            # scheduler and the logger step), on every rank since every rank sets it here.
            trainer._signal_connector.received_sigterm = True

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any) -> None:
        self._agree(trainer)

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._agree(trainer)

    # --- saving ---------------------------------------------------------------------------------
    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_sigint()
        if trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking or trainer.global_step == 0:
            return
        agreed = (isinstance(exception, SIGTERMException) and self.stopping) or isinstance(exception, NonFiniteError)
        if not agreed and trainer.world_size > 1:
            return
        if isinstance(exception, SIGTERMException) and not self.stopping:
            self.signal_number = signal.SIGTERM
        if isinstance(exception, NonFiniteError):
            bad = first_nonfinite(pl_module)
            if trainer.world_size > 1:  # buffers such as BatchNorm statistics differ between ranks: agree
                flag = torch.tensor(float(bad is not None), device=trainer.strategy.root_device)
                if bool(trainer.strategy.reduce(flag, reduce_op="sum") > 0):
                    bad = bad or "on another rank"
            if bad is not None:
                self.unsaved_reason = f"the model state is already non-finite ({bad}), so no checkpoint was written"
                return
        self.step, self.epoch = trainer.global_step, trainer.current_epoch
        self._saving_mid_validation = trainer.validating
        try:
            self.saved_path = save_last(trainer)
        except Exception as error:
            if agreed:
                raise
            # Saving after an arbitrary failure (say out of memory) may fail too: keep the original error.
            self.unsaved_reason = f"saving a checkpoint after the failure failed too ({type(error).__name__}: {error})"
        finally:
            self._saving_mid_validation = False

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if self._saving_mid_validation:
            self._restart_validation(checkpoint)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore_sigint()

    # --- resuming ------------------------------------------------------------------------------
    @staticmethod
    def _resume_dataloader_position(trainer: L.Trainer) -> None:
        """Give the training dataloader the position in the epoch that the resumed checkpoint saved.

        Lightning loads it when it sets the dataloader up, but a ``configure_optimizers`` that reads
        ``trainer.estimated_stepping_batches`` (ours does) sets it up earlier, before the checkpoint's
        loop state is restored, and the saved position is then never loaded (Lightning issue #20550,
        open in 2.6): the resumed epoch would start a fresh shuffle. Before the first batch, load it
        and restart the dataloader's iterator from it, as ``_FitLoop.setup_data`` would have.
        """
        loop = trainer.fit_loop
        fetcher = getattr(loop, "_data_fetcher", None)
        if not (loop.restarting and getattr(loop, "_combined_loader_states_to_load", None) and fetcher is not None):
            return
        loop._load_combined_loader_states()
        iter(fetcher)

    @staticmethod
    def _restart_validation(checkpoint: dict[str, Any]) -> None:
        """Make a checkpoint written during ``fit``'s validation restart that validation from its first batch.

        Lightning restarts a validation only from a checkpoint that caught it inside a step (a batch
        started but not processed: ``_EvaluationLoop.restarted_mid_evaluation``). One written between
        two validation batches, as a stop is, looks like one written after the validation: the resumed
        run skips it (``_TrainingEpochLoop.restarted_on_last``), and that epoch's validation metrics and
        its ModelCheckpoint are lost. So the validation's progress is set to what it would be inside
        its first step. Not inside the current one: Lightning would then run only as many batches as
        were left, counted from the first one (its fetcher starts at the completed count).
        """
        progress = checkpoint["loops"]["fit_loop"]["epoch_loop.val_loop.batch_progress"]
        total, current = progress["total"], progress["current"]
        earlier = total["completed"] - current["completed"]  # batches of the epoch's earlier validations
        total.update(ready=earlier + 1, started=earlier + 1, processed=earlier, completed=earlier)
        current.update(ready=1, started=1, processed=0, completed=0)
        progress["is_last_batch"] = False


def save_last(trainer: L.Trainer) -> str:
    """Write ``last.ckpt`` of the current state into the ModelCheckpoint folder; return its path."""
    callback = trainer.checkpoint_callback
    if isinstance(callback, ModelCheckpoint) and callback.dirpath:
        path = callback.format_checkpoint_name({}, filename=callback.CHECKPOINT_NAME_LAST)
        callback.last_model_path = path  # part of the saved callback state
    else:
        path = os.path.join(trainer.default_root_dir, "checkpoints", "last.ckpt")
    trainer.save_checkpoint(path)
    return path


def first_nonfinite(module: torch.nn.Module) -> str | None:
    """Name of the first floating parameter or buffer holding a NaN/inf (``None``: all finite)."""
    for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None


# --- resolving and vetting --ckpt_path -------------------------------------------------------------
def find_last_checkpoint(run_root: Path, version: str | None = None) -> Path | None:
    """The newest ``last.ckpt`` under ``run_root/<version or version_*>/checkpoints/``."""
    pattern = f"{version or 'version_*'}/checkpoints/*.ckpt"
    candidates = [path for path in run_root.glob(pattern) if LAST_CHECKPOINT.fullmatch(path.name)]
    return max(candidates, key=lambda path: path.stat().st_mtime, default=None)


def version_folder(checkpoint: Path, run_root: Path) -> str | None:
    """``version_<n>`` if ``checkpoint`` is ``run_root/version_<n>/checkpoints/<file>``, else None."""
    try:
        relative = checkpoint.resolve().relative_to(run_root.resolve())
    except ValueError:
        return None
    parts = relative.parts
    if len(parts) == 3 and re.fullmatch(r"version_\d+", parts[0]) and parts[1] == "checkpoints":
        return parts[0]
    return None


def load_checkpoint(path: str, option: str = "--ckpt_path") -> dict[str, Any]:
    """Load ``path`` on the CPU (memory-mapped), raising a ConfigError that says what is wrong."""
    file = Path(path)
    if not file.exists():
        raise ConfigError(f"{option}: no such file: {path}")
    if file.is_dir():
        raise ConfigError(f"{option}: {path} is a folder, not a checkpoint file")
    try:
        try:
            checkpoint = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:
            if "mmap" not in str(error) and "zip" not in str(error):
                raise
            checkpoint = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - whatever torch.load raises, the file is not a checkpoint
        raise ConfigError(f"{option}: {path} is not a readable checkpoint ({_load_failure(error)})") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise ConfigError(f"{option}: {path} is not a Lightning checkpoint (it has no state_dict)")
    return checkpoint


def _load_failure(error: BaseException) -> str:
    text = str(error)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(error).__name__)[:160]


def checkpoint_method(checkpoint: dict[str, Any]) -> str | None:
    """The class path of the method that wrote ``checkpoint`` (``None``: not recorded)."""
    hparams = checkpoint.get("hyper_parameters") or {}
    return hparams.get("_class_path") if isinstance(hparams, dict) else None


def check_state_dict(checkpoint: dict[str, Any], model: torch.nn.Module, path: str, option: str = "--ckpt_path") -> None:
    """Raise a ConfigError naming the first tensor that ``model`` and the checkpoint disagree on.

    Buffers that the model sizes from the data later (an empty memory bank) are not compared, nor
    the submodules it builds in ``setup`` (their key prefixes in ``model.state_built_in_setup``,
    e.g. a linear probe's classifier, whose width comes from the datamodule).
    """
    saved = checkpoint["state_dict"]
    expected = model.state_dict()
    method = checkpoint_method(checkpoint) or "another model"
    built_later = tuple(getattr(model, "state_built_in_setup", ()))
    unexpected = [key for key in saved if key not in expected and not (built_later and key.startswith(built_later))]
    missing = [key for key in expected if key not in saved]
    if missing or unexpected:
        detail = []
        if missing:
            detail.append(f"missing {', '.join(missing[:3])}" + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
        if unexpected:
            detail.append(
                f"unexpected {', '.join(unexpected[:3])}" + (f" and {len(unexpected) - 3} more" if len(unexpected) > 3 else "")
            )
        raise ConfigError(
            f"{option}: {path} does not fit {type(model).__name__} (it was written by {method}): {'; '.join(detail)}"
        )
    for key, tensor in expected.items():
        other = saved[key]
        if tuple(other.shape) != tuple(tensor.shape):
            if tensor.dim() >= 1 and tensor.shape[0] == 0:
                continue  # sized from the data in setup (memory bank)
            raise ConfigError(
                f"{option}: {path} does not fit this {type(model).__name__}: {key} has shape "
                f"{list(other.shape)} in the checkpoint but {list(tensor.shape)} in the model "
                "(check model.init_args such as proj_dim, proj_hidden_dim, backbone, queue_size)"
            )


def resume_hint(argv: list[str], checkpoint: str) -> str:
    """The command line that resumes from ``checkpoint``: ``argv`` with ``--ckpt_path`` replaced."""
    import shlex

    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--ckpt_path":
            skip = True
            continue
        if arg.startswith("--ckpt_path="):
            continue
        kept.append(arg)
    return shlex.join([Path(sys.executable).name, "-m", "ssl_app", *kept, f"--ckpt_path={checkpoint}"])
