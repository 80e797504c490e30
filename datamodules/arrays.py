"""The images of in-memory data sets as one uint8 array, so that a batch is one indexing of it.

torchvision's CIFAR-10/100, SVHN and STL-10 hold their split in memory as a uint8 array and make
one PIL image per ``__getitem__``; so do the generated shapes (:class:`synthetic.ShapesDataset`).
Training views made on the device (``augment_on: device``) need only uint8 ``[B, 3, H, W]``
batches, and one PIL image per sample costs a DataLoader worker ~0.1 ms: at 512 images a batch, a
worker then feeds ~10k images/s, less than a GPU's ResNet-18 step takes (39k on an H200). With the
array, a batch is one fancy index into it (:meth:`PixelArray.batch`) whatever its size.

:func:`pixel_array` finds the array behind a dataset, through ``Subset``\\ s (long-tailed and
per-class splits), or returns ``None`` (an image folder, a dataset with a transform, anything
else): then the caller reads sample by sample, as before. Both give the same pixels and labels
(``tests/datamodules/test_arrays.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Subset
from torchvision import datasets


@dataclass(frozen=True)
class PixelArray:
    """A dataset's images as rows of one uint8 array, and its labels.

    Attributes:
        pixels: uint8 ``[N, H, W, 3]`` (``channels_last``) or ``[N, 3, H, W]``.
        channels_last: the layout of ``pixels``.
        labels: int64 ``[N]``, -1 where unlabelled.
        rows: the dataset's sample ``i`` is row ``rows[i]`` of ``pixels`` (a ``Subset``'s indices), or
            ``None``: sample ``i`` is row ``i``.
    """

    pixels: np.ndarray
    channels_last: bool
    labels: np.ndarray
    rows: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.pixels) if self.rows is None else len(self.rows)

    def batch(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        """uint8 ``[B, 3, H, W]`` (a view of a copy: index then permute) and int64 ``[B]`` labels of
        the dataset's samples ``indices``."""
        index = np.asarray(indices, dtype=np.int64)
        rows = index if self.rows is None else self.rows[index]
        images = torch.from_numpy(self.pixels[rows])
        return (images.permute(0, 3, 1, 2) if self.channels_last else images), torch.from_numpy(self.labels[rows])


def _labels(values: Any, count: int) -> np.ndarray:
    if values is None:
        return np.full(count, -1, dtype=np.int64)
    return np.asarray(values.numpy() if isinstance(values, Tensor) else values, dtype=np.int64).reshape(-1)


def pixel_array(dataset: Dataset) -> Optional[PixelArray]:
    """The uint8 array behind ``dataset`` (torchvision's CIFAR-10/100, SVHN, STL-10 without
    transforms; a dataset with a ``pixel_array()`` method; a ``Subset`` of any of them), or ``None``."""
    if isinstance(dataset, Subset):
        inner = pixel_array(dataset.dataset)
        if inner is None:
            return None
        index = np.asarray(list(dataset.indices), dtype=np.int64)
        return replace(inner, rows=index if inner.rows is None else inner.rows[index])
    own = getattr(dataset, "pixel_array", None)
    if callable(own):
        found = own()
    elif getattr(dataset, "transform", None) is not None or getattr(dataset, "target_transform", None) is not None:
        return None  # what __getitem__ returns is not the stored image
    elif isinstance(dataset, datasets.CIFAR10):  # and CIFAR100: data [N, 32, 32, 3], targets
        found = PixelArray(dataset.data, True, _labels(dataset.targets, len(dataset.data)))
    elif isinstance(dataset, (datasets.SVHN, datasets.STL10)):  # data [N, 3, H, W], labels
        found = PixelArray(dataset.data, False, _labels(getattr(dataset, "labels", None), len(dataset.data)))
    else:
        return None
    usable = (
        found is not None
        and isinstance(found.pixels, np.ndarray)
        and found.pixels.dtype == np.uint8
        and found.pixels.ndim == 4
        and found.pixels.shape[3 if found.channels_last else 1] == 3
        and len(found.labels) == len(found.pixels) == len(dataset)  # type: ignore[arg-type]
    )
    return found if usable else None
