"""The evaluation schedule both evaluating callbacks share (``callbacks/schedule.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from lightning.pytorch.trainer.states import TrainerFn

from callbacks import EmbeddingMetrics, KNNMonitor
from callbacks.schedule import evaluation_due
from ssl_app.errors import ConfigError


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_a_bad_every_n_epochs_is_one_message_on_both_callbacks(bad):
    """Catches the two callbacks checking the option two ways again (EmbeddingMetrics took True and
    KNNMonitor refused it; the messages differed), or one of them not checking it at all."""
    messages = []
    for callback in (KNNMonitor, EmbeddingMetrics):
        with pytest.raises(ConfigError) as refused:
            callback(every_n_epochs=bad)
        messages.append(str(refused.value))
    assert messages == [f"{name}: every_n_epochs must be an int >= 1, got {bad!r}" for name in ("KNNMonitor", "EmbeddingMetrics")]


def test_an_evaluation_is_due_after_every_n_th_fit_epoch_and_always_outside_fit():
    """Catches counting epochs from 0 (the first evaluation after epoch 1 of 2, not 2), gating
    ``validate``/``test`` by the epoch, and evaluating in the sanity check."""

    def due(fn: str) -> list[int]:
        state = SimpleNamespace(fn=TrainerFn(fn))
        return [e for e in range(6) if evaluation_due(SimpleNamespace(sanity_checking=False, current_epoch=e, state=state), 3)]

    assert due("fit") == [2, 5]
    assert due("validate") == due("test") == [0, 1, 2, 3, 4, 5]
    assert not evaluation_due(SimpleNamespace(sanity_checking=True, current_epoch=2, state=None), 1)
