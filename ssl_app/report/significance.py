"""What the report calls a difference: one family of paired t-tests against ★, Holm's step-down, the marks.

Every comparison the report makes (each configuration other than ★, in each column ★ has values in:
``ssl_app.report.paired``) with at least ``MIN_TESTED_PAIRS`` shared seeds is one test of one family; m
is their number, stated under the table. Holm (1979), on the paired t-tests' p-values:

    p_(1) ≤ … ≤ p_(m) sorted;   p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) · p_(j))
    a difference is called where p̃ ≤ α = 0.05   (family-wise error ≤ α, whatever the tests' dependence)

which is the step-down rule "reject p_(1), p_(2), … while p_(i) ≤ α / (m − i + 1), stop at the first that is
not". The intervals stay the unadjusted 95% t-intervals (``paired``): the decision is read from p̃.

The marks, in the accuracy columns (``RANKED_COLUMNS``), each with one meaning (``MARKS``):
★ the reference; ▲ / ▼ higher / lower than ★ (p̃ ≤ 0.05); ≈ tested, no difference called (p̃ > 0.05);
no mark: not tested (fewer than ``MIN_TESTED_PAIRS`` seeds shared with ★, or no value to compare).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ssl_app.report.paired import (
    MIN_PAIRS,
    MIN_TESTED_PAIRS,
    RANKED_COLUMNS,
    REFERENCE,
    TOO_FEW,
    PairedDifference,
    paired_difference,
    unique_seeds,
)
from ssl_app.report.summary import Row, TableColumn

ALPHA = 0.05
HIGHER, LOWER, SAME = "▲", "▼", "≈"
#: Every mark of the table and its one meaning (listed under the table, in this order).
MARKS = (
    (REFERENCE, "the reference every other configuration is compared with (`--baseline`, else the highest mean "
     "linear top-1, else kNN)"),
    (HIGHER, f"higher than {REFERENCE}, Holm-adjusted p ≤ {ALPHA:g} over the report's m paired t-tests"),
    (LOWER, f"lower than {REFERENCE}, Holm-adjusted p ≤ {ALPHA:g}"),
    (SAME, f"tested, no difference called: Holm-adjusted p > {ALPHA:g}"),
    ("no mark", f"not tested: fewer than {MIN_TESTED_PAIRS} seeds shared with {REFERENCE} (or no value to compare)"),
)  # fmt: skip


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given: p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j))."""
    m = len(p_values)
    adjusted = [1.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


@dataclass(frozen=True)
class Comparison:
    """One configuration against ★ in one column: the paired difference and, when tested, Holm's p̃."""

    difference: PairedDifference
    holm_p: float | None = None

    @property
    def mark(self) -> str:
        """▲/▼ (a difference called), ≈ (tested, none called) or "" (not tested)."""
        if self.holm_p is None or self.difference.mean is None:
            return ""
        if self.holm_p > ALPHA:
            return SAME
        return HIGHER if self.difference.mean > 0 else LOWER


@dataclass(frozen=True)
class Family:
    """The report's comparisons against the row ``reference``, by ``(row index, column key)``; ``keys``: the
    columns compared (★ has values in them); ``pairs``: each other row's seeds shared with ★."""

    reference: int | None
    keys: tuple[str, ...]
    comparisons: dict[tuple[int, str], Comparison]
    pairs: dict[int, int]

    @property
    def size(self) -> int:
        """m: the number of tests (comparisons with at least ``MIN_TESTED_PAIRS`` pairs)."""
        return sum(comparison.holm_p is not None for comparison in self.comparisons.values())

    @property
    def too_few(self) -> list[int]:
        """The rows compared with ★ over fewer than ``MIN_TESTED_PAIRS`` shared seeds."""
        return [index for index, pairs in self.pairs.items() if pairs < MIN_TESTED_PAIRS]

    def comparison(self, index: int, key: str) -> Comparison | None:
        return self.comparisons.get((index, key))

    def marks(self, key: str, count: int) -> list[str]:
        """The marks of column ``key`` for rows ``0 … count − 1``: only in an accuracy column ★ has a value in."""
        marks = [""] * count
        if self.reference is None or key not in RANKED_COLUMNS or key not in self.keys:
            return marks
        if not any(c.difference.n for (_, k), c in self.comparisons.items() if k == key):
            return marks  # no other row has a value to compare with ★'s
        marks[self.reference] = REFERENCE
        for (index, column), comparison in self.comparisons.items():
            if column == key:
                marks[index] = comparison.mark
        return marks


def family(rows: list[Row], columns: list[TableColumn], reference: int | None) -> Family:
    """Every row other than ``reference`` against it in every column of ``columns`` that ★ has a value in,
    tested (paired t-test, Holm over all of them) where the pair has ``MIN_TESTED_PAIRS`` seeds or more."""
    if reference is None or len(rows) < 2:
        return Family(reference, (), {}, {})
    base = rows[reference]
    keys = tuple(column.key for column in columns if base.stat(column.key).n)
    differences = {
        (index, key): paired_difference(row, base, key) for index, row in enumerate(rows) if index != reference for key in keys
    }
    tested = [cell for cell, difference in differences.items() if difference.tested]
    adjusted = dict(zip(tested, holm_adjusted([differences[cell].p for cell in tested])))
    comparisons = {cell: Comparison(difference, adjusted.get(cell)) for cell, difference in differences.items()}
    pairs = {index: len(unique_seeds(row) & unique_seeds(base)) for index, row in enumerate(rows) if index != reference}
    return Family(reference, keys, comparisons, pairs)


def marks_legend(found: Family) -> str:
    """The lines under the table: what each mark means, and how many comparisons the decisions are adjusted for."""
    shown = MARKS if found.size else [MARKS[0], MARKS[-1]]  # nothing tested: no ▲, ▼ or ≈ to explain
    meanings = "; ".join(f"{mark}: {meaning}" for mark, meaning in shown)
    return f"Marks in the accuracy columns, each with one meaning: {meanings}. {comparisons_sentence(found)}"


def comparisons_sentence(found: Family) -> str:
    """How many tests the report made (m) and how the decisions were adjusted for them."""
    m = found.size
    if m == 0:
        return f"No comparison is tested (none has {MIN_TESTED_PAIRS} or more seeds shared with {REFERENCE})."
    compared = len({index for (index, _), c in found.comparisons.items() if c.holm_p is not None})
    return (
        f"Comparisons tested: m = {m} ({compared} configuration(s) against {REFERENCE}, in every column {REFERENCE} has "
        f"values in, each with ≥ {MIN_TESTED_PAIRS} shared seeds), one family: the decisions are Holm-adjusted "
        f"(family-wise error ≤ {ALPHA:.0%} over all {m}); the paired section below gives each raw interval and p-value."
    )


def too_few_warning(rows: list[Row], found: Family) -> str | None:
    """A warning naming the configurations compared over fewer than ``MIN_TESTED_PAIRS`` seeds, or None."""
    few = found.too_few
    if not few:
        return None
    listed = ", ".join(f"{rows[index].configuration.label} ({found.pairs[index]})" for index in few)
    none_left = "no significance mark is given" if found.size == 0 else "those rows carry no significance mark"
    return (
        f"**Warning: fewer than {MIN_TESTED_PAIRS} paired seeds.** Seeds shared with {REFERENCE} "
        f"{rows[found.reference].configuration.label}: {listed}. With 2 seeds (1 degree of freedom) the 95% t quantile "
        f"is 12.7, and one seed gives no interval: {none_left}; their intervals are still given in the report's paired section. "
        f"Run {MIN_TESTED_PAIRS} seeds or more to test a difference."
    )


def format_p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def signed(value: float, digits: int) -> str:
    return f"{'−' if value < 0 else '+'}{abs(value):.{digits}f}"


def cells(comparison: Comparison, digits: int) -> list[str]:
    """The paired section's cells of one comparison: pairs, ``−10.00 [−12.48, −7.52]``, p, Holm's p̃ and the mark
    (``not tested`` below ``MIN_TESTED_PAIRS`` pairs, ``needs ≥ 2 seeds`` below ``MIN_PAIRS``)."""
    difference = comparison.difference
    if difference.mean is None or difference.low is None or difference.high is None or difference.p is None:
        return [str(difference.n), f"{TOO_FEW} ({difference.n} shared)", "", "", ""]
    interval = f"{signed(difference.mean, digits)} [{signed(difference.low, digits)}, {signed(difference.high, digits)}]"
    holm = format_p(comparison.holm_p) if comparison.holm_p is not None else f"not tested ({difference.n} pairs)"
    return [str(difference.n), interval, format_p(difference.p), holm, comparison.mark]


def paired_markdown(rows: list[Row], columns: list[TableColumn], found: Family, heading: str) -> list[str]:
    """The section under the tables: one line per comparison (a configuration other than ★ in a compared
    column), so that it fits a page however many columns the tables have."""
    if found.reference is None or len(rows) < 2:
        return []
    shown = [column for column in columns if column.key in found.keys]
    adjusted = (
        f"Holm: p adjusted over the report's m = {found.size} tests, and the mark it gives (as in the table)"
        if found.size
        else f"Holm: none tested (fewer than {MIN_TESTED_PAIRS} pairs everywhere)"
    )
    lines = [
        f"{heading} {REFERENCE} {rows[found.reference].configuration.label}",
        "",
        "Δ = configuration − ★ over the seeds both finished and logged (seed k: the same data order and augmentations "
        "in every configuration): mean [95% t-interval, n − 1 df] of the paired differences, unadjusted; p: the "
        f"paired t-test's two-sided p-value; {adjusted}; fewer than {MIN_TESTED_PAIRS} pairs: not tested; fewer than "
        f"{MIN_PAIRS}: no interval.",
        "",
        "| configuration | Δ of | pairs | Δ [95% t-interval] | p | Holm | mark |",
        "|---|---|---|---|---|---|---|",
    ]
    for index, row in enumerate(rows):
        if index == found.reference:
            continue
        for column in shown:
            comparison = found.comparisons[(index, column.key)]
            line = [row.configuration.label, column.shown.header, *cells(comparison, column.shown.digits)]
            lines.append("| " + " | ".join(line) + " |")
    return lines


#: The CSV's fields of a column's paired difference: ``<column>_paired_<part>``.
PAIRED_PARTS = ("delta", "low", "high", "n", "p", "holm_p")


def paired_cells(found: Family, index: int, key: str) -> list[object]:
    """The CSV's ``PAIRED_PARTS`` of row ``index`` − ★ in column ``key`` (full precision; all empty on ★ and
    without a comparison, the number of pairs alone below 2 pairs, ``holm_p`` empty when not tested)."""
    comparison = found.comparison(index, key)
    if comparison is None:
        return [""] * len(PAIRED_PARTS)
    difference = comparison.difference
    if difference.low is None:
        return ["", "", "", difference.n, "", ""]
    numbers = (difference.mean, difference.low, difference.high)
    return [repr(float(value)) for value in numbers] + [
        difference.n,
        repr(float(difference.p)) if difference.p is not None else "",
        repr(float(comparison.holm_p)) if comparison.holm_p is not None else "",
    ]
