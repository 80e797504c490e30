"""The table's columns come from the metric registry and each run's saved config: a metric
registered with one decorator is a column, and the top-k and kNN options are each run's own."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from ssl_app.metrics import EMBEDDING_METRICS, EmbeddingInputs, register
from ssl_app.report.cli import make_report
from ssl_app.report.figures import curve_columns
from ssl_app.report.groups import group_runs
from ssl_app.report.runs import load_runs
from ssl_app.report.summary import build_rows, resolve_columns
from ssl_app.report.table import markdown_table, write_csv
from ssl_app.runs.headline import TABLE_ORDER, table_columns
from tests.ssl_app.report.fakes import run_config, write_run
from tests.ssl_app.report.test_table import table_lines

THROWAWAY = "mean_norm"


def register_throwaway() -> None:
    """A metric the code does not have, registered the one way a metric is added."""

    @register(THROWAWAY, reads=("clean",), formula="mean ||z_i|| of the clean input, before normalising")
    def _mean_norm(x: EmbeddingInputs):
        return {THROWAWAY: x.clean.norm(dim=1).mean()}


@pytest.fixture
def throwaway():
    register_throwaway()
    yield
    EMBEDDING_METRICS.pop(THROWAWAY, None)


def csv_lines(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def column_cells(markdown: str, header_start: str) -> tuple[str, list[str]]:
    """The header of the one column whose header starts with ``header_start``, and its cells."""
    header, *body = table_lines(markdown)
    [index] = [i for i, text in enumerate(header) if text.startswith(header_start)]
    return header[index], [row[index] for row in body]


def test_a_metric_registered_with_one_decorator_is_a_column_of_the_table_and_the_csv(tmp_path):
    """Catches a report whose columns are a list kept by hand: the registered metric would never
    reach the table, the CSV, the column meanings or the curves."""
    runs = tmp_path / "runs"
    for seed, value in ((0, 1.25), (1, 1.75)):
        write_run(runs / f"s{seed}", run_config("InfoNCE", seed, 0.5), {"uniformity": 3.0, THROWAWAY: value})
    register_throwaway()
    try:
        report = make_report(runs, tmp_path / "out")
        curves = [column.key for column in curve_columns(build_rows(group_runs(load_runs(runs))))]
    finally:
        EMBEDDING_METRICS.pop(THROWAWAY)

    header, cells = column_cells(report.markdown, "mean norm")
    assert header == "mean norm" and cells == [f"1.500 ± {np.std([1.25, 1.75], ddof=1):.3f}"]
    assert "- mean norm: mean ||z_i|| of the clean input, before normalising (`metrics/mean_norm`)" in report.markdown
    [line] = csv_lines(report.csv_path)
    assert float(line["mean_norm_mean"]) == pytest.approx(1.5) and line["mean_norm_n"] == "2"
    assert THROWAWAY in curves
    after = make_report(runs, tmp_path / "after")  # unregistered: the column goes with it
    assert "mean norm" not in after.markdown and "mean_norm_mean" not in after.csv_path.read_text(encoding="utf-8")


def test_columns_are_table_1_in_its_order_then_the_other_registered_metrics(throwaway):
    """Catches the registry's order (alignment first) leaking into the table, or a later metric
    pushed in among the paper's columns."""
    keys = [column.key for column in table_columns()]
    spectrum = ["effective_rank", "effective_rank_backbone", "spectrum_alpha", "spectrum_alpha_backbone"]
    geometry = ["wasserstein_uniformity", "lidar"]
    long_tail = [f"{source}_{group}" for source in ("knn", "linear", "lt") for group in ("many", "medium", "few")]
    assert keys == [*TABLE_ORDER, *spectrum, *geometry, "top{k}_train_neg_sim", THROWAWAY, *long_tail]
    registered = list(EMBEDDING_METRICS)
    assert registered.index("alignment") < registered.index("uniformity")  # so the order above is the table's own


def test_top_k_and_the_knn_options_come_from_the_runs_config(tmp_path):
    """Catches a report that reads ``metrics/top10_neg_sim`` and prints k=200, σ=0.07 whatever the
    run's EmbeddingMetrics.top_k and KNNMonitor.k/temperature were."""
    rng = np.random.default_rng(0)
    config = run_config("InfoNCE", 0, 0.5, embedding_args={"top_k": 5}, knn_args={"k": 50, "temperature": 0.1})
    write_run(
        tmp_path / "runs" / "r",
        config,
        {"top5_neg_sim": 0.6, "knn_acc": 0.5},
        positive=rng.normal(0.8, 0.05, 200),
        negatives=rng.normal(0.6, 0.05, 1000),
        top_k=5,
    )

    report = make_report(tmp_path / "runs", tmp_path / "out")

    header, cells = column_cells(report.markdown, "top-")
    assert (header, cells) == ("top-5 neg. sim.", ["0.600"])
    assert "weighted kNN accuracy (k=50, σ=0.1) against the train split" in report.markdown
    assert "k=200" not in report.markdown and "top10" not in report.markdown
    [line] = csv_lines(report.csv_path)
    assert float(line["top5_neg_sim_mean"]) == pytest.approx(0.6)
    figures = {figure.name: figure for figure in report.figures}
    assert figures["similarity_distributions.png"].path is not None, figures["similarity_distributions.png"].note


def test_configurations_that_differ_in_top_k_each_read_their_own_tag(tmp_path):
    """Catches one k (the first run's) applied to every run: the other configuration's cell
    would be empty, and the header would claim a k that not every row has."""
    runs = tmp_path / "runs"
    write_run(runs / "a", run_config("InfoNCE", 0, 0.5, embedding_args={"top_k": 5}), {"top5_neg_sim": 0.6})
    write_run(runs / "b", run_config("Simple", 0), {"top10_neg_sim": 0.8})

    report = make_report(runs, tmp_path / "out")

    header, cells = column_cells(report.markdown, "top-")
    assert header.startswith("top-k neg. sim. [") and cells == ["0.600", "0.800"]
    marker = header.split(" ")[-1]
    [note] = [line for line in report.markdown.splitlines() if line.startswith(marker + " ")]
    assert "InfoNCE τ=0.5: EmbeddingMetrics.top_k=5" in note and "Simple: EmbeddingMetrics.top_k=10" in note
    assert [float(line["topk_neg_sim_mean"]) for line in csv_lines(report.csv_path)] == pytest.approx([0.6, 0.8])


def test_an_option_the_callback_would_refuse_is_a_problem_of_the_run_not_a_crash(tmp_path):
    """Catches a hand-edited config (``top_k: ten``) crashing the report or passing silently."""
    write_run(tmp_path / "r", run_config("InfoNCE", 0, 0.5, embedding_args={"top_k": "ten"}), {"top10_neg_sim": 0.7})
    [run] = load_runs(tmp_path)
    assert run.options.top_k == 10
    assert any("EmbeddingMetrics top_k='ten'" in problem for problem in run.problems), run.problems
    [row] = build_rows(group_runs([run]))
    assert row.values["top{k}_neg_sim"] == [pytest.approx(0.7)]


def test_a_long_tail_group_is_a_column_only_where_a_run_logged_it(tmp_path):
    """A long-tailed run's kNN groups are columns (CIFAR-10-LT-like: no few-shot class, so no
    ``metrics/knn_few``); a table of balanced runs has none of the nine long-tail columns."""
    runs = tmp_path / "runs"
    for seed, value in ((0, 0.25), (1, 0.75)):
        write_run(runs / f"s{seed}", run_config("InfoNCE", seed, 0.5), {"uniformity": 3.0, "knn_many": 0.5, "knn_medium": value})
    configurations = group_runs(load_runs(runs))
    rows = build_rows(configurations)
    markdown = markdown_table(rows, configurations)  # the table and CSV only: no figures, milliseconds
    write_csv(rows, tmp_path / "table.csv")
    header, cells = column_cells(markdown, "kNN medium")
    assert header == "kNN medium (%)" and cells == [f"50.00 ± {100 * np.std([0.25, 0.75], ddof=1):.2f}"]
    assert column_cells(markdown, "kNN many")[1] == ["50.00 ± 0.00"]
    for absent in ("kNN few", "linear many", "classifier"):
        assert absent not in markdown
    [line] = csv_lines(tmp_path / "table.csv")
    assert line["knn_medium_n"] == "2" and "knn_few_mean" not in line
    balanced = tmp_path / "balanced"
    write_run(balanced / "s0", run_config("InfoNCE", 0, 0.5), {"uniformity": 3.0})
    keys = [column.key for column in resolve_columns(build_rows(group_runs(load_runs(balanced))))]
    assert not [key for key in keys if key.endswith(("_many", "_medium", "_few"))]
