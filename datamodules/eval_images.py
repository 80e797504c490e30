"""Evaluation images kept on the module's device (``eval_on``), and the inference batch size
(``eval_batch_size``).

The evaluation passes (the kNN bank and queries, the clean embeddings of the metrics, the projector,
the long-tail accuracy) read every image of a split through the deterministic eval pipeline at
every evaluation. Through DataLoader workers that is a PIL resize, crop and normalisation per image
per evaluation, and a host-to-device copy of float32 images. With the images on the device the
image-by-image half of the pipeline (resize the shorter side, centre-crop:
``ViewAugmentation.eval_crop_transform``) runs once, in the workers, into a uint8 tensor
``[N, 3, crop, crop]`` on the module's device (:class:`EvalImages`), and each evaluation only
scales and normalises batches of it there (``eval_normalise_transform``, elementwise): the same
numbers as the worker path, since both halves are the worker path's own transforms.

``eval_on`` (a datamodule option):

- ``workers``: every evaluation pass through ``embedding_dataloader`` (the worker path);
- ``device``: every split an evaluation reads is kept on the device;
- ``auto`` (default): a split is kept on the device when its uint8 images take at most
  :data:`DEVICE_SHARE` of the device's free memory when it is first needed (CUDA:
  ``torch.cuda.mem_get_info``; the CPU: the host's free memory); otherwise the worker path.
  CIFAR-10's 60,000 images take 184 MB; ImageNet-100's training split at 224 px, 19 GB.

``eval_batch_size`` (a datamodule option): images per inference batch of the evaluation passes;
``auto`` (default) keeps the training ``batch_size`` on the CPU (larger batches are not faster
there), and on an accelerator takes the largest power of two with at most
:data:`AUTO_BATCH_PIXELS` input pixels per batch (8,192 images of 32 × 32, 512 of 96 × 96, 128 of
224 × 224; never below ``batch_size``, never above :data:`MAX_AUTO_BATCH`), lowered until its
estimated activations (:data:`BYTES_PER_INPUT_BYTE` × the float input) fit in
:data:`DEVICE_SHARE` of the free memory. On an H200, embedding 60,000 CIFAR images with a ResNet-18
took 352 ms at batch 512 and 264 ms at 8,192.

``val_batch_size`` (a datamodule option): samples per batch of the validation and test loops (two
augmented views each); ``None`` (default): ``batch_size``. Not ``auto``: a batch's other samples are
negatives of ``val/loss``, whose value must not depend on the device.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from typing import Any, Literal, Optional, Union

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from datamodules.arrays import pixel_array
from datamodules.augment import ViewAugmentation
from datamodules.device_augment import as_uint8_chw
from datamodules.multiview import Labelled
from ssl_app.checks import PositiveInt, check, describe, is_a
from ssl_app.errors import ConfigError

EvalOn = Literal["auto", "device", "workers"]
EVAL_ON: tuple[str, ...] = ("auto", "device", "workers")
#: The share of a device's free memory that ``auto`` lets a split's images (or a batch's activations) take.
DEVICE_SHARE = 0.25
#: ``eval_batch_size: auto`` on an accelerator: input pixels per batch (8,192 images of 32 × 32).
AUTO_BATCH_PIXELS = 2**23
MAX_AUTO_BATCH = 8192
#: Peak inference memory per byte of float32 input, for the batch-size estimate: a ResNet's widest
#: activations at the input's resolution (64 channels against 3, in the CIFAR stem), a few alive at once.
BYTES_PER_INPUT_BYTE = 64


def check_eval_options(
    eval_on: Any, eval_batch_size: Any, val_batch_size: Any, owner: str
) -> tuple[str, Union[int, str], Optional[int]]:
    """The three options, checked (one ConfigError naming ``owner``'s option); a batch size as a plain ``int``."""
    if eval_on not in EVAL_ON:
        raise ConfigError(f"{owner}: eval_on must be one of {EVAL_ON}, got {eval_on!r}")
    val_batch_size = check(PositiveInt, val_batch_size, f"{owner}: val_batch_size", none=True)
    if eval_batch_size == "auto":
        return eval_on, eval_batch_size, val_batch_size
    if not is_a(PositiveInt, eval_batch_size):
        raise ConfigError(f"{owner}: eval_batch_size must be {describe(PositiveInt)} or auto, got {eval_batch_size!r}")
    return eval_on, int(eval_batch_size), val_batch_size


def free_memory(device: torch.device) -> Optional[int]:
    """Bytes free on ``device`` (CUDA: outside PyTorch's cache; the CPU: the host's free physical
    memory, ``SC_AVPHYS_PAGES``); ``None`` where unknown (another device, or not Linux)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # not Linux
            return None
    return None


def resolve_eval_batch_size(option: Union[int, str], batch_size: int, crop_size: int, device: torch.device) -> int:
    """The inference batch size of ``eval_batch_size: option`` (module docstring)."""
    if option != "auto":
        return int(option)
    if device.type == "cpu":
        return batch_size
    pixels = crop_size * crop_size
    size = min(MAX_AUTO_BATCH, 2 ** int(math.log2(max(AUTO_BATCH_PIXELS // pixels, 1))))
    free = free_memory(device)
    if free is not None:
        per_image = 3 * pixels * 4 * BYTES_PER_INPUT_BYTE
        while size > 1 and size * per_image > DEVICE_SHARE * free:
            size //= 2
    return max(size, batch_size)


class EvalCrop:
    """``ViewAugmentation.eval_crop_transform`` of one image, as a uint8 ``[3, crop, crop]`` tensor;
    an image already ``crop × crop`` with nothing to resize is only converted (the same pixels: the
    resize and the crop are then the identity), which is most of the cost saved for CIFAR-sized data."""

    def __init__(self, augmentation: ViewAugmentation) -> None:
        self.transform = augmentation.eval_crop_transform()
        self.crop = augmentation.crop_size
        self.identity = math.floor(augmentation.crop_size / augmentation.eval_crop_fraction + 1e-6) == augmentation.crop_size

    def __call__(self, image: Any) -> Tensor:
        if self.identity:
            pixels = as_uint8_chw(image)
            if pixels.shape[1:] == (self.crop, self.crop):
                return pixels
        return self.transform(image)


class EvalImages:
    """One split on a device: ``images`` uint8 ``[N, 3, crop, crop]`` (the eval pipeline's resize
    and centre crop done), ``labels`` int64 ``[N]`` (-1: unlabelled); ``normalise`` finishes the
    eval pipeline on a batch of them."""

    def __init__(self, images: Tensor, labels: Tensor, normalise: Callable[[Tensor], Tensor]) -> None:
        self.images, self.labels, self.normalise = images, labels, normalise

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def device(self) -> torch.device:
        return self.images.device

    @property
    def nbytes(self) -> int:
        return self.images.numel() * self.images.element_size()

    def batches(
        self, batch_size: int, rank: int = 0, world_size: int = 1, limit: Optional[int] = None
    ) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        """``(images float [B, 3, crop, crop], labels [B], indices [B])`` on the device, in index
        order, of the samples ``rank, rank + world_size, …`` below ``limit`` (``None``: all): the
        shards of ``embedding_dataloader(rank=, world_size=)``, without any host-device sync."""
        stop = len(self) if limit is None else min(limit, len(self))
        images, labels = self.images[rank:stop:world_size], self.labels[rank:stop:world_size]
        indices = torch.arange(rank, stop, world_size, device=self.device)
        for start in range(0, images.shape[0], batch_size):
            rows = slice(start, start + batch_size)
            yield self.normalise(images[rows]), labels[rows], indices[rows]

    def select(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        """``(images float [M, 3, crop, crop], labels [M])`` of the samples ``indices``, on the device."""
        indices = indices.to(self.device)
        return self.normalise(self.images[indices]), self.labels[indices]


def load_eval_images(
    data: Dataset, augmentation: ViewAugmentation, device: torch.device, loader_options: dict[str, Any]
) -> EvalImages:
    """Every image of ``data`` through ``EvalCrop`` (in DataLoader workers, as ``loader_options``
    say), into one uint8 tensor on ``device``; for data held in one uint8 array of crop-sized images
    (``arrays.pixel_array``: CIFAR, SVHN, the shapes), where the crop is the identity, the array itself."""
    crop = augmentation.crop_size
    found = pixel_array(data) if EvalCrop(augmentation).identity else None
    if found is not None:
        height, width = found.pixels.shape[1:3] if found.channels_last else found.pixels.shape[2:4]
        if (height, width) == (crop, crop):
            images, labels = found.batch(np.arange(len(found)))
            normalise = augmentation.eval_normalise_transform()
            return EvalImages(images.contiguous().to(device), labels.to(device), normalise)
    loader = DataLoader(Labelled(data, EvalCrop(augmentation)), shuffle=False, **loader_options)
    images = torch.empty(len(data), 3, crop, crop, dtype=torch.uint8, device=device)  # type: ignore[arg-type]
    labels = torch.empty(len(data), dtype=torch.int64, device=device)  # type: ignore[arg-type]
    start = 0
    for batch, label in loader:
        images[start : start + batch.shape[0]].copy_(batch, non_blocking=True)
        labels[start : start + batch.shape[0]].copy_(label, non_blocking=True)
        start += batch.shape[0]
    return EvalImages(images, labels, augmentation.eval_normalise_transform())


class EvalImageCache:
    """The splits a datamodule keeps on a device (``eval_on``), built when first asked for.

    One entry per split, for one device and one augmentation (a new device or augmentation, e.g.
    the crop size an image folder reads from its data at ``setup``, rebuilds it). ``auto`` decides
    once per split and device (module docstring); a split that does not fit is not tried again.
    """

    def __init__(self, eval_on: str) -> None:
        self.eval_on = eval_on
        self._kept: dict[str, tuple[tuple[Any, ...], Optional[EvalImages]]] = {}

    def get(
        self, split: str, data: Dataset, augmentation: ViewAugmentation, device: torch.device, loader_options: dict[str, Any]
    ) -> Optional[EvalImages]:
        """The split's ``EvalImages`` on ``device``, or ``None`` for the worker path."""
        if self.eval_on == "workers" or augmentation.crop_size is None:
            return None
        key = (str(device), augmentation, len(data))  # type: ignore[arg-type]
        found = self._kept.get(split)
        if found is not None and found[0] == key:
            return found[1]
        self._kept.pop(split, None)  # free the old device's copy before the new one is made
        kept = None
        if self.eval_on == "device" or self._fits(len(data), augmentation.crop_size, device):  # type: ignore[arg-type]
            kept = load_eval_images(data, augmentation, device, loader_options)
        self._kept[split] = (key, kept)
        return kept

    @staticmethod
    def _fits(n: int, crop: int, device: torch.device) -> bool:
        free = free_memory(device)
        return free is not None and n * 3 * crop * crop <= DEVICE_SHARE * free

    def clear(self) -> None:
        self._kept.clear()
