"""An evaluation split without labels: tolerance and kNN are skipped with one warning, the run goes on."""

from __future__ import annotations

import warnings

from callbacks import EmbeddingMetrics, KNNMonitor
from datamodules.synthetic import SyntheticDataModule
from tests.callbacks.helpers import RecordingLogger, tiny_data, tiny_model, tiny_trainer


class Unlabelled(SyntheticDataModule):
    """The shapes with every label removed (as STL-10's unlabelled images, or a folder of photos)."""

    def build_split(self, split):
        images = super().build_split(split)
        return [(images[i][0], None) for i in range(len(images))]


def test_metrics_that_need_labels_are_skipped_once_with_a_warning(tmp_path):
    base = tiny_data()
    data = Unlabelled(**{k: getattr(base, k) for k in ("batch_size", "num_workers", "augmentation")},
                      num_classes=4, train_size=64, val_size=45, test_size=30, image_size=16)  # fmt: skip
    logger = RecordingLogger()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny_trainer([EmbeddingMetrics(), KNNMonitor()], logger=logger).fit(tiny_model(), datamodule=data)
    messages = [str(w.message) for w in caught]
    assert sum("metrics/tolerance is not logged" in m for m in messages) == 1  # once, not every epoch
    assert any("no labels; metrics/knn_acc is not logged" in m for m in messages)
    logged = {name for _, values in logger.history for name in values}
    assert {"metrics/uniformity", "metrics/alignment", "metrics/effective_rank"} <= logged
    assert not {"metrics/tolerance", "metrics/knn_acc"} & logged
