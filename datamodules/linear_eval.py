"""``(image, label)`` batches for the linear evaluation of a frozen encoder (``ssl_app.evaluation``)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset
from torchvision.transforms import v2

from datamodules.base import ContrastiveDataModule
from datamodules.multiview import Labelled
from ssl_app.checks import NonNegativeInt, PositiveInt, UnitIntervalOpenAbove, check_int, check_optional_int
from ssl_app.errors import ConfigError
from ssl_app.workers import loader_options


class LinearEvalDataModule(LightningDataModule):
    """The splits of a contrastive datamodule, one view each, for a linear probe.

    - train: the training split less a held-out fraction, horizontally flipped at random (the
      paper's flip-only augmentation) and otherwise through the eval pipeline (resize,
      centre crop, normalise) of ``data.augmentation``;
    - validation: two loaders, ``val`` (the held-out ``val_fraction`` of the training split,
      fixed by ``split_seed``) and ``test`` (the test split), both through the eval pipeline;
      ``val_loader_names`` says which is which. ``val_fraction = 0``: the test loader only.
    - test: the test split.

    When the probe caches features (``LinearProbe.cache_features``), the loaders yield
    ``(features, label)`` from tensors computed once with the probe's frozen backbone.

    For ``callbacks.LongTailAccuracy``: :meth:`train_class_counts` are those of ``data`` (its
    long-tailed train split defines the many/medium/few groups, whatever part of it is held
    out), and the accuracy is measured on the test split (``classification_split``), which is
    balanced, while ``val`` is held out of the long-tailed training split.

    Args:
        data: the datamodule whose splits to read (its ``batch_size``/views are not used).
        val_fraction: fraction of the training split held out for ``linear/val_top1``, in [0, 1).
        batch_size: per process.
        num_workers: DataLoader workers (``None``: those of ``data``).
        split_seed: seed of the held-out split.
    """

    def __init__(
        self,
        data: ContrastiveDataModule,
        val_fraction: UnitIntervalOpenAbove = 0.1,
        batch_size: PositiveInt = 256,
        num_workers: Optional[NonNegativeInt] = None,
        split_seed: int = 0,
    ) -> None:
        super().__init__()
        if not isinstance(data, ContrastiveDataModule):
            raise ConfigError(f"LinearEvalDataModule: data must be a datamodules.* datamodule, got {type(data).__name__}")
        if not 0.0 <= val_fraction < 1.0:
            raise ConfigError(f"LinearEvalDataModule: val_fraction must be in [0, 1), got {val_fraction!r}")
        batch_size = check_int(batch_size, "LinearEvalDataModule: batch_size")
        num_workers = check_optional_int(num_workers, "LinearEvalDataModule: num_workers", minimum=0)
        self.data = data
        self.val_fraction = float(val_fraction)
        self.batch_size = batch_size
        self.num_workers = data.num_workers if num_workers is None else num_workers
        self.split_seed = split_seed
        self._splits: dict[str, Dataset] = {}
        self._cache: dict[str, TensorDataset] = {}

    @property
    def num_classes(self) -> int:
        return self.data.num_classes

    @property
    def labelled(self) -> bool:
        return self.data.labelled

    #: The split ``LongTailAccuracy`` reads during ``fit`` (balanced; ``val`` is long-tailed).
    classification_split: str = "test"

    @property
    def val_loader_names(self) -> tuple[str, ...]:
        return ("val", "test") if self.val_fraction > 0 else ("test",)

    def train_class_counts(self) -> list[int]:
        """Training images per class of ``data`` (after its imbalance), the groups' definition."""
        return self.data.train_class_counts()

    def describe(self) -> dict[str, Any]:
        """The wrapped data's description (run record), with this module's own splits."""
        info = {**self.data.describe(), "class_path": f"{type(self).__module__}.{type(self).__qualname__}"}
        info["data"] = self.data.describe()
        info["split_sizes"] = {name: len(self._splits[name]) for name in ("train", "val", "test") if name in self._splits}
        info["val_fraction"], info["split_seed"] = self.val_fraction, self.split_seed
        info["num_workers"] = self.num_workers
        return info

    def setup(self, stage: Optional[str] = None) -> None:
        if not self.data.labelled:  # before any work: a probe classifies
            source = getattr(self.data, "label_setting", None) or getattr(self.data, "label_source", None)
            raise ConfigError(
                f"LinearEvalDataModule: {type(self.data).__name__} has no labels"
                + (f" (labels: {source})" if source else "")
                + "; a linear probe needs labelled images (for an image folder: one sub-folder per class)"
            )
        if stage in ("fit", None):
            self.data.save_class_counts(self.trainer)
        if self._splits:
            return
        eval_transform = self.data.augmentation.eval_transform()
        train = self.data.dataset("train")
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(self.split_seed)).tolist()
        held_out = int(round(self.val_fraction * len(train)))
        if self.val_fraction > 0 and not 1 <= held_out < len(train):
            raise ConfigError(
                f"LinearEvalDataModule: val_fraction={self.val_fraction} of {len(train)} training samples holds out "
                f"{held_out}; need at least 1 and fewer than all"
            )
        self._splits = {
            "train": Labelled(Subset(train, sorted(order[held_out:])), v2.Compose([v2.RandomHorizontalFlip(), eval_transform])),
            "train_clean": Labelled(Subset(train, sorted(order[held_out:])), eval_transform),
            "train_flipped": Labelled(
                Subset(train, sorted(order[held_out:])), v2.Compose([v2.RandomHorizontalFlip(p=1.0), eval_transform])
            ),
            "val": Labelled(Subset(train, sorted(order[:held_out])), eval_transform),
            "test": Labelled(self.data.dataset("test"), eval_transform),
        }

    # --- loaders ---------------------------------------------------------------------------
    def train_dataloader(self) -> DataLoader:
        mode = self._cache_mode()
        if mode == "none":
            return self._loader(self._splits["train"], shuffle=True)
        parts = ["train_clean"] + (["train_flipped"] if mode == "flips" else [])
        return self._loader(self._cached(*parts), shuffle=True)

    def val_dataloader(self) -> list[DataLoader]:
        return [self._eval_loader(name) for name in self.val_loader_names]

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

    def classification_dataloader(
        self, split: str, *, batch_size: Optional[int] = None, rank: int = 0, world_size: int = 1
    ) -> DataLoader:
        """In-order ``(inputs, labels)`` of ``val`` or ``test`` as the probe's loaders serve them
        (images, or the cached features when the probe caches), keeping the samples ``rank,
        rank + world_size, ...``: disjoint DDP shards, no padding."""
        if split not in ("val", "test"):
            raise ConfigError(f"LinearEvalDataModule: classification_dataloader serves val or test, got {split!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"classification_dataloader: need 0 <= rank < world_size, got {rank}, {world_size}")
        if not self._splits:
            self.setup("validate")
        data: Dataset = self._splits[split] if self._cache_mode() == "none" else self._cached(split)
        if world_size > 1:
            data = Subset(data, range(rank, len(data), world_size))  # type: ignore[arg-type]
        workers = 0 if isinstance(data, TensorDataset) or self._cache_mode() != "none" else self.num_workers
        batch_size = batch_size or self.batch_size
        return DataLoader(data, batch_size=batch_size, shuffle=False, num_workers=workers, **loader_options(workers))

    def _eval_loader(self, name: str) -> DataLoader:
        data = self._splits[name] if self._cache_mode() == "none" else self._cached(name)
        return self._loader(data, shuffle=False)

    def _loader(self, data: Dataset, shuffle: bool) -> DataLoader:
        cached = isinstance(data, TensorDataset)
        workers = 0 if cached else self.num_workers
        return DataLoader(
            data, batch_size=self.batch_size, shuffle=shuffle, num_workers=workers,
            persistent_workers=workers > 0, pin_memory=self.data.pin_memory and not cached, **loader_options(workers),
        )  # fmt: skip

    # --- cached features ----------------------------------------------------------------------
    def _cache_mode(self) -> str:
        module = self.trainer.lightning_module if self.trainer is not None else None
        return getattr(module, "cache_features", "none")

    def _cached(self, *names: str) -> TensorDataset:
        """Features and labels of the named splits, encoded once by the probe's frozen backbone."""
        key = "+".join(names)
        if key not in self._cache:
            parts = [self._encode(self._splits[name]) for name in names]
            self._cache[key] = TensorDataset(torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]))
        return self._cache[key]

    @torch.no_grad()
    def _encode(self, data: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
        module = self.trainer.lightning_module
        device = module.device
        features, labels = [], []
        with self.trainer.precision_plugin.forward_context():
            for images, targets in self._loader(data, shuffle=False):
                features.append(module.features(images.to(device)).float().cpu())
                labels.append(targets)
        return torch.cat(features), torch.cat(labels)
