import dataclasses
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader

from datamodules import MultiViewDataset, ViewAugmentation
from datamodules.synthetic import ShapesDataset, make_shapes
from ssl_app.errors import ConfigError
from tests.helpers import tiny_data


def shapes(n=6):
    return ShapesDataset(*make_shapes(n, 3, 32, seed=0))


class WithoutLabels(torch.utils.data.Dataset):
    def __init__(self, base):
        self.base = base

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        return self.base[i][0], None


def test_item_format_with_one_and_two_views():
    base = shapes()
    views, label, index = MultiViewDataset(base, ViewAugmentation().eval_transform(), num_views=1)[4]
    assert isinstance(views, tuple) and len(views) == 1 and views[0].shape == (3, 32, 32)
    assert type(label) is int and label == base[4][1] and index == 4
    two, _, _ = MultiViewDataset(base, ViewAugmentation().train_transform(), num_views=2)[4]
    assert len(two) == 2 and not torch.equal(two[0], two[1])


def test_unlabeled_samples_get_label_minus_one():
    _, label, _ = MultiViewDataset(WithoutLabels(shapes()), ViewAugmentation().eval_transform(), num_views=1)[0]
    assert label == -1


def test_seeded_views_depend_only_on_seed_and_index():
    transform = ViewAugmentation().train_transform()
    seeded = MultiViewDataset(shapes(), transform, seed=7)
    first = seeded[3][0]
    torch.manual_seed(12345)  # the global RNG state must not matter
    again = seeded[3][0]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], first[1])  # the two views still differ from each other
    assert not torch.equal(MultiViewDataset(shapes(), transform, seed=8)[3][0][0], first[0])
    unseeded = MultiViewDataset(shapes(), transform)
    assert not torch.equal(unseeded[3][0][0], unseeded[3][0][0])


def test_collated_batch_is_a_list_of_view_tensors():
    data = MultiViewDataset(shapes(6), ViewAugmentation().train_transform(), seed=0)
    views, labels, index = next(iter(DataLoader(data, batch_size=4)))
    assert len(views) == 2 and views[0].shape == (4, 3, 32, 32)
    assert labels.dtype == torch.int64 and index.tolist() == [0, 1, 2, 3]


CHILD = """
import sys, torch
from datamodules import MultiViewDataset, ViewAugmentation
from datamodules.synthetic import ShapesDataset, make_shapes
torch.manual_seed(999)
data = MultiViewDataset(ShapesDataset(*make_shapes(6, 3, 32, seed=0)), ViewAugmentation().train_transform(), seed=7)
torch.save(data[5][0], sys.argv[1])
"""


def test_seeded_views_are_the_same_in_a_fresh_process(tmp_path):
    out = tmp_path / "views.pt"
    subprocess.run([sys.executable, "-c", CHILD, str(out)], check=True, timeout=120)
    here = MultiViewDataset(shapes(), ViewAugmentation().train_transform(), seed=7)[5][0]
    there = torch.load(out)
    assert all(torch.equal(a, b) for a, b in zip(here, there))


def test_one_transform_per_view_makes_view_i_with_transform_i():
    """Catches the per-view transforms applied in another order (a MoCo key made by the query's pipeline)
    or a transform list of the wrong length accepted."""
    base = shapes()
    clean = ViewAugmentation().eval_transform()
    negated = lambda image: -clean(image)  # noqa: E731 - a transform told apart from the other
    views, _, _ = MultiViewDataset(base, [negated, clean], num_views=2)[2]
    assert torch.equal(views[0], -clean(base[2][0])) and torch.equal(views[1], clean(base[2][0]))
    with pytest.raises(ValueError, match="1 transforms for 2 views"):
        MultiViewDataset(base, [clean], num_views=2)


def test_the_training_loader_gives_the_first_view_the_query_pipeline():
    """Catches the datamodule building its training views from the plain pipeline and dropping query_policy,
    and a query_policy accepted with batched views, which cannot run AutoAugment."""
    plain = tiny_data().augmentation
    augmentation = dataclasses.replace(plain, query_policy="autoaugment_cifar10", query_erasing_prob=1.0)
    dm = tiny_data(augmentation=augmentation)
    dm.setup("fit")
    query, key = dm.train_dataloader().dataset.transform
    assert "AutoAugment" in str(query) and "AutoAugment" not in str(key)
    views, _, _ = next(iter(dm.train_dataloader()))
    assert len(views) == 2 and views[0].shape == views[1].shape == (8, 3, 8, 8)
    with pytest.raises(ConfigError, match="query_policy=autoaugment_cifar10 runs only with augment_on: workers"):
        tiny_data(augmentation=augmentation, augment_on="device")
