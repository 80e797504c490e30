"""Table 1's numbers: mean ± std over seeds, footnotes, CSV; expected values computed here."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from ssl_app.report.groups import group_runs
from ssl_app.report.runs import load_runs
from ssl_app.report.summary import build_rows, resolve_columns
from ssl_app.report.table import markdown_table, write_csv
from tests.ssl_app.report.fakes import all_tables, run_config, write_run

# column key as the table shows it -> (metric written by the fakes, scale, decimals shown)
EPOCH_COLUMNS = {
    "knn_acc": ("knn_acc", 100, 2),
    "uniformity": ("uniformity", 1, 3),
    "tolerance": ("tolerance", 1, 3),
    "alignment": ("alignment", 1, 3),
    "pos_sim": ("pos_sim", 1, 3),
    "top10_neg_sim": ("top10_neg_sim", 1, 3),
    "effective_rank": ("effective_rank", 1, 3),
    "effective_rank_backbone": ("effective_rank_backbone", 1, 3),
    "spectrum_alpha": ("spectrum_alpha", 1, 3),
    "spectrum_alpha_backbone": ("spectrum_alpha_backbone", 1, 3),
    "wasserstein_uniformity": ("wasserstein_uniformity", 1, 3),
    "lidar": ("lidar", 1, 3),
    "top10_train_neg_sim": ("top10_train_neg_sim", 1, 3),
}


def expected(study, label: str) -> dict[str, list[float]]:
    """Each column's per-seed values for ``label``, straight from what the fakes wrote (as the
    float32 TensorBoard stores)."""
    finals = study.finals[label]
    values = {
        key: [float32(f[metric]) * scale for f in finals if metric in f] for key, (metric, scale, _) in EPOCH_COLUMNS.items()
    }
    values["linear_top1"] = [100 * float32(v) for v in study.linear[label]]
    values["effective_negatives"] = [float(np.mean(seed[-1])) for seed in study.effective_negatives[label]]
    return values


def float32(value: float) -> float:
    return float(np.float32(value))


def cell(values: list[float], decimals: int) -> str:
    if len(values) == 1:
        return f"{values[0]:.{decimals}f}"
    return f"{np.mean(values):.{decimals}f} ± {np.std(values, ddof=1):.{decimals}f}"


def table_lines(markdown: str) -> list[list[str]]:
    """The first table and the secondary ones as one: header, then a line per configuration."""
    return all_tables(markdown)


@pytest.fixture(scope="module")
def report(study):
    configurations = group_runs(load_runs(study.root))
    rows = build_rows(configurations)
    return configurations, rows, markdown_table(rows, configurations, title="fake sweep")


def test_one_row_per_configuration_with_mean_and_std_over_seeds(study, report):
    _, rows, markdown = report
    header, *body = table_lines(markdown)
    assert header[:3] == ["configuration", "n", "linear top-1 (%)"]
    assert [row[:2] for row in body] == [["InfoNCE τ=0.3 [1]", "2"], ["InfoNCE τ=0.7", "2"]]
    decimals = {key: spec[2] for key, spec in EPOCH_COLUMNS.items()} | {"linear_top1": 2, "effective_negatives": 1}
    columns = resolve_columns(rows)
    assert len(columns) == len(header) - 2 == len(decimals)
    for row, label in zip(body, ("InfoNCE τ=0.3", "InfoNCE τ=0.7")):
        want = expected(study, label)
        for column, text in zip(columns, row[2:]):
            key = column.shown.key
            assert text.split(" [")[0].removesuffix(" ★").removesuffix(" ≈") == cell(want[key], decimals[key]), (label, key)


def test_effective_negatives_is_the_mean_over_the_final_epochs_steps(report):
    _, rows, _ = report
    assert rows[0].values["effective_negatives"] == [13.0, 23.0]  # epochs before the last are ignored


def test_footnotes_name_the_failed_run_and_the_missing_value(report):
    _, _, markdown = report
    assert markdown.startswith("## fake sweep\n")
    [failed] = [line for line in markdown.splitlines() if line.startswith("[1] ")]
    assert "not averaged" in failed and "infonce_t0.3/seed2" in failed and "failed" in failed
    [missing] = [line for line in markdown.splitlines() if line.startswith("[2] ")]
    assert "metrics/tolerance" in missing and "infonce_t0.7/seed1" in missing and "1 of 2 runs" in missing
    assert table_lines(markdown)[2][5] == "0.333 [2]"  # one value: the mean alone


def test_csv_holds_the_same_numbers(study, report, tmp_path):
    _, rows, _ = report
    write_csv(rows, tmp_path / "table.csv")
    with open(tmp_path / "table.csv", newline="", encoding="utf-8") as handle:
        lines = list(csv.DictReader(handle))
    assert [line["configuration"] for line in lines] == ["InfoNCE τ=0.3", "InfoNCE τ=0.7"]
    for line in lines:
        want = expected(study, line["configuration"])
        assert line["n"] == "2"
        for key, values in want.items():
            assert int(line[f"{key}_n"]) == len(values)
            assert float(line[f"{key}_mean"]) == pytest.approx(np.mean(values), rel=1e-5)
            if len(values) > 1:
                assert float(line[f"{key}_std"]) == pytest.approx(np.std(values, ddof=1), rel=1e-4)
            else:
                assert line[f"{key}_std"] == ""


def test_a_column_no_run_logged_is_left_out_and_named(tmp_path):
    """Catches an empty column kept in the table (issue 40: ``top10 train neg sim`` shown with no value), or
    one dropped without a word."""
    for seed in (0, 1):
        write_run(tmp_path / f"s{seed}", run_config("Simple", seed), {"uniformity": 1.5 + seed, "tolerance": 0.6})
    configurations = group_runs(load_runs(tmp_path))
    rows = build_rows(configurations)

    markdown = markdown_table(rows, configurations)

    header, row = table_lines(markdown)
    assert header == ["configuration", "n", "uniformity", "tolerance"]  # linear top-1, kNN, eff. negatives, …: gone
    assert row == ["Simple", "2", f"{2.0:.3f} ± {np.std([1.5, 2.5], ddof=1):.3f}", "0.600 ± 0.000"]
    [note] = [line for line in markdown.splitlines() if "logged by no run" in line]
    assert "`linear/top1`, `metrics/knn_acc`" in note and "`loss/effective_negatives`" in note


def test_a_value_no_run_of_a_row_logged_is_an_empty_cell_with_a_footnote(tmp_path):
    write_run(tmp_path / "a", run_config("InfoNCE", 0, 0.5), {"uniformity": 3.0, "knn_acc": 0.5})
    write_run(tmp_path / "b", run_config("Simple", 0), {"uniformity": 1.5})
    configurations = group_runs(load_runs(tmp_path))

    markdown = markdown_table(build_rows(configurations), configurations)

    header, infonce, simple = table_lines(markdown)
    assert header[2] == "kNN (%)" and infonce[2] == "50.00" and simple[2].startswith("[")
    marker = simple[2]
    [note] = [line for line in markdown.splitlines() if line.startswith(marker + " ")]
    assert note.startswith(f"{marker} Simple:") and "`metrics/knn_acc`" in note and "`b`" in note and "empty" in note


def test_without_an_epoch_tag_effective_negatives_is_the_last_value(tmp_path):
    write_run(
        tmp_path / "r",
        run_config("InfoNCE", 0, 0.5),
        {"uniformity": 3.0},
        effective_negatives=[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],
        log_epoch=False,
    )
    [row] = build_rows(group_runs(load_runs(tmp_path)))
    assert row.values["effective_negatives"] == [12.0]


def test_a_collapsed_run_is_named(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    run = write_run(tmp_path / "r", run_config("InfoNCE", 0, 0.07), {"uniformity": 0.01})
    with SummaryWriter(log_dir=str(run)) as writer:
        writer.add_scalar("metrics/collapsed", 1.0, 100)
    configurations = group_runs(load_runs(tmp_path))
    assert "representation collapsed" in markdown_table(build_rows(configurations), configurations)


def test_uniformity_on_augmented_views_is_flagged(tmp_path):
    config = run_config("InfoNCE", 0, 0.5)
    config["trainer"]["callbacks"][0]["init_args"] = {"uniformity_inputs": "augmented"}
    write_run(tmp_path / "r", config, {"uniformity": 2.0})
    configurations = group_runs(load_runs(tmp_path))
    assert "not comparable with Table 1" in markdown_table(build_rows(configurations), configurations)
