"""Chance values, for every registered loss (each of its ``examples``): the value when every
similarity is equal, as the loss declares it (``ContrastiveLoss.chance_value``, ``stats["chance"]``).

The definition is the test: ``loss(c · ones, masks)`` equals the declared ``stats["chance"]`` for
one and several positives, whatever the common similarity c; a loss that declares none reports
none. Each loss's closed form (``log(|P| + K)`` for InfoNCE, the kept count of a hard loss, 0 for
Simple) is a formula test in that loss's own file, with the helpers below.
"""

from __future__ import annotations

import math

import pytest
import torch

from ssl_app.losses import MaskedSimilarities

N, M = 6, 14
FEATURES = 4


def masks(several_positives: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged masks with ignored entries: every anchor has a different number of negatives, anchor 5
    has no positive (left out of every mean); with ``several_positives`` anchors 1–3 have 2–4."""
    pos = torch.zeros(N, M, dtype=torch.bool)
    pos[torch.arange(N), torch.arange(N) + 6] = True
    pos[5] = False
    if several_positives:
        pos[1, 12] = pos[2, [12, 13]] = pos[3, [0, 12, 13]] = True
    neg = torch.zeros(N, M, dtype=torch.bool)
    for i, count in enumerate([8, 7, 6, 5, 4, 3]):
        free = [j for j in range(M) if not pos[i, j] and j != i]
        neg[i, free[:count]] = True
    return pos, neg


def log_candidates(pos: torch.Tensor, used: list[int]) -> float:
    """mean over anchors with a positive of log(|P(i)| + used(i)), counted in Python."""
    terms = [math.log(int(pos[i].sum()) + used[i]) for i in range(N) if pos[i].any()]
    return sum(terms) / len(terms)


def negatives(neg: torch.Tensor) -> list[int]:
    return [int(n) for n in neg.sum(dim=1)]


def call(loss_fn, sim: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, with_stats: bool = True):
    """The loss on these masks, with anchor features and labels for a loss that reads them."""
    anchors = {}
    if loss_fn.needs_anchor_features:
        g = torch.Generator().manual_seed(0)
        anchors = {"anchor_features": torch.randn(N, FEATURES, generator=g), "anchor_labels": torch.arange(N) % 3}
    return loss_fn(MaskedSimilarities(sim, pos, neg, **anchors), with_stats)


@pytest.mark.parametrize("several_positives", [False, True], ids=["one_positive", "several_positives"])
def test_the_declared_chance_value_is_the_loss_on_an_all_equal_similarity_matrix(loss_case, several_positives):
    """Catches a chance value that is not the loss at "every similarity equal" (log(1 + K) hard-coded
    where there are several positives, all negatives counted by a hard loss that keeps K, anchors
    without a positive counted in the mean), a loss whose value there still moves with the common
    similarity while it declares a chance value, and a chance value reported without ``with_stats``
    or by a loss that declares none."""
    loss_fn = loss_case.ready(FEATURES)
    pos, neg = masks(several_positives)
    for c in (-0.4, 0.9):
        sim = torch.full((N, M), c)
        result = call(loss_fn, sim, pos, neg)
        assert call(loss_fn, sim, pos, neg, with_stats=False).stats == {}
        if loss_fn.chance_value(pos, neg) is None:
            assert "chance" not in result.stats
            continue
        chance = result.stats["chance"]
        assert chance.dim() == 0 and not chance.requires_grad
        assert result.value.item() == pytest.approx(chance.item(), abs=1e-5), f"c = {c}"


def test_a_batch_without_an_anchor_with_a_positive_has_a_nan_chance_value_not_zero(loss_case):
    """Catches 0 declared where the loss has no chance value for this batch: no anchor has a
    positive (the loss is then 0, so a SupCon epoch of such batches would read as "at chance")."""
    loss_fn = loss_case.ready(FEATURES)
    pos, neg = masks(several_positives=False)
    chance = loss_fn.chance_value(torch.zeros_like(pos), neg)
    assert chance is None or math.isnan(chance.item())
