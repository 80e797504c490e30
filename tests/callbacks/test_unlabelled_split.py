"""Data without labels: the metrics that need them are skipped, each said once at setup; the run goes on."""

from __future__ import annotations

import logging
import warnings

import pytest

from callbacks import EmbeddingMetrics, KNNMonitor, LongTailAccuracy
from datamodules import LinearEvalDataModule
from datamodules.synthetic import SyntheticDataModule
from ssl_app.errors import ConfigError
from tests.callbacks.helpers import RecordingLogger, tiny_data, tiny_model, tiny_trainer


class Unlabelled(SyntheticDataModule):
    """The shapes with every label removed (as STL-10's unlabelled images, or a folder of photos)."""

    def build_split(self, split):
        images = super().build_split(split)
        return [(images[i][0], None) for i in range(len(images))]


def unlabelled() -> Unlabelled:
    base = tiny_data()
    return Unlabelled(**{k: getattr(base, k) for k in ("batch_size", "num_workers", "augmentation")},
                      num_classes=4, train_size=64, val_size=45, test_size=30, image_size=16)  # fmt: skip


def test_metrics_that_need_labels_are_skipped_once_at_setup_and_the_others_logged(caplog):
    """Catches label-needing metrics that crash on unlabelled data, warn every epoch instead of once,
    or take the label-free metrics down with them."""
    logger = RecordingLogger()
    with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callbacks = [EmbeddingMetrics(), KNNMonitor(), LongTailAccuracy()]  # SimCLR has no class_logits: skipped anyway
        tiny_trainer(callbacks, logger=logger).fit(tiny_model(), datamodule=unlabelled())
    lines = caplog.text.splitlines()
    for who, what in (("EmbeddingMetrics", "metrics/tolerance"), ("KNNMonitor", "metrics/knn_acc"), ("LongTailAccuracy", "lt/*")):
        said = [line for line in lines if f"{who}: {what} skipped: Unlabelled has no labels" in line]
        assert len(said) == 1, (who, lines)  # once for the fit, not every epoch
    assert not [str(w.message) for w in caught if "labels" in str(w.message)]  # no second, per-epoch notice
    logged = {name for _, values in logger.history for name in values}
    assert {"metrics/uniformity", "metrics/alignment", "metrics/effective_rank"} <= logged
    assert not {"metrics/tolerance", "metrics/knn_acc"} & logged
    assert not any(name.startswith(("lt/", "metrics/knn_")) for name in logged)


def test_a_linear_probe_on_unlabelled_data_is_one_error_before_any_work():
    """Catches a probe that trains on data without labels (cross-entropy ignores -1: a loss of NaN
    or nothing learned) instead of saying what is wrong."""
    data = LinearEvalDataModule(unlabelled(), batch_size=8)
    with pytest.raises(ConfigError, match="LinearEvalDataModule: Unlabelled has no labels; a linear probe needs labelled"):
        data.setup("fit")
    assert not data._splits  # nothing built
