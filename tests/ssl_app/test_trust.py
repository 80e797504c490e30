"""What a checkpoint may make the app do: nothing but be read.

A checkpoint's saved run config and hyper-parameters name classes; a class path read from a file
is compared as text and never imported (``ssl_app.trust``), by every command that reads one.
A planted module writes a marker file when imported: it must never appear.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch

from ssl_app.cli import embed, export
from ssl_app.errors import ConfigError
from ssl_app.resume import RECORDER_STATE_KEY
from tests.helpers import cli_in
from tests.ssl_app.cli.test_cli import QUICKSTART, REPO, TINY
from tests.ssl_app.test_run_folders import error_line, run_cli

LINEAR = str(REPO / "configs" / "linear.yaml")
SMALL = [*TINY, "--trainer.callbacks=[]"]
PROBE_SMALL = [
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=1",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
    "--data.init_args.data.init_args.train_size=40",
    "--data.init_args.data.init_args.test_size=20",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """``last.ckpt`` of a tiny quickstart fit, written by the CLI (copy it before changing it)."""
    workdir = tmp_path_factory.mktemp("trained")
    cli_in(workdir, ["fit", "--config", QUICKSTART, *SMALL])
    return workdir / "runs" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"


def plant_module(folder: Path, marker: Path, monkeypatch) -> str:
    """An importable module (on ``sys.path``) that writes ``marker`` when imported; its name."""
    name = f"planted_{uuid.uuid4().hex[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(
        textwrap.dedent(f"""
            from pathlib import Path
            Path({str(marker)!r}).touch()
            class Planted:
                pass
        """)
    )
    monkeypatch.syspath_prepend(str(folder))
    return name


def name_in_saved_config(source: Path, target: Path, field: str, class_path: str) -> Path:
    """``source`` with ``class_path`` as the loss, the method, the data or a callback of its saved run config."""
    checkpoint = torch.load(source, weights_only=True)
    config = checkpoint["callbacks"][RECORDER_STATE_KEY]["config"]
    if field == "loss":
        config["model"]["init_args"]["loss"]["class_path"] = class_path
    elif field == "method":
        config["model"]["class_path"] = class_path
        checkpoint["hyper_parameters"]["_class_path"] = class_path
    elif field == "data":
        config["data"]["class_path"] = class_path
    else:
        config["trainer"]["callbacks"] = [{"class_path": class_path, "init_args": {}}]
    torch.save(checkpoint, target)
    return target


def run_own(module, args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    return module.main(args, out=io.StringIO(), err=err), err.getvalue()


COMMANDS = {
    "fit": lambda ckpt, tmp: run_cli(["fit", "--config", QUICKSTART, *SMALL, f"--ckpt_path={ckpt}"], tmp.capsys),
    "validate": lambda ckpt, tmp: run_cli(["validate", "--config", QUICKSTART, *SMALL, f"--ckpt_path={ckpt}"], tmp.capsys),
    "test": lambda ckpt, tmp: run_cli(["test", "--config", QUICKSTART, *SMALL, f"--ckpt_path={ckpt}"], tmp.capsys),
    "probe": lambda ckpt, tmp: run_cli(
        ["fit", "--config", LINEAR, f"--model.init_args.checkpoint={ckpt}", *PROBE_SMALL], tmp.capsys
    ),
    "export": lambda ckpt, tmp: run_own(export, ["--ckpt", str(ckpt), "--out", str(tmp.path / "encoder.pt")]),
    "embed": lambda ckpt, tmp: run_own(embed, ["--ckpt", str(ckpt), "--out", str(tmp.path / "features.npz")]),
}


class Context:
    """What a command of ``COMMANDS`` needs from its test: the folder for outputs and ``capsys``."""

    def __init__(self, path: Path, capsys) -> None:
        self.path, self.capsys = path, capsys


@pytest.mark.slow
@pytest.mark.parametrize("field", ["loss", "method", "data", "callback"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_class_path_in_a_checkpoint_is_never_imported(trained, tmp_path, monkeypatch, capsys, command, field):
    """Catches ``validate``/``test`` importing the module a checkpoint names as its loss (jsonargparse
    resolved it: the module's code ran, then it was refused), and every other reader of a checkpoint
    taking a class path from it without checking it. Each command refuses a model or data class in one
    line naming it, and runs with a callback's (only ever compared as text)."""
    marker = tmp_path / "imported"
    module = plant_module(tmp_path / "plant", marker, monkeypatch)
    checkpoint = name_in_saved_config(trained, tmp_path / "planted.ckpt", field, f"{module}.Planted")
    monkeypatch.chdir(tmp_path)
    code, err = COMMANDS[command](checkpoint, Context(tmp_path, capsys))
    assert not marker.exists() and module not in sys.modules
    if field == "callback":
        # Nothing builds a saved run's callbacks again: the name stays text and the command runs (a
        # resume names the changed callbacks; a run trained with a callback of its own resumes without it).
        assert code == 0, err
        return
    line = error_line(err)
    assert code == 2 and f"{module}.Planted" in line and "planted.ckpt" in line, line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "encoder.pt").exists()


@pytest.mark.slow
def test_the_probes_python_api_vets_its_checkpoint_like_the_cli(trained, tmp_path, monkeypatch):
    """Catches ``LinearProbe(checkpoint=...)`` reading a checkpoint the CLI would refuse: a planted class
    path (its module never imported), and a file that is not a regular file (it would block)."""
    from ssl_app.evaluation import LinearProbe

    marker = tmp_path / "imported"
    module = plant_module(tmp_path / "plant", marker, monkeypatch)
    checkpoint = name_in_saved_config(trained, tmp_path / "planted.ckpt", "loss", f"{module}.Planted")
    with pytest.raises(ConfigError, match=rf"LinearProbe: checkpoint: .*planted\.ckpt.* names {module}\.Planted"):
        LinearProbe(checkpoint=str(checkpoint), num_classes=10)
    assert not marker.exists() and module not in sys.modules
    pipe = named_pipe(tmp_path / "pipe.ckpt")
    with pytest.raises(ConfigError, match=r"LinearProbe: checkpoint: .*pipe\.ckpt is not a regular file"):
        LinearProbe(checkpoint=str(pipe), num_classes=10)


def named_pipe(path: Path, after: float = 30.0) -> Path:
    """A named pipe at ``path``; after ``after`` seconds a writer opens and closes it, so a reader that
    blocks on it (a regression) gets an empty file and its test fails instead of hanging."""

    def unblock() -> None:
        time.sleep(after)
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO: nobody is waiting on it

    os.mkfifo(path)
    threading.Thread(target=unblock, daemon=True).start()
    return path


@pytest.mark.parametrize("subcommand", ["validate", "test", "fit"])
def test_a_named_pipe_as_ckpt_path_is_refused_in_one_line_without_waiting(tmp_path, monkeypatch, capsys, subcommand):
    """Catches ``torch.load`` blocking on a named pipe until killed (the loader of validate, test, a
    resume, the probe, export and embed): refused in one line naming it, nothing written."""
    pipe = named_pipe(tmp_path / "pipe.ckpt")
    monkeypatch.chdir(tmp_path)
    code, err = run_cli([subcommand, "--config", QUICKSTART, *SMALL, f"--ckpt_path={pipe}"], capsys)
    line = error_line(err)
    assert code == 2 and f"{pipe} is not a regular file" in line, line
    assert not (tmp_path / "runs").exists()
    for module in (export, embed):
        code, err = run_own(module, ["--ckpt", str(pipe), "--out", str(tmp_path / "out.npz")])
        assert code == 2 and f"{pipe} is not a regular file" in error_line(err)


def test_a_saved_class_path_is_known_only_when_registered_or_already_imported():
    """The rule, on text alone: registered classes and classes of imported modules are known; any other
    class path is not, and a bare string is taken for one only where the model or the data is parsed
    again (a run named ``v1.SimCLR`` is a name). Fails if the check imports what it judges."""
    from ssl_app.trust import first_unknown_class, is_known_class

    assert is_known_class("ssl_app.losses.InfoNCE") and is_known_class("datamodules.SyntheticDataModule")
    assert is_known_class("callbacks.KNNMonitor") and is_known_class("lightning.pytorch.loggers.TensorBoardLogger")
    assert not is_known_class("ssl_app.losses.NoSuchLoss") and not is_known_class("antigravity.Anything")
    assert "antigravity" not in sys.modules
    config = {
        "trainer": {"logger": {"init_args": {"name": "v1.SimCLR"}}},
        "model": {"class_path": "ssl_app.methods.SimCLR", "init_args": {"loss": "nosuch.Loss"}},
    }
    assert first_unknown_class(config) == ("model.init_args.loss", "nosuch.Loss")
    assert first_unknown_class({"trainer": {"callbacks": [{"class_path": "nosuch.Callback"}]}}) == (
        "trainer.callbacks[0].class_path",
        "nosuch.Callback",
    )


@pytest.mark.slow
@pytest.mark.parametrize("command", ["export", "embed"])
def test_import_names_the_users_own_module_so_its_checkpoint_is_read(trained, tmp_path, monkeypatch, command):
    """Catches export/embed having no way to read a checkpoint of the user's own loss: its class path is
    refused as read from the file, and accepted once the user names its module with ``--import``."""
    name = f"own_losses_{uuid.uuid4().hex[:12]}"
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / f"{name}.py").write_text("from ssl_app.losses import InfoNCE\n\nclass MyLoss(InfoNCE):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "own"))
    checkpoint = name_in_saved_config(trained, tmp_path / "own.ckpt", "loss", f"{name}.MyLoss")
    monkeypatch.chdir(tmp_path)
    module = {"export": export, "embed": embed}[command]
    out = ["--out", str(tmp_path / f"{command}.out")]
    code, err = run_own(module, ["--ckpt", str(checkpoint), *out])
    assert code == 2 and f"{name}.MyLoss" in err and name not in sys.modules
    code, err = run_own(module, ["--ckpt", str(checkpoint), *out, "--import", name])
    assert code == 0, err
    assert (tmp_path / f"{command}.out").is_file()
    code, err = run_own(module, ["--ckpt", str(checkpoint), *out, "--overwrite", "--import", "no_such_module_here"])
    assert code == 2 and error_line(err).startswith("error:") and "--import no_such_module_here" in err
