"""SIGINT/SIGTERM a real CPU run mid-epoch, resume with ``--ckpt_path last``, finish; atomic saves.

Real processes (``python -m ssl_app``), MoCo so the checkpoint carries a key encoder and a queue.
A ``Pace`` callback prints each finished step (so the test signals mid-epoch) and, on resume,
dumps the state the run restored, which must equal the state the interrupted run saved.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ssl_app.runs.record import read_record

REPO = Path(__file__).resolve().parents[2]
MOCO = str(REPO / "configs" / "moco.yaml")
BATCHES = 6  # per epoch
ARGS = [
    "fit",
    "--config",
    MOCO,
    "--trainer.max_epochs=2",
    f"--trainer.limit_train_batches={BATCHES}",
    "--trainer.limit_val_batches=1",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.callbacks=[]",  # no embedding metrics: only the interruption matters here
    "--data.init_args.train_size=192",
    "--data.init_args.val_size=32",
    "--data.init_args.test_size=32",
    "--data.init_args.batch_size=16",
    "--model.init_args.queue_size=40",
]


class Pace(Callback):
    """Print ``step <n>`` after each training step (and pause); optionally dump the restored state."""

    def __init__(self, pause: float = 0.0, dump: str | None = None) -> None:
        self.pause = pause
        self.dump = dump

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.dump and trainer.is_global_zero:
            torch.save(
                {
                    "global_step": trainer.global_step,
                    "epoch": trainer.current_epoch,
                    "state_dict": {k: v.detach().clone() for k, v in pl_module.state_dict().items()},
                    "optimizer": trainer.optimizers[0].state_dict(),
                    "scheduler": trainer.lr_scheduler_configs[0].scheduler.state_dict(),
                },
                self.dump,
            )

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.is_global_zero:
            print(f"step {trainer.global_step}", flush=True)
        time.sleep(self.pause)


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def start(cwd: Path, *extra: str, pause: float = 0.3, dump: Path | None = None) -> subprocess.Popen:
    pace = f"--trainer.callbacks+={__name__}.Pace"
    args = [*ARGS, pace, f"--trainer.callbacks.pause={pause}"]
    if dump is not None:
        args.append(f"--trainer.callbacks.dump={dump}")
    return subprocess.Popen(
        [sys.executable, "-m", "ssl_app", *args, *extra],
        cwd=cwd,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def signal_at_step(process: subprocess.Popen, step: int, signum: int, timeout: float = 120) -> tuple[int, str, str]:
    """Wait for ``step <step>`` on stdout, send ``signum``, return (exit code, stdout, stderr)."""
    deadline = time.monotonic() + timeout
    seen = []
    assert process.stdout is not None
    for line in process.stdout:
        seen.append(line)
        if line.strip() == f"step {step}":
            process.send_signal(signum)
            break
        assert time.monotonic() < deadline, "".join(seen)
    out, err = process.communicate(timeout=timeout)
    return process.returncode, "".join(seen) + out, err


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def assert_same_tensors(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_tensors(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def test_sigint_then_sigterm_mid_epoch_resume_into_the_same_run(tmp_path):
    # 1. Ctrl-C after step 3 of epoch 0 (of 6 per epoch).
    code, _out, err = signal_at_step(start(tmp_path), 3, signal.SIGINT)
    assert code == 130, err[-3000:]
    last = tmp_path / "runs" / "moco" / "version_0" / "checkpoints" / "last.ckpt"
    assert f"Interrupted by SIGINT at epoch 0, step 3: saved {Path('runs/moco/version_0/checkpoints/last.ckpt')}" in err, err[
        -3000:
    ]
    assert "Resume with:" in err and "--ckpt_path=runs/moco/version_0/checkpoints/last.ckpt" in err
    assert "Traceback" not in err, err[-3000:]
    saved = load(last)
    assert saved["global_step"] == 3 and saved["epoch"] == 0
    record = read_record(last.parent.parent)
    assert record.status == "interrupted" and record.exit_reason.startswith("SIGINT at epoch 0, step 3; saved ")
    assert saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["completed"] == 3
    assert int(saved["state_dict"]["queue.filled"]) == 40 and int(saved["state_dict"]["queue.ptr"]) == (3 * 16) % 40

    # 2. Resume with --ckpt_path last; SIGTERM (pre-emption) after step 5; the restored state is the saved one.
    dump = tmp_path / "restored.pt"
    code, _out, err = signal_at_step(start(tmp_path, "--ckpt_path=last", dump=dump), 5, signal.SIGTERM)
    assert code == 143, err[-3000:]
    assert "Interrupted by SIGTERM at epoch 0, step 5" in err, err[-3000:]
    restored = load(dump)
    assert restored["global_step"] == 3 and restored["epoch"] == 0
    assert_same_tensors(restored["state_dict"], saved["state_dict"], "state_dict")
    assert_same_tensors(restored["optimizer"], saved["optimizer_states"][0], "optimizer")
    assert_same_tensors(restored["scheduler"], saved["lr_schedulers"][0], "scheduler")
    assert load(last)["global_step"] == 5

    # 3. Resume again and finish: same version folder, the step curve continues without a gap.
    result = subprocess.run(
        [sys.executable, "-m", "ssl_app", *ARGS, "--ckpt_path=last"],
        cwd=tmp_path,
        env=env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [p.name for p in (tmp_path / "runs" / "moco").iterdir()] == ["version_0"]
    record = read_record(last.parent.parent)
    assert record.status == "done" and [r["checkpoint"].endswith("last.ckpt") for r in record.resumes] == [True, True]
    final = load(last)
    assert final["global_step"] == 2 * BATCHES and final["epoch"] == 1
    events = EventAccumulator(str(tmp_path / "runs" / "moco" / "version_0"))
    events.Reload()
    steps = sorted({event.step for event in events.Scalars("train/loss_step")})
    assert steps == list(range(2 * BATCHES)), steps


def _crashing_save(target: str, marker: str) -> None:
    """Child process: save a checkpoint whose pickling kills the process half-way through."""
    from ssl_app.checkpointing import AtomicCheckpointIO

    class Crash:
        def __reduce__(self):
            os.kill(os.getpid(), signal.SIGKILL)

    AtomicCheckpointIO().save_checkpoint({"big": torch.ones(1 << 20), "crash": Crash(), "marker": marker}, target)


def test_a_crash_mid_save_leaves_the_previous_checkpoint_intact(tmp_path):
    from ssl_app.checkpointing import AtomicCheckpointIO

    target = tmp_path / "checkpoints" / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"marker": "previous", "weights": torch.arange(10)}, target)
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); from tests.ssl_app.test_interrupt import _crashing_save; "
        f"_crashing_save({str(target)!r}, 'new')"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env(), check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    kept = torch.load(target, weights_only=True)
    assert kept["marker"] == "previous" and torch.equal(kept["weights"], torch.arange(10))
    # The temporary file sits beside the target (same filesystem, so the rename is atomic).
    leftovers = [p.name for p in target.parent.iterdir() if p.name != "last.ckpt"]
    assert all(name.startswith(".last.ckpt.") and name.endswith(".tmp") for name in leftovers), leftovers


@pytest.mark.parametrize("signum", [signal.SIGTERM])
def test_ddp_sigterm_to_the_launcher_stops_every_rank_and_resumes(tmp_path, signum):
    """2 gloo processes; the scheduler signals only the launching process (rank 0)."""
    ddp = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"]
    code, _out, err = signal_at_step(start(tmp_path, *ddp, pause=0.5), 2, signum, timeout=240)
    assert code == 128 + signum, err[-3000:]
    assert "Interrupted by SIGTERM at epoch 0, step" in err, err[-3000:]
    last = tmp_path / "runs" / "moco" / "version_0" / "checkpoints" / "last.ckpt"
    saved = load(last)
    step = saved["global_step"]
    assert 2 <= step < BATCHES, step  # mid-epoch
    result = subprocess.run(
        [sys.executable, "-m", "ssl_app", *ARGS, *ddp, "--ckpt_path=last"],
        cwd=tmp_path,
        env=env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [p.name for p in (tmp_path / "runs" / "moco").iterdir()] == ["version_0"]
    assert load(last)["global_step"] == 2 * BATCHES
