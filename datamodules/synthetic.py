"""An offline, deterministic image set whose classes are shapes, and its datamodule.

Each class is one shape (circle, square, triangle, ...) drawn at a random position, size and
small rotation, in a random colour on a random background colour, plus mild pixel noise. Colour
is independent of the class, so an encoder can only separate the classes by learning shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset

from datamodules.arrays import PixelArray
from datamodules.augment import ViewAugmentation
from datamodules.base import SPLITS, ContrastiveDataModule, Split
from datamodules.registry import DATAMODULES
from ssl_app.checks import IntAtLeast8, NonNegativeInt, PositiveInt, ShapeCount, check_int
from ssl_app.errors import ConfigError

ShapeFn = Callable[[Tensor, Tensor], Tensor]


def _triangle(u: Tensor, v: Tensor) -> Tensor:
    # Apex up (image rows grow downwards), base at v = 0.75.
    half_width = (v + 0.9) * (0.95 / 1.65)
    return (v >= -0.9) & (v <= 0.75) & (u.abs() <= half_width)


# Shapes in normalised coordinates (u, v): the shape's centre at 0, its radius 1.
SHAPES: dict[str, ShapeFn] = {
    "circle": lambda u, v: u**2 + v**2 <= 1.0,
    "square": lambda u, v: torch.maximum(u.abs(), v.abs()) <= 0.8,
    "triangle": _triangle,
    "ring": lambda u, v: ((u**2 + v**2) <= 1.0) & ((u**2 + v**2) >= 0.55**2),
    "cross": lambda u, v: ((u.abs() <= 0.3) & (v.abs() <= 1.0)) | ((v.abs() <= 0.3) & (u.abs() <= 1.0)),
    "diamond": lambda u, v: u.abs() + v.abs() <= 1.0,
    "horizontal_bar": lambda u, v: (u.abs() <= 1.0) & (v.abs() <= 0.3),
    "vertical_bar": lambda u, v: (u.abs() <= 0.3) & (v.abs() <= 1.0),
    "x": lambda u, v: (((u - v).abs() <= 0.42) | ((u + v).abs() <= 0.42)) & (torch.maximum(u.abs(), v.abs()) <= 0.8),
    "half_disc": lambda u, v: (u**2 + (v + 0.35) ** 2 <= 1.0) & (v >= -0.35),
}
SHAPE_NAMES: tuple[str, ...] = tuple(SHAPES)

SYNTHETIC_MEAN = (0.5, 0.5, 0.5)
SYNTHETIC_STD = (0.29, 0.29, 0.29)
# Colours are drawn at random per image, so the only instance cue a colour-blind encoder can use
# is the shape: strong hue/saturation jitter and grayscale take colour away as a shortcut, and a
# larger minimum crop keeps the shape in both views. (With the CIFAR defaults, kNN accuracy of
# the quickstart stayed near chance, 0.14 after 10 epochs; with these it reached 0.42 after 5.)
SYNTHETIC_AUGMENTATION = ViewAugmentation(
    min_scale=0.4, saturation=0.8, hue=0.5, grayscale_prob=0.5, mean=SYNTHETIC_MEAN, std=SYNTHETIC_STD
)

_CHUNK = 4096  # images rendered at once; bounds the memory of the coordinate grids


def make_shapes(num_samples: int, num_classes: int, image_size: int, seed: int, noise: float = 0.03) -> tuple[Tensor, Tensor]:
    """Render ``num_samples`` shape images; a pure function of its arguments.

    Returns ``(images, labels)``: uint8 ``[N, 3, S, S]`` and int64 ``[N]``, the classes as
    balanced as ``N`` allows, in random order.
    """
    if not 1 <= num_classes <= len(SHAPES):
        raise ConfigError(f"num_classes must be in [1, {len(SHAPES)}] (one shape per class), got {num_classes}")
    gen = torch.Generator().manual_seed(seed)
    n, size = num_samples, image_size

    labels = (torch.arange(n) % num_classes)[torch.randperm(n, generator=gen)]
    radius = size * (0.22 + 0.16 * torch.rand(n, generator=gen))
    # Keep the centre far enough from the border that the shape stays (nearly) whole.
    centre = radius[:, None] + (size - 2 * radius[:, None]) * torch.rand(n, 2, generator=gen)
    angle = math.radians(15.0) * (2 * torch.rand(n, generator=gen) - 1)
    background = torch.rand(n, 3, generator=gen)
    # Each channel of the shape differs from the background by 0.3-0.7 (cyclically), so the
    # shape always stands out while its colour stays uniform on [0, 1] and class-independent.
    foreground = (background + 0.3 + 0.4 * torch.rand(n, 3, generator=gen)) % 1.0
    # Grey-level noise (shared by the channels): a third of the random numbers, same look.
    pixel_noise = (255 * noise) * torch.randn(n, 1, size, size, generator=gen)

    images = torch.empty(n, 3, size, size, dtype=torch.uint8)
    coords = torch.arange(size, dtype=torch.float32) + 0.5
    for start in range(0, n, _CHUNK):
        part = slice(start, min(start + _CHUNK, n))
        mask = _render_masks(labels[part], coords, centre[part], radius[part], angle[part])
        image = torch.where(mask[:, None], 255 * foreground[part, :, None, None], 255 * background[part, :, None, None])
        images[part] = image.add_(pixel_noise[part]).clamp_(0, 255).round_().to(torch.uint8)
    return images, labels


def _render_masks(labels: Tensor, coords: Tensor, centre: Tensor, radius: Tensor, angle: Tensor) -> Tensor:
    """Boolean ``[n, S, S]`` masks of each image's shape."""
    size = coords.numel()
    mask = torch.empty(len(labels), size, size, dtype=torch.bool)
    for k, shape in enumerate(SHAPES.values()):
        rows = (labels == k).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        # Pixel offsets from the centre, rotated and scaled into the shape's frame.
        dx = (coords[None, None, :] - centre[rows, 0, None, None]) / radius[rows, None, None]
        dy = (coords[None, :, None] - centre[rows, 1, None, None]) / radius[rows, None, None]
        cos, sin = angle[rows].cos()[:, None, None], angle[rows].sin()[:, None, None]
        mask[rows] = shape(cos * dx + sin * dy, cos * dy - sin * dx)
    return mask


class ShapesDataset(Dataset):
    """``(image, label)`` pairs over in-memory uint8 images, served as PIL images.

    PIL, not tensors: torchvision's colour jitter is much faster on PIL images than with its
    per-image tensor kernels at 32×32 (benchmarks/README.md, "Tuning notes"), and data loading
    is what bounds a CPU run.
    """

    def __init__(self, images: Tensor, labels: Tensor) -> None:
        self.images = images.permute(0, 2, 3, 1).contiguous().numpy()  # [N, H, W, 3] for PIL
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        return Image.fromarray(self.images[index]), int(self.labels[index])

    def pixel_array(self) -> PixelArray:
        """The images as one array, for batches of uint8 images without PIL (``datamodules.arrays``)."""
        return PixelArray(self.images, True, np.asarray(self.labels, dtype=np.int64))


@DATAMODULES.register
class SyntheticDataModule(ContrastiveDataModule):
    """Offline shape images (no download, deterministic from ``seed``): the quickstart default.

    Class ``k`` is the ``k``-th shape of :data:`SHAPE_NAMES` (circle, square, triangle, ring,
    cross, diamond, horizontal bar, vertical bar, x, half-disc). The three splits are drawn
    from different seeds derived from ``seed``. With ``imbalance_factor`` > 1 the train split
    is a long-tailed subset of ``train_size`` balanced images (n_max = train_size / num_classes;
    ``configs/data/shapes_lt.yaml``: 5,000 → 500 … 5 per class).

    Args:
        num_classes: number of shapes used, at most 10.
        train_size, val_size, test_size: images per split.
        image_size: side of the square images, in pixels.
        seed: the data seed (separate from the training seed).
        augmentation: the view pipeline; defaults to :data:`SYNTHETIC_AUGMENTATION`.
        batch_size, num_workers, val_seed, pin_memory, augment_on, imbalance_factor, imbalance_seed: see
            :class:`~datamodules.base.ContrastiveDataModule` (the train split is long-tailed when
            imbalance_factor > 1).
    """

    def __init__(
        self,
        num_classes: ShapeCount = 10,
        train_size: PositiveInt = 2000,
        val_size: PositiveInt = 500,
        test_size: PositiveInt = 500,
        image_size: IntAtLeast8 = 32,
        seed: NonNegativeInt = 0,
        *,
        augmentation: ViewAugmentation = SYNTHETIC_AUGMENTATION,
        **kwargs: Any,
    ) -> None:
        super().__init__(augmentation=augmentation, **kwargs)
        name = type(self).__name__
        if not 2 <= num_classes <= len(SHAPES):
            raise ConfigError(
                f"{name}: num_classes must be in [2, {len(SHAPES)}] (one shape per class: "
                f"{', '.join(SHAPE_NAMES)}), got {num_classes}"
            )
        sizes = {"train": train_size, "val": val_size, "test": test_size}
        sizes = {split: check_int(value, f"{name}: {split}_size") for split, value in sizes.items()}  # plain ints
        image_size = check_int(image_size, f"{name}: image_size", minimum=8)
        seed = check_int(seed, f"{name}: seed", minimum=0)
        self._num_classes = int(num_classes)  # a plain int (the parser gives a ShapeCount)
        self.sizes = sizes
        self.image_size = image_size
        self.seed = seed

    @property
    def num_classes(self) -> int:
        return self._num_classes

    def split_seed(self, split: Split) -> int:
        """The generator seed of ``split``: distinct for every (seed, split) pair."""
        return self.seed * len(SPLITS) + SPLITS.index(split)

    def build_split(self, split: Split) -> ShapesDataset:
        images, labels = make_shapes(self.sizes[split], self._num_classes, self.image_size, self.split_seed(split))
        return ShapesDataset(images, labels)
