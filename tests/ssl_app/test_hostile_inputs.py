"""Hostile inputs at the edges (issue 29): each is one ``error:`` line naming the file, and nothing
is lost or left behind. Config files that are not a mapping of options, outputs that cannot be
written, an output whose write fails midway."""

from __future__ import annotations

import errno
import io
import os

import pytest

from ssl_app.cli import embed, export
from tests.ssl_app.cli.test_cli import QUICKSTART, TINY
from tests.ssl_app.cli.test_export import trained_checkpoint
from tests.ssl_app.test_run_folders import error_line, run_cli

BAD_YAML = {
    "syntax": ("model: [a\n  b: 1\n", "is not valid YAML at line 2, column 4"),
    "list": ("- a\n- b\n", "holds a list, not a mapping of options"),
    "empty": ("", "is empty"),
}


# --- config files ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(BAD_YAML))
def test_a_config_file_that_is_not_a_mapping_is_named_in_one_line(tmp_path, monkeypatch, capsys, kind):
    """Catches ``error: Problems parsing config …`` / ``error: Unexpected config`` without the file's name
    (a syntax error, a list, an empty file; also when a composed config includes it)."""
    text, said = BAD_YAML[kind]
    bad = tmp_path / f"{kind}.yaml"
    bad.write_text(text)
    (tmp_path / "composed.yaml").write_text(f"config: {bad.name}\n")
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(["fit", "--config", str(bad)], capsys)
    line = error_line(err)
    assert code == 2 and f"--config {bad} {said}" in line, line
    code, err = run_cli(["fit", "--config", QUICKSTART, "--config=composed.yaml", *TINY], capsys)
    line = error_line(err)
    assert code == 2 and f"--config composed.yaml: the config it includes, {bad.name}, {said}" in line, line
    assert not (tmp_path / "runs").exists()


def test_the_sweep_names_a_config_file_that_is_not_a_mapping(tmp_path, monkeypatch, capsys):
    """The sweep checks each point with the CLI's parser: the same line, naming the file."""
    from ssl_app.sweep.command import main as sweep

    bad = tmp_path / "list.yaml"
    bad.write_text(BAD_YAML["list"][0])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        sweep(["--config", str(bad), "--out", str(tmp_path / "sweeps"), "--dry-run"])
    line = error_line(capsys.readouterr().err)
    assert stop.value.code == 2 and f"--config {bad} holds a list" in line, line


# --- an output whose write fails keeps the previous one ---------------------------------------------
def fail_fsync(monkeypatch) -> None:
    """Every fsync fails as on a full disk (after the bytes were handed to the file)."""

    def full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)


@pytest.mark.parametrize("command", ["export", "embed"])
def test_a_failed_write_leaves_the_previous_output_intact(tmp_path, monkeypatch, command):
    """Catches a writer that writes ``--out`` in place: a write that fails midway (a full disk) loses the
    previous file. It stays byte for byte, no temporary file is left, and the error is one line."""
    checkpoint = trained_checkpoint(tmp_path)
    out = tmp_path / ("encoder.pt" if command == "export" else "features.npz")
    out.write_bytes(b"the previous output")
    module = export if command == "export" else embed
    fail_fsync(monkeypatch)
    err = io.StringIO()
    code = module.main(["--ckpt", str(checkpoint), "--out", str(out), "--overwrite"], out=io.StringIO(), err=err)
    monkeypatch.undo()
    assert code == 1 and f"cannot write {out}: No space left on device" in error_line(err.getvalue())
    assert out.read_bytes() == b"the previous output"
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []


# --- outputs that cannot be written ------------------------------------------------------------------
def test_the_reports_out_naming_a_file_or_an_unmakeable_folder_is_one_line(tmp_path, monkeypatch, capsys):
    """Catches ``FileExistsError`` (``--out`` names an existing file) and ``OSError`` (a folder that cannot
    be made) as tracebacks; the file is untouched and no parent folder is left behind."""
    from ssl_app.errors import ConfigError
    from ssl_app.report.cli import main as report
    from ssl_app.report.cli import make_out_dir

    out = tmp_path / "table"
    out.write_text("mine")
    monkeypatch.chdir(tmp_path)
    assert report([str(tmp_path), "--out", str(out)]) == 2
    line = error_line(capsys.readouterr().err)
    assert f"--out {out} is a file, not a folder" in line and out.read_text() == "mine"
    too_long = tmp_path / "made" / ("n" * 300)
    with pytest.raises(ConfigError, match=rf"--out {too_long}: cannot create it: File name too long"):
        make_out_dir(too_long)
    assert not (tmp_path / "made").exists()


@pytest.mark.parametrize(
    "option, said",
    [
        ("--trainer.logger.init_args.save_dir=/proc/ssl_app_runs/runs", "(/proc/ssl_app_runs): No such file or directory"),
        (f"--trainer.logger.init_args.name={'n' * 300}", ": File name too long"),
        (f"--trainer.logger.init_args.save_dir={'d/' * 2100}", ": File name too long"),
    ],
    ids=["under-proc", "long-name", "long-path"],
)
def test_a_run_folder_that_cannot_be_made_is_one_line_naming_it(tmp_path, monkeypatch, capsys, option, said):
    """Catches ``FileNotFoundError`` (a ``save_dir`` under ``/proc``) and ``OSError: [Errno 36] File name
    too long`` (a run name, a whole path) as tracebacks. Nothing is left in the working folder."""
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(["fit", "--config", QUICKSTART, *TINY, option], capsys)
    line = error_line(err)
    assert code == 2 and "trainer.logger: cannot create the run folder " in line and said in line, line
    assert list(tmp_path.iterdir()) == []
