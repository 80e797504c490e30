"""Optimiser and learning-rate schedule, configured as one nested group (``model.optim.*``).

The schedule is a per-step multiplier on the base learning rate:

    warm-up (linear, 0 → 1 over ``warmup_epochs``), then
    cosine:     ½ (1 + cos(π · progress))            progress ∈ [0, 1] after warm-up
    multistep:  gamma ** (number of milestones (in epochs) already passed)
    constant:   1

With ``scale_lr`` the base rate is multiplied by ``global_batch / reference_batch_size``
("linear", Goyal et al. 2017) or its square root ("sqrt"), where the global batch is the
per-process batch × processes × gradient-accumulation steps.

``trainer.max_epochs=-1`` without ``max_steps`` (Lightning's "train until stopped") gives a run no
length: fine for ``constant`` and ``multistep``, refused in one line for ``cosine`` (``run_length``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import torch
from lightly.utils.lars import LARS
from torch.optim.lr_scheduler import LambdaLR

from ssl_app.checks import NonNegativeFinite, PositiveFinite, PositiveInt, UnitIntervalOpenBelow
from ssl_app.errors import ConfigError
from ssl_app.temperature.base import Progress


@dataclass
class Optimization:
    """Optimiser and schedule settings.

    Args:
        optimizer: ``sgd`` (with momentum), ``adamw``, or ``lars`` (lightly's LARS, for large batches).
        lr: base learning rate (before ``scale_lr``).
        momentum: SGD/LARS momentum.
        weight_decay: L2 weight decay.
        schedule: ``cosine``, ``multistep`` or ``constant``, stepped every optimiser step.
        milestones: epochs at which ``multistep`` multiplies the rate by ``gamma``.
        gamma: the ``multistep`` factor.
        warmup_epochs: linear warm-up length in epochs (may be fractional).
        scale_lr: ``none``, ``linear`` or ``sqrt`` scaling by global batch / ``reference_batch_size``.
        reference_batch_size: the batch size at which ``lr`` is meant.
    """

    optimizer: Literal["sgd", "adamw", "lars"] = "sgd"
    lr: PositiveFinite = 0.03
    momentum: NonNegativeFinite = 0.9
    weight_decay: NonNegativeFinite = 5e-4
    schedule: Literal["cosine", "multistep", "constant"] = "cosine"
    milestones: list[int] = field(default_factory=lambda: [160, 190])
    gamma: UnitIntervalOpenBelow = 0.1
    warmup_epochs: NonNegativeFinite = 0.0
    scale_lr: Literal["none", "linear", "sqrt"] = "none"
    reference_batch_size: PositiveInt = 256

    def __post_init__(self) -> None:
        # The ranges are declared as types so the parser refuses a value out of range as it parses (issue 40); the
        # values are kept plain numbers (jsonargparse gives its range types), so a checkpoint holds no such type.
        for name in ("lr", "momentum", "weight_decay", "warmup_epochs", "gamma"):
            value = getattr(self, name)
            if isinstance(value, float) and type(value) is not float:
                setattr(self, name, float(value))
        if isinstance(self.reference_batch_size, int) and type(self.reference_batch_size) not in (int, bool):
            self.reference_batch_size = int(self.reference_batch_size)
        checks = [
            (self.lr > 0, f"optim.lr must be > 0, got {self.lr}"),
            (self.momentum >= 0, f"optim.momentum must be >= 0, got {self.momentum}"),
            (self.weight_decay >= 0, f"optim.weight_decay must be >= 0, got {self.weight_decay}"),
            (0 < self.gamma <= 1, f"optim.gamma must be in (0, 1], got {self.gamma}"),
            (self.warmup_epochs >= 0, f"optim.warmup_epochs must be >= 0, got {self.warmup_epochs}"),
            (self.reference_batch_size >= 1, f"optim.reference_batch_size must be >= 1, got {self.reference_batch_size}"),
            (all(m >= 0 for m in self.milestones), f"optim.milestones must be epochs >= 0, got {self.milestones}"),
            (self.optimizer in ("sgd", "adamw", "lars"), f"optim.optimizer must be sgd, adamw or lars, got {self.optimizer!r}"),
            (
                self.schedule in ("cosine", "multistep", "constant"),
                f"optim.schedule must be cosine, multistep or constant, got {self.schedule!r}",
            ),
            (self.scale_lr in ("none", "linear", "sqrt"), f"optim.scale_lr must be none, linear or sqrt, got {self.scale_lr!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)

    def scaled_lr(self, global_batch_size: int) -> float:
        ratio = global_batch_size / self.reference_batch_size
        return self.lr * {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[self.scale_lr]

    def lr_factor(self, step: int, steps_per_epoch: int, total_steps: int) -> float:
        """The schedule's multiplier at optimiser step ``step`` (0-based)."""
        warmup_steps = round(self.warmup_epochs * steps_per_epoch)
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if self.schedule == "cosine":
            span = max(total_steps - warmup_steps, 1)
            progress = min((step - warmup_steps) / span, 1.0)
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        if self.schedule == "multistep":
            epoch = step / max(steps_per_epoch, 1)
            return self.gamma ** sum(epoch >= m for m in self.milestones)
        return 1.0

    def build(self, params: Iterable[Any], global_batch_size: int, steps_per_epoch: int, total_steps: int) -> dict:
        """Lightning's ``configure_optimizers`` dict for ``params`` (parameters, or parameter groups: dicts, where a
        group may set its own ``weight_decay``); the schedule steps every optimiser step. SGD and AdamW
        are torch's fused ones when every parameter is on CUDA (:func:`fused_pays`)."""
        lr = self.scaled_lr(global_batch_size)
        params = list(params)
        fused = fused_pays(params)
        if self.optimizer == "sgd":
            opt: torch.optim.Optimizer = torch.optim.SGD(
                params, lr=lr, momentum=self.momentum, weight_decay=self.weight_decay, fused=fused or None
            )
        elif self.optimizer == "adamw":
            opt = torch.optim.AdamW(params, lr=lr, weight_decay=self.weight_decay, fused=fused or None)
        else:
            opt = LARS(params, lr=lr, momentum=self.momentum, weight_decay=self.weight_decay)
        steps_per_epoch = max(steps_per_epoch, 1)
        scheduler = LambdaLR(opt, lambda step: self.lr_factor(step, steps_per_epoch, total_steps))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": scheduler, "interval": "step", "name": "lr"}}


def fused_pays(params: list[Any]) -> bool:
    """Whether SGD and AdamW should be torch's fused kernels (``fused=True``) for ``params`` (tensors or
    groups): when every parameter is on CUDA. One kernel for the whole update instead of a few per
    step of the ``foreach`` default (host time, which a small model's step waits on), and the flag
    through which ``ssl_app.health.NumericalHealth`` skips a bad step on the device. The same update
    to rounding; on the CPU the default stays (its numbers are those of every earlier version)."""
    tensors = [p for item in params for p in (item["params"] if isinstance(item, dict) else [item])]
    return bool(tensors) and all(p.device.type == "cuda" for p in tensors)


def run_length(trainer: Any, needed_by: Sequence[str] = ()) -> Optional[int]:
    """The run's optimiser steps (Lightning's ``estimated_stepping_batches``), or None when it has no
    limit (``trainer.max_epochs=-1`` without ``max_steps``: Lightning's "train until stopped").

    What spreads over the whole run (a cosine schedule) needs a finite length: when ``needed_by``
    names such an option, a run without a limit is refused in one line naming both. Without a limit
    it also loads the training dataloader, which Lightning's estimate then skips, so that
    ``trainer.num_training_batches`` (steps per epoch: warm-up, milestones) is known.
    """
    total = trainer.estimated_stepping_batches
    if math.isfinite(total):
        return int(total)
    # Only here: loading the data this early (before a checkpoint's loop state is restored) would lose
    # the resumed loader's place in the epoch, so a run with a length keeps Lightning's own order.
    if trainer.train_dataloader is None:
        trainer.fit_loop.setup_data()
    if needed_by:
        raise ConfigError(
            f"trainer.max_epochs=-1 (no limit) without trainer.max_steps: {needed_by[0]} spreads over the whole run, "
            "which then has no length; set trainer.max_epochs or trainer.max_steps, or choose a schedule that needs none"
        )
    return None


def configure(
    optim: Optimization, trainer: Any, params: Iterable[Any], needed_by: Sequence[str] = ()
) -> tuple[dict, Optional[int]]:
    """A method's ``configure_optimizers`` dict for ``params`` under ``trainer``, and the run's optimiser steps (None:
    no limit). The global batch is the datamodule's per-process batch × processes × accumulation; the steps per epoch
    come from the dataloader, not total / max_epochs: a run bounded by max_steps would otherwise place multistep
    milestones and warm-up at the wrong step."""
    per_process_batch = getattr(trainer.datamodule, "batch_size", None) or optim.reference_batch_size
    global_batch = per_process_batch * trainer.world_size * trainer.accumulate_grad_batches
    total_steps = run_length(trainer, needed_by)  # also sizes the train dataloader
    batches = trainer.num_training_batches
    if math.isfinite(batches):
        steps_per_epoch = max(math.ceil(batches / trainer.accumulate_grad_batches), 1)
    else:  # an iterable dataloader without a length
        steps_per_epoch = max((total_steps or 0) // max(trainer.max_epochs or 1, 1), 1)
    # total_steps None (no limit): only a schedule that ignores the run's length gets here
    return optim.build(params, global_batch, steps_per_epoch, total_steps or 0), total_steps


def progress(trainer: Any, batch_idx: int, run_steps: Optional[int]) -> Progress:
    """Where training stands at a training step, for a loss's temperature policy: fractional epochs
    (``current_epoch + batch_idx / batches per epoch``), optimiser steps done (``global_step``) and their fraction
    of the run's ``run_steps`` (``None`` without a length). Read from the Trainer's restored loop state, so a resumed
    run (also mid-epoch) goes on where it stopped; ``Progress()`` without a Trainer."""
    if trainer is None:
        return Progress()
    batches = trainer.num_training_batches
    within = batch_idx / batches if isinstance(batches, int) and batches > 0 else 0.0
    fraction = min(trainer.global_step / run_steps, 1.0) if run_steps else None
    return Progress(epoch=trainer.current_epoch + within, step=trainer.global_step, fraction=fraction)


# Checkpoints store the hyper-parameters, this dataclass among them; let torch's default
# ``weights_only`` loading (used by Trainer(ckpt_path=...)) accept it.
torch.serialization.add_safe_globals([Optimization])
