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
from datamodules.arrays import PixelArray, pixel_array
from datamodules.augment import ViewAugmentation
from datamodules.batch_ops import constant
from datamodules.keyed_draws import HashedKeys, ViewKeys, key_columns, keyed_uniforms, uniforms_after
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
    Heights and widths go through each step together (``[N, 2, …]``, height first), so that the
    boxes cost few kernels.
    """
    if isinstance(height, Tensor):
        height, width = height.view(-1, 1), width.view(-1, 1)  # one per row: against each try
    area = (height * width) * (min_scale + (1.0 - min_scale) * uniform[:, :CROP_TRIES])
    low, high = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    aspect = torch.exp(low + (high - low) * uniform[:, CROP_TRIES : 2 * CROP_TRIES])
    sides = torch.stack((area / aspect, area * aspect), dim=1).sqrt_().round_()  # [N, 2, tries]: (h, w)

    # Per side (h, w): the image's size, the fallback box's (no try fits: the centre crop of the whole
    # image at the nearest allowed aspect ratio), and the fallback's place (centred).
    if isinstance(height, Tensor):
        height, width = height.view(-1), width.view(-1)
        fallback_w, fallback_h = _fallback_box(height, width)
        size, fallback = torch.stack((height, width), dim=1), torch.stack((fallback_h, fallback_w), dim=1)
        centre = (size - fallback) // 2
    else:
        ratio = width / height
        if ratio < CROP_RATIO[0]:
            fallback_w, fallback_h = width, int(round(width / CROP_RATIO[0]))
        elif ratio > CROP_RATIO[1]:
            fallback_w, fallback_h = int(round(height * CROP_RATIO[1])), height
        else:
            fallback_w, fallback_h = width, height
        values = (height, width, fallback_h, fallback_w, (height - fallback_h) // 2, (width - fallback_w) // 2)
        size, fallback, centre = constant(values, uniform.device, uniform.dtype, (3, 2)).unbind(0)
    fits = ((sides > 0) & (sides <= size.view(-1, 2, 1))).all(dim=1)  # [N, tries]
    first = fits.to(torch.uint8).argmax(dim=1).view(-1, 1, 1).expand(-1, 2, 1)  # the first try that fits
    found = fits.any(dim=1, keepdim=True)
    sides = torch.where(found, sides.gather(2, first).squeeze(2), fallback)  # [N, 2]
    # randint(0, size - side + 1): floor(u · count), clamped since u · count may round up to count.
    room = size - sides
    place = torch.minimum((uniform[:, 2 * CROP_TRIES : 2 * CROP_TRIES + 2] * (room + 1)).floor_(), room)
    place = torch.where(found, place, centre)  # (top, left)
    return torch.stack((place[:, 1], place[:, 0], sides[:, 1], sides[:, 0]), dim=1)


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
    (drawn from ``generator``, or the default generator of the images' device; with ``keys``, the
    ``keyed_draws.ViewKeys`` of the samples (or int64 ``[B, 3]`` rows ``(seed, epoch, index)``) on
    the images' device, a function of each sample's key and view number alone:
    ``keyed_draws.keyed_uniforms``). ``sample`` and ``apply`` are the two halves, for tests and for
    callers that pick their own parameters.

    On a GPU the cost of a call is the number of kernels it launches (a few microseconds of CPU
    each, for images this small), so every step works on all views at once, small per-view numbers
    go through each formula together, and constants are made once per device: about 230 tensor
    operations per call with keys (``benchmarks/augment.py --calls`` counts them;
    ``tests/datamodules/test_device_augment.py`` bounds them).

    Args:
        augmentation: the settings, shared with the worker path.
    """

    def __init__(self, augmentation: ViewAugmentation) -> None:
        self.augmentation = augmentation
        a = augmentation
        self.jitter_on = a.jitter_prob > 0 and max(a.brightness, a.contrast, a.saturation, a.hue) > 0
        # The jitter factors' ranges: U(low, low + span) for brightness, contrast, saturation and hue.
        self.factor_bounds = (
            (max(0.0, 1.0 - a.brightness), 1.0 + a.brightness),
            (max(0.0, 1.0 - a.contrast), 1.0 + a.contrast),
            (max(0.0, 1.0 - a.saturation), 1.0 + a.saturation),
            (-a.hue, a.hue),
        )
        # The blend passes of the colour jitter: the position in each view's order of ops each pass
        # looks at, and whether it runs before the hue rotation (+1) or after it (-1).
        if a.hue == 0:  # torchvision skips an op whose strength is 0: the four positions, no hue rotation
            self.blend_positions: tuple[int, ...] = (0, 1, 2, 3)
            self.blend_sides: tuple[int, ...] = ()
        else:
            self.blend_positions, self.blend_sides = (0, 1, 2, 1, 2, 3), (1, 1, 1, -1, -1, -1)

    def __call__(
        self,
        images: Tensor,
        num_views: int = 2,
        generator: Optional[torch.Generator] = None,
        keys: Union[ViewKeys, HashedKeys, Tensor, None] = None,
    ) -> list[Tensor]:
        return list(self.stacked(images, num_views, generator, keys).unbind(0))

    def stacked(
        self,
        images: Tensor,
        num_views: int = 2,
        generator: Optional[torch.Generator] = None,
        keys: Union[ViewKeys, HashedKeys, Tensor, None] = None,
    ) -> Tensor:
        """The call's views as one tensor ``[num_views, B, 3, crop, crop]``; ``keys`` may also be
        ``keyed_draws.HashedKeys`` (the batch's seed and epoch hashed already)."""
        if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"BatchViewAugmentation expects uint8 images [B, 3, H, W], got {images.dtype} {tuple(images.shape)}")
        batch, _, height, width = images.shape
        uniform = None
        if isinstance(keys, HashedKeys):
            uniform = uniforms_after(keys.state, keys.index, num_views, PARAM_COLUMNS)
        elif keys is not None:
            uniform = keyed_uniforms(*key_columns(keys), num_views, PARAM_COLUMNS)
        params = self.sample(num_views * batch, height, width, images.device, generator, uniform)
        return self.apply(images.float().div_(255), params, num_views)

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
        # Views without jitter get the identity factors (1, 1, 1, 0): every op leaves them as they are.
        low, high = zip(*self.factor_bounds)
        span = tuple(top - bottom for bottom, top in zip(low, high))
        bounds = constant((*low, *span, 1.0, 1.0, 1.0, 0.0), u.device, u.dtype, (3, 4))
        factors = torch.where(jitter.view(-1, 1), bounds[0] + bounds[1] * rest[:, :4], bounds[2])
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
        a, batch = self.augmentation, images.shape[0]
        flip = params.flip.view(num_views, batch) if a.hflip_prob > 0 else None  # folded into the crop's weights
        views = batch_ops.resized_crop(images, params.boxes.view(num_views, batch, 4), a.crop_size, flip)
        views = self.augment_crops(views.reshape(num_views * batch, *views.shape[2:]), params, flipped=True)
        return views.reshape(num_views, batch, *views.shape[1:])

    def augment_crops(self, views: Tensor, params: ViewParams, flipped: bool = False) -> Tensor:
        """What follows the crop: flip (unless ``flipped``: done with the crop), colour jitter,
        grayscale, blur and normalisation of float ``views [N, 3, crop, crop]`` in ``[0, 1]`` (one row
        of ``params`` each; ``params.boxes`` is not read). For crops made elsewhere, e.g. of images of
        mixed sizes (``datamodules.decoded_views``)."""
        a = self.augmentation
        if a.hflip_prob > 0 and not flipped:
            views = batch_ops.horizontal_flip(views, params.flip)
        if self.jitter_on:
            views = self.colour_jitter(views, params)
        if a.grayscale_prob > 0:
            views = batch_ops.to_grayscale(views, params.gray)
        if a.blur_prob > 0:
            blurred = batch_ops.gaussian_blur(views, a.blur_kernel_size, params.sigma)
            views = torch.where(params.blur.view(-1, 1, 1, 1), blurred, views)
        mean = constant(tuple(a.mean), views.device, views.dtype, (1, 3, 1, 1))
        std = constant(tuple(a.std), views.device, views.dtype, (1, 3, 1, 1))
        return views.sub_(mean).div_(std)

    def colour_jitter(self, views: Tensor, params: ViewParams) -> Tensor:
        """ColorJitter with each view's factors and order of ops.

        Brightness, contrast and saturation are one blend op (``batch_ops.blend_colour``) whatever
        the view, so each pass applies to every view the op its order puts there. The hue rotation
        costs most, so it runs once: the blends ordered before each view's hue (positions 0-2, the
        identity for views whose hue comes earlier), the hue rotation, then the blends after it
        (positions 1-3). The passes' factors are worked out for all passes at once.
        """
        scale, gray_weight, mean_weight = self._blend_passes(params)
        before = len(self.blend_sides) // 2 if self.blend_sides else len(self.blend_positions)
        for step in range(before):
            views = batch_ops.blend_colour(views, scale[step], gray_weight[step], mean_weight[step])
        if not self.blend_sides:
            return views
        rotated = batch_ops.adjust_hue(views, params.factors[:, HUE])  # the identity factor 0 without jitter
        views = torch.where(params.jitter.view(-1, 1, 1, 1), rotated, views)  # exactly unchanged without jitter
        for step in range(before, len(self.blend_positions)):
            views = batch_ops.blend_colour(views, scale[step], gray_weight[step], mean_weight[step])
        return views

    def _blend_passes(self, params: ViewParams) -> tuple[Tensor, Tensor, Tensor]:
        """``(scale, gray_weight, mean_weight)`` ``[passes, N]`` of ``batch_ops.blend_colour`` in each
        blend pass: the view's op at the pass's position if it is a blend on the pass's side of the
        hue rotation, else the identity ``(1, 0, 0)``."""
        device = params.order.device
        positions = constant(self.blend_positions, device, torch.int64)
        op = params.order.index_select(1, positions)  # [N, passes]
        if self.blend_sides:  # the op at position k runs before the hue if k < hue's position, after it if k > it
            hue_at = (params.order == HUE).to(torch.uint8).argmax(dim=1, keepdim=True)
            applies = (positions - hue_at) * constant(self.blend_sides, device, torch.int64) < 0
        else:
            applies = op != HUE
        factor = torch.where(applies, params.factors.gather(1, op), 1.0)  # 1 is the identity of all three blends
        towards = 1.0 - factor
        gray_weight = towards * (op == SATURATION)
        mean_weight = towards * (op == CONTRAST)
        return factor.T, gray_weight.T, mean_weight.T


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
        self._array: Union[PixelArray, None, bool] = False  # False: not looked for yet

    def __getstate__(self) -> dict[str, Any]:
        # Workers started by spawn get the dataset pickled: the array is looked up again there (the
        # lookup is cheap) rather than travelling as a second reference to the dataset's data.
        return {**self.__dict__, "_array": False}

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitems__(self, keys: list[Any]) -> list[tuple[Any, ...]]:
        """The items of a whole batch (the DataLoader asks for them so): from the uint8 array
        behind the data when there is one (``arrays.pixel_array``: CIFAR, SVHN, STL-10, the shapes),
        one indexing for the batch instead of a PIL image per sample; else item by item."""
        if self._array is False:
            self._array = pixel_array(self.base)
        if not isinstance(self._array, PixelArray):
            return [self[key] for key in keys]
        keyed = isinstance(keys[0], tuple)
        indices = [int(key[2]) for key in keys] if keyed else [int(key) for key in keys]
        images, labels = self._array.batch(indices)
        items = list(zip(images.unbind(0), labels.tolist(), indices))
        return [(*item, int(key[0]), int(key[1])) for item, key in zip(items, keys)] if keyed else items

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
            seeds, epochs = {sample[3] for sample in samples}, {sample[4] for sample in samples}
            if len(seeds) == len(epochs) == 1:  # one sampler's batch: hash its seed and epoch once
                keys = ViewKeys(seeds.pop(), epochs.pop(), indices)
            else:
                keys = torch.tensor([(sample[3], sample[4], sample[2]) for sample in samples], dtype=torch.int64)
        return self.views(images, self.num_views, keys=keys), labels, indices
