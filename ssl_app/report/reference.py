"""Wang & Liu's Table 1 (2012.09740) as data, and which of its cells a configuration is compared with.

``TABLE1[data_set][column][metric]``: the paper's linear top-1 (%), uniformity (−L_unif) and
tolerance; ``column`` is ``(loss class, τ)`` (τ None for Simple and HardSimple). The same numbers
are printed in docs/science.md, "Their Table 1"; a test parses that table and checks it equals
this one, so the two cannot drift apart.

A configuration matches a cell by its spec (``reference_cell``, ``ssl_app.runs.spec.RunSpec``):

- data set: the data's class (``CIFAR10DataModule`` → cifar10, ``CIFAR100DataModule`` →
  cifar100, ``SVHNDataModule`` → svhn) or an ``ImageFolderDataModule`` whose ``class_list``
  file name contains ``imagenet100`` (``-``/``_`` ignored) → imagenet100;
- column: the loss class (``InfoNCE``, ``Simple``, ``HardContrastive``, ``HardSimple``) and its
  ``temperature`` (equal to the paper's 0.07, 0.3, 0.7 or 1.0; none for Simple and HardSimple).

Anything else matches no cell, and ``Match.why_not`` says which part did not match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePath

from ssl_app.runs.spec import RunSpec

REFERENCES = ("table1",)
METRICS = ("linear_top1", "uniformity", "tolerance")
DATA_SETS = ("cifar10", "cifar100", "svhn", "imagenet100")
TEMPERATURES = (0.07, 0.3, 0.7, 1.0)
COLUMNS: tuple[tuple[str, float | None], ...] = (
    *(("InfoNCE", tau) for tau in TEMPERATURES),
    ("Simple", None),
    *(("HardContrastive", tau) for tau in TEMPERATURES),
    ("HardSimple", None),
)
DATA_CLASSES = {"CIFAR10DataModule": "cifar10", "CIFAR100DataModule": "cifar100", "SVHNDataModule": "svhn"}
IMAGE_FOLDER_CLASS = "ImageFolderDataModule"
IMAGENET100_MARK = "imagenet100"

# One line per column of the paper, in COLUMNS' order:
# C10 acc, unif, tol | C100 acc, unif, tol | SVHN acc | IN-100 acc
_ROWS = (
    (79.75, 3.86, 0.04, 51.82, 3.86, 0.10, 92.55, 71.53),
    (83.27, 3.60, 0.178, 56.44, 3.60, 0.269, 95.47, 75.10),
    (82.69, 3.17, 0.333, 50.99, 3.18, 0.331, 94.17, 69.03),
    (82.21, 2.96, 0.372, 48.33, 2.96, 0.343, 92.07, 63.57),
    (74.83, 1.68, 0.61, 39.31, 2.12, 0.39, 70.83, 48.09),
    (79.20, 3.88, 0.034, 50.77, 3.87, 0.088, 91.82, 68.33),
    (83.63, 3.89, 0.027, 56.55, 3.88, 0.124, 94.79, 74.21),
    (84.19, 3.87, 0.030, 57.54, 3.87, 0.158, 95.02, 74.70),
    (84.19, 3.86, 0.030, 56.77, 3.86, 0.172, 95.26, 74.28),
    (84.84, 3.85, 0.030, 55.71, 3.86, 0.174, 94.99, 74.31),
)
# Which (data set, metric) each number of a line is.
_LAYOUT = (
    ("cifar10", "linear_top1"),
    ("cifar10", "uniformity"),
    ("cifar10", "tolerance"),
    ("cifar100", "linear_top1"),
    ("cifar100", "uniformity"),
    ("cifar100", "tolerance"),
    ("svhn", "linear_top1"),
    ("imagenet100", "linear_top1"),
)


def _table() -> dict[str, dict[tuple[str, float | None], dict[str, float]]]:
    table: dict[str, dict[tuple[str, float | None], dict[str, float]]] = {name: {} for name in DATA_SETS}
    for column, numbers in zip(COLUMNS, _ROWS, strict=True):
        for (data_set, metric), value in zip(_LAYOUT, numbers, strict=True):
            table[data_set].setdefault(column, {})[metric] = value
    return table


TABLE1 = _table()


def column_name(column: tuple[str, float | None]) -> str:
    """``InfoNCE τ=0.3``, ``Simple``: a column as the report's labels write it."""
    loss, tau = column
    return loss if tau is None else f"{loss} τ={tau:g}"


@dataclass(frozen=True)
class Match:
    """The paper's cell a configuration is compared with (``values``: metric → number), or none
    (``values`` None) and ``why_not`` saying what did not match."""

    data_set: str | None
    column: tuple[str, float | None] | None
    values: dict[str, float] | None
    why_not: str = ""

    @property
    def name(self) -> str:
        """``cifar10 / InfoNCE τ=0.3``, or ``—`` when no cell matched."""
        if self.values is None or self.column is None:
            return "—"
        return f"{self.data_set} / {column_name(self.column)}"

    def value(self, metric: str) -> float | None:
        return (self.values or {}).get(metric)


def data_set_of(spec: RunSpec) -> str | None:
    """The Table-1 data set a run's spec trains on (its datamodule, and an image folder's class list), or None."""
    data_class = spec.data_name
    if data_class in DATA_CLASSES:
        return DATA_CLASSES[data_class]
    if data_class == IMAGE_FOLDER_CLASS:
        class_list = spec.data_option("class_list")
        if isinstance(class_list, str) and class_list:
            file_name = PurePath(class_list).name.lower().replace("-", "").replace("_", "")
            if IMAGENET100_MARK in file_name:
                return "imagenet100"
    return None


def column_of(loss: str | None, temperature: float | None) -> tuple[str, float | None] | None:
    """The paper's column for a loss class and its τ, or None."""
    for column_loss, tau in COLUMNS:
        if loss != column_loss:
            continue
        if tau is None or (temperature is not None and math.isclose(temperature, tau, rel_tol=1e-9)):
            return (column_loss, tau)
    return None


def reference_cell(spec: RunSpec, loss: str | None, temperature: float | None) -> Match:
    """The Table-1 cell of a configuration (its spec, loss class name and τ)."""
    data_set = data_set_of(spec)
    column = column_of(loss, temperature)
    if data_set is None:
        data = spec.data_name or "no data class in the config"
        return Match(None, column, None, f"data {data} is none of Table 1's data sets")
    if column is None:
        tau = "" if temperature is None else f" τ={temperature:g}"
        return Match(data_set, None, None, f"loss {loss or '(none)'}{tau} is none of Table 1's columns")
    return Match(data_set, column, TABLE1[data_set][column])
