"""Lightning's advice to sync the callbacks' per-epoch values is silenced by the CLI while it runs,
and by nothing else: importing ``callbacks`` leaves the process's warnings filter alone."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import warnings
from pathlib import Path

from lightning.fabric.utilities.warnings import PossibleUserWarning

from ssl_app.cli import app as cli

REPO = Path(__file__).resolve().parents[2]


def advice(tag: str) -> str:
    """Lightning's message (``logger_connector/result.py``) for a value logged per epoch without a sync."""
    return (
        f"It is recommended to use `self.log({tag!r}, ..., sync_dist=True)` when logging on epoch level in distributed "
        "setting to accumulate the metric across devices."
    )


def imported_by_callbacks() -> list[str]:
    """Every module the ``callbacks`` package imports, except its own."""
    names = set()
    for source in (REPO / "callbacks").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
    return sorted(name for name in names if name.split(".")[0] not in ("callbacks", "__future__"))


def test_importing_callbacks_leaves_the_warnings_filter_alone():
    """Catches a filter installed at import (it silenced the advice in every program that merely
    imported the package, and stayed installed). The packages ``callbacks`` imports are imported
    first, since several of them install filters of their own."""
    script = "\n".join(
        [
            "import importlib, sys, warnings",
            f"for name in {imported_by_callbacks()!r}:",
            "    importlib.import_module(name)",
            "before = list(warnings.filters)",
            "import callbacks",
            "added = [entry for entry in warnings.filters if entry not in before]",
            "print(added)",
            "sys.exit(0 if warnings.filters == before else 1)",
        ]
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"importing callbacks changed warnings.filters: {result.stdout}{result.stderr[-2000:]}"


def test_the_cli_silences_the_advice_for_the_callbacks_tags_while_it_runs(monkeypatch):
    """Catches the CLI showing the advice once per metric tag (noise: the values are identical on
    every rank), silencing it for other tags too (``val/loss`` is a real per-rank mean), or
    leaving its filter behind after the run."""

    def run_warns(*args, **kwargs):
        for tag in ("metrics/uniformity", "lt/few", "val/loss"):
            warnings.warn(advice(tag), PossibleUserWarning, stacklevel=1)
        return "ran"

    monkeypatch.setattr(cli, "SSLCLI", run_warns)
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["fit"]) == "ran"
        warnings.warn(advice("metrics/uniformity"), PossibleUserWarning, stacklevel=1)  # after the run
    assert [str(warning.message) for warning in caught] == [advice("val/loss"), advice("metrics/uniformity")]
    assert warnings.filters == before
