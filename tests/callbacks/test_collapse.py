"""The collapse alarm: every rule at its threshold, histories, non-finite embeddings, resume, a real run."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from callbacks import EmbeddingMetrics
from callbacks.collapse import CollapseAlarm, CollapseCriteria, CollapseEvidence
from ssl_app.losses import InfoNCE
from ssl_app.losses.base import ContrastiveLoss
from ssl_app.methods import SimCLR
from ssl_app.optim import Optimization
from tests.callbacks.helpers import VAL_SIZE, RecordingLogger, tiny_data, tiny_model, tiny_trainer

NAN = math.nan
OFF = CollapseCriteria(None, None, 1.0, None, None)  # every optional rule disabled


def evidence(uniformity=3.0, alignment=0.5, pos_sim=0.8, neg_sim=0.7, **extra) -> CollapseEvidence:
    """A healthy trained model's values unless overridden."""
    return CollapseEvidence(uniformity=uniformity, alignment=alignment, pos_sim=pos_sim, neg_sim=neg_sim, **extra)


def collapsed(criteria: CollapseCriteria, e: CollapseEvidence, best: float = NAN) -> bool:
    return bool(criteria.reasons(e, best))


# --------------------------------------------------------------------------- each rule at its threshold
def test_uniformity_rule_is_strictly_below():
    only = CollapseCriteria(uniformity_below=0.05, alignment_below=None, similarity_above=None, uniformity_drop=None)
    assert collapsed(only, evidence(uniformity=0.0499))
    assert not collapsed(only, evidence(uniformity=0.05))
    assert not collapsed(only, evidence(uniformity=0.0501))


def test_alignment_rule_needs_both_strictly_below():
    only = CollapseCriteria(
        None, alignment_below=1e-3, alignment_uniformity_below=1.0, similarity_above=None, uniformity_drop=None
    )
    assert collapsed(only, evidence(alignment=0.00099, uniformity=0.99))
    assert not collapsed(only, evidence(alignment=1e-3, uniformity=0.99))  # alignment at the threshold
    assert not collapsed(only, evidence(alignment=0.00099, uniformity=1.0))  # uniformity at its threshold
    assert not collapsed(only, evidence(alignment=0.0011, uniformity=0.5))
    assert not collapsed(only, evidence(alignment=0.0, uniformity=3.5))  # perfectly invariant, uniform


def test_similarity_rule_is_at_or_above_for_both():
    only = CollapseCriteria(None, None, 1.0, similarity_above=0.995, uniformity_drop=None)
    assert collapsed(only, evidence(pos_sim=0.995, neg_sim=0.995))  # both exactly at the threshold
    assert collapsed(only, evidence(pos_sim=1.0, neg_sim=0.999))
    assert not collapsed(only, evidence(pos_sim=0.9949, neg_sim=1.0))
    assert not collapsed(only, evidence(pos_sim=1.0, neg_sim=0.9949))
    assert not collapsed(only, evidence(pos_sim=1.0, neg_sim=NAN))  # NaN never triggers (min() would)
    assert not collapsed(only, evidence(pos_sim=NAN, neg_sim=1.0))


def test_drop_rule_thresholds():
    only = CollapseCriteria(None, None, 1.0, None, uniformity_drop=0.75, drop_min_best=1.0, drop_similarity=0.99)
    # best 2.0: the threshold is 0.25 x 2.0 = 0.5, exactly representable
    assert collapsed(only, evidence(uniformity=0.4999, neg_sim=0.99), best=2.0)
    assert not collapsed(only, evidence(uniformity=0.5, neg_sim=0.99), best=2.0)  # at the threshold
    assert not collapsed(only, evidence(uniformity=0.4999, neg_sim=0.9899), best=2.0)  # negatives not close enough
    # the best must have reached drop_min_best (1.0): at it counts, just below does not
    assert collapsed(only, evidence(uniformity=0.2499, neg_sim=0.999), best=1.0)
    assert not collapsed(only, evidence(uniformity=0.2499, neg_sim=0.999), best=0.9999)
    assert not collapsed(only, evidence(uniformity=0.0, neg_sim=1.0), best=NAN)  # no history yet


def test_nonfinite_embeddings_always_count_as_collapsed():
    assert OFF.reasons(evidence(nonfinite=1, total=90)) == ["1 of 90 embeddings are non-finite (diverged)"]
    assert OFF.reasons(evidence(nonfinite=0, total=90)) == []


@pytest.mark.parametrize(
    "values,expected",
    [
        ((0.0, 0.0, 1.0, 1.0), True),  # a single point
        ((0.01, 2.1, 0.995, 0.999), True),  # collapse onto a few points: uniformity stays high
        ((0.026, 0.07, 0.987, 0.992), False),  # random ResNet-18 (measured)
        ((0.19, 0.56, 0.90, 0.98), False),  # random small CNN: hardest negatives above positives
        ((0.4, 3.0, 0.8, 0.7), False),  # trained
    ],
)
def test_default_criteria_on_measured_points(values, expected):
    alignment, uniformity, pos_sim, neg_sim = values
    e = evidence(uniformity=uniformity, alignment=alignment, pos_sim=pos_sim, neg_sim=neg_sim)
    assert collapsed(CollapseCriteria(), e) is expected
    assert OFF.reasons(e) == []


# --------------------------------------------------------------------------- histories
def first_alarm(history: list[tuple[float, float]], criteria: CollapseCriteria | None = None):
    """Feed (uniformity, top-k negative similarity) per epoch; the first epoch that alarms, or None."""
    alarm = CollapseAlarm(criteria or CollapseCriteria())
    for epoch, (uniformity, neg_sim) in enumerate(history):
        e = evidence(uniformity=uniformity, alignment=0.05, pos_sim=0.97, neg_sim=neg_sim)
        if alarm.check(e, epoch):
            return epoch
    return None


SUDDEN = [(0.3, 0.98), (1.6, 0.95), (2.6, 0.9), (0.004, 0.9999)]
# CIFAR-10 shape: spreads, then loses > 90% of its best within five epochs, negatives at ~0.998
SLOW = [(0.35, 0.98), (1.2, 0.95), (2.1, 0.93), (2.4, 0.96), (1.5, 0.985), (0.9, 0.993), (0.55, 0.997), (0.2, 0.998)]
FRESH = [(0.07, 0.992)]  # a random ResNet-18, evaluated before it learnt anything
FRESH_SMALL_CNN = [(0.56, 0.98), (0.14, 0.995), (0.3, 0.99)]  # early wobble below any real best
HEALTHY = [(0.3, 0.98), (0.9, 0.96), (1.7, 0.93), (2.5, 0.9), (2.9, 0.88), (2.7, 0.9), (3.1, 0.87), (2.8, 0.89)]


def test_sudden_collapse_alarms_at_once():
    assert first_alarm(SUDDEN) == 3


def test_slow_collapse_alarms_and_the_fixed_thresholds_alone_never_did():
    assert first_alarm(SLOW) == 6  # 0.55 < 0.25 x 2.4 with negatives at 0.997
    static_only = CollapseCriteria(uniformity_drop=None)
    assert first_alarm(SLOW, static_only) is None


def test_fresh_network_and_healthy_run_are_silent():
    assert first_alarm(FRESH) is None
    assert first_alarm(FRESH_SMALL_CNN) is None
    assert first_alarm(HEALTHY) is None


def test_best_so_far_is_from_earlier_evaluations_and_ignores_unrecorded_and_nan():
    alarm = CollapseAlarm(CollapseCriteria())
    alarm.check(evidence(uniformity=2.0), epoch=0)
    alarm.check(evidence(uniformity=NAN), epoch=1)
    alarm.check(evidence(uniformity=3.5), epoch=2, record=False)  # e.g. a validate() call
    assert (alarm.best_uniformity, alarm.best_epoch) == (2.0, 0)
    assert len(alarm.history) == 2


def test_history_survives_state_dict_round_trip():
    callback = EmbeddingMetrics()
    for epoch, (uniformity, neg_sim) in enumerate(SLOW[:4]):
        callback.alarm.check(evidence(uniformity=uniformity, neg_sim=neg_sim), epoch)
    state = callback.state_dict()
    resumed = EmbeddingMetrics()
    resumed.load_state_dict(state)
    assert resumed.alarm.best_uniformity == 2.4 and resumed.alarm.best_epoch == 3
    assert resumed.alarm.history == callback.alarm.history
    assert resumed.alarm.check(evidence(uniformity=0.5, neg_sim=0.998), epoch=4)  # alarms: the best was kept
    fresh = EmbeddingMetrics()
    assert not fresh.alarm.check(evidence(uniformity=0.5, neg_sim=0.998), epoch=4)


def test_history_of_other_inputs_is_not_loaded():
    callback = EmbeddingMetrics(uniformity_inputs="augmented")
    callback.alarm.check(evidence(uniformity=2.4), epoch=0)
    resumed = EmbeddingMetrics()
    assert resumed.state_key != callback.state_key
    with pytest.warns(UserWarning, match="other uniformity_inputs"):
        resumed.load_state_dict(callback.state_dict())
    assert math.isnan(resumed.alarm.best_uniformity)


def test_history_is_saved_in_checkpoints_and_restored_on_resume(tmp_path):
    data = tiny_data()
    first = EmbeddingMetrics(log_histograms=False)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    tiny_trainer([first, checkpoint], max_epochs=1, enable_checkpointing=True).fit(tiny_model(), data)
    saved = torch.load(tmp_path / "last.ckpt", weights_only=False)["callbacks"][first.state_key]
    assert [entry["epoch"] for entry in saved["history"]] == [0]
    resumed = EmbeddingMetrics(log_histograms=False)
    trainer = tiny_trainer([resumed], max_epochs=2)
    trainer.fit(tiny_model(), data, ckpt_path=tmp_path / "last.ckpt")
    assert [entry["epoch"] for entry in resumed.alarm.history] == [0, 1]
    assert resumed.alarm.history[0] == saved["history"][0]


# --------------------------------------------------------------------------- non-finite embeddings
class NaNRowsSimCLR(SimCLR):
    """The first sample of every batch embeds to NaN (a diverging network)."""

    def embed(self, images):
        z = super().embed(images)
        return torch.cat([torch.full_like(z[:1], float("nan")), z[1:]])


def test_nan_embeddings_are_reported_not_a_crash(caplog):
    logger = RecordingLogger()
    callback = EmbeddingMetrics(log_histograms=False)
    model, data = tiny_model(NaNRowsSimCLR), tiny_data()
    with caplog.at_level(logging.WARNING), pytest.warns(UserWarning, match=r"embeddings are non-finite \(diverged\)") as warned:
        tiny_trainer([callback], logger=logger).validate(model, data, verbose=False)
    batches = -(-VAL_SIZE // data.batch_size)
    # one NaN row per embed() call and batch: the clean pass embeds its batch in one call, SimCLR
    # both views in one; of 3 embeddings per sample (clean + 2 views)
    bad, total = 2 * batches, 3 * VAL_SIZE
    assert any(f"{bad} of {total} embeddings are non-finite (diverged)" in str(w.message) for w in warned)
    assert logger.values("metrics/nonfinite") == [float(bad)]
    assert logger.values("metrics/collapsed") == [1.0]
    uniformity = logger.values("metrics/uniformity")
    assert len(uniformity) == 1 and math.isfinite(uniformity[0])  # computed on the finite rows
    assert "Representation collapse at epoch 0" in caplog.text and "non-finite" in caplog.text


def test_all_nan_embeddings_log_the_count_and_the_flag_only():
    class AllNaN(SimCLR):
        def embed(self, images):
            return torch.full_like(super().embed(images), float("nan"))

    logger = RecordingLogger()
    with pytest.warns(UserWarning, match="non-finite"):
        tiny_trainer([EmbeddingMetrics(log_histograms=False)], logger=logger).validate(
            tiny_model(AllNaN), tiny_data(), verbose=False
        )
    assert logger.values("metrics/nonfinite") == [float(3 * VAL_SIZE)]
    assert logger.values("metrics/collapsed") == [1.0]
    assert logger.values("metrics/uniformity") == [] and logger.values("metrics/alignment") == []


# --------------------------------------------------------------------------- a run that collapses
class CollapsesAfter(ContrastiveLoss):
    """InfoNCE for the first ``steps`` optimiser steps, then only a pull on positives: no push
    keeps the embeddings apart, so they fall together."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps, self.calls, self.info_nce = steps, 0, InfoNCE(temperature=0.5)

    def forward(self, sim, pos_mask, neg_mask):
        self.calls += 1
        if self.calls <= self.steps:
            loss = self.info_nce(sim, pos_mask, neg_mask)
            self.last_stats = self.info_nce.last_stats
            return loss
        return -sim[pos_mask].mean()


def test_a_run_that_collapses_is_reported_by_the_alarm(caplog):
    logger = RecordingLogger()
    # the tiny 16-d model spreads to ~0.36 (not the 1.0 a real network passes), so lower drop_min_best;
    # without batch norm in the head nothing holds the embeddings apart once the push is gone
    callback = EmbeddingMetrics(log_histograms=False, collapse_drop_min_best=0.3)
    optim = Optimization(lr=0.2, schedule="constant", weight_decay=0.0)
    model = tiny_model(loss=CollapsesAfter(steps=2), proj_batch_norm=False, optim=optim)
    with caplog.at_level(logging.WARNING):
        tiny_trainer([callback], logger=logger, max_epochs=3).fit(model, tiny_data())
    uniformity = logger.values("metrics/uniformity")
    assert uniformity[0] > 0.3 and uniformity[-1] < 0.25 * uniformity[0]
    assert logger.values("metrics/collapsed")[0] == 0.0 and logger.values("metrics/collapsed")[-1] == 1.0
    assert callback.collapsed_at is not None and callback.collapsed_at >= 1
    message = next(r.getMessage() for r in caplog.records if "Representation collapse" in r.getMessage())
    assert "fell below 0.25 x its best" in message
