"""Only finished, identified runs enter a mean: the report trusts the run records and nothing else.

The folders are written by the real writers (``tests/ssl_app/report/fakes.py``: the record module
the CLI uses, TensorBoard's ``SummaryWriter``); ``test_report_end_to_end.py`` does the same with
real CLI runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from ssl_app.io.lock import RunLock
from ssl_app.report.cli import make_report
from ssl_app.report.groups import group_runs
from ssl_app.report.runs import load_study
from ssl_app.report.summary import build_rows
from tests.ssl_app.report.fakes import run_config, write_probe, write_run

FINISHED = {"uniformity": 3.5, "knn_acc": 0.6}
NONSENSE = {"uniformity": 0.01, "knn_acc": 0.0}  # what a crashed run may have logged before it stopped


def one_row(root):
    rows = build_rows(group_runs(load_study(root).runs))
    assert len(rows) == 1, [row.configuration.label for row in rows]
    return rows[0]


def test_only_a_done_record_is_averaged_every_other_status_is_named(tmp_path):
    """Catches the report bug of today's main: it read a ``status`` key nothing wrote, so every run
    (failed, interrupted, killed, or older than records) counted as done and entered the mean."""
    config = run_config("InfoNCE", 0, 0.3)
    write_run(tmp_path / "done", config, FINISHED)
    for status in ("failed", "interrupted", "diverged", "running"):
        write_run(tmp_path / status, {**config, "seed_everything": 1}, NONSENSE, status=status)
    write_run(tmp_path / "no_record", {**config, "seed_everything": 2}, NONSENSE, status=None)

    row = one_row(tmp_path)
    assert row.n == 1 and [run.name for run in row.runs] == ["done"]
    assert row.stat("uniformity").mean == 3.5
    report = make_report(tmp_path).markdown
    for name, shown in (("failed", "failed"), ("interrupted", "interrupted"), ("diverged", "diverged"),
                        ("running", "vanished"), ("no_record", "status unknown")):  # fmt: skip
        assert f"run `{name}` ({shown}" in report, (name, report)


def test_a_running_record_whose_process_holds_the_folder_is_running_not_vanished(tmp_path):
    """Catches a liveness check that calls every ``running`` run dead (or every one alive)."""
    write_run(tmp_path / "done", run_config("InfoNCE", 0, 0.3), FINISHED)
    live = write_run(tmp_path / "live", run_config("InfoNCE", 1, 0.3), NONSENSE, status="running")
    with RunLock(live) as lock:
        assert lock.acquire()
        runs = {run.name: run for run in load_study(tmp_path).runs}
        assert runs["live"].status == "running" and not runs["live"].usable
    assert {run.name: run for run in load_study(tmp_path).runs}["live"].status == "vanished"


def test_evaluations_inside_a_run_are_not_seeds_and_its_probe_gives_the_linear_column(tmp_path):
    """Catches validate/test results read as extra seeds of their run (a quickstart row became n = 2)."""
    run = write_run(tmp_path / "quickstart" / "version_0", run_config("InfoNCE", 0, 0.3), FINISHED)
    write_run(run / "evaluations" / "validate_0", run_config("InfoNCE", 0, 0.3), NONSENSE, status=None)
    write_probe(run / "evaluations" / "linear_0", 0.75)
    write_probe(run / "evaluations" / "linear_1", 0.10, status="failed")  # newer but failed: not the run's result

    row = one_row(tmp_path)
    assert row.n == 1
    assert row.stat("linear_top1").mean == 100 * float(np.float32(0.75))


def test_a_probe_filed_elsewhere_joins_the_run_its_record_names(tmp_path):
    """Catches a hand-run probe (``--attach_to_run=false``) never attached to its pre-training run."""
    write_run(tmp_path / "quickstart" / "version_0", run_config("InfoNCE", 0, 0.3), FINISHED)
    write_probe(tmp_path / "linear" / "version_0", 0.6, parent="../../quickstart/version_0")
    study = load_study(tmp_path)
    # the probe's own folder (a record of kind linear) is neither a row nor an orphan
    assert [r.name for r in study.runs] == ["quickstart/version_0"] and study.orphans == []
    assert study.runs[0].linear.last("linear/top1") == pytest.approx(0.6)


def test_an_evaluation_without_its_run_is_listed_apart(tmp_path):
    write_run(tmp_path / "a", run_config("InfoNCE", 0, 0.3), FINISHED)
    write_probe(tmp_path / "b", 0.5, parent="../nowhere")
    report = make_report(tmp_path).markdown
    assert "evaluations whose training run is not under this folder" in report and "`b` (linear, done, of ../nowhere)" in report


def test_a_recorded_collapse_is_named_with_its_mode_and_epoch(tmp_path):
    """The run record's collapse (mode, since when) reaches the row's footnote."""
    collapse = {"mode": "loss_at_chance", "since_epoch": 2, "reasons": ["training loss at its chance value 5.545"]}
    write_run(tmp_path / "r", run_config("InfoNCE", 0, 0.3), FINISHED, collapse=collapse)
    report = make_report(tmp_path).markdown
    assert "representation collapsed (loss_at_chance since epoch 2: training loss at its chance value 5.545)" in report
