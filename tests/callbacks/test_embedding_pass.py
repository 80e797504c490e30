"""Callbacks that need the same embeddings at the same point share one pass over the split."""

from __future__ import annotations

from callbacks import EmbeddingMetrics, KNNMonitor
from tests.callbacks.helpers import EPOCHS, tiny_data, tiny_model, tiny_trainer


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
