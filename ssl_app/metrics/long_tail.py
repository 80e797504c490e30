"""Top-1 accuracy overall and per class-frequency group, the long-tail literature's evaluation.

For evaluation samples (x_i, y_i) and predictions ŷ_i (a classifier's argmax_c logits_ic, or a
kNN vote's class):

    correct_c = #{i : y_i = c, ŷ_i = c}      total_c = #{i : y_i = c}
    acc_c     = correct_c / total_c                         (per-class accuracy)
    top1      = Σ_c correct_c / Σ_c total_c                 (pooled over every sample)
    acc(G)    = mean_{c ∈ G, total_c > 0} acc_c             (a group: mean of its per-class accuracies)

Groups come from the *training* counts n_c (Liu et al. 2019; Kang et al. 2020): many-shot
n_c > 100, medium-shot 20 ≤ n_c ≤ 100, few-shot n_c < 20. On a balanced test set acc(G)
equals the pooled accuracy of G's samples; the per-class mean is the definition either way.
Samples labelled -1 are ignored. ``ClassAccuracy`` keeps ``correct_c``/``total_c`` as summed
torchmetrics states, so under DDP each rank counts its own shard and ``compute()`` adds them.
One definition for every source of predictions: ``callbacks.LongTailAccuracy`` (a classifier,
``lt/*``), ``callbacks.KNNMonitor`` (the kNN vote, ``metrics/knn_{many,medium,few}``) and
``ssl_app.evaluation.LinearProbe`` (``linear/{many,medium,few}``); ``check_thresholds``,
``named_groups`` and ``groups_line`` are their shared options, groups and setup line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ssl_app.checks import check_int
from ssl_app.errors import ConfigError

#: Many-shot classes have more than this many training images; few-shot ones fewer than
#: ``FEW_SHOT_BELOW``; medium-shot ones are in between (both bounds included).
MANY_SHOT_ABOVE = 100
FEW_SHOT_BELOW = 20
#: The groups' names, in the order ``shot_groups`` returns them (the suffix of each logged tag).
GROUPS = ("many", "medium", "few")


def shot_groups(
    counts: Sequence[int], many_above: int = MANY_SHOT_ABOVE, few_below: int = FEW_SHOT_BELOW
) -> tuple[list[int], list[int], list[int]]:
    """The classes with ``> many_above``, ``few_below … many_above`` and ``< few_below`` training images."""
    many = [c for c, n in enumerate(counts) if n > many_above]
    few = [c for c, n in enumerate(counts) if n < few_below]
    medium = [c for c, n in enumerate(counts) if few_below <= n <= many_above]
    return many, medium, few


def check_thresholds(many_shot_above: Any, few_shot_below: Any, who: str) -> tuple[int, int]:
    """Both thresholds as ints >= 0 with ``few_shot_below <= many_shot_above``; a ConfigError naming the option otherwise."""
    many_shot_above = check_int(many_shot_above, f"{who}: many_shot_above", minimum=0)
    few_shot_below = check_int(few_shot_below, f"{who}: few_shot_below", minimum=0)
    if few_shot_below > many_shot_above:
        raise ConfigError(f"{who}: few_shot_below ({few_shot_below}) must be <= many_shot_above ({many_shot_above})")
    return many_shot_above, few_shot_below


def named_groups(counts: Sequence[int], many_above: int, few_below: int) -> dict[str, list[int]]:
    """``{"many": [...], "medium": [...], "few": [...]}``: ``shot_groups`` by name."""
    return dict(zip(GROUPS, shot_groups(counts, many_above, few_below)))


def groups_line(who: str, prefix: str, groups: Mapping[str, Sequence[int]], many_above: int, few_below: int) -> str:
    """The line printed at setup: classes per group, and which ``<prefix><group>`` tags are not logged (no class)."""
    sizes = {name: len(classes) for name, classes in groups.items()}
    empty = [f"{prefix}{name}" for name, classes in groups.items() if not classes]
    return (
        f"{who}: {sum(sizes.values())} classes by training images: {sizes['many']} many-shot (>{many_above}), "
        f"{sizes['medium']} medium-shot ({few_below}–{many_above}), {sizes['few']} few-shot (<{few_below})"
        + (f"; not logged (no class): {', '.join(empty)}" if empty else "")
    )


class ClassAccuracy(Metric):
    """Per-class correct/total top-1 counts; ``compute()`` returns ``(correct, total)``, int64 ``[C]`` each.

    ``update(predictions, labels)`` takes logits [B, C] (their argmax is the prediction) or the
    predicted classes [B] (integers, a kNN vote's), as torchmetrics' own classification metrics do.
    """

    full_state_update = False
    correct: Tensor
    total: Tensor

    def __init__(self, num_classes: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"ClassAccuracy: num_classes must be an int >= 1, got {num_classes!r}")
        self.num_classes = num_classes
        self.add_state("correct", default=torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", default=torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, predictions: Tensor, labels: Tensor) -> None:
        """Count a batch: ``predictions`` logits [B, C] or classes [B], ``labels`` [B] in ``0 … C−1`` or -1 (ignored).

        Written with masks instead of boolean indexing, so a batch costs no host-device sync.
        """
        classes = predictions.dim() == 1 and not predictions.is_floating_point()
        if not classes and (predictions.dim() != 2 or predictions.shape[1] != self.num_classes):
            raise ValueError(
                f"ClassAccuracy: expected logits [B, {self.num_classes}] or classes [B], got {tuple(predictions.shape)}"
            )
        labels = labels.to(self.total.device, torch.long)
        labelled = labels >= 0
        target = labels.clamp(min=0)
        predicted = predictions if classes else predictions.argmax(dim=1)
        hit = labelled & (predicted.to(labels.device) == labels)
        self.total.scatter_add_(0, target, labelled.long())
        self.correct.scatter_add_(0, target, hit.long())

    def compute(self) -> tuple[Tensor, Tensor]:
        return self.correct, self.total


def group_accuracies(correct: Tensor, total: Tensor, groups: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """``{"top1": pooled accuracy, <group>: mean per-class accuracy of its classes}``.

    A group without any class, or whose classes have no evaluation sample, is left out, and so
    is ``top1`` when no sample is labelled: every value returned is a finite number.
    """
    correct, total = correct.double().cpu(), total.double().cpu()
    result: dict[str, float] = {}
    if total.sum() > 0:
        result["top1"] = float(correct.sum() / total.sum())
    for name, classes in groups.items():
        members = torch.as_tensor(list(classes), dtype=torch.long)
        seen = members[total[members] > 0] if members.numel() else members
        if seen.numel():
            result[name] = float((correct[seen] / total[seen]).mean())
    return result
