"""Scalars written to the loggers only when their value changes: a 0/1 flag, a constant of the run.

A series logged again and again at one value (the chance value of a fixed candidate set, the
number of negatives a loss uses, a collapse flag that stays 0) fills the Time Series tab with flat
lines. Such a value is still logged with ``self.log(..., logger=False)``, so it stays in
``trainer.callback_metrics`` (the run record's ``results`` and every callback read it there), and
:class:`OnChange` writes it to the loggers at its first value and at every change after it (a
MoCo queue that fills, SupCon's chance value that follows each batch's labels).
:func:`logs_this_step` says on which training steps a logged value reaches the loggers at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from torch import Tensor


class OnChange:
    """Writes a scalar to the loggers when it differs from the value last written for its tag.

    ``write`` reads each value on the host (a sync on a GPU): call it only where the values are
    logged anyway (Lightning reads them there too). NaN equals NaN here. Not saved in checkpoints:
    a resumed run writes each value once more at its first step.
    """

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def changed(self, values: Mapping[str, Tensor | float]) -> dict[str, float]:
        """The ``values`` that differ from the last ones seen, as floats (remembered as seen)."""
        changed = {}
        for tag, value in values.items():
            number = float(value)
            before = self.last.get(tag)
            if before is None or not (before == number or (math.isnan(before) and math.isnan(number))):
                changed[tag] = self.last[tag] = number
        return changed

    def write(self, loggers: list[Any], values: Mapping[str, Tensor | float], step: int) -> None:
        """Write the changed ``values`` at ``step`` with every logger (each writes on rank 0 only)."""
        changed = self.changed(values)
        if changed:
            for logger in loggers:
                logger.log_metrics(changed, step=step)


def logs_this_step(trainer: Any) -> bool:
    """Whether what a training step logs with ``on_step=True`` reaches the loggers: Lightning's own rule
    (every ``log_every_n_steps``, and the step before a stop). Lightning has no public name for it;
    its own callbacks (``LearningRateMonitor``, ``DeviceStatsMonitor``) read this property too."""
    try:
        return bool(trainer._logger_connector.should_update_logs)
    except AttributeError:  # a Lightning without it: every step
        return True
