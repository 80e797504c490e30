"""The table against the paper (--reference table1), the r(s) curves
and the paper's points in the uniformity–tolerance plane."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from ssl_app.report.cli import make_report
from ssl_app.report.compare import matches
from ssl_app.report.figures import paper_points
from ssl_app.report.groups import group_runs
from ssl_app.report.penalty import penalty_curves
from ssl_app.report.runs import load_runs
from ssl_app.report.summary import build_rows
from tests.ssl_app.report.fakes import main_table, run_config, write_run

CIFAR10 = "datamodules.CIFAR10DataModule"


def table_lines(markdown: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")] for line in main_table(markdown).splitlines() if line.startswith("| ")
    ]


@pytest.fixture(scope="module")
def cifar_runs(tmp_path_factory):
    """CIFAR-10 InfoNCE τ=0.3 (two seeds, a Table-1 cell) and τ=0.5 (one seed, no cell)."""
    root = tmp_path_factory.mktemp("cifar")
    for seed, (top1, unif, tol) in enumerate(((0.8301, 3.55, 0.20), (0.8353, 3.57, 0.22))):
        config = run_config("InfoNCE", seed, 0.3, data=CIFAR10)
        write_run(root / f"t0.3_s{seed}", config, {"uniformity": unif, "tolerance": tol}, linear_top1=top1)
    write_run(root / "t0.5", run_config("InfoNCE", 0, 0.5, data=CIFAR10), {"uniformity": 3.3, "tolerance": 0.3}, linear_top1=0.82)
    return root


def test_reference_puts_the_paper_value_and_the_difference_beside_each_cell(cifar_runs, tmp_path):
    """Catches the paper's value of another cell, a difference of the wrong sign, or a run outside
    Table 1 compared with some cell instead of a dash."""
    report = make_report(cifar_runs, tmp_path, reference="table1")

    header, matched, unmatched = table_lines(report.markdown)
    column = {name: index for index, name in enumerate(header)}
    assert matched[column["Table-1 cell"]] == "cifar10 / InfoNCE τ=0.3"
    measured = np.mean([83.01, 83.53])
    assert matched[column["paper linear top-1 (%)"]] == "83.27"
    assert matched[column["Δ linear top-1 (%)"]] == f"{'+' if measured >= 83.27 else '−'}{abs(measured - 83.27):.2f}"
    assert matched[column["paper uniformity"]] == "3.600" and matched[column["Δ uniformity"]] == "−0.040"
    assert matched[column["paper tolerance"]] == "0.178" and matched[column["Δ tolerance"]] == "+0.032"
    assert unmatched[column["Table-1 cell"]].startswith("— [")
    for name in ("paper linear top-1 (%)", "Δ linear top-1 (%)", "paper uniformity", "Δ tolerance"):
        assert unmatched[column[name]] == "—"
    marker = unmatched[column["Table-1 cell"]].split()[-1]
    [note] = [line for line in report.markdown.splitlines() if line.startswith(marker + " ")]
    assert "InfoNCE τ=0.5" in note and "none of Table 1's columns" in note
    with open(report.csv_path, newline="", encoding="utf-8") as handle:
        lines = list(csv.DictReader(handle))
    assert lines[0]["table1_cell"] == "cifar10 / InfoNCE τ=0.3" and float(lines[0]["uniformity_paper"]) == 3.6
    assert float(lines[0]["uniformity_delta"]) == pytest.approx(3.56 - 3.6, abs=1e-5)
    assert lines[1]["table1_cell"] == "" and lines[1]["linear_top1_paper"] == ""


def test_without_reference_the_table_has_no_paper_columns(cifar_runs, tmp_path):
    """Catches the comparison shown (and the table widened) when it was not asked for."""
    header = table_lines(make_report(cifar_runs, tmp_path).markdown)[0]
    assert "Table-1 cell" not in header and not any(name.startswith(("paper", "Δ")) for name in header)


def test_the_paper_points_join_the_plane_for_the_matched_data_set(cifar_runs):
    """Catches paper points of a data set no run used, or of columns without uniformity."""
    rows = build_rows(group_runs(load_runs(cifar_runs)))
    points = paper_points(matches(rows))
    assert len(points) == 10
    assert {(p.label, p.uniformity, p.tolerance) for p in points} >= {("paper InfoNCE τ=0.3", 3.60, 0.178)}


def test_penalty_curves_one_per_tau_normalised_and_steeper_for_smaller_tau(study):
    """Catches a curve not normalised over the top-k negatives, τ taken from the wrong
    configuration, or the curves out of τ order."""
    curves = penalty_curves(build_rows(group_runs(load_runs(study.root))))

    assert [curve.temperature for curve in curves] == [0.3, 0.7]
    for curve in curves:
        assert curve.runs == 2 and curve.k == 10 and curve.negatives == "top10"  # no all-negatives histogram
        assert curve.k * np.sum(curve.weight * curve.penalty) == pytest.approx(1.0)
        slope = np.polyfit(curve.similarity, np.log(curve.penalty), 1)[0]
        assert slope == pytest.approx(1 / curve.temperature)
    # the smaller τ puts a larger share of the penalty on its most similar tenth of negatives
    shares = []
    for curve in curves:
        top = curve.similarity >= np.quantile(np.repeat(curve.similarity, (curve.weight * 1e4).astype(int)), 0.9)
        shares.append(curve.k * np.sum((curve.weight * curve.penalty)[top]))
    assert shares[0] > shares[1]
