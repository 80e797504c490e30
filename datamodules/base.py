"""The base class of every datamodule: splits in, multi-view dataloaders out."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any, Literal, Optional, Union, get_args

import torch
from lightning import LightningDataModule
from lightning.fabric.utilities.data import suggested_max_num_workers
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset, Subset

from datamodules.augment import ViewAugmentation
from datamodules.decoded_views import encoded_views
from datamodules.device_augment import (
    AugmentingCollate,
    BatchViewAugmentation,
    UnaugmentedImages,
    check_one_size,
    collate_images,
)
from datamodules.encoded_images import EncodedBatch, collate_encoded
from datamodules.eval_images import EvalImageCache, EvalImages, EvalOn, check_eval_options, resolve_eval_batch_size
from datamodules.keyed_draws import ViewKeys
from datamodules.long_tail import (
    check_imbalance_factor,
    class_counts,
    dataset_targets,
    long_tailed_indices,
    profile_summary,
    write_class_counts,
)
from datamodules.multiview import Labelled, MultiViewDataset
from datamodules.resumable import ResumableDataLoader, ResumableDistributedSampler
from datamodules.view_graphs import ViewGraphs
from ssl_app.checks import AtLeastOne, NonNegativeInt, PositiveInt, check, check_int
from ssl_app.errors import ConfigError
from ssl_app.workers import loader_options

Split = Literal["train", "val", "test"]
#: Where the training views are made: in the DataLoader workers (PIL), or on the batch's device.
AugmentOn = Literal["workers", "workers_batched", "device"]
#: Training views per sample when the method does not say (``train_views``): SimCLR and MoCo use 2.
DEFAULT_TRAIN_VIEWS = 2
SPLITS: tuple[str, ...] = get_args(Split)
#: The epoch word of the validation/test views' keys on the device: no training epoch reaches it.
EVALUATION_EPOCH = 2**32 - 1
#: The most DataLoader workers per process that ``num_workers: null`` gives.
MAX_DEFAULT_WORKERS = 4

# Which splits each Trainer stage needs (``None``: every split).
_STAGE_SPLITS: dict[Optional[str], tuple[str, ...]] = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("test",),
    None: SPLITS,
}


class ContrastiveDataModule(LightningDataModule):
    """Multi-view dataloaders over the ``train``/``val``/``test`` splits of a labelled image set.

    Subclasses implement :meth:`build_split` (an ``(image, label)`` dataset per split, images
    as PIL or uint8 ``[3, H, W]`` tensors) and :attr:`num_classes`; they may override
    :meth:`prepare_data` to download.

    Every dataloader yields ``(views, labels, indices)``: ``views`` a list of float
    ``[B, 3, crop, crop]`` tensors, ``labels`` int64 ``[B]`` (-1 where unlabeled) and
    ``indices`` int64 ``[B]``, each sample's index in its split (what a memory bank keys on).

    - ``train_dataloader``: as many random views as the method consumes per step (its
      ``train_views`` attribute, 2 when it has none or no method is attached; the memory bank
      uses 1), shuffled, ``drop_last=True``. The order and every view are a function of
      ``(seed, epoch, index, view)`` (the run's seed; ``datamodules.keyed_draws``), on every
      ``augment_on`` path, so they do not depend on workers, processes or what ran before. It is a
      torchdata ``StatefulDataLoader``: Lightning saves its place in the epoch (seed, epoch,
      samples yielded) in every checkpoint, so a run resumed mid-epoch, with any ``num_workers``,
      sees the same batches and views as an uninterrupted run (``datamodules.resumable``).
    - ``val_dataloader`` / ``test_dataloader``: 2 augmented views that are a fixed function of
      ``(val_seed, index)``, in order, nothing dropped, so metrics are reproducible and equal
      under any number of DDP ranks or workers.
    - :meth:`embedding_dataloader`: what callbacks need outside the Trainer's loops;
      :meth:`classification_dataloader`: clean ``(image, label)`` batches of a split for a
      classifier's accuracy (``callbacks.LongTailAccuracy``).

    Long-tailed training (``imbalance_factor`` > 1): the train split keeps a seeded subset
    whose class sizes follow the exponential profile of Cao et al. (LDAM, 2019),
    ``n_c = int(n_max · IF^(−c/(C−1)))``, class 0 the largest (``datamodules.long_tail``); val
    and test stay balanced, as in the literature. The counts are printed once when the split is
    built and saved as ``class_counts.json`` beside the run's logs (rank 0, at ``setup("fit")``);
    :meth:`train_class_counts` returns them for any datamodule, balanced or not.

    Under DDP the validation and test dataloaders get Lightning's DistributedSampler; the training
    dataloader brings its own, a :class:`~datamodules.resumable.ResumableDistributedSampler` with
    the shards and seed Lightning's would have (in one process the same permutation, unsharded),
    whose seed, epoch and position are part of the dataloader's saved state. ``batch_size`` is per
    process: W processes of batch B see at each step the samples and views of one process of W · B.

    With ``augment_on: workers_batched`` the workers load each image once as uint8 and make the
    views of a whole batch at once (``device_augment.AugmentingCollate``), with the batched ops
    that ``device`` runs on the device.

    With ``augment_on: device`` the training dataloader yields each image once, un-augmented, as
    uint8 ``[B, 3, H, W]`` (8× fewer bytes to copy than two float views), and
    :meth:`on_after_batch_transfer` makes the views on the device the batch was moved to
    (:class:`~datamodules.device_augment.BatchViewAugmentation`, same settings and distributions as
    the worker path), so the training batch the method sees has the same form. All training images
    must then share one size, except for a datamodule whose :meth:`training_files` gives files
    (``ImageFolderDataModule``): its workers only read them, and the device decodes JPEGs in
    batches and crops each image at its own size (``datamodules.decoded_views``). The validation
    and test views are then made on the device too, from uint8 batches the workers only load (when
    the split's images share one size; else in the workers): two views keyed ``(val_seed,
    EVALUATION_EPOCH, index)``, a fixed function of the sample as on the worker path (other draws
    than the PIL path's, from the same distributions). The hook runs only when the datamodule is
    handed to the Trainer (as the CLI does).

    Args:
        batch_size: samples per batch and per process.
        num_workers: DataLoader worker processes (0: load in the main process); ``None``: what fits the
            machine (:func:`default_num_workers`, resolved again at ``setup`` for the Trainer's processes).
        augmentation: the view pipeline (and the matching eval pipeline).
        val_seed: seed of the deterministic val/test views.
        pin_memory: pin host memory for faster GPU copies; ``None``: when CUDA is available.
        imbalance_factor: IF = n_max / n_min of the long-tailed train split (>= 1; 1: the split as it is).
        imbalance_seed: which images each class keeps (LDAM's ``rand_number``).
        augment_on: ``workers``: the training views are made in the DataLoader workers, image by
            image (PIL); ``workers_batched``: in the workers, a whole batch at once with tensor ops
            (the CPU's fastest: benchmarks/README.md); ``device``: on the training batch's device,
            batched (for GPU runs, where CPU workers cannot keep up; image folders: JPEGs decoded there);
            the validation and test views are then made there too (``val_dataloader``).
        eval_on, eval_batch_size: where the evaluation passes' images are made (``device``: kept on the module's
            device, :meth:`eval_images`; ``workers``; ``auto``: ``device`` when they fit) and in what batches (``auto``:
            ``batch_size`` on the CPU, as large as memory allows on a GPU); val_batch_size: samples per validation/test
            loop batch (``None``: ``batch_size``; the batch's other samples are negatives of ``val/loss``, so it never
            depends on the device): ``datamodules.eval_images``.
        cuda_graph_views: with ``augment_on: device`` on CUDA, replay the training views from a CUDA
            graph captured once per batch shape (``datamodules.view_graphs``); ``false``: always eager.
    """

    #: The split a classifier's accuracy is measured on during ``fit`` (balanced, unlike train).
    classification_split: str = "val"
    #: Whether ``augmentation.crop_size/mean/std`` may be null, to be read from the data (ImageFolderDataModule).
    reads_augmentation_from_data: bool = False

    def __init__(
        self,
        batch_size: PositiveInt = 256,
        num_workers: Optional[NonNegativeInt] = None,
        augmentation: ViewAugmentation = ViewAugmentation(),
        val_seed: NonNegativeInt = 0,
        pin_memory: Optional[bool] = None,
        imbalance_factor: AtLeastOne = 1.0,
        imbalance_seed: NonNegativeInt = 0,
        augment_on: AugmentOn = "workers",
        eval_on: EvalOn = "auto",
        eval_batch_size: Union[int, Literal["auto"]] = "auto",
        val_batch_size: Optional[PositiveInt] = None,
        cuda_graph_views: bool = True,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        batch_size = check_int(batch_size, f"{name}: batch_size")
        self.workers_from_machine = num_workers is None
        num_workers = default_num_workers() if num_workers is None else check_int(num_workers, f"{name}: num_workers", minimum=0)
        val_seed = check_int(val_seed, f"{name}: val_seed", minimum=0)
        self.imbalance_factor = check_imbalance_factor(imbalance_factor, f"{name}: imbalance_factor")
        self.imbalance_seed = check_int(imbalance_seed, f"{name}: imbalance_seed", minimum=0)
        if augmentation.from_data and not self.reads_augmentation_from_data:
            raise ConfigError(
                f"{name}: augmentation.{'/'.join(augmentation.from_data)} is null (read from the data), which only "
                "ImageFolderDataModule does; set a value"
            )
        if augment_on not in get_args(AugmentOn):
            raise ConfigError(f"{name}: augment_on must be one of {get_args(AugmentOn)}, got {augment_on!r}")
        if augmentation.query_policy != "none" and augment_on != "workers":
            raise ConfigError(
                f"{name}: augmentation.query_policy={augmentation.query_policy} runs only with augment_on: workers "
                f"(the batched views have no AutoAugment), got augment_on: {augment_on}"
            )
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.augmentation = augmentation
        self.val_seed = val_seed
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.augment_on = augment_on
        evaluation = check_eval_options(eval_on, eval_batch_size, val_batch_size, name)
        self.eval_on, self.eval_batch_size, self.val_batch_size = evaluation
        self._eval_images = EvalImageCache(self.eval_on)
        self._datasets: dict[str, Dataset] = {}
        self._train_counts: Optional[list[int]] = None
        self._device_augmentation: Optional[BatchViewAugmentation] = None
        self._view_graphs = ViewGraphs(enabled=cuda_graph_views)
        self._train_sampler: Optional[ResumableDistributedSampler] = None

    # --- what subclasses provide -------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        """Number of classes (labels are ``0 .. num_classes - 1``, or -1 if unlabeled)."""
        raise NotImplementedError

    def build_split(self, split: Split) -> Dataset:
        """Build the ``(image, label)`` dataset of ``split``; raise ConfigError if unavailable."""
        raise NotImplementedError

    # --- splits ------------------------------------------------------------------------------
    def dataset(self, split: Split) -> Dataset:
        """The (cached) un-augmented ``(image, label)`` dataset of ``split``."""
        if split not in SPLITS:
            raise ConfigError(f"{type(self).__name__}: unknown split {split!r}, expected one of {SPLITS}")
        if split not in self._datasets:
            data = self.build_split(split)
            self._datasets[split] = self._long_tailed(data) if split == "train" else data
        return self._datasets[split]

    @property
    def labelled(self) -> bool:
        """Whether the data has class labels: some training image is labelled (>= 0).

        Callbacks that need labels (kNN, tolerance, long-tail accuracy) skip themselves when it is
        False, and the linear probe refuses the data. Read from the label lists (builds the train
        split if needed, decodes no image); a subclass that knows without listing may override it.
        """
        return sum(self.train_class_counts()) > 0

    def train_class_counts(self) -> list[int]:
        """Training images per class ``0 … num_classes − 1`` after the imbalance (unlabelled ones not counted).

        Read from the datasets' label lists (no image is decoded); builds the train split if needed.
        """
        if self._train_counts is None:
            self._train_counts = class_counts(dataset_targets(self.dataset("train")), self.num_classes)
        return list(self._train_counts)

    def _long_tailed(self, data: Dataset) -> Dataset:
        if self.imbalance_factor == 1.0:
            return data
        name = type(self).__name__
        labels = dataset_targets(data)
        keep = long_tailed_indices(labels, self.num_classes, self.imbalance_factor, self.imbalance_seed, name)
        self._train_counts = class_counts(labels[keep], self.num_classes)
        rank_zero_info(profile_summary(name, self._train_counts, self.imbalance_factor, self.imbalance_seed))
        return Subset(data, keep)

    def save_class_counts(self, trainer: Any) -> None:
        """Write ``class_counts.json`` into the logger's folder of a long-tailed run (global rank 0 only).

        It goes where the CLI writes ``config.yaml``, so a start that fails before its first step
        removes it with the run folder.
        """
        if self.imbalance_factor == 1.0 or trainer is None or not trainer.is_global_zero:
            return
        log_dir = _log_dir(trainer)
        if log_dir is None:
            return
        counts = self.train_class_counts()
        record = {
            "datamodule": type(self).__name__,
            "imbalance_factor": self.imbalance_factor,
            "imbalance_seed": self.imbalance_seed,
            "num_classes": len(counts),
            "total": sum(counts),
            "class_counts": counts,
        }
        names = getattr(self, "classes", None)
        if isinstance(names, list) and len(names) == len(counts):
            record["classes"] = names
        write_class_counts(log_dir, record)

    def num_samples(self, split: Split = "train") -> int:
        """Number of samples in ``split`` (builds the split if needed, so it works before fit)."""
        return len(self.dataset(split))  # type: ignore[arg-type]

    def describe(self) -> dict[str, Any]:
        """What identifies this data, for the run record: class, root (absolute, when the data has one),
        classes, the sizes of the splits built so far, and the long-tail profile when there is one."""
        kind = type(self)
        info: dict[str, Any] = {"class_path": f"{kind.__module__}.{kind.__qualname__}"}
        root = getattr(self, "root", None)
        if root is not None:
            info["root"] = os.path.abspath(os.fspath(root))
        try:
            info["num_classes"] = self.num_classes
        except NotImplementedError:
            pass
        info["split_sizes"] = {split: len(data) for split, data in self._datasets.items()}  # type: ignore[arg-type]
        info["num_workers"] = self.num_workers
        if self.imbalance_factor != 1.0:
            info["imbalance"] = {"factor": self.imbalance_factor, "seed": self.imbalance_seed}
        return info

    def setup(self, stage: Optional[str] = None) -> None:
        # Build the splits the stage needs now, so missing or broken data fails before training.
        splits = _STAGE_SPLITS.get(stage, SPLITS)
        if self.workers_from_machine and self.trainer is not None:
            self.num_workers = default_num_workers(self.trainer.num_devices)
        for split in splits:
            self.dataset(split)  # type: ignore[arg-type]
        if "train" in splits:
            self.save_class_counts(self.trainer)

    # --- dataloaders -------------------------------------------------------------------------
    def train_views(self) -> int:
        """Views per training sample: the attached method's ``train_views`` (default 2).

        Only what the method consumes is built: decoding and augmenting a view nobody reads is
        most of a CPU step's data cost.
        """
        trainer = self.trainer
        module = trainer.lightning_module if trainer is not None else None
        views = getattr(module, "train_views", DEFAULT_TRAIN_VIEWS) if module is not None else DEFAULT_TRAIN_VIEWS
        return check(PositiveInt, views, f"{type(self).__name__}: the method's train_views")

    def train_dataloader(self) -> ResumableDataLoader:
        data: Optional[Dataset] = self.training_files() if self.augment_on == "device" else None
        collate: Optional[Callable[[list[Any]], Any]] = None
        if data is not None:  # files decoded on the device, of any size
            collate = collate_encoded
        elif self.augment_on in ("device", "workers_batched"):
            data = UnaugmentedImages(self.dataset("train"))
            check_one_size(data, type(self).__name__)
            collate = collate_images if self.augment_on == "device" else AugmentingCollate(self.augmentation, self.train_views())
        else:
            views = self.train_views()
            data = MultiViewDataset(self.dataset("train"), self.augmentation.view_transforms(views), num_views=views)
        world_size = self.trainer.world_size if self.trainer is not None else 1
        if len(data) // world_size < self.batch_size:
            # drop_last would leave no batch at all and training would silently do nothing.
            raise ConfigError(
                f"{type(self).__name__}: batch_size {self.batch_size} is larger than the train split "
                f"per process ({len(data)} samples / {world_size} process(es)); lower batch_size"
            )
        options = self._loader_options(drop_last=True, collate_fn=collate)
        self._train_sampler = sampler = self._train_sampler_for(data)
        with warnings.catch_warnings():
            # torchdata 0.11 calls torch.set_vital, which newer torch deprecates: noise on every run.
            warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)
            return ResumableDataLoader(data, sampler=sampler, **options)

    def _train_sampler_for(self, data: Dataset) -> ResumableDistributedSampler:
        """The sampler of the training order and views, keyed ``(seed, epoch, index)``: under DDP the
        shards and seed Lightning would inject, in one process the same permutation unsharded.

        The seed is the run's (``seed_everything``, which sets ``PL_GLOBAL_SEED``; 0 without one, as
        Lightning's samplers), so seed k means the same order and views in every configuration.
        """
        trainer = self.trainer
        connector = getattr(trainer, "_accelerator_connector", None)
        shards: dict[str, Any] = {"num_replicas": 1, "rank": 0}
        # Lightning's own test for injecting a DistributedSampler (DataConnector._requires_distributed_sampler).
        if connector is not None and connector.use_distributed_sampler and connector.is_distributed:
            shards = trainer.distributed_sampler_kwargs
        seed = int(os.getenv("PL_GLOBAL_SEED", 0))  # the seed Lightning gives its samplers
        return ResumableDistributedSampler(data, shuffle=True, seed=seed, keyed=True, **shards)

    # --- views on the device (augment_on: device) --------------------------------------------
    def training_files(self) -> Optional[Dataset]:
        """The training set as files for ``augment_on: device`` to decode on the device
        (``datamodules.encoded_images``), or None: images decoded in the workers, of one size."""
        return None

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Batches of ``augment_on: device`` -> ``(views, labels, indices)``, called by Lightning on every
        batch once it is on the device. Training batches get the method's ``train_views`` keyed
        ``(seed, epoch, index)``; validation, test and sanity-check batches of uint8 images get two
        views keyed ``(val_seed, EVALUATION_EPOCH, index)``; batches holding their views pass through."""
        if self.augment_on != "device" or self.trainer is None:
            return batch
        if self.trainer.training:
            return self.device_views(batch, self.train_views())
        images, labels, indices = batch
        if not isinstance(images, torch.Tensor):  # views made in the workers
            return batch
        return self.device_augmentation(images, 2, keys=self.evaluation_view_keys(indices)), labels, indices

    def device_views(self, batch: Any, num_views: int) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """``(views, labels, indices)`` of a training batch of ``augment_on: device``, the views made
        on the device of ``indices``: from uint8 images ``[B, 3, H, W]``, or from an
        ``EncodedBatch`` of files (:meth:`training_files`) decoded there."""
        images, labels, indices = batch
        if isinstance(images, EncodedBatch):  # left on the host by the transfer: decode_jpeg reads host memory
            keys = self.view_keys(images.indices)
            views = encoded_views(images, self.device_augmentation, num_views, indices.device, keys)
        else:  # replayed from a CUDA graph where one serves (cuda_graph_views)
            views = self._view_graphs(self.device_augmentation, images, num_views, self.view_keys(indices))
        return views, labels, indices

    @property
    def device_augmentation(self) -> BatchViewAugmentation:
        """The batched twin of ``augmentation.train_transform()``."""
        if self._device_augmentation is None or self._device_augmentation.augmentation != self.augmentation:
            self._device_augmentation = BatchViewAugmentation(self.augmentation)
        return self._device_augmentation

    def view_keys(self, indices: torch.Tensor) -> ViewKeys:
        """The keys ``(seed, epoch, index)`` of a training batch's device views: the seed and epoch
        (ints) of the sampler that drew the batch (restored from a checkpoint on resume) and the
        indices, so the views are those the worker paths would key, in any process."""
        sampler = self._train_sampler
        seed, epoch = (sampler.seed, sampler.epoch) if sampler is not None else (int(os.getenv("PL_GLOBAL_SEED", 0)), 0)
        return ViewKeys(int(seed), int(epoch), indices)

    def evaluation_view_keys(self, indices: torch.Tensor) -> ViewKeys:
        """The keys ``(val_seed, EVALUATION_EPOCH, index)`` of a validation/test batch's device views:
        a fixed function of the sample, in any process, never a training view's key."""
        return ViewKeys(int(self.val_seed), EVALUATION_EPOCH, indices)

    def val_dataloader(self) -> DataLoader:
        return self._evaluation_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._evaluation_loader("test")

    def _evaluation_loader(self, split: Split) -> DataLoader:
        """Two views per sample (a fixed function of ``(val_seed, index)``) in batches of ``val_batch_size``: made in
        the workers, or (``augment_on: device``, images of one size) on the device, by ``on_after_batch_transfer``."""
        options: dict[str, Any] = dict(shuffle=False, drop_last=False, batch_size=self.val_batch_size)
        if self.augment_on == "device":
            images = UnaugmentedImages(self.dataset(split))
            try:
                check_one_size(images, type(self).__name__)
            except ConfigError:  # photos of many sizes: the workers crop them
                pass
            else:
                return self._loader(images, collate_fn=collate_images, **options)
        return self._loader(self._deterministic_views(split), **options)

    def embedding_dataloader(
        self,
        split: Split,
        views: int = 1,
        augment: bool = False,
        *,
        batch_size: Optional[int] = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> DataLoader:
        """An in-order dataloader over ``split`` for embedding it outside the Trainer's loops.

        Args:
            split: ``"train"``, ``"val"`` or ``"test"``.
            views: views per sample (≥ 1: one or two for most callbacks; q for LiDAR's ``lidar_views``).
            augment: ``False``: the deterministic eval pipeline (e.g. kNN features of the train
                split); ``True``: augmented views, a fixed function of ``(val_seed, index)``
                (e.g. alignment over two views of the val split).
            batch_size: defaults to the datamodule's ``batch_size``.
            rank, world_size: keep only the samples ``rank, rank + world_size, ...`` so that DDP
                ranks embed disjoint shards covering the split exactly once (no padding, unlike
                a DistributedSampler); the batch's ``indices`` are still split indices.
        """
        if not isinstance(views, int) or views < 1:
            raise ConfigError(f"embedding_dataloader: views must be an int >= 1, got {views!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"embedding_dataloader: need 0 <= rank < world_size, got {rank}, {world_size}")
        if augment:
            transform = self.augmentation.train_transform()
        else:
            transform = self.augmentation.eval_transform()
        data: Dataset = MultiViewDataset(self.dataset(split), transform, num_views=views, seed=self.val_seed)
        if world_size > 1:
            data = Subset(data, range(rank, len(data), world_size))  # type: ignore[arg-type]
        return self._loader(data, shuffle=False, drop_last=False, batch_size=batch_size, persistent=False)

    def eval_images(self, split: Split, device: torch.device) -> Optional[EvalImages]:
        """``split``'s images on ``device`` for the evaluation passes (``eval_on``;
        ``datamodules.eval_images``), built when first asked for; ``None``: use
        :meth:`embedding_dataloader` / :meth:`classification_dataloader` (the worker path)."""
        options = self._loader_options(drop_last=False, batch_size=max(self.batch_size, 256), persistent=False)
        return self._eval_images.get(split, self.dataset(split), self.augmentation, torch.device(device), options)

    def inference_batch_size(self, device: torch.device) -> int:
        """The evaluation passes' batch size on ``device`` (``eval_batch_size``)."""
        crop = self.augmentation.crop_size or 224
        return resolve_eval_batch_size(self.eval_batch_size, self.batch_size, crop, torch.device(device))

    def classification_dataloader(
        self, split: Split, *, batch_size: Optional[int] = None, rank: int = 0, world_size: int = 1
    ) -> DataLoader:
        """In-order ``(images, labels)`` batches of ``split`` through the eval pipeline (resize,
        centre crop, normalise): what a classifier's accuracy is measured on.

        ``rank``/``world_size`` keep the samples ``rank, rank + world_size, ...``: disjoint DDP
        shards that cover the split exactly once (no DistributedSampler padding).
        """
        if not 0 <= rank < world_size:
            raise ValueError(f"classification_dataloader: need 0 <= rank < world_size, got {rank}, {world_size}")
        data: Dataset = Labelled(self.dataset(split), self.augmentation.eval_transform())
        if world_size > 1:
            data = Subset(data, range(rank, len(data), world_size))  # type: ignore[arg-type]
        return self._loader(data, shuffle=False, drop_last=False, batch_size=batch_size, persistent=False)

    def _deterministic_views(self, split: Split) -> MultiViewDataset:
        return MultiViewDataset(self.dataset(split), self.augmentation.train_transform(), num_views=2, seed=self.val_seed)

    def _loader(
        self,
        data: Dataset,
        *,
        shuffle: bool,
        drop_last: bool,
        batch_size: Optional[int] = None,
        persistent: bool = True,
        collate_fn: Optional[Callable[[list[Any]], Any]] = None,
    ) -> DataLoader:
        options = self._loader_options(drop_last=drop_last, batch_size=batch_size, persistent=persistent, collate_fn=collate_fn)
        return DataLoader(data, shuffle=shuffle, **options)

    def _loader_options(
        self,
        *,
        drop_last: bool,
        batch_size: Optional[int] = None,
        persistent: bool = True,
        collate_fn: Optional[Callable[[list[Any]], Any]] = None,
    ) -> dict[str, Any]:
        workers = self.num_workers
        return dict(
            batch_size=batch_size or self.batch_size,
            drop_last=drop_last,
            num_workers=workers,
            pin_memory=self.pin_memory,
            # Callbacks' one-off loaders would otherwise keep idle workers alive all run long.
            persistent_workers=persistent and workers > 0,
            collate_fn=collate_fn,
            **loader_options(workers),  # they leave the stop signals to this process, and never inherit CUDA
        )


def default_num_workers(processes: int = 1) -> int:
    """DataLoader workers per process for ``num_workers: null``: min(4, Lightning's suggestion).

    Lightning suggests ``usable cores // processes on the machine - 1`` (at least 1; the cores this
    process may run on, ``os.sched_getaffinity``) and warns when a loader has fewer than 2 while it
    suggests more; torch warns when a loader has more workers than usable cores. This value meets
    both, so neither advice is printed. The cap keeps a many-core node's default modest; an explicit
    value is kept as given (``configs/data/imagenet100.yaml`` sets 8).
    """
    return min(MAX_DEFAULT_WORKERS, suggested_max_num_workers(processes))


def _log_dir(trainer: Any) -> Optional[str]:
    """The run folder of the trainer's logger (where the CLI writes ``config.yaml``), or None."""
    logger = getattr(trainer, "logger", None)
    try:
        return None if logger is None else logger.log_dir
    except Exception:  # noqa: BLE001 - a logger without a usable folder: nothing is saved
        return None
