"""Checkpoints that survive interruption, and what a checkpoint carries across a resume.

- :class:`AtomicCheckpointIO`: every checkpoint is written to a temporary file in its own folder
  and renamed over the old one, so a crash mid-save leaves the previous file intact; a state with
  NaN/inf is refused (:func:`first_nonfinite_entry`); a full disk is one line (:func:`output_error`).
- :class:`InterruptCheckpoint`: SIGINT (Ctrl-C), SIGTERM (pre-emption) and SLURM's warning signals
  (SIGUSR1, SIGUSR2) during ``fit`` stop the run after the current step, on every rank at the same
  step, and write ``last.ckpt`` of that step (model, optimiser, scheduler, queue/bank, callback state, loop counters).
- :class:`ConfigWinsOnResume`: a resume takes this command's optimiser hyper-parameters.
- :class:`FitOnlyCheckpointState`: ``validate``/``test`` leave the checkpoint's ModelCheckpoint state unread.

Loading and checking a ``--ckpt_path`` before a run folder is created is ``ssl_app.resume``'s.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import os
import re
import signal
import threading
from typing import Any

import lightning as L
import torch
from fsspec.utils import get_protocol
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.optim.lr_scheduler import LambdaLR

from ssl_app.errors import NonFiniteError, OutputError, causes
from ssl_app.io.atomic import atomic_file
from ssl_app.signals import WARNING_SIGNALS

#: The stop signals this callback handles itself during training (SIGTERM comes through Lightning's handler).
OWN_SIGNALS = (signal.SIGINT, *WARNING_SIGNALS)

LAST_CHECKPOINT = re.compile(r"last(-v\d+)?\.ckpt")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints written whole or not at all, and never holding a NaN or an infinity.

    - ``torch.save`` to a temporary file beside the target, fsync, then ``os.replace``
      (``ssl_app.io.atomic.atomic_file``). Lightning's own ``_atomic_save`` commits an fsspec
      transaction whose local temporary file lives in the system temp folder; when that is
      another filesystem than the run folder (node-local ``/tmp``, runs on NFS or Lustre), the
      commit is a copy that truncates the old checkpoint first. A rename inside one folder is
      atomic on POSIX filesystems. Remote paths (``s3://`` ...) keep Lightning's behaviour.
    - Before writing, every floating tensor of the model state and the optimiser state is checked
      (:func:`first_nonfinite_entry`): a state that has diverged raises ``NonFiniteError`` naming
      the tensor, so the previous checkpoint stays the last good one. (A BatchNorm whose running
      variance overflowed to ``inf`` while the loss was still finite is the case this catches.)
    - A full disk or a read-only folder raises ``OutputError`` naming the file, not torch's
      ``inline_container.cc`` message.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        bad = first_nonfinite_entry(checkpoint)
        if bad is not None:
            where = f"epoch {checkpoint.get('epoch')}, step {checkpoint.get('global_step')}"
            raise NonFiniteError(
                f"refusing to write {path}: {bad} holds NaN or infinite values (the run diverged at {where}); "
                "the previous checkpoint is the last good state"
            )
        if get_protocol(str(path)) not in ("file", "local"):
            super().save_checkpoint(checkpoint, path, storage_options=storage_options)
            return
        try:
            with atomic_file(path) as file:
                torch.save(checkpoint, file)
        except (OSError, RuntimeError) as error:
            cause = output_error(error)
            if cause is None:
                raise
            raise OutputError(f"cannot write checkpoint {path}: {cause}") from error


#: Buffers allowed to hold ``-inf`` (never NaN or ``+inf``): PaCo's log class prior, ``log 0`` for a
#: class without training images.
NEG_INF_ALLOWED = (".log_prior",)


def first_nonfinite_entry(checkpoint: dict[str, Any]) -> str | None:
    """The first tensor of ``state_dict`` or ``optimizer_states`` with a NaN or infinite entry, named
    (``state_dict['backbone.1.running_var']``), or None when every one is finite.

    One host sync for the whole state (the per-tensor checks are stacked first).
    """
    named: list[tuple[str, torch.Tensor, bool]] = []
    for key, tensor in (checkpoint.get("state_dict") or {}).items():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.numel():
            named.append((f"state_dict[{key!r}]", tensor, key.endswith(NEG_INF_ALLOWED)))
    for index, optimizer in enumerate(checkpoint.get("optimizer_states") or []):
        for param, state in ((optimizer or {}).get("state") or {}).items():
            for name, tensor in (state or {}).items():
                if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.numel():
                    named.append((f"optimizer_states[{index}] parameter {param} {name}", tensor, False))
    if not named:
        return None
    with torch.no_grad():
        flags = [
            (~torch.isnan(t).any() & ~torch.isposinf(t).any()) if neg_inf_ok else torch.isfinite(t).all()
            for _, t, neg_inf_ok in named
        ]
        ok = torch.stack([flag.to(flags[0].device) for flag in flags])
        if bool(ok.all()):
            return None
        return named[int((~ok).nonzero()[0])][0]


_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}


def output_error(error: BaseException) -> str | None:
    """Why writing failed, in words, when ``error`` (or what caused it) is a full disk, a quota, a file
    size limit or a folder that cannot be written; None for any other error."""
    found = next((cause for cause in causes(error) if isinstance(cause, OSError) and cause.errno in _OUTPUT_ERRNOS), None)
    return os.strerror(found.errno) if found is not None else None


def _write(text: str) -> None:
    """Write to stderr from a signal handler (``print`` may be interrupted mid-call)."""
    try:
        os.write(2, text.encode())
    except OSError:
        pass


class InterruptCheckpoint(Callback):
    """Stop on a stop signal after the current step and checkpoint it; resume with ``--ckpt_path``.

    The stop signals (``ssl_app.signals.STOP_SIGNALS``): SIGINT, SIGTERM, and SLURM's warning signals
    SIGUSR1 and SIGUSR2, which would otherwise end the process by their default action. Data workers
    leave them all to this process (``ssl_app.workers``), so a signal to every process of the run stops
    it the same way as one to this process.

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
    rank cannot be waited for safely by the others. A divergence is saved only when its state is
    good (``NonFiniteError.state_is_good``: NumericalHealth refused the bad update, and every
    tensor is finite); otherwise the checkpoint written before stays the last good state and
    ``unsaved_reason`` says why nothing was written.

    Resuming: a checkpoint written during ``fit``'s validation makes the resumed run redo that
    whole validation (so the epoch's metrics and epoch checkpoint are not lost), and a resumed run
    gives the training dataloader the position in the epoch that the checkpoint saved, where
    Lightning would drop it (so the epoch's sample order continues).
    """

    def __init__(self) -> None:
        super().__init__()
        self._reset()
        self._previous_handlers: dict[int, Any] = {}
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
        # One signal path: SIGTERM (above). Lightning's SLURM auto-requeue (SIGUSR1: an hpc_ckpt_<n>.ckpt
        # in the root folder and `scontrol requeue`, resumed before --ckpt_path and without its checks) is off.
        environment = trainer._accelerator_connector.cluster_environment
        if isinstance(environment, SLURMEnvironment):
            environment.auto_requeue = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is threading.main_thread():  # SIGTERM: Lightning's handler calls ours
            self._previous_handlers = {signum: signal.signal(signum, self._on_signal) for signum in OWN_SIGNALS}
        self._resume_dataloader_position(trainer)

    def _restore_handlers(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self._previous_handlers.items():
                signal.signal(signum, handler)
        self._previous_handlers = {}

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
        self._restore_handlers()
        if trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking or trainer.global_step == 0:
            return
        agreed = (isinstance(exception, SIGTERMException) and self.stopping) or isinstance(exception, NonFiniteError)
        if not agreed and trainer.world_size > 1:
            return
        if isinstance(exception, SIGTERMException) and not self.stopping:
            self.signal_number = signal.SIGTERM
        if isinstance(exception, NonFiniteError):
            if not exception.state_is_good:  # this step's weights are what went non-finite: keep the checkpoint before
                self.unsaved_reason = "the state of this step is not a good one, so it was not saved"
                return
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
        self._restore_handlers()

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


class ConfigWinsOnResume(Callback):
    """On resume, the optimiser follows this command's config, not the checkpoint's.

    Lightning restores an optimiser with the hyper-parameters of its saved param groups (``lr``,
    ``momentum``, ``weight_decay``, ...) and a ``LambdaLR`` with its saved base rates, so
    ``--model.init_args.optim.lr=0.01`` on a resume would silently keep the checkpoint's rate —
    the very advice a divergence message gives would not work. This callback remembers what the
    config gave the fresh optimiser (``on_fit_start``: after ``configure_optimizers``, before the
    restore) and puts it back after the restore (``on_train_start``), keeping the restored state
    (momentum buffers, Adam moments, the schedule's step): the rate at the resumed step is then
    ``new base rate × the schedule's factor at that step``, whose length follows this command's
    ``max_epochs``. Without ``--ckpt_path`` it does nothing. ``changed`` lists what it changed.
    """

    def __init__(self) -> None:
        super().__init__()
        self._fresh_groups: list[list[dict[str, Any]]] = []
        self._fresh_bases: list[list[float]] = []
        self.changed: list[str] = []

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.changed = []
        if trainer.ckpt_path is None:
            self._fresh_groups, self._fresh_bases = [], []
            return
        self._fresh_groups = [
            [{key: copy.deepcopy(value) for key, value in group.items() if key != "params"} for group in optimizer.param_groups]
            for optimizer in trainer.optimizers
        ]
        self._fresh_bases = [list(getattr(config.scheduler, "base_lrs", [])) for config in trainer.lr_scheduler_configs]

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._fresh_groups:
            return
        changed: set[str] = set()
        scheduled = {id(config.scheduler.optimizer) for config in trainer.lr_scheduler_configs}
        for optimizer, fresh_groups in zip(trainer.optimizers, self._fresh_groups):
            for group, fresh in zip(optimizer.param_groups, fresh_groups):
                for key, value in fresh.items():
                    if key == "lr" and id(optimizer) in scheduled:
                        continue  # set from the schedule below
                    if group.get(key) != value:
                        changed.add("lr" if key == "initial_lr" else key)  # the schedule's copy of the base rate
                        group[key] = copy.deepcopy(value)
        for config, bases in zip(trainer.lr_scheduler_configs, self._fresh_bases):
            scheduler = config.scheduler
            if not bases or list(scheduler.base_lrs) == bases:
                continue
            changed.add("lr")
            scheduler.base_lrs = list(bases)
            if isinstance(scheduler, LambdaLR):
                rates = [base * factor(scheduler.last_epoch) for base, factor in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
                for group, rate in zip(scheduler.optimizer.param_groups, rates):
                    group["lr"] = rate
                scheduler._last_lr = rates  # what get_last_lr() and the LR monitor read
        self.changed = sorted(changed)
        self._fresh_groups, self._fresh_bases = [], []


class FitOnlyCheckpointState(Callback):
    """``validate`` and ``test`` of a checkpoint leave its ModelCheckpoint state unread.

    Every subcommand's trainer has the CLI's ModelCheckpoint (``--checkpoint.*``: one parser for
    all), and Lightning restores the callbacks' states whatever the stage. In an evaluation that
    callback's folder is the evaluation's (``evaluations/validate_<n>/checkpoints``, never created:
    an evaluation saves nothing), so it warned "The dirpath has changed" on every call about the
    best-k bookkeeping that only a resumed ``fit`` uses. The state is dropped from the loaded copy
    before the callbacks read it; the file is untouched.
    """

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        states = checkpoint.get("callbacks")
        if trainer.state.fn == TrainerFn.FITTING or not isinstance(states, dict):
            return
        for callback in trainer.callbacks:
            if isinstance(callback, ModelCheckpoint):
                states.pop(callback.state_key, None)


def save_last(trainer: L.Trainer) -> str:
    """Write ``last.ckpt`` of the current state into the ModelCheckpoint folder; return its path."""
    callback = trainer.checkpoint_callback
    if isinstance(callback, ModelCheckpoint) and callback.dirpath:
        path = callback.format_checkpoint_name({}, filename=callback.CHECKPOINT_NAME_LAST)
        callback.last_model_path = path  # part of the saved callback state
    else:
        path = os.path.join(trainer.default_root_dir, "checkpoints", "last.ckpt")
    trainer.save_checkpoint(path, weights_only=False)  # the full state, to resume from; said, so Lightning says nothing
    return path


def first_nonfinite(module: torch.nn.Module) -> str | None:
    """Name of the first floating parameter or buffer holding a NaN/inf (``None``: all finite)."""
    for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None
