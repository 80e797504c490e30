"""Scalars written to the loggers only when their value changes: a 0/1 flag, a constant of the run.

A series logged again and again at one value (the chance value of a fixed candidate set, the
number of negatives a loss uses, a collapse flag that stays 0) fills the Time Series tab with flat
lines. Such a value is still logged with ``self.log(..., logger=False)``, so it stays in
``trainer.callback_metrics`` (the run record's ``results`` and every callback read it there), and
:class:`OnChange` writes it to the loggers at its first value and at every change after it (a
MoCo queue that fills, SupCon's chance value that follows each batch's labels), and, where its
owner calls :meth:`OnChange.hold` (the end of each training epoch), once more at that step, so a
constant draws as a line across the run, not as one dot.
:func:`logs_this_step` says on which training steps a logged value reaches the loggers at all.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any, Optional

from torch import Tensor


class OnChange:
    """Writes a scalar to the loggers when it differs from the value last written for its tag.

    ``write`` reads each value on the host (a sync on a GPU): call it only where the values are
    logged anyway (Lightning reads them there too). NaN equals NaN here. Not saved in checkpoints:
    a resumed run writes each value once more at its first step.
    """

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        #: The step each tag was last written at (by :meth:`write` or :meth:`hold`).
        self.written_at: dict[str, int] = {}

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
            self._log(loggers, changed, step)

    def hold(self, loggers: list[Any], step: int, tags: Optional[Collection[str]] = None) -> None:
        """Write every value seen (of ``tags``, when given) again at ``step`` when it was last written before
        ``step``: a value that has not changed draws as a line up to ``step``. For a few points per run (once per
        epoch), never per step; a value written at ``step`` or later is not written again."""
        held = {tag: self.last[tag] for tag, at in self.written_at.items() if at < step and (tags is None or tag in tags)}
        if held:
            self._log(loggers, held, step)

    def _log(self, loggers: list[Any], values: dict[str, float], step: int) -> None:
        for tag in values:
            self.written_at[tag] = step
        for logger in loggers:
            logger.log_metrics(values, step=step)


def logs_this_step(trainer: Any) -> bool:
    """Whether what a training step logs with ``on_step=True`` reaches the loggers: Lightning's own rule
    (every ``log_every_n_steps``, and the step before a stop). Lightning has no public name for it;
    its own callbacks (``LearningRateMonitor``, ``DeviceStatsMonitor``) read this property too."""
    try:
        return bool(trainer._logger_connector.should_update_logs)
    except AttributeError:  # a Lightning without it: every step
        return True
