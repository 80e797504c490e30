"""What TensorBoard's embedding projector shows: a fixed, seeded subset of images with their
embeddings, labels and sprite thumbnails (``SummaryWriter.add_embedding``).

Shared by ``callbacks.EmbeddingProjector`` (the end of ``fit``) and ``python -m ssl_app embed
--projector DIR``. TensorBoard reads ``<log_dir>/projector_config.pbtxt``, which names
``<step:05d>/<tag>/{tensors.tsv, metadata.tsv, sprite.png}``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ssl_app.checks import PositiveInt, is_a
from ssl_app.errors import ConfigError

if TYPE_CHECKING:  # torch is imported where tensors are made: ``embed --help`` reads the defaults below without it
    from torch import Tensor

#: TensorBoard's projector draws a sprite image of at most 8192 × 8192 pixels.
MAX_SPRITE_SIDE = 8192
MAX_SAMPLES = 10_000
DEFAULT_SAMPLES = 1000
DEFAULT_THUMBNAIL = 32


def check_projector_size(max_samples: int, thumbnail_size: int, owner: str, names: tuple[str, str]) -> None:
    """``ConfigError`` (naming ``owner``'s options ``names``) unless 1 ≤ max_samples ≤ 10,000,
    4 ≤ thumbnail_size ≤ 128 and the sprite fits TensorBoard's 8192-pixel limit."""
    samples, size = names
    for value, option, low, high in ((max_samples, samples, 1, MAX_SAMPLES), (thumbnail_size, size, 4, 128)):
        if not (is_a(PositiveInt, value) and low <= value <= high):
            raise ConfigError(f"{owner}: {option} must be an int in [{low}, {high}], got {value!r}")
    if math.ceil(math.sqrt(max_samples)) * thumbnail_size > MAX_SPRITE_SIDE:
        raise ConfigError(
            f"{owner}: {samples}={max_samples} thumbnails of {thumbnail_size} px make a sprite wider than "
            f"TensorBoard's {MAX_SPRITE_SIDE} px; lower {samples} or {size}"
        )


def projector_subset(n: int, max_samples: int, seed: int) -> Tensor:
    """The sorted indices of ``min(n, max_samples)`` samples of a split of ``n``, drawn without
    replacement by a generator seeded with ``seed``: the same subset at every call, in every run
    of the same data."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=generator)[:max_samples].sort().values


def thumbnails(images: Tensor, size: int, mean: Sequence[float] | None, std: Sequence[float] | None) -> Tensor:
    """[B, 3, size, size] images in [0, 1] for the sprite: the eval-transform images with their
    normalisation undone (``mean``/``std``; ``None``: each image stretched to [0, 1])."""
    import torch
    import torch.nn.functional as F

    images = images.detach().float().cpu()
    if mean is not None and std is not None:
        images = images * torch.tensor(std).view(1, -1, 1, 1) + torch.tensor(mean).view(1, -1, 1, 1)
    else:
        low = images.amin(dim=(1, 2, 3), keepdim=True)
        high = images.amax(dim=(1, 2, 3), keepdim=True)
        images = (images - low) / (high - low).clamp(min=1e-12)
    return F.interpolate(images, size=(size, size), mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)


def write_projector(writer, embeddings: Tensor, labels: Tensor, indices: Tensor, images: Tensor, tag: str, step: int) -> None:
    """``writer.add_embedding`` of the rows, with metadata columns ``label`` and ``index`` (the
    sample's index in its split or folder) and the thumbnails ``images`` as the sprite."""
    writer.add_embedding(
        embeddings.float().cpu(),
        metadata=[[str(int(label)), str(int(index))] for label, index in zip(labels, indices)],
        metadata_header=["label", "index"],
        label_img=images,
        global_step=step,
        tag=tag,
    )
    writer.flush()
