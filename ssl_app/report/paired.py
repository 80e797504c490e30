"""Paired comparisons of configurations over their shared seeds.

Seed k means the same data order and the same augmentation draws in every configuration
(``datamodules.keyed_draws``), so run seed k of configuration A and run seed k of B differ only
in the configuration: their difference is one paired observation. For each column and each
configuration against the reference ★:

    d_k = value_k(configuration) − value_k(reference)    for the seeds k both finished and logged
    Δ = mean_k d_k,  95% CI = Δ ± t_{0.975, n−1} · s_d / √n  (Student's t-interval, n − 1 df)

with s_d the sample std (n − 1) of the d_k. The interval covering 0 reads "not distinguishable";
n < 2 pairs has no interval and reads "needs ≥ 2 seeds". A seed that two runs of one
configuration share is ambiguous and pairs with nothing.

The reference ★ is the configuration named by ``--baseline`` (its label), otherwise the one with
the highest mean linear top-1 (kNN accuracy when no run has a linear probe): every other
configuration is compared with it, in every column.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass

from scipy import stats

from ssl_app.errors import ConfigError
from ssl_app.report.summary import Row, TableColumn

CONFIDENCE = 0.95
MIN_PAIRS = 2
#: Accuracy columns (higher is better), in the order that picks the default reference and gets the table's markers.
RANKED_COLUMNS = ("linear_top1", "knn_acc")
REFERENCE = "★"
NOT_DISTINGUISHABLE_MARK = "≈"
PAIRED_HEADING = "### Paired differences against"
NOT_DISTINGUISHABLE = "not distinguishable"
TOO_FEW = f"needs ≥ {MIN_PAIRS} seeds"
#: The CSV's fields of a column's paired difference: ``<column>_paired_<part>``.
PAIRED_PARTS = ("delta", "low", "high", "n")
NOTE = (
    f"{REFERENCE}: the reference of the paired comparisons (`--baseline`, else the highest mean linear top-1, else kNN); "
    f"{NOT_DISTINGUISHABLE_MARK} in an accuracy column: the 95% t-interval of its paired difference to {REFERENCE} "
    f"over their shared seeds covers 0; no mark: it excludes 0, or fewer than {MIN_PAIRS} shared seeds (the paired "
    "differences below say which)."
)


@dataclass(frozen=True)
class PairedDifference:
    """``differences[i]`` = configuration − reference at ``seeds[i]``; ``low``/``high``: the 95%
    t-interval of their mean (None with fewer than ``MIN_PAIRS`` pairs)."""

    seeds: tuple
    differences: tuple[float, ...]
    mean: float | None
    low: float | None
    high: float | None

    @property
    def n(self) -> int:
        return len(self.differences)

    @property
    def distinguishable(self) -> bool | None:
        """Whether the interval excludes 0 (None without an interval)."""
        if self.low is None or self.high is None:
            return None
        return not self.low <= 0.0 <= self.high


def t_interval(differences: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Student's t-interval of the mean of ``differences`` (n ≥ 2): mean ± t_{(1+c)/2, n−1} · s / √n."""
    n = len(differences)
    mean = statistics.fmean(differences)
    half = stats.t.ppf((1 + confidence) / 2, n - 1) * statistics.stdev(differences) / math.sqrt(n)
    return mean - half, mean + half


def unique_seeds(row: Row) -> set:
    """The seeds of the row's runs, leaving out a missing seed and one that two of its runs share."""
    counts = Counter(run.seed for run in row.runs)
    return {seed for seed, count in counts.items() if seed is not None and count == 1}


def seeded_values(row: Row, key: str) -> dict:
    """``{seed: value}`` of the row's runs with a unique seed that logged ``key``."""
    seeds = unique_seeds(row)
    return {run.seed: value for run, value in zip(row.runs, row.values[key]) if value is not None and run.seed in seeds}


def paired_difference(row: Row, reference: Row, key: str) -> PairedDifference:
    """``row`` − ``reference`` in column ``key`` over the seeds both have a value for."""
    ours, theirs = seeded_values(row, key), seeded_values(reference, key)
    seeds = tuple(sorted(ours.keys() & theirs.keys(), key=str))
    differences = tuple(ours[seed] - theirs[seed] for seed in seeds)
    if not differences:
        return PairedDifference(seeds, differences, None, None, None)
    mean = statistics.fmean(differences)
    if len(differences) < MIN_PAIRS:
        return PairedDifference(seeds, differences, mean, None, None)
    return PairedDifference(seeds, differences, mean, *t_interval(list(differences)))


def reference_index(rows: list[Row], baseline: str | None = None) -> int | None:
    """The row of the reference ★: the configuration labelled ``baseline``, else the highest mean of
    the first ranked column any row has (None when no row has one). An unknown ``baseline`` is a
    ConfigError listing the labels."""
    if baseline is not None:
        labels = [row.configuration.label for row in rows]
        if baseline in labels:
            return labels.index(baseline)
        # a label as reports printed it before τ labels were canonical (``τ=cosine:0.1-1:T200``) still names its row
        named = [index for index, row in enumerate(rows) if baseline in row.configuration.aliases]
        if len(named) != 1:
            raise ConfigError(f"--baseline {baseline!r} is no configuration of the table; its labels: {', '.join(labels)}")
        return named[0]
    for key in RANKED_COLUMNS:
        valued = [index for index, row in enumerate(rows) if key in row.values and row.stat(key).mean is not None]
        if valued:
            return max(valued, key=lambda index: rows[index].stat(key).mean)
    return None


def significance_markers(rows: list[Row], key: str, reference: int | None) -> list[str]:
    """Each row's marker in column ``key``: ★ on the reference, ≈ where the paired interval to it
    covers 0; none in a column not ranked, nor unless ★ and another row have a value in it."""
    marks = [""] * len(rows)
    valued = [index for index, row in enumerate(rows) if key in row.values and row.stat(key).n]
    if key not in RANKED_COLUMNS or reference not in valued or len(valued) < 2:
        return marks
    marks[reference] = REFERENCE
    for index, row in enumerate(rows):
        if index != reference and paired_difference(row, rows[reference], key).distinguishable is False:
            marks[index] = NOT_DISTINGUISHABLE_MARK
    return marks


def paired_cells(row: Row, reference: Row | None, key: str) -> list[object]:
    """The CSV's ``PAIRED_PARTS`` of ``row`` − ``reference`` in column ``key`` (full precision; all
    empty without a reference, the number of pairs alone below 2 pairs)."""
    if reference is None:
        return ["", "", "", ""]
    difference = paired_difference(row, reference, key)
    numbers = (difference.mean, difference.low, difference.high) if difference.low is not None else (None, None, None)
    return ["" if value is None else repr(float(value)) for value in numbers] + [difference.n]


def signed(value: float, digits: int) -> str:
    return f"{'−' if value < 0 else '+'}{abs(value):.{digits}f}"


def describe(difference: PairedDifference, digits: int) -> str:
    """A cell: ``−1.20 [−2.05, −0.35]``, ``not distinguishable: +0.10 [−0.30, +0.50]``, or why there is none."""
    if difference.mean is None or difference.low is None or difference.high is None:
        return f"{TOO_FEW} ({difference.n} shared)"
    interval = f"{signed(difference.mean, digits)} [{signed(difference.low, digits)}, {signed(difference.high, digits)}]"
    return interval if difference.distinguishable else f"{NOT_DISTINGUISHABLE}: {interval}"


def paired_markdown(rows: list[Row], columns: list[TableColumn], reference: int | None) -> list[str]:
    """The section under the table: one line per configuration other than ★, one cell per column
    that ★ has values in (a cell whose pairs are fewer than the row's names its own n)."""
    if reference is None or len(rows) < 2:
        return []
    base = rows[reference]
    shown = [column for column in columns if base.stat(column.key).n]
    lines = [
        f"{PAIRED_HEADING} {REFERENCE} {base.configuration.label}",
        "",
        "Δ = configuration − ★ over the seeds both finished (seed k: the same data order and augmentations in "
        "every configuration), mean [95% t-interval, n − 1 df] of the paired differences; "
        f'"{NOT_DISTINGUISHABLE}" where the interval covers 0; with fewer than {MIN_PAIRS} shared seeds no interval.',
        "",
        "| configuration | pairs | " + " | ".join(f"Δ {column.shown.header}" for column in shown) + " |",
        "|" + "---|" * (len(shown) + 2),
    ]
    for index, row in enumerate(rows):
        if index == reference:
            continue
        differences = [paired_difference(row, base, column.key) for column in shown]
        pairs = len(unique_seeds(row) & unique_seeds(base))
        cells = [
            describe(difference, column.shown.digits)
            + (f" (n={difference.n})" if difference.low is not None and difference.n != pairs else "")
            for difference, column in zip(differences, shown)
        ]
        lines.append(f"| {row.configuration.label} | {pairs} | " + " | ".join(cells) + " |")
    return lines
