"""End to end through the CLI on the long-tailed shapes: SupCon-trained SimCLR (configs/shapes_lt.yaml)
with the kNN monitor's many/medium/few-shot groups, then the linear probe with its own groups and
LongTailAccuracy (configs/linear_shapes_lt.yaml), 1 and 2 processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from datamodules.long_tail import exponential_profile
from ssl_app.cli import main
from tests.helpers import cli_in, newest_probe_folder, probe_curves
from tests.ssl_app.cli.test_cli import REPO

CONFIGS = REPO / "configs"
LT_TAGS = ("lt/top1", "lt/many", "lt/medium", "lt/few")
GROUPS = ("many", "medium", "few")
SHAPES_LT_COUNTS = exponential_profile(500, 10, 100)  # configs/data/shapes_lt.yaml: 500 … 5
# The probe: 2 epochs on cached features, validated after each; an odd test split (uneven DDP shards).
PROBE = ["--model.init_args.cache_features=flips", "--trainer.max_epochs=2", "--trainer.check_val_every_n_epoch=1",
         "--trainer.enable_progress_bar=false", "--data.init_args.data.init_args.test_size=101"]  # fmt: skip


def scalars(run: Path) -> dict[str, list[float]]:
    events = EventAccumulator(str(run))
    events.Reload()
    return {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


@pytest.fixture(scope="module")
def supcon_checkpoint(tmp_path_factory) -> Path:
    """One SupCon step of configs/shapes_lt.yaml and one validation (the probe's mechanics are tested, not the encoder)."""
    workdir = tmp_path_factory.mktemp("supcon_lt")
    # One validation after the step, the kNN monitor alone on 100 validation images: about 1 s more.
    cli_in(workdir, ["fit", "--config", str(CONFIGS / "shapes_lt.yaml"), "--trainer.max_steps=1",
                     "--trainer.val_check_interval=1", "--trainer.limit_val_batches=1", "--data.init_args.val_size=100",
                     "--trainer.callbacks=[{class_path: callbacks.KNNMonitor}]",
                     "--trainer.enable_progress_bar=false"])  # fmt: skip
    run = workdir / "runs" / "shapes_lt" / "version_0"
    saved = json.loads((run / "class_counts.json").read_text())
    assert saved["class_counts"] == SHAPES_LT_COUNTS and saved["total"] == 1236
    return run / "checkpoints" / "last.ckpt"


def test_a_long_tailed_simclr_run_logs_the_knn_groups(supcon_checkpoint):
    """The shipped config's KNNMonitor, with no option set, logs every group of the 500 … 5 split."""
    logged = scalars(supcon_checkpoint.parents[1])
    for name in GROUPS:
        assert len(logged[f"metrics/knn_{name}"]) == 1 and 0.0 <= logged[f"metrics/knn_{name}"][0] <= 1.0, name


def test_the_probe_logs_the_long_tail_metrics_every_validation_epoch(supcon_checkpoint, tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    cli = main(
        ["fit", "--config", str(CONFIGS / "linear_shapes_lt.yaml"), f"--model.init_args.checkpoint={supcon_checkpoint}", *PROBE]
    )
    assert cli.datamodule.train_class_counts() == SHAPES_LT_COUNTS
    run = newest_probe_folder(supcon_checkpoint)
    logged = probe_curves(run)
    for tag in LT_TAGS:
        assert len(logged[tag]) == 2 and all(0.0 <= v <= 1.0 for v in logged[tag]), (tag, logged.get(tag))
    # Same classifier, same clean test images: the pooled top-1 is the probe's own test accuracy.
    assert logged["lt/top1"] == pytest.approx(logged["linear/top1"], abs=1e-6)
    for name in GROUPS:  # and the probe's own groups are LongTailAccuracy's, every epoch
        assert logged[f"linear/{name}"] == pytest.approx(logged[f"lt/{name}"], abs=1e-6), name
    assert json.loads((run / "class_counts.json").read_text())["class_counts"] == SHAPES_LT_COUNTS
    assert "LongTailAccuracy: 10 classes by training images: 4 many-shot (>100), 3 medium-shot (20–100), 3 few-shot (<20)" in (
        caplog.text
    )
    assert "LinearProbe: 10 classes by training images: 4 many-shot" in caplog.text


@pytest.mark.slow
def test_two_processes_log_what_one_process_computes_on_the_same_weights(supcon_checkpoint, tmp_path, monkeypatch):
    """The probe under DDP (gloo, 2 processes, 101 test images: shards of 51 and 50): the logged
    lt/* equal one process's values of the saved weights on the whole test split."""
    config = str(CONFIGS / "linear_shapes_lt.yaml")
    common = [f"--model.init_args.checkpoint={supcon_checkpoint}", *PROBE]
    ddp = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"]
    result = subprocess.run(
        [sys.executable, "-m", "ssl_app", "fit", "--config", config, *common, *ddp],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    run = newest_probe_folder(supcon_checkpoint)
    logged = probe_curves(run)
    assert all(len(logged[tag]) == 2 for tag in LT_TAGS), logged.keys()
    monkeypatch.chdir(tmp_path)
    single = main(["validate", "--config", config, *common, f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}"])
    for tag in LT_TAGS:
        assert single.trainer.callback_metrics[tag].item() == pytest.approx(logged[tag][-1], abs=1e-6), tag
    # The probe's own groups count its test batches, which Lightning's DistributedSampler pads with a
    # repeat of one sample (as for linear/top1): a group moves by at most 1 / (its classes × that class's
    # test images + 1), under 0.025 here; a group of one rank's shard alone would be far off.
    for name in GROUPS:
        assert len(logged[f"linear/{name}"]) == 2, name
        assert single.trainer.callback_metrics[f"linear/{name}"].item() == pytest.approx(logged[f"linear/{name}"][-1], abs=0.025)
