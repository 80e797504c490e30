"""A fixed-bin histogram of similarities, accumulated block by block on the device.

``positive_and_topk_negatives`` fills one with **every** negative similarity s_ij (j ≠ i) of the
anchors it searches: the bins and extremes from the same similarity blocks as the top-k, the sum
and sum of squares exactly from d × d products of the unit rows, so no [N, N] matrix ever
reaches the host. Bins are ``bins`` equal intervals of [low, high] (default 200 over [-1, 1]);
values outside (rounding puts a dot product of unit rows a hair past ±1) count in the end bins.
Counts, sum and sum of squares are accumulated in float64 (float32 on MPS); under DDP
``all_reduce`` sums the counts and moments and takes the extremes over ranks, so every rank
holds the single-process histogram. ``callbacks.EmbeddingMetrics`` logs it as
``similarity/negative``; the report's relative-penalty curve reads it (``ssl_app.report.penalty``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ssl_app import distributed
from ssl_app.metrics.rows import accumulation_dtype

DEFAULT_BINS = 200


@dataclass(frozen=True)
class HistogramSummary:
    """Plain numbers of a histogram, what TensorBoard's ``add_histogram_raw`` takes: ``edges``
    [bins + 1], ``counts`` [bins], and the exact ``count``, ``min``, ``max``, ``sum``, ``sum_squares``."""

    edges: list[float]
    counts: list[float]
    count: int
    min: float
    max: float
    sum: float
    sum_squares: float


class SimilarityHistogram:
    """Counts of values in ``bins`` equal bins of [low, high], plus count, sum, sum of squares,
    min and max of the values themselves. ``reset`` before each use; ``add`` blocks and
    ``add_moments``; ``all_reduce`` once on every rank; ``summary`` reads it (one host transfer;
    ``summaries`` reads several in one). ``of`` counts a tensor's values at once."""

    @classmethod
    def of(cls, values: Tensor, bins: int = DEFAULT_BINS, low: float = -1.0, high: float = 1.0) -> SimilarityHistogram:
        """The histogram of every entry of ``values`` (any shape; not changed), counted on its device,
        with the exact count, sum and sum of squares."""
        histogram = cls(bins, low, high)
        flat = values.detach().reshape(1, -1).float()
        histogram.reset(flat.device, accumulation_dtype(flat))
        exact = flat.to(histogram.moments.dtype)
        histogram.add(flat.clone())  # ``add`` overwrites its block
        histogram.add_moments(flat.shape[1], exact.sum(), exact.square().sum())
        return histogram

    def __init__(self, bins: int = DEFAULT_BINS, low: float = -1.0, high: float = 1.0) -> None:
        if not isinstance(bins, int) or bins < 1 or not high > low:
            raise ValueError(f"SimilarityHistogram needs bins >= 1 and high > low, got bins={bins!r}, [{low}, {high}]")
        self.bins, self.low, self.high = bins, float(low), float(high)
        self.counts: Tensor | None = None  # [bins]
        self.moments: Tensor | None = None  # [count, sum, sum of squares]
        self.extremes: Tensor | None = None  # [max, −min]

    def reset(self, device: torch.device, dtype: torch.dtype) -> None:
        """Empty it, its tensors on ``device`` in the accumulation ``dtype``."""
        self.counts = torch.zeros(self.bins, dtype=dtype, device=device)
        self.moments = torch.zeros(3, dtype=dtype, device=device)
        self.extremes = torch.full((2,), float("-inf"), dtype=dtype, device=device)

    def add(self, block: Tensor, diagonal: int | None = None) -> None:
        """Count every entry of the 2-D ``block`` into the bins and extremes except, when
        ``diagonal`` is given, the entries of ``block.diagonal(diagonal)``. ``block`` is scratch:
        it is overwritten. The moments come separately (``add_moments``): a caller that has the
        unit rows gets them exactly from d × d products, far cheaper than from the block."""
        if self.counts is None:
            raise RuntimeError("SimilarityHistogram.add before reset")
        skip = block.diagonal(diagonal) if diagonal is not None else None
        if block.numel() == (0 if skip is None else skip.numel()):
            return
        if skip is not None:
            skip.fill_(float("-inf"))
        largest = block.max()
        if skip is not None:
            skip.fill_(float("inf"))
        smallest = block.min()
        self.extremes = torch.maximum(self.extremes, torch.stack([largest, -smallest]).to(self.extremes.dtype))
        index = block.sub_(self.low).mul_(self.bins / (self.high - self.low)).floor_().clamp_(0, self.bins - 1)
        if skip is not None:
            skip.fill_(self.bins)  # an extra bin, dropped below
        counted = torch.bincount(index.flatten().to(torch.int32), minlength=self.bins + 1)
        self.counts += counted[: self.bins].to(self.counts.dtype)

    def add_moments(self, count: int, total: Tensor, squares: Tensor) -> None:
        """Add ``count`` values with sum ``total`` and sum of squares ``squares`` (0-d tensors)."""
        if self.moments is None:
            raise RuntimeError("SimilarityHistogram.add_moments before reset")
        dtype, device = self.moments.dtype, self.moments.device
        self.moments += torch.stack([torch.tensor(float(count), dtype=dtype, device=device), total.to(dtype), squares.to(dtype)])

    def all_reduce(self, world_size: int) -> None:
        """Make every rank hold the histogram of all ranks' values (a collective when ``world_size > 1``)."""
        if world_size == 1 or self.counts is None:
            return
        sums = torch.cat([self.counts, self.moments])
        distributed.all_reduce_sum(sums)
        self.counts, self.moments = sums[: self.bins], sums[self.bins :]
        self.extremes = distributed.all_reduce_max(self.extremes)

    def summary(self) -> HistogramSummary:
        """The histogram as plain numbers (count 0: nothing was added)."""
        return summaries([self])[0]


def summaries(histograms: Sequence[SimilarityHistogram]) -> list[HistogramSummary]:
    """Each histogram's ``summary``, every number read from the device in one transfer (on a GPU one
    host sync for all of them)."""
    if any(histogram.counts is None for histogram in histograms):
        raise RuntimeError("SimilarityHistogram.summary before reset")
    if not histograms:
        return []
    first = histograms[0].counts
    parts = [torch.cat([h.counts, h.moments, h.extremes]).to(first.device, first.dtype) for h in histograms]
    numbers = torch.cat(parts).tolist()
    found, start = [], 0
    for histogram in histograms:
        counts = numbers[start : start + histogram.bins]
        count, total, squares, largest, negative_smallest = numbers[start + histogram.bins : start + histogram.bins + 5]
        start += histogram.bins + 5
        edges = torch.linspace(histogram.low, histogram.high, histogram.bins + 1, dtype=torch.float64).tolist()
        found.append(HistogramSummary(edges, counts, int(count), -negative_smallest, largest, total, squares))
    return found
