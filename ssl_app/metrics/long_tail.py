"""Top-1 accuracy overall and per class-frequency group, the long-tail literature's evaluation.

For evaluation samples (x_i, y_i) and predictions ŷ_i = argmax_c logits_ic:

    correct_c = #{i : y_i = c, ŷ_i = c}      total_c = #{i : y_i = c}
    acc_c     = correct_c / total_c                         (per-class accuracy)
    top1      = Σ_c correct_c / Σ_c total_c                 (pooled over every sample)
    acc(G)    = mean_{c ∈ G, total_c > 0} acc_c             (a group: mean of its per-class accuracies)

Groups come from the *training* counts n_c (Liu et al. 2019; Kang et al. 2020): many-shot
n_c > 100, medium-shot 20 ≤ n_c ≤ 100, few-shot n_c < 20. On a balanced test set acc(G)
equals the pooled accuracy of G's samples; the per-class mean is the definition either way.
Samples labelled -1 are ignored. ``ClassAccuracy`` keeps ``correct_c``/``total_c`` as summed
torchmetrics states, so under DDP each rank counts its own shard and ``compute()`` adds them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

#: Many-shot classes have more than this many training images; few-shot ones fewer than
#: ``FEW_SHOT_BELOW``; medium-shot ones are in between (both bounds included).
MANY_SHOT_ABOVE = 100
FEW_SHOT_BELOW = 20


def shot_groups(
    counts: Sequence[int], many_above: int = MANY_SHOT_ABOVE, few_below: int = FEW_SHOT_BELOW
) -> tuple[list[int], list[int], list[int]]:
    """The classes with ``> many_above``, ``few_below … many_above`` and ``< few_below`` training images."""
    many = [c for c, n in enumerate(counts) if n > many_above]
    few = [c for c, n in enumerate(counts) if n < few_below]
    medium = [c for c, n in enumerate(counts) if few_below <= n <= many_above]
    return many, medium, few


class ClassAccuracy(Metric):
    """Per-class correct/total top-1 counts; ``compute()`` returns ``(correct, total)``, int64 ``[C]`` each."""

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

    def update(self, logits: Tensor, labels: Tensor) -> None:
        """Count a batch: ``logits`` [B, C], ``labels`` [B] in ``0 … C−1`` or -1 (ignored).

        Written with masks instead of boolean indexing, so a batch costs no host-device sync.
        """
        if logits.dim() != 2 or logits.shape[1] != self.num_classes:
            raise ValueError(f"ClassAccuracy: expected logits [B, {self.num_classes}], got {tuple(logits.shape)}")
        labels = labels.to(self.total.device, torch.long)
        labelled = labels >= 0
        target = labels.clamp(min=0)
        hit = labelled & (logits.argmax(dim=1).to(labels.device) == labels)
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
