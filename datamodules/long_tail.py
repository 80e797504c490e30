"""Long-tailed training splits: the exponential profile of Cao et al. (LDAM, 2019) and a seeded subset.

For C classes and an imbalance factor IF = n_max / n_min >= 1, class c keeps

    n_c = int(n_max · IF^(−c / (C − 1)))          c = 0 … C − 1

images, written as LDAM's code computes it (``int(n_max * (1 / IF) ** (c / (C - 1)))``), so the
counts are theirs exactly: CIFAR-10 at IF = 100 keeps 5,000 … 50 images (12,406 in all),
CIFAR-100 at IF = 100 keeps 500 … 5 (10,847). ``n_max`` is the largest class of the balanced
split (500 for CIFAR-100); a class with fewer images than its n_c keeps all it has. IF = 1
keeps everything.

Which images: for each class in index order, its indices are shuffled by one
``numpy.random.RandomState(seed)`` and the first n_c kept, the recipe of LDAM's
``IMBALANCECIFAR`` with ``rand_number = seed``, so the same seed keeps the same images as their
code. The kept indices are returned sorted (the subset keeps the split's order).

Groups for evaluation (the literature's, ``ssl_app.metrics.long_tail``): many-shot > 100
training images, medium-shot 20–100, few-shot < 20.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Subset

from ssl_app.checks import AtLeastOne, check
from ssl_app.errors import ConfigError
from ssl_app.metrics.long_tail import FEW_SHOT_BELOW, MANY_SHOT_ABOVE, shot_groups

#: The file, beside the run's logs, that holds the per-class training counts of a long-tailed run.
CLASS_COUNTS_FILE = "class_counts.json"


def check_imbalance_factor(value: Any, option: str) -> float:
    """``value`` as a float >= 1; a ConfigError naming ``option`` for anything else (NaN, inf, text)."""
    return check(AtLeastOne, value, option)


def exponential_profile(n_max: int, num_classes: int, imbalance_factor: float) -> list[int]:
    """Images per class ``int(n_max · (1/IF)^(c/(C−1)))`` for c = 0 … C−1 (class 0 the head)."""
    if num_classes == 1:
        return [int(n_max)]
    return [int(n_max * (1.0 / imbalance_factor) ** (c / (num_classes - 1.0))) for c in range(num_classes)]


def dataset_targets(dataset: Dataset) -> Tensor:
    """int64 labels [N] of an ``(image, label)`` dataset (-1 where unlabelled), without decoding images.

    Reads torchvision's ``targets`` (CIFAR, ImageFolder) or ``labels`` (SVHN, STL-10, the
    generated shapes) and follows ``Subset``; anything else is read item by item.
    """
    if isinstance(dataset, Subset):
        return dataset_targets(dataset.dataset)[torch.as_tensor(list(dataset.indices), dtype=torch.long)]
    for name in ("targets", "labels"):
        found = getattr(dataset, name, None)
        if found is not None and len(found) == len(dataset):  # type: ignore[arg-type]
            return torch.as_tensor(np.asarray(found), dtype=torch.long).reshape(-1).clone()
    labels = [dataset[i][1] for i in range(len(dataset))]  # type: ignore[arg-type]
    return torch.tensor([-1 if label is None else int(label) for label in labels], dtype=torch.long)


def class_counts(labels: Tensor, num_classes: int) -> list[int]:
    """Images per class 0 … num_classes − 1 (labels < 0 are not counted)."""
    labelled = labels[labels >= 0]
    return torch.bincount(labelled, minlength=num_classes)[:num_classes].tolist()


def long_tailed_indices(labels: Tensor, num_classes: int, imbalance_factor: float, seed: int, who: str) -> list[int]:
    """Sorted indices of the samples a long-tailed subset of ``labels`` keeps (module docstring).

    Raises a ConfigError naming the first class the profile leaves without any image, its
    count and the factor, and one for a split with unlabelled samples (they have no class).
    """
    if bool((labels < 0).any()):
        raise ConfigError(
            f"{who}: imbalance_factor={imbalance_factor:g} needs a labelled train split, but "
            f"{int((labels < 0).sum())} training images have no label"
        )
    available = class_counts(labels, num_classes)
    n_max = max(available)
    wanted = exponential_profile(n_max, num_classes, imbalance_factor)
    for c, (n, has) in enumerate(zip(wanted, available)):
        if has == 0:
            raise ConfigError(f"{who}: class {c} has no training image, so imbalance_factor={imbalance_factor:g} cannot apply")
        if n == 0:
            raise ConfigError(
                f"{who}: imbalance_factor={imbalance_factor:g} leaves class {c} with 0 training images "
                f"(int({n_max} × {imbalance_factor:g}^(−{c}/{num_classes - 1})) = 0); lower imbalance_factor "
                f"(the smallest class keeps about {n_max} / imbalance_factor images)"
            )
    rng = np.random.RandomState(seed)
    by_class = labels.numpy()
    kept: list[np.ndarray] = []
    for c in range(num_classes):
        members = np.where(by_class == c)[0]
        rng.shuffle(members)
        kept.append(members[: min(wanted[c], len(members))])
    return sorted(int(i) for i in np.concatenate(kept))


def profile_summary(who: str, counts: Sequence[int], imbalance_factor: float, seed: int) -> str:
    """One line: classes, factor, largest … smallest class, total, classes per many/medium/few group."""
    many, medium, few = shot_groups(counts)
    return (
        f"{who}: long-tailed train split, {len(counts)} classes, imbalance_factor {imbalance_factor:g} (seed {seed}): "
        f"{max(counts)} … {min(counts)} images per class, {sum(counts)} in total; "
        f"many/medium/few-shot (>{MANY_SHOT_ABOVE} / {FEW_SHOT_BELOW}–{MANY_SHOT_ABOVE} / "
        f"<{FEW_SHOT_BELOW} images): {len(many)}/{len(medium)}/{len(few)} classes"
    )


def write_class_counts(log_dir: str | Path, record: dict[str, Any]) -> Optional[Path]:
    """Write ``record`` as ``<log_dir>/class_counts.json`` (whole or not at all); returns the path."""
    folder = Path(log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CLASS_COUNTS_FILE
    partial = path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    partial.replace(path)
    return path
