"""What a folder of images looks like, from a seeded sample of them: the crop size and the per-channel mean and std.

``ImageFolderDataModule`` reads these when ``augmentation.crop_size``/``mean``/``std`` are null,
so that a folder of 32×32 icons is neither upscaled to 224 nor normalised with ImageNet's
statistics. The sample is a fixed function of the file list and the seed, so every DDP rank
measures the same values without communicating.

- crop size: the median shorter side of the sampled images, at most ``max_crop`` (224, what
  ImageNet-sized photos are trained at);
- mean, std: per channel, over the pixels in [0, 1], each image weighted equally (read from a
  thumbnail of at most 64 pixels a side: enough for the statistics, and fast).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

from datamodules.image_files import CorruptImageError, to_rgb

#: Images read by default: enough for stable statistics, a second or two of decoding.
SAMPLE_SIZE = 256
#: The largest crop read from the data (photos larger than this are cropped at ImageNet's size).
MAX_CROP = 224
#: Side of the thumbnails the statistics are computed on.
THUMBNAIL = 64
#: The smallest std returned (a sample of one flat colour would otherwise divide by zero).
MIN_STD = 1e-3


@dataclass(frozen=True)
class ImageStats:
    """What :func:`measure_images` found: ``images`` read, the ``crop_size``, per-channel ``mean``/``std``."""

    images: int
    crop_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


def sample_indices(count: int, size: int, seed: int) -> list[int]:
    """``min(size, count)`` distinct indices of ``range(count)``, sorted; a fixed function of the arguments."""
    if count <= size:
        return list(range(count))
    return sorted(int(i) for i in np.random.RandomState(seed).choice(count, size, replace=False))


def measure_images(
    paths: Sequence[str], *, sample_size: int = SAMPLE_SIZE, seed: int = 0, max_crop: int = MAX_CROP
) -> ImageStats:
    """Crop size, mean and std of a seeded sample of at most ``sample_size`` of ``paths`` (module docstring)."""
    if not paths:
        raise ValueError("measure_images: no images")
    chosen = [paths[i] for i in sample_indices(len(paths), sample_size, seed)]
    sides, means, squares = [], [], []
    for path in chosen:
        side, pixels = _read_small(str(path))
        sides.append(side)
        means.append(pixels.mean(axis=0))
        squares.append((pixels**2).mean(axis=0))
    mean = np.mean(means, axis=0)
    variance = np.maximum(np.mean(squares, axis=0) - mean**2, 0.0)
    std = np.maximum(np.sqrt(variance), MIN_STD)
    crop = max(1, min(int(np.median(sides)), max_crop))
    return ImageStats(len(chosen), crop, _three(mean), _three(std))


def _three(values: np.ndarray) -> tuple[float, float, float]:
    r, g, b = (round(float(v), 4) for v in values)
    return (r, g, b)


def _read_small(path: str) -> tuple[int, np.ndarray]:
    """The image's shorter side and its thumbnail's pixels as float64 ``[N, 3]`` in [0, 1]."""
    try:
        with Image.open(path) as image:
            side = min(image.size)
            image.draft("RGB", (THUMBNAIL, THUMBNAIL))  # JPEG: decode at a fraction of the size
            rgb = to_rgb(image)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise CorruptImageError(f"corrupted or unreadable image: {path} ({error})") from None
    scale = THUMBNAIL / max(rgb.size)
    if scale < 1:
        rgb = rgb.resize((max(1, math.floor(rgb.width * scale)), max(1, math.floor(rgb.height * scale))), Image.BILINEAR)
    return side, np.asarray(rgb, dtype=np.float64).reshape(-1, 3) / 255.0
