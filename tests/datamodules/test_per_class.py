"""Per-class subsets of the torchvision datamodules (``train_per_class``, ``test_per_class``)."""

import numpy as np
import pytest
import torchvision.datasets.cifar as tv_cifar

from datamodules import CIFAR10DataModule, LinearEvalDataModule
from datamodules.long_tail import exponential_profile
from ssl_app.errors import ConfigError
from tests.datamodules.test_torchvision_sets import write_fake_cifar

# Every batch file: five images of class 0 first, then one of each class 1 … 9 (14 images), so
# "the first N of each class" differs from "the first N·C images" and from any shuffle.
LABELS = [0] * 5 + list(range(1, 10))


@pytest.fixture
def cifar_root(tmp_path, monkeypatch):
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)  # fake files, not the official md5s
    write_fake_cifar(tmp_path, per_batch=len(LABELS), labels=LABELS)
    return tmp_path


def expected_first(labels: list[int], per_class: int) -> list[int]:
    seen: dict[int, int] = {}
    kept = []
    for index, label in enumerate(labels):
        if seen.get(label, 0) < per_class:
            seen[label] = seen.get(label, 0) + 1
            kept.append(index)
    return kept


def test_keeps_the_first_n_images_of_each_class_in_the_data_sets_order(cifar_root):
    """Catches a subset that takes the first N·C images, a shuffled one, or one that leaves the test split whole."""
    dm = CIFAR10DataModule(root=str(cifar_root), train_per_class=2, test_per_class=1, batch_size=4, num_workers=0)
    dm.setup("fit")
    train = dm.dataset("train")
    assert list(train.indices) == expected_first(LABELS * 5, 2)
    assert dm.train_class_counts() == [2] * 10
    base = train.dataset
    assert np.array_equal(np.asarray(train[3][0]), np.asarray(base[train.indices[3]][0]))
    assert dm.num_samples("val") == dm.num_samples("test") == 10
    assert list(dm.dataset("test").indices) == expected_first(LABELS, 1)
    assert dm.describe()["train_per_class"] == 2 and dm.describe()["split_sizes"]["train"] == 20


def test_the_long_tail_profile_applies_to_the_per_class_subset(cifar_root):
    """Catches the long-tailed profile taken from the whole split (class 0's 25 images as n_max) instead of the subset."""
    dm = CIFAR10DataModule(root=str(cifar_root), train_per_class=5, imbalance_factor=5, num_workers=0)
    assert dm.train_class_counts() == exponential_profile(5, 10, 5)
    kept = set(expected_first(LABELS * 5, 5))
    outer = dm.dataset("train")
    assert {outer.dataset.indices[i] for i in outer.indices} <= kept


def test_the_linear_evaluation_holds_out_from_the_subset(cifar_root):
    """Catches a linear evaluation that reads the whole split around the per-class subset."""
    data = CIFAR10DataModule(root=str(cifar_root), train_per_class=3, test_per_class=1, num_workers=0)
    linear = LinearEvalDataModule(data, val_fraction=0.1, batch_size=4)
    linear.setup("fit")
    assert linear.describe()["split_sizes"] == {"train": 27, "val": 3, "test": 10}


def test_a_class_with_too_few_images_is_named(cifar_root):
    """Catches a silent short class (fewer than N kept) instead of one error naming it."""
    dm = CIFAR10DataModule(root=str(cifar_root), train_per_class=6, num_workers=0)
    with pytest.raises(ConfigError, match="CIFAR10DataModule: train_per_class=6, but class 1 has only 5 images"):
        dm.setup("fit")
    dm = CIFAR10DataModule(root=str(cifar_root), test_per_class=2, num_workers=0)
    with pytest.raises(ConfigError, match="test_per_class=2, but class 1 has only 1 images"):
        dm.setup("validate")


@pytest.mark.parametrize("value", [0, -3, 2.5, True])
def test_per_class_must_be_a_positive_int(value, cifar_root):
    """Catches N < 1 (an empty split) or a non-integer accepted and failing later."""
    with pytest.raises(ConfigError, match="train_per_class must be an int >= 1"):
        CIFAR10DataModule(root=str(cifar_root), train_per_class=value)
