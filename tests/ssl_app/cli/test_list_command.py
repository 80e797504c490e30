"""``python -m ssl_app list``: every registered entry, one line, with the option that selects it."""

from __future__ import annotations

import json
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


#: ``python -m ssl_app list`` in a fresh process, then what it imported (one JSON line after the listing).
FRESH_LIST = """
import json, sys
from ssl_app.cli import main
try:
    main(["list", *sys.argv[1:]])
except SystemExit:
    pass
print(json.dumps([name for name in ("torch", "lightning") if name in sys.modules]))
"""


def fresh_list(cache, *kinds):
    env = {**os.environ, "PYTHONPATH": str(REPO), "SSL_APP_CACHE": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", FRESH_LIST, *kinds], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    *listed, imported = done.stdout.splitlines()
    return "\n".join(listed), json.loads(imported)


@pytest.mark.slow
def test_a_second_list_prints_the_same_lines_without_importing_torch(tmp_path):
    """Catches ``list`` costing the seconds of torch's and Lightning's imports every time (issue 40: 6 s on a quiet
    machine, the target 2 s), and the kept lines differing from what the registries say."""
    cold, cold_imports = fresh_list(tmp_path / "cache")
    warm, warm_imports = fresh_list(tmp_path / "cache")
    assert "torch" in cold_imports and warm_imports == []
    assert warm == cold and "InfoNCE" in warm and "MoCo" in warm
    one_kind, imported = fresh_list(tmp_path / "cache", "losses")
    assert imported == [] and one_kind.splitlines()[0] == "losses:" and "methods:" not in one_kind


def test_lines_kept_for_other_sources_are_not_used(tmp_path, monkeypatch):
    """Catches an answer kept for another version of the sources being printed: one edited file is a new key,
    and a kept file that does not parse is read again from the registries and replaced."""
    from ssl_app.cli import listing_cache

    package = tmp_path / "made_up"
    package.mkdir()
    (package / "__init__.py").write_text("X = 1\n")
    before = listing_cache.sources_key([package])
    (package / "__init__.py").write_text("X = 2\n")
    assert listing_cache.sources_key([package]) != before
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "stale.py").write_text("Y = 1\n")
    assert listing_cache.sources_key([package]) == listing_cache.sources_key([package])

    monkeypatch.setenv("SSL_APP_CACHE", str(tmp_path / "cache"))
    listing_cache.keep({"losses": [["A", "a loss", "--option"]]}, key="k1")
    assert listing_cache.cached(["losses"], "k1") == {"losses": [["A", "a loss", "--option"]]}
    assert listing_cache.cached(["losses"], "k2") is None and listing_cache.cached(["losses", "methods"], "k1") is None
    listing_cache.keep({"losses": [["B", "b", "--b"]]}, key="k2")
    assert sorted(path.name for path in (tmp_path / "cache").iterdir()) == ["list-k2.json"]  # older keys removed
    (tmp_path / "cache" / "list-k2.json").write_text("{not json")
    assert listing_cache.cached(["losses"], "k2") is None


def test_a_cache_that_cannot_be_written_only_costs_the_imports(tmp_path, monkeypatch, capsys):
    """Catches a cache folder that cannot be made (here: under a file) failing ``list``."""
    from ssl_app.cli import listing_cache

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("SSL_APP_CACHE", str(blocker / "cache"))
    listing_cache.keep({"losses": [["A", "a", "--a"]]}, key="k")
    assert listing_cache.cached(["losses"], "k") is None
    code, out, _ = run_list(capsys, "losses")
    assert code == 0 and "InfoNCE" in out


def test_a_process_that_loaded_the_registries_reads_them_not_the_kept_lines(tmp_path, monkeypatch, capsys):
    """Catches a loss registered at run time (a plug-in) missing from ``list`` because lines were kept for the
    sources, and such a run-time loss being kept for the next process."""
    monkeypatch.setenv("SSL_APP_CACHE", str(tmp_path / "cache"))
    LOSSES.register(Throwaway)
    try:
        code, out, _ = run_list(capsys, "losses")
    finally:
        LOSSES.unregister("Throwaway")
    assert code == 0 and "Throwaway" in out
    assert not (tmp_path / "cache").exists()
