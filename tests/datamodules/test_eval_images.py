"""Evaluation images on the module's device (``eval_on``), the inference batch size
(``eval_batch_size``), and the validation views made on the device with ``augment_on: device``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader

from datamodules import SyntheticDataModule, eval_images
from datamodules.augment import ViewAugmentation
from datamodules.base import EVALUATION_EPOCH
from datamodules.eval_images import EvalCrop, resolve_eval_batch_size
from datamodules.synthetic import SYNTHETIC_MEAN, SYNTHETIC_STD
from ssl_app.errors import ConfigError

CPU = torch.device("cpu")


def shapes(**overrides) -> SyntheticDataModule:
    options = dict(num_classes=3, train_size=30, val_size=21, test_size=10, image_size=8, batch_size=4, num_workers=0)
    options["augmentation"] = ViewAugmentation(crop_size=8, mean=SYNTHETIC_MEAN, std=SYNTHETIC_STD)
    return SyntheticDataModule(**{**options, **overrides})


# A resize and a crop that are not the identity: 12 px images, resized to 10, centre-cropped to 8.
RESIZING = ViewAugmentation(crop_size=8, eval_crop_fraction=0.8, mean=SYNTHETIC_MEAN, std=SYNTHETIC_STD)
RESIZED = dict(image_size=12, augmentation=RESIZING)


def loader_shard(data, split, rank, world_size, limit=None):
    views, labels, indices = zip(*data.embedding_dataloader(split, batch_size=5, rank=rank, world_size=world_size))
    images, labels, indices = torch.cat([v[0] for v in views]), torch.cat(labels), torch.cat(indices)
    keep = indices < (limit if limit is not None else len(data.dataset(split)))
    return images[keep], labels[keep], indices[keep]


@pytest.mark.parametrize("options", [{}, RESIZED], ids=["crop-sized", "resized"])
def test_device_images_are_the_embedding_loaders_images_for_every_shard(options):
    """Catches the device path normalising, resizing or cropping otherwise than the eval pipeline
    (a step missing or doubled), other rows in a shard, or labels and indices out of step."""
    data = shapes(eval_on="device", **options)
    kept = data.eval_images("val", CPU)
    assert kept.images.dtype == torch.uint8 and kept.images.shape == (21, 3, 8, 8)
    for world_size, rank, limit in ((1, 0, None), (2, 0, None), (2, 1, None), (3, 2, 17)):
        images, labels, indices = zip(*kept.batches(4, rank, world_size, limit=limit))
        expected = loader_shard(data, "val", rank, world_size, limit)
        assert torch.equal(torch.cat(indices), expected[2])
        assert torch.equal(torch.cat(labels), expected[1])
        assert torch.equal(torch.cat(images), expected[0])  # the same operations: bit for bit
    chosen = torch.tensor([20, 3, 7])
    images, labels = kept.select(chosen)
    full = loader_shard(data, "val", 0, 1)
    assert torch.equal(images, full[0][chosen]) and torch.equal(labels, full[1][chosen])


def test_the_crop_shortcut_gives_the_pipelines_pixels():
    """Catches the shortcut for images already crop-sized returning other pixels than the eval
    pipeline's resize and crop (or taking it for images that need them)."""
    for options in ({}, RESIZED):
        data = shapes(**options)
        crop, pipeline = EvalCrop(data.augmentation), data.augmentation.eval_crop_transform()
        for index in range(5):
            image, _ = data.dataset("train")[index]
            assert torch.equal(crop(image), pipeline(image))
    assert EvalCrop(shapes().augmentation).identity and not EvalCrop(RESIZED["augmentation"]).identity


def test_the_eval_pipeline_is_its_two_halves():
    augmentation = RESIZED["augmentation"]
    image, _ = shapes(**RESIZED).dataset("val")[0]
    halves = augmentation.eval_normalise_transform()(augmentation.eval_crop_transform()(image))
    assert torch.equal(halves, augmentation.eval_transform()(image))


def test_auto_keeps_a_split_that_fits_a_quarter_of_the_free_memory(monkeypatch):
    """Catches ``auto`` keeping a split whatever its size, never keeping one, or ``workers``/``device``
    not being obeyed. The val split is 21 images of 3 × 8 × 8 bytes = 4,032 bytes."""
    loads = []
    original = eval_images.load_eval_images
    monkeypatch.setattr(eval_images, "load_eval_images", lambda *a, **k: loads.append(1) or original(*a, **k))
    for free, eval_on, kept in ((4 * 4032, "auto", True), (4 * 4032 - 4, "auto", False), (0, "device", True),
                                (10**12, "workers", False), (None, "auto", False)):  # fmt: skip
        monkeypatch.setattr(eval_images, "free_memory", lambda device, free=free: free)
        data = shapes(eval_on=eval_on)
        assert (data.eval_images("val", CPU) is not None) is kept, (free, eval_on)
        assert (data.eval_images("val", CPU) is not None) is kept  # decided once
    assert len(loads) == 2  # built once per datamodule that keeps it


def test_the_kept_split_is_rebuilt_for_another_augmentation():
    """Catches a split kept with the crop size and statistics it was first built with after they
    changed (an image folder reads them from its data at setup)."""
    data = shapes(eval_on="device")
    first = data.eval_images("val", CPU)
    assert data.eval_images("val", CPU) is first
    data.augmentation = ViewAugmentation(crop_size=6, mean=SYNTHETIC_MEAN, std=SYNTHETIC_STD)
    second = data.eval_images("val", CPU)
    assert second is not first and second.images.shape[-1] == 6


def test_the_auto_batch_size_keeps_the_cpus_and_grows_with_free_memory_on_an_accelerator(monkeypatch):
    """Catches ``auto`` changing the CPU's batch size (larger batches are not faster there), not
    growing on a GPU, ignoring the image size or the free memory, or going below ``batch_size``."""
    cuda = torch.device("cuda")
    assert resolve_eval_batch_size("auto", 128, 32, CPU) == 128
    assert resolve_eval_batch_size(300, 128, 32, cuda) == 300
    monkeypatch.setattr(eval_images, "free_memory", lambda device: 100 * 2**30)
    assert resolve_eval_batch_size("auto", 128, 32, cuda) == 8192
    assert resolve_eval_batch_size("auto", 128, 96, cuda) == 512
    assert resolve_eval_batch_size("auto", 128, 224, cuda) == 128  # 2^23 / 224² = 167 → 128
    assert resolve_eval_batch_size("auto", 256, 224, cuda) == 256  # never below the training batch
    monkeypatch.setattr(eval_images, "free_memory", lambda device: 2**30)  # 1 GiB free: 256 MiB of activations
    assert resolve_eval_batch_size("auto", 64, 32, cuda) == 256
    assert shapes(eval_batch_size=100).inference_batch_size(cuda) == 100


@pytest.mark.parametrize(
    "options,match",
    [({"eval_on": "gpu"}, "eval_on must be one of"), ({"eval_batch_size": 0}, "eval_batch_size must be"),
     ({"eval_batch_size": True}, "eval_batch_size must be"), ({"eval_batch_size": "max"}, "eval_batch_size must be"),
     ({"val_batch_size": 0}, "val_batch_size must be"), ({"val_batch_size": "auto"}, "val_batch_size must be")],
)  # fmt: skip
def test_bad_evaluation_options_are_one_config_error(options, match):
    with pytest.raises(ConfigError, match=f"SyntheticDataModule: {match}"):
        shapes(**options)


@pytest.mark.parametrize("augment_on", ["workers", "device"])
def test_the_validation_loop_takes_val_batch_size_and_the_same_views(augment_on):
    """Catches the validation and test loops ignoring ``val_batch_size`` (the memory bank's 79 batches of
    128 were half of its evaluation on an H200), or views that change with the batch they come in."""
    small, large = shapes(augment_on=augment_on), shapes(augment_on=augment_on, val_batch_size=16)
    assert small.val_dataloader().batch_size == small.test_dataloader().batch_size == 4  # batch_size by default
    assert large.val_dataloader().batch_size == large.test_dataloader().batch_size == 16
    assert large.train_dataloader().batch_size == 4  # training keeps batch_size
    if augment_on == "device":
        indices = torch.arange(16)
        expected = torch.cat([evaluation_views(small, indices[start : start + 4])[0] for start in range(0, 16, 4)])
        assert torch.equal(evaluation_views(large, indices)[0], expected)
    else:
        (first, *_), _, _ = next(iter(large.val_dataloader()))
        expected = torch.cat([batch[0][0] for batch in list(small.val_dataloader())[:4]])
        assert torch.equal(first, expected)


def evaluation_views(data, indices: torch.Tensor) -> list[torch.Tensor]:
    """What ``on_after_batch_transfer`` makes of a validation batch of the samples ``indices``."""
    data.trainer = SimpleNamespace(training=False)
    loader = data.val_dataloader()
    views, _, found = data.on_after_batch_transfer(loader.collate_fn([loader.dataset[int(i)] for i in indices]), 0)
    assert torch.equal(found, indices)
    return views


def test_validation_views_on_the_device_are_a_fixed_function_of_the_index():
    """Catches ``augment_on: device`` validation views that depend on the batch they come in (the RNG
    state, a batch-wide draw) or on the process, views that are not two normalised float crops,
    or keys shared with training views."""
    data = shapes(augment_on="device")
    batch = next(iter(data.val_dataloader()))
    assert batch[0].dtype == torch.uint8  # the workers only load the images
    torch.manual_seed(1)
    first = evaluation_views(data, torch.arange(0, 8))
    torch.manual_seed(2)
    second = evaluation_views(data, torch.arange(4, 12))
    assert len(first) == 2 and first[0].dtype == torch.float32 and first[0].shape == (8, 3, 8, 8)
    assert not torch.equal(first[0], first[1])
    for view in range(2):
        torch.testing.assert_close(first[view][4:], second[view][:4], atol=0, rtol=0)
    keys = data.evaluation_view_keys(torch.arange(3))
    assert (keys.seed, keys.epoch) == (data.val_seed, EVALUATION_EPOCH) and keys.index.tolist() == [0, 1, 2]


def test_validation_images_of_many_sizes_keep_their_views_in_the_workers():
    """Catches the device validation views refusing (or mis-stacking) a split whose images differ in size."""
    data = shapes(augment_on="device")
    mixed = [(torch.zeros(3, 8 + i % 2, 8, dtype=torch.uint8), 0) for i in range(6)]
    data._datasets["val"] = mixed
    views, _, _ = next(iter(data.val_dataloader()))
    assert isinstance(views, list) and views[0].dtype == torch.float32  # made in the workers


def test_the_array_path_keeps_what_the_per_image_path_keeps(monkeypatch):
    """Catches the one-indexing shortcut for data held in a uint8 array (CIFAR, SVHN, the shapes)
    keeping other pixels, another layout, order or labels than reading image by image."""
    loads = []
    monkeypatch.setattr(eval_images, "DataLoader", lambda *a, **k: loads.append(1) or DataLoader(*a, **k))
    for split in ("train", "val"):
        from_array = shapes(eval_on="device", imbalance_factor=2.0).eval_images(split, CPU)
        assert not loads  # the array, no loader
        monkeypatch.setattr(eval_images, "pixel_array", lambda data: None)
        per_image = shapes(eval_on="device", imbalance_factor=2.0).eval_images(split, CPU)
        monkeypatch.undo()
        monkeypatch.setattr(eval_images, "DataLoader", lambda *a, **k: loads.append(1) or DataLoader(*a, **k))
        assert loads and torch.equal(from_array.images, per_image.images) and torch.equal(from_array.labels, per_image.labels)
        assert from_array.images.is_contiguous()
        loads.clear()
