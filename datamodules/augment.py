"""View augmentations of the SimCLR / MoCo-v2 family, built from torchvision's v2 transforms.

:class:`ViewAugmentation` defaults to MoCo v2's CIFAR recipe: RandomResizedCrop(32, scale 0.2-1),
ColorJitter(0.4, 0.4, 0.4, 0.1) applied with p 0.8, random grayscale (p 0.2), horizontal flip.
Wang & Liu 2021 (the Table-1 setup) jitter hue as strongly as the rest and on every view,
ColorJitter(0.4, 0.4, 0.4, 0.4) with p 1 (``hue: 0.4, jitter_prob: 1.0``), which
``configs/cifar10/memory_bank.yaml`` sets. Gaussian blur (the ImageNet recipes) is off by default.

``query_policy: autoaugment_cifar10`` gives the first view (MoCo's query) the PaCo authors' query
pipeline instead (``LT/paco_cifar.py``, ``augmentation_regular``): RandomCrop with 4 pixels of
padding, flip, AutoAugment's CIFAR-10 policy and, with ``query_erasing_prob``, a Cutout-like
erased square; the other views keep the pipeline above (their key view).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional, get_args

import torch
from torchvision.transforms import v2

from ssl_app.errors import ConfigError

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)
SVHN_MEAN = (0.4377, 0.4438, 0.4728)
SVHN_STD = (0.1980, 0.2010, 0.1970)
STL10_MEAN = (0.4467, 0.4398, 0.4066)
STL10_STD = (0.2603, 0.2566, 0.2713)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: The first view's pipeline: ``none`` (the same as the others), or the PaCo authors' CIFAR query view.
QueryPolicy = Literal["none", "autoaugment_cifar10"]
#: Padding of the query view's RandomCrop (``transforms.RandomCrop(32, padding=4)`` in the authors' code).
QUERY_CROP_PADDING = 4


@dataclass(frozen=True)
class ViewAugmentation:
    """Settings of the random view pipeline and of the matching deterministic eval pipeline.

    Both pipelines accept PIL images or uint8 ``[3, H, W]`` tensors and return a float32
    ``[3, crop_size, crop_size]`` tensor normalised with ``mean``/``std``.

    ``crop_size``, ``mean`` and ``std`` may be ``None``: *read from the data*. Only
    ``ImageFolderDataModule`` fills them in (a seeded sample of its training images, see
    ``datamodules.image_stats``); every other datamodule refuses them, and the pipelines below
    refuse to run until they are filled (:attr:`from_data` names the ones left).

    Args:
        crop_size: side of the square output, in pixels (``None``: from the data).
        min_scale: lower bound of the area fraction kept by RandomResizedCrop (upper bound 1).
        brightness, contrast, saturation: ColorJitter strengths (0 disables each).
        hue: ColorJitter hue strength, in [0, 0.5].
        jitter_prob: probability of applying the colour jitter.
        grayscale_prob: probability of converting a view to grayscale (kept 3-channel).
        hflip_prob: probability of a horizontal flip.
        blur_prob: probability of a Gaussian blur (kernel about 10% of the crop, sigma 0.1-2).
        mean, std: per-channel normalisation, after scaling pixels to [0, 1] (``None``: from the data).
        eval_crop_fraction: the eval pipeline resizes the shorter side to
            ``crop_size / eval_crop_fraction`` and centre-crops ``crop_size`` (0.875 is the usual
            ImageNet 256 -> 224; 1.0 keeps the whole image).
        query_policy: the first training view's pipeline: ``none`` (as every view), or
            ``autoaugment_cifar10``, the PaCo authors' query view: RandomCrop(crop_size, padding 4),
            flip (``hflip_prob``), torchvision's AutoAugment with the CIFAR-10 policy, no colour
            jitter, grayscale or blur. Only with ``augment_on: workers``; val/test views keep the
            pipeline above.
        query_erasing_prob: with ``query_policy: autoaugment_cifar10``, the probability of erasing
            a square of half the crop's side to black on the query view (torchvision's
            RandomErasing for the authors' Cutout(n_holes=1, length=16) on 32-pixel crops, which
            they apply always: 1.0).
    """

    crop_size: Optional[int] = 32
    min_scale: float = 0.2
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4
    hue: float = 0.1
    jitter_prob: float = 0.8
    grayscale_prob: float = 0.2
    hflip_prob: float = 0.5
    blur_prob: float = 0.0
    mean: Optional[tuple[float, float, float]] = CIFAR10_MEAN
    std: Optional[tuple[float, float, float]] = CIFAR10_STD
    eval_crop_fraction: float = 1.0
    query_policy: QueryPolicy = "none"
    query_erasing_prob: float = 0.0

    def __post_init__(self) -> None:
        # Coerce lists (from YAML) to tuples so the frozen dataclass stays hashable.
        if self.mean is not None:
            object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        if self.std is not None:
            object.__setattr__(self, "std", tuple(float(s) for s in self.std))
        if self.crop_size is not None:
            _check(
                isinstance(self.crop_size, int) and self.crop_size >= 1, "crop_size", "an integer >= 1 or null", self.crop_size
            )
        _check(0.0 < self.min_scale <= 1.0, "min_scale", "in (0, 1]", self.min_scale)
        for name in ("brightness", "contrast", "saturation"):
            _check(getattr(self, name) >= 0.0, name, ">= 0", getattr(self, name))
        _check(0.0 <= self.hue <= 0.5, "hue", "in [0, 0.5]", self.hue)
        for name in ("jitter_prob", "grayscale_prob", "hflip_prob", "blur_prob"):
            value = getattr(self, name)
            _check(0.0 <= value <= 1.0, name, "a probability in [0, 1]", value)
        if self.mean is not None:
            _check(len(self.mean) == 3, "mean", "3 values (R, G, B) or null", list(self.mean))
        if self.std is not None:
            _check(len(self.std) == 3 and all(s > 0 for s in self.std), "std", "3 positive values or null", list(self.std))
        _check(0.0 < self.eval_crop_fraction <= 1.0, "eval_crop_fraction", "in (0, 1]", self.eval_crop_fraction)
        _check(self.query_policy in get_args(QueryPolicy), "query_policy", f"one of {get_args(QueryPolicy)}", self.query_policy)
        _check(0.0 <= self.query_erasing_prob <= 1.0, "query_erasing_prob", "a probability in [0, 1]", self.query_erasing_prob)
        if self.query_erasing_prob > 0 and self.query_policy == "none":
            raise ConfigError("augmentation.query_erasing_prob needs a query_policy (autoaugment_cifar10), got query_policy none")

    @property
    def from_data(self) -> tuple[str, ...]:
        """The settings left to be read from the data (``None``): some of crop_size, mean, std."""
        return tuple(name for name in ("crop_size", "mean", "std") if getattr(self, name) is None)

    def _require_settled(self) -> None:
        if self.from_data:
            raise ConfigError(
                f"augmentation.{'/'.join(self.from_data)} is null (read from the data), which only "
                "ImageFolderDataModule fills in; set a value"
            )

    @property
    def blur_kernel_size(self) -> int:
        """Odd Gaussian-blur kernel of about 10% of the crop (at least 3)."""
        size = max(3, int(round(0.1 * self.crop_size)))
        return size if size % 2 == 1 else size + 1

    def train_transform(self) -> v2.Compose:
        """The random view pipeline: crop, flip, colour jitter, grayscale, optional blur."""
        self._require_settled()
        # No ToImage first: the geometric and colour ops run on PIL images when given them,
        # several times faster than torch's per-image kernels on 32×32 inputs.
        steps: list[v2.Transform] = [
            v2.RandomResizedCrop(self.crop_size, scale=(self.min_scale, 1.0), antialias=True),
            v2.RandomHorizontalFlip(p=self.hflip_prob),
        ]
        if self.jitter_prob > 0 and max(self.brightness, self.contrast, self.saturation, self.hue) > 0:
            jitter = v2.ColorJitter(self.brightness, self.contrast, self.saturation, self.hue)
            steps.append(v2.RandomApply([jitter], p=self.jitter_prob))
        if self.grayscale_prob > 0:
            steps.append(v2.RandomGrayscale(p=self.grayscale_prob))
        if self.blur_prob > 0:
            blur = v2.GaussianBlur(self.blur_kernel_size, sigma=(0.1, 2.0))
            steps.append(v2.RandomApply([blur], p=self.blur_prob))
        steps += self._to_normalised_tensor()
        return v2.Compose(steps)

    def query_transform(self) -> v2.Compose:
        """The PaCo authors' CIFAR query view (``query_policy: autoaugment_cifar10``).

        Their Cutout blacks out (before normalisation) a 16×16 square centred anywhere, clipped at
        the border; RandomErasing's square of the same side stays inside the image, so its erased
        area is always the full quarter of a 32-pixel crop.
        """
        self._require_settled()
        steps: list[v2.Transform] = [
            v2.RandomCrop(self.crop_size, padding=QUERY_CROP_PADDING),
            v2.RandomHorizontalFlip(p=self.hflip_prob),
            v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
        ]
        if self.query_erasing_prob > 0:
            steps.append(v2.RandomErasing(p=self.query_erasing_prob, scale=(0.25, 0.25), ratio=(1.0, 1.0), value=0))
        steps += [v2.Normalize(mean=list(self.mean), std=list(self.std)), v2.ToPureTensor()]
        return v2.Compose(steps)

    def view_transforms(self, num_views: int) -> list[v2.Compose]:
        """One pipeline per training view: the query pipeline first when ``query_policy`` sets one."""
        if self.query_policy == "none":
            return [self.train_transform()] * num_views
        return [self.query_transform(), *[self.train_transform()] * (num_views - 1)]

    def eval_transform(self) -> v2.Compose:
        """The deterministic pipeline: resize the shorter side, centre-crop, normalise (in two
        halves: :meth:`eval_crop_transform`, then :meth:`eval_normalise_transform`)."""
        return v2.Compose([*self._eval_crop_steps(), *self._to_normalised_tensor()])

    def eval_crop_transform(self) -> v2.Compose:
        """The eval pipeline's first half, image by image: resize the shorter side to
        ``crop_size / eval_crop_fraction``, centre-crop ``crop_size``, as a uint8 ``[3, crop, crop]``
        tensor (what a device cache of evaluation images holds, ``datamodules.eval_images``)."""
        return v2.Compose([*self._eval_crop_steps(), v2.ToImage(), v2.ToPureTensor()])

    def eval_normalise_transform(self) -> v2.Compose:
        """The eval pipeline's second half, for one uint8 image or a batch ``[B, 3, H, W]`` on any
        device: scale to [0, 1] and normalise with ``mean``/``std`` (elementwise, so a batch gets
        exactly what each of its images would)."""
        self._require_settled()
        return v2.Compose(self._to_normalised_tensor())

    def _eval_crop_steps(self) -> list[v2.Transform]:
        self._require_settled()
        resize = int(math.floor(self.crop_size / self.eval_crop_fraction + 1e-6))
        return [v2.Resize(resize, antialias=True), v2.CenterCrop(self.crop_size)]

    def _to_normalised_tensor(self) -> list[v2.Transform]:
        return [
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=list(self.mean), std=list(self.std)),
            v2.ToPureTensor(),
        ]


def _check(ok: bool, name: str, expected: str, value: object) -> None:
    if not ok:
        raise ConfigError(f"augmentation.{name} must be {expected}, got {value!r}")
