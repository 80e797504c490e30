"""``python -m ssl_app list``: every registered entry, one line, with the option that selects it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ssl_app.cli import app as cli
from ssl_app.cli import listing, main
from ssl_app.losses import LOSSES, ContrastiveLoss
from ssl_app.metrics import EMBEDDING_METRICS
from ssl_app.registry import BACKBONES, DATAMODULES, METHODS, Registry

REPO = Path(__file__).resolve().parents[3]
REGISTRIES = {"losses": LOSSES, "methods": METHODS, "datamodules": DATAMODULES, "backbones": BACKBONES}


class Throwaway(ContrastiveLoss):
    """A loss registered only while a test runs."""

    uses_labels = True


def run_list(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stop:
        main(["list", *args])
    out, err = capsys.readouterr()
    return stop.value.code, out, err


def line_of(out: str, name: str) -> str:
    """The one line that lists ``name`` (its first column)."""
    found = [line for line in out.splitlines() if line.split()[:1] == [name]]
    assert len(found) == 1, f"{name!r} is on {len(found)} lines of:\n{out}"
    return found[0]


def test_list_names_every_entry_with_what_it_is_and_its_option(capsys):
    """Catches a kind left out of the command, an entry dropped, or a line that lacks the summary
    or the option (e.g. a hard-coded table that fell behind the registries)."""
    code, out, err = run_list(capsys)
    assert code == 0 and not err
    for kind, registry in REGISTRIES.items():
        assert f"{kind}:" in out.splitlines()
        for entry in registry.values():
            line = line_of(out, entry.name)
            assert entry.summary.replace("``", "") in line and line.endswith(entry.option)
    for name, metric in EMBEDDING_METRICS.items():
        line = line_of(out, name)
        assert all(metric.formula(field) in line for field in metric.tags) and line.endswith(listing.METRICS_OPTION)
        assert all(f"metrics/{tag}" in line for tag in metric.tags.values())
    assert "[uses_labels, needs_anchor_features]" in line_of(out, "PaCo") and "[train_views=1]" in line_of(out, "MemoryBank")


def test_a_newly_registered_loss_is_listed_and_one_kind_alone(capsys):
    """Catches a command that lists a fixed set instead of reading the registry, and ``list
    losses`` printing other kinds too."""
    LOSSES.register(Throwaway)
    try:
        code, out, _ = run_list(capsys, "losses")
    finally:
        LOSSES.unregister("Throwaway")
    assert code == 0
    line = line_of(out, "Throwaway")
    assert "A loss registered only while a test runs. [uses_labels]" in line
    assert line.endswith(f"--model.init_args.loss={__name__}.Throwaway")
    assert out.splitlines()[0] == "losses:" and "methods:" not in out and "SimCLR" not in out
    _, out, _ = run_list(capsys, "losses")
    assert "Throwaway" not in out


@pytest.mark.parametrize("args", [["lossez"], ["losses", "--verbose"]])
def test_an_unknown_kind_is_one_error_line_and_status_2(args, capsys):
    """Catches an unknown kind that prints a traceback, lists everything anyway or exits 0."""
    code, out, err = run_list(capsys, *args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: list: unknown")
    assert repr(args[-1]) in lines[0] and ", ".join(listing.KINDS) in lines[0]


def test_list_does_not_start_lightning_cli(capsys, monkeypatch):
    """Catches ``list`` reaching LightningCLI (which would reject it or build a run)."""

    def refuse(*args, **kwargs):
        raise AssertionError("LightningCLI was started")

    monkeypatch.setattr(cli.SSLCLI, "__init__", refuse)
    code, out, _ = run_list(capsys, "method")  # the singular works too
    assert code == 0 and "MoCo" in out


def test_help_mentions_list(capsys):
    """Catches a ``list`` command nobody can discover from ``--help``."""
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert stop.value.code == 0 and "python -m ssl_app list [losses|temperatures|methods|metrics|datamodules|backbones]" in out


def selected(config: dict, option: str):
    """What ``config`` holds at the option's key: a class path, a name, or (``+=``) the class paths of a list."""
    key, _, _ = option.partition("=")
    value = config
    for part in key.lstrip("-").rstrip("+").split("."):
        value = value[part]
    if isinstance(value, list):
        return [item.get("class_path") for item in value if isinstance(item, dict)]
    return value["class_path"] if isinstance(value, dict) else value


def every_row() -> list:
    """Every listed line, its id ``<kind>-<name>``."""
    return [pytest.param(row, id=f"{kind}-{row.name}") for kind, rows in listing.KINDS.items() for row in rows()]


@pytest.mark.parametrize("row", every_row())
def test_the_listed_option_selects_the_entry(row, capsys, monkeypatch):
    """Catches an option that the CLI rejects or that lands on another key (``--model.loss`` for
    ``--model.init_args.loss``): appended to a plain command, it must put the entry in the config."""
    monkeypatch.chdir(REPO)
    base = ["fit", "--model=ssl_app.methods.SimCLR", "--data=datamodules.SyntheticDataModule"]
    with pytest.raises(SystemExit) as stop:
        main([*base, row.option, "--print_config"])
    out, err = capsys.readouterr()
    assert stop.value.code == 0, err
    value = row.option.partition("=")[2]
    got = selected(yaml.safe_load(out), row.option)
    assert value in got if isinstance(got, list) else got == value


@pytest.mark.slow
def test_python_m_ssl_app_list_in_a_fresh_process():
    """Catches ``python -m ssl_app list`` failing where nothing was imported before (the registries
    must fill themselves) or going through LightningCLI's parser."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "ssl_app", "list", "datamodules"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert line_of(done.stdout, "CIFAR10DataModule").endswith("--data=datamodules.CIFAR10DataModule")


def test_an_empty_registry_says_so():
    """Catches ``list`` crashing on a kind with no entries (max() of nothing)."""
    empty = Registry("widgets", "--widget", package="ssl_app")
    assert listing.format_kind(empty.kind, listing.registry_rows(empty)) == ["widgets: none registered"]
