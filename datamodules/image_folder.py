"""Image folders: ``root/train/<class>/*`` and ``root/val/<class>/*`` (ImageNet-100, your own data)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS

from datamodules.augment import IMAGENET_MEAN, IMAGENET_STD, ViewAugmentation
from datamodules.base import ContrastiveDataModule, Split
from datamodules.image_files import CorruptImageError, FolderLinkError, list_images, load_rgb
from ssl_app.errors import ConfigError

__all__ = ["CorruptImageError", "ImageFolderDataModule", "ListedImageFolder", "load_rgb"]


class ListedImageFolder(ImageFolder):
    """torchvision's ``ImageFolder`` over images listed beforehand, instead of by its own ``os.walk``.

    Keeps everything else of ``ImageFolder`` (``samples``, ``targets``, ``classes``,
    ``class_to_idx``, the loader), which the rest of the code reads.

    Args:
        root: the split's folder.
        classes: every class name, in label order (a split may hold images of only some).
        images: the image files of each class present in this split.
        loader: reads one image file.
    """

    def __init__(self, root: Path, classes: list[str], images: dict[str, list[Path]], loader: Callable[[str], Any]) -> None:
        self._listed_classes, self._listed_images = classes, images
        super().__init__(str(root), loader=loader)
        del self._listed_images  # now in ``samples``; not carried again to every DataLoader worker

    def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
        return list(self._listed_classes), {name: index for index, name in enumerate(self._listed_classes)}

    def make_dataset(self, directory: str, class_to_idx: dict[str, int], *args: Any, **kwargs: Any) -> list[tuple[str, int]]:  # type: ignore[override]
        present = sorted(self._listed_images, key=class_to_idx.__getitem__)
        return [(str(path), class_to_idx[name]) for name in present for path in self._listed_images[name]]


def _class_folders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


class ImageFolderDataModule(ContrastiveDataModule):
    """Labelled images laid out one folder per class.

    ``root/<train_dir>/<class>/*`` trains; ``root/<val_dir>/<class>/*`` validates;
    ``root/<test_dir>/<class>/*`` tests, falling back to the validation folder when there is no
    test folder (ImageNet-100 has none). Class indices follow the sorted class-folder names of
    the train folder, and the other splits must use the same class names.

    Images are the files with torchvision's image extensions at any depth of a class folder, read
    as 8-bit RGB by ``load_rgb`` (16-bit, float and transparent images included). Links to folders
    are followed (data on another disk) unless they lead to a folder the split reads anyway: a
    loop, or another class folder, is one ConfigError naming the link.

    Args:
        root: the data set's folder.
        train_dir, val_dir, test_dir: the split folders under ``root``.
        augmentation: the view pipeline; defaults to 224×224 crops with ImageNet statistics,
            whose eval pipeline resizes to 256 and centre-crops 224.
        batch_size, num_workers, val_seed, pin_memory, augment_on, imbalance_factor, imbalance_seed: see
            ``ContrastiveDataModule`` (the train split is long-tailed when imbalance_factor > 1).
    """

    def __init__(
        self,
        root: str,
        train_dir: str = "train",
        val_dir: str = "val",
        test_dir: str = "test",
        *,
        augmentation: ViewAugmentation = ViewAugmentation(
            crop_size=224, mean=IMAGENET_MEAN, std=IMAGENET_STD, eval_crop_fraction=0.875
        ),
        **kwargs: Any,
    ) -> None:
        super().__init__(augmentation=augmentation, **kwargs)
        name = type(self).__name__
        self.root = Path(root)
        if not self.root.is_dir():
            raise ConfigError(f"{name}: root {str(root)!r} does not exist or is not a folder")
        self.split_dirs = {"train": self.root / train_dir, "val": self.root / val_dir, "test": self.root / test_dir}
        for split in ("train", "val"):
            if not _class_folders(self.split_dirs[split]):
                raise ConfigError(
                    f"{name}: no class folders in {str(self.split_dirs[split])!r} (expected {split} images as <class>/<image>)"
                )
        if not _class_folders(self.split_dirs["test"]):
            self.split_dirs["test"] = self.split_dirs["val"]
        self.classes = [p.name for p in _class_folders(self.split_dirs["train"])]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def build_split(self, split: Split) -> Dataset:
        folder = self.split_dirs[split]
        classes = [p.name for p in _class_folders(folder)]
        unknown = sorted(set(classes) - set(self.classes))
        if unknown:
            raise ConfigError(f"{type(self).__name__}: {str(folder)!r} has classes not in the train folder: {unknown[:5]}")
        # Labels follow the train folder's classes, of which this split may hold only some.
        return ListedImageFolder(folder, self.classes, self._list_classes(folder, classes), loader=load_rgb)

    def _list_classes(self, folder: Path, classes: list[str]) -> dict[str, list[Path]]:
        """The images of each class folder, every real folder read once (``list_images``)."""
        name = type(self).__name__
        read = [os.path.realpath(folder)]  # shared: a link into the split, or read twice, is refused
        images = {}
        for label in classes:
            try:
                images[label] = list_images(folder / label, read)
            except FolderLinkError as error:
                raise ConfigError(f"{name}: {error.describe(self.root)}") from None
            except ConfigError as error:  # a folder that cannot be listed
                raise ConfigError(f"{name}: {error}") from None
            if not images[label]:
                raise ConfigError(f"{name}: no image files in {str(folder / label)!r} (looked for {', '.join(IMG_EXTENSIONS)})")
        return images
