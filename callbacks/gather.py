"""Per-sample rows collected batch by batch on each rank, gathered to every rank without duplicates.

A ``DistributedSampler`` gives each rank ``ceil(N / world)`` samples and pads the last ranks
with repeats of the first samples, so the ranks hold different numbers of rows and a few rows
twice. Gathering therefore (1) all-gathers the row counts, (2) pads every rank's rows to the
longest and all-gathers them, (3) drops the padding rows, and (4) sorts the union by sample
index and keeps the first row of each index. The result is the same N rows in the same order
on every rank and for any number of ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from ssl_app import distributed


@dataclass
class Samples:
    """``indices`` [N] int64, ``labels`` [N] int64 and ``features`` [N, views, d] float32;
    ``backbone`` [N, f] float32: the rows' backbone features, when the pass kept them."""

    indices: Tensor
    labels: Tensor
    features: Tensor
    backbone: Optional[Tensor] = None

    def __len__(self) -> int:
        return self.indices.shape[0]

    def select(self, rows: Tensor) -> Samples:
        """The rows ``rows`` (a bool mask or indices) of every field."""
        backbone = None if self.backbone is None else self.backbone[rows]
        return Samples(self.indices[rows], self.labels[rows], self.features[rows], backbone)

    def to(self, device: torch.device) -> Samples:
        backbone = None if self.backbone is None else self.backbone.to(device)
        return Samples(self.indices.to(device), self.labels.to(device), self.features.to(device), backbone)

    def view_features(self, i: int) -> Tensor:
        """The [N, d] features of view ``i``."""
        return self.features[:, i]


class SampleBuffer:
    """Accumulates ``(index, label, view features)`` rows on this rank.

    Args:
        max_samples: keep only the samples whose index is ``< max_samples`` (a fixed subset,
            the same under any number of ranks); ``None``: keep everything.
    """

    def __init__(self, max_samples: Optional[int] = None) -> None:
        if max_samples is not None and (not isinstance(max_samples, int) or max_samples < 1):
            raise ValueError(f"max_samples must be an int >= 1 or None, got {max_samples!r}")
        self.max_samples = max_samples
        self._indices: list[Tensor] = []
        self._labels: list[Tensor] = []
        self._features: list[Tensor] = []
        self._backbone: list[Tensor] = []

    @classmethod
    def holding(cls, samples: Samples, max_samples: Optional[int] = None) -> SampleBuffer:
        """A buffer holding ``samples`` (of them, the rows below ``max_samples``): a pass served again."""
        buffer = cls(max_samples)
        if len(samples):
            buffer._indices.append(samples.indices)
            buffer._labels.append(samples.labels)
            buffer._features.append(samples.features)
            if samples.backbone is not None:
                buffer._backbone.append(samples.backbone)
        return buffer

    def keep_mask(self, indices: Tensor) -> Optional[Tensor]:
        """Bool mask of the rows to keep, or ``None`` when every row is kept."""
        return None if self.max_samples is None else indices < self.max_samples

    def add(self, indices: Tensor, labels: Tensor, views: Sequence[Tensor], backbone: Optional[Tensor] = None) -> None:
        """Append a batch: ``indices``/``labels`` [B], each view [B, d] (detached, stored as float32),
        and optionally the batch's backbone features [B, f] (give them for every batch or none).

        Nothing is filtered here, so a batch costs no host-device synchronisation; rows past
        ``max_samples`` are dropped once, in ``local``.
        """
        features = torch.stack([v.detach().float() for v in views], dim=1)
        self._indices.append(indices.to(features.device, torch.long))
        self._labels.append(labels.to(features.device, torch.long))
        self._features.append(features)
        if backbone is not None:
            self._backbone.append(backbone.detach().float())

    def local(self) -> Samples:
        """This rank's rows in arrival order (possibly with DistributedSampler repeats)."""
        if not self._indices:
            empty = torch.empty(0, dtype=torch.long)
            return Samples(empty, empty.clone(), torch.empty(0, 0, 0))
        backbone = torch.cat(self._backbone) if self._backbone else None
        samples = Samples(torch.cat(self._indices), torch.cat(self._labels), torch.cat(self._features), backbone)
        mask = self.keep_mask(samples.indices)
        return samples if mask is None else samples.select(mask)

    def gather(self, device: Optional[torch.device] = None) -> Samples:
        """Every rank's rows, one per sample index, sorted by index (a collective under DDP).

        ``device`` places the result of a rank that collected nothing (default: where the rows are).
        """
        local = self.local()
        if device is not None:
            local = local.to(device)
        if distributed.world_size() > 1:
            local = _all_gather_samples(local)
        return unique_by_index(local)


def unique_by_index(samples: Samples) -> Samples:
    """Sort rows by sample index and keep the first row of every index."""
    order = torch.argsort(samples.indices, stable=True)
    sorted_indices = samples.indices[order]
    first = torch.ones_like(sorted_indices, dtype=torch.bool)
    first[1:] = sorted_indices[1:] != sorted_indices[:-1]
    return samples.select(order[first])


def _all_gather_samples(local: Samples) -> Samples:
    n, views, dim = local.features.shape
    device = local.features.device
    width = 0 if local.backbone is None else local.backbone.shape[1]
    shapes = distributed.gather(torch.tensor([[n, views, dim, width]], device=device)).tolist()
    # a rank with no rows sends 0 × 0 (and no backbone)
    views, dim, width = max(s[1] for s in shapes), max(s[2] for s in shapes), max(s[3] for s in shapes)
    counts = [s[0] for s in shapes]
    features = local.features.reshape(n, views * dim)
    ids = distributed.gather_uneven(torch.stack([local.indices, local.labels], dim=1).to(device), counts)
    features = distributed.gather_uneven(features, counts)
    backbone = None
    if width:
        rows = local.backbone if local.backbone is not None else features.new_zeros(0, width)
        backbone = distributed.gather_uneven(rows.to(device), counts)
    return Samples(ids[:, 0], ids[:, 1], features.view(-1, views, dim), backbone)
