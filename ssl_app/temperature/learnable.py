"""A learnable temperature: CLIP's log-parametrisation, trained by the run's optimiser."""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import Tensor, nn

from ssl_app.checks import PositiveFinite
from ssl_app.errors import ConfigError
from ssl_app.temperature.base import Progress, TemperaturePolicy, check_positive
from ssl_app.temperature.registry import TEMPERATURES
from ssl_app.temperature.spelling import LabelForm


class _ClampInward(torch.autograd.Function):
    """``x.clamp(low, high)`` whose gradient passes wherever a descent step moves ``x`` back inside.

    A plain clamp has zero gradient outside [low, high], so a parameter pushed past a bound would
    stay there for good; this one lets the loss pull it back (and never pushes it further out)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, low: float, high: float) -> Tensor:
        ctx.save_for_backward(x)
        ctx.bounds = (low, high)
        return x.clamp(low, high)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], None, None]:
        (x,) = ctx.saved_tensors
        low, high = ctx.bounds
        # descent moves x by −grad: inward above high when grad > 0, below low when grad < 0
        passes = ((x >= low) & (x <= high)) | ((x > high) & (grad > 0)) | ((x < low) & (grad < 0))
        return torch.where(passes, grad, torch.zeros_like(grad)), None, None


@TEMPERATURES.register
class Learnable(TemperaturePolicy):
    """A learnable τ (CLIP): a parameter t = log(1/τ), τ = exp(−t) clamped to [min, max].

    t starts at log(1/init) and is trained by the run's optimiser with the encoder's learning rate
    and no weight decay (decay would pull τ towards 1, i.e. t towards 0, for no reason of the loss);
    it is saved in the checkpoint (``loss.temperature.log_scale``), resumed with its optimiser state,
    and exported with the loss. CLIP initialises τ at 0.07 and clips 1/τ at 100 (τ ≥ 0.01). Inside
    [min, max], dL/dt = −τ · dL/dτ; at a bound the gradient passes only when it points back inside.

    Args:
        init: τ at the start, in [min, max] (CLIP: 0.07).
        min: the smallest τ, > 0 (CLIP: 0.01).
        max: the largest τ, > min.
    """

    label_form = LabelForm("learnable", ("init",), {"min": "min", "max": "max"})
    examples = ({}, {"init": 0.2, "min": 0.05, "max": 0.5})

    def __init__(self, init: PositiveFinite = 0.07, min: PositiveFinite = 0.01, max: PositiveFinite = 1.0) -> None:  # noqa: A002 (the option names)
        super().__init__()
        self.min = check_positive(min, "Learnable: min")
        self.max = check_positive(max, "Learnable: max")
        if self.min >= self.max:
            raise ConfigError(f"Learnable: min must be < max, got min={min!r}, max={max!r}")
        self.init = check_positive(init, "Learnable: init")
        if not self.min <= self.init <= self.max:
            raise ConfigError(f"Learnable: init must be in [min, max] = [{min!r}, {max!r}], got {init!r}")
        self.log_scale = nn.Parameter(torch.tensor(math.log(1 / self.init)))

    def value(self, progress: Progress, handover: Optional[object] = None) -> Tensor:
        t = _ClampInward.apply(self.log_scale, math.log(1 / self.max), math.log(1 / self.min))
        return torch.exp(-t)
