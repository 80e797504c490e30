"""Image folders: ``root/train/<class>/*`` and ``root/val/<class>/*`` (ImageNet-100, your own data)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset
from torchvision.datasets import ImageFolder

from datamodules.augment import IMAGENET_MEAN, IMAGENET_STD, ViewAugmentation
from datamodules.base import ContrastiveDataModule, Split
from ssl_app.errors import ConfigError


class CorruptImageError(ConfigError):
    """An image file that PIL cannot read; the message names the file.

    A ConfigError (bad input data), so the CLI prints it as one line when raised in the main
    process; from a DataLoader worker the message also carries the worker's traceback.
    """


def load_rgb(path: str) -> Image.Image:
    """Open an image as RGB, naming the file if it is corrupted or not an image."""
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise CorruptImageError(f"corrupted or unreadable image: {path} ({error})") from None


def _class_folders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


class ImageFolderDataModule(ContrastiveDataModule):
    """Labelled images laid out one folder per class.

    ``root/<train_dir>/<class>/*`` trains; ``root/<val_dir>/<class>/*`` validates;
    ``root/<test_dir>/<class>/*`` tests, falling back to the validation folder when there is no
    test folder (ImageNet-100 has none). Class indices follow the sorted class-folder names of
    the train folder, and the other splits must use the same class names.

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
        try:
            data = ImageFolder(str(folder), loader=load_rgb)
        except FileNotFoundError as error:  # a class folder without any image file
            raise ConfigError(f"{type(self).__name__}: {error}") from None
        # Map this split's class indices onto the train folder's, which may list more classes.
        remap = {index: self.classes.index(name) for name, index in data.class_to_idx.items()}
        data.samples = [(path, remap[label]) for path, label in data.samples]
        data.targets = [label for _, label in data.samples]
        return data
