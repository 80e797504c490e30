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
    # The shapes' 128 training images of TINY: labels arange(128) % 10 → 13 of classes 0-7, 12 of 8-9.
    # (A datamodule with train_class_counts() makes class_counts unnecessary; they must then agree.)
    "PaCo": [
        "--model.init_args.loss.init_args.temperature=0.1",
        "--model.init_args.loss.init_args.alpha=0.05",
        "--model.init_args.loss.init_args.class_counts=[13,13,13,13,13,13,13,13,12,12]",
    ],
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
    assert {"loss/effective_negatives", "loss/pos_sim", "loss/mean_neg_sim"} <= tags


@pytest.mark.parametrize("method", ["moco", "memory_bank"])
@pytest.mark.parametrize("name", STRATEGIES)
def test_strategy_trains_with_moco_and_the_memory_bank(method, name, tmp_path, monkeypatch):
    """Catches a strategy that breaks on MoCo's or the bank's masks (queue slots, label masks) from a config."""
    monkeypatch.chdir(tmp_path)
    config = str(REPO / "configs" / f"{method}.yaml")
    cli = main(["fit", "--config", config, *TINY, "--trainer.max_epochs=1", "--trainer.limit_val_batches=0", *loss_args(name)])
    assert type(cli.model.loss).__name__ == name
    assert math.isfinite(cli.trainer.callback_metrics["train/loss_epoch"].item())


def test_paco_fits_and_tests_its_classifier_through_the_cli(tmp_path, monkeypatch, capsys):
    """Catches a PaCo run whose classifier or prior does not reach the checkpoint, or that ``test``
    from the checkpoint cannot evaluate (the classifier's top-1 without the prior)."""
    monkeypatch.chdir(tmp_path)
    config = str(REPO / "configs" / "moco.yaml")
    cli = main(["fit", "--config", config, *TINY, *loss_args("PaCo")])
    assert type(cli.model.loss).__name__ == "PaCo"
    (run,) = sorted((tmp_path / "runs").glob("moco/version_*"))
    assert {"val/classifier_top1", "loss/centre_prob"} <= scalar_tags(run)
    checkpoint = run / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert saved["state_dict"]["loss.classifier.weight"].shape == (10, cli.model.feature_dim)
    counts = torch.tensor([13.0] * 8 + [12.0] * 2)
    torch.testing.assert_close(saved["state_dict"]["loss.log_prior"], (counts / 128).log())
    # test from the checkpoint, with a loss given no counts: the prior comes with the checkpoint
    tester = main(["test", "--config", config, *TINY, "--model.init_args.loss=ssl_app.losses.PaCo", f"--ckpt_path={checkpoint}"])
    torch.testing.assert_close(tester.model.loss.log_prior, (counts / 128).log())
    top1 = tester.trainer.callback_metrics["test/classifier_top1"].item()
    assert 0 <= top1 <= 1
    assert "test/classifier_top1" in capsys.readouterr().out


# Needs the long-tail branch of issue 13 (data/shapes_lt.yaml, callbacks.LongTailAccuracy,
# train_class_counts() and class_counts.json of the datamodules).
@pytest.mark.parametrize("processes", [1, 2])
def test_paco_on_long_tailed_shapes_logs_the_long_tail_metrics(processes, tmp_path):
    """Catches a prior that is not the long-tailed split's, or lt/* missing, in 1 and 2 processes."""
    import json

    ddp = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"] if processes == 2 else []
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ssl_app",
            "fit",
            "--config",
            str(REPO / "configs" / "paco_lt_shapes.yaml"),
            "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=2",
            "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false",
            "--data.init_args.batch_size=32",
            *ddp,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = sorted((tmp_path / "runs").glob("paco_lt_shapes/version_*"))
    assert {"lt/top1", "lt/many", "lt/medium", "lt/few", "val/classifier_top1"} <= scalar_tags(run)
    assert all(0 <= value <= 1 for value in scalar_values(run, "lt/top1"))
    counts = torch.tensor(json.loads((run / "class_counts.json").read_text())["class_counts"], dtype=torch.float32)
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    torch.testing.assert_close(state["loss.log_prior"], (counts / counts.sum()).log())
    assert counts[0] / counts[-1] == pytest.approx(100, rel=0.05)  # the prior really is long-tailed


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
