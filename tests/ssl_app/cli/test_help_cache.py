"""``--help`` texts kept in the user's cache (``ssl_app.cli.help_cache``): a kept text is served only for the same
command line, the same bytes of every config it names (and those include), the same sources and the same terminal
width; a broken file is never trusted; two writers at once leave one whole file; and the text served is the parser's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ssl_app.cli import help_cache, listing_cache

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("SSL_APP_CACHE", str(folder))
    return folder


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """A package of its own as the hashed sources (so that a test may edit them)."""
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("X = 1\n")
    monkeypatch.setattr(listing_cache, "package_folders", lambda: [package])
    return package


def write_configs(folder: Path) -> tuple[Path, Path]:
    """A config that includes another (its ``config:`` key, relative to its own folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "base.yaml").write_text("trainer:\n  max_epochs: 3\n")
    (folder / "run.yaml").write_text("config: base.yaml\nmodel:\n  class_path: ssl_app.methods.SimCLR\n")
    return folder / "run.yaml", folder / "base.yaml"


def test_a_kept_text_is_served_for_the_same_command_line_only(cache, sources, tmp_path):
    run, _ = write_configs(tmp_path / "configs")
    argv = ["fit", "--config", str(run), "--help"]
    key = help_cache.help_key("prog", argv)
    help_cache.keep(key, "the text\n")
    assert help_cache.cached(help_cache.help_key("prog", argv)) == "the text\n"
    assert help_cache.cached(help_cache.help_key("prog", ["validate", "--config", str(run), "--help"])) is None
    assert help_cache.cached(help_cache.help_key("other", argv)) is None


def test_editing_a_named_config_or_one_it_includes_is_a_new_key(cache, sources, tmp_path):
    run, base = write_configs(tmp_path / "configs")
    argv = ["fit", "--config", str(run), "--help"]
    first = help_cache.help_key("prog", argv)
    help_cache.keep(first, "max_epochs 3\n")
    base.write_text("trainer:\n  max_epochs: 7\n")  # the included file, not the one on the command line
    assert help_cache.help_key("prog", argv) != first
    assert help_cache.cached(help_cache.help_key("prog", argv)) is None
    base.write_text("trainer:\n  max_epochs: 3\n")
    assert help_cache.cached(help_cache.help_key("prog", argv)) == "max_epochs 3\n"
    run.write_text(run.read_text() + "seed_everything: 1\n")
    assert help_cache.cached(help_cache.help_key("prog", argv)) is None


def test_a_config_given_by_a_relative_name_is_read_from_the_working_folder(cache, sources, tmp_path):
    write_configs(tmp_path / "a")
    write_configs(tmp_path / "b")
    (tmp_path / "b" / "base.yaml").write_text("trainer:\n  max_epochs: 9\n")
    argv = ["fit", "--config", "run.yaml", "--help"]
    assert help_cache.help_key("prog", argv, tmp_path / "a") != help_cache.help_key("prog", argv, tmp_path / "b")


def test_a_changed_source_or_terminal_width_is_a_new_key(cache, sources, monkeypatch):
    argv = ["fit", "--help"]
    key = help_cache.help_key("prog", argv)
    help_cache.keep(key, "old\n")
    (sources / "__init__.py").write_text("X = 2\n")
    assert help_cache.cached(help_cache.help_key("prog", argv)) is None
    (sources / "__init__.py").write_text("X = 1\n")
    assert help_cache.cached(help_cache.help_key("prog", argv)) == "old\n"
    monkeypatch.setenv("COLUMNS", "57")
    assert help_cache.cached(help_cache.help_key("prog", argv)) is None


def test_entries_of_other_sources_are_removed_when_one_is_written(cache, sources):
    help_cache.keep(help_cache.help_key("prog", ["--help"]), "old\n")
    (sources / "__init__.py").write_text("X = 2\n")
    help_cache.keep(help_cache.help_key("prog", ["--help"]), "new\n")
    assert [json.loads(path.read_text())["text"] for path in cache.glob("help-*.json")] == ["new\n"]


@pytest.mark.parametrize(
    "broken",
    [b"", b'{"key": ["a", "b"], "te', b"\xff\xfe not json", b"[]", b'{"key": ["x", "y"], "text": "another key"}',
     b'{"key": null, "text": 3}'],
)  # fmt: skip
def test_a_broken_or_foreign_file_is_never_trusted(cache, sources, broken):
    key = help_cache.help_key("prog", ["--help"])
    help_cache.keep(key, "kept\n")
    (path,) = cache.glob("help-*.json")
    path.write_bytes(broken)
    assert help_cache.cached(key) is None
    help_cache.keep(key, "kept again\n")  # and the next text replaces it
    assert help_cache.cached(key) == "kept again\n"


def test_a_class_of_another_package_is_never_kept(cache, sources, tmp_path, monkeypatch):
    """A plug-in's source is not in the key: a help that shows its options could go stale unseen."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "my_losses.py").write_text("class Loss: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    assert help_cache.help_key("prog", ["fit", "--model.init_args.loss", "my_losses.Loss", "--help"]) is None
    config = tmp_path / "plugin.yaml"
    config.write_text("model:\n  init_args:\n    loss:\n      class_path: my_losses.Loss\n")
    assert help_cache.help_key("prog", ["fit", "--config", str(config), "--help"]) is None
    assert help_cache.help_key("prog", ["fit", "--model", "ssl_app.methods.SimCLR", "--help"]) is not None


def test_an_option_name_in_a_config_is_not_taken_for_a_class_path(cache, sources, tmp_path, monkeypatch):
    """``data.init_args.root:`` is a key, not a class of a package ``data`` (a folder of that name in the working
    directory is importable as one): the text is kept."""
    (tmp_path / "data").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "dotted.yaml"
    config.write_text("data.init_args.root: images\ntrainer.max_epochs: 3\n")
    assert help_cache.help_key("prog", ["fit", "--config", str(config), "--help"], tmp_path) is not None


WRITER = """
import sys
from ssl_app.cli import help_cache
key = tuple(sys.argv[1:3])
text = sys.argv[3] * 200_000
for _ in range(20):
    help_cache.keep(key, text)
    seen = help_cache.cached(key)
    assert seen is None or seen in ("a" * 200_000, "b" * 200_000), "a half-written or mixed text was read"
"""


def test_two_writers_at_once_leave_one_whole_file(cache):
    env = {"PYTHONPATH": str(REPO), "SSL_APP_CACHE": str(cache), "PATH": "/usr/bin:/bin"}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, "s" * 16, "e" * 32, letter], env=env, stderr=subprocess.PIPE)
        for letter in "ab"
    ]
    errors = [writer.communicate(timeout=120)[1].decode() for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0], errors
    assert help_cache.cached(("s" * 16, "e" * 32)) in ("a" * 200_000, "b" * 200_000)
    assert [path.name for path in cache.iterdir()] == [f"help-{'s' * 16}-{'e' * 32}.json"]  # no temporary file left


def test_wants_help_reads_the_options_before_a_double_dash():
    assert help_cache.wants_help(["fit", "--config", "x.yaml", "--help"])
    assert help_cache.wants_help(["fit", "-h"])
    assert help_cache.wants_help(["fit", "--model.help", "ssl_app.methods.SimCLR"])
    assert not help_cache.wants_help(["fit", "--config", "x.yaml"])
    assert not help_cache.wants_help(["--", "--help"])


#: Runs ``python -m ssl_app ARGS`` in this process; prints the exit status, stdout and whether Lightning was imported.
PROBE = """
import contextlib, io, json, runpy, sys
sys.argv = ["ssl_app", *json.loads(sys.argv[1])]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        runpy.run_module("ssl_app", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code
print(json.dumps({"code": code, "out": out.getvalue(), "lightning": "lightning" in sys.modules}))
"""


def fit_help(args: list[str], cache: Path) -> dict:
    env = {"PYTHONPATH": str(REPO), "SSL_APP_CACHE": str(cache), "PATH": "/usr/bin:/bin", "COLUMNS": "120"}
    found = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
    )
    assert found.returncode == 0, found.stderr[-2000:]
    return json.loads(found.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_fit_help_is_the_parser_s_then_served_without_lightning_and_never_stale(tmp_path):
    """The parser's text is kept and served as it was; an edited config (here an included file that names a
    datamodule, whose import adds the known subclasses the help lists) is the parser's new text; a corrupt cache file
    is the parser's text again."""
    cache = tmp_path / "cache"
    run, base = write_configs(tmp_path / "configs")
    args = ["fit", "--config", str(run), "--help"]
    first = fit_help(args, cache)
    assert first["code"] == 0 and first["lightning"]
    assert "--trainer.max_epochs" in first["out"] and "datamodules.SyntheticDataModule" not in first["out"]
    second = fit_help(args, cache)
    assert second == {**first, "lightning": False}

    base.write_text("trainer:\n  max_epochs: 3\ndata:\n  class_path: datamodules.SyntheticDataModule\n")
    edited = fit_help(args, cache)
    assert edited["code"] == 0 and edited["lightning"] and "datamodules.SyntheticDataModule" in edited["out"]
    assert fit_help(args, cache) == {**edited, "lightning": False}

    for path in cache.glob("help-*.json"):
        path.write_text('{"key": ["trunc')
    again = fit_help(args, cache)
    assert again == edited


def test_a_help_printed_by_a_process_that_imported_lightning_before_is_not_kept(cache, capsys):
    """``main(args)`` called in a process that imported Lightning, methods or datamodules already lists more "known
    subclasses" than ``python -m ssl_app fit --help`` would: that text must not become the cached one."""
    import lightning.pytorch  # noqa: F401 - what a notebook or a test has imported before

    from ssl_app.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["fit", "--help"])
    assert stop.value.code in (0, None) and "--trainer.max_epochs" in capsys.readouterr().out
    assert list(cache.glob("help-*.json")) == []
