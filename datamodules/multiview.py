"""A dataset wrapper that turns ``(image, label)`` samples into ``(views, label, index)``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional, Union

import torch
from torch.utils.data import Dataset

from datamodules.keyed_draws import generator_seed

# Large prime spreading (seed, index) pairs so that nearby seeds do not share per-sample streams.
_SEED_STRIDE = 1_000_003
_SEED_MODULUS = 2**63


def sample_seed(seed: int, index: int) -> int:
    """The RNG seed used for sample ``index`` of a dataset seeded with ``seed``."""
    return (seed * _SEED_STRIDE + index) % _SEED_MODULUS


class MultiViewDataset(Dataset):
    """Applies ``transform`` ``num_views`` times to each sample of ``base``.

    Every item is ``((view_1, ..., view_n), label, index)``: a tuple of views (always a tuple,
    also for ``num_views=1``), the label as a Python ``int`` (-1 for unlabeled samples) and the
    sample's index in ``base``. After default collation a batch is ``(views, labels, indices)``
    with ``views`` a list of ``[B, C, H, W]`` tensors and ``labels``/``indices`` int64 ``[B]``.

    Args:
        base: a map-style dataset yielding ``(image, label)``; ``label`` may be ``None``.
        transform: applied independently to produce each view; or a sequence of ``num_views``
            transforms, the i-th making view i (a MoCo query pipeline unlike its key's).
        num_views: number of views per sample (>= 1).
        seed: if given, the views of sample ``i`` are drawn from an RNG seeded with
            ``(seed, i)`` only, so they are identical on every call, in every process and in
            every DataLoader worker (validation under 1 or N DDP ranks sees the same views).
            The global RNG state is left untouched. ``None``: fresh random views every call.

    A training sampler (``datamodules.resumable``) passes keys ``(seed, epoch, index)`` instead of
    indices: the views of that sample are then drawn from a generator seeded with the key alone
    (``keyed_draws.generator_seed``), whatever worker or process makes them, so a resumed run, or
    one with another ``num_workers`` or number of processes, sees the same views.
    """

    def __init__(
        self,
        base: Dataset,
        transform: Union[Callable[[Any], torch.Tensor], Sequence[Callable[[Any], torch.Tensor]]],
        num_views: int = 2,
        seed: Optional[int] = None,
    ) -> None:
        if num_views < 1:
            raise ValueError(f"num_views must be >= 1, got {num_views}")
        if isinstance(transform, Sequence) and len(transform) != num_views:
            raise ValueError(f"{len(transform)} transforms for {num_views} views")
        self.base = base
        self.transform = transform
        self.num_views = num_views
        self.seed = seed

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: Union[int, tuple[int, int, int]]) -> tuple[tuple[torch.Tensor, ...], int, int]:
        seed: Optional[int] = None
        if isinstance(index, tuple):
            key_seed, epoch, index = index
            seed = generator_seed(key_seed, epoch, index)
        elif self.seed is not None:
            seed = sample_seed(self.seed, index)
        image, label = self.base[index]
        label = -1 if label is None else int(label)
        if seed is None:
            views = self._views(image)
        else:
            with torch.random.fork_rng(devices=[]):
                # Only the CPU generator: torch.manual_seed would also reseed CUDA, which
                # fork_rng(devices=[]) does not restore.
                torch.default_generator.manual_seed(seed)
                views = self._views(image)
        return views, label, int(index)

    def _views(self, image: Any) -> tuple[torch.Tensor, ...]:
        if isinstance(self.transform, Sequence):
            return tuple(transform(image) for transform in self.transform)
        return tuple(self.transform(image) for _ in range(self.num_views))


class Labelled(Dataset):
    """``(transform(image), label)`` of an ``(image, label)`` dataset; a missing label becomes -1."""

    def __init__(self, base: Dataset, transform: Callable[[Any], torch.Tensor]) -> None:
        self.base, self.transform = base, transform

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.base[index]
        return self.transform(image), -1 if label is None else int(label)
