"""The CLI end to end: the quickstart config for a few steps, 1 and 2 processes, validate, errors."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ssl_app.cli import main
from tests.helpers import cli_in

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")

# A few optimiser steps of the quickstart on a small slice of the generated data.
TINY = [
    "--trainer.max_epochs=2",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
    "--data.init_args.train_size=128",
    "--data.init_args.val_size=64",
    "--data.init_args.test_size=64",
    "--data.init_args.batch_size=32",
]


def run_cli(args: list[str]) -> None:
    main(args)


def only_version_dir(run_root: Path) -> Path:
    versions = sorted(run_root.glob("quickstart/version_*"))
    assert len(versions) == 1, versions
    return versions[0]


def scalar_values(log_dir: Path, tag: str) -> list[float]:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return [event.value for event in events.Scalars(tag)]


def scalar_tags(log_dir: Path) -> set[str]:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return set(events.Tags()["scalars"])


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """One tiny quickstart run in a fresh directory; returns its version directory."""
    workdir = tmp_path_factory.mktemp("quickstart")
    cli_in(workdir, ["fit", "--config", QUICKSTART, *TINY])
    return only_version_dir(workdir / "runs")


@pytest.mark.slow
def test_fit_writes_checkpoints_and_tensorboard_logs(trained_run):
    checkpoints = {p.name for p in (trained_run / "checkpoints").glob("*.ckpt")}
    assert "last.ckpt" in checkpoints and len(checkpoints) >= 2, checkpoints
    assert (trained_run / "config.yaml").is_file()
    tags = scalar_tags(trained_run)
    assert {"train/loss_step", "train/loss_epoch", "val/loss", "lr"} <= tags, tags
    assert {"loss/effective_negatives", "loss/pos_sim", "loss/mean_neg_sim"} <= tags, tags


@pytest.mark.slow
def test_quickstart_logs_every_metric_tag_every_epoch(trained_run):
    events = EventAccumulator(str(trained_run), size_guidance={"scalars": 0, "histograms": 0, "images": 0})
    events.Reload()
    epochs = 2  # TINY's max_epochs
    for name in ["alignment", "uniformity", "tolerance", "pos_sim", "top10_neg_sim", "knn_acc"]:
        assert len(events.Scalars(f"metrics/{name}")) == epochs, name
    assert [event.value for event in events.Scalars("metrics/collapsed")] == [0.0]  # a flag: written when it changes
    for tag in ["similarity/positive", "similarity/top10_negative"]:
        assert len(events.Histograms(tag)) == epochs, tag
    for tag in ["similarity/positive_vs_top10_negative", "figures/uniformity_tolerance_path", "figures/singular_value_spectrum"]:
        assert len(events.Images(tag)) == epochs, tag
    assert len(events.Scalars("metrics/spectrum_alpha")) == epochs
    assert "projector_val" in (trained_run / "projector_config.pbtxt").read_text()  # EmbeddingProjector at the end of fit


@pytest.mark.slow
@pytest.mark.parametrize("subcommand", ["validate", "test"])
def test_validate_and_test_on_the_checkpoint(trained_run, subcommand, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_cli([subcommand, "--config", QUICKSTART, *TINY, f"--ckpt_path={trained_run / 'checkpoints' / 'last.ckpt'}"])
    prefix = "val" if subcommand == "validate" else "test"
    assert f"{prefix}/loss" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("augment_on", ["workers", "device"])
def test_two_processes_ddp(tmp_path, augment_on):
    """SimCLR's end-to-end 2-process run: the same config on 2 CPU processes (gloo) with only trainer
    keys changed, with the views made in the workers and on the device. Catches a DDP run that
    crashes, logs a non-finite loss or drops the metric tags."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ssl_app",
            "fit",
            "--config",
            QUICKSTART,
            *TINY,
            "--trainer.accelerator=cpu",
            "--trainer.devices=2",
            "--trainer.strategy=ddp",
            f"--data.init_args.augment_on={augment_on}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = only_version_dir(tmp_path / "runs")
    assert (run / "checkpoints" / "last.ckpt").is_file()
    losses = scalar_values(run, "train/loss_epoch")
    assert len(losses) == 2 and all(math.isfinite(value) for value in losses)  # TINY: 2 epochs
    tags = scalar_tags(run)
    assert {"loss/effective_negatives", "metrics/uniformity", "metrics/tolerance", "metrics/knn_acc"} <= tags, tags


@pytest.mark.slow
def test_fit_with_views_made_on_the_device(tmp_path, monkeypatch):
    """The quickstart with ``augment_on=device`` through the CLI: the option parses, the training
    batches are augmented after the transfer, and the loss is finite."""
    monkeypatch.chdir(tmp_path)
    run_cli(
        [
            "fit",
            "--config",
            QUICKSTART,
            *TINY,
            "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=3",
            "--data.init_args.augment_on=device",
        ]
    )
    run = only_version_dir(tmp_path / "runs")
    losses = scalar_values(run, "train/loss_step")
    assert len(losses) == 3 and all(math.isfinite(value) for value in losses)
    assert "augment_on: device" in (run / "config.yaml").read_text()


def test_print_config_shows_the_composed_config(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(["fit", "--config", QUICKSTART, "--model.init_args.loss.init_args.temperature=0.2", "--print_config"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "class_path: ssl_app.methods.SimCLR" in out and "temperature: 0.2" in out


def error_lines(args: list[str], capsys) -> list[str]:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    return [line for line in err.splitlines() if line.startswith("error:")]


def test_zero_temperature_is_one_clear_error(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = error_lines(["fit", "--config", QUICKSTART, "--model.init_args.loss.init_args.temperature=0"], capsys)
    assert len(lines) == 1 and "temperature" in lines[0] and "> 0" in lines[0], lines
    assert not (tmp_path / "runs").exists(), "nothing may be written for a rejected config"


def test_missing_config_file_is_named(capsys, tmp_path):
    missing = tmp_path / "no_such.yaml"
    lines = error_lines(["fit", "--config", str(missing)], capsys)
    assert len(lines) == 1 and str(missing) in lines[0], lines


def test_missing_image_folder_root_is_named(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "imagenet100"
    lines = error_lines(
        ["fit", "--config", QUICKSTART, "--data=datamodules.ImageFolderDataModule", f"--data.root={missing}"], capsys
    )
    assert len(lines) == 1 and str(missing) in lines[0], lines
