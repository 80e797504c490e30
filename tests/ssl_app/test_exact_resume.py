"""The README's promise, end to end: the quickstart interrupted mid-epoch by SIGTERM and resumed with
``--ckpt_path last`` trains on the same views, logs the same losses and ends with the same final
metrics, to the last digit, as the uninterrupted run (the quickstart's own ``augment_on: device``).
The stop is in the first of 2 epochs: Lightning checkpoints no epoch aggregate of training-step logs,
so the *resumed* epoch's mean training loss averages only the steps after the resume (a documented
limit, docs/failing-safely.md); every later epoch's values are whole.

Real processes (``python -m ssl_app``) of ``configs/quickstart.yaml`` shortened to 2 epochs of 8 steps.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from ssl_app.runs.record import read_record

REPO = Path(__file__).resolve().parents[2]
STOP = 5  # of 16 steps: mid-epoch 0, so the final epoch (its means too) is wholly after the resume
ARGS = [
    "fit",
    "--config",
    str(REPO / "configs" / "quickstart.yaml"),
    "--trainer.max_epochs=2",
    "--trainer.enable_progress_bar=false",
    "--data.init_args.train_size=256",
    "--data.init_args.val_size=100",
    "--data.init_args.test_size=16",
    "--data.init_args.batch_size=32",
]


class StepLog(L.Callback):
    """Appends each training step's number, loss and a hash of its views to ``<folder>/steps.jsonl``;
    sends its own process SIGTERM after step ``stop_at`` (as a scheduler would)."""

    def __init__(self, folder: str, stop_at: int = -1) -> None:
        self.folder, self.stop_at = Path(folder), stop_at

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        views = torch.stack(batch[0]).detach().cpu().contiguous()
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        record = [trainer.global_step, float(loss), hashlib.sha256(views.numpy().tobytes()).hexdigest()]
        with open(self.folder / "steps.jsonl", "a") as file:
            file.write(json.dumps(record) + "\n")
        if trainer.global_step == self.stop_at:
            os.kill(os.getpid(), signal.SIGTERM)


def quickstart(cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    log = [f"--trainer.callbacks+={__name__}.StepLog", f"--trainer.callbacks.folder={cwd}"]
    return subprocess.run(
        [sys.executable, "-m", "ssl_app", *ARGS, *log, *extra],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_an_interrupted_and_resumed_quickstart_ends_with_the_same_metrics(tmp_path):
    """Catches resumed steps with fresh augmentations (the final kNN and uniformity then differ in
    the second decimal), and anything else of a resume that is not exact: the order, the model, the
    optimiser, the metrics' evaluation."""
    straight_dir, resumed_dir = tmp_path / "straight", tmp_path / "resumed"
    straight_dir.mkdir()
    resumed_dir.mkdir()
    straight = quickstart(straight_dir)
    assert straight.returncode == 0, straight.stderr[-3000:]
    stopped = quickstart(resumed_dir, f"--trainer.callbacks.stop_at={STOP}")
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    assert f"Interrupted by SIGTERM at epoch 0, step {STOP}" in stopped.stderr, stopped.stderr[-3000:]
    resumed = quickstart(resumed_dir, "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    steps = [(straight_dir / "steps.jsonl").read_text().splitlines(), (resumed_dir / "steps.jsonl").read_text().splitlines()]
    assert len(steps[0]) == 16 and steps[1] == steps[0]  # each step's number, loss and views
    folders = [folder / "runs" / "quickstart" / "version_0" for folder in (straight_dir, resumed_dir)]
    records = [read_record(folder) for folder in folders]
    assert records[0] is not None and records[1] is not None and records[1].status == "done"
    assert {"metrics/knn_acc", "metrics/uniformity"} <= records[0].results.keys(), records[0].results
    assert records[1].results == records[0].results  # every final value, to the last digit
