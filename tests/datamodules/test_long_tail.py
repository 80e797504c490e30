"""Long-tailed train splits: LDAM's counts, a seeded subset, train_class_counts of every datamodule, errors."""

from __future__ import annotations

import json
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torchvision.datasets.cifar as tv_cifar
from PIL import Image

from datamodules import CIFAR10DataModule, CIFAR100DataModule, ImageFolderDataModule, LinearEvalDataModule, ViewAugmentation
from datamodules.long_tail import dataset_targets, exponential_profile, long_tailed_indices
from datamodules.synthetic import ShapesDataset
from ssl_app.errors import ConfigError
from tests.helpers import tiny_data

# --- the profile: Cao et al.'s (LDAM) exact counts ---------------------------------------------


def test_the_profile_reproduces_ldams_cifar_counts():
    cifar100 = exponential_profile(500, 100, 100)
    assert (cifar100[0], cifar100[-1], sum(cifar100)) == (500, 5, 10847)
    cifar10 = exponential_profile(5000, 10, 100)
    assert cifar10 == [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50] and sum(cifar10) == 12406
    assert sum(exponential_profile(500, 100, 10)) == 19573  # CIFAR-100-LT at IF = 10, as published
    assert exponential_profile(500, 100, 1) == [500] * 100 and exponential_profile(7, 1, 50) == [7]


def test_the_subset_has_the_profiles_counts_on_cifar100_sized_labels():
    labels = torch.arange(50_000) % 100  # CIFAR-100's train split: 500 per class
    keep = long_tailed_indices(labels, 100, 100.0, seed=0, who="test")
    assert len(keep) == 10847 and len(set(keep)) == len(keep) and keep == sorted(keep)
    assert torch.bincount(labels[keep], minlength=100).tolist() == exponential_profile(500, 100, 100)


def test_the_subset_is_ldams_seeded_choice():
    """The same images as LDAM's recipe (per class in order: shuffle with the seeded global
    numpy generator, keep the first n_c), written out here as a plain loop."""
    labels = torch.arange(1000) % 10
    np.random.seed(3)
    expected = []
    for c, n in enumerate(exponential_profile(100, 10, 20)):
        members = np.where(labels.numpy() == c)[0]
        np.random.shuffle(members)
        expected += members[:n].tolist()
    assert long_tailed_indices(labels, 10, 20.0, seed=3, who="test") == sorted(expected)


def test_the_seed_fixes_the_subset_and_another_seed_changes_it():
    labels = torch.arange(2000) % 10
    first = long_tailed_indices(labels, 10, 10.0, seed=0, who="test")
    assert long_tailed_indices(labels, 10, 10.0, seed=0, who="test") == first
    other = long_tailed_indices(labels, 10, 10.0, seed=1, who="test")
    assert other != first and torch.equal(torch.bincount(labels[other]), torch.bincount(labels[first]))


def test_a_class_with_fewer_images_than_the_profile_keeps_all_it_has():
    labels = torch.tensor([0] * 50 + [1] * 3 + [2] * 40)  # the profile asks 50, 22, 10
    keep = long_tailed_indices(labels, 3, 5.0, seed=0, who="test")
    assert torch.bincount(labels[keep]).tolist() == [50, 3, 10]


def test_dataset_targets_reads_label_lists_and_follows_subsets():
    shapes = ShapesDataset(torch.zeros(5, 3, 8, 8, dtype=torch.uint8), torch.tensor([2, 0, 1, 1, 0]))
    assert dataset_targets(shapes).tolist() == [2, 0, 1, 1, 0]
    assert dataset_targets(torch.utils.data.Subset(shapes, [4, 0])).tolist() == [0, 2]

    class NoLists(torch.utils.data.Dataset):  # read item by item; None is unlabelled
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return None, [1, None, 0][i]

    assert dataset_targets(NoLists()).tolist() == [1, -1, 0]


def test_train_class_counts_read_numpy_label_arrays_without_their_unlabelled_images():
    """SVHN and STL-10 keep ``labels`` as numpy arrays; STL-10's unlabelled images are -1."""
    data = tiny_data(num_classes=3)
    data._datasets["train"] = type(
        "STLLike", (torch.utils.data.Dataset,), {"labels": np.array([2, -1, -1, 0, 2]), "__len__": lambda self: 5}
    )()
    assert data.train_class_counts() == [1, 0, 2]


# --- the datamodules ----------------------------------------------------------------------------


def test_synthetic_long_tailed_train_split_and_balanced_eval_splits(caplog):
    data = tiny_data(num_classes=3, train_size=60, imbalance_factor=4)  # 20 per class → 20, 10, 5
    data.setup("fit")
    assert data.train_class_counts() == [20, 10, 5] and data.num_samples("train") == 35
    labels = [data.dataset("train")[i][1] for i in range(35)]
    assert [labels.count(c) for c in range(3)] == [20, 10, 5]  # the served images, not only the count
    assert data.num_samples("val") == 16 and data.num_samples("test") == 16  # untouched
    assert "3 classes, imbalance_factor 4 (seed 0): 20 … 5 images per class, 35 in total" in caplog.text


def test_imbalance_factor_one_is_the_balanced_set():
    balanced, same = tiny_data(train_size=48), tiny_data(train_size=48, imbalance_factor=1.0, imbalance_seed=9)
    assert same.dataset("train") is not None and type(same.dataset("train")) is type(balanced.dataset("train"))
    assert same.train_class_counts() == balanced.train_class_counts() == [16, 16, 16]
    assert torch.equal(dataset_targets(same.dataset("train")), dataset_targets(balanced.dataset("train")))


def test_train_class_counts_of_a_labelled_and_an_unlabelled_split():
    data = tiny_data(train_size=49)  # 17, 16, 16
    assert data.train_class_counts() == [17, 16, 16]
    data._datasets["train"] = ShapesDataset(torch.zeros(4, 3, 8, 8, dtype=torch.uint8), torch.tensor([-1, 0, -1, 2]))
    data._train_counts = None
    assert data.train_class_counts() == [1, 0, 1]  # -1 is not counted


def write_fake_cifar(root, hundred: bool, per_class: int) -> None:
    """torchvision's CIFAR layout with ``per_class`` training images of every class (4 test images)."""
    rng = np.random.default_rng(0)
    classes = 100 if hundred else 10
    folder = root / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    folder.mkdir(parents=True)
    key = "fine_labels" if hundred else "labels"
    train = ["train"] if hundred else [f"data_batch_{i}" for i in range(1, 6)]
    rows = classes * per_class // len(train)
    for index, name in enumerate(train):
        labels = [(index * rows + i) % classes for i in range(rows)]
        with open(folder / name, "wb") as f:
            pickle.dump({"data": rng.integers(0, 256, (rows, 3072), dtype=np.uint8), key: labels}, f)
    with open(folder / ("test" if hundred else "test_batch"), "wb") as f:
        pickle.dump({"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), key: [0, 1, 2, 3]}, f)
    with open(folder / ("meta" if hundred else "batches.meta"), "wb") as f:
        names = [f"class{i}" for i in range(classes)]
        pickle.dump({"fine_label_names": names} if hundred else {"label_names": names}, f)


@pytest.mark.parametrize("module,per_class,factor", [(CIFAR10DataModule, 20, 10.0), (CIFAR100DataModule, 10, 10.0)])
def test_cifar_train_class_counts_follow_the_profile(module, per_class, factor, tmp_path, monkeypatch):
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)
    write_fake_cifar(tmp_path, hundred=module is CIFAR100DataModule, per_class=per_class)
    classes = 100 if module is CIFAR100DataModule else 10
    balanced = module(root=str(tmp_path), num_workers=0)
    assert balanced.train_class_counts() == [per_class] * classes
    data = module(root=str(tmp_path), num_workers=0, imbalance_factor=factor)
    data.setup("fit")
    expected = exponential_profile(per_class, classes, factor)
    assert data.train_class_counts() == expected and data.num_samples("train") == sum(expected)
    assert data.num_samples("val") == 4  # the test set stays whole


def image_tree(root, per_class: dict[str, int]):
    for split in ("train", "val"):
        for k, (name, count) in enumerate(per_class.items()):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count if split == "train" else 2):
                Image.new("RGB", (12, 12), (40 * k, 10 * i, 90)).save(folder / f"{i}.png")
    return root


def test_image_folder_train_class_counts_balanced_and_long_tailed(tmp_path):
    root = image_tree(tmp_path, {"ant": 12, "bee": 12, "cat": 9})
    common = dict(batch_size=2, num_workers=0, augmentation=ViewAugmentation(crop_size=8))
    assert ImageFolderDataModule(str(root), **common).train_class_counts() == [12, 12, 9]
    data = ImageFolderDataModule(str(root), imbalance_factor=4, **common)  # profile 12, 6, 3
    assert data.train_class_counts() == [12, 6, 3]
    assert sorted({label for _, label in data.dataset("train")}) == [0, 1, 2]


def test_linear_eval_reports_the_wrapped_long_tailed_counts():
    shapes = tiny_data(num_classes=3, train_size=60, imbalance_factor=4)
    probe_data = LinearEvalDataModule(shapes, val_fraction=0.2, batch_size=4)
    assert probe_data.train_class_counts() == [20, 10, 5] and probe_data.classification_split == "test"
    assert shapes.classification_split == "val"


def test_classification_dataloader_shards_cover_the_split_once():
    data = tiny_data(test_size=15)
    whole = torch.cat([labels for _, labels in data.classification_dataloader("test")])
    images, _ = next(iter(data.classification_dataloader("test", batch_size=4)))
    assert images.shape == (4, 3, 8, 8) and images.dtype == torch.float32
    clean = data.augmentation.eval_transform()  # clean images, not the augmented views of the val loop
    assert torch.equal(images[3], clean(data.dataset("test")[3][0]))
    shards = [torch.cat([y for _, y in data.classification_dataloader("test", rank=r, world_size=2)]) for r in range(2)]
    assert len(shards[0]) + len(shards[1]) == 15  # 8 + 7: no padding, no repeat
    assert torch.equal(torch.stack([whole[0::2].sum(), whole[1::2].sum()]), torch.stack([s.sum() for s in shards]))


# --- class_counts.json beside the run -----------------------------------------------------------


def fake_trainer(log_dir, rank_zero=True):
    return SimpleNamespace(logger=SimpleNamespace(log_dir=str(log_dir)), is_global_zero=rank_zero)


def test_the_counts_are_saved_beside_the_run_by_rank_zero_only(tmp_path):
    data = tiny_data(num_classes=3, train_size=60, imbalance_factor=4, imbalance_seed=2)
    data.save_class_counts(fake_trainer(tmp_path / "run" / "version_0"))
    saved = json.loads((tmp_path / "run" / "version_0" / "class_counts.json").read_text())
    assert saved["class_counts"] == [20, 10, 5] and saved["total"] == 35
    assert (saved["imbalance_factor"], saved["imbalance_seed"], saved["datamodule"]) == (4.0, 2, "SyntheticDataModule")
    data.save_class_counts(fake_trainer(tmp_path / "other", rank_zero=False))
    tiny_data().save_class_counts(fake_trainer(tmp_path / "balanced"))
    assert not (tmp_path / "other").exists() and not (tmp_path / "balanced").exists()


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("factor", [0.5, 0, -3, float("nan"), float("inf"), "ten", True])
def test_a_bad_imbalance_factor_is_named(factor):
    with pytest.raises(ConfigError, match=r"SyntheticDataModule: imbalance_factor must be a finite number >= 1"):
        tiny_data(imbalance_factor=factor)


def test_a_profile_that_empties_a_class_names_the_class_its_count_and_the_factor():
    data = tiny_data(num_classes=3, train_size=60, imbalance_factor=40)  # n_max 20: int(20 / 40) = 0
    with pytest.raises(ConfigError, match=r"imbalance_factor=40 leaves class 2 with 0 training images \(int\(20 × 40"):
        data.setup("fit")


def test_unlabelled_training_images_cannot_be_long_tailed():
    labels = torch.tensor([0, 1, -1, 1])
    with pytest.raises(ConfigError, match="STL: imbalance_factor=2 needs a labelled train split, but 1 training images"):
        long_tailed_indices(labels, 2, 2.0, seed=0, who="STL")
