"""The training dataloader and DDP sampler whose place in the epoch survives a checkpoint.

In one process torchdata's ``StatefulDataLoader`` does it all: it shuffles with its
``RandomSampler``, whose state (the generator at the epoch's start and the samples drawn) Lightning
saves in the checkpoint and restores, so a resumed run finishes the epoch's permutation and then
draws the next ones from the same generator as an uninterrupted run. :class:`ResumableDataLoader`
only adds a way out when the resumed run has another ``num_workers``.

Under DDP the order comes from a ``DistributedSampler``: a pure function of ``(seed, epoch, rank)``.
Lightning restores a train dataloader's state and creates its iterator (with workers, draws the
first indices too) *before* it calls ``set_epoch`` for the resumed epoch, and the sampler it would
inject is a fresh one at epoch 0, so skipping ahead in that sampler would skip ahead in epoch 0's
order. :class:`ResumableDistributedSampler` keeps the epoch and the position in its iterator's
state, which ``StatefulDataLoader`` saves with the loader's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader


class ResumableDataLoader(StatefulDataLoader):
    """A ``StatefulDataLoader`` that resumes with a different ``num_workers`` instead of failing.

    torchdata's saved state has one form for loading in the main process and another per worker
    count, and an iterator built from a state of another form stops the run with an assertion.
    Such a state is not loaded: the run warns and draws the rest of the epoch from a new shuffle.
    """

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = _saved_num_workers(state_dict)
        if saved is not None and saved != self.num_workers:
            rank_zero_warn(
                f"The checkpoint saved the training dataloader's place in the epoch with num_workers={saved}; "
                f"this run has num_workers={self.num_workers}, so the rest of the epoch comes from a new shuffle "
                "(resume with the same num_workers to continue the epoch's order)."
            )
            return
        super().load_state_dict(state_dict)


def _saved_num_workers(state: dict[str, Any]) -> Optional[int]:
    """The ``num_workers`` a StatefulDataLoader state was saved with (``None``: not a state it knows)."""
    if "_num_yielded" in state:  # the main process's form
        return 0
    main = state.get("_snapshot", {}).get("_main_snapshot", {})
    return main.get("_num_workers")


class ResumableDistributedSampler(DistributedSampler):
    """A ``DistributedSampler`` (same shards, same order) whose iterators can be saved and restored.

    Each iterator fixes its epoch when it yields its first index (so a ``set_epoch`` after
    ``iter()`` still counts, as with the plain sampler) or when its state is loaded; its state is
    that epoch and the number of indices yielded so far. Loading it also sets the sampler's epoch.
    """

    def __iter__(self) -> Iterator[int]:
        return _ShardIterator(self)


class _ShardIterator(Iterator[int]):
    def __init__(self, sampler: ResumableDistributedSampler) -> None:
        self.sampler = sampler
        self.epoch: Optional[int] = None
        self.yielded = 0
        self._order: Optional[list[int]] = None

    def __next__(self) -> int:
        if self._order is None:
            if self.epoch is None:
                self.epoch = self.sampler.epoch
            self._order = self._epoch_order(self.epoch)
        if self.yielded >= len(self._order):
            raise StopIteration
        index = self._order[self.yielded]
        self.yielded += 1
        return index

    def _epoch_order(self, epoch: int) -> list[int]:
        sampler = self.sampler
        current, sampler.epoch = sampler.epoch, epoch
        try:
            return list(DistributedSampler.__iter__(sampler))
        finally:
            sampler.epoch = current

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.sampler.epoch if self.epoch is None else self.epoch, "yielded": self.yielded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.yielded, self._order = int(state["epoch"]), int(state["yielded"]), None
        self.sampler.set_epoch(self.epoch)
