"""Never train on NaN: check the loss and the gradients before every optimiser step, on the device."""

from __future__ import annotations

from typing import Any, Literal, Optional

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from ssl_app.checks import check_int
from ssl_app.distributed import all_reduce_sum
from ssl_app.errors import ConfigError, NonFiniteError
from ssl_app.io.changes import logs_this_step

OnNonFinite = Literal["stop", "skip"]

# The record kept on the device (float32; steps are exact below 2**24): counters, then two events
# of EVENT, the first step skipped since the last read and the step that stops the run.
NEW_SKIPS, STREAK, STOP, LAST_STEP, LAST_LOSS = range(5)
EVENT = ("step", "epoch", "loss", "norm", "last_step", "last_loss", "streak")
FIRST, STOPPER = 5, 5 + len(EVENT)
RECORD = 5 + 2 * len(EVENT)
NOT_CHECKED = -1.0  # the gradient norm of a step whose gradients were not checked (a norm is >= 0 or NaN)


class NumericalHealth(Callback):
    """Stop (or skip the step) when a training loss or gradient is NaN or infinite.

    Before each optimiser step it checks the loss of the step (every micro-batch of an
    accumulated step) and, with ``check_gradients``, the total gradient norm (which is
    non-finite if any gradient entry is). The check runs after backward and before the update,
    so a bad step never reaches the weights or the optimiser state. Under DDP the ranks agree
    (one-element all-reduce, on the device), so every rank stops or skips the same step.

    On an accelerator the decision is taken on the device, and the host reads it only on the steps
    Lightning logs (``trainer.log_every_n_steps``), at the end of each training epoch and of the
    fit, and when a checkpoint is written: a step that does not log never waits for the GPU. On the
    other steps a fused optimiser (SGD, Adam, AdamW with ``fused=True``: what ``ssl_app.optim`` builds
    on CUDA) is handed the decision as GradScaler hands it its ``found_inf`` flag, and applies nothing
    of a bad step (parameters, state, Adam's step count) on the device, at no extra cost. Any other
    optimiser's update is masked: the parameters and their optimiser state (momentum buffers,
    Adam's moments and step count) are copied before the step and put back after it where the step
    was bad (``torch.where``, one per tensor). Where neither can undo a step — the first one, which
    creates the optimiser state, or state kept on another device than the parameters (non-capturable
    Adam's step count on a GPU is a host tensor) — the flag is read at once, as on a logged step, and
    the step is skipped by dropping its gradients. On the CPU (``read_every_step`` unset) the flag is
    read every step that way: a read costs nothing there, and the masking's copies would.

    - ``on_nonfinite: stop`` (default): raise ``NonFiniteError`` naming the bad step, the loss, the
      gradient norm and the last finite loss; the CLI then writes ``last.ckpt`` of the last good
      state (see ``ssl_app.checkpointing.InterruptCheckpoint``) and exits with status 1.
    - ``on_nonfinite: skip``: leave every parameter and its optimiser state untouched, warn, and
      count it: TensorBoard ``health/nonfinite_skips`` (on logged steps). After
      ``max_consecutive_skips`` skipped steps in a row it stops as above.

    The stop comes at the next read (at most ``log_every_n_steps`` steps later); from the bad step
    on, every update is masked, so the parameters and optimiser state are still those before it
    (Lightning's step counter, the schedule, BatchNorm statistics and MoCo's queue and key
    encoder go on until the read).

    Cost on an accelerator: no host-device synchronisation on a step that does not log (one on a
    logged step); a fused norm over the gradients when ``check_gradients`` and a few one-element
    kernels per step (and, with an optimiser that is not fused, a copy of the parameters and their
    state and one ``torch.where`` per tensor). Under fp16 mixed precision the gradient check is left
    to the GradScaler, which already skips such steps by design (and reads its own flag on every step).

    Args:
        on_nonfinite: ``stop`` or ``skip``.
        check_gradients: also check the gradient norm (a finite loss can still give NaN gradients).
        max_consecutive_skips: with ``skip``, stop after this many skipped steps in a row.
        read_every_step: read the flag on the host every step (``true``) or only on logged steps,
            masking the others on the device (``false``); unset: every step where the parameters
            are on the CPU, on logged steps elsewhere.
    """

    def __init__(
        self,
        on_nonfinite: OnNonFinite = "stop",
        check_gradients: bool = True,
        max_consecutive_skips: int = 10,
        read_every_step: Optional[bool] = None,
    ) -> None:
        super().__init__()
        if on_nonfinite not in ("stop", "skip"):
            raise ConfigError(f"NumericalHealth: on_nonfinite must be 'stop' or 'skip', got {on_nonfinite!r}")
        self.on_nonfinite = on_nonfinite
        self.check_gradients = bool(check_gradients)
        self.max_consecutive_skips = check_int(max_consecutive_skips, "NumericalHealth: max_consecutive_skips")
        self.read_every_step = None if read_every_step is None else bool(read_every_step)
        self.skipped = 0
        self._losses: list[Tensor] = []
        self._record: Tensor | None = None
        self._pending: tuple[Any, Tensor, list[Tensor], list[tuple[Tensor, str]], list[Tensor]] | None = None
        self._backups: list[Tensor] = []
        self._hooks: dict[int, Any] = {}

    # --- state (the skip count survives a resume) ----------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        unread = 0 if self._record is None else int(self._record[NEW_SKIPS])  # a host read, at checkpoint time only
        return {"skipped": self.skipped + unread}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped = int(state_dict.get("skipped", 0))

    # --- the check ------------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record, self._pending, self._losses = None, None, []

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Tensor) -> None:
        self._losses.append(loss.detach())

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        losses, self._losses = self._losses, []
        self._pending = None
        _forget_found_inf(optimizer)  # one this check set for a step that did not run
        if not losses:
            return
        loss = losses[-1] if len(losses) == 1 else torch.stack([value.float() for value in losses]).mean()
        finite = torch.isfinite(loss)
        norm: Tensor | None = None
        if self.check_gradients and not _scaler_handles_gradients(trainer):
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            if grads:
                norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0, error_if_nonfinite=False)
                finite = finite & torch.isfinite(norm)
        if trainer.world_size > 1:  # a plain all-reduce: Lightning's reduce adds a barrier, which waits on the host
            finite = all_reduce_sum((~finite).float()) == 0
        keep = self._note(trainer, loss, norm, finite)
        every_step = finite.device.type == "cpu" if self.read_every_step is None else self.read_every_step
        logged = logs_this_step(trainer)
        if not every_step and not logged:  # decided on the device: no host read in this step
            if self._optimizer_skips(trainer, optimizer):
                self._skip_unless(optimizer, keep)
                return
            masked = self._masking(optimizer)
            if masked is not None:
                self._mask(optimizer, keep, *masked)
                return
        if not self._read(trainer, pl_module, logged=logged):
            optimizer.zero_grad(set_to_none=True)  # skipped: the optimiser leaves parameters without a gradient alone

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._read(trainer, pl_module, logged=False)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._read(trainer, pl_module, logged=False)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for handle in self._hooks.values():
            handle.remove()
        self._hooks, self._pending, self._backups = {}, None, []

    # --- on the device ----------------------------------------------------------------------------
    def _note(self, trainer: L.Trainer, loss: Tensor, norm: Tensor | None, finite: Tensor) -> Tensor:
        """Update the record with this step; return whether its update may be applied (a device bool)."""
        record = self._record
        if record is None:
            record = torch.full((RECORD,), float("nan"), device=finite.device)  # fills: no copy from the host
            record[NEW_SKIPS : STOP + 1] = 0.0
            record[LAST_STEP] = -1.0
        stopped = record[STOP] > 0
        limit = 0 if self.on_nonfinite == "stop" else self.max_consecutive_skips
        stopping = ~finite & ~stopped & (record[STREAK] >= limit)
        skipped = ~finite & ~stopped & ~stopping
        keep = finite & ~stopped
        event = torch.stack([
            torch.full_like(record[0], trainer.global_step), torch.full_like(record[0], trainer.current_epoch),
            loss.detach().float().reshape(()), torch.full_like(record[0], NOT_CHECKED) if norm is None else norm.float(),
            record[LAST_STEP], record[LAST_LOSS], record[STREAK],
        ])  # fmt: skip
        counters = torch.stack([
            record[NEW_SKIPS] + skipped.float(),
            torch.where(finite, 0.0, record[STREAK] + 1),
            (stopped | stopping).float(),
            torch.where(keep, trainer.global_step, record[LAST_STEP]),
            torch.where(keep, event[2], record[LAST_LOSS]),
        ])  # fmt: skip
        first = skipped & (record[NEW_SKIPS] == 0)
        self._record = torch.cat([
            counters, torch.where(first, event, record[FIRST:STOPPER]), torch.where(stopping, event, record[STOPPER:]),
        ])  # fmt: skip
        return keep

    def _optimizer_skips(self, trainer: L.Trainer, optimizer: Any) -> bool:
        """Whether ``optimizer`` skips its own step on the device when told so (``found_inf``, the flag
        GradScaler hands the fused SGD, Adam and AdamW), with its state already made: a first step
        skipped that way would leave the state it creates uninitialised."""
        if _scaler_handles_gradients(trainer) or not getattr(optimizer, "_step_supports_amp_scaling", False):
            return False  # a scaler sets found_inf itself
        for group in optimizer.param_groups:
            if not group.get("fused"):
                return False
            for p in group["params"]:
                state = optimizer.state.get(p)
                if p.grad is not None and not state and group.get("momentum", 1) != 0:  # SGD without momentum keeps none
                    return False
        return True

    def _skip_unless(self, optimizer: Any, keep: Tensor) -> None:
        """The fused optimiser's step applies nothing (parameters, state, Adam's step count) where ``keep``
        is False: one flag it reads on the device, no copy of the parameters."""
        optimizer.found_inf = (~keep).float()  # 0-d, as GradScaler's
        optimizer._found_inf_by_health = True
        if id(optimizer) not in self._hooks:
            self._hooks[id(optimizer)] = optimizer.register_step_post_hook(self._after_step)

    def _masking(self, optimizer: Any) -> tuple[list[Tensor], list[tuple[Tensor, str]]] | None:
        """The parameters to update and their optimiser state as (parameter, key), or None where a masked
        update could not be undone: state not yet created (the first step), or not a tensor on the
        parameter's device."""
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        states: list[tuple[Tensor, str]] = []
        for p in params:
            state = optimizer.state.get(p)
            if not state:
                return None
            for key, value in state.items():
                if isinstance(value, Tensor) and value.device == p.device:
                    states.append((p, key))
                elif value is not None:
                    return None
        return params, states

    def _mask(self, optimizer: Any, keep: Tensor, params: list[Tensor], states: list[tuple[Tensor, str]]) -> None:
        """Copy the parameters and their state now; put them back after the step where ``keep`` is False."""
        tensors = params + [optimizer.state[p][key] for p, key in states]
        if [(b.shape, b.dtype, b.device) for b in self._backups] != [(t.shape, t.dtype, t.device) for t in tensors]:
            self._backups = [torch.empty_like(t) for t in tensors]
        with torch.no_grad():
            torch._foreach_copy_(self._backups, tensors)
        if id(optimizer) not in self._hooks:
            self._hooks[id(optimizer)] = optimizer.register_step_post_hook(self._after_step)
        self._pending = (optimizer, keep, params, states, self._backups)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        _forget_found_inf(optimizer)
        pending, self._pending = self._pending, None
        if pending is None or pending[0] is not optimizer:
            return
        _, keep, params, states, backups = pending
        # The state as it is after the step: an optimiser may have put a new tensor under a key.
        tensors = params + [optimizer.state[p][key] for p, key in states]
        with torch.no_grad():
            for tensor, backup in zip(tensors, backups):
                torch.where(keep, tensor, backup, out=tensor)

    # --- on the host --------------------------------------------------------------------------------
    def _take(self) -> list[float] | None:
        """The record, read (the one host-device synchronisation), its new skips added to ``skipped``."""
        if self._record is None:
            return None
        values = self._record.tolist()
        if values[NEW_SKIPS]:
            self._record[NEW_SKIPS] = 0.0
            self.skipped += int(values[NEW_SKIPS])
        return values

    def _read(self, trainer: L.Trainer, pl_module: L.LightningModule, logged: bool) -> bool:
        """Read the record: warn of the skips since the last read, log the count on a logged step, raise
        at a stop. Returns whether the latest step was good."""
        skipped_before = self.skipped
        values = self._take()
        if values is None:
            return True
        new = self.skipped - skipped_before
        if logged and self.on_nonfinite == "skip":
            pl_module.log("health/nonfinite_skips", float(self.skipped), on_step=True, on_epoch=False, batch_size=1)
        if new:
            more = f", and {new - 1} more since" if new > 1 else ""
            what = _describe(values[FIRST:STOPPER])
            rank_zero_warn(f"{what}; step skipped{more} ({self.skipped} skipped so far)")
        if values[STOP]:
            what = _describe(values[STOPPER:])
            if self.on_nonfinite == "skip":
                streak = int(values[STOPPER + EVENT.index("streak")])
                what += f"; {streak} steps in a row were already skipped (NumericalHealth.max_consecutive_skips)"
            raise NonFiniteError(what, state_is_good=True)  # the bad update and every later one were not applied
        return values[STREAK] == 0


def _describe(event: list[float]) -> str:
    step, epoch, loss, norm, last_step, last_loss, _ = event
    text = f"non-finite training loss or gradient at step {int(step)} (epoch {int(epoch)}): loss {loss:.6g}"
    if norm != NOT_CHECKED:
        text += f", gradient norm {norm:.6g}"
    if last_step >= 0:
        text += f"; last finite loss {last_loss:.6g} at step {int(last_step)}"
    else:
        text += "; no finite loss before it in this run"
    return text


def _forget_found_inf(optimizer: Any) -> None:
    """Remove the flag :meth:`NumericalHealth._skip_unless` gave ``optimizer`` (a later step must not read it)."""
    if getattr(optimizer, "_found_inf_by_health", False):
        del optimizer.found_inf
        optimizer._found_inf_by_health = False


def _scaler_handles_gradients(trainer: L.Trainer) -> bool:
    plugin = trainer.precision_plugin
    return isinstance(plugin, MixedPrecision) and plugin.scaler is not None
