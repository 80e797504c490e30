"""Image files on disk: which files a folder holds (:func:`list_images`) and how one is read as 8-bit RGB (:func:`load_rgb`).

Both are independent of how a data set is laid out (one folder per class, or one flat folder).

Listing follows links to folders, since data often lives on another disk, but never into a
folder that is read anyway: a link that loops back (to the folder itself or above it), or one
to another folder of the same split, would count its images twice, under the wrong label.

Checking (:func:`find_bad_images`) opens each file's header only (format and size, no pixel
decoded), a few threads at a time: cheap enough to run over every image before training, so that
every unreadable or too small file is named at once (a data set of 100k images: seconds from a
local disk). A file whose header reads but whose pixels do not (a truncated JPEG) is found only
when it is decoded, by :func:`load_rgb`, which names it.

Reading converts every mode PIL opens to RGB by its meaning instead of PIL's plain ``convert``,
which clips 16-bit greyscale to white and drops alpha (showing whatever colour the file stores
under transparent pixels).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import numpy as np
from PIL import Image, UnidentifiedImageError
from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

from ssl_app.errors import ConfigError

#: The grey level transparent pixels are composited onto. White, because images with transparency
#: (product shots, icons, line art) are made to be shown on white pages: dark strokes drawn on a
#: transparent background stay visible, where a black background would swallow them.
BACKGROUND = 255
#: The smallest side an image may have. A smaller one gives views of a few pixels blown up, and a
#: crop size read from such images is too small for the backbones' pooling (``small_cnn`` halves
#: its input three times: 1×1 crops end in "Output size is too small" deep in the first step).
MIN_SIDE = 8
#: Threads that open image headers at once (the work is mostly waiting for the disk).
CHECK_THREADS = 8


class CorruptImageError(ConfigError):
    """An image file that PIL cannot read; the message names the file.

    A ConfigError (bad input data), so the CLI prints it as one line when raised in the main
    process; from a DataLoader worker the message also carries the worker's traceback.
    """


class FolderLinkError(ConfigError):
    """A link to a folder that is read anyway (a loop, or another folder of the same split).

    ``link`` is the link on the way (as walked), ``target`` the real path of the folder it
    would read a second time; :meth:`describe` words it with paths relative to a data set root.
    """

    def __init__(self, link: Path, target: str, *, direct: bool) -> None:
        self.link, self.target, self.direct = link, target, direct
        super().__init__(self.describe())

    def describe(self, root: Optional[Path] = None) -> str:
        """The message, with paths inside ``root`` written relative to it (absolute otherwise)."""
        verb = "links" if self.direct else "leads"
        return (
            f"{_shown(str(self.link), root, real=False)} {verb} to {_shown(self.target, root, real=True)} "
            "(a folder already read): remove the link"
        )


def _shown(path: str, root: Optional[Path], *, real: bool) -> str:
    """``path`` relative to ``root`` (its real path when ``real``) if under it, else unchanged."""
    if root is None:
        return path
    base = os.path.realpath(root) if real else os.path.abspath(root)
    absolute = path if real else os.path.abspath(path)
    return os.path.relpath(absolute, base) if _inside(absolute, base) and absolute != base else path


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both absolute and normalised)."""
    return os.path.commonpath([path, folder]) == folder


def list_images(folder: Path, read: Optional[list[str]] = None) -> list[Path]:
    """The image files under ``folder`` (any depth), sorted as torchvision's ``ImageFolder`` sorts them.

    An image is a file with one of torchvision's ``IMG_EXTENSIONS``. Links to folders are
    followed unless their target was read already or is read anyway: the target (its real path)
    must not lie in any folder of ``read``, in ``folder`` itself or in an earlier link's target.

    Args:
        folder: the folder to list.
        read: real paths of folders read on their own (for the class folders of one split: the
            split folder), shared between the calls for one split. Each call appends ``folder``'s
            real path and the targets of the links it follows, so no real folder is read twice.

    Raises:
        FolderLinkError: a link to a folder already read, naming the link and that folder.
        ConfigError: a folder that cannot be listed (permissions), naming it.
    """
    read = [] if read is None else read
    start = os.path.realpath(folder)
    first_link = folder if folder.is_symlink() else None
    if first_link is not None and any(_inside(start, done) for done in read):
        raise FolderLinkError(folder, start, direct=True)
    read.append(start)
    images: list[Path] = []
    pending = [(folder, first_link)]  # (folder to list, the nearest link on the way there)
    while pending:
        directory, via = pending.pop()
        for entry in _entries(directory):
            path = Path(entry.path)
            if entry.is_dir():
                pending.append((path, _enter(path, entry.is_symlink(), via, read)))
            elif entry.is_file() and has_file_allowed_extension(entry.name, IMG_EXTENSIONS):
                images.append(path)
    # torchvision's order: folder by folder (by path), files by name within each.
    return sorted(images, key=lambda path: (str(path.parent), path.name))


def _entries(directory: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as error:
        raise ConfigError(f"cannot list the folder {str(directory)!r}: {error.strerror or error}") from None


def _enter(path: Path, is_link: bool, via: Optional[Path], read: list[str]) -> Optional[Path]:
    """Check that ``path`` may be read, record it, and return the nearest link on the way to it.

    A link must not point into a folder already read. A plain folder can only be met twice when a
    link led to one of its parents after its own real path was read (through another link).
    """
    real = os.path.realpath(path)
    if is_link:
        if any(_inside(real, done) for done in read):
            raise FolderLinkError(path, real, direct=True)
        read.append(real)
        return path
    if real in read:
        raise FolderLinkError(via or path, real, direct=False)
    return via


def image_problem(path: str | Path) -> Optional[str]:
    """Why the image file cannot train, from its header alone (unreadable, or smaller than :data:`MIN_SIDE`), or None."""
    try:
        with Image.open(path) as image:
            width, height = image.size
    except UnidentifiedImageError:
        return "corrupted or unreadable: not an image format PIL reads"
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        return f"corrupted or unreadable: {str(error).replace(repr(str(path)), 'it').replace(str(path), 'it')}"
    if min(width, height) < MIN_SIDE:
        return f"{width}×{height} pixels, smaller than {MIN_SIDE} a side"
    return None


def find_bad_images(paths: list[Path]) -> dict[str, str]:
    """``{path: why}`` of the files :func:`image_problem` finds fault with, in the order of ``paths``."""
    if not paths:
        return {}
    with ThreadPoolExecutor(max_workers=min(CHECK_THREADS, len(paths))) as pool:
        problems = list(pool.map(image_problem, paths))
    return {str(path): why for path, why in zip(paths, problems) if why is not None}


def load_rgb(path: str) -> Image.Image:
    """Open an image as 8-bit RGB (:func:`to_rgb`), naming the file if it is corrupted or not an image."""
    try:
        with Image.open(path) as image:
            return to_rgb(image)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise CorruptImageError(f"corrupted or unreadable image: {path} ({error})") from None


def to_rgb(image: Image.Image) -> Image.Image:
    """``image`` as 8-bit RGB, by what its mode means.

    - ``I;16`` (and ``I;16B``, ``I;16L``…) and ``I``: integers taken as 16-bit levels, clipped to
      0 … 65535 and scaled by 255 / 65535, rounded (65535 → 255, 32768 → 128). PIL opens 16-bit
      greyscale PNG and TIFF files as ``I;16`` (some versions as ``I``), so ``I`` is read as the
      16-bit range too.
    - ``F`` (floats): an image whose values all lie in [0, 1] is taken as fractions and scaled by
      255; any other is taken as 8-bit levels and clipped to [0, 255]. NaN → 0, ±inf → 255 / 0.
    - With alpha (``RGBA``, ``LA``, ``PA``, their premultiplied ``RGBa``/``La``, and ``P``/``L``/``RGB``
      with a transparent colour): composited onto :data:`BACKGROUND`, so fully transparent pixels
      are the background whatever colour the file stores under them.
    - Every other mode (``1``, ``L``, ``P``, ``RGB``, ``CMYK``, ``YCbCr``, ``LAB``, ``HSV``…): PIL's
      conversion.
    """
    if image.mode == "F":
        return _grey_rgb(_float_levels(np.asarray(image, dtype=np.float64)))
    if image.mode == "I" or image.mode.startswith("I;16"):
        return _grey_rgb(_sixteen_bit_levels(np.asarray(image)))
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info:
        if image.mode == "La":  # PIL converts premultiplied grey to RGBA only by way of LA
            image = image.convert("LA")
        return _on_background(np.asarray(image.convert("RGBA")))
    return image.convert("RGB")


def _sixteen_bit_levels(values: np.ndarray) -> np.ndarray:
    levels = np.clip(values.astype(np.int64), 0, 65535)
    return ((levels * 255 + 32767) // 65535).astype(np.uint8)  # rounded to the nearest level


def _float_levels(values: np.ndarray) -> np.ndarray:
    values = np.nan_to_num(values, nan=0.0, posinf=255.0, neginf=0.0)
    if values.size and values.min() >= 0.0 and values.max() <= 1.0:
        values = values * 255.0
    return np.floor(np.clip(values, 0.0, 255.0) + 0.5).astype(np.uint8)


def _on_background(rgba: np.ndarray) -> Image.Image:
    colour, alpha = rgba[..., :3].astype(np.uint32), rgba[..., 3:].astype(np.uint32)
    blended = (colour * alpha + BACKGROUND * (255 - alpha) + 127) // 255
    return Image.fromarray(blended.astype(np.uint8))


def _grey_rgb(levels: np.ndarray) -> Image.Image:
    return Image.fromarray(np.ascontiguousarray(np.repeat(levels[..., None], 3, axis=-1)))
