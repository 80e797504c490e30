"""CIFAR-10, CIFAR-100, SVHN and STL-10 through torchvision, with a ``download`` option.

Without ``download: true`` the data must already be under ``root`` in torchvision's layout; a
missing or incomplete copy fails at ``setup`` with one line naming ``root``, before training.
Only the first process of each machine downloads (Lightning's ``prepare_data``).
"""

from __future__ import annotations

from typing import Literal, Optional

from torch.utils.data import Dataset
from torchvision import datasets

from datamodules.augment import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    CIFAR100_MEAN,
    CIFAR100_STD,
    STL10_MEAN,
    STL10_STD,
    SVHN_MEAN,
    SVHN_STD,
    ViewAugmentation,
)
from datamodules.base import ContrastiveDataModule, Split
from ssl_app.errors import ConfigError


class TorchvisionDataModule(ContrastiveDataModule):
    """Shared plumbing: ``root``/``download``, and one torchvision dataset per split.

    Subclasses set ``title`` (for messages), ``folder`` (what must exist under ``root``),
    ``_num_classes`` and implement :meth:`make` (the torchvision dataset of a split).
    """

    title = ""
    folder = ""
    _num_classes = 0

    def __init__(
        self,
        root: str = "data",
        download: bool = False,
        batch_size: int = 256,
        num_workers: int = 2,
        augmentation: Optional[ViewAugmentation] = None,
        val_seed: int = 0,
        pin_memory: Optional[bool] = None,
    ) -> None:
        super().__init__(batch_size, num_workers, augmentation or self.default_augmentation(), val_seed, pin_memory)
        self.root = root
        self.download = download

    @classmethod
    def default_augmentation(cls) -> ViewAugmentation:
        return ViewAugmentation()

    @property
    def num_classes(self) -> int:
        return self._num_classes

    def make(self, split: Split, download: bool) -> Dataset:
        raise NotImplementedError

    def prepare_data(self) -> None:
        if self.download:
            for split in ("train", "test"):
                self.make(split, download=True)  # type: ignore[arg-type]

    def build_split(self, split: Split) -> Dataset:
        try:
            return self.make(split, download=False)
        except RuntimeError as error:  # torchvision: "Dataset not found or corrupted ..."
            raise ConfigError(
                f"{type(self).__name__}: no {self.title} data under {self.root!r} ({error}); pass "
                f"--data.init_args.download=true, or set root to the folder that holds {self.folder}"
            ) from None


class CIFAR10DataModule(TorchvisionDataModule):
    """CIFAR-10 (50k train / 10k test, 32×32). val and test are both the test set, as in the papers.

    Args:
        root: folder that holds (or will hold) ``cifar-10-batches-py``.
        download: download the data if it is missing (needs internet).
        batch_size, num_workers, augmentation, val_seed, pin_memory: see ``ContrastiveDataModule``.
    """

    title, folder, _num_classes = "CIFAR-10", "cifar-10-batches-py", 10

    @classmethod
    def default_augmentation(cls) -> ViewAugmentation:
        return ViewAugmentation(crop_size=32, mean=CIFAR10_MEAN, std=CIFAR10_STD)

    def make(self, split: Split, download: bool) -> Dataset:
        return datasets.CIFAR10(self.root, train=split == "train", download=download)


class CIFAR100DataModule(TorchvisionDataModule):
    """CIFAR-100 (100 classes); otherwise as ``CIFAR10DataModule`` (``root`` holds ``cifar-100-python``)."""

    title, folder, _num_classes = "CIFAR-100", "cifar-100-python", 100

    @classmethod
    def default_augmentation(cls) -> ViewAugmentation:
        return ViewAugmentation(crop_size=32, mean=CIFAR100_MEAN, std=CIFAR100_STD)

    def make(self, split: Split, download: bool) -> Dataset:
        return datasets.CIFAR100(self.root, train=split == "train", download=download)


class SVHNDataModule(TorchvisionDataModule):
    """SVHN digits (73k train / 26k test, 32×32); ``root`` holds ``train_32x32.mat`` and ``test_32x32.mat``."""

    title, folder, _num_classes = "SVHN", "train_32x32.mat and test_32x32.mat", 10

    @classmethod
    def default_augmentation(cls) -> ViewAugmentation:
        # Digits are not mirror-symmetric: no horizontal flip.
        return ViewAugmentation(crop_size=32, hflip_prob=0.0, mean=SVHN_MEAN, std=SVHN_STD)

    def make(self, split: Split, download: bool) -> Dataset:
        return datasets.SVHN(self.root, split="train" if split == "train" else "test", download=download)


class STL10DataModule(TorchvisionDataModule):
    """STL-10 (96×96): self-supervised training on ``train_split`` (default: the 5k labelled
    training images plus the 100k unlabeled ones, label -1), val and test on the 8k test images.

    Args:
        train_split: ``train+unlabeled``, ``unlabeled`` or ``train``.
        root: folder that holds (or will hold) ``stl10_binary``.
    """

    title, folder, _num_classes = "STL-10", "stl10_binary", 10

    def __init__(
        self,
        root: str = "data",
        download: bool = False,
        train_split: Literal["train+unlabeled", "unlabeled", "train"] = "train+unlabeled",
        batch_size: int = 256,
        num_workers: int = 2,
        augmentation: Optional[ViewAugmentation] = None,
        val_seed: int = 0,
        pin_memory: Optional[bool] = None,
    ) -> None:
        super().__init__(root, download, batch_size, num_workers, augmentation, val_seed, pin_memory)
        if train_split not in ("train+unlabeled", "unlabeled", "train"):
            raise ConfigError(f"STL10DataModule: train_split must be train+unlabeled, unlabeled or train, got {train_split!r}")
        self.train_split = train_split

    @classmethod
    def default_augmentation(cls) -> ViewAugmentation:
        return ViewAugmentation(crop_size=96, mean=STL10_MEAN, std=STL10_STD)

    def make(self, split: Split, download: bool) -> Dataset:
        name = self.train_split if split == "train" else "test"
        return datasets.STL10(self.root, split=name, download=download)
