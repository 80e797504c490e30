"""Listing image files (links to folders) and reading every PIL mode as 8-bit RGB."""

import os

import numpy as np
import pytest
from PIL import Image
from torchvision.datasets.folder import make_dataset

from datamodules.image_files import BACKGROUND, FolderLinkError, list_images, load_rgb, to_rgb


def save_images(folder, names, size=(4, 3)):
    folder.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(names):
        Image.new("RGB", size, (10 * k, 50, 90)).save(folder / name)


# --- list_images -----------------------------------------------------------------------------


def test_lists_images_in_torchvisions_order_and_skips_other_files(tmp_path):
    # Catches a changed sample order (long-tailed subsets pick images by their index within the
    # split, so reordering silently changes which images a seed keeps) and non-images listed.
    save_images(tmp_path / "c", ["b.png", "a.JPG"])
    save_images(tmp_path / "c" / "sub", ["0.png"])
    save_images(tmp_path / "c" / "sub" / "deep", ["1.bmp"])
    save_images(tmp_path / "c" / "sub-2", ["z.webp"])
    (tmp_path / "c" / "notes.txt").write_text("not an image")
    listed = list_images(tmp_path / "c")
    expected = [path for path, _ in make_dataset(str(tmp_path), {"c": 0}, extensions=(".jpg", ".png", ".bmp", ".webp"))]
    assert [str(path) for path in listed] == expected
    assert [path.name for path in listed] == ["a.JPG", "b.png", "0.png", "z.webp", "1.bmp"]


def test_a_flat_folder_with_a_loop_names_the_link(tmp_path):
    # Catches following a link back to the listed folder itself: os.walk(followlinks=True) reads
    # it again (up to the OS's link depth), listing every image many times.
    save_images(tmp_path / "flat", ["0.png", "1.png"])
    os.symlink(".", tmp_path / "flat" / "again")
    with pytest.raises(FolderLinkError, match="flat/again links to .*flat \\(a folder already read\\): remove the link"):
        list_images(tmp_path / "flat")


def test_a_link_to_a_parent_of_a_folder_already_read_names_that_link(tmp_path):
    # Two links into one outside tree, the second to a parent of the first's target: the first
    # target is met again as a plain folder, and the error must blame the second link.
    save_images(tmp_path / "disk" / "photos" / "2024", ["0.png"])
    save_images(tmp_path / "data", ["0.png"])
    os.symlink(tmp_path / "disk" / "photos" / "2024", tmp_path / "data" / "a-year")
    os.symlink(tmp_path / "disk" / "photos", tmp_path / "data" / "b-all")
    with pytest.raises(FolderLinkError) as raised:
        list_images(tmp_path / "data")
    assert raised.value.link == tmp_path / "data" / "b-all"
    assert raised.value.target == os.path.realpath(tmp_path / "disk" / "photos" / "2024")
    assert raised.value.describe(tmp_path) == "data/b-all leads to disk/photos/2024 (a folder already read): remove the link"


# --- load_rgb: every mode ----------------------------------------------------------------------


def grey(*levels):
    """The RGB rows expected of a one-row greyscale image."""
    return [[[level] * 3 for level in levels]]


def sixteen_bit(mode):
    """A one-row 16-bit image 0, 32768, 65535 in ``mode`` (big- or little-endian bytes)."""
    dtype = ">u2" if mode.endswith("B") else "<u2"
    return Image.frombytes(mode, (3, 1), np.array([0, 32768, 65535], dtype=dtype).tobytes())


def palette(transparent):
    image = Image.new("P", (2, 1))
    image.putpalette([255, 0, 0, 0, 0, 255])  # index 0 red, 1 blue
    image.putpixel((1, 0), 1)
    if transparent:
        image.info["transparency"] = 0  # the red pixel is fully transparent
    return image


W = BACKGROUND
# mode: (an image PIL makes, the file format that keeps the mode, the mode PIL reads back, expected RGB).
MODES = {
    "1": (Image.frombytes("1", (2, 1), bytes([0b01000000])), "png", "1", grey(0, 255)),
    "L": (Image.fromarray(np.array([[0, 100, 255]], np.uint8)), "png", "L", grey(0, 100, 255)),
    # Opaque 200; transparent (stores 200, must not show); half-transparent 100 (alpha 128) on white.
    "LA": (Image.fromarray(np.array([[[200, 255], [200, 0], [100, 128]]], np.uint8)), "png", "LA", grey(200, W, 177)),
    "P": (palette(transparent=False), "png", "P", [[[255, 0, 0], [0, 0, 255]]]),
    "P-transparent": (palette(transparent=True), "png", "P", [[[W, W, W], [0, 0, 255]]]),
    "RGB": (Image.fromarray(np.array([[[1, 2, 3], [250, 128, 0]]], np.uint8)), "png", "RGB", [[[1, 2, 3], [250, 128, 0]]]),
    "RGBA": (
        Image.fromarray(np.array([[[10, 200, 30, 255], [10, 200, 30, 0], [0, 0, 0, 128]]], np.uint8)),
        "png",
        "RGBA",
        [[[10, 200, 30], [W, W, W], [127, 127, 127]]],  # 255 · 127/255 = 127 under half-transparent black
    ),
    # 16-bit greyscale: PIL's convert("RGB") clips every level above 255 to white.
    "I;16": (sixteen_bit("I;16"), "png", "I;16", grey(0, 128, 255)),
    "I;16B": (sixteen_bit("I;16B"), "tiff", "I;16B", grey(0, 128, 255)),
    "I": (Image.fromarray(np.array([[0, 32768, 65535, 70000, -5]], np.int32)), "tiff", "I", grey(0, 128, 255, 255, 0)),
    "F-fractions": (Image.fromarray(np.array([[0.0, 0.5, 1.0]], np.float32)), "tiff", "F", grey(0, 128, 255)),
    "F-levels": (Image.fromarray(np.array([[-3.0, 100.4, 300.0]], np.float32)), "tiff", "F", grey(0, 100, 255)),
    "CMYK": (
        Image.frombytes("CMYK", (3, 1), bytes([0, 0, 0, 0, 255, 0, 0, 0, 0, 0, 0, 255])),
        "tiff",
        "CMYK",
        [[[255, 255, 255], [0, 255, 255], [0, 0, 0]]],  # no ink: white; full cyan; full black
    ),
}


@pytest.mark.parametrize("case", MODES)
def test_every_mode_read_from_a_file_gives_its_8_bit_rgb(case, tmp_path):
    # Catches a mode converted by PIL's plain convert("RGB"): 16-bit saturating to white
    # (I;16, I;16B, I: 32768 read as 255 today), alpha dropped so the colour stored under
    # transparent pixels shows (LA, RGBA, P-transparent), floats in [0, 1] read as black.
    image, file_format, read_mode, expected = MODES[case]
    path = tmp_path / f"image.{file_format}"
    image.save(path)
    with Image.open(path) as reread:
        assert reread.mode == read_mode  # the file really holds the mode under test
    rgb = load_rgb(str(path))
    assert rgb.mode == "RGB"
    assert np.asarray(rgb).tolist() == expected


@pytest.mark.parametrize("mode,file_format", [("YCbCr", "tiff"), ("LAB", "tiff"), ("YCbCr", "jpeg")])
def test_colour_spaces_come_back_to_their_rgb(mode, file_format, tmp_path):
    # Catches a colour space read channel by channel as if it were RGB (YCbCr's Y, Cb, Cr are not R, G, B).
    colour = (200, 100, 50)
    path = tmp_path / f"image.{file_format}"
    Image.new("RGB", (8, 8), colour).convert(mode).save(path)
    rgb = np.asarray(load_rgb(str(path))).astype(int)
    assert np.abs(rgb - colour).max() <= 3  # PIL's conversions round (JPEG: lossy) by a level or two


def test_little_endian_16_bit_scales_like_i16():
    # PIL writes I;16L to files as plain I;16, so it is only met in memory; it must scale, not clip.
    image = sixteen_bit("I;16L")
    assert image.mode == "I;16L"
    assert np.asarray(to_rgb(image)).tolist() == grey(0, 128, 255)


@pytest.mark.parametrize("mode", ["HSV", "RGBa", "La"])
def test_modes_only_met_in_memory(mode):
    # HSV and the premultiplied modes cannot be saved by PIL; an opaque colour must survive.
    source = Image.new("RGB", (2, 2), (200, 100, 50))
    image = source.convert("LA").convert("La") if mode == "La" else source.convert(mode)
    expected = np.asarray(source.convert("L").convert("RGB")) if mode == "La" else np.asarray(source)
    assert image.mode == mode
    assert np.abs(np.asarray(to_rgb(image)).astype(int) - expected).max() <= 2


def test_float_rule_is_per_image_and_nan_is_black():
    # Catches NaN or inf reaching the uint8 cast (undefined values), and a float image scaled by
    # 255 although some values lie above 1 (it holds levels, not fractions: 0.4 rounds to 0).
    values = np.array([[np.nan, np.inf, -np.inf, 0.4, 2.0]], np.float32)
    assert np.asarray(to_rgb(Image.fromarray(values))).tolist() == grey(0, 255, 0, 0, 2)
