"""CIFAR-10, CIFAR-100, SVHN and STL-10 through torchvision, with a ``download`` option.

As usual in self-supervised papers, ``val`` and ``test`` are both the official test set. Without
``download: true`` the data must already be under ``root`` in torchvision's layout: a missing copy
fails when the datamodule is built (before any process is launched), an incomplete or corrupted
one at ``setup``, both with one line naming ``root``. ``train_per_class``/``test_per_class`` keep
the first N images of each class of the train / test split, in the data set's order
(``datamodules.per_class``), before any long-tailed profile. Only the first process of each machine
downloads (Lightning's ``prepare_data``), and only one process at a time into one ``root`` (a lock
file there), so a sweep's parallel jobs do not download over each other. CIFAR's pickled files are
read by a restricted unpickler (``datamodules.cifar``): a crafted file is refused, naming it,
instead of running code.

Each constructor states only its own options and the defaults it changes (a data set's own
``augmentation``: crop size, statistics) and passes everything else to its base class by
keyword; jsonargparse follows ``**kwargs`` into the base signatures, so ``--print_config`` and
``--data.help`` still list every option with its default, and overriding one augmentation field
(``--data.init_args.augmentation.min_scale=0.1``) keeps the data set's other defaults.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Literal, Optional

from torch.utils.data import Dataset
from torchvision import datasets

from datamodules.augment import (
    CIFAR100_MEAN,
    CIFAR100_STD,
    STL10_MEAN,
    STL10_STD,
    SVHN_MEAN,
    SVHN_STD,
    ViewAugmentation,
)
from datamodules.base import ContrastiveDataModule, Split
from datamodules.cifar import SafeCIFAR10, SafeCIFAR100
from datamodules.per_class import first_per_class
from datamodules.registry import DATAMODULES
from ssl_app.checks import check_optional_int
from ssl_app.errors import ConfigError
from ssl_app.io.lock import DOWNLOAD_LOCK, one_at_a_time


class TorchvisionDataModule(ContrastiveDataModule):
    """Shared plumbing: ``root``/``download``, the missing-data check, readable errors.

    Subclasses set ``title`` (for messages), ``folder`` (what must exist under ``root``),
    ``NUM_CLASSES``, and implement :meth:`make` (the torchvision dataset of a split).
    """

    title: ClassVar[str] = ""
    folder: ClassVar[str] = ""
    NUM_CLASSES: ClassVar[int] = 0
    #: Splits whose torchvision dataset, built with ``download=True``, fetches every file needed.
    download_splits: ClassVar[tuple[Split, ...]] = ("test",)

    def __init__(
        self,
        root: str = "data",
        download: bool = False,
        train_per_class: Optional[int] = None,
        test_per_class: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            root: folder that holds (or will hold) the data set, in torchvision's layout.
            download: download the data if it is missing (needs internet).
            train_per_class: keep only the first N training images of each class, in the data
                set's order (before ``imbalance_factor``); ``None``: all of them.
            test_per_class: the same for the test split, which is also the val split; ``None``: all.
            **kwargs: ``batch_size``, ``num_workers``, ``augmentation``, ``val_seed``,
                ``pin_memory``, ``augment_on``, ``imbalance_factor``, ``imbalance_seed``: see ``ContrastiveDataModule``.
        """
        name = type(self).__name__
        self.train_per_class = check_optional_int(train_per_class, f"{name}: train_per_class")
        self.test_per_class = check_optional_int(test_per_class, f"{name}: test_per_class")
        super().__init__(**kwargs)
        self.root = os.path.expanduser(root)
        self.download = download
        if not download and not self.data_present():
            raise ConfigError(
                f"{type(self).__name__}: no {self.title} data under {root!r} (pass "
                f"--data.init_args.download=true, or set root to the folder that holds {self.folder})"
            )

    @property
    def num_classes(self) -> int:
        return self.NUM_CLASSES

    def data_present(self) -> bool:
        """Cheap presence check; file integrity is torchvision's job when a split is built."""
        return os.path.exists(os.path.join(self.root, self.folder))

    def make(self, split: Split, download: bool) -> Dataset:
        raise NotImplementedError

    def prepare_data(self) -> None:
        """Download the missing files, one process at a time per ``root``: Lightning keeps this to one
        process per machine, but a sweep's jobs or an array's tasks are separate programs, and two
        downloads into one folder write over each other. The second finds the files and skips."""
        if self.download:
            with one_at_a_time(self.root, DOWNLOAD_LOCK, f"downloading {self.title}"):
                for split in self.download_splits:
                    self._make_checked(split, download=True)

    def build_split(self, split: Split) -> Dataset:
        data = self._make_checked(split, download=False)
        option = "train_per_class" if split == "train" else "test_per_class"
        return first_per_class(data, self.num_classes, getattr(self, option), type(self).__name__, option)

    def describe(self) -> dict[str, Any]:
        """The base's description, plus the per-class subsets when set."""
        info = super().describe()
        for option in ("train_per_class", "test_per_class"):
            if getattr(self, option) is not None:
                info[option] = getattr(self, option)
        return info

    def _make_checked(self, split: Split, download: bool) -> Dataset:
        name = type(self).__name__
        try:
            return self.make(split, download)
        except RuntimeError as error:  # torchvision: "Dataset not found or corrupted ..."
            if download:
                raise ConfigError(f"{name}: downloading {self.title} to {self.root!r} failed: {error}") from None
            raise ConfigError(
                f"{name}: the {self.title} data under {self.root!r} is incomplete or corrupted ({error}); "
                f"delete it and pass --data.init_args.download=true, or set root to a complete copy of {self.folder}"
            ) from None
        except OSError as error:  # no network during a download, unreadable files
            action = "downloading" if download else "reading"
            raise ConfigError(f"{name}: {action} {self.title} under {self.root!r} failed: {error}") from None
        except ConfigError as error:  # a data file refused as it is read (CIFAR's pickles), naming the file
            raise ConfigError(f"{name}: {error}") from None


@DATAMODULES.register
class CIFAR10DataModule(TorchvisionDataModule):
    """CIFAR-10 (50k train / 10k test, 32×32, 10 classes); val and test are both the test set.

    ``imbalance_factor: 100`` is CIFAR-10-LT (Cao et al. 2019): 5,000 … 50 training images per class.

    Args:
        root: folder that holds (or will hold) ``cifar-10-batches-py``.
        download: download the data if it is missing (needs internet, 170 MB).
        train_per_class, test_per_class: the first N images of each class of the train / test split
            (``None``: all): see ``TorchvisionDataModule``.
        batch_size, num_workers, augmentation, val_seed, pin_memory, augment_on, imbalance_factor,
            imbalance_seed: see ``ContrastiveDataModule``.
    """

    title, folder, NUM_CLASSES = "CIFAR-10", "cifar-10-batches-py", 10

    def make(self, split: Split, download: bool) -> Dataset:
        return SafeCIFAR10(self.root, train=split == "train", download=download)


@DATAMODULES.register
class CIFAR100DataModule(TorchvisionDataModule):
    """CIFAR-100 (100 fine classes); otherwise as ``CIFAR10DataModule``.

    ``imbalance_factor: 100`` is CIFAR-100-LT (Cao et al. 2019): 500 … 5 training images per class.

    Args:
        root: folder that holds (or will hold) ``cifar-100-python``.
        download: download the data if it is missing (needs internet, 170 MB).
        train_per_class, test_per_class: the first N images of each class of the train / test split
            (``None``: all): see ``TorchvisionDataModule``.
        augmentation: the view pipeline; defaults to CIFAR-100's statistics.
        batch_size, num_workers, val_seed, pin_memory, augment_on, imbalance_factor, imbalance_seed: see
            ``ContrastiveDataModule``.
    """

    title, folder, NUM_CLASSES = "CIFAR-100", "cifar-100-python", 100

    def __init__(
        self,
        *,
        augmentation: ViewAugmentation = ViewAugmentation(mean=CIFAR100_MEAN, std=CIFAR100_STD),
        **kwargs: Any,
    ) -> None:
        super().__init__(augmentation=augmentation, **kwargs)

    def make(self, split: Split, download: bool) -> Dataset:
        return SafeCIFAR100(self.root, train=split == "train", download=download)


@DATAMODULES.register
class SVHNDataModule(TorchvisionDataModule):
    """SVHN digits (73k train / 26k test, 32×32, 10 classes); val and test are both the test set.

    Reading SVHN's ``.mat`` files uses scipy (a dependency). The default augmentation
    has no horizontal flip: digits are not mirror-symmetric.

    Args:
        root: folder that holds (or will hold) ``train_32x32.mat`` and ``test_32x32.mat``.
        download: download the data if it is missing (needs internet, 240 MB).
        train_per_class, test_per_class: the first N images of each class of the train / test split
            (``None``: all): see ``TorchvisionDataModule``.
        augmentation: the view pipeline; defaults to SVHN's statistics, without flips.
        batch_size, num_workers, val_seed, pin_memory, augment_on, imbalance_factor, imbalance_seed: see
            ``ContrastiveDataModule``.
    """

    title, folder, NUM_CLASSES = "SVHN", "train_32x32.mat and test_32x32.mat", 10
    download_splits = ("train", "test")  # one file per split

    def __init__(
        self,
        *,
        augmentation: ViewAugmentation = ViewAugmentation(hflip_prob=0.0, mean=SVHN_MEAN, std=SVHN_STD),
        **kwargs: Any,
    ) -> None:
        super().__init__(augmentation=augmentation, **kwargs)

    def data_present(self) -> bool:
        files = [datasets.SVHN.split_list[s][1] for s in ("train", "test")]
        return all(os.path.isfile(os.path.join(self.root, f)) for f in files)

    def make(self, split: Split, download: bool) -> Dataset:
        return datasets.SVHN(self.root, split="train" if split == "train" else "test", download=download)


@DATAMODULES.register
class STL10DataModule(TorchvisionDataModule):
    """STL-10 (96×96, 10 classes): training on ``train_split``, val and test on the 8k test images.

    The default ``train+unlabeled`` is the 5k labelled training images plus the 100k unlabeled
    ones (label -1); it holds about 2.8 GB of pixels in memory per process.

    Args:
        root: folder that holds (or will hold) ``stl10_binary``.
        download: download the data if it is missing (needs internet, 2.6 GB).
        train_per_class, test_per_class: the first N images of each class of the train / test split
            (``None``: all): see ``TorchvisionDataModule``.
        train_split: ``train+unlabeled``, ``unlabeled`` or ``train``.
        augmentation: the view pipeline; defaults to 96×96 crops with STL-10's statistics.
        batch_size, num_workers, val_seed, pin_memory, augment_on, imbalance_factor, imbalance_seed: see
            ``ContrastiveDataModule``.
    """

    title, folder, NUM_CLASSES = "STL-10", "stl10_binary", 10

    def __init__(
        self,
        *,
        train_split: Literal["train+unlabeled", "unlabeled", "train"] = "train+unlabeled",
        augmentation: ViewAugmentation = ViewAugmentation(crop_size=96, mean=STL10_MEAN, std=STL10_STD),
        **kwargs: Any,
    ) -> None:
        if train_split not in ("train+unlabeled", "unlabeled", "train"):
            raise ConfigError(f"STL10DataModule: train_split must be train+unlabeled, unlabeled or train, got {train_split!r}")
        self.train_split = train_split
        super().__init__(augmentation=augmentation, **kwargs)

    def make(self, split: Split, download: bool) -> Dataset:
        name = self.train_split if split == "train" else "test"
        return datasets.STL10(self.root, split=name, download=download)
