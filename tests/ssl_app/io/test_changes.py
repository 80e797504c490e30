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
