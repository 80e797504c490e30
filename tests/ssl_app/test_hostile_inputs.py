"""Hostile inputs at the edges (issue 29): each is one ``error:`` line naming the file, and nothing
is lost or left behind. Config files that are not a mapping of options, outputs that cannot be
written, an output whose write fails midway."""

from __future__ import annotations

import errno
import io
import os

import pytest

from ssl_app import embed, export
from tests.ssl_app.test_cli import QUICKSTART, TINY
from tests.ssl_app.test_export import trained_checkpoint
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
    from ssl_app.sweep import main as sweep

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
