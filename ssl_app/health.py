"""Never train on NaN: check the loss and the gradients before every optimiser step."""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from ssl_app.checks import check_int
from ssl_app.errors import ConfigError, NonFiniteError

OnNonFinite = Literal["stop", "skip"]


class NumericalHealth(Callback):
    """Stop (or skip the step) when a training loss or gradient is NaN or infinite.

    Before each optimiser step it checks the loss of the step (every micro-batch of an
    accumulated step) and, with ``check_gradients``, the total gradient norm (which is
    non-finite if any gradient entry is). The check runs after backward and before the update,
    so a bad step never reaches the weights or the optimiser state. Under DDP the ranks agree
    (one-element all-reduce), so every rank stops or skips the same step.

    - ``on_nonfinite: stop`` (default): raise ``NonFiniteError`` naming the step, the loss, the
      gradient norm and the last finite loss; the CLI then writes ``last.ckpt`` of the last good
      state (see ``ssl_app.checkpointing.InterruptCheckpoint``) and exits with status 1.
    - ``on_nonfinite: skip``: drop the step's gradients (the optimiser leaves every parameter
      and its state untouched), warn, and count it: TensorBoard ``health/nonfinite_skips``.
      After ``max_consecutive_skips`` skipped steps in a row it stops as above.

    Cost: one host-device synchronisation per optimiser step (reading one boolean), plus a
    fused norm over the gradients when ``check_gradients``. Under fp16 mixed precision the
    gradient check is left to the GradScaler, which already skips such steps by design.

    Args:
        on_nonfinite: ``stop`` or ``skip``.
        check_gradients: also check the gradient norm (a finite loss can still give NaN gradients).
        max_consecutive_skips: with ``skip``, stop after this many skipped steps in a row.
    """

    def __init__(self, on_nonfinite: OnNonFinite = "stop", check_gradients: bool = True, max_consecutive_skips: int = 10) -> None:
        super().__init__()
        if on_nonfinite not in ("stop", "skip"):
            raise ConfigError(f"NumericalHealth: on_nonfinite must be 'stop' or 'skip', got {on_nonfinite!r}")
        self.on_nonfinite = on_nonfinite
        self.check_gradients = bool(check_gradients)
        self.max_consecutive_skips = check_int(max_consecutive_skips, "NumericalHealth: max_consecutive_skips")
        self.skipped = 0
        self.consecutive = 0
        self._losses: list[Tensor] = []
        self._last_finite: Tensor | None = None
        self._last_finite_step: int | None = None

    # --- state (the skip count survives a resume) ----------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped = int(state_dict.get("skipped", 0))

    # --- the check ------------------------------------------------------------------------------
    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Tensor) -> None:
        self._losses.append(loss.detach())

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        losses, self._losses = self._losses, []
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
        if trainer.world_size > 1:
            bad = (~finite).float().to(trainer.strategy.root_device)
            finite = trainer.strategy.reduce(bad, reduce_op="sum") == 0
        if bool(finite):  # the one host sync per step
            self._last_finite, self._last_finite_step = loss, trainer.global_step
            self.consecutive = 0
            if self.on_nonfinite == "skip":
                pl_module.log("health/nonfinite_skips", float(self.skipped), on_step=True, on_epoch=False, batch_size=1)
            return
        what = self._describe(trainer, loss, norm)
        if self.on_nonfinite == "skip" and self.consecutive < self.max_consecutive_skips:
            optimizer.zero_grad(set_to_none=True)  # the optimiser skips parameters without a gradient
            self.skipped += 1
            self.consecutive += 1
            pl_module.log("health/nonfinite_skips", float(self.skipped), on_step=True, on_epoch=False, batch_size=1)
            rank_zero_warn(f"{what}; step skipped ({self.skipped} skipped so far)")
            return
        if self.on_nonfinite == "skip":
            what += f"; {self.consecutive} steps in a row were already skipped (NumericalHealth.max_consecutive_skips)"
        raise NonFiniteError(what, state_is_good=True)  # the bad update was not applied

    def _describe(self, trainer: L.Trainer, loss: Tensor, norm: Tensor | None) -> str:
        where = f"step {trainer.global_step} (epoch {trainer.current_epoch})"
        text = f"non-finite training loss or gradient at {where}: loss {float(loss):.6g}"
        if norm is not None:
            text += f", gradient norm {float(norm):.6g}"
        if self._last_finite is not None:
            text += f"; last finite loss {float(self._last_finite):.6g} at step {self._last_finite_step}"
        else:
            text += "; no finite loss before it in this run"
        return text


def _scaler_handles_gradients(trainer: L.Trainer) -> bool:
    plugin = trainer.precision_plugin
    return isinstance(plugin, MixedPrecision) and plugin.scaler is not None
