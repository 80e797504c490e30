"""The contract of ``datamodules/base.py``, checked for every datamodule in ``DATAMODULES``.

Each registered datamodule is built offline on tiny data (``OFFLINE``: generated shapes, an image
tree written with PIL, fake files in torchvision's layouts) and its loaders are checked against
what methods and callbacks rely on. A datamodule registered without a builder here fails, saying
to add one, rather than being skipped.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.io
import torch
import torchvision.datasets.cifar as tv_cifar
import torchvision.datasets.stl10 as tv_stl10
import torchvision.datasets.svhn as tv_svhn

from datamodules import (
    DATAMODULES,
    CIFAR10DataModule,
    CIFAR100DataModule,
    ContrastiveDataModule,
    ImageFolderDataModule,
    STL10DataModule,
    SVHNDataModule,
    ViewAugmentation,
)
from ssl_app.methods import METHODS
from tests.datamodules.test_image_folder import make_tree
from tests.datamodules.test_torchvision_sets import write_fake_cifar
from tests.helpers import tiny_data

BATCH = 4
#: Training views per sample of every registered method (the datamodule builds what the method reads).
METHOD_VIEWS = sorted({entry.target.train_views for entry in METHODS.values()})


def write_fake_svhn(root: Path, per_split: int = 8) -> None:
    """SVHN's ``.mat`` files: ``X`` uint8 [32, 32, 3, N] and ``y`` [N, 1] in 1..10 (10 is the digit 0)."""
    rng = np.random.default_rng(0)
    for name in ("train_32x32.mat", "test_32x32.mat"):
        images = rng.integers(0, 256, (32, 32, 3, per_split), dtype=np.uint8)
        labels = (np.arange(per_split) % 10 + 1).astype(np.uint8).reshape(-1, 1)
        scipy.io.savemat(root / name, {"X": images, "y": labels})


def write_fake_stl10(root: Path, per_split: int = 6) -> None:
    """``stl10_binary``: raw uint8 images [N, 3, 96, 96] and labels in 1..10, plus unlabelled images."""
    folder = root / "stl10_binary"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("train_X.bin", "test_X.bin", "unlabeled_X.bin"):
        rng.integers(0, 256, (per_split, 3, 96, 96), dtype=np.uint8).tofile(folder / name)
    for name in ("train_y.bin", "test_y.bin"):
        (np.arange(per_split) % 10 + 1).astype(np.uint8).tofile(folder / name)


def cifar(module: type, hundred: bool) -> Callable[[Path, pytest.MonkeyPatch], ContrastiveDataModule]:
    def build(root: Path, monkeypatch: pytest.MonkeyPatch) -> ContrastiveDataModule:
        monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)  # the md5 of the real files
        write_fake_cifar(root, hundred=hundred, per_batch=8 if hundred else 4)
        return module(root=str(root), batch_size=BATCH, num_workers=0)

    return build


def svhn(root: Path, monkeypatch: pytest.MonkeyPatch) -> ContrastiveDataModule:
    monkeypatch.setattr(tv_svhn, "check_integrity", lambda *args, **kwargs: True)
    write_fake_svhn(root)
    return SVHNDataModule(root=str(root), batch_size=BATCH, num_workers=0)


def stl10(root: Path, monkeypatch: pytest.MonkeyPatch) -> ContrastiveDataModule:
    monkeypatch.setattr(tv_stl10, "check_integrity", lambda *args, **kwargs: True)
    write_fake_stl10(root)
    # train+unlabeled (the default): labels of -1 go through every loader and count nowhere.
    return STL10DataModule(root=str(root), batch_size=BATCH, num_workers=0, augmentation=ViewAugmentation(crop_size=24))


def image_folder(root: Path, monkeypatch: pytest.MonkeyPatch) -> ContrastiveDataModule:
    make_tree(root, splits=("train", "val", "test"), classes=("cat", "dog", "owl"), per_class=3)
    return ImageFolderDataModule(str(root), batch_size=BATCH, num_workers=0, augmentation=ViewAugmentation(crop_size=16))


#: How to build each registered datamodule offline, by registered name.
OFFLINE: dict[str, Callable[[Path, pytest.MonkeyPatch], ContrastiveDataModule]] = {
    "SyntheticDataModule": lambda root, monkeypatch: tiny_data(train_size=24, val_size=10, test_size=6, batch_size=BATCH),
    "CIFAR10DataModule": cifar(CIFAR10DataModule, hundred=False),
    "CIFAR100DataModule": cifar(CIFAR100DataModule, hundred=True),
    "SVHNDataModule": svhn,
    "STL10DataModule": stl10,
    "ImageFolderDataModule": image_folder,
}


@pytest.fixture
def data(datamodule_entry, tmp_path, monkeypatch) -> ContrastiveDataModule:
    """The registered datamodule of this case (every entry of ``DATAMODULES``, read at collection:
    tests/generic.py), built on tiny offline data."""
    entry = datamodule_entry
    build = OFFLINE.get(entry.name)
    if build is None:
        pytest.fail(
            f"{entry.name} is registered in DATAMODULES but the contract test cannot build it offline: "
            f"add a builder for it to OFFLINE in {Path(__file__).name} (tiny data written under tmp_path)"
        )
    module = build(tmp_path, monkeypatch)
    assert type(module) is entry.target, f"OFFLINE[{entry.name!r}] built a {type(module).__name__}"
    return module


def attach_method(module: ContrastiveDataModule, views: int) -> None:
    """What ``train_dataloader`` reads of a Trainer: the method's ``train_views``, one process."""
    module.trainer = SimpleNamespace(lightning_module=SimpleNamespace(train_views=views), world_size=1)


def assert_views(views, count: int, size: int, crop: int, where: str) -> None:
    assert isinstance(views, (list, tuple)) and len(views) == count, f"{where}: {count} views expected"
    for view in views:
        assert view.dtype == torch.float32 and tuple(view.shape) == (size, 3, crop, crop), f"{where}: {view.dtype} {view.shape}"
        assert torch.isfinite(view).all(), f"{where}: non-finite pixels"


def assert_labels(labels, size: int, num_classes: int, where: str) -> None:
    assert labels.dtype == torch.int64 and tuple(labels.shape) == (size,), f"{where}: labels {labels.dtype} {labels.shape}"
    assert labels.min() >= -1 and labels.max() < num_classes, f"{where}: labels outside [-1, {num_classes})"


def batches(loader) -> list:
    return list(loader)


def test_the_offline_builders_are_for_registered_datamodules():
    """Catches a builder left behind for a datamodule that was renamed or unregistered (its name
    would no longer be tested under the new one)."""
    assert set(OFFLINE) <= set(DATAMODULES), f"builders for unregistered names: {sorted(set(OFFLINE) - set(DATAMODULES))}"


def test_num_classes_is_an_int_of_at_least_one(data, request):
    """Catches a ``num_classes`` that is a float, a bool or 0 (classifier heads and class counts
    are sized with it), and cases whose ids lose the registered name."""
    assert type(data).__name__ in request.node.callspec.id
    assert type(data.num_classes) is int and data.num_classes >= 1


@pytest.mark.parametrize("views", METHOD_VIEWS)
def test_train_batches_are_the_method_s_views_labels_and_unique_indices(data, views):
    """Catches a train loader that ignores the method's ``train_views``, yields uint8 or wrongly sized
    views, labels that are not int64 in ``[-1, num_classes)``, or indices repeated within an epoch
    (a memory bank would update one slot twice and leave another stale)."""
    data.setup("fit")
    attach_method(data, views)
    crop, size = data.augmentation.crop_size, data.num_samples("train")
    seen = []
    for step, (batch_views, labels, indices) in enumerate(batches(data.train_dataloader())):
        where = f"{type(data).__name__} train batch {step}"
        assert_views(batch_views, views, BATCH, crop, where)
        assert_labels(labels, BATCH, data.num_classes, where)
        assert indices.dtype == torch.int64 and tuple(indices.shape) == (BATCH,), where
        seen.append(indices)
    indices = torch.cat(seen)
    assert len(indices) == size // BATCH * BATCH  # drop_last: every full batch, nothing more
    assert indices.unique().numel() == indices.numel(), "an index repeats within one epoch"
    assert indices.min() >= 0 and indices.max() < size


@pytest.mark.parametrize("split", ["val", "test"])
def test_evaluation_loaders_are_deterministic_and_in_order(data, split):
    """Catches evaluation views drawn from the global RNG (metrics that change between two
    validations of the same weights) or a shuffled or truncated evaluation split."""
    data.setup(None)
    loader = getattr(data, f"{split}_dataloader")
    first, second = batches(loader()), batches(loader())
    size = data.num_samples(split)
    assert len(first) == len(second)
    for (views_a, labels_a, indices_a), (views_b, labels_b, indices_b) in zip(first, second):
        assert all(torch.equal(a, b) for a, b in zip(views_a, views_b)), f"{split} views differ between two passes"
        assert torch.equal(labels_a, labels_b) and torch.equal(indices_a, indices_b)
        assert_views(views_a, 2, len(labels_a), data.augmentation.crop_size, f"{type(data).__name__} {split}")
        assert_labels(labels_a, len(labels_a), data.num_classes, f"{type(data).__name__} {split}")
    assert torch.equal(torch.cat([indices for _, _, indices in first]), torch.arange(size))


def test_embedding_and_classification_loaders_cover_each_split_in_order(data):
    """Catches callback loaders of the wrong shape (views per sample, crop size: also the q views LiDAR asks for),
    or that drop, repeat or reorder samples (kNN features would be matched to the wrong labels)."""
    data.setup(None)
    crop, name = data.augmentation.crop_size, type(data).__name__
    for split, views, augment in (("train", 1, False), ("val", 2, True), ("val", 3, True), ("test", 1, False)):
        size = data.num_samples(split)
        found = batches(data.embedding_dataloader(split, views=views, augment=augment, batch_size=3))
        for batch_views, labels, _ in found:
            assert_views(batch_views, views, len(labels), crop, f"{name} embedding {split}")
            assert_labels(labels, len(labels), data.num_classes, f"{name} embedding {split}")
        assert torch.equal(torch.cat([indices for _, _, indices in found]), torch.arange(size))
        images_and_labels = batches(data.classification_dataloader(split, batch_size=3))
        for images, labels in images_and_labels:
            assert images.dtype == torch.float32 and tuple(images.shape) == (len(labels), 3, crop, crop)
            assert_labels(labels, len(labels), data.num_classes, f"{name} classification {split}")
        assert sum(len(labels) for _, labels in images_and_labels) == size
        assert torch.equal(torch.cat([labels for _, labels, _ in found]), torch.cat([labels for _, labels in images_and_labels]))


def test_train_class_counts_are_the_labelled_train_split(data):
    """Catches class counts that include unlabelled images (-1), miss a class, or disagree with the
    labels the loaders yield (PaCo's prior and the long-tail groups are built from them)."""
    counts = data.train_class_counts()
    labels = torch.cat([labels for _, labels in batches(data.classification_dataloader("train", batch_size=5))])
    assert len(counts) == data.num_classes and all(type(count) is int for count in counts)
    assert counts == [int((labels == c).sum()) for c in range(data.num_classes)]
    assert sum(counts) == int((labels >= 0).sum())


def test_describe_names_the_class_and_the_split_sizes(data):
    """Catches a run record whose class path does not import back to the datamodule, or whose
    split sizes are not those of the data the run read."""
    data.setup(None)
    info = data.describe()
    module, _, name = info["class_path"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is type(data)
    assert info["split_sizes"] == {split: data.num_samples(split) for split in ("train", "val", "test")}
    assert info["num_classes"] == data.num_classes
