"""Callbacks that need the same embeddings at the same point share one pass over the split."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback

from callbacks import EmbeddingMetrics, EmbeddingProjector, KNNMonitor, embedding_pass
from callbacks.embedding_pass import embed_split
from tests.callbacks.ddp_worker import stub_trainer
from tests.callbacks.helpers import EPOCHS, VAL_SIZE, RecordingLogger, tensorboard, tiny_data, tiny_model, tiny_trainer


def count_passes(monkeypatch) -> list[tuple[str, int, bool]]:
    """Every pass over a split that ``embed_split`` makes, as ``(split, views, augment)`` (on either path)."""
    passes: list[tuple[str, int, bool]] = []
    original = embedding_pass.split_batches

    def counting(trainer, datamodule, split, views, augment, *args, **kwargs):
        passes.append((split, views, augment))
        return original(trainer, datamodule, split, views, augment, *args, **kwargs)

    monkeypatch.setattr(embedding_pass, "split_batches", counting)
    return passes


def count_backbone_images(model) -> list[int]:
    """Appends the number of images of every backbone forward of ``model``."""
    seen: list[int] = []
    model.backbone.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0].shape[0]))
    return seen


@pytest.mark.parametrize("eval_on", ["device", "workers"])
def test_the_clean_validation_pass_is_shared_and_redone_after_training_changes_the_weights(monkeypatch, eval_on):
    passes = count_passes(monkeypatch)
    tiny_trainer([EmbeddingMetrics(), KNNMonitor()]).fit(tiny_model(), datamodule=tiny_data(eval_on=eval_on))
    # per epoch: one clean pass over val (both callbacks read it) and one over train (the kNN bank)
    assert passes.count(("val", 1, False)) == EPOCHS
    assert passes.count(("train", 1, False)) == EPOCHS
    assert len(passes) == 2 * EPOCHS


@pytest.mark.parametrize("eval_on", ["device", "workers"])
def test_one_evaluation_embeds_each_split_once_for_every_callback(tmp_path, eval_on):
    """Catches a callback that embeds a split the others already embedded at this evaluation: the
    backbone sees the validation loop's two views of each val image, the train split once (kNN
    bank on the backbone features and on the projections, and the metrics' train-split negatives)
    and the clean val split once (both kNN's queries, the metrics' clean embeddings with their
    backbone features, and the projector), whatever each callback's batch size."""
    model, data = tiny_model(), tiny_data(eval_on=eval_on)
    seen = count_backbone_images(model)
    callbacks = [
        KNNMonitor(features="backbone", batch_size=7),
        EmbeddingMetrics(negatives_from="train", log_histograms=False),
        KNNMonitor(),
        EmbeddingProjector(max_samples=12, thumbnail_size=8, on_evaluate=True),
    ]
    tiny_trainer(callbacks, logger=tensorboard(tmp_path)).validate(model, datamodule=data, verbose=False)
    loop, train, val = 2 * VAL_SIZE, data.num_samples("train"), VAL_SIZE
    assert sum(seen) == loop + train + val


def test_the_device_images_give_the_worker_paths_embeddings_without_the_loader(monkeypatch):
    """Catches the device path embedding other images than the worker path (a transform step
    missing or doubled, another order, other labels or indices) for every shard of every pass
    a callback makes, and either path reading through the other's source."""
    model = tiny_model()
    device_data, worker_data = tiny_data(eval_on="device"), tiny_data(eval_on="workers")
    monkeypatch.setattr(device_data, "embedding_dataloader", lambda *args, **kwargs: pytest.fail("read the loader"))
    assert worker_data.eval_images("val", torch.device("cpu")) is None  # eval_on: workers keeps nothing
    for world_size in (1, 2):
        for rank in range(world_size):
            for split, options in (("train", {}), ("val", {"keep_backbone": True}), ("val", {"max_samples": 20})):
                found = []
                for data in (device_data, worker_data):
                    trainer = stub_trainer(data, rank, world_size)
                    embedding_pass._PASSES.pop(model, None)  # a fresh pass on each path
                    found.append(embed_split(trainer, model, split, views=1, augment=False, **options).local())
                on_device, through_workers = found
                assert torch.equal(on_device.indices, through_workers.indices)
                assert torch.equal(on_device.labels, through_workers.labels)
                torch.testing.assert_close(on_device.features, through_workers.features, atol=1e-6, rtol=1e-5)
                if "keep_backbone" in options:
                    torch.testing.assert_close(on_device.backbone, through_workers.backbone, atol=1e-5, rtol=1e-5)
    assert len(on_device) == 10  # rank 1 of 2 below max_samples=20: 1, 3, ..., 19


def test_the_clean_pass_keeps_the_backbone_features_and_is_shared_in_either_callback_order(monkeypatch):
    """Catches the backbone features (RankMe's input) costing a second clean pass, in either
    callback order, or being other than the unnormalised ``model(images)`` of the same images."""
    data = tiny_data()
    passes = count_passes(monkeypatch)
    model = tiny_model()
    trainer = tiny_trainer([KNNMonitor(), EmbeddingMetrics(log_histograms=False)])
    trainer.validate(model, datamodule=data, verbose=False)
    assert passes.count(("val", 1, False)) == 1
    samples = embed_split(trainer, model, "val", views=1, augment=False, keep_backbone=True).local()
    backbone = embed_split(trainer, model, "val", views=1, augment=False, features="backbone").local()
    assert passes.count(("val", 1, False)) == 1  # both served from the cache
    model.eval()
    with torch.no_grad():
        images = torch.cat([views[0] for views, _, _ in data.embedding_dataloader("val", views=1, augment=False)])
        torch.testing.assert_close(samples.backbone, model(images), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(samples.view_features(0), model.embed(images), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(backbone.view_features(0), F.normalize(model(images), dim=1), atol=1e-5, rtol=1e-5)


def test_knn_accuracy_is_the_same_beside_a_callback_embedding_fewer_train_samples():
    """Catches ``max_samples`` missing from the pass cache key: ``EmbeddingMetrics(split="train",
    max_samples=8)`` embeds the first 8 train samples cleanly, and ``KNNMonitor`` would then read
    that 8-sample pass as its whole bank (a review measured 0.222 instead of 0.289)."""

    def knn_accuracy(callbacks: list) -> float:
        logger = RecordingLogger()
        tiny_trainer(callbacks, logger=logger).validate(tiny_model(), tiny_data(), verbose=False)
        (accuracy,) = logger.values("metrics/knn_acc")
        return accuracy

    alone = knn_accuracy([KNNMonitor()])
    beside = knn_accuracy([EmbeddingMetrics(split="train", max_samples=8, log_histograms=False), KNNMonitor()])
    assert beside == alone


class TwoPasses(Callback):
    """At the end of validation: a pass with ``first``'s options, then one with ``second``'s (which
    may come from the cache), then ``second`` again with the cache emptied (a fresh pass)."""

    def __init__(self, first: dict, second: dict) -> None:
        self.first, self.second = first, second

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self.first_pass = embed_split(trainer, pl_module, **self.first).local()
        self.cached = embed_split(trainer, pl_module, **self.second).local()
        embedding_pass._PASSES.pop(pl_module, None)
        self.fresh = embed_split(trainer, pl_module, **self.second).local()


BASE = dict(split="val", views=1, augment=False, features="projection", max_samples=None, batch_size=None)


@pytest.mark.parametrize(
    "field,first,second",
    [
        ("split", "val", "test"),
        ("views", 1, 2),
        ("augment", False, True),
        ("features", "projection", "backbone"),
        ("max_samples", None, 8),
    ],
)
def test_every_option_that_changes_a_pass_is_in_its_cache_key(field, first, second):
    """Catches a field missing from ``embed_split``'s cache key: two passes whose options differ
    only in it would share one, so the second caller would get the first one's split, number of
    views, transform, features or subset. (``batch_size`` is not in the key: it changes no
    embedding, the next test.)"""
    passes = TwoPasses({**BASE, field: first}, {**BASE, field: second})
    tiny_trainer([passes]).validate(tiny_model(), tiny_data(), verbose=False)
    assert torch.equal(passes.cached.indices, passes.fresh.indices)
    assert passes.cached.features.shape == passes.fresh.features.shape
    assert torch.allclose(passes.cached.features, passes.fresh.features, atol=1e-6)


def test_the_batch_size_of_a_pass_changes_no_embedding():
    """Why dropping ``batch_size`` from the cache key would be harmless: in eval mode every sample's
    embedding (and augmented view, a function of its index) is the same in any batch. Catches a
    pass whose result depends on how it was batched (BatchNorm left in training mode, views drawn
    per batch), which would make ``batch_size`` a key field that matters."""
    views = {**BASE, "views": 2, "augment": True}
    passes = TwoPasses({**views, "batch_size": 4}, {**views, "batch_size": 16})
    tiny_trainer([passes]).validate(tiny_model(), tiny_data(), verbose=False)
    assert torch.equal(passes.first_pass.indices, passes.fresh.indices)
    assert torch.allclose(passes.first_pass.features, passes.fresh.features, atol=1e-5)


class PassWithoutBackbone(Callback):
    """At the end of validation, before the callbacks after it: the clean pass without backbone features."""

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self.samples = embed_split(trainer, pl_module, "val", views=1, augment=False).local()


def test_a_metric_that_needs_backbone_features_never_gets_a_cached_pass_without_them():
    """Catches the cache serving a pass made without backbone features to a caller that asked for them:
    ``effective_rank_backbone`` (RankMe, on the backbone's features) would read none, or another pass's.
    A clean pass without them runs first; EmbeddingMetrics' metric must equal its value without that pass."""

    def rank_backbone(callbacks: list) -> float:
        logger = RecordingLogger()
        tiny_trainer(callbacks, logger=logger).validate(tiny_model(), tiny_data(), verbose=False)
        values = logger.values("metrics/effective_rank_backbone")
        assert len(values) == 1, "effective_rank_backbone was not logged (no backbone features)"
        return values[0]

    first = PassWithoutBackbone()
    alone = rank_backbone([EmbeddingMetrics(log_histograms=False)])
    beside = rank_backbone([first, EmbeddingMetrics(log_histograms=False)])
    assert first.samples.backbone is None  # the pass it ran first really had no backbone features
    assert beside == pytest.approx(alone, rel=1e-6) and alone > 1
