"""Chance values: each loss's value when every similarity is equal, as it declares it (``chance``).

The definition is the test: ``loss(c · ones, masks)`` equals the declared ``stats["chance"]``
and a closed form counted here by hand, for one and several positives, hard top-K and quantile.
"""

from __future__ import annotations

import math

import pytest
import torch

from ssl_app.losses import HardContrastive, HardSimple, InfoNCE, MaskedSimilarities, PaCo, Simple, SupCon
from tests.helpers import loss_and_stats, loss_stats, loss_value

N, M = 6, 14


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


CASES = {
    "InfoNCE τ=0.1": (lambda: InfoNCE(0.1), lambda pos, neg: log_candidates(pos, negatives(neg))),
    "InfoNCE τ=1": (lambda: InfoNCE(1.0), lambda pos, neg: log_candidates(pos, negatives(neg))),
    "SupCon": (lambda: SupCon(0.1), lambda pos, neg: log_candidates(pos, negatives(neg))),
    "Hard top-3": (lambda: HardContrastive(0.5, num_negatives=3), lambda pos, neg: log_candidates(pos, [3] * N)),
    # all similarities tied: the quantile keeps every negative tied with its threshold
    "Hard quantile": (lambda: HardContrastive(0.5, quantile=0.3), lambda pos, neg: log_candidates(pos, negatives(neg))),
    "Simple": (lambda: Simple(), lambda pos, neg: 0.0),
    "HardSimple": (lambda: HardSimple(3), lambda pos, neg: 0.0),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("several_positives", [False, True], ids=["one_positive", "several_positives"])
@pytest.mark.parametrize("c", [-0.4, 0.9])
def test_chance_value_is_the_loss_on_an_all_equal_similarity_matrix(name, several_positives, c):
    """Catches a chance value that is not the loss at a uniform softmax: log(1 + K) hard-coded
    (wrong with several positives), all negatives counted for a hard loss (top-3 keeps 3), anchors
    without a positive counted in the mean, a log(K) without the positives, or 0 for Simple replaced
    by −c. Also that it is reported only when diagnostics are asked for (``with_stats``)."""
    build, closed_form = CASES[name]
    pos, neg = masks(several_positives)
    loss_fn = build()
    value, stats = loss_and_stats(loss_fn, torch.full((N, M), c), pos, neg)
    chance = stats["chance"]
    assert chance.dim() == 0 and not chance.requires_grad
    assert value.item() == pytest.approx(chance.item(), abs=1e-5)
    assert chance.item() == pytest.approx(closed_form(pos, neg), abs=1e-5)
    assert loss_fn(MaskedSimilarities(torch.full((N, M), c), pos, neg)).stats == {}  # without with_stats


@pytest.mark.parametrize(
    "build,kept",
    [
        (lambda: HardContrastive(0.5, num_negatives=3), lambda n: min(3, n)),
        (lambda: HardContrastive(0.5, quantile=0.3), lambda n: max(1, math.ceil(0.3 * n))),
    ],
    ids=["top-3", "quantile-0.3"],
)
def test_hard_chance_counts_the_negatives_this_step_kept(build, kept):
    """Catches a hard loss declaring InfoNCE's chance over all its negatives: on untied similarities
    the quantile keeps ceil(q·n), not n (a collapsed hard run would then sit log(n / ceil(q·n))
    nats below its "chance" and never be flagged)."""
    pos, neg = masks(several_positives=True)
    loss_fn = build()
    stats = loss_stats(loss_fn, torch.rand(N, M, generator=torch.Generator().manual_seed(0)), pos, neg)
    expected = log_candidates(pos, [kept(n) for n in negatives(neg)])
    assert stats["chance"].item() == pytest.approx(expected, abs=1e-5)


def test_losses_that_depend_on_the_common_similarity_declare_none():
    """Catches a chance value declared where there is none: Simple with a fixed λ gives
    c(λ|N| − 1), which moves with c, so a "0" would flag healthy runs (or miss stuck ones); PaCo's
    centre logits are no similarities."""
    pos, neg = masks(several_positives=False)
    simple = Simple(lam=0.5)
    at = [loss_value(simple, torch.full((N, M), c), pos, neg).item() for c in (0.2, 0.8)]
    assert at[0] != pytest.approx(at[1])  # the premise: no single value at "all equal"
    assert simple.chance_value(pos, neg) is None and "chance" not in loss_stats(simple, torch.full((N, M), 0.5), pos, neg)
    paco = PaCo(0.2, alpha=0.5, class_counts=[3, 3])
    stats = loss_stats(paco, torch.full((N, M), 0.5), pos, neg)
    assert paco.chance_value(pos, neg) is None and "chance" not in stats


def test_a_batch_without_a_chance_value_says_nan_not_zero():
    """Catches 0 declared where the loss has no chance value for this batch: no anchor with a
    positive (the loss is 0, so a SupCon epoch of such batches would read as "at chance"), or
    Simple with an anchor that has a positive but no negative (its L_i = −c)."""
    pos, neg = masks(several_positives=False)
    assert math.isnan(InfoNCE().chance_value(torch.zeros_like(pos), neg).item())
    lacking = neg.clone()
    lacking[0] = False
    assert math.isnan(Simple().chance_value(pos, lacking).item())
    assert Simple().chance_value(pos, neg).item() == 0.0
