"""One normalisation per encoder: validate, test, the probe and embed on another folder use the checkpoint's
crop size, mean and std unless set, and say which."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from datamodules import ImageFolderDataModule, LinearEvalDataModule, ViewAugmentation
from ssl_app.cli.embed import main as embed_main
from ssl_app.normalisation import settle_input
from tests.helpers import cli_in

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "image_folder.yaml")
TRAINED = {"crop_size": 16, "mean": [0.5, 0.5, 0.5], "std": [0.29, 0.29, 0.29]}


def images(folder: Path, count: int, side: int, high: int, seed: int) -> Path:
    """``count`` noise PNGs of ``side`` pixels in ``folder``, levels in [0, high)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        Image.fromarray(rng.integers(0, high, (side, side, 3), dtype=np.uint8)).save(folder / f"{i:03d}.png")
    return folder


def labelled(root: Path) -> Path:
    for label in ("a", "b"):
        images(root / "train" / label, 5, 20, 90, seed=len(label))
    return root


def test_null_settings_come_from_the_checkpoint_set_ones_win_and_the_line_says_which(tmp_path):
    """Catches an evaluation re-measuring its folder, a set value overridden, or a line that hides which is which."""
    data = ImageFolderDataModule(
        str(labelled(tmp_path)), augmentation=ViewAugmentation(crop_size=12, mean=None, std=None), num_workers=0
    )
    line = settle_input(data, TRAINED, "validate")
    assert data.augmentation.mean == (0.5, 0.5, 0.5) and data.augmentation.crop_size == 12 and data.read_from_data is None
    assert line == (
        "validate: the encoder's input: mean [0.5, 0.5, 0.5], std [0.29, 0.29, 0.29] from the checkpoint; "
        "crop_size 12 set by you (the encoder was trained with crop_size 16)"
    )
    assert data.describe()["from_checkpoint"] == {"mean": [0.5, 0.5, 0.5], "std": [0.29, 0.29, 0.29]}


def test_the_probes_wrapped_image_folder_takes_them_and_a_checkpoint_without_them_is_measured(tmp_path):
    nulls = ViewAugmentation(crop_size=None, mean=None, std=None)
    probe = LinearEvalDataModule(ImageFolderDataModule(str(labelled(tmp_path)), augmentation=nulls, num_workers=0))
    assert settle_input(probe, TRAINED, "linear probe").endswith("std [0.29, 0.29, 0.29] from the checkpoint")
    assert probe.data.augmentation.crop_size == 16
    older = ImageFolderDataModule(str(tmp_path), augmentation=nulls, num_workers=0)
    assert settle_input(older, None, "test") == (
        "test: the encoder's input: crop_size and mean and std measured from this data (the checkpoint does not record them)"
    )
    assert older.augmentation.crop_size == 20 and older.read_from_data is not None


@pytest.mark.slow
def test_validate_the_probe_and_embed_on_another_folder_use_the_same_normalisation_the_checkpoints(tmp_path, caplog, capsys):
    """Catches validate or the probe re-measuring another folder (darker, larger images) while embed uses the
    checkpoint's values."""
    train = images(tmp_path / "train_images", 24, 16, 256, seed=0)
    other = tmp_path / "other_images"
    for label in ("a", "b"):  # labelled, for the probe
        images(other / "train" / label, 6, 24, 60, seed=len(label))
    tiny = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false", "--data.init_args.batch_size=4", "--data.init_args.num_workers=0",
            "--model.init_args.backbone=small_cnn", "--trainer.callbacks=[]"]  # fmt: skip
    with caplog.at_level(logging.INFO):
        cli_in(tmp_path, ["fit", "--config", CONFIG, f"--data.init_args.root={train}", *tiny])
    (run,) = (tmp_path / "runs" / "image_folder").iterdir()
    measured = json.loads((run / "run.json").read_text())["data"]["read_from_data"]
    last = run / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    cli_in(tmp_path, ["validate", "--config", CONFIG, f"--data.init_args.root={other}", f"--ckpt_path={last}", *tiny])
    said = capsys.readouterr().err
    evaluated = json.loads((run / "evaluations" / "validate_0" / "run.json").read_text())["data"]
    assert "read_from_data" not in evaluated, evaluated
    used = evaluated["from_checkpoint"]
    assert used == {key: measured[key] for key in ("crop_size", "mean", "std")}
    line = [text for text in said.splitlines() if text.startswith("validate: the encoder's input:")]
    assert len(line) == 1 and line[0].endswith("from the checkpoint") and f"mean {used['mean']}" in line[0], said
    out = io.StringIO()
    assert embed_main(["--ckpt", str(last), "--data", str(other), "--out", str(tmp_path / "f.npz")], out=out) == 0
    assert out.getvalue().splitlines()[0] == line[0].replace("validate:", "embed:")
    probe = ["fit", "--config", str(REPO / "configs" / "linear.yaml"), f"--model.init_args.checkpoint={last}",
             f"--data.init_args.data={REPO / 'configs' / 'data' / 'image_folder.yaml'}",
             f"--data.init_args.data.init_args.root={other}", "--data.init_args.data.init_args.num_workers=0",
             "--data.init_args.batch_size=8", "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false"]  # fmt: skip
    cli_in(tmp_path, probe)
    probed = json.loads((run / "evaluations" / "linear_0" / "run.json").read_text())["data"]
    assert probed["from_checkpoint"] == used and "read_from_data" not in probed
    assert line[0].replace("validate:", "linear probe:") in capsys.readouterr().err
