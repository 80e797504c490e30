"""The epoch's hardness profile reaches TensorBoard once per epoch, from the steps with diagnostics only."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from ssl_app.losses import InfoNCE
from ssl_app.losses.hardness import BINS, COUNT_TAG, SHARE_TAG
from ssl_app.methods import SimCLR
from ssl_app.report.events import read_events
from tests.helpers import tiny_data, tiny_trainer


def test_each_epoch_logs_the_profile_of_its_logged_steps(tmp_path):
    """Catches a profile never logged, logged per step, not reset between epochs (the second
    epoch's counts would double), or fed by every step instead of the logged ones."""
    torch.manual_seed(0)
    model = SimCLR(loss=InfoNCE(0.5), backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
    logger = TensorBoardLogger(str(tmp_path), name="run", version=0)
    # 48 images in batches of 8: 6 steps an epoch, of which 3 log (every 2nd step)
    tiny_trainer(tmp_path, logger=logger, max_epochs=2, log_every_n_steps=2).fit(model, datamodule=tiny_data())
    events = read_events(tmp_path / "run" / "version_0")

    shares, counts = events.histograms[SHARE_TAG], events.histograms[COUNT_TAG]
    assert [h.step for h in counts] == [h.step for h in shares] == [6, 12]
    negatives_per_step = 16 * 14  # 2 × 8 views, each against the 14 that are neither itself nor its positive
    for histogram in counts:  # read back with the writer's leading empty bucket at −1 (zero width)
        assert histogram.counts[0] == 0 and histogram.total == pytest.approx(3 * negatives_per_step)
        np.testing.assert_allclose(histogram.edges[1:], np.linspace(-1, 1, BINS + 1), atol=1e-6)
    # each anchor's shares sum to 1, so Σ_b mean share × count is the anchors counted: 3 steps × 16
    for share, count in zip(shares, counts):
        assert float(np.sum(share.counts * count.counts)) == pytest.approx(3 * 16, rel=1e-4)
