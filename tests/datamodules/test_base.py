from types import SimpleNamespace

import numpy as np
import pytest
import torch
from lightning import LightningModule, Trainer, seed_everything

from datamodules import SyntheticDataModule
from datamodules.device_augment import UnaugmentedImages
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
    views, labels, index = zip(*[(torch.cat(v, 1), label, i) for v, label, i in loader])
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
    loader = dm.train_dataloader()
    a = collect(loader)
    loader.sampler.set_epoch(1)  # the views are a function of (seed, epoch, index, view): tests/datamodules/test_resume_views.py
    b = collect(loader)
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


@pytest.mark.parametrize("processes", [1, 2, 8])
@pytest.mark.parametrize("cores", [1, 2, 3, 4, 16, 64])
def test_the_default_num_workers_draws_no_advice_from_lightning_or_torch(cores, processes, monkeypatch):
    """Catches a default that makes Lightning advise more workers (fewer than 2 while it suggests more)
    or torch warn of more workers than usable cores, on machines of 1 to 64 cores and 1 to 8 processes
    (main: 2 workers, too many on 1 core; the configs' 4 on 2 cores printed torch's warning per loader)."""
    import warnings

    from lightning.pytorch.trainer.connectors.data_connector import _worker_check

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    dm = SyntheticDataModule(train_size=40, val_size=21, test_size=10, batch_size=8)
    dm.trainer = SimpleNamespace(num_devices=processes, reload_dataloaders_every_n_epochs=0, world_size=processes)
    dm.setup("validate")
    loader = dm.val_dataloader()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _worker_check(dm.trainer, loader, "val_dataloader")
        loader.check_worker_number_rationality()
    assert not [str(w.message) for w in caught], (loader.num_workers, [str(w.message) for w in caught])
    assert dm.describe()["num_workers"] == loader.num_workers <= 4


def test_an_explicit_num_workers_is_kept(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    dm = SyntheticDataModule(train_size=40, val_size=21, test_size=10, batch_size=8, num_workers=3)
    dm.trainer = SimpleNamespace(num_devices=8)
    dm.setup("validate")
    assert dm.num_workers == dm.val_dataloader().num_workers == 3


class ViewCounter(LightningModule):
    """A stand-in method that records how many views each train/val batch carries."""

    def __init__(self, **attributes):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen = {"train": set(), "val": set()}
        for name, value in attributes.items():
            setattr(self, name, value)

    def training_step(self, batch, batch_idx):
        self.seen["train"].add(len(batch[0]))
        return self.layer(batch[0][0].mean().view(1, 1)).sum()

    def validation_step(self, batch, batch_idx):
        self.seen["val"].add(len(batch[0]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit_one_step(module, tmp_path):
    trainer = Trainer(
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
    )
    trainer.fit(module, datamodule=small_module())
    return module.seen


@pytest.mark.parametrize("attributes,train_views", [({"train_views": 1}, 1), ({"train_views": 3}, 3), ({}, 2)])
def test_training_builds_as_many_views_as_the_method_consumes(attributes, train_views, tmp_path):
    # 1: the memory bank; no attribute: the default of SimCLR and MoCo. Validation keeps 2
    # views whatever the method trains on (alignment needs two).
    seen = fit_one_step(ViewCounter(**attributes), tmp_path)
    assert seen == {"train": {train_views}, "val": {2}}


def test_without_a_trainer_two_training_views():
    views, _, _ = next(iter(small_module().train_dataloader()))
    assert len(views) == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_a_bad_train_views_is_named(bad, tmp_path):
    with pytest.raises(ConfigError, match=f"train_views must be an int >= 1, got {bad!r}"):
        fit_one_step(ViewCounter(train_views=bad), tmp_path)


# --- augment_on: device -----------------------------------------------------------------------
def test_a_bad_augment_on_is_named():
    with pytest.raises(ConfigError, match="augment_on must be one of"):
        SyntheticDataModule(augment_on="gpu")


def test_device_training_loader_yields_each_image_once_as_uint8():
    dm = small_module(augment_on="device")
    images, labels, index = next(iter(dm.train_dataloader()))
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.uint8
    assert labels.dtype == torch.int64 and index.dtype == torch.int64 and len(set(index.tolist())) == 8
    data = dm.dataset("train")
    for image, label, i in zip(images, labels.tolist(), index.tolist()):
        pil, expected_label = data[i]
        assert label == expected_label
        assert torch.equal(image, torch.from_numpy(np.array(pil)).permute(2, 0, 1))


class BatchRecorder(ViewCounter):
    """Keeps the first training and validation batch it is given."""

    def __init__(self, **attributes):
        super().__init__(**attributes)
        self.batches = {}

    def training_step(self, batch, batch_idx):
        self.batches.setdefault("train", batch)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.batches.setdefault("val", batch)
        super().validation_step(batch, batch_idx)


def fit_and_record(tmp_path, augment_on, seed=0, **attributes):
    module = BatchRecorder(**attributes)
    trainer = Trainer(
        max_epochs=1, limit_train_batches=1, limit_val_batches=1, num_sanity_val_steps=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path, accelerator="cpu",
    )  # fmt: skip
    seed_everything(seed)  # the run's seed, which the training views are keyed on
    trainer.fit(module, datamodule=small_module(augment_on=augment_on))
    return module


def assert_batched_training_views(tmp_path, augment_on, train_views):
    """The method got ``train_views`` normalised float views with their own labels, and validation
    (with the sanity check before it) the worker path's fixed views (``device``: the device's views
    keyed ``(val_seed, EVALUATION_EPOCH, index)``, tests/datamodules/test_eval_images.py); returns
    the recorder."""
    recorded = fit_and_record(tmp_path, augment_on, train_views=train_views)
    workers = fit_and_record(tmp_path, "workers", train_views=train_views)
    views, labels, index = recorded.batches["train"]
    assert isinstance(views, list) and len(views) == train_views
    for view in views:
        assert view.shape == (8, 3, 32, 32) and view.dtype == torch.float32 and view.min() < 0
    data = small_module().dataset("train")
    assert labels.tolist() == [data[i][1] for i in index.tolist()]
    expected = workers.batches["val"][0]
    if augment_on == "device":
        dm = small_module(augment_on="device")
        val_index = recorded.batches["val"][2]
        images = torch.stack([UnaugmentedImages(dm.dataset("val"))[int(i)][0] for i in val_index])
        expected = dm.device_augmentation(images, 2, keys=dm.evaluation_view_keys(val_index))
    assert len(recorded.batches["val"][0]) == len(expected) == 2
    for got, view in zip(recorded.batches["val"][0], expected):
        assert torch.equal(got, view)
    return recorded


@pytest.mark.parametrize("train_views", [1, 3])
def test_device_views_are_made_after_the_transfer_for_training_only(train_views, tmp_path):
    device = assert_batched_training_views(tmp_path, "device", train_views)
    assert device.seen == {"train": {train_views}, "val": {2}}


def test_device_views_repeat_with_the_seed_and_differ_between_ranks(tmp_path):
    first = fit_and_record(tmp_path, "device", seed=0).batches["train"]
    again = fit_and_record(tmp_path, "device", seed=0).batches["train"]
    other = fit_and_record(tmp_path, "device", seed=1).batches["train"]
    assert torch.equal(first[2], again[2]) and torch.equal(first[0][0], again[0][0])
    assert not torch.equal(first[0][0], other[0][0])
    # DDP ranks see other samples, so other views: tests/datamodules/test_resume_views.py.


def test_loaders_pin_memory_on_cuda_and_keep_their_workers_by_default(monkeypatch):
    """Catches loaders that restart their workers every epoch (seconds per epoch with a big
    data set) or copy to a GPU from pageable memory; one-off callback loaders keep no workers."""
    from tests.helpers import tiny_data

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    data = tiny_data(num_workers=2)
    data.setup("fit")
    for loader in (data.train_dataloader(), data.val_dataloader()):
        assert loader.persistent_workers and loader.pin_memory and loader.num_workers == 2
    assert not data.embedding_dataloader("val").persistent_workers
    single = tiny_data(num_workers=0, pin_memory=False)
    single.setup("fit")
    loader = single.train_dataloader()
    assert not loader.persistent_workers and not loader.pin_memory


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("train_views", [1, 2])
def test_workers_batched_makes_the_method_s_views_in_the_loader(workers, train_views, tmp_path):
    """Catches ``workers_batched`` handing uint8 images to the method (views never made), the
    wrong number of views, labels detached from their images, or views that repeat each epoch;
    validation keeps the worker path's fixed views."""
    assert_batched_training_views(tmp_path, "workers_batched", train_views)
    dm = small_module(augment_on="workers_batched", num_workers=workers)
    dm.train_views = lambda: 2
    loader = dm.train_dataloader()
    epochs = []
    for epoch in range(2):  # the first view of every sample, per epoch
        seen = {}
        loader.sampler.set_epoch(epoch)
        for views, _, index in loader:
            seen.update({int(i): v for i, v in zip(index, views[0])})
        epochs.append(seen)
    shared = sorted(set(epochs[0]) & set(epochs[1]))
    assert shared and all(not torch.equal(epochs[0][i], epochs[1][i]) for i in shared)  # fresh views each epoch
