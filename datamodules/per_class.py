"""Per-class subsets: the first N images of each class, in the data set's own order.

Deterministic without a seed: the same N, the same files and the same torchvision version keep
the same images, so a small study (docs/study.md) runs from torchvision's own download with no
converted copy. The subset is taken before a long-tailed profile (``imbalance_factor``) and
before a linear evaluation holds out its ``val_fraction``, so both see only the kept images.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from torch import Tensor
from torch.utils.data import Dataset, Subset

from datamodules.long_tail import class_counts, dataset_targets
from ssl_app.errors import ConfigError


def first_per_class_indices(labels: Tensor, num_classes: int, per_class: int, who: str, option: str) -> list[int]:
    """Sorted indices of the first ``per_class`` samples of every class ``0 … num_classes − 1``.

    Raises a ConfigError naming the first class with fewer than ``per_class`` samples (with its
    count), and one for a split with unlabelled samples (they have no class).
    """
    if bool((labels < 0).any()):
        unlabelled = int((labels < 0).sum())
        raise ConfigError(f"{who}: {option}={per_class} needs labelled images, but {unlabelled} images have no label")
    counts = class_counts(labels, num_classes)
    for c, has in enumerate(counts):
        if has < per_class:
            raise ConfigError(f"{who}: {option}={per_class}, but class {c} has only {has} images; lower {option}")
    by_class = labels.numpy()
    kept = [np.flatnonzero(by_class == c)[:per_class] for c in range(num_classes)]
    return sorted(int(i) for i in np.concatenate(kept))


def first_per_class(data: Dataset, num_classes: int, per_class: Optional[int], who: str, option: str) -> Dataset:
    """``data`` restricted to the first ``per_class`` images of each class (``None``: all of it)."""
    if per_class is None:
        return data
    return Subset(data, first_per_class_indices(dataset_targets(data), num_classes, per_class, who, option))
