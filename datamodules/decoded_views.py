"""Training views of a batch of image files, decoded and augmented on the device (``augment_on: device``).

The device side of ``datamodules.encoded_images``: :func:`decode_images` decodes a batch's JPEGs
in one call of torchvision's ``decode_jpeg`` on the batch's device (nvJPEG on a GPU, libjpeg-turbo
on the CPU, whose pixels equal PIL's) and copies there the images the workers decoded; then
:func:`encoded_views` makes the views:

- images of one size (a folder of CIFAR PNGs, a batch that happens to share a size): stacked, and
  :class:`~datamodules.device_augment.BatchViewAugmentation` makes the views as for in-memory data;
- images of mixed sizes (photos): every view's parameters are drawn on the host (no host-device
  sync) from the same keyed numbers (``keyed_draws.keyed_uniforms``), each crop box from its own
  image's size (``sample_crop_boxes``); each box is cropped and resized to the crop size by
  ``F.interpolate(bilinear, antialias=True)``, one call per view (torchvision's ``resized_crop``
  for tensors, so the same resampling as the one-size path to float precision, and PIL's, the
  worker path's, to within one 8-bit level); the flip, jitter, grayscale, blur and normalisation
  then run on the batch of crops (``BatchViewAugmentation.augment_crops``).

Either way a view is a function of ``(seed, epoch, index, view)``, as on every ``augment_on`` path.

A JPEG that the batched decode cannot read makes the batch decode again one image at a time on the
CPU, and a file no decoder reads stops the run with ``image_files.CorruptImageError`` naming it (the
policy of ``ImageFolderDataModule.on_bad_image`` for a file whose header reads but whose pixels do not).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.io import ImageReadMode, decode_jpeg

from datamodules.device_augment import PARAM_COLUMNS, BatchViewAugmentation, ViewParams, as_uint8_chw
from datamodules.encoded_images import EncodedBatch
from datamodules.image_files import load_rgb
from datamodules.keyed_draws import ViewKeys, key_columns, keyed_uniforms

HOST = torch.device("cpu")
#: A batch's view keys: ``ViewKeys``, or int64 rows ``(seed, epoch, index)`` ``[B, 3]``.
Keys = Union[ViewKeys, Tensor]


def decode_images(batch: EncodedBatch, device: torch.device) -> list[Tensor]:
    """Every image of ``batch`` as uint8 ``[3, H, W]`` on ``device``, in batch order."""
    images: list[Optional[Tensor]] = [None] * len(batch)
    if batch.jpeg_at:
        paths = [batch.paths[k] for k in batch.jpeg_at]
        for k, image in zip(batch.jpeg_at, _decode_jpegs(batch.jpegs(), paths, device)):
            images[k] = image
    if batch.pixels_at:
        pixels = batch.pixels
        moved = (
            pixels.to(device, non_blocking=True).unbind(0)
            if isinstance(pixels, Tensor)
            else [p.to(device, non_blocking=True) for p in pixels]
        )
        for k, image in zip(batch.pixels_at, moved):
            images[k] = image
    return images  # type: ignore[return-value]


def _decode_jpegs(jpegs: list[Tensor], paths: list[str], device: torch.device) -> list[Tensor]:
    """All at once; if that fails, one by one on the CPU, so that a bad file is found and named."""
    try:
        with warnings.catch_warnings(), _decoding_stream(device) as record:
            # torchvision 0.29 deprecates its decoders for TorchCodec's; they still decode on every device.
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            return record(decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=device))
    except RuntimeError:
        return [_decode_on_host(data, path).to(device, non_blocking=True) for data, path in zip(jpegs, paths)]


#: The stream each CUDA device's decoded images are allocated on (made once per process, when first decoding).
_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


@contextmanager
def _decoding_stream(device: torch.device) -> Iterator[Callable[[list[Tensor]], list[Tensor]]]:
    """On a GPU, allocate the decoded images on a stream of their own.

    nvJPEG writes them on torchvision's decoder stream, which does not wait for the work queued on
    the current stream: an output allocated there could reuse memory that queued kernels (the
    previous step's) still read. The caching allocator gives a stream's allocations only memory
    freed on that stream, so this stream's pool never holds such memory; ``decode_jpeg`` returns
    once its stream is done, and each image is marked used by the current stream (``record_stream``)
    so that its memory waits for the kernels that read it. Yields what marks them.
    """
    if device.type != "cuda":
        yield lambda images: images
        return
    current = torch.cuda.current_stream(device)
    if device not in _STREAMS:
        _STREAMS[device] = torch.cuda.Stream(device)
    side = _STREAMS[device]

    def record(images: list[Tensor]) -> list[Tensor]:
        current.wait_stream(side)
        for image in images:
            image.record_stream(current)
        return images

    with torch.cuda.stream(side):
        yield record


def _decode_on_host(data: Tensor, path: str) -> Tensor:
    """libjpeg-turbo's decode, else PIL's (``load_rgb``), which raises ``CorruptImageError`` naming ``path``."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            return decode_jpeg(data, mode=ImageReadMode.RGB)
    except RuntimeError:
        return as_uint8_chw(load_rgb(path))


def encoded_views(
    batch: EncodedBatch, augmentation: BatchViewAugmentation, num_views: int, device: torch.device, keys: Keys
) -> list[Tensor]:
    """``num_views`` float32 views ``[B, 3, crop, crop]`` of ``batch`` on ``device``, normalised.

    ``keys`` are the samples' ``(seed, epoch, index)``: ``keyed_draws.ViewKeys`` with the indices on
    the host, or int64 rows ``[B, 3]`` there.
    """
    if isinstance(batch.pixels, Tensor) and not batch.jpeg_at:  # decoded in the workers, of one size, in batch order
        return augmentation(batch.pixels.to(device, non_blocking=True), num_views, keys=keys.to(device, non_blocking=True))
    images = decode_images(batch, device)
    if len({tuple(image.shape) for image in images}) == 1:
        return augmentation(torch.stack(images), num_views, keys=keys.to(device, non_blocking=True))
    return mixed_size_views(images, augmentation, num_views, keys)


def mixed_size_views(images: list[Tensor], augmentation: BatchViewAugmentation, num_views: int, keys: Keys) -> list[Tensor]:
    """The views of uint8 ``images`` ``[3, H_b, W_b]`` of any sizes, on their device (module docstring).

    Row ``v · B + b`` of the parameters is view ``v`` of image ``b``, as in ``BatchViewAugmentation``.
    """
    batch, device = len(images), images[0].device
    heights = torch.tensor([image.shape[1] for image in images], dtype=torch.float32).repeat(num_views)
    widths = torch.tensor([image.shape[2] for image in images], dtype=torch.float32).repeat(num_views)
    uniform = keyed_uniforms(*key_columns(keys), num_views, PARAM_COLUMNS)
    params = augmentation.sample(num_views * batch, heights, widths, HOST, uniform=uniform)
    crops = resized_crops(images, params.boxes, augmentation.augmentation.crop_size)
    moved = ViewParams(**{f.name: getattr(params, f.name).to(device, non_blocking=True) for f in fields(params)})
    views = augmentation.augment_crops(crops, moved)
    return list(views.view(num_views, batch, *views.shape[1:]).unbind(0))


def resized_crops(images: list[Tensor], boxes: Tensor, size: int) -> Tensor:
    """Float ``[N, 3, size, size]`` in ``[0, 1]``: box ``n`` (``(left, top, width, height)``, host
    ``[N, 4]``) of image ``n mod B``, resized by antialiased bilinear interpolation."""
    crops = []
    for row, (left, top, width, height) in enumerate(boxes.to(torch.int64).tolist()):
        crop = images[row % len(images)][:, top : top + height, left : left + width]
        crops.append(F.interpolate(crop.unsqueeze(0).float(), size=(size, size), mode="bilinear", antialias=True))
    return torch.cat(crops).div_(255)
