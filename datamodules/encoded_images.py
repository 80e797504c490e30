"""Training images of an image folder as their files' bytes, for decoding on the device (``augment_on: device``).

The worker side of decoding on the device: a DataLoader worker only reads each file and looks at
its header (PIL, no pixel decoded), so that the GPU decodes whole batches of JPEGs at once
(``datamodules.decoded_views``). Images may have any size: the views are cropped from each image
at its own size.

A file goes to the device as bytes when it is a JPEG whose colour space ``decode_jpeg`` turns into
RGB on every device (PIL mode ``RGB``: YCbCr or RGB; ``L``: grayscale). Every other file (PNG, CMYK
JPEGs, 16-bit or transparent images…) is decoded here, in the worker, by ``image_files.load_rgb``,
exactly as the worker path reads it, and travels as uint8 pixels; a batch may hold both.
"""

from __future__ import annotations

import io
from typing import Any, Union

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import Dataset

from datamodules.device_augment import as_uint8_chw
from datamodules.image_files import load_rgb, to_rgb

#: PIL modes of the JPEGs decoded on the device (the rest are decoded in the worker).
DEVICE_JPEG_MODES = ("RGB", "L")


class EncodedImage:
    """One training image as a worker hands it over: ``data`` is the file's bytes (``jpeg``) or the
    decoded uint8 ``[3, H, W]`` pixels; ``path`` names the file."""

    __slots__ = ("data", "jpeg", "path")

    def __init__(self, data: Union[bytes, Tensor], jpeg: bool, path: str) -> None:
        self.data, self.jpeg, self.path = data, jpeg, path


def read_encoded(path: str) -> EncodedImage:
    """The file at ``path``: its bytes if it is a JPEG decoded on the device, else its pixels (``load_rgb``)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        with Image.open(io.BytesIO(data)) as image:
            if image.format == "JPEG" and image.mode in DEVICE_JPEG_MODES:
                return EncodedImage(data, True, path)
            pixels = as_uint8_chw(to_rgb(image))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        pixels = as_uint8_chw(load_rgb(path))  # raises CorruptImageError naming the file
    return EncodedImage(pixels, False, path)


class EncodedImages(Dataset):
    """``(EncodedImage, label, index)`` of ``(path, label)`` samples (label -1: unlabelled).

    Given a training sampler's key ``(seed, epoch, index)`` instead of an index, the item is
    ``(image, label, index, seed, epoch)``, as ``device_augment.UnaugmentedImages`` gives it.
    """

    def __init__(self, samples: list[tuple[str, int]]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: Union[int, tuple[int, int, int]]) -> tuple[Any, ...]:
        key = index if isinstance(index, tuple) else None
        if key is not None:
            index = key[2]
        path, label = self.samples[index]
        item = (read_encoded(path), -1 if label is None else int(label), int(index))
        return item if key is None else (*item, int(key[0]), int(key[1]))


class EncodedBatch:
    """A batch of :class:`EncodedImage` as one object that Lightning leaves on the host (it has no ``to``):
    ``decode_jpeg`` reads its input from host memory on every device.

    Attributes:
        jpeg_data: the JPEG files' bytes end to end, uint8 ``[total]``; ``jpeg_lengths`` their lengths
            and ``jpeg_at`` their places in the batch.
        pixels: the images decoded in the workers, uint8 ``[k, 3, H, W]`` when they share a size, else
            a list of ``[3, H, W]``; ``pixels_at`` their places in the batch.
        paths: every image's file, in batch order (a file that fails to decode is named).
        indices: int64 ``[B]``, the samples' indices (on the host: the views' keys are drawn there).
    """

    def __init__(
        self,
        jpeg_data: Tensor,
        jpeg_lengths: list[int],
        jpeg_at: list[int],
        pixels: Union[Tensor, list[Tensor]],
        pixels_at: list[int],
        paths: list[str],
        indices: Tensor,
    ) -> None:
        self.jpeg_data, self.jpeg_lengths, self.jpeg_at = jpeg_data, jpeg_lengths, jpeg_at
        self.pixels, self.pixels_at = pixels, pixels_at
        self.paths, self.indices = paths, indices

    def __len__(self) -> int:
        return len(self.paths)

    def jpegs(self) -> list[Tensor]:
        """Each JPEG file's bytes, uint8 ``[n]`` views of ``jpeg_data`` (no copy)."""
        return list(torch.split(self.jpeg_data, self.jpeg_lengths)) if self.jpeg_lengths else []

    def pin_memory(self) -> EncodedBatch:
        """Pinned pixels, for the DataLoader's ``pin_memory``: their copy to a GPU can then overlap."""
        if isinstance(self.pixels, Tensor):
            self.pixels = self.pixels.pin_memory()
        else:
            self.pixels = [image.pin_memory() for image in self.pixels]
        return self


def collate_encoded(samples: list[tuple[Any, ...]]) -> tuple[EncodedBatch, Tensor, Tensor]:
    """``(EncodedImage, label, index, ...)`` samples -> ``(EncodedBatch, labels, indices)``."""
    images: tuple[EncodedImage, ...]
    images, labels, indices = tuple(zip(*samples))[:3]
    jpeg_at = [k for k, image in enumerate(images) if image.jpeg]
    pixels_at = [k for k, image in enumerate(images) if not image.jpeg]
    lengths = [len(images[k].data) for k in jpeg_at]
    jpeg_data = torch.empty(sum(lengths), dtype=torch.uint8)
    flat, start = jpeg_data.numpy(), 0
    for k, length in zip(jpeg_at, lengths):
        flat[start : start + length] = np.frombuffer(images[k].data, dtype=np.uint8)
        start += length
    decoded = [images[k].data for k in pixels_at]
    pixels: Union[Tensor, list[Tensor]] = decoded
    if decoded and len({tuple(image.shape) for image in decoded}) == 1:
        pixels = torch.stack(decoded)  # one copy to the device instead of one per image
    indices_tensor = torch.tensor(indices, dtype=torch.int64)
    batch = EncodedBatch(jpeg_data, lengths, jpeg_at, pixels, pixels_at, [image.path for image in images], indices_tensor)
    return batch, torch.tensor(labels, dtype=torch.int64), indices_tensor
