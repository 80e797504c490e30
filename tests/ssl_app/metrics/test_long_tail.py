"""ClassAccuracy's counts and the group accuracies against a hand computation."""

from __future__ import annotations

import pytest
import torch

from ssl_app.metrics import ClassAccuracy, group_accuracies
from ssl_app.metrics.long_tail import shot_groups

# Six classes with 150, 120, 60, 30, 10, 5 training images: many {0, 1}, medium {2, 3}, few {4, 5}.
TRAIN_COUNTS = [150, 120, 60, 30, 10, 5]
# (label, predicted class) of 13 evaluation samples; class 5 has none, one sample is unlabelled.
SAMPLES = [(0, 0), (0, 0), (0, 0), (0, 3), (1, 1), (1, 0), (2, 1), (2, 1), (2, 4), (3, 3), (4, 4), (4, 4), (-1, 2)]


def logits_of(samples: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.randn(len(samples), 6, generator=torch.Generator().manual_seed(0))
    for row, (_, predicted) in enumerate(samples):
        logits[row, predicted] = 10.0
    return logits, torch.tensor([label for label, _ in samples])


def test_the_groups_follow_the_literatures_thresholds():
    assert shot_groups(TRAIN_COUNTS) == ([0, 1], [2, 3], [4, 5])
    assert shot_groups([101, 100, 20, 19]) == ([0], [1, 2], [3])  # > 100 many, 20-100 medium, < 20 few
    assert shot_groups([5, 50], many_above=40, few_below=6) == ([1], [], [0])


def test_counts_and_group_accuracies_match_a_hand_computation():
    metric = ClassAccuracy(6)
    logits, labels = logits_of(SAMPLES)
    metric.update(logits[:5], labels[:5])  # two batches: the counts add up
    metric.update(logits[5:], labels[5:])
    correct, total = metric.compute()
    assert correct.tolist() == [3, 1, 0, 1, 2, 0] and total.tolist() == [4, 2, 3, 1, 2, 0]
    many, medium, few = shot_groups(TRAIN_COUNTS)
    values = group_accuracies(correct, total, {"many": many, "medium": medium, "few": few})
    assert values["top1"] == pytest.approx(7 / 12)  # pooled; the unlabelled sample is ignored
    # Mean of per-class accuracies (pooled would give 4/6 and 1/4); class 5 has no sample.
    assert values["many"] == pytest.approx((3 / 4 + 1 / 2) / 2)
    assert values["medium"] == pytest.approx((0 / 3 + 1 / 1) / 2)
    assert values["few"] == pytest.approx(2 / 2)


def test_a_group_without_classes_or_samples_is_left_out():
    correct, total = torch.tensor([1, 0, 0]), torch.tensor([2, 0, 0])
    values = group_accuracies(correct, total, {"many": [0], "medium": [], "few": [1, 2]})
    assert values == {"top1": 0.5, "many": 0.5}
    assert group_accuracies(torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long), {"many": [0, 1]}) == {}


def test_wrong_logit_width_is_named():
    with pytest.raises(ValueError, match=r"expected logits \[B, 6\] or classes \[B\], got \(2, 5\)"):
        ClassAccuracy(6).update(torch.zeros(2, 5), torch.zeros(2, dtype=torch.long))
