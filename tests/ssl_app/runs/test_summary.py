"""The end-of-run summary: the headline lines on the console (the HParams tab: tests/ssl_app/runs/test_panel.py)."""

from __future__ import annotations

from ssl_app.runs.headline import table_columns
from ssl_app.runs.summary import (
    HEADLINE,
    headline,
    headline_columns,
    hparams_of,
    summary_lines,
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
