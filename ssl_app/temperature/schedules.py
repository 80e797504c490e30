"""Temperatures that follow the progress of the run alone: a constant, Kukleva's cosine schedule, a linear ramp."""

from __future__ import annotations

import math
from typing import Any, Optional

from ssl_app.checks import PositiveFinite
from ssl_app.errors import ConfigError
from ssl_app.temperature.base import Progress, TemperaturePolicy, Unit, check_positive, check_unit
from ssl_app.temperature.registry import TEMPERATURES
from ssl_app.temperature.spelling import LabelForm


@TEMPERATURES.register
class Constant(TemperaturePolicy):
    """A fixed τ for the whole run (what a plain number means: ``temperature: 0.5``).

    Args:
        value: τ > 0.
    """

    label_form = LabelForm("", ("value",))
    examples = ({"value": 0.5}, {"value": 0.07})

    def __init__(self, value: PositiveFinite) -> None:
        super().__init__()
        self.constant = check_positive(value, "Constant: value")

    def options(self) -> dict[str, Any]:
        return {"value": self.constant}

    def value(self, progress: Progress, handover: Optional[object] = None) -> float:
        return self.constant


#: Cosine's default period in epochs, as in Kukleva et al.'s code (Annusha/temperature_schedules):
#: the authors' setting: train_simCLR.py computes cos(π·epoch/t_max) with --t_max 200, i.e. cos(2π·epoch/400).
DEFAULT_PERIOD = 400.0


@TEMPERATURES.register
class Cosine(TemperaturePolicy):
    """Kukleva et al.'s cosine schedule (ICLR 2023): τ(t) = low + (high − low)·(1 + cos(2π t / period)) / 2.

    τ starts at ``high`` (group-wise discrimination), reaches ``low`` (instance discrimination) at
    half a period and returns to ``high`` every period. t counts epochs (fractional: epoch + batch /
    batches per epoch) or optimiser steps (``unit``).

    Args:
        low: τ⁻ > 0 (the authors': 0.1).
        high: τ⁺ ≥ low (the authors': 1.0).
        period: T > 0, in ``unit``s.
        unit: ``epoch`` or ``step``.
    """

    label_form = LabelForm("cosine", ("low", "high"), {"T": "period", "unit": "unit"})
    examples = ({}, {"low": 0.2, "high": 0.8, "period": 3.0, "unit": "step"})

    def __init__(
        self, low: PositiveFinite = 0.1, high: PositiveFinite = 1.0, period: PositiveFinite = DEFAULT_PERIOD, unit: Unit = "epoch"
    ) -> None:
        super().__init__()
        self.low = check_positive(low, "Cosine: low")
        self.high = check_positive(high, "Cosine: high")
        if self.low > self.high:
            raise ConfigError(f"Cosine: low must be <= high, got low={low!r}, high={high!r}")
        self.period = check_positive(period, "Cosine: period")
        self.unit = check_unit(unit, "Cosine: unit")

    def value(self, progress: Progress, handover: Optional[object] = None) -> float:
        t = progress.at(self.unit)
        return self.low + (self.high - self.low) * (1 + math.cos(2 * math.pi * t / self.period)) / 2


@TEMPERATURES.register
class Linear(TemperaturePolicy):
    """A linear ramp: τ goes from ``start`` to ``end`` over ``length`` units, then stays at ``end``.

        τ(t) = start + (end − start) · min(t / length, 1)

    Args:
        start: τ at t = 0, > 0.
        end: τ from t = length on, > 0.
        length: > 0, in ``unit``s (epochs or optimiser steps).
        unit: ``epoch`` or ``step``.
    """

    label_form = LabelForm("linear", ("start", "end"), {"L": "length", "unit": "unit"}, required=("L",))
    examples = ({"start": 0.1, "end": 0.5, "length": 100.0}, {"start": 1.0, "end": 0.05, "length": 2.5, "unit": "step"})

    def __init__(self, start: PositiveFinite, end: PositiveFinite, length: PositiveFinite, unit: Unit = "epoch") -> None:
        super().__init__()
        self.start = check_positive(start, "Linear: start")
        self.end = check_positive(end, "Linear: end")
        self.length = check_positive(length, "Linear: length")
        self.unit = check_unit(unit, "Linear: unit")

    def value(self, progress: Progress, handover: Optional[object] = None) -> float:
        done = min(max(progress.at(self.unit) / self.length, 0.0), 1.0)
        return self.start + (self.end - self.start) * done
