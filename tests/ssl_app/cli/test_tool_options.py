"""The sweep, the report, ``export`` and ``embed`` answer ``--help`` and a bad option before torch is imported
(``ssl_app.cli.tool_options``, ``ssl_app.cli.light_parser``). Each case runs in a fresh process, as a user runs the
tool (``python -m ...``), where what was imported can be read from ``sys.modules``; the help a library list feeds (the
sweep's plans, the report's columns) is read once and then served from the cache (benchmarks/README.md has the
seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")

#: Runs ``python -m MODULE ARGS...`` in this process; prints the exit status, the streams and what was imported.
PROBE = """
import contextlib, io, json, runpy, sys
module, args = sys.argv[1], json.loads(sys.argv[2])
sys.argv = [module, *args]
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code
heavy = [m for m in ("torch", "lightning") if m in sys.modules]
print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue(), "imported": heavy}))
"""


def run_tool(module: str, args: list[str], cache: Path) -> dict:
    env = {"PYTHONPATH": str(REPO), "SSL_APP_CACHE": str(cache), "PATH": "/usr/bin:/bin", "COLUMNS": "100"}
    found = subprocess.run(
        [sys.executable, "-c", PROBE, module, json.dumps(args)], capture_output=True, text=True, cwd=REPO, env=env, timeout=300
    )
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout.strip().splitlines()[-1])


BAD_ARGUMENTS = [
    ("ssl_app.report", ["--bogus", "runs"], "unrecognized arguments: --bogus"),
    ("ssl_app.report", [], "the following arguments are required: RUNS_DIR"),
    ("ssl_app.sweep", ["--bogus"], "unrecognized arguments: --bogus"),
    ("ssl_app.sweep", ["--config", QUICKSTART, "--seeds", "a,b"], "--seeds must be comma-separated integers"),
    ("ssl_app.sweep", ["--jobs", "x", "--config", QUICKSTART], "argument --jobs: invalid int value"),
    ("ssl_app", ["export", "--bogus"], "error: export: the following arguments are required: --ckpt, --out"),
    ("ssl_app", ["export", "--ckpt", "a", "--out", "b", "--format", "onnx"], "argument --format: invalid choice: 'onnx'"),
    ("ssl_app", ["embed", "--ckpt", "a", "--out", "b", "--split", "dev"], "argument --split: invalid choice: 'dev'"),
    ("ssl_app", ["embed", "--ckpt", "a", "--out", "b", "--batch-size", "x"], "argument --batch-size: invalid int value"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("module", "args", "said"), BAD_ARGUMENTS, ids=lambda case: str(case)[:40])
def test_a_bad_option_is_refused_before_torch_is_imported(module, args, said, tmp_path):
    result = run_tool(module, args, tmp_path / "cache")
    assert result["code"] == 2
    assert said in result["err"]
    assert result["imported"] == []


@pytest.mark.slow
@pytest.mark.parametrize("command", ["export", "embed"])
def test_export_and_embed_help_imports_neither_torch_nor_lightning(command, tmp_path):
    result = run_tool("ssl_app", [command, "--help"], tmp_path / "cache")
    assert result["code"] == 0
    assert f"usage: python -m ssl_app {command}" in result["out"] and "--import MODULE" in result["out"]
    assert result["imported"] == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "shown"),
    [("ssl_app.sweep", "tau_schedules"), ("ssl_app.report", "columns (final epoch")],
)
def test_the_second_help_of_the_sweep_and_the_report_imports_nothing_and_says_the_same(module, shown, tmp_path):
    """The first reads the plans or the metric registry (torch) and keeps the text; the next one prints it."""
    first = run_tool(module, ["--help"], tmp_path / "cache")
    second = run_tool(module, ["--help"], tmp_path / "cache")
    assert first["code"] == second["code"] == 0
    assert shown in first["out"]
    assert second["out"] == first["out"]
    assert second["imported"] == []


@pytest.mark.slow
def test_a_sweep_that_read_its_plans_leaves_a_help_that_imports_nothing(tmp_path):
    """A real sweep has imported the plans anyway: it keeps the help text and the plan names, so that the first
    --help after it, and an unknown plan, need no import."""
    status = ["--plan", "table1", "--data", "cifar10", "--status", "--out", str(tmp_path / "runs")]
    ran = run_tool("ssl_app.sweep", status, tmp_path / "cache")
    assert ran["code"] == 0, ran["err"]
    helped = run_tool("ssl_app.sweep", ["--help"], tmp_path / "cache")
    refused = run_tool("ssl_app.sweep", ["--plan", "tabel1", "--data", "cifar10"], tmp_path / "cache")
    assert "table1" in helped["out"] and helped["imported"] == []
    assert refused["code"] == 2 and "invalid choice: 'tabel1'" in refused["err"] and refused["imported"] == []
