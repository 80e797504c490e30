"""Scalars written when they change (``ssl_app.io.changes.OnChange``)."""

from __future__ import annotations

import math

import torch

from ssl_app.io.changes import OnChange


class Collect:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics, step=None):
        self.rows.append((step, dict(metrics)))


def test_a_value_is_written_first_and_then_only_when_it_changes():
    """Catches a constant written at every step, a change missed, a tag's repeat hiding another
    tag's change, and NaN (never equal to itself) written again and again."""
    logger, changes = Collect(), OnChange()
    steps = [
        {"loss/chance": torch.tensor(5.5), "metrics/collapsed": 0.0},
        {"loss/chance": torch.tensor(5.5), "metrics/collapsed": 0.0},
        {"loss/chance": torch.tensor(5.5), "metrics/collapsed": 1.0},
        {"loss/chance": torch.tensor(math.nan), "metrics/collapsed": 1.0},
        {"loss/chance": torch.tensor(math.nan), "metrics/collapsed": 1.0},
    ]
    for step, values in enumerate(steps):
        changes.write([logger], values, step)
    assert [(step, sorted(row)) for step, row in logger.rows] == [
        (0, ["loss/chance", "metrics/collapsed"]),
        (2, ["metrics/collapsed"]),
        (3, ["loss/chance"]),
    ]
    assert logger.rows[0][1] == {"loss/chance": 5.5, "metrics/collapsed": 0.0} and math.isnan(logger.rows[2][1]["loss/chance"])


def test_held_values_are_written_again_at_the_epochs_end_so_a_constant_draws_a_line():
    """Catches a constant left as one dot in TensorBoard (issue 40: a fixed τ and the chance value), a held value
    written twice at one step, and a value that changed at the epoch's last step written again."""
    logger, changes = Collect(), OnChange()
    for step in range(3):
        changes.write([logger], {"loss/chance": 5.5, "loss/temperature": 0.5 if step < 2 else 0.2}, step)
    changes.hold([logger], 2)  # the epoch ends at step 2, where τ changed
    changes.hold([logger], 2)
    changes.hold([logger], 5)
    assert logger.rows == [
        (0, {"loss/chance": 5.5, "loss/temperature": 0.5}),
        (2, {"loss/temperature": 0.2}),
        (2, {"loss/chance": 5.5}),
        (5, {"loss/chance": 5.5, "loss/temperature": 0.2}),
    ]
