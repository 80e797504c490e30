"""The atomic write gives the permissions a plain write would: ``0o666 & ~umask``, or the replaced file's mode."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ssl_app.io.atomic import atomic_file, write_json

UMASKS = [0o022, 0o077, 0o002]


@contextmanager
def umask(value: int) -> Iterator[None]:
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", UMASKS, ids=oct)
def test_a_new_file_gets_what_a_plain_write_gets_under_the_umask(tmp_path, mask):
    with umask(mask):
        write_json(tmp_path / "run.json", {"a": 1})
        with atomic_file(tmp_path / "last.ckpt") as file:
            file.write(b"weights")
        (tmp_path / "plain.txt").write_text("plain")
    assert mode(tmp_path / "run.json") == 0o666 & ~mask
    assert mode(tmp_path / "last.ckpt") == mode(tmp_path / "plain.txt") == 0o666 & ~mask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "plain.txt", "run.json"]  # no temporary left


@pytest.mark.parametrize("existing", [0o640, 0o600, 0o664], ids=oct)
def test_a_replaced_file_keeps_its_mode_as_a_plain_write_does(tmp_path, existing):
    target = tmp_path / "run.json"
    target.write_text("{}")
    target.chmod(existing)
    with umask(0o022):
        write_json(target, {"b": 2})
    assert mode(target) == existing and target.read_text().startswith("{")


@pytest.mark.slow
def test_a_fits_checkpoints_and_record_and_the_export_and_embed_outputs_follow_the_umask(tmp_path):
    """Umask 002 (a group-shared cluster folder): every file the run, ``export`` and ``embed`` write is 0664."""
    from ssl_app.cli.embed import main as embed_main
    from ssl_app.cli.export import main as export_main
    from tests.helpers import cli_in
    from tests.ssl_app.cli.test_cli import QUICKSTART, TINY

    with umask(0o002):
        cli_in(tmp_path, ["fit", "--config", QUICKSTART, *TINY, "--trainer.max_epochs=1"])
        (run,) = (tmp_path / "runs" / "quickstart").iterdir()
        last = run / "checkpoints" / "last.ckpt"
        quiet = {"out": io.StringIO(), "err": io.StringIO()}
        assert export_main(["--ckpt", str(last), "--out", str(tmp_path / "encoder.pt")], **quiet) == 0
        assert embed_main(["--ckpt", str(last), "--out", str(tmp_path / "features.npz")], **quiet) == 0
    written = [run / "run.json", run / "config.yaml", *(run / "checkpoints").glob("*.ckpt"), tmp_path / "encoder.pt"]
    written.append(tmp_path / "features.npz")
    assert {path.name: oct(mode(path)) for path in written} == {path.name: oct(0o664) for path in written}
