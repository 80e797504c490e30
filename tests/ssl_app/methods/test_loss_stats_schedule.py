"""The loss diagnostics are computed exactly on the training steps whose values reach the logger."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from ssl_app.losses import InfoNCE
from ssl_app.losses import base as loss_base
from ssl_app.methods import SimCLR
from tests.helpers import tiny_data, tiny_trainer


class CountingInfoNCE(InfoNCE):
    """InfoNCE that records, per call, whether it computed its diagnostics."""

    def __init__(self) -> None:
        super().__init__(0.5)
        self.calls: list[bool] = []

    def forward(self, handover, with_stats=False):
        result = super().forward(handover, with_stats)
        self.calls.append(bool(result.stats))
        return result


def test_diagnostics_are_computed_only_on_logged_steps_and_all_of_them_are_logged(tmp_path, monkeypatch):
    """Catches statistics computed on every step (the cost this schedule removes), computed one
    step off the logger's schedule (the logged steps would then have none), or not logged."""
    torch.manual_seed(0)
    model = SimCLR(loss=CountingInfoNCE(), backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
    computed = []
    original = loss_base.negative_stats
    monkeypatch.setattr("ssl_app.losses.base.negative_stats", lambda *a, **k: computed.append(1) or original(*a, **k))
    logger = CSVLogger(str(tmp_path), name="run")
    trainer = tiny_trainer(tmp_path, logger=logger, max_steps=6, log_every_n_steps=2)
    trainer.fit(model, datamodule=tiny_data())
    assert model.loss.calls == [False, True, False, True, False, True]
    assert len(computed) == 3
    logger.save()
    lines = (tmp_path / "run" / "version_0" / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","))) for line in lines[1:]]
    stats_steps = sorted(int(r["step"]) for r in rows if r.get("loss/effective_negatives"))
    loss_steps = sorted(int(r["step"]) for r in rows if r.get("train/loss_step"))
    assert stats_steps == loss_steps == [1, 3, 5]


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
def test_without_a_trainer_every_call_computes_the_diagnostics():
    """Catches a method that switches them off outside the Trainer (benchmarks and notebooks read them)."""
    model = SimCLR(loss=CountingInfoNCE(), backbone="small_cnn", proj_hidden_dim=16, proj_dim=8).train()
    views = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    model.training_step((views, torch.zeros(4, dtype=torch.long), torch.arange(4)), 0)
    assert model.loss.calls == [True]
    assert model.loss_and_chance is not None  # the step's (loss, chance) reached the method


def test_constants_are_written_at_the_start_and_the_epochs_end_and_used_neg_sim_only_when_it_differs(tmp_path):
    """InfoNCE (keeps every negative, fixed τ) against HardContrastive keeping 2 of 14 negatives.
    Catches ``loss/chance``, ``loss/used_negatives`` or the fixed τ written at every logged step, or
    only once (one dot in TensorBoard, not a line across the run: issue 40),
    written at another step than the step's other diagnostics, dropped from ``callback_metrics``
    (the run record), and ``loss/used_neg_sim`` logged as a copy of ``loss/mean_neg_sim`` or
    dropped for a loss whose kept negatives differ."""
    from ssl_app.losses import HardContrastive
    from tests.callbacks.helpers import RecordingLogger

    for loss, copies in ((InfoNCE(0.5), True), (HardContrastive(0.5, num_negatives=2), False)):
        torch.manual_seed(0)
        model = SimCLR(loss=loss, backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
        logger = RecordingLogger()
        trainer = tiny_trainer(tmp_path, logger=logger, max_steps=4, log_every_n_steps=1)
        trainer.fit(model, datamodule=tiny_data())
        steps = {tag: [step for step, row in logger.history if tag in row] for tag in ("loss/pos_sim", "loss/chance")}
        assert steps["loss/pos_sim"] == [0, 1, 2, 3] and steps["loss/chance"] == [0, 3]  # the first step, the epoch's last
        assert logger.values("loss/used_negatives") == [14 if copies else 2] * 2
        assert logger.values("loss/temperature") == [0.5, 0.5]
        assert "loss/chance" in trainer.callback_metrics and "loss/used_negatives" in trainer.callback_metrics
        assert len(logger.values("loss/used_neg_sim")) == (0 if copies else 4), type(loss).__name__
