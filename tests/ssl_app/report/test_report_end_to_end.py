"""The report on real CLI runs: a finished run, a failed one, an interrupted one, a ``validate`` of the
finished run and a linear probe run by hand give one row, n = 1, with the probe's top-1, and the
other two runs named in a footnote. (The fakes of the other report tests are written by the same
record code; this test makes sure the CLI writes what they assume.)"""

from __future__ import annotations

import os
import signal

import lightning as L
import numpy as np
import pytest

from ssl_app.cli import main
from ssl_app.report.cli import make_report
from ssl_app.report.groups import group_runs
from ssl_app.report.hardness import hardness_curves
from ssl_app.report.penalty import penalty_curves
from ssl_app.report.runs import load_runs
from ssl_app.report.summary import build_rows
from ssl_app.runs.record import read_record
from tests.ssl_app.cli.test_cli import QUICKSTART, REPO, TINY
from tests.ssl_app.report.fakes import main_table

pytestmark = pytest.mark.slow


class FailAfterFirstStep(L.Callback):
    """A crash in the middle of training (after one step), as a bug or a lost device would cause."""

    def on_train_batch_end(self, trainer, *args):
        raise RuntimeError("lost the device")


class CtrlCAfterFirstStep(L.Callback):
    """Ctrl-C after the first step (SIGINT to this process, as the terminal sends it)."""

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 1:
            os.kill(os.getpid(), signal.SIGINT)


def test_only_the_finished_run_is_a_row_with_its_probe_the_others_are_named(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", QUICKSTART, *TINY])
    for callback, code in ((FailAfterFirstStep, None), (CtrlCAfterFirstStep, 130)):
        with pytest.raises((SystemExit, RuntimeError)) as stop:
            main(["fit", "--config", QUICKSTART, *TINY, f"--trainer.callbacks+={__name__}.{callback.__name__}"])
        if code is not None:
            assert stop.value.code == code
    runs = tmp_path / "runs" / "quickstart"
    checkpoint = runs / "version_0" / "checkpoints" / "last.ckpt"
    main(["validate", "--config", QUICKSTART, *TINY, f"--ckpt_path={checkpoint}"])
    main(["fit", "--config", str(REPO / "configs" / "linear.yaml"), f"--model.init_args.checkpoint={checkpoint}",
          "--model.init_args.cache_features=flips", "--trainer.max_epochs=2", "--trainer.check_val_every_n_epoch=1",
          "--trainer.enable_progress_bar=false", "--data.init_args.data.init_args.train_size=100",
          "--data.init_args.data.init_args.test_size=40"])  # fmt: skip
    capsys.readouterr()

    assert [read_record(runs / f"version_{n}").status for n in range(3)] == ["done", "failed", "interrupted"]
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1", "version_2"]
    report = make_report(tmp_path / "runs").markdown
    rows = [line for line in main_table(report).splitlines() if line.startswith("| InfoNCE")]
    assert len(rows) == 1, report
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert cells[1] == "1" and cells[2] not in ("", "0.00"), cells  # n = 1; linear top-1 present
    assert "run `quickstart/version_1` (failed: RuntimeError: lost the device" in report, report
    assert "run `quickstart/version_2` (interrupted: SIGINT at epoch 0, step 1" in report, report


def test_a_tau_sweep_of_real_runs_gets_the_relative_penalty_figure_and_dashes_for_table1(tmp_path, monkeypatch, capsys):
    """Catches the r(s) figure reading a tag the callbacks do not log, curves not one per τ, or runs on
    data outside Table 1 (the shapes) compared with a paper cell."""
    monkeypatch.chdir(tmp_path)
    for tau in (1.0, 0.1):
        main(["fit", "--config", QUICKSTART, *TINY, f"--model.init_args.loss.init_args.temperature={tau}"])
    capsys.readouterr()

    report = make_report(tmp_path / "runs", reference="table1")

    [penalty] = [figure for figure in report.figures if figure.name == "relative_penalty.png"]
    assert penalty.path is not None and penalty.path.is_file(), penalty.note
    rows = build_rows(group_runs(load_runs(tmp_path / "runs")))
    curves = penalty_curves(rows)
    assert [curve.temperature for curve in curves] == [0.1, 1.0]
    for curve in curves:
        assert curve.negatives == "all"  # the runs logged similarity/negative: N(i) is every negative
        assert curve.k * np.sum(curve.weight * curve.penalty) == pytest.approx(1.0)
    # the hardness profile the methods logged in training: one curve per τ, the smaller τ steeper
    [hardness] = [figure for figure in report.figures if figure.name == "hardness_profile.png"]
    assert hardness.path is not None and hardness.path.is_file(), hardness.note
    profiles = {curve.label: curve for curve in hardness_curves(rows)}
    assert len(profiles) == 2
    steep, flat = (next(c for label, c in profiles.items() if f"={tau:g}" in label) for tau in (0.1, 1.0))
    assert np.ptp(np.log(steep.share)) > np.ptp(np.log(flat.share))
    lines = [line for line in main_table(report.markdown).splitlines() if line.startswith("| InfoNCE")]
    assert len(lines) == 2 and all(line.split("|")[3].strip().startswith("— [") for line in lines), lines
