"""Every loss strategy through the CLI (one process), and one 2-process DDP run per stored-candidate
method (MoCo, memory bank) that checks the global keys / bank entries really reached the
checkpoint. SimCLR's 2-process CLI run is ``tests/ssl_app/test_cli.py::test_two_processes_ddp``.

Exact per-loss DDP equality (2 ranks × B = 1 rank × 2B) is proven in-process with real gloo
ranks in ``tests/ssl_app/methods/test_*_ddp.py``; a 2-process CLI run per loss would only
re-check "exit 0, finite loss", so there is none. All tests here are ``slow`` (CLI runs).
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from ssl_app.cli import main
from tests.ssl_app.test_cli import (
    QUICKSTART,
    REPO,
    TINY,
    only_version_dir,
    scalar_tags,
    scalar_values,
)

pytestmark = pytest.mark.slow

STRATEGIES = {
    "InfoNCE": ["--model.init_args.loss.init_args.temperature=0.1"],
    "HardContrastive": ["--model.init_args.loss.init_args.temperature=0.3", "--model.init_args.loss.init_args.num_negatives=16"],
    "Simple": [],
    "HardSimple": ["--model.init_args.loss.init_args.num_negatives=16"],
    "SupCon": ["--model.init_args.loss.init_args.temperature=0.1"],
}


def loss_args(name: str) -> list[str]:
    return [f"--model.init_args.loss=ssl_app.losses.{name}", *STRATEGIES[name]]


@pytest.mark.parametrize("name", STRATEGIES)
def test_strategy_trains_through_the_cli(name, tmp_path, monkeypatch):
    """Catches a strategy that the CLI cannot select by class path, or that logs no diagnostics."""
    monkeypatch.chdir(tmp_path)
    cli = main(["fit", "--config", QUICKSTART, *TINY, "--trainer.max_epochs=1", *loss_args(name)])
    assert type(cli.model.loss).__name__ == name
    loss = cli.trainer.callback_metrics["train/loss_epoch"].item()
    assert math.isfinite(loss)
    tags = scalar_tags(only_version_dir(tmp_path / "runs"))
    assert {"loss/effective_negatives", "loss/pos_sim", "loss/neg_sim"} <= tags


@pytest.mark.parametrize("method", ["moco", "memory_bank"])
@pytest.mark.parametrize("name", STRATEGIES)
def test_strategy_trains_with_moco_and_the_memory_bank(method, name, tmp_path, monkeypatch):
    """Catches a strategy that breaks on MoCo's or the bank's masks (queue slots, label masks) from a config."""
    monkeypatch.chdir(tmp_path)
    config = str(REPO / "configs" / f"{method}.yaml")
    cli = main(["fit", "--config", config, *TINY, "--trainer.max_epochs=1", "--trainer.limit_val_batches=0", *loss_args(name)])
    assert type(cli.model.loss).__name__ == name
    assert math.isfinite(cli.trainer.callback_metrics["train/loss_epoch"].item())


# --- one 2-process CLI run per stored-candidate method ----------------------------------------
TRAIN = 128  # TINY's train_size; batch 32 per process, 2 processes: 2 steps cover the epoch
TWO_PROCESS = {
    # SupCon: the label gather of the keys is exercised too
    "moco": [*loss_args("SupCon")],
    "memory_bank": [
        "--model.init_args.loss=ssl_app.losses.HardContrastive",
        "--model.init_args.loss.init_args.quantile=0.1",
    ],
}


@pytest.mark.parametrize("method", TWO_PROCESS)
def test_two_process_run_stores_every_ranks_candidates(method, tmp_path):
    """Catches a rank that enqueues / writes only its own shard (the checkpoint would hold half),
    and a 2-process run that does not log its loss and metrics."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ssl_app",
            "fit",
            "--config",
            str(REPO / "configs" / f"{method}.yaml"),
            *TINY,
            "--trainer.max_epochs=1",
            *TWO_PROCESS[method],
            "--trainer.accelerator=cpu",
            "--trainer.devices=2",
            "--trainer.strategy=ddp",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = sorted((tmp_path / "runs").glob(f"{method}/version_*"))
    assert len(runs) == 1, runs
    run = runs[0]
    losses = scalar_values(run, "train/loss_epoch")
    assert losses and all(math.isfinite(value) for value in losses)
    assert {"loss/effective_negatives", "metrics/uniformity", "metrics/alignment"} <= scalar_tags(run)
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    # One epoch: 2 steps × 2 processes × 32 samples = every one of the TRAIN images, once.
    if method == "moco":
        assert state["queue.filled"].item() == TRAIN  # one rank alone: TRAIN / 2
        assert state["queue.ptr"].item() == TRAIN % state["queue.features"].shape[0]
        assert (state["queue.labels"][:TRAIN] >= 0).all()
    else:
        assert state["bank.features"].shape[0] == TRAIN
        assert (state["bank.labels"] >= 0).sum().item() == TRAIN  # one rank alone: TRAIN / 2
