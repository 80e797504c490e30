"""The collapse alarm: every rule at its threshold, histories, non-finite embeddings, resume, a real run,
a run that does not learn."""

from __future__ import annotations

import io
import json
import logging
import math
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from callbacks import EmbeddingMetrics
from callbacks.collapse import ChanceGap, CollapseAlarm, CollapseCriteria, CollapseEvidence, LossEvidence, reasons
from ssl_app.losses import InfoNCE
from ssl_app.losses.base import ContrastiveLoss, LossTerms
from ssl_app.methods import SimCLR
from ssl_app.optim import Optimization
from tests.callbacks.helpers import VAL_SIZE, RecordingLogger, tiny_data, tiny_model, tiny_trainer

NAN = math.nan
OFF = CollapseCriteria(
    None, None, 1.0, None, None, chance_tolerance=None, concentrating_evaluations=None
)  # every optional rule off


def evidence(uniformity=3.0, alignment=0.5, pos_sim=0.8, neg_sim=0.7, **extra) -> CollapseEvidence:
    """A healthy trained model's values unless overridden."""
    return CollapseEvidence(uniformity=uniformity, alignment=alignment, pos_sim=pos_sim, neg_sim=neg_sim, **extra)


def collapsed(criteria: CollapseCriteria, e: CollapseEvidence, best: float = NAN) -> bool:
    return bool(reasons(criteria.judge(e, best)))


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
    assert reasons(OFF.judge(evidence(nonfinite=1, total=90))) == ["1 of 90 embeddings are non-finite (diverged)"]
    assert reasons(OFF.judge(evidence(nonfinite=0, total=90))) == []


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
    assert reasons(OFF.judge(e)) == []


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
    static_only = CollapseCriteria(uniformity_drop=None, concentrating_evaluations=None)
    assert first_alarm(SLOW, static_only) is None
    # its three falls in a row (2.4 -> 0.55) also count as concentrating, at the same epoch
    assert first_alarm(SLOW, CollapseCriteria(uniformity_drop=None)) == 6


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
    assert "Representation collapse at epoch 0 (diverged" in caplog.text and "non-finite" in caplog.text


def test_nan_embeddings_during_fit_stop_the_run_as_diverged_naming_the_step():
    """Catches the run that reported 1500/1500 non-finite embeddings at epoch 0 and trained on
    (its epoch checkpoint then held ``inf``): during ``fit`` the run stops, by default, before the
    epoch's checkpoint, and the error names the epoch, the step and whether the state went bad."""
    from ssl_app.errors import NonFiniteError

    with pytest.raises(NonFiniteError, match=r"embeddings are non-finite at epoch 0, step 2: the run diverged") as error:
        tiny_trainer([EmbeddingMetrics(log_histograms=False)]).fit(tiny_model(NaNRowsSimCLR), tiny_data())
    # without NumericalHealth in this trainer the NaN loss reached the weights: the first bad tensor is named
    assert "backbone.0.weight holds NaN or infinite values" in str(error.value) and not error.value.state_is_good
    # opted out: the finite ones are evaluated and training goes on to the end
    trainer = tiny_trainer([EmbeddingMetrics(log_histograms=False, stop_on_nonfinite=False)])
    with pytest.warns(UserWarning, match="non-finite"):
        trainer.fit(tiny_model(NaNRowsSimCLR), tiny_data())
    assert trainer.current_epoch == trainer.max_epochs


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

    def terms(self, handover, tau, with_stats):
        self.calls += 1
        if self.calls <= self.steps:
            return self.info_nce.terms(handover, 0.5, with_stats)
        return LossTerms(-handover.sim[handover.pos_mask].mean())


def test_a_run_that_collapses_is_reported_by_the_alarm(caplog):
    logger = RecordingLogger()
    # the tiny 16-d model spreads to ~0.2 in its two InfoNCE steps (not the 1.0 a real network passes),
    # so lower drop_min_best; without batch norm in the head nothing holds the embeddings apart once
    # the push is gone
    callback = EmbeddingMetrics(log_histograms=False, collapse=CollapseCriteria(drop_min_best=0.15))
    optim = Optimization(lr=0.2, schedule="constant", weight_decay=0.0)
    model = tiny_model(loss=CollapsesAfter(steps=2), proj_batch_norm=False, optim=optim)
    with caplog.at_level(logging.WARNING):
        tiny_trainer([callback], logger=logger, max_epochs=3).fit(model, tiny_data())
    uniformity = logger.values("metrics/uniformity")
    assert uniformity[0] > 0.15 and uniformity[-1] < 0.25 * uniformity[0]
    assert logger.values("metrics/collapsed")[0] == 0.0 and logger.values("metrics/collapsed")[-1] == 1.0
    assert callback.collapsed_at is not None and callback.collapsed_at >= 1
    message = next(r.getMessage() for r in caplog.records if "Representation collapse" in r.getMessage())
    assert "fell below 0.25 x its best" in message


# --------------------------------------------------------------------------- a run that does not learn
# The real run that escaped the first two modes: loss at log(1 + K) from the third epoch on,
# uniformity sliding 1.3 -> 0.38 over ten epochs (a steady slide between those two measured ends),
# positives at 0.97 (alignment 2 - 2 x 0.97), top-10 negatives at 0.995.
NOT_LEARNING = [1.30, 1.10, 0.95, 0.80, 0.68, 0.58, 0.50, 0.44, 0.40, 0.38]
AT_CHANCE_FROM = 2
ONLY_CONCENTRATING = CollapseCriteria(None, None, 1.0, None, None, chance_tolerance=None)
ONLY_CHANCE = CollapseCriteria(None, None, 1.0, None, None, concentrating_evaluations=None)


def not_learning(uniformity: float) -> CollapseEvidence:
    return evidence(uniformity=uniformity, alignment=0.06, pos_sim=0.97, neg_sim=0.995)


def at_chance(chance: float = math.log(256), gap: float = 1e-3) -> LossEvidence:
    return LossEvidence(steps=8, max_gap=gap, loss=chance + gap, chance=chance)


def replay(alarm: CollapseAlarm, uniformities, losses=None) -> list[dict[str, list[str]]]:
    """Judge one evaluation per epoch (with its epoch's loss evidence, if any); the modes of each."""
    return [
        alarm.judge(not_learning(u), epoch, loss=None if losses is None else losses[epoch])
        for epoch, u in enumerate(uniformities)
    ]


def test_the_run_that_did_not_learn_escaped_the_old_modes_and_is_caught_by_both_new_triggers():
    """Catches the escape itself: with only the sudden and progressive rules (the old alarm) this
    run is never collapsed; the concentrating rule fires once the slide passes 50% (epoch 5:
    0.58 <= 0.65), and the loss rule from the first epoch at chance."""
    old = CollapseCriteria(chance_tolerance=None, concentrating_evaluations=None)
    assert not any(replay(CollapseAlarm(old), NOT_LEARNING))
    modes = replay(CollapseAlarm(CollapseCriteria()), NOT_LEARNING)
    assert [sorted(m) for m in modes[:5]] == [[]] * 5
    assert all("concentrating" in m for m in modes[5:])
    losses = [at_chance() if epoch >= AT_CHANCE_FROM else LossEvidence(8, 0.2) for epoch in range(len(NOT_LEARNING))]
    alarm = CollapseAlarm(CollapseCriteria())
    modes = replay(alarm, NOT_LEARNING, losses)
    assert [epoch for epoch, m in enumerate(modes) if "loss_at_chance" in m] == list(range(AT_CHANCE_FROM, 10))
    summary = alarm.summary()
    assert summary["mode"] == "loss_at_chance" and summary["since_epoch"] == AT_CHANCE_FROM
    assert summary["modes"] == {"loss_at_chance": AT_CHANCE_FROM, "concentrating": 5}
    assert "chance" in summary["reasons"][0]


def test_concentrating_rule_at_its_thresholds():
    """Catches an off-by-one in the number of falls, a drop measured from the wrong evaluation,
    a plateau or a rise counted as a fall, and the negatives' condition left out."""

    def fires(earlier, now, neg_sim=0.99, criteria=ONLY_CONCENTRATING):
        e = evidence(uniformity=now, neg_sim=neg_sim)
        return bool(reasons(criteria.judge(e, earlier=earlier)))

    assert fires([2.0, 1.6, 1.2], 1.0)  # three falls, exactly 50% below the 2.0 they started from
    assert not fires([2.0, 1.6, 1.2], 1.0001)  # 49.99%
    assert not fires([1.6, 1.2], 0.5)  # only two falls, however deep
    assert fires([3.0, 2.0, 1.6, 1.2], 1.0)  # a longer run: measured from its start (3.0), not a window
    assert not fires([2.0, 1.6, 1.7, 1.2], 0.4)  # the rise to 1.7 restarts the count: two falls since
    assert not fires([2.0, 1.6, 1.6, 1.0], 0.5)  # a plateau is no fall
    assert not fires([2.0, NAN, 1.2, 1.0], 0.5)  # a NaN evaluation ends the run
    assert not fires([2.0, 1.6, 1.2], 0.4, neg_sim=0.9899)  # negatives not close enough
    four = CollapseCriteria(None, None, 1.0, None, None, chance_tolerance=None, concentrating_evaluations=4)
    assert not fires([2.0, 1.6, 1.2], 0.4, criteria=four) and fires([2.4, 2.0, 1.6, 1.2], 0.4, criteria=four)
    deeper = CollapseCriteria(None, None, 1.0, None, None, chance_tolerance=None, concentrating_drop=0.8)
    assert not fires([2.0, 1.6, 1.2], 0.5, criteria=deeper) and fires([2.0, 1.6, 1.2], 0.39, criteria=deeper)


def test_healthy_and_fresh_runs_never_look_concentrating():
    """Catches a concentrating rule that fires on a healthy run's wobble (HEALTHY: one fall, then a
    rise), on a fresh network's early drop (FRESH_SMALL_CNN) or on a long, shallow slide of a
    trained model with near-1 negatives (a 25% fall over three evaluations)."""
    for history in (HEALTHY, FRESH_SMALL_CNN, [(1.2, 0.995), (1.1, 0.995), (1.0, 0.995), (0.9, 0.995)]):
        assert first_alarm(history, ONLY_CONCENTRATING) is None, history
    assert first_alarm([(u, 0.98) for u in NOT_LEARNING], ONLY_CONCENTRATING) is None  # negatives at 0.98: no


def test_loss_at_chance_rule_thresholds_and_epoch_zero():
    """Catches a tolerance compared the wrong way or without its max(|chance|, 1) scale, a judgement
    on no evidence (no logged step, or a NaN loss), and epoch 0 judged (a fresh network starts at
    chance)."""

    def fires(loss, epoch=1, criteria=ONLY_CHANCE):
        return "loss_at_chance" in CollapseAlarm(criteria).judge(evidence(), epoch, loss=loss)

    assert fires(LossEvidence(steps=4, max_gap=0.01)) and not fires(LossEvidence(steps=4, max_gap=0.0101))
    assert not fires(LossEvidence(steps=0, max_gap=0.0)) and not fires(LossEvidence(steps=4, max_gap=NAN))
    assert not fires(at_chance(), epoch=0) and fires(at_chance(), epoch=1)
    assert not fires(at_chance(), criteria=CollapseCriteria(None, None, 1.0, None, None, chance_tolerance=None))


def test_chance_gap_accumulates_an_epoch_and_is_relative_to_max_chance_1():
    """Catches a gap that is not relative (K = 255: 0.05 nats is inside 1% of log 256 = 5.55, and a
    healthy τ = 1 run 0.5 nats below is 9% away), that is not relative to max(|chance|, 1) (the
    Simple loss's chance is 0), an epoch judged on its last step only, NaN chance steps counted,
    and an accumulator not emptied by reset."""
    chance = torch.tensor(math.log(256))
    gap = ChanceGap()
    assert gap.read().steps == 0  # nothing added yet: nothing to judge
    for delta in (0.05, -0.03, 0.0):
        gap.add(chance + delta, chance)
    gap.add(torch.tensor(1.0), torch.tensor(NAN))  # a batch without a chance value: left out
    read = gap.read()
    assert read.steps == 3 and read.max_gap == pytest.approx(0.05 / math.log(256), rel=1e-5)
    assert read.loss == pytest.approx(math.log(256) + 0.02 / 3, rel=1e-5) and read.chance == pytest.approx(math.log(256))
    assert CollapseCriteria()._at_chance(read)
    gap.add(chance - 0.5, chance)  # one step of a learning network in the epoch
    assert not CollapseCriteria()._at_chance(gap.read())
    gap.reset()
    gap.add(torch.tensor(0.009), torch.tensor(0.0))  # Simple: chance 0, so the scale is 1
    assert gap.read().max_gap == pytest.approx(0.009) and CollapseCriteria()._at_chance(gap.read())
    gap.add(torch.tensor(NAN), torch.tensor(0.0))  # a NaN loss: never at chance
    assert math.isnan(gap.read().max_gap) and not CollapseCriteria()._at_chance(gap.read())


def test_chance_gap_combines_every_rank():
    """Catches ranks judging only their own steps (under DDP they could disagree and one stop alone):
    the worst gap over ranks and the summed steps."""

    class TwoRanks:
        world_size = 2

        def all_gather(self, values):
            other = torch.tensor([0.2, 3.0, 3.0, 3.0])  # rank 1: three steps, one far from chance
            return torch.stack([values, other])

    gap = ChanceGap()
    gap.add(torch.tensor(1.05), torch.tensor(1.0))  # rank 0: one step, gap 0.05
    read = gap.read(TwoRanks())
    assert read.steps == 4 and read.max_gap == pytest.approx(0.2) and read.loss == pytest.approx(4.05 / 4)


def test_the_callback_judges_each_epoch_on_its_own_logged_steps():
    """Catches evidence carried over from an earlier epoch (no reset at the epoch's start: one
    learning step of epoch 1 would hide a stuck epoch 2 for ever) and steps without diagnostics
    (``loss_and_chance`` None) counted."""
    callback, module = EmbeddingMetrics(), SimpleNamespace(loss_and_chance=None)
    chance = torch.tensor(math.log(31))

    def epoch(*losses):
        callback.on_train_epoch_start(None, module)
        for loss in losses:
            module.loss_and_chance = None if loss is None else (torch.tensor(loss), chance)
            callback.on_train_batch_end(None, module, None, None, 0)
        return callback._chance_gap.read()

    assert not CollapseCriteria()._at_chance(epoch(2.9, math.log(31)))  # epoch 1: still learning
    stuck = epoch(math.log(31), None, math.log(31) + 0.01)  # epoch 2: at chance; the unlogged step is no step
    assert stuck.steps == 2 and CollapseCriteria()._at_chance(stuck)


def test_summary_is_json_names_the_first_mode_and_survives_a_resume():
    """Catches a summary that is not plain JSON, that names the latest rather than the first mode,
    that moves ``since_epoch`` forward while the mode keeps holding, or that is lost on resume
    (not in the callback's checkpoint state)."""
    callback = EmbeddingMetrics()
    assert callback.collapse_summary() is None
    callback.alarm.judge(evidence(uniformity=2.0), 0)
    callback.alarm.judge(evidence(uniformity=2.0), 1, loss=at_chance())
    callback.alarm.judge(evidence(uniformity=0.01), 2, loss=at_chance())  # sudden joins in
    summary = callback.collapse_summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["mode"] == "loss_at_chance" and summary["since_epoch"] == 1
    assert summary["modes"] == {"sudden": 2, "loss_at_chance": 1}
    resumed = EmbeddingMetrics()
    resumed.load_state_dict(torch.load(io_round_trip(callback.state_dict()), weights_only=False))
    assert resumed.collapse_summary() == summary


def io_round_trip(state) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


class ChanceSimCLR(SimCLR):
    """SimCLR whose training similarities are all equal (0 x sim: the loss sits at log(1 + K) and
    the encoder gets no gradient), while evaluation sees the untrained, not collapsed, encoder."""

    def contrast(self, batch):
        contrast = super().contrast(batch)
        if self.training:
            contrast.sim = contrast.sim * 0
        return contrast


def test_a_run_whose_loss_sits_at_chance_is_flagged_from_epoch_one(tmp_path, caplog):
    """Catches the loss evidence not reaching the alarm (the method's ``loss_and_chance``, the
    callback's per-step collection or its per-epoch read), epoch 0 judged, and a summary missing
    from the checkpoint."""
    logger = RecordingLogger()
    # The untrained tiny encoder is bunched below uniformity 0.05 (a sudden collapse from epoch 0),
    # so the embedding rules are off: only the loss can flag this run.
    off = dict(uniformity_below=None, alignment_below=None, similarity_above=None, uniformity_drop=None)
    callback = EmbeddingMetrics(log_histograms=False, collapse=CollapseCriteria(concentrating_evaluations=None, **off))
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = tiny_trainer([callback, checkpoint], logger=logger, max_epochs=3, log_every_n_steps=1, enable_checkpointing=True)
    with caplog.at_level(logging.WARNING):
        # an explicit loss: a copy of the lazy default loss would keep its diagnostics to itself
        trainer.fit(tiny_model(ChanceSimCLR, loss=InfoNCE(0.5)), tiny_data())
    assert logger.values("metrics/collapsed") == [0.0, 1.0]  # written when it changes
    chance = logger.values("loss/chance")  # constant: at the first step, then again at each epoch's last (a line)
    assert len(chance) == 1 + 3 and chance == pytest.approx([math.log(2 * 16 - 1)] * 4)  # batch 16: 1 positive + 30 negatives
    summary = callback.collapse_summary()
    assert summary["mode"] == "loss_at_chance" and summary["since_epoch"] == 1 and summary["modes"] == {"loss_at_chance": 1}
    assert "Representation collapse at epoch 1 (loss_at_chance)" in caplog.text
    saved = torch.load(tmp_path / "last.ckpt", weights_only=False)["callbacks"][callback.state_key]
    resumed = EmbeddingMetrics()
    resumed.load_state_dict(saved)
    assert resumed.collapse_summary() == summary


def test_validate_and_test_record_no_history():
    """Catches ``validate``/``test`` recording like ``fit`` (``record=True``): their evaluations of
    a better model would append to the history, raise the best uniformity the progressive rule
    compares with, and enter the collapse summary."""
    callback = EmbeddingMetrics(log_histograms=False)
    callback.alarm.judge(evidence(uniformity=0.01), epoch=0)  # a fit evaluation: recorded, sudden collapse
    before = callback.alarm.state_dict()
    logger = RecordingLogger()
    trainer = tiny_trainer([callback], logger=logger)
    model, data = tiny_model(), tiny_data()
    trainer.validate(model, data, verbose=False)
    trainer.test(model, data, verbose=False)
    uniformity = logger.values("metrics/uniformity")
    assert len(uniformity) == 2 and min(uniformity) > 0.01  # both evaluated, better than the recorded best
    after = callback.alarm.state_dict()
    assert after["history"] == before["history"] and after["best_uniformity"] == before["best_uniformity"] == 0.01
    assert after["modes"] == before["modes"]
