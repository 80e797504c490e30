"""The projector's sprite as a user's browser shows it, and the thumbnails it must hold.

TensorBoard's projector reads ``projector_config.pbtxt`` (its plugin's ``ProjectorConfig`` proto),
serves the PNG it names, and cuts it into ``single_image_dim`` tiles row by row, as many a row as
fit the PNG's width: tile i belongs to row i of ``tensors.tsv`` and ``metadata.tsv``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from google.protobuf import text_format
from PIL import Image
from tensorboard.plugins.projector.projector_config_pb2 import EmbeddingInfo, ProjectorConfig


def projector_entry(log_dir: Path) -> EmbeddingInfo:
    """The one embedding ``log_dir``'s projector config names."""
    [entry] = text_format.Parse((log_dir / "projector_config.pbtxt").read_text(), ProjectorConfig()).embeddings
    return entry


def sprite_tiles(log_dir: Path, entry: EmbeddingInfo) -> tuple[np.ndarray, np.ndarray]:
    """``(tiles [n_rows, h, w, 3] uint8, the rest of the sprite)`` of the sprite ``entry`` names:
    tile i at row ``i // per_row``, column ``i % per_row`` (``per_row`` = the PNG's width // w),
    ``n_rows`` the rows of its ``tensors.tsv``; the rest: every pixel after the last tile."""
    width, height = entry.sprite.single_image_dim
    sprite = np.asarray(Image.open(log_dir / entry.sprite.image_path).convert("RGB"))
    rows = len((log_dir / entry.tensor_path).read_text().splitlines())
    per_row, cells = sprite.shape[1] // width, (sprite.shape[1] // width) * (sprite.shape[0] // height)
    assert rows <= cells, f"the sprite holds {cells} tiles for {rows} rows"

    def tile(i: int) -> np.ndarray:
        top, left = (i // per_row) * height, (i % per_row) * width
        return sprite[top : top + height, left : left + width]

    rest = [tile(i) for i in range(rows, cells)]
    return np.stack([tile(i) for i in range(rows)]), np.stack(rest) if rest else np.zeros((0, height, width, 3), np.uint8)


def expected_tiles(images: torch.Tensor, size: int, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """What the sprite should show of eval-transform ``images`` [N, 3, H, W]: the normalisation
    undone, resized to ``size`` square as the code resizes (bilinear with antialiasing), as 8-bit
    pixels [N, size, size, 3] (truncated, as torch's sprite writer does)."""
    pixels = images.double() * torch.tensor(std, dtype=torch.float64).view(1, 3, 1, 1)
    pixels = pixels + torch.tensor(mean, dtype=torch.float64).view(1, 3, 1, 1)
    pixels = F.interpolate(pixels, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return (pixels.clamp(0, 1) * 255).floor().to(torch.uint8).permute(0, 2, 3, 1).numpy()


def assert_tiles_show(tiles: np.ndarray, expected: np.ndarray) -> None:
    """Each tile within one grey level of its image (float rounding before the truncation)."""
    assert tiles.shape == expected.shape, (tiles.shape, expected.shape)
    worst = np.abs(tiles.astype(int) - expected.astype(int)).reshape(len(tiles), -1).max(axis=1)
    assert (worst <= 1).all(), f"tiles that do not show their row's image: {np.flatnonzero(worst > 1).tolist()} (off by {worst})"
