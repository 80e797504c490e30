"""Linear probe: learns on a frozen backbone, both paths, and never changes the backbone."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from datamodules import LinearEvalDataModule, SyntheticDataModule
from ssl_app.cli import main
from ssl_app.errors import ConfigError
from ssl_app.evaluation import LinearProbe
from ssl_app.optim import Optimization
from tests.helpers import newest_probe_folder, probe_curves
from tests.ssl_app.cli.test_cli import QUICKSTART, REPO, TINY

CLASSES = 4  # few classes: a barely trained encoder still separates them above chance


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A quickstart checkpoint from a short CLI run (150 steps) on the probe's 4 classes: features
    a linear layer can fit (a one-step encoder's were at chance within noise)."""
    workdir = tmp_path_factory.mktemp("pretrain")
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        pretrain = ["--trainer.max_steps=150", "--trainer.max_epochs=150", "--trainer.limit_train_batches=8"]
        data = [f"--data.init_args.num_classes={CLASSES}", "--data.init_args.train_size=1024"]
        main(["fit", "--config", QUICKSTART, *TINY, *pretrain, *data, "--trainer.limit_val_batches=0"])
    finally:
        os.chdir(cwd)
    (path,) = workdir.glob("runs/quickstart/version_0/checkpoints/last.ckpt")
    return path


def eval_data(val_fraction=0.2) -> LinearEvalDataModule:
    shapes = SyntheticDataModule(num_classes=CLASSES, train_size=400, val_size=50, test_size=200, num_workers=0)
    return LinearEvalDataModule(shapes, val_fraction=val_fraction, batch_size=64)


def probe(checkpoint: Path, cache: str) -> LinearProbe:
    torch.manual_seed(0)
    # AdamW: SGD overshot on these unnormalised features at lr 10 and 1 (training loss 6.8 and
    # 3.7 > log 4) and barely moved at 0.1.
    optim = Optimization(optimizer="adamw", lr=0.05, weight_decay=0.0, schedule="constant")
    return LinearProbe(str(checkpoint), optim=optim, cache_features=cache)


def fit(model: LinearProbe, tmp_path: Path, epochs: int = 20) -> dict[str, float]:
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=str(tmp_path), check_val_every_n_epoch=epochs,
    )  # fmt: skip
    trainer.fit(model, datamodule=eval_data())
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


@pytest.mark.parametrize("cache", ["none", "flips"])
def test_the_probe_learns_and_leaves_the_backbone_unchanged(checkpoint, cache, tmp_path):
    """Catches a probe that does not learn (labels detached from their images, the layer left out
    of the optimiser: its training loss would stay at log C) or that changes the backbone. The
    held-out accuracies of this small encoder are 0.3–0.45 (chance 0.25), too close to chance for
    a sharper bound on 80–200 samples."""
    model = probe(checkpoint, cache)
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    metrics = fit(model, tmp_path, epochs=40)
    after = model.backbone.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and BatchNorm statistics
    assert metrics["linear/train_loss"] < math.log(CLASSES) - 0.1, metrics
    chance = 1 / CLASSES
    assert metrics["linear/top1"] >= chance and metrics["linear/val_top1"] >= chance, metrics
    assert metrics["linear/top5"] >= metrics["linear/top1"]


def test_the_fast_path_agrees_with_the_protocol(checkpoint, tmp_path):
    slow = fit(probe(checkpoint, "none"), tmp_path)
    fast = fit(probe(checkpoint, "flips"), tmp_path)
    assert abs(slow["linear/top1"] - fast["linear/top1"]) <= 0.1, (slow, fast)


def test_the_cache_encodes_each_image_once(checkpoint, tmp_path):
    model = probe(checkpoint, "flips")
    seen = []
    model.backbone.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0].shape[0]))
    fit(model, tmp_path, epochs=3)
    # train (320 shapes) twice: clean and mirrored; held-out val (80) and test (200) once each
    assert sum(seen) == 2 * 320 + 80 + 200


def test_the_held_out_split_is_disjoint_and_fixed_by_the_seed():
    first, second = eval_data(), eval_data()
    first.setup("fit")
    second.setup("fit")
    train, val = first._splits["train"].base.indices, first._splits["val"].base.indices
    assert not set(train) & set(val) and len(train) + len(val) == 400 and len(val) == 80
    assert val == second._splits["val"].base.indices
    assert first.val_loader_names == ("val", "test") and eval_data(0.0).val_loader_names == ("test",)


def test_bad_inputs_name_what_is_wrong(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        LinearProbe(str(tmp_path / "missing.ckpt"))
    with pytest.raises(ConfigError, match="cache_features"):
        LinearProbe(str(tmp_path / "missing.ckpt"), cache_features="all")
    with pytest.raises(ConfigError, match=r"LinearProbe: few_shot_below \(200\) must be <= many_shot_above \(100\)"):
        LinearProbe(str(tmp_path / "missing.ckpt"), few_shot_below=200)
    with pytest.raises(ConfigError, match="val_fraction"):
        LinearEvalDataModule(SyntheticDataModule(num_workers=0), val_fraction=1.0)


def test_configs_linear_runs_through_the_cli_on_a_checkpoint(checkpoint, tmp_path, monkeypatch, capsys):
    """Catches a probe that does not run from configs/linear.yaml, is filed as a run of its own, or
    ends without printing linear/top1 and top5 (the console summary, ssl_app.runs.summary)."""
    monkeypatch.chdir(tmp_path)
    cli = main(
        ["fit", "--config", str(REPO / "configs" / "linear.yaml"), f"--model.init_args.checkpoint={checkpoint}",
         "--model.init_args.cache_features=flips", "--trainer.max_epochs=2", "--trainer.check_val_every_n_epoch=1",
         "--trainer.enable_progress_bar=false", "--data.init_args.data.init_args.train_size=100",
         "--data.init_args.data.init_args.test_size=40"]
    )  # fmt: skip
    assert isinstance(cli.model, LinearProbe) and cli.model.num_classes == 10
    metrics = cli.trainer.callback_metrics
    assert {"linear/top1", "linear/top5", "linear/val_top1"} <= set(metrics)
    printed = capsys.readouterr().out
    assert "linear probe done, finished at epoch 2" in printed, printed
    for name, tag in (("top-1", "linear/top1"), ("top-5", "linear/top5")):
        assert re.search(rf"linear {name} \(%\) +{100 * float(metrics[tag]):.2f}\n", printed), printed
    # filed with the run it evaluates, not as a run of its own; its curves in its folder's metrics.csv, not a
    # TensorBoard run beside the fit's (issue 40), its final values in <run>/evaluations/linear, on the fit's row
    probe = newest_probe_folder(Path(checkpoint))
    assert not (tmp_path / "runs" / "linear").exists() and not list(probe.glob("events.*"))
    assert probe_curves(probe)["linear/top1"][-1] == pytest.approx(float(metrics["linear/top1"]))
    values = EventAccumulator(str(probe.parent / "linear"))
    values.Reload()
    assert values.Scalars("linear/top1")[-1].value == pytest.approx(float(metrics["linear/top1"]))


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["none", "flips"])
def test_two_processes_train_the_probe_and_agree_on_its_metrics(checkpoint, cache, tmp_path, monkeypatch):
    """The probe under DDP (gloo): both paths run, the backbone is unchanged, and the synchronised
    test accuracy equals one process's accuracy of the same weights on the whole test split."""
    common = [f"--model.init_args.checkpoint={checkpoint}", f"--model.init_args.cache_features={cache}",
              "--trainer.enable_progress_bar=false", "--data.init_args.data.init_args.train_size=100",
              "--data.init_args.data.init_args.test_size=40", "--data.init_args.batch_size=16"]  # fmt: skip
    linear = str(REPO / "configs" / "linear.yaml")
    ddp = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"]
    args = [sys.executable, "-m", "ssl_app", "fit", "--config", linear, *common, "--trainer.max_epochs=2",
            "--trainer.check_val_every_n_epoch=1", *ddp]  # fmt: skip
    result = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    run = newest_probe_folder(Path(checkpoint))
    last = run / "checkpoints" / "last.ckpt"
    saved = torch.load(last, map_location="cpu", weights_only=True)["state_dict"]
    original = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    for name, value in original.items():
        if name.startswith("backbone."):
            assert torch.equal(saved[name], value), name  # frozen weights and BatchNorm statistics
    ddp_top1 = probe_curves(run)["linear/top1"][-1]
    monkeypatch.chdir(tmp_path)  # os.chdir would leave the next tests of this worker there
    single = main(["validate", "--config", linear, *common, f"--ckpt_path={last}"])
    assert single.trainer.callback_metrics["linear/top1"].item() == pytest.approx(ddp_top1, abs=1e-6)
