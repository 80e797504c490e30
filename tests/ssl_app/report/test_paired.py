"""Paired differences over shared seeds (``ssl_app.report.paired``), on runs written by the real
event writer: the exact t-interval and p-value, the marks, unpaired seeds left out, ``--baseline``."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from scipy import stats

from ssl_app.errors import ConfigError
from ssl_app.report.cli import make_report
from ssl_app.report.groups import group_runs
from ssl_app.report.paired import paired_difference, reference_index
from ssl_app.report.runs import load_runs
from ssl_app.report.significance import family
from ssl_app.report.summary import build_rows, resolve_columns
from ssl_app.report.table import markdown_table, write_csv
from tests.ssl_app.report.fakes import run_config, write_run

#: kNN accuracy by configuration (τ) and seed. τ=0.7's seed 3 and τ=1's seed 4 have no partner in τ=0.3.
KNN = {
    0.3: {0: 0.50, 1: 0.55, 2: 0.61},
    0.7: {0: 0.45, 1: 0.52, 2: 0.53, 3: 0.10},
    1.0: {0: 0.40, 1: 0.46, 2: 0.50, 4: 0.20},
    2.0: {2: 0.30, 5: 0.30},
}
T_975_2DF = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom


@pytest.fixture(scope="module")
def paired_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("paired")
    for tau, by_seed in KNN.items():
        for seed, knn in by_seed.items():
            write_run(root / f"t{tau}_s{seed}", run_config("InfoNCE", seed, temperature=tau), {"knn_acc": knn}, epochs=1)
    return root


def row_of(rows, tau):
    [row] = [row for row in rows if row.configuration.temperature == tau]
    return row


def test_a_known_paired_difference_gives_the_exact_t_interval(paired_runs):
    """Catches pairing by position instead of seed (τ=0.7's unpaired seed 3 would enter), an interval
    from the unpaired stds, a z instead of a t quantile, or the wrong degrees of freedom."""
    rows = build_rows(group_runs(load_runs(paired_runs)))
    star = reference_index(rows)
    assert rows[star].configuration.temperature == 0.3  # highest mean kNN
    for tau in (0.7, 1.0):
        got = paired_difference(row_of(rows, tau), rows[star], "knn_acc")
        ours = [100 * float(np.float32(KNN[tau][seed])) for seed in (0, 1, 2)]  # as the event file holds them
        theirs = [100 * float(np.float32(KNN[0.3][seed])) for seed in (0, 1, 2)]
        differences = np.subtract(ours, theirs)
        half = T_975_2DF * np.std(differences, ddof=1) / np.sqrt(3)
        assert got.seeds == (0, 1, 2) and got.n == 3
        assert got.mean == pytest.approx(differences.mean(), abs=1e-9)
        assert (got.low, got.high) == pytest.approx((differences.mean() - half, differences.mean() + half), abs=1e-9)
        peer = stats.ttest_rel(ours, theirs)  # scipy's paired t-test
        assert (got.low, got.high) == pytest.approx(tuple(peer.confidence_interval(0.95)), abs=1e-9)
        assert got.p == pytest.approx(peer.pvalue, rel=1e-9)
    # τ=0.7: differences −5, −3, −8 → −5.33 [−11.58, +0.92], p 0.067; τ=1: −10, −9, −11 → [−12.48, −7.52], p 0.0033;
    # Holm over these two tests (τ=2 shares one seed: not tested): 0.0033 × 2 ≤ 0.05 called, 0.067 not
    found = family(rows, resolve_columns(rows), star)
    assert found.size == 2
    assert found.marks("knn_acc", len(rows)) == ["★", "≈", "▼", ""]
    assert found.marks("alignment", len(rows)) == ["", "", "", ""]  # not an accuracy column


def table_of(root, baseline=None):
    configurations = group_runs(load_runs(root))
    return markdown_table(build_rows(configurations), configurations, baseline=baseline)


def test_the_report_prints_paired_differences_with_intervals(paired_runs):
    """What a reader sees: the reference, the number of pairs, the raw interval and p beside Holm's decision,
    and no interval from a single shared seed (τ=2 shares only seed 2 with τ=0.3)."""
    markdown = table_of(paired_runs)
    section = markdown[markdown.index("### Paired differences against ★ InfoNCE τ=0.3") :]
    lines = {line.split(" | ")[0].strip("| "): line for line in section.splitlines() if line.startswith("| InfoNCE")}
    assert lines["InfoNCE τ=0.7"] == "| InfoNCE τ=0.7 | kNN (%) | 3 | −5.33 [−11.58, +0.92] | 0.067 | 0.067 | ≈ |"
    assert lines["InfoNCE τ=1"] == "| InfoNCE τ=1 | kNN (%) | 3 | −10.00 [−12.48, −7.52] | 0.003 | 0.007 | ▼ |"
    assert lines["InfoNCE τ=2"] == "| InfoNCE τ=2 | kNN (%) | 1 | needs ≥ 2 seeds (1 shared) |  |  |  |"
    assert "InfoNCE τ=0.3 |" not in section.split("\n", 1)[1]  # the reference is not compared with itself


def test_baseline_names_the_reference_and_an_unknown_one_stops_the_report(paired_runs, tmp_path):
    """Catches ``--baseline`` ignored (in the table or the CSV), or an unknown label that falls back
    silently (or writes files first)."""
    markdown = table_of(paired_runs, baseline="InfoNCE τ=1")
    assert "### Paired differences against ★ InfoNCE τ=1" in markdown
    assert "| InfoNCE τ=0.3 | kNN (%) | 3 | +10.00 [+7.52, +12.48] | 0.003 | 0.007 | ▲ |" in markdown
    write_csv(build_rows(group_runs(load_runs(paired_runs))), tmp_path / "table.csv", baseline="InfoNCE τ=1")
    with open(tmp_path / "table.csv", newline="", encoding="utf-8") as handle:
        lines = {line["configuration"]: line for line in csv.DictReader(handle)}
    assert lines["InfoNCE τ=1"]["paired_reference"] == "1" and lines["InfoNCE τ=0.3"]["paired_reference"] == "0"
    low, high = (float(lines["InfoNCE τ=0.3"][f"knn_acc_paired_{part}"]) for part in ("low", "high"))
    assert (low, high) == pytest.approx((10 - T_975_2DF / np.sqrt(3), 10 + T_975_2DF / np.sqrt(3)), abs=1e-4)
    assert lines["InfoNCE τ=0.3"]["knn_acc_paired_n"] == "3" and lines["InfoNCE τ=1"]["knn_acc_paired_delta"] == ""
    assert lines["InfoNCE τ=2"]["knn_acc_paired_delta"] == "" and lines["InfoNCE τ=2"]["knn_acc_paired_n"] == "1"
    with pytest.raises(ConfigError, match="--baseline 'InfoNCE τ=9' is no configuration of the table; its labels: InfoNCE τ=0.3"):
        make_report(paired_runs, tmp_path / "b", baseline="InfoNCE τ=9")
    assert not (tmp_path / "b").exists()


def test_a_baseline_as_reports_printed_it_before_labels_were_canonical_still_names_its_row(tmp_path):
    """Catches a ``--baseline`` that worked before τ labels became the grid's spelling (``τ=cosine:0.1-1:T200``,
    now ``τ=cosine:0.1-1:T=200``) refused after the change: nothing a user types changes."""
    schedule = {"class_path": "ssl_app.temperature.Cosine", "init_args": {"low": 0.1, "high": 1.0, "period": 200.0}}
    for seed in (0, 1):
        write_run(tmp_path / f"cos_{seed}", run_config("InfoNCE", seed, temperature=schedule), {"knn_acc": 0.4}, epochs=1)
        write_run(tmp_path / f"num_{seed}", run_config("InfoNCE", seed, temperature=0.3), {"knn_acc": 0.5}, epochs=1)
    rows = build_rows(group_runs(load_runs(tmp_path)))
    labels = [row.configuration.label for row in rows]
    assert labels == ["InfoNCE τ=0.3", "InfoNCE τ=cosine:0.1-1:T=200"]
    assert reference_index(rows, "InfoNCE τ=cosine:0.1-1:T200") == reference_index(rows, labels[1]) == 1
    with pytest.raises(ConfigError, match="is no configuration"):
        reference_index(rows, "InfoNCE τ=cosine:0.1-1:T300")


def test_a_baseline_written_as_the_grid_writes_tau_names_its_row_and_an_ambiguous_one_is_refused(tmp_path):
    """``--baseline tau=0.5`` (issue 40: only the Unicode label worked), the grid's ``tau=cosine:0.1-1.0:T=200`` and
    the policy's label alone name the row with that τ; a τ two losses share names no single row."""
    schedule = {"class_path": "ssl_app.temperature.Cosine", "init_args": {"low": 0.1, "high": 1.0, "period": 200.0}}
    for seed in (0, 1):
        write_run(tmp_path / f"cos_{seed}", run_config("InfoNCE", seed, temperature=schedule), {"knn_acc": 0.4}, epochs=1)
        write_run(tmp_path / f"num_{seed}", run_config("InfoNCE", seed, temperature=0.5), {"knn_acc": 0.5}, epochs=1)
    rows = build_rows(group_runs(load_runs(tmp_path)))
    assert [row.configuration.label for row in rows] == ["InfoNCE τ=0.5", "InfoNCE τ=cosine:0.1-1:T=200"]
    assert reference_index(rows, "tau=0.5") == reference_index(rows, "τ=0.50") == reference_index(rows, "0.5") == 0
    assert reference_index(rows, "tau=cosine:0.1-1.0:T=200") == reference_index(rows, "cosine:0.1-1:T=200") == 1
    with pytest.raises(ConfigError, match="--baseline 'tau=0.7' is no configuration"):
        reference_index(rows, "tau=0.7")
    for seed in (0, 1):
        write_run(tmp_path / f"dcl_{seed}", run_config("DCL", seed, temperature=0.5), {"knn_acc": 0.45}, epochs=1)
    rows = build_rows(group_runs(load_runs(tmp_path)))
    with pytest.raises(ConfigError, match="--baseline 'tau=0.5' is no configuration"):
        reference_index(rows, "tau=0.5")
    assert reference_index(rows, "DCL τ=0.5") == [row.configuration.label for row in rows].index("DCL τ=0.5")
