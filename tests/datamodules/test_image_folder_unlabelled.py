"""A user's own images: flat or nested folders without classes, no val/ folder, crop size and statistics read from the data."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import ImageFolderDataModule, LinearEvalDataModule, SyntheticDataModule, ViewAugmentation
from datamodules.image_stats import measure_images, sample_indices
from ssl_app.errors import ConfigError
from tests.helpers import cli_in
from tests.ssl_app.cli.test_cli import scalar_tags

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "image_folder.yaml")
FIXED = ViewAugmentation(crop_size=8)


def write_images(folder: Path, count: int, size: tuple[int, int] = (16, 16), seed: int = 0) -> list[Path]:
    """``count`` noise PNGs of ``size`` (width, height) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        path = folder / f"img{seed}_{i:03d}.png"
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def folder_module(root: Path, **kwargs) -> ImageFolderDataModule:
    return ImageFolderDataModule(str(root), **{"batch_size": 4, "num_workers": 0, "augmentation": FIXED, **kwargs})


def test_a_flat_folder_is_one_pool_of_unlabelled_images_split_for_evaluation(tmp_path):
    """Catches a flat folder refused for lacking class folders, images given a class, or an
    evaluation split that overlaps the training images, drops some, or moves between two builds."""
    images = {str(p) for p in write_images(tmp_path, 30)}
    seen = []
    for _ in range(2):
        data = folder_module(tmp_path)
        data.setup("fit")
        seen.append({split: [path for path, _ in data.dataset(split).samples] for split in ("train", "val", "test")})
    assert seen[0] == seen[1]
    train, val = seen[0]["train"], seen[0]["val"]
    assert (len(train), len(val)) == (27, 3) and not set(train) & set(val) and set(train) | set(val) == images
    assert seen[0]["test"] == val  # no test folder: the evaluation split
    assert not data.labelled and data.num_classes == 0 and data.train_class_counts() == []
    _, labels, _ = next(iter(data.val_dataloader()))
    assert labels.tolist() == [-1, -1, -1]
    assert data.describe()["labels"] == "none" and data.describe()["val_held_out"]["seed"] == 0


def test_nested_folders_without_a_train_folder_are_unlabelled_at_any_depth(tmp_path):
    """Catches sub-folders of a photo collection (by date, by camera) taken as classes, or images
    below the first level left out."""
    write_images(tmp_path / "2023" / "june", 6, seed=1)
    write_images(tmp_path / "2024", 4, seed=2)
    data = folder_module(tmp_path, val_fraction=0.2)
    assert not data.labelled
    assert data.num_samples("train") + data.num_samples("val") == 10


def test_images_directly_in_train_make_it_unlabelled_unless_folders_are_asked_for(tmp_path):
    """Catches ``auto`` reading a train folder of loose images as labelled, and ``labels: folders``
    accepting a folder without class folders (it would train with no image)."""
    write_images(tmp_path / "train", 6)
    write_images(tmp_path / "val", 2, seed=3)
    data = folder_module(tmp_path)
    assert not data.labelled and data.num_samples("val") == 2  # the val folder is the evaluation split
    with pytest.raises(ConfigError, match="no class folders in .*train.*labels: none reads images without classes"):
        folder_module(tmp_path, labels="folders")


def test_labels_none_ignores_class_folders(tmp_path):
    """Catches ``labels: none`` still labelling by folder (the metrics would compare meaningless groups)."""
    write_images(tmp_path / "train" / "a", 4)
    write_images(tmp_path / "train" / "b", 4, seed=1)
    assert folder_module(tmp_path).labelled  # auto: class folders
    data = folder_module(tmp_path, labels="none")
    assert not data.labelled and set(data.dataset("train").targets) == {-1}


def test_too_few_images_or_a_bad_setting_is_one_clear_error(tmp_path):
    """Catches a one-image folder reaching training with an empty split, and bad split settings
    accepted silently."""
    write_images(tmp_path, 1)
    with pytest.raises(ConfigError, match="1 image\\(s\\) in .* and no val folder: need at least 2"):
        folder_module(tmp_path).setup("fit")
    for bad in ({"val_fraction": 0}, {"val_fraction": 1.0}, {"labels": "maybe"}):
        with pytest.raises(ConfigError, match="ImageFolderDataModule: (val_fraction|labels)"):
            folder_module(tmp_path, **bad)


def test_an_empty_folder_names_it(tmp_path):
    """Catches a folder without images failing later with an index error instead of naming the folder."""
    (tmp_path / "notes.txt").write_text("no images")
    with pytest.raises(ConfigError, match=f"no image files in '{tmp_path}'"):
        folder_module(tmp_path).setup("fit")


# --- crop size and statistics read from the data --------------------------------------------------


def test_null_crop_and_statistics_are_read_from_the_images_and_set_values_win(tmp_path, caplog):
    """Catches small images upscaled to 224 with ImageNet's statistics when the config leaves them
    to the data, a set value overridden, or the values missing from the run record."""
    for i, colour in enumerate([(255, 0, 0), (0, 0, 255)]):
        for j in range(4):
            Image.new("RGB", (40, 30 + j), colour).save(tmp_path / f"{i}_{j}.png")
    unset = ViewAugmentation(crop_size=None, mean=None, std=None)
    with caplog.at_level(logging.INFO):
        data = folder_module(tmp_path, augmentation=unset)
        data.setup("fit")
    augmentation = data.augmentation
    # The 7 training images (one of the 8 is held out for evaluation): the median of their shorter sides.
    training = [path for path, _ in data.dataset("train").samples]
    sides = sorted(Image.open(path).size[1] for path in training)
    assert len(training) == 7 and augmentation.crop_size == sides[3]
    expected = measure_images(training)
    assert augmentation.mean == expected.mean and augmentation.std == expected.std
    assert augmentation.std[1] == pytest.approx(1e-3) and augmentation.mean[1] == 0.0
    assert f"read from 7 of 7 training images (seed 0): crop_size {sides[3]}" in caplog.text
    assert data.describe()["read_from_data"] == {
        "images": 7, "crop_size": sides[3], "mean": list(expected.mean), "std": list(expected.std)
    }  # fmt: skip
    views, _, _ = next(iter(data.val_dataloader()))
    assert views[0].shape[-2:] == (sides[3], sides[3])
    partly = folder_module(tmp_path, augmentation=ViewAugmentation(crop_size=12, mean=None, std=None))
    assert partly.augmentation.crop_size == 12 and partly.augmentation.mean == expected.mean
    assert set(partly.describe()["read_from_data"]) == {"images", "mean", "std"}


def test_the_sample_is_seeded_and_capped():
    """Catches a sample drawn from the global RNG (DDP ranks would normalise differently) or one
    that reads every image of a large folder."""
    assert sample_indices(1000, 5, seed=3) == sample_indices(1000, 5, seed=3) != sample_indices(1000, 5, seed=4)
    assert len(set(sample_indices(1000, 5, seed=3))) == 5 and sample_indices(4, 5, seed=0) == [0, 1, 2, 3]


def test_statistics_of_large_images_come_from_thumbnails_and_the_crop_is_capped(tmp_path):
    """Catches a crop of a photo's full size (a 600-px crop per view) and wrong statistics from the thumbnail."""
    path = tmp_path / "big.png"
    Image.new("RGB", (800, 600), (51, 102, 153)).save(path)
    stats = measure_images([str(path)])
    assert stats.crop_size == 224 and stats.mean == pytest.approx((0.2, 0.4, 0.6), abs=1e-3)


def test_other_datamodules_refuse_statistics_left_to_the_data():
    """Catches a null crop size reaching a datamodule that cannot read it (a crash in the first batch)."""
    with pytest.raises(ConfigError, match="SyntheticDataModule: augmentation.crop_size is null .* only ImageFolderDataModule"):
        SyntheticDataModule(augmentation=ViewAugmentation(crop_size=None))


def test_a_linear_probe_of_an_unlabelled_folder_is_one_error_saying_the_labels_setting_as_configured(tmp_path):
    """Catches a probe set up on images without classes (it would learn nothing and report 0), and a
    line that says "labels: none" when the config says auto (the skip lines of the metrics read the same)."""
    write_images(tmp_path, 8)
    said = "ImageFolderDataModule has no labels \\(labels: auto, resolved to none: no 'train' folder in '.*'\\); a linear probe"
    with pytest.raises(ConfigError, match=said):
        LinearEvalDataModule(folder_module(tmp_path)).setup("fit")
    with pytest.raises(ConfigError, match="ImageFolderDataModule has no labels \\(labels: none\\); a linear probe needs"):
        LinearEvalDataModule(folder_module(tmp_path, labels="none")).setup("fit")


# --- end to end -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_flat_folder_trains_through_the_config_with_only_its_root(tmp_path, caplog):
    """Catches the shipped config refusing a flat folder, crashing in a label-needing metric,
    skipping the label-free ones, not saying what was skipped, or logging under another run's name."""
    images = tmp_path / "photos"
    write_images(images, 24)
    tiny = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.enable_progress_bar=false",
            "--data.init_args.batch_size=4", "--data.init_args.num_workers=0"]  # fmt: skip
    with caplog.at_level(logging.INFO):
        cli_in(tmp_path, ["fit", "--config", CONFIG, f"--data.init_args.root={images}", *tiny])
    runs = sorted((tmp_path / "runs").glob("*/version_*"))
    assert [run.relative_to(tmp_path / "runs").as_posix() for run in runs] == ["image_folder/version_0"]
    tags = scalar_tags(runs[0])
    assert {"metrics/alignment", "metrics/uniformity", "metrics/effective_rank"} <= tags, tags
    assert not {"metrics/tolerance", "metrics/knn_acc"} & tags
    for line in ("EmbeddingMetrics: metrics/tolerance skipped", "KNNMonitor: metrics/knn_acc skipped", "crop_size 16"):
        assert caplog.text.count(line) == 1, line
    assert "has no labels (labels: auto, resolved to none: no 'train' folder in" in caplog.text
    assert torch.load(runs[0] / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 2
    # The trained encoder out: the crop size and normalisation the run read from its data travel
    # with the checkpoint (the config holds null), so export says them and embed uses them.
    from ssl_app.cli.embed import main as embed_main
    from ssl_app.cli.export import main as export_main

    checkpoint = runs[0] / "checkpoints" / "last.ckpt"
    measured = json.loads((runs[0] / "run.json").read_text())["data"]["read_from_data"]
    assert export_main(["--ckpt", str(checkpoint), "--out", str(tmp_path / "encoder.pt")]) == 0
    shown = torch.load(tmp_path / "encoder.pt", weights_only=True)["meta"]["input"]
    assert shown["crop_size"] == measured["crop_size"] == 16
    assert shown["mean"] == pytest.approx(measured["mean"]) and shown["std"] == pytest.approx(measured["std"])
    assert embed_main(["--ckpt", str(checkpoint), "--data", str(images), "--out", str(tmp_path / "f.npz")]) == 0
    with np.load(tmp_path / "f.npz") as saved:
        assert saved["features"].shape[0] == 24 and (saved["labels"] == -1).all()
