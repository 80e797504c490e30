import pytest
import torch

from datamodules import SyntheticDataModule
from ssl_app.errors import ConfigError


def small_module(**kwargs) -> SyntheticDataModule:
    options = dict(train_size=40, val_size=21, test_size=10, batch_size=8, num_workers=0)
    options.update(kwargs)
    dm = SyntheticDataModule(**options)
    dm.setup("fit")
    return dm


def test_training_batch_format():
    dm = small_module()
    views, labels, index = next(iter(dm.train_dataloader()))
    assert len(views) == 2
    for view in views:
        assert view.shape == (8, 3, 32, 32) and view.dtype == torch.float32
    assert labels.dtype == torch.int64 and index.dtype == torch.int64
    assert labels.min() >= 0 and labels.max() < 10
    assert len(set(index.tolist())) == 8 and index.max() < 40
    # The two views of an image differ (random crops and jitter) but come from the same image.
    assert not torch.equal(views[0], views[1])
    data = dm.dataset("train")
    assert [data[i][1] for i in index.tolist()] == labels.tolist()
    # Normalised: roughly zero mean, unit scale, not raw [0, 1] pixels.
    assert views[0].min() < 0


def collect(loader):
    views, labels, index = zip(*[(torch.cat(v, 1), l, i) for v, l, i in loader])
    return torch.cat(views), torch.cat(labels), torch.cat(index)


def test_validation_views_are_a_fixed_function_of_the_index():
    dm = small_module()
    first = collect(dm.val_dataloader())
    second = collect(dm.val_dataloader())
    assert torch.equal(first[2], torch.arange(21))  # in order, nothing dropped
    assert torch.equal(first[0], second[0])
    with_worker = collect(small_module(num_workers=1).val_dataloader())
    assert torch.equal(first[0], with_worker[0])
    other_seed = collect(small_module(val_seed=1).val_dataloader())
    assert not torch.equal(first[0], other_seed[0])


def test_training_views_change_between_passes():
    dm = small_module(batch_size=40)
    torch.manual_seed(0)
    a = collect(dm.train_dataloader())
    b = collect(dm.train_dataloader())
    order_a, order_b = a[2].argsort(), b[2].argsort()
    assert not torch.equal(a[0][order_a], b[0][order_b])


def test_global_rng_is_untouched_by_deterministic_views():
    dm = small_module()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    data = dm.val_dataloader().dataset  # the dataset itself: a DataLoader iterator draws a seed
    data[0], data[5]
    assert torch.equal(torch.rand(3), expected)


def test_embedding_dataloader_shards_cover_the_split_once():
    dm = small_module()
    shards = [collect(dm.embedding_dataloader("val", views=1, rank=r, world_size=2))[2] for r in range(2)]
    assert sorted(torch.cat(shards).tolist()) == list(range(21))
    single, _, _ = collect(dm.embedding_dataloader("val", views=1))
    assert single.shape == (21, 3, 32, 32)


def test_batch_larger_than_the_split_is_rejected():
    dm = small_module(batch_size=64)
    with pytest.raises(ConfigError, match="batch_size 64"):
        dm.train_dataloader()


@pytest.mark.parametrize("kwargs,option", [({"batch_size": 0}, "batch_size"), ({"num_workers": -1}, "num_workers")])
def test_bad_loader_values_are_named(kwargs, option):
    with pytest.raises(ConfigError, match=option):
        SyntheticDataModule(**kwargs)
