"""MACL's adaptive temperature: τ follows the alignment of the (global) batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from ssl_app import distributed
from ssl_app.checks import ClosedUnitInterval, PositiveFinite, check
from ssl_app.errors import ConfigError
from ssl_app.temperature.base import Progress, TemperaturePolicy, check_positive
from ssl_app.temperature.registry import TEMPERATURES
from ssl_app.temperature.spelling import LabelForm

if TYPE_CHECKING:
    from ssl_app.handover import MaskedSimilarities


def adaptive_temperature(base: float, alpha: float, a_0: float, mean_positive: Tensor) -> Tensor:
    """MACL's τ = τ₀ · (1 + α (Ā⁺ − A₀)) from the step's mean positive similarity Ā⁺ (detached)."""
    return base * (1 + alpha * (mean_positive - a_0))


@torch.no_grad()
def global_mean_positive(sim: Tensor, pos_mask: Tensor, default: float) -> Tensor:
    """Mean similarity of every rank's positive pairs, 0-d and detached (``default`` when there is
    none), so that 2 ranks see the temperature of one process. Sync-free."""
    sums = torch.stack([torch.where(pos_mask, sim, 0.0).sum(), pos_mask.sum().to(sim.dtype)])
    sums = distributed.all_reduce_sum(sums)
    return torch.where(sums[1] > 0, sums[0] / sums[1].clamp_min(1), default)


def check_unit_interval(value: float, option: str) -> float:
    return check(ClosedUnitInterval, value, option)


def check_stays_positive(alpha: float, a_0: float, owner: str, names: tuple[str, str] = ("alpha", "a0")) -> None:
    """τ₀ (1 + α (Ā⁺ − A₀)) > 0 for every Ā⁺ ≥ −1 needs α (1 + A₀) < 1."""
    if alpha * (1 + a_0) >= 1:
        raise ConfigError(
            f"{owner}: {names[0]} * (1 + {names[1]}) must be < 1 so that the temperature stays > 0, "
            f"got {names[0]}={alpha!r}, {names[1]}={a_0!r}"
        )


@TEMPERATURES.register
class Adaptive(TemperaturePolicy):
    """MACL's adaptive τ (Huang et al., ICML 2023): τ = base · (1 + alpha · (Ā⁺ − a0)).

    Ā⁺ is the mean similarity of the positive pairs of the step's *global* batch (summed over every
    rank, detached: 2 ranks give the τ of 1 process on the same samples); a batch without positives
    gets τ = base. A well-aligned model (large Ā⁺) gets a larger τ, a flatter penalty on its
    negatives. Outside training (validation, test) τ comes from the evaluated batch the same way.

    Args:
        base: τ₀ > 0 (lightly's ``MACLLoss``: 0.1).
        alpha: α ∈ [0, 1], how strongly τ follows the alignment (0.5).
        a0: A₀ ∈ [0, 1], the alignment at which τ = τ₀ (0). α · (1 + A₀) must be < 1.
    """

    label_form = LabelForm("adaptive", ("base",), {"alpha": "alpha", "a0": "a0"})
    examples = ({}, {"base": 0.2, "alpha": 0.25, "a0": 0.5})

    def __init__(self, base: PositiveFinite = 0.1, alpha: ClosedUnitInterval = 0.5, a0: ClosedUnitInterval = 0.0) -> None:
        super().__init__()
        self.base = check_positive(base, "Adaptive: base")
        self.alpha = check_unit_interval(alpha, "Adaptive: alpha")
        self.a0 = check_unit_interval(a0, "Adaptive: a0")
        check_stays_positive(self.alpha, self.a0, "Adaptive")

    def value(self, progress: Progress, handover: Optional[MaskedSimilarities] = None) -> Tensor:
        if handover is None:
            return torch.tensor(self.base)
        mean_positive = global_mean_positive(handover.sim.detach().float(), handover.pos_mask, self.a0)
        return adaptive_temperature(self.base, self.alpha, self.a0, mean_positive)
