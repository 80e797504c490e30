"""The worker side of decoding on the device: which files travel as bytes, which as pixels, and the batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from PIL import Image

from datamodules.device_augment import as_uint8_chw
from datamodules.encoded_images import EncodedBatch, EncodedImages, collate_encoded, read_encoded
from datamodules.image_files import CorruptImageError, load_rgb


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """Smooth colour and noise (it compresses and decodes like a photograph, not like flat colour)."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (3, 4, 3), dtype=np.uint8)).resize((width, height), Image.BICUBIC)
    pixels = np.asarray(coarse, dtype=np.int16) + rng.integers(-12, 13, (height, width, 3), dtype=np.int16)
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


def write_photos(
    folder: Path, sizes: list[tuple[int, int]], seed: int = 0, suffix: str = ".jpg", mode: str = "RGB"
) -> list[Path]:
    """One file per ``(width, height)`` in ``folder`` (PIL's encoders: JPEG at quality 90, or by ``suffix``)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, (width, height) in enumerate(sizes):
        path = folder / f"{seed}_{k}{suffix}"
        photo(width, height, seed * 1000 + k).convert(mode).save(path, quality=90)
        paths.append(path)
    return paths


def truncated_jpeg(path: Path) -> Path:
    """A JPEG cut short: its header (format, size) reads, its pixels do not."""
    photo(120, 90, seed=99).save(path, quality=90)
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 3 // 4])
    return path


def test_jpegs_in_rgb_or_gray_travel_as_their_bytes_and_the_rest_as_the_worker_paths_pixels(tmp_path):
    """Catches a JPEG decoded in the worker (the GPU then has nothing to do), a CMYK JPEG or a PNG sent
    to ``decode_jpeg`` (nvJPEG and CMYK, PNG bytes: errors on the device), and worker pixels that are
    not what the worker path reads (``load_rgb``: 16-bit, transparency)."""
    (rgb,) = write_photos(tmp_path, [(30, 20)])
    (gray,) = write_photos(tmp_path, [(21, 33)], seed=1, mode="L")
    (cmyk,) = write_photos(tmp_path, [(25, 25)], seed=2, mode="CMYK")
    (png,) = write_photos(tmp_path, [(19, 23)], seed=3, suffix=".png", mode="RGBA")
    for path in (rgb, gray):
        item = read_encoded(str(path))
        assert item.jpeg and item.data == path.read_bytes() and item.path == str(path)
    for path in (cmyk, png):
        item = read_encoded(str(path))
        assert not item.jpeg and torch.equal(item.data, as_uint8_chw(load_rgb(str(path))))
    assert read_encoded(str(png)).data.shape == (3, 23, 19)


def test_a_file_that_cannot_be_read_is_named(tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(CorruptImageError, match=f"corrupted or unreadable image: {broken}"):
        read_encoded(str(broken))


def test_items_carry_label_index_and_the_samplers_key(tmp_path):
    paths = write_photos(tmp_path, [(20, 20), (24, 18)])
    data = EncodedImages([(str(paths[0]), 3), (str(paths[1]), -1)])
    image, label, index = data[1]
    assert (label, index, image.path) == (-1, 1, str(paths[1]))
    assert data[(7, 2, 0)][1:] == (3, 0, 7, 2)  # (image, label, index, seed, epoch)
    assert len(data) == 2


def test_a_batch_keeps_every_file_and_its_place(tmp_path):
    """Catches bytes cut at the wrong place, pixels or paths out of batch order, pixels of one size
    not stacked (one copy to the device each), and a batch that Lightning would move to the device
    (``decode_jpeg`` reads host memory only)."""
    jpegs = write_photos(tmp_path, [(30, 20), (17, 40), (33, 33)])
    pngs = write_photos(tmp_path, [(12, 10), (12, 10)], seed=1, suffix=".png")
    order = [jpegs[0], pngs[0], jpegs[1], pngs[1], jpegs[2]]
    data = EncodedImages([(str(path), k) for k, path in enumerate(order)])
    batch, labels, indices = collate_encoded([data[(5, 1, k)] for k in range(5)])
    assert isinstance(batch, EncodedBatch) and len(batch) == 5
    assert labels.tolist() == indices.tolist() == batch.indices.tolist() == [0, 1, 2, 3, 4]
    assert batch.paths == [str(path) for path in order]
    assert batch.jpeg_at == [0, 2, 4] and batch.pixels_at == [1, 3]
    assert [bytes(part.numpy()) for part in batch.jpegs()] == [order[k].read_bytes() for k in (0, 2, 4)]
    assert isinstance(batch.pixels, torch.Tensor) and batch.pixels.shape == (2, 3, 10, 12)
    assert torch.equal(batch.pixels[1], as_uint8_chw(load_rgb(str(pngs[1]))))
    moved = move_data_to_device((batch, labels, indices), torch.device("meta"))
    assert moved[0] is batch and moved[1].device.type == "meta"
    # Pixels of several sizes stay a list; a batch of PNGs only has no bytes.
    mixed = collate_encoded([data[1], EncodedImages([(str(jpegs[0]), 0)])[0], read_item(tmp_path)])
    assert isinstance(mixed[0].pixels, list) and [p.shape for p in mixed[0].pixels] == [(3, 10, 12), (3, 7, 9)]
    only_pixels = collate_encoded([data[1], data[3]])[0]
    assert only_pixels.jpeg_at == [] and only_pixels.jpegs() == [] and only_pixels.jpeg_data.numel() == 0


def read_item(folder: Path) -> tuple:
    (path,) = write_photos(folder, [(9, 7)], seed=2, suffix=".png")
    return EncodedImages([(str(path), 1)])[0]
