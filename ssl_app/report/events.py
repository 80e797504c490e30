"""Reading TensorBoard event files: scalar series and histograms, nothing else.

One ``EventAccumulator`` per directory (it reads every ``events.out.tfevents.*`` file in it, in
order, so a resumed run's files join up). Images, audio and graphs are not kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Histogram:
    """One logged histogram: bin ``edges`` [B + 1] and ``counts`` [B] (counts sum to ``total``).

    ``step`` is the global step it was logged at (the last one of a run is its final epoch);
    ``value_sum`` the recorded sum of the values, so their mean is ``value_sum / total``.
    """

    step: int
    edges: np.ndarray
    counts: np.ndarray
    value_sum: float

    @property
    def total(self) -> float:
        return float(self.counts.sum())


@dataclass
class EventData:
    """What one event directory holds: ``scalars[tag]`` is a list of ``(step, value)`` in step
    order (one value per step: a later write at the same step wins), ``histograms[tag]`` the
    histograms in step order."""

    scalars: dict[str, list[tuple[int, float]]]
    histograms: dict[str, list[Histogram]]

    def last(self, tag: str) -> float | None:
        """The last logged value of ``tag`` (the final epoch for per-epoch tags), or None."""
        series = self.scalars.get(tag)
        return series[-1][1] if series else None


def read_events(directory: Path) -> EventData:
    """Every scalar and histogram in the event files of ``directory`` (not its subfolders)."""
    # Imported here: loading TensorBoard costs a second, and discovery does not need it.
    from tensorboard.backend.event_processing import event_accumulator as ea

    keep_all, keep_last = 0, 1
    accumulator = ea.EventAccumulator(
        str(directory),
        size_guidance={
            ea.SCALARS: keep_all,
            ea.HISTOGRAMS: keep_all,
            ea.COMPRESSED_HISTOGRAMS: keep_last,
            ea.IMAGES: keep_last,
            ea.AUDIO: keep_last,
            ea.TENSORS: keep_last,
        },
    )
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars = {
        tag: _by_step((event.step, float(event.value)) for event in accumulator.Scalars(tag)) for tag in tags.get(ea.SCALARS, [])
    }
    histograms = {}
    for tag in tags.get(ea.HISTOGRAMS, []):
        events = sorted(accumulator.Histograms(tag), key=lambda event: event.step)
        histograms[tag] = [h for h in (_histogram(event.step, event.histogram_value) for event in events) if h is not None]
    return EventData(scalars=scalars, histograms=histograms)


def _by_step(points) -> list[tuple[int, float]]:
    """Sort by step, keep the last value written at each step."""
    latest: dict[int, float] = {}
    for step, value in points:
        latest[int(step)] = value
    return sorted(latest.items())


def _histogram(step: int, value) -> Histogram | None:
    """A TensorBoard histogram proto as edges and counts.

    TensorBoard stores only right bin limits; bin i covers (limit[i-1], limit[i]]. The first
    bin's left edge is taken from the recorded minimum (or the limit itself when that bin is
    empty, as torch's writer makes it); TensorFlow's unbounded limits (±DBL_MAX,
    |limit| > 1e300) become the recorded min/max. None when the histogram is empty.
    """
    limits = np.asarray(value.bucket_limit, dtype=float)
    counts = np.asarray(value.bucket, dtype=float)
    if limits.size == 0 or counts.sum() <= 0:
        return None
    low, high = float(value.min), float(value.max)
    first_left = limits[0] if counts[0] == 0 or not low < limits[0] else low
    edges = np.concatenate([[first_left], limits])
    unbounded = np.abs(edges) > 1e300
    edges[unbounded & (edges < 0)] = low
    edges[unbounded & (edges > 0)] = high
    return Histogram(step=int(step), edges=edges, counts=counts, value_sum=float(value.sum))
