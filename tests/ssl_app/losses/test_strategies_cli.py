"""Every registered loss through the CLI: each of its ``examples`` parses (``--print_config``, fast),
and one end-to-end CLI fit per loss in its first example (slow); PaCo's classifier and long-tail
metrics through the CLI (slow); one 2-process DDP run per stored-candidate method (MoCo, memory
bank, slow) that checks the global keys / bank entries really reached the checkpoint. SimCLR's
2-process CLI run is ``tests/ssl_app/test_cli.py::test_two_processes_ddp``.

Every loss with every method trains in-process (``tests/ssl_app/methods/test_mixed_precision.py``,
every registered loss × method), so a CLI fit per loss *and* method would only add the configs'
parsing, which the ``--print_config`` test checks; the former loss × {MoCo, memory bank} CLI fits
were removed. Exact per-loss DDP equality (2 ranks × B = 1 rank × 2B) is proven with real gloo
ranks in ``tests/ssl_app/methods/test_*_ddp.py``; a 2-process CLI run per loss would only re-check
"exit 0, finite loss", so there is none.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
import yaml
from lightning.pytorch.cli import LightningCLI

from ssl_app.cli import main
from tests.ssl_app.cli.test_cli import (
    QUICKSTART,
    REPO,
    TINY,
    only_version_dir,
    scalar_tags,
    scalar_values,
)


def cli_value(value) -> str:
    """An option's value as the command line writes it (YAML: ``null``, ``true``, ``[1, 2]``)."""
    return value if isinstance(value, str) else json.dumps(value)


def loss_args(loss_case) -> list[str]:
    """``--model.init_args.loss=<class path>`` and the example's init args, as a user types them."""
    prefix = "--model.init_args.loss"
    options = [f"{prefix}.init_args.{key}={cli_value(value)}" for key, value in loss_case.options.items()]
    return [f"{prefix}={loss_case.entry.value}", *options]


def test_every_loss_example_parses_through_the_cli(loss_case, capsys, monkeypatch):
    """Catches a loss that the CLI cannot select by its class path or configure with its example's
    options (a constructor jsonargparse cannot read: a missing type hint, an untyped ``*args``)."""
    monkeypatch.setattr(LightningCLI, "instantiate_classes", lambda *a, **k: pytest.fail("--print_config would have run"))
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", QUICKSTART, *loss_args(loss_case), "--print_config"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, err.strip()[-1500:]
    loss = yaml.safe_load(out)["model"]["init_args"]["loss"]
    assert loss["class_path"] == loss_case.entry.value
    for option, value in loss_case.options.items():
        assert loss["init_args"][option] == value, option


@pytest.mark.slow
def test_each_loss_trains_through_the_cli(loss_first_case, tmp_path, monkeypatch):
    """Catches a loss that the CLI cannot train by class path, or that logs no diagnostics (one CLI
    fit per registered loss, in its first example)."""
    monkeypatch.chdir(tmp_path)
    cli = main(["fit", "--config", QUICKSTART, *TINY, "--trainer.max_epochs=1", *loss_args(loss_first_case)])
    assert type(cli.model.loss) is loss_first_case.target
    loss = cli.trainer.callback_metrics["train/loss_epoch"].item()
    assert math.isfinite(loss)
    tags = scalar_tags(only_version_dir(tmp_path / "runs"))
    assert {"loss/effective_negatives", "loss/pos_sim", "loss/mean_neg_sim"} <= tags


PACO = [
    "--model.init_args.loss=ssl_app.losses.PaCo",
    "--model.init_args.loss.init_args.temperature=0.1",
    "--model.init_args.loss.init_args.alpha=0.05",
    # The shapes' 128 training images of TINY: labels arange(128) % 10 → 13 of classes 0-7, 12 of 8-9.
    # (A datamodule with train_class_counts() makes class_counts unnecessary; they must then agree.)
    "--model.init_args.loss.init_args.class_counts=[13,13,13,13,13,13,13,13,12,12]",
]
SUPCON = ["--model.init_args.loss=ssl_app.losses.SupCon", "--model.init_args.loss.init_args.temperature=0.1"]


@pytest.mark.slow
def test_paco_fits_and_tests_its_classifier_through_the_cli(tmp_path, monkeypatch, capsys):
    """Catches a PaCo run whose classifier or prior does not reach the checkpoint, or that ``test``
    from the checkpoint cannot evaluate (the classifier's top-1 without the prior)."""
    monkeypatch.chdir(tmp_path)
    config = str(REPO / "configs" / "moco.yaml")
    cli = main(["fit", "--config", config, *TINY, *PACO])
    assert type(cli.model.loss).__name__ == "PaCo"
    (run,) = sorted((tmp_path / "runs").glob("moco/version_*"))
    assert {"val/classifier_top1", "loss/centre_prob"} <= scalar_tags(run)
    checkpoint = run / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert saved["state_dict"]["loss.classifier.weight"].shape == (10, cli.model.feature_dim)  # the centres live in the loss
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
@pytest.mark.slow
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
    "moco": SUPCON,
    "memory_bank": [
        "--model.init_args.loss=ssl_app.losses.HardContrastive",
        "--model.init_args.loss.init_args.quantile=0.1",
    ],
}


@pytest.mark.slow
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
