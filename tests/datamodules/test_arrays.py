"""Batches read from the uint8 array behind in-memory data (``datamodules.arrays``) equal the items
read one by one, for every registered datamodule's training split (built offline as in
``test_contract.py``), through subsets, keyed or not."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch.utils.data import Subset

from datamodules.arrays import pixel_array
from datamodules.device_augment import UnaugmentedImages, as_uint8_chw
from tests.datamodules.test_contract import OFFLINE

#: The datamodules whose training images sit in memory as one uint8 array.
IN_MEMORY = {"SyntheticDataModule", "CIFAR10DataModule", "CIFAR100DataModule", "SVHNDataModule", "STL10DataModule"}


@pytest.mark.parametrize("name", sorted(OFFLINE))
def test_a_batch_equals_its_items_read_one_by_one(name, tmp_path, monkeypatch):
    """Catches a wrong array layout (HWC read as CHW: other pixels), labels off by the dataset's own
    mapping (SVHN's 10 → 0, STL-10's unlabelled -1), rows that ignore a subset's indices, keys lost,
    and an array used where the items are not its rows (an image folder)."""
    module = OFFLINE[name](tmp_path, monkeypatch)
    module.setup("fit")
    base = module.dataset("train")
    assert (pixel_array(base) is not None) == (name in IN_MEMORY)
    n = len(base)
    for data in (base, Subset(Subset(base, list(range(n))[::-1]), [0, 2, 1, 3])):  # a subset of a subset, reordered
        images = UnaugmentedImages(data)
        picked = [len(data) - 1, 0, len(data) // 2, 1]
        for keys in (picked, [(7, 2, index) for index in picked]):
            batch, expected = images.__getitems__(keys), [images[key] for key in keys]
            assert len(batch) == len(expected)
            for got, want in zip(batch, expected):
                assert len(got) == len(want) and got[1:] == want[1:]
                assert got[0].dtype == torch.uint8 and torch.equal(got[0], want[0])


def test_an_array_behind_a_transform_is_not_used(tmp_path, monkeypatch):
    module = OFFLINE["CIFAR10DataModule"](tmp_path, monkeypatch)
    module.setup("fit")
    base = module.dataset("train")
    base.transform = lambda image: image.rotate(90)  # __getitem__ no longer returns the stored image
    assert pixel_array(base) is None
    images = UnaugmentedImages(base)
    assert torch.equal(images.__getitems__([0])[0][0], as_uint8_chw(base[0][0]))


def test_a_dataset_sent_to_spawned_workers_does_not_carry_its_array_twice(tmp_path, monkeypatch):
    """Catches the array pickled as a copy beside the dataset that holds it (workers started by
    spawn get the dataset pickled: CIFAR-10's 150 MB would go twice to each), and a copy that no
    longer fetches."""
    module = OFFLINE["CIFAR10DataModule"](tmp_path, monkeypatch)
    module.setup("fit")
    images = UnaugmentedImages(module.dataset("train"))
    first = images.__getitems__([3, 1])
    assert len(pickle.dumps(images)) < 1.5 * len(pickle.dumps(module.dataset("train")))
    again = pickle.loads(pickle.dumps(images)).__getitems__([3, 1])
    assert all(torch.equal(a[0], b[0]) and a[1:] == b[1:] for a, b in zip(first, again))
