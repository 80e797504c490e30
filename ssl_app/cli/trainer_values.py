"""The ``trainer.*`` values the parser takes but Lightning cannot use, refused in one line before anything is built.

The parser checks a Trainer option's *type* (``max_epochs: Optional[int]``); its range is Lightning's business,
checked while the Trainer is built (after seconds of imports) in its own words, or not at all: ``accumulate_grad_batches
= 0`` and ``check_val_every_n_epoch = 0`` end in a ``ZeroDivisionError`` during the first epoch, ``min_epochs = -3``
is taken. :func:`trainer_problem` says each such value in one line, the same line before the imports
(``ssl_app.cli.early_values``) and before the Trainer is built (``ssl_app.cli.app``), from this table of
Lightning 2.6's meanings:

- counts: ``max_epochs``/``max_steps`` ≥ −1 (−1: no limit), ``min_epochs``/``min_steps``/``log_every_n_steps``/
  ``reload_dataloaders_every_n_epochs`` ≥ 0, ``accumulate_grad_batches``/``num_nodes``/
  ``check_val_every_n_epoch`` ≥ 1, ``num_sanity_val_steps`` ≥ −1 (−1: all), ``fast_dev_run`` a bool or ≥ 0;
- batch limits (``limit_*_batches``, ``overfit_batches``): a count ≥ 0 or a fraction in [0.0, 1.0];
  ``val_check_interval``: a count ≥ 1, a fraction in (0.0, 1.0] or a duration ``DD:HH:MM:SS``;
- ``max_time``: a duration ``DD:HH:MM:SS`` (the Timer's format); ``gradient_clip_val`` ≥ 0;
- ``devices``: text some accelerator reads (``auto``, a count, ``-1``, indices).

A value of another type (text for a count) is the parser's to refuse; a value this table has no word on is
Lightning's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Optional

#: Lowest count each counting option takes, and what its lowest value means when that needs saying.
COUNTS: dict[str, tuple[int, str]] = {
    "max_epochs": (-1, " (-1: no limit)"),
    "max_steps": (-1, " (-1: no limit)"),
    "min_epochs": (0, ""),
    "min_steps": (0, ""),
    "log_every_n_steps": (0, " (0: never)"),
    "reload_dataloaders_every_n_epochs": (0, ""),
    "accumulate_grad_batches": (1, ""),
    "num_nodes": (1, ""),
    "check_val_every_n_epoch": (1, ""),
    "num_sanity_val_steps": (-1, " (-1: every batch)"),
    "fast_dev_run": (0, ""),
}
BATCH_LIMITS = (
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "overfit_batches",
)
#: Lightning's duration text: the Timer's ``max_time`` (two-digit fields) and ``val_check_interval``'s (int fields).
MAX_TIME = re.compile(r"\s*\d+:\d\d:\d\d:\d\d\s*")
INTERVAL_TIME = re.compile(r"\s*[+-]?\d+\s*:\s*[+-]?\d+\s*:\s*[+-]?\d+\s*:\s*[+-]?\d+\s*")
#: The text Lightning reads as ``trainer.devices`` on some accelerator: ``auto``, a count, ``-1`` (all), indices.
DEVICES_TEXT = re.compile(r"\s*(?:auto|-1|\d+|\d+(?:\s*,\s*\d+)*\s*,?)\s*")


def trainer_problem(options: Any) -> Optional[str]:
    """The line for the first of ``options`` (the ``trainer`` node: a mapping or jsonargparse Namespace) that
    Lightning cannot use, else None."""
    if not isinstance(options, Mapping) and not hasattr(options, "items"):
        return None
    given = dict(options.items())
    problem = devices_problem(given.get("devices"))
    if problem is not None:
        return problem
    for name, (lowest, meaning) in COUNTS.items():
        value = given.get(name)
        if _is_int(value) and value < lowest:
            return f"trainer.{name}: must be an int >= {lowest}{meaning}, got {value!r}"
    for name in BATCH_LIMITS:
        value = given.get(name)
        if _is_number(value) and not (0 <= value <= 1 or (value > 1 and float(value).is_integer())):
            return f"trainer.{name}: must be a count of batches >= 0 or a fraction in [0.0, 1.0], got {value!r}"
    return _interval_problem(given.get("val_check_interval")) or _time_problem(given)


def devices_problem(value: Any) -> Optional[str]:
    """The line for ``trainer.devices`` given text no accelerator reads (``abc``): the parser takes any text (its
    type is ``Union[list[int], str, int]``) and Lightning refuses it in words that depend on the accelerator."""
    if not isinstance(value, str) or DEVICES_TEXT.fullmatch(value):
        return None
    return f"trainer.devices: must be auto, a count, -1 (every device) or device indices ('0,1'), got {value!r}"


def _interval_problem(value: Any) -> Optional[str]:
    words = "must be a count of batches >= 1, a fraction of the epoch in (0.0, 1.0] or a duration 'DD:HH:MM:SS'"
    if _is_number(value) and not (0 < value <= 1 or (value > 1 and float(value).is_integer())):
        return f"trainer.val_check_interval: {words}, got {value!r}"
    if isinstance(value, str) and not INTERVAL_TIME.fullmatch(value):
        return f"trainer.val_check_interval: {words}, got {value!r}"
    return None


def _time_problem(given: dict) -> Optional[str]:
    max_time, clip = given.get("max_time"), given.get("gradient_clip_val")
    if isinstance(max_time, str) and not MAX_TIME.fullmatch(max_time):
        return f"trainer.max_time: must be a duration 'DD:HH:MM:SS' (days, then two digits each), got {max_time!r}"
    if _is_number(clip) and not clip >= 0:
        return f"trainer.gradient_clip_val: must be a number >= 0, got {clip!r}"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
