"""What the report calls a difference (``ssl_app.report.significance``), checked against scipy on constructed
runs: the paired t-test's p-values (``scipy.stats.ttest_rel``), Holm's step-down over the report's m tests,
no test and a warning below 3 paired seeds, one meaning per mark, tables that fit a page."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest
from scipy import stats

from ssl_app.report.cli import make_report
from ssl_app.report.groups import group_runs
from ssl_app.report.paired import PAIRED_HEADING, reference_index
from ssl_app.report.runs import load_runs
from ssl_app.report.significance import MARKS, family, holm_adjusted
from ssl_app.report.summary import build_rows, resolve_columns
from ssl_app.report.table import HEADLINE_KEYS, MAX_METRIC_COLUMNS, SECONDARY_HEADING, markdown_table
from tests.ssl_app.report.fakes import main_table, run_config, write_run

#: kNN, uniformity and tolerance by τ and seed. Against τ=0.3 (the highest kNN), τ=0.5's kNN is lower at every seed
#: (−3, −5, −4: raw p = 0.020, its interval excludes 0) and τ=0.9's much lower (p = 0.003); uniformity and
#: tolerance differ by noise (large p). Holm over the 6 tests calls τ=0.9's kNN only.
VALUES = {
    0.3: {0: (0.60, 3.60, 0.200), 1: (0.62, 3.62, 0.210), 2: (0.64, 3.58, 0.190)},
    0.5: {0: (0.57, 3.61, 0.195), 1: (0.57, 3.60, 0.215), 2: (0.60, 3.59, 0.185)},
    0.9: {0: (0.50, 3.59, 0.205), 1: (0.51, 3.63, 0.200), 2: (0.55, 3.57, 0.198)},
}
COLUMNS = ("knn_acc", "uniformity", "tolerance")
SCALE = {"knn_acc": 100.0, "uniformity": 1.0, "tolerance": 1.0}


def write_study(root, values, epochs=1):
    for tau, by_seed in values.items():
        for seed, (knn, uniformity, tolerance) in by_seed.items():
            final = {"knn_acc": knn, "uniformity": uniformity, "tolerance": tolerance}
            write_run(root / f"t{tau}_s{seed}", run_config("InfoNCE", seed, temperature=tau), final, epochs=epochs)
    return root


def stored(value: float, key: str) -> float:
    return SCALE[key] * float(np.float32(value))  # as the event file holds it


@pytest.fixture(scope="module")
def holm_study(tmp_path_factory):
    return write_study(tmp_path_factory.mktemp("holm"), VALUES)


def rows_of(root):
    configurations = group_runs(load_runs(root))
    return configurations, build_rows(configurations)


def test_holm_on_constructed_p_values_is_the_step_down_rule_and_differs_from_unadjusted():
    """Catches Bonferroni (m·p for all), BH, a step-up, a missing running maximum, or the order of the input lost."""
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm_adjusted(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # the step-down rule itself: reject p_(1), p_(2), … while p_(i) ≤ α / (m − i + 1), then stop
    order, rejected = sorted(range(4), key=p.__getitem__), set()
    for rank, index in enumerate(order):
        if p[index] > 0.05 / (4 - rank):
            break
        rejected.add(index)
    assert {index for index, q in enumerate(holm_adjusted(p)) if q <= 0.05} == rejected == {0, 3}
    assert all(q <= 0.05 for q in p)  # unadjusted, all four would be called
    assert holm_adjusted([0.5, 0.001]) == pytest.approx([0.5, 0.002]) and holm_adjusted([]) == []


def test_decisions_are_holm_over_every_tested_comparison_with_scipy_p_values(holm_study):
    """Catches an unadjusted decision (τ=0.5's kNN interval excludes 0, but not after Holm over m = 6), p-values
    that are not the paired t-test's, or a family that leaves out the columns outside the marked ones."""
    _, rows = rows_of(holm_study)
    star = reference_index(rows)
    assert rows[star].configuration.temperature == 0.3
    found = family(rows, resolve_columns(rows), star)
    assert found.size == 6
    expected = {}
    for index, row in enumerate(rows):
        if index == star:
            continue
        tau = row.configuration.temperature
        for column, key in enumerate(COLUMNS):
            ours = [stored(VALUES[tau][seed][column], key) for seed in (0, 1, 2)]
            theirs = [stored(VALUES[0.3][seed][column], key) for seed in (0, 1, 2)]
            expected[(index, key)] = stats.ttest_rel(ours, theirs).pvalue
    cells = list(expected)
    holm = dict(zip(cells, holm_adjusted([expected[cell] for cell in cells])))
    for cell, p in expected.items():
        comparison = found.comparison(*cell)
        assert comparison.difference.p == pytest.approx(p, rel=1e-9) and comparison.holm_p == pytest.approx(holm[cell])
    tau_05 = next(i for i, row in enumerate(rows) if row.configuration.temperature == 0.5)
    raw = found.comparison(tau_05, "knn_acc")
    assert raw.difference.high < 0 and raw.difference.p < 0.05 < raw.holm_p  # Holm and unadjusted differ here
    marks = found.marks("knn_acc", len(rows))
    assert [marks[i] for i in range(len(rows))] == ["★" if i == star else "≈" if i == tau_05 else "▼" for i in range(3)]

    markdown = markdown_table(rows, group_runs(load_runs(holm_study)))
    assert "m = 6" in markdown and "Holm" in markdown and "Warning" not in markdown
    section = markdown[markdown.index(PAIRED_HEADING) :]
    [line] = [line for line in section.splitlines() if line.startswith("| InfoNCE τ=0.5 | kNN (%) |")]
    pattern = r"\| InfoNCE τ=0\.5 \| kNN \(%\) \| 3 \| −4\.00 \[−6\.48, −1\.52\] \| 0\.020 \| 0\.\d+ \| ≈ \|"
    assert re.fullmatch(pattern, line), line  # the raw interval excludes 0, p < 0.05; Holm's p̃ > 0.05: ≈


def test_with_fewer_than_3_paired_seeds_a_warning_and_no_significance_mark(tmp_path):
    """Catches issue 40's reading: 2 seeds (1 df) and a consistent difference (t = 12.7) marked as real with no
    warning. The intervals are still shown."""
    two_seeds = {0.3: {0: (0.60, 3.6, 0.2), 1: (0.62, 3.6, 0.2)}, 0.5: {0: (0.50, 3.5, 0.3), 1: (0.51, 3.5, 0.3)}}
    configurations, rows = rows_of(write_study(tmp_path, two_seeds))
    markdown = markdown_table(rows, configurations)
    assert "**Warning: fewer than 3 paired seeds.**" in markdown and "InfoNCE τ=0.5 (2)" in markdown
    assert "No comparison is tested" in markdown
    table = main_table(markdown)
    assert not any(mark in line for line in table.splitlines() if line.startswith("| ") for mark in ("▲", "▼", "≈"))
    assert not any(mark in table for mark in ("▲", "▼", "≈"))  # nor explained: the legend lists ★ and "no mark"
    [line] = [line for line in table.splitlines() if line.startswith("| InfoNCE τ=0.5")]
    assert "★" not in line and line.split(" | ")[2].strip() == "50.50 ± 0.71"  # no mark at all on the compared row
    section = markdown[markdown.index(PAIRED_HEADING) :]
    [paired] = [line for line in section.splitlines() if line.startswith("| InfoNCE τ=0.5 | kNN (%) |")]
    assert "| −10.50 [" in paired and paired.endswith("| not tested (2 pairs) |  |")


def test_every_mark_has_one_meaning_listed_under_the_table(tmp_path):
    """A 3-seed and a 2-seed comparison side by side: each cell of an accuracy column carries the mark of its one
    state (★, ▲/▼ called, ≈ tested and not called, none: not tested), and every mark is explained under the table.
    Catches issue 40's "no mark" that meant either "interval excludes 0" or "fewer than 2 seeds"."""
    values = {tau: dict(VALUES[tau]) for tau in (0.3, 0.9)}
    values[0.7] = {0: (0.40, 3.6, 0.2), 1: (0.41, 3.6, 0.2)}  # far lower, but 2 seeds: not tested
    configurations, rows = rows_of(write_study(tmp_path, values))
    markdown = markdown_table(rows, configurations)
    table = main_table(markdown)
    knn = {line.split(" | ")[0].strip("| "): line.split(" | ")[2] for line in table.splitlines() if line.startswith("| Info")}
    assert knn["InfoNCE τ=0.3"].endswith(" ★") and knn["InfoNCE τ=0.9"].endswith(" ▼")
    assert not re.search(r"[★▲▼≈]", knn["InfoNCE τ=0.7"])
    assert "Warning: fewer than 3 paired seeds" in markdown and "InfoNCE τ=0.7 (2)" in markdown
    legend = table[table.index("Marks in the accuracy columns") :].split("\n")[0]
    for mark, meaning in MARKS:
        assert legend.count(f"{mark}: ") == 1 and meaning in legend
    assert "no mark: not tested" in legend and "m = 3" in legend  # τ=0.9 × 3 columns


def test_the_tables_fit_a_page_headline_first_secondary_after(study):
    """Catches issue 40's 15-column table: the first table holds the headline numbers, the others follow in tables
    of at most MAX_METRIC_COLUMNS, each column once."""
    configurations, rows = rows_of(study.root)  # the report tests' fake sweep: every column logged
    markdown = markdown_table(rows, configurations)
    before = markdown.split(PAIRED_HEADING)[0]
    assert SECONDARY_HEADING in before
    headers = [line for line in before.splitlines() if line.startswith("| configuration |")]
    assert len(headers) >= 2 and all(len(line.strip("|").split("|")) <= 2 + MAX_METRIC_COLUMNS for line in headers)
    shown = [cell.strip() for line in headers for cell in line.strip("|").split("|")[2:]]
    columns = resolve_columns(rows)
    assert shown[: len(HEADLINE_KEYS)] == [c.shown.header for c in columns if c.key in HEADLINE_KEYS]
    assert sorted(shown) == sorted(c.shown.header for c in columns) and len(set(shown)) == len(shown)


def test_the_csv_holds_p_and_holm_p(holm_study, tmp_path):
    """Catches the CSV without the numbers a reader re-checks the decisions with."""
    report = make_report(holm_study, tmp_path)
    with open(report.csv_path, newline="", encoding="utf-8") as handle:
        lines = {line["configuration"]: line for line in csv.DictReader(handle)}
    ours = [stored(VALUES[0.9][seed][0], "knn_acc") for seed in (0, 1, 2)]
    theirs = [stored(VALUES[0.3][seed][0], "knn_acc") for seed in (0, 1, 2)]
    assert float(lines["InfoNCE τ=0.9"]["knn_acc_paired_p"]) == pytest.approx(stats.ttest_rel(ours, theirs).pvalue)
    assert float(lines["InfoNCE τ=0.9"]["knn_acc_paired_holm_p"]) <= 0.05
    assert lines["InfoNCE τ=0.3"]["knn_acc_paired_p"] == lines["InfoNCE τ=0.3"]["knn_acc_paired_holm_p"] == ""
