"""``runs.csv`` (``ssl_app.report.per_seed``): each run's own numbers, from which the table's means and paired
differences are recomputed (issue 40 item 11: the recorded studies had lost them)."""

from __future__ import annotations

import csv
import statistics

from ssl_app.report import main


def read(path):
    with path.open(encoding="utf-8") as file:
        return list(csv.DictReader(file))


def test_the_runs_csv_gives_back_the_table_s_means_and_paired_differences(study, tmp_path, capsys):
    """Catches per-run values written in another order than their runs (a seed's value under another seed), a
    run left out, or columns named otherwise than in table.csv: the means and the paired Δ would not come back."""
    out = tmp_path / "out"
    assert main([str(study.root), "--out", str(out), "--baseline", "InfoNCE τ=0.7"]) == 0
    capsys.readouterr()
    table, runs = read(out / "table.csv"), read(out / "runs.csv")
    assert {row["configuration"] for row in runs} == {row["configuration"] for row in table}
    assert sum(int(row["n"]) for row in table) == len(runs)
    assert len({row["run"] for row in runs}) == len(runs) and all(not row["run"].startswith("/") for row in runs)
    by_configuration: dict[str, dict[str, dict[str, str]]] = {}
    for run in runs:
        by_configuration.setdefault(run["configuration"], {})[run["seed"]] = run
    columns = [name for name in runs[0] if name not in ("configuration", "seed", "run")]
    checked_means = checked_deltas = 0
    baseline = by_configuration["InfoNCE τ=0.7"]
    for row in table:
        own = by_configuration[row["configuration"]]
        for column in columns:
            values = [float(run[column]) for run in own.values() if run[column]]
            if values:
                assert statistics.fmean(values) == float(row[f"{column}_mean"])
                checked_means += 1
            if row[f"{column}_paired_delta"]:
                shared = [seed for seed in own if own[seed][column] and baseline.get(seed, {}).get(column)]
                differences = [float(own[seed][column]) - float(baseline[seed][column]) for seed in shared]
                assert abs(statistics.fmean(differences) - float(row[f"{column}_paired_delta"])) < 1e-12
                checked_deltas += 1
    assert checked_means >= 10 and checked_deltas >= 3
