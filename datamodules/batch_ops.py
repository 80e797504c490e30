"""Image ops over a batch with one parameter per image: the tensor formulas of torchvision's
``transforms.v2.functional`` (``resized_crop``, ``horizontal_flip``, ``adjust_brightness`` /
``_contrast`` / ``_saturation`` / ``_hue``, ``rgb_to_grayscale``, ``gaussian_blur``), vectorised.

Every op takes float images ``[N, 3, H, W]`` in ``[0, 1]`` and per-image parameters ``[N]`` on the
same device, and runs without a Python loop over images or a host-device sync, so it suits CPU
and CUDA alike. ``tests/datamodules/test_batch_ops.py`` checks each against torchvision's
single-image op with the same parameter.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

# rgb_to_grayscale's weights for tensors (ITU-R 601-2 luma, as torchvision rounds them).
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)


@functools.cache
def constant(values: tuple[float, ...], device: torch.device, dtype: torch.dtype, shape: tuple[int, ...] = (-1,)) -> Tensor:
    """``values`` as a tensor of ``shape`` on ``device``, made once per process: a tensor built from
    host numbers in every call would be a host-to-device copy (and on CUDA a wait) per call. Read-only,
    and never evicted: a captured CUDA graph reads it by its address (``datamodules.view_graphs``);
    the call sites ask for a few dozen."""
    return torch.tensor(values, device=device, dtype=dtype).view(shape)


def _per_image(values: Tensor) -> Tensor:
    """``[N]`` -> ``[N, 1, 1, 1]``, to broadcast over ``[N, C, H, W]``."""
    return values.view(-1, 1, 1, 1)


def resize_weights(start: Tensor, length: Tensor, size: int, input_size: int) -> Tensor:
    """Weights ``[N, size, input_size]`` that resample the span ``[start, start + length)`` of each
    row to ``size`` pixels, as torchvision's antialiased bilinear resize does (PIL's algorithm).

    Output pixel ``i`` centres at ``c = (i + 0.5) · s`` in the span (scale ``s = length / size``); input
    pixel ``j`` of the span weighs ``max(0, 1 − |j + 0.5 − c| / max(s, 1))``, pixels outside the span
    weigh 0, and each row is normalised to sum 1. Upscaling is thus plain bilinear with the span's
    edge pixels repeated; downscaling is a triangle filter as wide as two output pixels.
    """
    start, length = start.reshape(-1, 1, 1), length.reshape(-1, 1, 1)
    scale = length / size
    device, dtype = start.device, start.dtype
    centre = constant(tuple(i + 0.5 for i in range(size)), device, dtype, (1, -1, 1)) * scale
    offset = constant(tuple(j + 0.5 for j in range(input_size)), device, dtype, (1, 1, -1)) - start  # j + ½ in the span
    weights = (1.0 - (offset - centre).abs_() / scale.clamp(min=1.0)).clamp_(min=0.0)
    weights = weights * ((offset > 0) & (offset < length))  # j + ½ in (0, length): the whole pixels of the span
    return weights / weights.sum(dim=2, keepdim=True)


def resized_crop(images: Tensor, boxes: Tensor, size: int, flip: Optional[Tensor] = None) -> Tensor:
    """Crop ``boxes`` out of ``images`` and resize each crop to ``size × size``: ``F.resized_crop``
    with ``antialias=True`` (bilinear), then mirrored where ``flip`` is set.

    ``images`` is ``[N, C, H, W]``; ``boxes`` is ``[..., N, 4]`` as ``(left, top, width, height)`` in
    whole pixels, one box per image (leading dimensions: several crops of each image, without
    copying the images); ``flip`` is bool ``[..., N]`` or ``None``; the result is ``[..., N, C, size, size]``.
    The crop-and-resize is linear and separable, so it is two batched matrix products,
    ``rows @ image @ columnsᵀ``, with the weights of :func:`resize_weights` (a flip reverses the
    columns' rows, which mirrors the output exactly): torchvision's tensor resampling (to float
    precision; with TF32 matmuls allowed on a GPU, to about 1e-3), including the antialiasing of
    crops larger than ``size``, and PIL's (the worker path) to within one 8-bit level.
    """
    _, _, height, width = images.shape
    lead = boxes.shape[:-1]
    left, top, box_width, box_height = boxes.to(images.dtype).reshape(-1, 4).unbind(1)
    if height == width:  # both axes' weights at once (the usual square images): half the kernels
        weights = resize_weights(torch.stack((top, left), 1), torch.stack((box_height, box_width), 1), size, height)
        rows, columns = weights.view(-1, 2, size, height).unbind(1)
    else:
        rows, columns = resize_weights(top, box_height, size, height), resize_weights(left, box_width, size, width)
    if flip is not None:
        columns = torch.where(flip.reshape(-1, 1, 1), columns.flip(1), columns)
    rows, columns = rows.view(*lead, 1, size, height), columns.view(*lead, 1, size, width)
    return rows @ images @ columns.transpose(-1, -2)


def horizontal_flip(images: Tensor, flip: Tensor) -> Tensor:
    """Mirror the images where ``flip`` (bool ``[N]``) is set."""
    return torch.where(_per_image(flip), images.flip(-1), images)


def grayscale(images: Tensor) -> Tensor:
    """Luma ``0.2989 R + 0.587 G + 0.114 B``, ``[N, 1, H, W]``."""
    return (images * constant(GRAY_WEIGHTS, images.device, images.dtype, (1, 3, 1, 1))).sum(dim=1, keepdim=True)


def to_grayscale(images: Tensor, convert: Tensor) -> Tensor:
    """Replace the images where ``convert`` (bool ``[N]``) is set by their luma, kept 3-channel."""
    return torch.where(_per_image(convert), grayscale(images), images)


def blend_colour(images: Tensor, scale: Tensor, gray_weight: Tensor, mean_weight: Tensor) -> Tensor:
    """``clamp(scale · x + gray_weight · gray(x) + mean_weight · mean(gray(x)), 0, 1)`` per image.

    Brightness, contrast and saturation are all this blend (torchvision's ``_blend``) with one
    factor ``f``: brightness ``(f, 0, 0)``; contrast ``(f, 0, 1 − f)`` (towards the mean luma of
    the image); saturation ``(f, 1 − f, 0)`` (towards the pixel's luma); ``(1, 0, 0)`` leaves the
    image as it is. One call thus applies a different one of them to every image (in 7 kernels).
    """
    gray = grayscale(images)
    mean = gray.mean(dim=(2, 3), keepdim=True)
    offset = torch.addcmul(_per_image(mean_weight) * mean, _per_image(gray_weight), gray)
    return torch.addcmul(offset, _per_image(scale), images).clamp_(0.0, 1.0)


def adjust_brightness(images: Tensor, factor: Tensor) -> Tensor:
    """``clamp(f · x)``: ``F.adjust_brightness`` with one factor per image."""
    zero = torch.zeros_like(factor)
    return blend_colour(images, factor, zero, zero)


def adjust_contrast(images: Tensor, factor: Tensor) -> Tensor:
    """``clamp(f · x + (1 − f) · mean luma)``: ``F.adjust_contrast`` with one factor per image."""
    return blend_colour(images, factor, torch.zeros_like(factor), 1.0 - factor)


def adjust_saturation(images: Tensor, factor: Tensor) -> Tensor:
    """``clamp(f · x + (1 − f) · luma)``: ``F.adjust_saturation`` with one factor per image."""
    return blend_colour(images, factor, 1.0 - factor, torch.zeros_like(factor))


def adjust_hue(images: Tensor, shift: Tensor) -> Tensor:
    """Rotate the hue by ``shift`` turns (in ``[-0.5, 0.5]``) per image: ``F.adjust_hue``.

    In HSV terms (torchvision's RGB -> HSV -> RGB, in closed form): with ``V = max``, spread
    ``Δ = max − min`` and the hue in sixths of a turn ``h = (g − b)/Δ``, ``2 + (b − r)/Δ`` or
    ``4 + (r − g)/Δ`` as red, green or blue is largest (the first of them on a tie), the rotated hue is
    ``h' = (h + 6 · shift) mod 6`` and channel ``c = V − Δ · clamp(min(k, 4 − k), 0, 1)`` with
    ``k = (n + h') mod 6``, ``n = 5, 3, 1`` for R, G, B (V and S = Δ/V are kept). Grays (Δ = 0)
    stay as they are.
    """
    device, dtype = images.device, images.dtype
    r, g, b = images.unbind(1)
    maxc = images.amax(dim=1)
    spread = maxc - images.amin(dim=1)
    inverse = 1.0 / spread.clamp(min=1e-12)
    two, four = constant((2.0, 4.0), device, dtype).unbind(0)
    hue = torch.where(
        maxc == r,
        (g - b) * inverse,
        torch.where(maxc == g, torch.addcmul(two, b - r, inverse), torch.addcmul(four, r - g, inverse)),
    )
    hue = hue.add_(6.0 * shift.view(-1, 1, 1)).remainder_(6.0).unsqueeze(1)
    k = (hue + constant((5.0, 3.0, 1.0), device, dtype, (1, 3, 1, 1))).remainder_(6.0)  # n = 5, 3, 1
    ramp = torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)
    return (maxc.unsqueeze(1) - spread.unsqueeze(1) * ramp).clamp_(0.0, 1.0)


def gaussian_blur(images: Tensor, kernel_size: int, sigma: Tensor) -> Tensor:
    """Separable Gaussian blur, one ``sigma`` per image, reflect padding: ``F.gaussian_blur``.

    The 1-D kernel is ``exp(−x² / 2σ²)`` over ``x = −(k−1)/2 … (k−1)/2``, normalised to sum 1.
    """
    n, c, h, w = images.shape
    half = (kernel_size - 1) / 2
    x = torch.linspace(-half, half, kernel_size, device=images.device, dtype=images.dtype)
    kernel = torch.exp(-0.5 * (x / sigma.view(-1, 1)) ** 2)
    kernel = (kernel / kernel.sum(dim=1, keepdim=True)).repeat_interleave(c, dim=0)  # [N·C, k]
    pad = kernel_size // 2
    flat = F.pad(images.reshape(1, n * c, h, w), (pad, pad, pad, pad), mode="reflect")
    flat = F.conv2d(flat, kernel.view(n * c, 1, 1, kernel_size), groups=n * c)
    flat = F.conv2d(flat, kernel.view(n * c, 1, kernel_size, 1), groups=n * c)
    return flat.view(n, c, h, w)
