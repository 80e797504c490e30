"""Image folders: ``root/train/<class>/*`` (ImageNet-100, labelled data) or any folder of images (unlabelled)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Optional, get_args

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import Dataset, Subset
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

from datamodules.augment import IMAGENET_MEAN, IMAGENET_STD, ViewAugmentation
from datamodules.base import ContrastiveDataModule, Split
from datamodules.class_lists import ClassList, read_class_list
from datamodules.encoded_images import EncodedImages
from datamodules.image_files import CorruptImageError, FolderLinkError, find_bad_images, list_images, load_rgb
from datamodules.image_stats import SAMPLE_SIZE, measure_images
from datamodules.registry import DATAMODULES
from ssl_app.checks import OpenUnitInterval, check, check_int
from ssl_app.errors import ConfigError

__all__ = ["CorruptImageError", "ImageFiles", "ImageFolderDataModule", "ListedImageFolder", "load_rgb"]

#: How the datamodule finds labels: ``auto`` (class folders if the train folder has them), or say so.
LabelSource = Literal["auto", "folders", "none"]
#: Label of every image of an unlabelled folder.
UNLABELLED = -1
#: What a bad image file (unreadable, or too small) does: stop before training, or train without it.
BadImagePolicy = Literal["error", "skip"]
#: Bad files named in the one line (error or warning), and in the run record.
SHOWN_IN_LINE, SHOWN_IN_RECORD = 10, 100


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


class ImageFiles(Dataset):
    """``(image, label)`` of a list of ``(path, label)`` (label -1: unlabelled), read by ``load_rgb``.

    ``samples`` and ``targets`` as torchvision's ``ImageFolder`` has them (labels are read from
    ``targets`` without decoding any image).
    """

    def __init__(self, samples: list[tuple[str, int]]) -> None:
        self.samples = samples
        self.targets = [label for _, label in samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, label = self.samples[index]
        return load_rgb(path), label


def _class_folders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def _has_loose_images(folder: Path) -> bool:
    """Whether image files lie directly in ``folder`` (not in a sub-folder)."""
    with os.scandir(folder) as entries:
        return any(e.is_file() and has_file_allowed_extension(e.name, IMG_EXTENSIONS) for e in entries)


@DATAMODULES.register
class ImageFolderDataModule(ContrastiveDataModule):
    """Images in a folder: labelled one folder per class, or unlabelled (any layout).

    **Where the images are.** ``root/<train_dir>`` trains when it is a folder; otherwise ``root``
    itself holds every image. ``root/<val_dir>`` is the evaluation split when it is a folder
    (beside a train folder); without one, ``root/<test_dir>`` is (said in one line: every training
    image trains); without either, a seeded ``val_fraction`` of the training images (at most
    ``max_val_images``) is held out for it, disjoint from what trains. ``root/<test_dir>`` tests,
    falling back to the evaluation split (ImageNet-100 has no test folder).

    **Labels** (``labels``):

    - ``folders``: one sub-folder per class in the train folder (or in ``root`` without one);
      class indices follow the sorted class-folder names, and the val/test folders must use the
      same names.
    - ``class_list`` given: only the listed class folders, in every split folder (train, val,
      test when present); other folders are ignored (ImageNet-100 out of an ImageNet tree:
      ``class_list: imagenet100``). Labels follow the sorted names, as ``ImageFolder`` would give
      a tree holding only those folders. A listed class missing from a split folder is one
      ConfigError naming the class and the folder. Implies ``folders``.
    - ``none``: every image at any depth, label -1 (sub-folders mean nothing). Metrics that need
      labels (kNN, tolerance, long-tail accuracy) are skipped, each saying so in one line.
    - ``auto`` (the default): ``folders`` when there is a train folder holding sub-folders and no
      image directly in it; ``none`` otherwise (a flat folder, images directly in ``root``, or
      ``root`` without a train folder).

    **Crop size and normalisation** are read from the data when ``augmentation.crop_size``,
    ``mean`` or ``std`` are null: a seeded sample of at most ``stats_sample`` training images
    (``datamodules.image_stats``: median shorter side, at most 224; per-channel mean and std),
    measured once, the same on every rank, printed in one line and kept in :meth:`describe` (the
    run record). A value that is set wins. The class's own default is 224×224 crops with
    ImageNet statistics (resize 256, centre-crop 224 for evaluation); ``configs/image_folder.yaml``
    reads all three from the data.

    Images are the files with torchvision's image extensions, read as 8-bit RGB by ``load_rgb``
    (16-bit, float and transparent images included). With ``augment_on: device`` the training
    images may have any size: the workers read the files, JPEGs are decoded on the device in
    batches and every view is cropped from its image at its own size (:meth:`training_files`,
    ``datamodules.decoded_views``); other files are decoded in the workers by ``load_rgb``.

    **Bad images** (``on_bad_image``): at setup, before training, the header of every image of
    every split is opened (format and size, no pixels decoded: ``image_files.find_bad_images``),
    so that every unreadable file and every image smaller than ``image_files.MIN_SIDE`` (8) pixels
    a side is found at once rather than one per run. ``error`` (the default): one ConfigError
    naming them (the first few, and the count). ``skip``: one warning naming them, training goes on
    without them, and :meth:`describe` (``run.json``, ``data.skipped_images``) keeps their count and
    names. A file whose header reads but whose pixels do not (a truncated JPEG) is found only when
    first decoded (in a worker, or on the device with ``augment_on: device``), and stops the run
    naming it in either mode (skipping it then would change an epoch already under way). Links to
    folders are followed (data on another disk) unless they lead to a folder the split reads anyway:
    a loop, or another class folder, is one ConfigError naming the link.

    Args:
        root: the data set's folder.
        train_dir, val_dir, test_dir: the split folders under ``root``.
        labels: ``auto``, ``folders`` or ``none`` (above).
        class_list: the class folders to use (above): a shipped list's name (``imagenet100``,
            ``datamodules.class_lists``), a text file of one name per line, or the names; None: all.
        val_fraction: fraction of the training images held out for evaluation when there is no
            val folder, in (0, 1).
        max_val_images: at most this many are held out.
        split_seed: seed of the held-out split and of the sample the statistics are read from.
        stats_sample: training images read to measure crop size, mean and std (when they are null).
        on_bad_image: ``error`` or ``skip`` (above).
        augmentation: the view pipeline (above).
        batch_size, num_workers, val_seed, pin_memory, augment_on, imbalance_factor, imbalance_seed: see
            ``ContrastiveDataModule`` (the train split is long-tailed when imbalance_factor > 1).
    """

    reads_augmentation_from_data = True

    def __init__(
        self,
        root: str,
        train_dir: str = "train",
        val_dir: str = "val",
        test_dir: str = "test",
        *,
        labels: LabelSource = "auto",
        class_list: Optional[ClassList] = None,
        val_fraction: OpenUnitInterval = 0.1,
        max_val_images: int = 10000,
        split_seed: int = 0,
        stats_sample: int = SAMPLE_SIZE,
        on_bad_image: BadImagePolicy = "error",
        augmentation: ViewAugmentation = ViewAugmentation(
            crop_size=224, mean=IMAGENET_MEAN, std=IMAGENET_STD, eval_crop_fraction=0.875
        ),
        **kwargs: Any,
    ) -> None:
        super().__init__(augmentation=augmentation, **kwargs)
        name = type(self).__name__
        if labels not in get_args(LabelSource):
            raise ConfigError(f"{name}: labels must be one of {get_args(LabelSource)}, got {labels!r}")
        val_fraction = check(OpenUnitInterval, val_fraction, f"{name}: val_fraction")
        self.val_fraction = float(val_fraction)
        self.max_val_images = check_int(max_val_images, f"{name}: max_val_images")
        self.split_seed = check_int(split_seed, f"{name}: split_seed", minimum=0)
        self.stats_sample = check_int(stats_sample, f"{name}: stats_sample")
        if on_bad_image not in get_args(BadImagePolicy):
            raise ConfigError(f"{name}: on_bad_image must be one of {get_args(BadImagePolicy)}, got {on_bad_image!r}")
        self.on_bad_image = on_bad_image
        self.bad_images: Optional[dict[str, str]] = None  # {file: why} once checked (skipped under on_bad_image: skip)
        self._files: dict[Path, dict[str, list[Path]]] = {}  # each split folder's image files, listed once
        self.root = Path(root)
        if not self.root.is_dir():
            raise ConfigError(f"{name}: root {str(root)!r} does not exist or is not a folder")
        train = self.root / train_dir
        self.pool_dir = train if train.is_dir() else self.root
        self.class_list = None if class_list is None else read_class_list(class_list, f"{name}: class_list")
        if self.class_list is not None:
            if labels == "none":
                raise ConfigError(f"{name}: class_list selects class folders, so labels cannot be 'none'")
            if self.pool_dir != train:
                raise ConfigError(f"{name}: class_list needs a {train_dir!r} folder of class folders in {str(root)!r}")
            labels = "folders"
        #: What ``labels`` says and, for ``auto``, what it resolved to and why (the skip lines say it).
        self.label_setting = labels
        if labels == "auto":
            why = self._why_unlabelled(train, train_dir)
            labels = "none" if why else "folders"
            self.label_setting = f"auto, resolved to {labels}" + (f": {why}" if why else "")
        self.label_source: Literal["folders", "none"] = labels  # type: ignore[assignment]
        # The evaluation and test folders, or None: held out of the training images.
        beside_train = self.pool_dir == train
        val = self.root / val_dir if beside_train and (self.root / val_dir).is_dir() else None
        test = self.root / test_dir if beside_train and (self.root / test_dir).is_dir() else None
        self.val_from_test = val is None and test is not None
        if self.val_from_test:  # evaluate on the test images rather than on fewer training images
            val = test
            rank_zero_info(
                f"{name}: no {val_dir!r} folder in {str(root)!r}, so {test_dir!r} is the evaluation split "
                f"(validation during fit, and test); every image of {train_dir!r} trains"
            )
        self.split_dirs: dict[str, Optional[Path]] = {"train": self.pool_dir, "val": val, "test": test}
        if self.labelled:
            for split in ("train", "val", "test"):
                folder = self.split_dirs[split]
                if folder is not None and not _class_folders(folder):
                    raise ConfigError(
                        f"{name}: no class folders in {str(folder)!r} (expected {split} images as <class>/<image>; "
                        "labels: none reads images without classes)"
                    )
        if self.class_list is not None:
            self._check_listed_classes()
            self.classes = list(self.class_list)
        else:
            self.classes = [p.name for p in _class_folders(self.pool_dir)] if self.labelled else []
        self._pool: Optional[Dataset] = None
        self._held_out: Optional[tuple[list[int], list[int]]] = None
        self.read_from_data: Optional[dict[str, Any]] = None  # what was measured and used, for describe()
        self.from_checkpoint: Optional[dict[str, Any]] = None  # what an evaluated encoder's checkpoint gave

    def _why_unlabelled(self, train: Path, train_dir: str) -> str:
        """Why ``labels: auto`` reads no labels ('' when it reads class folders)."""
        if self.pool_dir != train:
            return f"no {train_dir!r} folder in {str(self.root)!r}"
        if not _class_folders(train):
            return f"no class folders in {train_dir!r}"
        if _has_loose_images(train):
            return f"images directly in {train_dir!r}"
        return ""

    def _check_listed_classes(self) -> None:
        """Every listed class has a folder in every split folder; the first split missing some is one error."""
        assert self.class_list is not None
        for folder in self.split_dirs.values():
            if folder is None:
                continue
            missing = [label for label in self.class_list if not (folder / label).is_dir()]
            if missing:
                more = f" (and {len(missing) - 1} more listed class(es))" if len(missing) > 1 else ""
                raise ConfigError(
                    f"{type(self).__name__}: class {missing[0]} of the class_list has no folder in {str(folder)!r}{more}"
                )

    @property
    def num_classes(self) -> int:
        """The class folders' count; 0 for unlabelled images."""
        return len(self.classes)

    @property
    def labelled(self) -> bool:
        return self.label_source == "folders"

    # --- the augmentation, with what is null read from the data ------------------------------
    @property
    def augmentation(self) -> ViewAugmentation:
        if self._augmentation.from_data:
            self._augmentation = self._read_from_data(self._augmentation)
        return self._augmentation

    @augmentation.setter
    def augmentation(self, value: ViewAugmentation) -> None:
        self._augmentation = value

    @property
    def augmentation_unset(self) -> tuple[str, ...]:
        """The crop size / normalisation settings still null (read from the data at setup unless given)."""
        return self._augmentation.from_data

    @property
    def augmentation_as_configured(self) -> ViewAugmentation:
        """The augmentation without reading anything from the data."""
        return self._augmentation

    def take_from_checkpoint(self, values: dict[str, Any]) -> None:
        """Use the values an encoder was trained with for null settings, instead of measuring this data
        (``ssl_app.normalisation``: one normalisation per encoder); kept in :meth:`describe`."""
        chosen = {key: values[key] for key in self._augmentation.from_data if key in values}
        self._augmentation = ViewAugmentation(**{**self._augmentation.__dict__, **chosen})
        self.from_checkpoint = {key: value if key == "crop_size" else list(value) for key, value in chosen.items()}

    def _read_from_data(self, augmentation: ViewAugmentation) -> ViewAugmentation:
        missing = augmentation.from_data
        paths = self._training_paths()
        stats = measure_images(paths, sample_size=self.stats_sample, seed=self.split_seed)
        found = {"crop_size": stats.crop_size, "mean": stats.mean, "std": stats.std}
        chosen = {key: found[key] for key in missing}
        self.read_from_data = {"images": stats.images, **{key: list(v) if key != "crop_size" else v for key, v in chosen.items()}}
        shown = ", ".join(f"{key} {value if key == 'crop_size' else list(value)}" for key, value in chosen.items())
        hint = ""
        if "crop_size" in chosen and stats.crop_size <= 64:
            hint = "; small images: a backbone with a CIFAR stem (resnet18_cifar, small_cnn) suits them"
        rank_zero_info(
            f"{type(self).__name__}: read from {stats.images} of {len(paths)} training images (seed {self.split_seed}): "
            f"{shown}{hint}"
        )
        return ViewAugmentation(**{**augmentation.__dict__, **chosen})

    def _training_paths(self) -> list[str]:
        """The files that train: not those held out for evaluation, nor those a long tail leaves out."""
        return [path for path, _ in self._training_samples()]

    def _training_samples(self) -> list[tuple[str, int]]:
        """``(path, label)`` of the training split, in its order (its indices are the samples')."""
        data, indices = self.dataset("train"), None
        if isinstance(data, Subset):
            data, indices = data.dataset, list(data.indices)
        samples = data.samples  # type: ignore[attr-defined]
        return list(samples) if indices is None else [samples[i] for i in indices]

    def training_files(self) -> EncodedImages:
        """The training files, read as bytes by the workers and decoded on the device (``augment_on: device``)."""
        return EncodedImages(self._training_samples())

    def setup(self, stage: Optional[str] = None) -> None:
        super().setup(stage)
        self.augmentation  # noqa: B018 - read what is null from the data now: printed before training, in describe()

    # --- splits ------------------------------------------------------------------------------
    def build_split(self, split: Split) -> Dataset:
        folder = self.split_dirs[split]
        if split == "test" and (folder is None or folder == self.split_dirs["val"]):
            return self.dataset("val")  # the evaluation split, built once
        if split == "train" and self.split_dirs["val"] is not None:
            return self._pool_dataset()  # the whole train folder
        if folder is None or split == "train":
            train, val = self._hold_out()
            pool = self._pool_dataset().samples  # type: ignore[attr-defined]
            return ImageFiles([pool[i] for i in (train if split == "train" else val)])
        return self._folder_split(folder)

    def _folder_split(self, folder: Path) -> Dataset:
        """A whole split folder: class folders (labelled) or every image in it (unlabelled), bad images left out (skip)."""
        bad = self._check_images()
        files = {label: [path for path in paths if str(path) not in bad] for label, paths in self._folder_files(folder).items()}
        if not any(files.values()):
            raise ConfigError(f"{type(self).__name__}: every image in {str(folder)!r} is bad (on_bad_image: skip left none)")
        if not self.labelled:
            return ImageFiles([(str(path), UNLABELLED) for path in files[""]])
        return ListedImageFolder(folder, self.classes, files, loader=load_rgb)

    def _folder_files(self, folder: Path) -> dict[str, list[Path]]:
        """The image files of a split folder by class name ('' for unlabelled images), listed once."""
        if folder not in self._files:
            if not self.labelled:
                self._files[folder] = {"": self._list_unlabelled(folder)}
            elif self.class_list is not None:  # the listed folders only, every one of them checked present
                self._files[folder] = self._list_classes(folder, self.classes)
            else:
                classes = [p.name for p in _class_folders(folder)]
                unknown = sorted(set(classes) - set(self.classes))
                if unknown:
                    name = type(self).__name__
                    raise ConfigError(f"{name}: {str(folder)!r} has classes not in the train folder: {unknown[:5]}")
                # Labels follow the train folder's classes, of which this split may hold only some.
                self._files[folder] = self._list_classes(folder, classes)
        return self._files[folder]

    def _check_images(self) -> dict[str, str]:
        """Every split folder's images checked once, together, before any is read (class docstring, bad images)."""
        if self.bad_images is None:
            name = type(self).__name__
            folders = list(dict.fromkeys(folder for folder in self.split_dirs.values() if folder is not None))
            paths = [path for folder in folders for found in self._folder_files(folder).values() for path in found]
            bad = find_bad_images(paths)
            if bad and self.on_bad_image == "error":
                raise ConfigError(f"{name}: {self._bad_list(bad)}; to train without them: --data.init_args.on_bad_image=skip")
            if bad:
                rank_zero_warn(f"{name}: on_bad_image: skip: training without {self._bad_list(bad)}")
            self.bad_images = bad
        return self.bad_images

    def _bad_list(self, bad: dict[str, str]) -> str:
        """``N bad image file(s) in ROOT: a.png (why); b.png (why) … and k more``, paths relative to the root."""
        shown = "; ".join(f"{self._relative(path)} ({why})" for path, why in list(bad.items())[:SHOWN_IN_LINE])
        more = f"; and {len(bad) - SHOWN_IN_LINE} more" if len(bad) > SHOWN_IN_LINE else ""
        return f"{len(bad)} bad image file(s) in {str(self.root)!r}: {shown}{more}"

    def _relative(self, path: str) -> str:
        return os.path.relpath(path, self.root) if os.path.abspath(path).startswith(os.path.abspath(self.root) + os.sep) else path

    def _pool_dataset(self) -> Dataset:
        """Every training image with its label, before any is held out (listed once)."""
        if self._pool is None:
            self._pool = self._folder_split(self.pool_dir)
        return self._pool

    def _hold_out(self) -> tuple[list[int], list[int]]:
        """Sorted pool indices ``(train, val)``: a seeded, disjoint split of the training images."""
        if self._held_out is None:
            name, pool = type(self).__name__, self._pool_dataset().samples  # type: ignore[attr-defined]
            count = min(max(1, round(self.val_fraction * len(pool))), self.max_val_images)
            if len(pool) - count < 1:
                raise ConfigError(
                    f"{name}: {len(pool)} image(s) in {str(self.pool_dir)!r} and no val folder: need at least 2 "
                    f"(val_fraction {self.val_fraction:g} of them are held out for evaluation, the rest train)"
                )
            order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(self.split_seed)).tolist()
            self._held_out = (sorted(order[count:]), sorted(order[:count]))
            kind = f"{len(self.classes)} classes" if self.labelled else "unlabelled"
            rank_zero_info(
                f"{name}: {len(pool)} images in {str(self.pool_dir)!r} ({kind}); no val folder, so {count} are held out "
                f"for evaluation (val_fraction {self.val_fraction:g}, at most {self.max_val_images}, split_seed "
                f"{self.split_seed}) and {len(pool) - count} train"
            )
        return self._held_out

    def _list_unlabelled(self, folder: Path) -> list[Path]:
        name = type(self).__name__
        try:
            images = list_images(folder)
        except FolderLinkError as error:
            raise ConfigError(f"{name}: {error.describe(self.root)}") from None
        except ConfigError as error:  # a folder that cannot be listed
            raise ConfigError(f"{name}: {error}") from None
        if not images:
            raise ConfigError(
                f"{name}: no image files in {str(folder)!r}, nor class folders of them (looked for {', '.join(IMG_EXTENSIONS)})"
            )
        return images

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

    def describe(self) -> dict[str, Any]:
        """The base description, with where the labels and the evaluation split came from, and
        the crop size and statistics read from the data (when they were)."""
        info = super().describe()
        info["labels"] = self.label_source
        if self.class_list is not None:
            info["class_list"] = list(self.class_list)
        if self.split_dirs["val"] is None:
            info["val_held_out"] = {"fraction": self.val_fraction, "max": self.max_val_images, "seed": self.split_seed}
        if self.val_from_test:
            info["val_from_test"] = True  # no val folder: the test folder evaluates
        if self.bad_images:
            shown = [f"{self._relative(path)} ({why})" for path, why in list(self.bad_images.items())[:SHOWN_IN_RECORD]]
            info["skipped_images"] = {"count": len(self.bad_images), "files": shown}
        if self.read_from_data is not None:
            info["read_from_data"] = dict(self.read_from_data)
        if self.from_checkpoint is not None:
            info["from_checkpoint"] = dict(self.from_checkpoint)
        return info
