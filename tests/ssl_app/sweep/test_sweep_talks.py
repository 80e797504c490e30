"""The sweep talks (issue 40, item 6): each finished stage prints the run's headline numbers, the end of a local
sweep and ``--status`` print the report's first table. The fits are fake run folders written by the report tests'
writer (``tests.ssl_app.report.fakes``) where the launcher would start ``python -m ssl_app``: no training."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ssl_app.runs.layout import EVALUATIONS_DIR, read_sweep_point
from ssl_app.sweep import command, local
from ssl_app.sweep.command import main
from tests.ssl_app.cli.test_cli import QUICKSTART
from tests.ssl_app.report.fakes import run_config, write_probe, write_run

#: kNN, uniformity, tolerance and linear top-1 of each run, by τ and seed.
FINALS = {
    "0.3": {0: (0.52, 3.61, 0.179, 0.81), 1: (0.50, 3.62, 0.181, 0.80), 2: (0.53, 3.60, 0.183, 0.82)},
    "0.5": {0: (0.41, 3.40, 0.240, 0.70), 1: (0.43, 3.41, 0.250, 0.71), 2: (0.42, 3.42, 0.245, 0.69)},
}


def write_fake_stage(directory: Path, stage: str) -> None:
    """What the stage's process would leave: the fit's run folder (record, config, events, ``sweep.json``), or its
    probe filed in it."""
    point = read_sweep_point(directory)
    tau = point.grid["model.init_args.loss.init_args.temperature"]
    knn, uniformity, tolerance, top1 = FINALS[tau][point.seed]
    if stage == "fit":
        config = run_config("InfoNCE", point.seed, temperature=float(tau))
        write_run(directory, config, {"knn_acc": knn, "uniformity": uniformity, "tolerance": tolerance}, epochs=2)
    else:
        write_probe(directory / EVALUATIONS_DIR / "linear_0", top1)


@pytest.fixture
def fake_launch(monkeypatch):
    """``launch`` writing the stage's folder in-process, then a child that exits 0 (what a finished stage leaves)."""

    def launch(args, log, device, env=None):
        write_fake_stage(log.parent, log.stem)
        return subprocess.Popen([sys.executable, "-c", "pass"])

    monkeypatch.setattr(local, "launch", launch)
    monkeypatch.setattr(command, "validate", lambda runs: None)  # no --print_config of each point: nothing to train


def sweep_args(out: Path, linear: Path | None = None) -> list[str]:
    args = ["--config", QUICKSTART, "--grid", "tau=0.3,0.5", "--seeds", "0,1,2", "--out", str(out), "--name", "tau"]
    return args + (["--linear", str(linear)] if linear else [])


def test_each_finished_stage_prints_the_runs_headline_numbers(tmp_path, fake_launch, capsys):
    """Catches a sweep that prints start/done lines only (issue 40): the fit's line has kNN, uniformity and
    tolerance as the report reads them, the probe's line linear top-1 too."""
    linear = tmp_path / "linear.yaml"
    linear.write_text("trainer.max_epochs: 1\n")
    assert main(sweep_args(tmp_path / "out", linear)) == 0
    out = capsys.readouterr().out
    assert "[sweep] done tau=0.3 seed 0: fit — kNN (%) 52.00, uniformity 3.610, tolerance 0.179\n" in out
    assert (
        "[sweep] done tau=0.5 seed 2: linear — linear top-1 (%) 69.00, kNN (%) 42.00, uniformity 3.420, tolerance 0.245\n"
    ) in out
    assert out.count("[sweep] done ") == 12


def test_the_end_of_a_sweep_and_status_print_the_comparison_table(tmp_path, fake_launch, capsys):
    """Catches no table at the end (issue 40), a table of its own instead of the report's (its marks and warning),
    and ``--status`` without it."""
    assert main(sweep_args(tmp_path / "out")) == 0
    out = capsys.readouterr().out
    end = out[out.index("| configuration |") :]
    lines = [line for line in end.splitlines() if line.startswith("| ")]
    assert lines[0] == "| configuration | n | kNN (%) | uniformity | tolerance |"
    assert lines[1].startswith("| InfoNCE τ=0.3 | 3 | 51.67 ± 1.53 ★ |")
    assert lines[2].startswith("| InfoNCE τ=0.5 | 3 | 42.00 ± 1.00 ▼ |")  # 3 paired seeds: tested, Holm over m = 3
    assert len(lines) == 3  # the first table only: the headline numbers
    assert "m = 3" in end and "Holm" in end
    assert end.rstrip().endswith("report: python -m ssl_app.report " + str(tmp_path / "out" / "tau"))

    assert main(["--status", str(tmp_path / "out" / "tau")]) == 0
    status = capsys.readouterr().out
    assert status.splitlines()[0].startswith("tau=0.3 seed 0  done")
    assert "| InfoNCE τ=0.5 | 3 | 42.00 ± 1.00 ▼ |" in status
    assert status.rstrip().endswith(f"python -m ssl_app.report {tmp_path / 'out' / 'tau'}")
    assert main([*sweep_args(tmp_path / "out"), "--status"]) == 0
    assert "| InfoNCE τ=0.3 | 3 | 51.67 ± 1.53 ★ |" in capsys.readouterr().out


def test_status_before_any_run_finished_prints_no_table(tmp_path, capsys, monkeypatch):
    """Catches a table (or an error) from a sweep with nothing finished yet."""
    monkeypatch.setattr(command, "validate", lambda runs: None)
    assert main([*sweep_args(tmp_path / "out"), "--status"]) == 0
    out = capsys.readouterr().out
    assert "| configuration" not in out and len(out.splitlines()) == 6
