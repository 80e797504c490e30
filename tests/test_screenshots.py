"""``docs/screenshots/take.py``: the study it sweeps, the shots it takes, the page that clicks and reports.

The browser is not started here (a Chromium screenshot takes seconds to minutes); what take.py hands to it and
what it checks afterwards are: the sweep's plan, read by the sweep's own parser; the view it clicks, looked up in
the TensorBoard frontend that is installed; the prime page and its report, through the WSGI wrapper; the check
that parallel coordinates drew a line per row. The slow test runs the study's sweep (shrunk) and reads its rows
through the hparams plugin's own handlers, in process and over HTTP as take.py asks for them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path

import pytest
import tensorboard
from werkzeug.test import Client

from ssl_app.runs.spec import TAU_KEY
from ssl_app.sweep.command import parse_args
from ssl_app.sweep.grid import planned_runs
from tests.ssl_app.runs.test_panel import drawn, study_view

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_screenshots_take", REPO / "docs" / "screenshots" / "take.py")
take = sys.modules["docs_screenshots_take"] = importlib.util.module_from_spec(_spec)  # its dataclass looks it up
_spec.loader.exec_module(take)


def test_the_study_is_two_taus_by_two_seeds_each_fit_probed(tmp_path):
    """The command take.py runs, planned by the sweep's own parser. Catches the probes left out (HParams then has no
    linear top-1 and parallel coordinates shows half a study), a lost grid axis or seed, and the fits' or probes'
    options not reaching their stage."""
    command = take.study_command(tmp_path)
    assert command[1:3] == ["-m", "ssl_app.sweep"]
    sweep_dir, runs = planned_runs(parse_args(command[3:]))
    assert sweep_dir == tmp_path / take.STUDY_NAME
    assert sorted((run.grid[TAU_KEY], run.seed) for run in runs) == [("0.2", 0), ("0.2", 1), ("0.5", 0), ("0.5", 1)]
    for run in runs:
        assert run.linear_args is not None, run.point
        assert str(REPO / "configs" / "linear.yaml") in run.linear_args
        assert (
            f"--model.init_args.checkpoint={sweep_dir / run.point / f'seed{run.seed}'}/checkpoints/last.ckpt" in run.linear_args
        )
        assert "--trainer.max_epochs=2" in run.linear_args and "--trainer.max_epochs=3" in run.fit_args
        assert "--trainer.max_epochs=3" not in run.linear_args


def test_the_study_shoots_the_four_views_of_the_brief():
    """Catches a view dropped from the default list or opened on the wrong tab: the landing page (no fragment:
    whatever TensorBoard opens on), the HParams table (its first view, nothing clicked), parallel coordinates
    (behind a click) and Custom Scalars."""
    shots = take.chosen_shots(None)
    assert shots == list(take.STUDY)
    assert {"landing", "hparams", "parallel_coordinates", "custom_scalars"} <= set(shots)
    assert take.SHOTS["landing"].tab == "" and take.SHOTS["landing"].click is None
    assert take.SHOTS["hparams"] == take.Shot("hparams", None, take.SHOTS["hparams"].window)
    assert take.SHOTS["parallel_coordinates"].tab == "hparams"
    assert take.SHOTS["custom_scalars"].tab == "custom_scalars"
    assert take.chosen_shots(" hparams,timeseries ") == ["hparams", "timeseries"]
    with pytest.raises(ValueError, match="parallel"):
        take.chosen_shots("hparams,parallel")


def test_every_view_it_clicks_exists_in_the_installed_tensorboard():
    """The ``view-id`` the prime page clicks, in the HParams dashboard TensorBoard serves (its ``webfiles.zip``).
    Catches a TensorBoard that renamed the tab: the page would click nothing and shoot the table twice."""
    with zipfile.ZipFile(Path(tensorboard.__file__).parent / "webfiles.zip") as web:
        frontend = web.read("index.js").decode()
    clicks = {shot.click for shot in take.SHOTS.values() if shot.click}
    assert clicks == {"parallel-coords-view"}
    for click in clicks:
        assert f'view-id="{click}"' in frontend
    assert 'classed("foreground",!0).selectAll("path")' in frontend  # the lines the page counts


def test_the_prime_page_is_served_and_its_report_kept():
    """Through the WSGI wrapper around TensorBoard: the page at PRIME, a report posted to REPORT kept, every other
    path TensorBoard's. Catches the report lost (the parallel-coordinates check would then always fail) or the
    wrapper swallowing TensorBoard's own paths."""
    seen = []

    def board(environ, start_response):
        seen.append(environ["PATH_INFO"])
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"tensorboard"]

    reports: list[dict] = []
    client = Client(take.with_prime_page(board, reports))
    page = client.get(take.PRIME)
    assert page.status_code == 200 and b"view-id=" in page.data
    assert (
        client.post(take.REPORT, data=json.dumps({"click": "parallel-coords-view", "clicked": True, "lines": 4})).status_code
        == 204
    )
    assert reports == [{"click": "parallel-coords-view", "clicked": True, "lines": 4}]
    assert client.get("/data/runs").data == b"tensorboard" and seen == ["/data/runs"]
    assert (
        take.shot_url("http://h", take.SHOTS["parallel_coordinates"])
        == f"http://h{take.PRIME}?click=parallel-coords-view#hparams"
    )
    assert take.shot_url("http://h", take.SHOTS["landing"]) == f"http://h{take.PRIME}#"


def test_parallel_coordinates_must_draw_a_line_per_row():
    """Catches a picture of parallel coordinates accepted with a fit missing (issue 40: a row without linear
    top-1 is not drawn) or with the tab never clicked."""
    rows = ["τ=0.2 · seed 0", "τ=0.2 · seed 1", "τ=0.5 · seed 0", "τ=0.5 · seed 1"]
    assert take.check_lines({"clicked": True, "lines": 4}, rows) == "4 lines, one per row"
    with pytest.raises(SystemExit, match="draws 3 lines for 4 rows"):
        take.check_lines({"clicked": True, "lines": 3}, rows)
    with pytest.raises(SystemExit, match="not found"):
        take.check_lines({"clicked": False, "lines": -1}, rows)
    with pytest.raises(SystemExit, match="not found"):
        take.check_lines(None, rows)


@pytest.mark.slow  # the sweep's fits and probes through the CLI (docs/testing.md)
def test_the_study_gives_every_fit_a_row_with_knn_and_linear_top1(tmp_path):
    """take.py's sweep, shrunk to seconds (the same command with smaller data), then its folder through the hparams
    plugin's handlers: 4 rows, each with kNN and linear top-1, all drawn by parallel coordinates; and the rows
    take.py counts over HTTP are the same 4. Catches a study whose probes land on rows of their own."""
    tiny_fit = ["--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1", "--data.init_args.train_size=32",
                "--data.init_args.val_size=32", "--data.init_args.test_size=16", "--data.init_args.batch_size=16"]  # fmt: skip
    tiny_probe = ["--data.init_args.data.init_args.train_size=40", "--data.init_args.data.init_args.test_size=20"]
    logdir = take.run_study(tmp_path, fit_extra=tiny_fit, linear_extra=tiny_probe)
    experiment, groups = study_view(logdir)
    assert len(groups) == 4 and all(len(group.sessions) == 1 for group in groups), [group.name for group in groups]
    for group in groups:
        values = {(m.name.group, m.name.tag) for m in group.metric_values}
        assert {("", "metrics/knn_acc"), ("evaluations/linear", "linear/top1")} <= values, group.name
    assert sorted(drawn(experiment, groups)) == sorted(group.name for group in groups)
    assert sorted(take.hparams_rows(take.serve(logdir, []))) == sorted(group.name for group in groups)
