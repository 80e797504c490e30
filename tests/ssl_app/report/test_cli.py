"""``python -m ssl_app.report``: table on stdout, files in the out dir, one error line for nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ssl_app.report import main
from tests.ssl_app.report.fakes import run_config, sweep_sidecar, write_run

REPO = Path(__file__).resolve().parents[3]


def test_prints_the_table_and_writes_csv_markdown_and_figures(study, tmp_path, capsys):
    assert main([str(study.root), "--out", str(tmp_path / "out"), "--title", "τ sweep"]) == 0

    out, err = capsys.readouterr()
    assert out.startswith("## τ sweep\n")
    assert "| InfoNCE τ=0.3 [1] | 2 |" in out and "| InfoNCE τ=0.7 | 2 |" in out
    written = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert written == [
        "hardness_profile.png",
        "metric_curves.png",
        "relative_penalty.png",
        "runs.csv",
        "similarity_distributions.png",
        "table.csv",
        "table.md",
        "temperature_curves.png",  # its two constant τs, flat lines, though the fake study logged no τ
        "uniformity_tolerance_paths.png",
        "uniformity_tolerance_plane.png",
        "uniformity_tolerance_vs_temperature.png",
    ]
    assert (tmp_path / "out" / "table.md").read_text(encoding="utf-8") == out
    assert "table.csv" in err


def test_default_out_dir_is_report_inside_runs_dir_and_is_not_read_back(tmp_path, capsys):
    write_run(tmp_path / "version_0", run_config("InfoNCE", 0, 0.5), {"uniformity": 3.0})
    assert main([str(tmp_path)]) == 0
    assert (tmp_path / "report" / "table.csv").is_file()
    assert main([str(tmp_path)]) == 0  # a second pass sees the same single run
    assert capsys.readouterr().out.count("| InfoNCE τ=0.5 | 1 |") == 2


def test_empty_directory_is_one_error_line_and_status_2(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: no runs under")


def test_only_failed_runs_is_an_error_too(tmp_path, capsys):
    write_run(
        tmp_path / "p" / "seed0",
        run_config("InfoNCE", 0, 0.5),
        {"uniformity": 3.0},
        sweep=sweep_sidecar("p", {}, 0),
        status="failed",
    )
    assert main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: no finished run")


def test_module_entry_point_reports_a_missing_directory(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "ssl_app.report", str(tmp_path / "nowhere")],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"error: runs directory {str(tmp_path / 'nowhere')!r} does not exist"]
