"""Every loss strategy trains the quickstart through the CLI: one process, and 2-rank DDP."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from ssl_app.cli import main
from tests.ssl_app.test_cli import QUICKSTART, REPO, TINY, only_version_dir, scalar_tags, scalar_values

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
    monkeypatch.chdir(tmp_path)
    config = str(REPO / "configs" / f"{method}.yaml")
    cli = main(["fit", "--config", config, *TINY, "--trainer.max_epochs=1", "--trainer.limit_val_batches=0", *loss_args(name)])
    assert type(cli.model.loss).__name__ == name
    assert math.isfinite(cli.trainer.callback_metrics["train/loss_epoch"].item())


TWO_PROCESS_RUNS = {
    **{name: loss_args(name) for name in STRATEGIES},
    "HardContrastive-quantile": [
        "--model.init_args.loss=ssl_app.losses.HardContrastive", "--model.init_args.loss.init_args.quantile=0.1",
    ],
}


@pytest.mark.parametrize("name", TWO_PROCESS_RUNS)
def test_strategy_trains_on_two_processes(name, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "ssl_app", "fit", "--config", QUICKSTART, *TINY, "--trainer.max_epochs=1",
         *TWO_PROCESS_RUNS[name], "--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = only_version_dir(tmp_path / "runs")
    assert (run / "checkpoints" / "last.ckpt").is_file()
    losses = scalar_values(run, "train/loss_epoch")
    assert losses and all(math.isfinite(value) for value in losses)
    assert "loss/effective_negatives" in scalar_tags(run)
