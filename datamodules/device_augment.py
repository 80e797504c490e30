"""View augmentation of whole uint8 batches on their device (``augment_on: device``).

:class:`BatchViewAugmentation` draws the same random views as :meth:`ViewAugmentation.train_transform`
(random resized crop, flip, colour jitter in a random order with probability ``jitter_prob``,
grayscale, optional blur, normalisation), with every random parameter drawn per view, on the
images' device, in one call (of the torch RNG, or of :func:`keyed_draws.keyed_uniforms` for the
training views, which are a function of ``(seed, epoch, index, view)``), and applied by the
batched ops of :mod:`datamodules.batch_ops`. No Python loop runs over the images and nothing syncs with the host,
so on a GPU the views of a batch cost a few kernels instead of a CPU worker's per-image work.

The worker side of this path, :class:`UnaugmentedImages` and :func:`collate_images`, only turns
each sample into a uint8 ``[3, H, W]`` tensor, so all training images must share one size
(:func:`check_one_size` probes a few before training, the collate checks every batch). Image
folders instead hand over their files, decoded on the device and cropped at each image's own size
(``datamodules.encoded_images``, ``datamodules.decoded_views``).

How the two paths differ (tests/datamodules/test_device_augment.py compares their statistics):
the worker path runs on PIL images, which round (resize) or truncate (the colour ops) to 8 bits
after every step and shift hue in 8-bit HSV, so its views sit up to about 1/255 darker per colour
op; the device path stays in float32 throughout and follows torchvision's formulas for tensors
(e.g. luma weights 0.2989/0.587/0.114 where PIL uses 0.299). The crop boxes, flips, jitter factors
and order, grayscale and blur are drawn from the same distributions on both paths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset

from datamodules import batch_ops
from datamodules.augment import ViewAugmentation
from datamodules.keyed_draws import keyed_uniforms
from ssl_app.errors import ConfigError

# The colour jitter's ops, numbered as torchvision's ColorJitter numbers them.
BRIGHTNESS, CONTRAST, SATURATION, HUE = range(4)
# RandomResizedCrop's aspect ratios and tries (torchvision's defaults, which ViewAugmentation uses).
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
CROP_TRIES = 10
BLUR_SIGMA = (0.1, 2.0)
#: U(0, 1) numbers per view: the crop's tries and place, then 13 for the rest (see ``sample``).
PARAM_COLUMNS = 2 * CROP_TRIES + 2 + 13
#: An image side: one for every view (a Python number), or each view's own (a float tensor ``[N]``).
Size = Union[int, Tensor]


@dataclass
class ViewParams:
    """Random parameters of ``N`` views (each tensor ``[N]`` or ``[N, k]``, on one device).

    Attributes:
        boxes: crop ``(left, top, width, height)`` in whole pixels, float ``[N, 4]``.
        flip: mirror the view horizontally.
        jitter: apply the colour jitter.
        order: ``[N, 4]`` the jitter's ops in the order applied (``BRIGHTNESS`` … ``HUE``).
        factors: ``[N, 4]`` brightness, contrast and saturation factors and the hue shift; the
            identity (1, 1, 1, 0) for an op that is off.
        gray: convert the view to grayscale (after the jitter).
        blur: blur the view (last), with standard deviation ``sigma`` pixels.
    """

    boxes: Tensor
    flip: Tensor
    jitter: Tensor
    order: Tensor
    factors: Tensor
    gray: Tensor
    blur: Tensor
    sigma: Tensor


def sample_crop_boxes(uniform: Tensor, height: Size, width: Size, min_scale: float) -> Tensor:
    """RandomResizedCrop's boxes (``scale = (min_scale, 1)``, ratio 3/4–4/3), one per row of ``uniform``.

    ``uniform`` is ``[N, 2 · CROP_TRIES + 2]`` of U(0, 1) numbers. As ``RandomResizedCrop.make_params``:
    try an area fraction ``U(min_scale, 1)`` and a log-uniform aspect ratio ``CROP_TRIES`` times, keep
    the first whose rounded box fits, and place it uniformly; if none fits, the centred box of the
    whole image clipped to the nearest allowed aspect ratio. All tries are drawn at once and the
    first that fits is picked, which leaves the distribution unchanged. ``height`` and ``width``:
    one size for every row, or each row's own (float tensors ``[N]``, for images of mixed sizes).
    """
    if isinstance(height, Tensor):
        height, width = height.view(-1, 1), width.view(-1, 1)  # one per row: against each try
    area = (height * width) * (min_scale + (1.0 - min_scale) * uniform[:, :CROP_TRIES])
    low, high = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    aspect = torch.exp(low + (high - low) * uniform[:, CROP_TRIES : 2 * CROP_TRIES])
    w = torch.sqrt(area * aspect).round()
    h = torch.sqrt(area / aspect).round()
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.to(torch.uint8).argmax(dim=1, keepdim=True)  # the first try that fits
    w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)

    # No try fits: the centre crop of the whole image at the nearest allowed aspect ratio.
    if isinstance(height, Tensor):
        height, width = height.view(-1), width.view(-1)
        fallback_w, fallback_h = _fallback_box(height, width)
    else:
        ratio = width / height
        if ratio < CROP_RATIO[0]:
            fallback_w, fallback_h = width, int(round(width / CROP_RATIO[0]))
        elif ratio > CROP_RATIO[1]:
            fallback_w, fallback_h = int(round(height * CROP_RATIO[1])), height
        else:
            fallback_w, fallback_h = width, height
    found = fits.any(dim=1)
    w = torch.where(found, w, fallback_w)
    h = torch.where(found, h, fallback_h)
    # randint(0, height - h + 1): floor(u · count), clamped since u · count may round up to count.
    top = torch.minimum((uniform[:, -2] * (height - h + 1)).floor(), height - h)
    left = torch.minimum((uniform[:, -1] * (width - w + 1)).floor(), width - w)
    top = torch.where(found, top, (height - fallback_h) // 2)
    left = torch.where(found, left, (width - fallback_w) // 2)
    return torch.stack((left, top, w, h), dim=1)


def _fallback_box(height: Tensor, width: Tensor) -> tuple[Tensor, Tensor]:
    """The fallback box's ``(width, height)`` of each image, as the scalar branch of :func:`sample_crop_boxes`."""
    ratio = width / height
    narrow, wide = ratio < CROP_RATIO[0], ratio > CROP_RATIO[1]
    fallback_w = torch.where(wide, (height * CROP_RATIO[1]).round(), width)
    fallback_h = torch.where(narrow, (width / CROP_RATIO[0]).round(), height)
    return fallback_w, fallback_h


class BatchViewAugmentation:
    """``ViewAugmentation.train_transform`` for a batch of uint8 images on any device.

    ``augmentation(images, num_views)`` with uint8 ``images [B, 3, H, W]`` returns ``num_views``
    float32 views ``[B, 3, crop, crop]``, normalised, every view with its own random parameters
    (drawn from ``generator``, or the default generator of the images' device; with ``keys``,
    int64 ``[B, 3]`` rows ``(seed, epoch, index)`` on the images' device, a function of each
    sample's key and view number alone: ``keyed_draws.keyed_uniforms``). ``sample`` and
    ``apply`` are the two halves, for tests and for callers that pick their own parameters.

    Args:
        augmentation: the settings, shared with the worker path.
    """

    def __init__(self, augmentation: ViewAugmentation) -> None:
        self.augmentation = augmentation
        a = augmentation
        self.jitter_on = a.jitter_prob > 0 and max(a.brightness, a.contrast, a.saturation, a.hue) > 0
        self._normalisers: dict[tuple[torch.device, torch.dtype], tuple[Tensor, Tensor]] = {}

    def __call__(
        self, images: Tensor, num_views: int = 2, generator: Optional[torch.Generator] = None, keys: Optional[Tensor] = None
    ) -> list[Tensor]:
        if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"BatchViewAugmentation expects uint8 images [B, 3, H, W], got {images.dtype} {tuple(images.shape)}")
        batch, _, height, width = images.shape
        uniform = None if keys is None else keyed_uniforms(keys[:, 0], keys[:, 1], keys[:, 2], num_views, PARAM_COLUMNS)
        params = self.sample(num_views * batch, height, width, images.device, generator, uniform)
        views = self.apply(images.float().div_(255), params, num_views)
        return list(views.unbind(0))

    def sample(
        self,
        n: int,
        height: Size,
        width: Size,
        device: torch.device,
        generator: Optional[torch.Generator] = None,
        uniform: Optional[Tensor] = None,
    ) -> ViewParams:
        """The random parameters of ``n`` views of ``height × width`` images (one size, or each
        view's own: :func:`sample_crop_boxes`), from ``uniform`` (U(0, 1) ``[n, PARAM_COLUMNS]``) or
        else one call of the RNG."""
        a = self.augmentation
        u = torch.rand(n, PARAM_COLUMNS, device=device, generator=generator) if uniform is None else uniform
        # rest: 0-3 jitter factors, 4 jitter or not, 5 flip, 6-9 keys of the jitter order, 10 gray, 11 blur, 12 sigma.
        crop, rest = u[:, : 2 * CROP_TRIES + 2], u[:, 2 * CROP_TRIES + 2 :]
        jitter = rest[:, 4] < a.jitter_prob
        bounds = [
            (max(0.0, 1.0 - a.brightness), 1.0 + a.brightness),
            (max(0.0, 1.0 - a.contrast), 1.0 + a.contrast),
            (max(0.0, 1.0 - a.saturation), 1.0 + a.saturation),
            (-a.hue, a.hue),
        ]
        # Views without jitter get the identity factors (1, 1, 1, 0): every op leaves them as they are.
        identity = (1.0, 1.0, 1.0, 0.0)
        factors = torch.stack(
            [torch.where(jitter, _uniform(rest[:, k], low, high), identity[k]) for k, (low, high) in enumerate(bounds)], dim=1
        )
        return ViewParams(
            boxes=sample_crop_boxes(crop, height, width, a.min_scale),
            flip=rest[:, 5] < a.hflip_prob,
            jitter=jitter,
            order=rest[:, 6:10].argsort(dim=1),  # a uniformly random permutation per view
            factors=factors,
            gray=rest[:, 10] < a.grayscale_prob,
            blur=rest[:, 11] < a.blur_prob,
            sigma=_uniform(rest[:, 12], *BLUR_SIGMA),
        )

    def apply(self, images: Tensor, params: ViewParams, num_views: int = 1) -> Tensor:
        """Views ``[num_views, B, 3, crop, crop]`` of float ``images [B, 3, H, W]`` in ``[0, 1]``;
        ``params`` holds ``num_views · B`` views, view-major (view ``v`` of image ``b`` is row ``v · B + b``)."""
        batch = images.shape[0]
        views = batch_ops.resized_crop(images, params.boxes.view(num_views, batch, 4), self.augmentation.crop_size)
        views = self.augment_crops(views.reshape(num_views * batch, *views.shape[2:]), params)
        return views.reshape(num_views, batch, *views.shape[1:])

    def augment_crops(self, views: Tensor, params: ViewParams) -> Tensor:
        """What follows the crop: flip, colour jitter, grayscale, blur and normalisation of float
        ``views [N, 3, crop, crop]`` in ``[0, 1]`` (one row of ``params`` each; ``params.boxes`` is not
        read). For crops made elsewhere, e.g. of images of mixed sizes (``datamodules.decoded_views``)."""
        a = self.augmentation
        if a.hflip_prob > 0:
            views = batch_ops.horizontal_flip(views, params.flip)
        if self.jitter_on:
            views = self.colour_jitter(views, params)
        if a.grayscale_prob > 0:
            views = batch_ops.to_grayscale(views, params.gray)
        if a.blur_prob > 0:
            blurred = batch_ops.gaussian_blur(views, a.blur_kernel_size, params.sigma)
            views = torch.where(params.blur.view(-1, 1, 1, 1), blurred, views)
        mean, std = self._normaliser(views.device, views.dtype)
        return views.sub_(mean).div_(std)

    def colour_jitter(self, views: Tensor, params: ViewParams) -> Tensor:
        """ColorJitter with each view's factors and order of ops.

        Brightness, contrast and saturation are one blend op (``batch_ops.blend_colour``) whatever
        the view, so each step applies to every view the op its order puts there. The hue rotation
        costs most, so it runs once: the blends ordered before each view's hue (steps 0-2, the
        identity for views whose hue comes earlier), the hue rotation, then the blends after it.
        """
        if self.augmentation.hue == 0:  # torchvision skips an op whose strength is 0
            for step in range(4):
                views = self._blend_step(views, params, step, None)
            return views
        hue_step = (params.order == HUE).to(torch.uint8).argmax(dim=1)
        for step in range(3):
            views = self._blend_step(views, params, step, step < hue_step)
        shift = torch.where(params.jitter, params.factors[:, HUE], 0.0)
        rotated = batch_ops.adjust_hue(views, shift)
        views = torch.where(params.jitter.view(-1, 1, 1, 1), rotated, views)  # exactly unchanged without jitter
        for step in range(1, 4):
            views = self._blend_step(views, params, step, step > hue_step)
        return views

    @staticmethod
    def _blend_step(views: Tensor, params: ViewParams, step: int, active: Optional[Tensor]) -> Tensor:
        """Apply each view's ``step``-th op if it is a blend (and ``active``); others pass unchanged."""
        op = params.order[:, step]
        factor = params.factors.gather(1, op.unsqueeze(1)).squeeze(1)
        applies = op != HUE if active is None else (op != HUE) & active
        factor = torch.where(applies, factor, 1.0)  # the factor 1 is the identity of all three blends
        zero = torch.zeros_like(factor)
        gray_weight = torch.where(op == SATURATION, 1.0 - factor, zero)
        mean_weight = torch.where(op == CONTRAST, 1.0 - factor, zero)
        return batch_ops.blend_colour(views, factor, gray_weight, mean_weight)

    def _normaliser(self, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        # Cached per device: a fresh host tensor each step would be a host-to-device copy each step.
        key = (device, dtype)
        if key not in self._normalisers:
            a = self.augmentation
            self._normalisers[key] = (
                torch.tensor(a.mean, device=device, dtype=dtype).view(1, 3, 1, 1),
                torch.tensor(a.std, device=device, dtype=dtype).view(1, 3, 1, 1),
            )
        return self._normalisers[key]


def _uniform(u: Tensor, low: float, high: float) -> Tensor:
    return low + (high - low) * u


class UnaugmentedImages(Dataset):
    """``(image, label, index)`` of an ``(image, label)`` dataset, the image as uint8 ``[3, H, W]``.

    The training set of ``augment_on: device``: the views are made from these on the device.
    PIL images are converted to RGB; a missing label becomes -1. Given a training sampler's key
    ``(seed, epoch, index)`` instead of an index, the item is ``(image, label, index, seed, epoch)``,
    so that :class:`AugmentingCollate` can key the views (:func:`collate_images` drops the two).
    """

    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: Union[int, tuple[int, int, int]]) -> tuple[Any, ...]:
        key = index if isinstance(index, tuple) else None
        if key is not None:
            index = key[2]
        image, label = self.base[index]
        item = (as_uint8_chw(image), -1 if label is None else int(label), int(index))
        return item if key is None else (*item, int(key[0]), int(key[1]))


def as_uint8_chw(image: Any) -> Tensor:
    """A PIL image or uint8 ``[3, H, W]`` tensor as a uint8 ``[3, H, W]`` tensor."""
    if isinstance(image, Image.Image):
        if image.mode != "RGB":
            image = image.convert("RGB")
        return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)
    if isinstance(image, Tensor) and image.dtype == torch.uint8 and image.dim() == 3 and image.shape[0] == 3:
        return image.as_subclass(Tensor)
    raise ConfigError(
        f"augment_on=device needs RGB images (PIL or uint8 [3, H, W] tensors), got {type(image).__name__} "
        f"{getattr(image, 'dtype', '')} {tuple(getattr(image, 'shape', ()))}"
    )


def check_one_size(data: Dataset, owner: str, probes: int = 16) -> None:
    """Fail before training if ``probes`` images spread over ``data`` differ in size (a folder of
    photos); :func:`collate_images` still checks every batch."""
    n = len(data)  # type: ignore[arg-type]
    if n == 0:
        return
    sizes = {tuple(data[i][0].shape[1:]) for i in sorted({round(k * (n - 1) / max(probes - 1, 1)) for k in range(probes)})}
    if len(sizes) > 1:
        low, high = min(sizes), max(sizes)
        raise ConfigError(
            f"{owner}: augment_on=device needs training images of one size, found {low} and {high} (H, W): "
            "set augment_on: workers for this data, or resize the images to one size on disk"
        )


def collate_images(samples: list[tuple[Any, ...]]) -> tuple[Tensor, Tensor, Tensor]:
    """Stack ``(image, label, index, ...)`` samples into ``(uint8 [B, 3, H, W], labels, indices)``."""
    images, labels, indices = tuple(zip(*samples))[:3]
    sizes = sorted({tuple(image.shape[1:]) for image in images})
    if len(sizes) > 1:
        raise ConfigError(
            f"augment_on=device needs training images of one size, got {sizes[0]} and {sizes[-1]} (H, W) in one batch: "
            "set augment_on: workers for this data, or resize the images to one size on disk"
        )
    return torch.stack(images), torch.tensor(labels, dtype=torch.int64), torch.tensor(indices, dtype=torch.int64)


class AugmentingCollate:
    """A DataLoader ``collate_fn`` that stacks uint8 images and makes their views for the whole batch
    at once in the worker (``augment_on: workers_batched``): the batched ops of
    :class:`BatchViewAugmentation` on the CPU, beside the training step rather than between steps.

    Samples keyed ``(image, label, index, seed, epoch)`` (the training sampler's keys) get views
    that are a function of ``(seed, epoch, index, view)``, as on the device; plain samples draw from
    the worker's torch RNG.
    """

    def __init__(self, augmentation: ViewAugmentation, num_views: int) -> None:
        self.views = BatchViewAugmentation(augmentation)
        self.num_views = num_views

    def __call__(self, samples: list[tuple[Any, ...]]) -> tuple[list[Tensor], Tensor, Tensor]:
        images, labels, indices = collate_images(samples)
        keys = None
        if len(samples[0]) == 5:
            keys = torch.tensor([(sample[3], sample[4], sample[2]) for sample in samples], dtype=torch.int64)
        return self.views(images, self.num_views, keys=keys), labels, indices
