"""The end-of-run summary: the headline lines on the console and the final metrics in the HParams tab."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from ssl_app.runs.headline import table_columns
from ssl_app.runs.summary import (
    FINAL_PREFIX,
    HEADLINE,
    headline,
    headline_columns,
    hparams_of,
    log_final_hparams,
    summary_lines,
    without_placeholder,
)

CONFIG = {
    "seed_everything": 0,
    "model": {"class_path": "ssl_app.methods.SimCLR", "init_args": {"optim": {"lr": 0.06}, "milestones": [1, 2]}},
    "trainer": {"max_epochs": 2, "logger": {"class_path": "TensorBoardLogger", "init_args": {"save_dir": "runs"}}},
    "ckpt_path": None,
}
FINAL = {"metrics/knn_acc": 0.25, "metrics/uniformity": -2.5, "val/loss": 4.0, "metrics/alignment": 0.3}


def test_every_headline_key_is_a_column_and_the_knn_and_probe_are_among_them():
    """Catches a headline naming a column that was renamed or removed (it would silently vanish
    from every summary)."""
    columns = headline_columns()
    assert [column.key for column in columns] == list(HEADLINE)
    tags = {column.tag for column in columns}
    assert {"linear/top1", "linear/top5", "metrics/knn_acc", "metrics/uniformity", "metrics/tolerance"} <= tags
    report_keys = {column.key for column in table_columns()}
    assert set(HEADLINE) - report_keys == {"linear_top5"}  # the only headline Table 1 lacks


def test_the_summary_shows_the_logged_headline_values_in_order_with_the_folder(tmp_path, monkeypatch):
    """Catches values shown unscaled or with the wrong header, a non-headline tag shown, an
    unlogged one shown empty, and the run folder missing."""
    monkeypatch.chdir(tmp_path)
    lines = summary_lines("fit", "done, finished at epoch 2, step 4", tmp_path / "runs" / "q" / "version_0", FINAL, CONFIG)
    assert lines[0] == "fit done, finished at epoch 2, step 4: runs/q/version_0"
    assert [line.split()[0] for line in lines[1:]] == ["kNN", "uniformity"]
    assert lines[1].endswith(" 25.00") and lines[2].endswith(" -2.500")
    assert len({len(line) for line in lines[1:]}) == 1  # aligned
    assert not any("alignment" in line or "loss" in line for line in lines)


def test_the_probe_s_top1_and_top5_are_percentages():
    """Catches the probe's accuracies left as fractions or top-5 missing from the headline."""
    shown = dict(headline({"linear/top1": 0.5, "linear/top5": 0.875, "linear/val_top1": 0.4}))
    assert shown == {"linear top-1 (%)": "50.00", "linear top-5 (%)": "87.50"}


def test_a_non_finite_value_is_left_out():
    """Catches a NaN printed as a result."""
    assert headline({"metrics/knn_acc": float("nan")}) == []


def test_the_hparams_are_flat_scalars_without_where_the_run_writes():
    """Catches nested dicts or lists reaching TensorBoard (it refuses them) and the logger's
    folder options listed as hyper-parameters."""
    flat = hparams_of(CONFIG)
    assert flat["model.init_args.optim.lr"] == 0.06 and flat["model.init_args.milestones"] == "[1, 2]"
    assert not any(key.startswith(("trainer.logger", "ckpt_path")) for key in flat), flat
    assert all(value is None or isinstance(value, (bool, int, float, str)) for value in flat.values())


def hparams_plugin(folder: Path) -> tuple[set[str], dict[str, str]]:
    """``(metric tags, {hparam: value as text})`` of the HParams summary TensorBoard shows for ``folder``."""
    events = EventAccumulator(str(folder))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    values = {key: str(value.string_value or value.number_value) for key, value in start.hparams.items()}
    return {info.name.tag for info in experiment.metric_infos}, values


def test_the_hparams_tab_shows_the_config_with_the_final_metrics(tmp_path):
    """As the CLI does it: Lightning's start-of-run ``log_hyperparams`` (placeholder off), the run
    ends (finalize), then the final summary. Catches the placeholder ``hp_metric`` taking the tab
    (TensorBoard keeps the first summary), the final metrics missing, and the final values written
    under the run's own tags (an extra point on every curve)."""
    logger = TensorBoardLogger(str(tmp_path), name="q", version=0)
    without_placeholder([logger])
    logger.log_hyperparams({"backbone": "small_cnn"})
    logger.log_metrics({"metrics/knn_acc": 0.2}, step=3)
    logger.finalize("success")
    assert log_final_hparams(logger, CONFIG, FINAL, step=4)
    metrics, hparams = hparams_plugin(Path(logger.log_dir))
    assert metrics == {FINAL_PREFIX + tag for tag in FINAL}
    assert hparams["model.class_path"] == "ssl_app.methods.SimCLR" and float(hparams["model.init_args.optim.lr"]) == 0.06
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("final/metrics/knn_acc")] == [(4, 0.25)]
    assert [(e.step, pytest.approx(e.value)) for e in events.Scalars("metrics/knn_acc")] == [(3, 0.2)]


def test_other_loggers_and_empty_results_write_nothing(tmp_path):
    """Catches a CSV logger handed TensorBoard's summaries, or an empty HParams entry written."""
    assert not log_final_hparams(CSVLogger(str(tmp_path)), CONFIG, FINAL, step=1)
    assert not log_final_hparams(TensorBoardLogger(str(tmp_path)), CONFIG, {}, step=1)
    assert not list(tmp_path.rglob("events.*"))
