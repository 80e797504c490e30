"""The training dataloader and sampler whose place in the epoch survives a checkpoint.

The order comes from a ``DistributedSampler``, in one process too (one replica): the epoch's
permutation is a pure function of ``(seed, epoch)``, rank ``r`` of ``W`` takes ``perm[r::W]``, so
the ``W`` ranks' batches of ``B`` per process at a step hold the same samples as one process's
batch of ``W · B`` (``batch_size`` is per process). The sampler yields keys
``(seed, epoch, index)`` rather than indices: the datasets draw each sample's views from its key
(``datamodules.keyed_draws``), so no worker or process state reaches a view. The saved place
(:meth:`_ShardIterator.state_dict`) is the seed, the epoch and the samples yielded, inside the
state of torchdata's ``StatefulDataLoader``, which Lightning saves in every checkpoint; a resumed
run keeps the checkpoint's seed, so it continues the same orders and views even when its own
seed differs (``seed_everything: true`` draws a new one per start).

Lightning restores a train dataloader's state and creates its iterator (with workers, draws the
first indices too) *before* it calls ``set_epoch`` for the resumed epoch, and the sampler it would
inject is a fresh one at epoch 0, so skipping ahead in that sampler would skip ahead in epoch 0's
order. :class:`ResumableDistributedSampler` keeps the epoch and the position in its iterator's
state, which ``StatefulDataLoader`` saves with the loader's.

A run requeued on another number of processes (2 ranks → 1, 1 → 2) goes on with the samples of the
interrupted epoch that no rank had yet, shared out among its own ranks (``_ShardIterator``; one info
line says so); the epochs after it are the usual ones. A saved place that cannot be continued (an
epoch with fewer samples now) is said in one warning line, and that epoch restarts from its first
sample, in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader


class ResumableDataLoader(StatefulDataLoader):
    """A ``StatefulDataLoader`` that resumes with a different ``num_workers`` at the same place.

    torchdata's saved state has one form for loading in the main process and another per worker
    count, and an iterator built from a state of another form stops the run with an assertion.
    Both forms hold the sampler's own state (seed, epoch, samples yielded), which does not depend
    on ``num_workers``: for a state of another form, only that is handed to the sampler, so the
    run continues the epoch exactly where it stopped.
    """

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if isinstance(self.sampler, ResumableDistributedSampler) and _sampler_state(state_dict) is None:
            rank_zero_warn(
                "The checkpoint's training dataloader state holds no place in the epoch that this version can read "
                "(an older version's), so the rest of the epoch comes from a new shuffle."
            )
            return
        saved = _saved_num_workers(state_dict)
        if saved is not None and saved != self.num_workers:
            place = _sampler_state(state_dict)
            if place is not None and isinstance(self.sampler, ResumableDistributedSampler):
                self.sampler.resume_at(place)
            else:
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


def _sampler_state(state: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The sampler iterator's state inside either form of a StatefulDataLoader state, if there is one."""
    main = state.get("_snapshot", {}).get("_main_snapshot", state)
    place = (main.get("_sampler_iter_state") or {}).get("sampler_iter_state")
    return place if isinstance(place, dict) and "epoch" in place and "yielded" in place else None


class ResumableDistributedSampler(DistributedSampler):
    """A ``DistributedSampler`` (same shards, same order) whose iterators can be saved and restored.

    Each iterator fixes its epoch and seed when it yields its first index (so a ``set_epoch`` after
    ``iter()`` still counts, as with the plain sampler) or when its state is loaded; its state is
    that seed and epoch and the number of indices yielded so far. Loading it also sets the
    sampler's epoch and seed. With ``keyed`` it yields ``(seed, epoch, index)`` instead of
    ``index``: what the training datasets draw a sample's views from.
    """

    def __init__(self, dataset: Any, *, keyed: bool = False, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.keyed = keyed
        self._resume: Optional[dict[str, Any]] = None

    def resume_at(self, state: dict[str, Any]) -> None:
        """Start the next iterator at a saved place (an iterator's :meth:`~_ShardIterator.state_dict`)."""
        self._resume = dict(state)
        _ShardIterator(self).load_state_dict(self._resume)  # sets the sampler's epoch and seed now

    def __iter__(self) -> Iterator[Any]:
        iterator = _ShardIterator(self)
        if self._resume is not None:
            iterator.load_state_dict(self._resume)
            self._resume = None
        return iterator


class _ShardIterator(Iterator[Any]):
    """One epoch of one rank's samples: ``(padded permutation)[rank::replicas]``, from position ``yielded``.

    Resumed on another number of processes, the epoch goes on with the samples no rank had yet: the
    saved rank's ``yielded`` samples of ``replicas`` ranks are the permutation's first ``replicas ·
    yielded`` (rank r took ``perm[r::replicas]``), so the rest, ``perm[start:]``, is shared out as
    DistributedSampler shares an epoch (padded to equal shards). ``start`` is saved with the place,
    so a second stop in that epoch resumes it again.
    """

    def __init__(self, sampler: ResumableDistributedSampler) -> None:
        self.sampler = sampler
        self.epoch: Optional[int] = None
        self.seed: Optional[int] = None
        self.start = 0  # samples of the epoch's permutation consumed before this order (another world size)
        self.yielded = 0
        self._order: Optional[list[int]] = None

    def __next__(self) -> Any:
        if self._order is None:
            if self.epoch is None:
                self.epoch = self.sampler.epoch
            if self.seed is None:
                self.seed = self.sampler.seed
            self._order = self._epoch_order(self.epoch, self.seed)
        if self.yielded >= len(self._order):
            raise StopIteration
        index = self._order[self.yielded]
        self.yielded += 1
        return (self.seed, self.epoch, index) if self.sampler.keyed else index

    def _epoch_order(self, epoch: int, seed: int) -> list[int]:
        sampler = self.sampler
        kept = sampler.epoch, sampler.seed, sampler.num_replicas, sampler.rank, sampler.num_samples, sampler.total_size
        sampler.epoch, sampler.seed = epoch, seed
        if self.start:  # the whole permutation: one replica, no padding
            sampler.num_replicas, sampler.rank, sampler.num_samples = 1, 0, len(sampler.dataset)
            sampler.total_size = sampler.num_samples
        try:
            order = list(DistributedSampler.__iter__(sampler))
        finally:
            sampler.epoch, sampler.seed, sampler.num_replicas, sampler.rank, sampler.num_samples, sampler.total_size = kept
        return shard(order[self.start :], sampler.num_replicas, sampler.rank) if self.start else order

    def state_dict(self) -> dict[str, Any]:
        return {
            "seed": self.sampler.seed if self.seed is None else self.seed,
            "epoch": self.sampler.epoch if self.epoch is None else self.epoch,
            "yielded": self.yielded,
            "replicas": self.sampler.num_replicas,
            "start": self.start,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.yielded, self._order = int(state["epoch"]), int(state["yielded"]), None
        if "seed" in state:  # states saved before the seed was part of them keep this run's
            self.sampler.seed = int(state["seed"])
        self.seed = self.sampler.seed
        self.sampler.set_epoch(self.epoch)
        self.start = int(state.get("start", 0))
        replicas = int(state.get("replicas", self.sampler.num_replicas))  # older states: this run's
        size, here = len(self.sampler.dataset), self.sampler.num_replicas
        if self.start > size:
            self._restart_epoch(f"it had seen {self.start} samples of an epoch that now has {size}")
        elif replicas != here:
            consumed = min(self.start + replicas * self.yielded, size)
            self.start, self.yielded = consumed, 0
            rank_zero_info(
                f"Resumed on {here} process(es) from a checkpoint of {replicas}: epoch {self.epoch} goes on with its "
                f"{size - consumed} samples not yet seen, shared among the {here}."
            )
        elif self.yielded > len(self._epoch_order(self.epoch, self.seed)):
            self._restart_epoch(f"its place, {self.yielded} samples, lies beyond this process's share of the epoch")

    def _restart_epoch(self, why: str) -> None:
        rank_zero_warn(f"The training dataloader cannot continue epoch {self.epoch} where it stopped ({why}): it restarts "
                       "that epoch from its first sample, in the same order.")  # fmt: skip
        self.start = self.yielded = 0


def shard(order: list[int], replicas: int, rank: int) -> list[int]:
    """Rank ``rank``'s share of ``order`` as DistributedSampler shares an epoch: padded with its own first
    samples to a multiple of ``replicas``, then every ``replicas``-th from ``rank``."""
    if not order:
        return []
    total = -(-len(order) // replicas) * replicas
    padded = (order * -(-total // len(order)))[:total]
    return padded[rank::replicas]
