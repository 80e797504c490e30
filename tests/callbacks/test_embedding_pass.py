"""Callbacks that need the same embeddings at the same point share one pass over the split."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from callbacks import EmbeddingMetrics, KNNMonitor, embedding_pass
from callbacks.embedding_pass import embed_split
from tests.callbacks.helpers import EPOCHS, RecordingLogger, tiny_data, tiny_model, tiny_trainer


def test_the_clean_validation_pass_is_shared_and_redone_after_training_changes_the_weights():
    data = tiny_data()
    requested = []
    original = data.embedding_dataloader

    def counting(split, views=1, augment=False, **kwargs):
        requested.append((split, views, augment))
        return original(split, views=views, augment=augment, **kwargs)

    data.embedding_dataloader = counting
    tiny_trainer([EmbeddingMetrics(), KNNMonitor()]).fit(tiny_model(), datamodule=data)
    # per epoch: one clean pass over val (both callbacks read it) and one over train (the kNN bank)
    assert requested.count(("val", 1, False)) == EPOCHS
    assert requested.count(("train", 1, False)) == EPOCHS


def test_the_clean_pass_keeps_the_backbone_features_and_is_shared_in_either_callback_order():
    """Catches the backbone features (RankMe's input) costing a second clean pass, in either
    callback order, or being other than the unnormalised ``model(images)`` of the same images."""
    data = tiny_data()
    requested = []
    original = data.embedding_dataloader

    def counting(split, views=1, augment=False, **kwargs):
        requested.append((split, views, augment))
        return original(split, views=views, augment=augment, **kwargs)

    data.embedding_dataloader = counting
    model = tiny_model()
    trainer = tiny_trainer([KNNMonitor(), EmbeddingMetrics(log_histograms=False)])
    trainer.validate(model, datamodule=data, verbose=False)
    assert requested.count(("val", 1, False)) == 1
    samples = embed_split(trainer, model, "val", views=1, augment=False, keep_backbone=True).local()
    assert requested.count(("val", 1, False)) == 1  # served from the cache
    model.eval()
    with torch.no_grad():
        images = torch.cat([views[0] for views, _, _ in original("val", views=1, augment=False)])
        torch.testing.assert_close(samples.backbone, model(images), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(samples.view_features(0), model.embed(images), atol=1e-5, rtol=1e-5)


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
    views, transform, features or subset. (``batch_size`` is in the key too, but changes no
    embedding: the next test.)"""
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
