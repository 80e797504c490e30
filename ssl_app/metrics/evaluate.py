"""Run the registered embedding metrics (``ssl_app.metrics.registry``) on one evaluation's inputs.

``evaluate_metrics`` runs every registered metric (or a subset) and returns an ``EmbeddingReport``
in which every declared field is present (NaN when the inputs were too few), so a consumer never
meets a missing key. Rows with a non-finite entry are left out first and counted
(``drop_nonfinite``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from ssl_app.metrics.histogram import SimilarityHistogram
from ssl_app.metrics.registry import EmbeddingInputs, EmbeddingMetric, registered_metrics


@dataclass
class EmbeddingReport:
    """Every field of every registered metric (``fields[name]``: a tensor, NaN if not computed).

    ``nonfinite`` of ``total`` embeddings had a non-finite entry and were left out of the
    metrics (see ``drop_nonfinite``). ``negative_histogram``: the inputs' histogram of every
    negative view similarity, filled (``None``: not asked for, or too few views to fill it).
    ``spectra``: the singular values the metrics computed, by input (``"clean"``, ``"backbone"``;
    ``EmbeddingInputs.singular_values``), for the spectrum figure.
    """

    fields: dict[str, Tensor]
    top_k: int
    nonfinite: int = 0
    total: int = 0
    metrics: tuple[EmbeddingMetric, ...] = field(default_factory=tuple)
    negative_histogram: SimilarityHistogram | None = None
    spectra: dict[str, Tensor] = field(default_factory=dict)
    _values: dict[str, float] | None = field(default=None, init=False, repr=False, compare=False)

    def __getitem__(self, name: str) -> Tensor:
        return self.fields[name]

    def value(self, name: str) -> float:
        """The scalar of field ``name``: the value, or the mean of a per-sample field (NaN if empty)."""
        return self.values()[name]

    def values(self) -> dict[str, float]:
        """Every field's scalar (``value``), read from each device in one transfer (on a GPU one host
        sync for all the fields, not one per field), then kept: the fields are not to be changed."""
        if self._values is None:
            self._values = read_means(self.fields)
        return self._values

    def scalars(self) -> dict[str, float]:
        """``{tag: value}`` of every field whose value is defined (NaN fields are left out)."""
        found = {}
        for metric in self.metrics:
            for name in metric.tags:
                value = self.value(name)
                if not math.isnan(value):
                    found[metric.tag(name, self.top_k)] = value
        return found


def read_means(tensors: dict[str, Tensor]) -> dict[str, float]:
    """``{name: float(tensor.float().mean())}`` (NaN for an empty tensor), the means of the tensors on
    one device stacked and read in one transfer."""
    means: dict[str, float] = {name: math.nan for name, tensor in tensors.items() if not tensor.numel()}
    by_device: dict[torch.device, list[str]] = {}
    for name, tensor in tensors.items():
        if tensor.numel():
            by_device.setdefault(tensor.device, []).append(name)
    for names in by_device.values():
        stacked = torch.stack([tensors[name].detach().float().mean() for name in names])
        means.update(zip(names, stacked.tolist()))
    return {name: means[name] for name in tensors}


def drop_nonfinite(inputs: EmbeddingInputs) -> tuple[EmbeddingInputs, int, int]:
    """``(inputs without non-finite rows, how many embeddings were non-finite, how many in all)``.

    A ``clean`` row goes with its label and its ``backbone`` row (when either of the two is
    non-finite); a sample of ``views`` goes when either view is non-finite. Counts are of
    embedding vectors: N clean rows plus 2M view rows, except that a ``clean`` that *is*
    ``view_a`` (the same tensor: clean inputs taken from the first view) is counted once, as the
    views. Non-finite ``train`` rows are dropped and counted too, and so is a ``multiview`` sample
    with any non-finite view (counted once per sample).
    """
    clean_ok = torch.isfinite(inputs.clean).all(dim=1)
    train_ok = None if inputs.train is None else torch.isfinite(inputs.train).all(dim=1)
    multiview_ok = None if inputs.multiview is None else torch.isfinite(inputs.multiview).flatten(1).all(dim=1)
    if inputs.backbone is not None:
        clean_ok = clean_ok & torch.isfinite(inputs.backbone).all(dim=1)
    view_a_ok, view_b_ok = torch.isfinite(inputs.view_a).all(dim=1), torch.isfinite(inputs.view_b).all(dim=1)
    checked = [view_a_ok, view_b_ok]  # every row of these is counted
    if inputs.clean is not inputs.view_a:
        checked.append(clean_ok)
    if train_ok is not None:
        checked.append(train_ok)
    if multiview_ok is not None:
        checked.append(multiview_ok)
    total = sum(ok.shape[0] for ok in checked)
    # The finite rows of every input, read in one transfer.
    bad = total - sum(torch.stack([ok.sum().to(view_a_ok.device) for ok in checked]).tolist())
    if bad == 0:
        return inputs, 0, total
    pair_ok = view_a_ok & view_b_ok
    kept = replace(
        inputs,
        clean=inputs.clean[clean_ok],
        labels=inputs.labels[clean_ok],
        backbone=None if inputs.backbone is None else inputs.backbone[clean_ok],
        train=None if inputs.train is None else inputs.train[train_ok],
        multiview=None if inputs.multiview is None else inputs.multiview[multiview_ok],
        view_a=inputs.view_a[pair_ok],
        view_b=inputs.view_b[pair_ok],
    )
    return kept, bad, total


def evaluate_metrics(inputs: EmbeddingInputs, names: tuple[str, ...] | None = None) -> EmbeddingReport:
    """Run the registered metrics (``names``: a subset, default all) on ``inputs``.

    A metric whose ``clean`` or ``views`` input has fewer than 2 rows, or that reads ``labels``
    when none is labelled, is not run: its fields are NaN. Non-finite rows are dropped first
    (``drop_nonfinite``); the report counts them.
    """
    inputs, nonfinite, total = drop_nonfinite(inputs)
    metrics = registered_metrics(names)
    fields: dict[str, Tensor] = {}
    if inputs.negative_histogram is not None:
        inputs.negative_histogram.counts = None  # filled below only if the top-k search runs
    for metric in metrics:
        runnable = all(inputs.rows(name) >= (1 if name == "labels" else 2) for name in metric.reads)
        values = dict(metric.compute(inputs)) if runnable else {}
        if runnable and set(values) != set(metric.tags):
            raise ValueError(f"embedding metric {metric.name!r} returned {sorted(values)}, declared {sorted(metric.tags)}")
        for name in metric.tags:
            fields[name] = values.get(name, torch.tensor(math.nan))
    histogram = inputs.negative_histogram
    filled = histogram if histogram is not None and histogram.counts is not None else None
    return EmbeddingReport(fields, inputs.top_k, nonfinite, total, metrics, filled, dict(inputs.spectra))
