"""Runs that end badly, for real: a full disk, a signal before the first step, a divergence. Each
ends in one line (no traceback), an honest run record, and nothing half-written; the divergence's
advice, followed, finishes the run. Real processes and CLI fits: all ``slow``."""

from __future__ import annotations

import os
import resource
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from ssl_app.cli import main
from ssl_app.runs.record import read_record
from tests.ssl_app.cli.test_cli import QUICKSTART, REPO, TINY

pytestmark = pytest.mark.slow


class SignalInSetup(L.Callback):
    """Sends this process SIGTERM while the run sets up: after its folder exists, before any step."""

    def setup(self, trainer, pl_module, stage):
        os.kill(os.getpid(), signal.SIGTERM)


def cli(args: list[str], cwd: Path, limit_file_size: int | None = None) -> subprocess.CompletedProcess:
    def limits() -> None:
        if limit_file_size is not None:  # a disk that fills up: writes past the limit fail (EFBIG)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_size, limit_file_size))

    return subprocess.run(
        [sys.executable, "-m", "ssl_app", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limits,
    )


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def test_a_full_disk_is_one_line_and_leaves_no_half_checkpoint(tmp_path):
    """Catches torch's ``inline_container.cc`` traceback when a checkpoint cannot be written."""
    result = cli(["fit", "--config", QUICKSTART, *TINY], tmp_path, limit_file_size=600_000)
    line = one_error_line(result.stderr)
    assert result.returncode == 1, result.stderr[-3000:]
    assert line.startswith("error: cannot write checkpoint runs/quickstart/version_0/checkpoints/") and "File too large" in line
    run = tmp_path / "runs" / "quickstart" / "version_0"
    assert not [p.name for p in (run / "checkpoints").iterdir() if p.name.endswith(".tmp")]
    record = read_record(run)
    assert record.status == "failed" and "File too large" in record.exit_reason


def test_a_signal_before_the_first_step_leaves_no_run_folder(tmp_path):
    """Catches an empty ``version_<n>`` left by a start stopped while it set up (and its traceback)."""
    result = cli(["fit", "--config", QUICKSTART, *TINY, f"--trainer.callbacks+={__name__}.SignalInSetup"], tmp_path)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    assert "Interrupted by SIGTERM before the first step; nothing to save" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs" / "quickstart").exists() or not any((tmp_path / "runs" / "quickstart").iterdir())


def finite(path: Path) -> bool:
    checkpoint = torch.load(path, weights_only=True, map_location="cpu")
    tensors = [t for t in checkpoint["state_dict"].values() if t.is_floating_point()]
    for optimizer in checkpoint.get("optimizer_states", []):
        tensors += [t for state in optimizer["state"].values() for t in state.values() if torch.is_tensor(t)]
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


def test_a_divergence_keeps_the_last_good_state_and_its_advice_finishes_the_run(tmp_path, monkeypatch, capsys):
    """Catches the "last good" checkpoint holding ``inf`` (BatchNorm statistics of a run that had
    reported 1500/1500 non-finite embeddings and trained on), and advice that fails when followed
    (the checkpoint's learning rate silently replaced the one on the command line)."""
    monkeypatch.chdir(tmp_path)
    epochs = [a for a in TINY if not a.startswith("--trainer.max_epochs")]
    main(["fit", "--config", QUICKSTART, *epochs, "--trainer.max_epochs=1"])  # one good epoch at lr 0.06
    capsys.readouterr()
    run = tmp_path / "runs" / "quickstart" / "version_0"
    too_fast = ["--trainer.max_epochs=3", "--model.init_args.optim.lr=1e6", "--ckpt_path=last"]
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", QUICKSTART, *epochs, *too_fast])
    err = capsys.readouterr().err
    assert stop.value.code == 1
    line = one_error_line(err)
    assert "non-finite" in line and "epoch 1" in line
    record = read_record(run)
    assert record.status == "diverged" and "non-finite" in record.exit_reason
    assert all(finite(path) for path in (run / "checkpoints").glob("*.ckpt"))  # nothing non-finite was written
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2  # the good epoch

    advice = err.split("resume with: ", 1)[1].split(" (a tenth", 1)[0]
    command = shlex.split(advice)
    assert command[:3] == [Path(sys.executable).name, "-m", "ssl_app"] and "--model.init_args.optim.lr=100000" in command
    assert command.count("--model.init_args.optim.lr=100000") == 1 and "--model.init_args.optim.lr=1e6" not in command
    followed = [a if not a.startswith("--model.init_args.optim.lr=") else "--model.init_args.optim.lr=0.06" for a in command[3:]]
    main(followed)
    record = read_record(run)
    assert record.status == "done" and record.step == 6 and len(record.resumes) == 2
    assert all(finite(path) for path in (run / "checkpoints").glob("*.ckpt"))
