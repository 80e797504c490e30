"""Embedding metrics as data: one pure function plus one registration line each.

A metric reads some of the ``EmbeddingInputs`` of one evaluation and returns named fields
(0-d tensors, or per-sample tensors such as the positive similarities whose mean is the scalar):

    @register("uniformity", reads=("clean",), formula="−log mean_{i<j} exp(−2||z_i − z_j||²)")
    def _uniformity(x: EmbeddingInputs) -> dict[str, Tensor]:
        return {"uniformity": uniformity(x.clean)}

``evaluate_metrics`` runs every registered metric and returns an ``EmbeddingReport`` in which
every declared field is present (NaN when the inputs were too few), so a consumer never meets
a missing key. What the inputs are:

- ``clean``: one embedding per sample, [N, d], with ``labels`` [N]. By default (the callback's
  ``uniformity_inputs: clean``) the evaluation-transform embedding of each image, the quantity
  of Wang & Liu's Table 1; with ``augmented``, the first augmented view.
- ``views``: two augmented views per sample, ``view_a`` and ``view_b`` [M, d] (row i of both is
  sample i): what alignment and the positive similarity are defined on.
- ``labels``: the class labels of the ``clean`` rows (< 0: unlabelled).

All the functions are pure (no Lightning); under DDP pass the same gathered tensors on every
rank and the metric functions shard their own work.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import torch
from torch import Tensor

from ssl_app.metrics.embedding import alignment, positive_and_topk_negatives, tolerance, uniformity
from ssl_app.metrics.rank import effective_rank

Input = Literal["clean", "views", "labels"]
INPUTS: tuple[Input, ...] = ("clean", "views", "labels")


@dataclass(frozen=True)
class EmbeddingInputs:
    """What the metrics of one evaluation may read (every tensor gathered, the same on every rank).

    ``clean`` [N, d] with ``labels`` [N]; ``view_a``, ``view_b`` [M, d]; ``top_k``: hardest
    negatives per anchor for the metrics that need it.
    """

    clean: Tensor
    labels: Tensor
    view_a: Tensor
    view_b: Tensor
    top_k: int = 10

    def rows(self, name: Input) -> int:
        """How many samples the input ``name`` holds (labels: how many are labelled)."""
        if name == "clean":
            return self.clean.shape[0]
        if name == "views":
            return self.view_a.shape[0]
        return int((self.labels >= 0).sum())


Compute = Callable[[EmbeddingInputs], Mapping[str, Tensor]]


@dataclass(frozen=True)
class EmbeddingMetric:
    """A registered metric: ``compute`` reads ``reads`` and returns the fields of ``tags``.

    ``tags`` maps each field to its log name (``{k}`` is replaced by ``top_k``); ``formula``
    says what it computes and from which inputs, for docs and TensorBoard descriptions.
    """

    name: str
    compute: Compute
    reads: tuple[Input, ...]
    tags: Mapping[str, str]
    formula: str

    def tag(self, field_name: str, top_k: int) -> str:
        return self.tags[field_name].format(k=top_k)


EMBEDDING_METRICS: dict[str, EmbeddingMetric] = {}


def register(
    name: str, *, reads: tuple[Input, ...], formula: str, tags: Mapping[str, str] | None = None
) -> Callable[[Compute], Compute]:
    """Decorator: add ``compute`` to ``EMBEDDING_METRICS`` under ``name`` (fields: ``tags`` keys,
    default one field named ``name``). Metrics run in registration order."""
    unknown = set(reads) - set(INPUTS)
    if unknown or not reads:
        raise ValueError(f"register({name!r}): reads must be a non-empty subset of {INPUTS}, got {reads!r}")
    if name in EMBEDDING_METRICS:
        raise ValueError(f"register({name!r}): an embedding metric of that name is already registered")

    def decorator(compute: Compute) -> Compute:
        EMBEDDING_METRICS[name] = EmbeddingMetric(name, compute, tuple(reads), dict(tags or {name: name}), formula)
        return compute

    return decorator


@dataclass
class EmbeddingReport:
    """Every field of every registered metric (``fields[name]``: a tensor, NaN if not computed).

    ``nonfinite`` of ``total`` embeddings had a non-finite entry and were left out of the
    metrics (see ``drop_nonfinite``).
    """

    fields: dict[str, Tensor]
    top_k: int
    nonfinite: int = 0
    total: int = 0
    metrics: tuple[EmbeddingMetric, ...] = field(default_factory=tuple)

    def __getitem__(self, name: str) -> Tensor:
        return self.fields[name]

    def value(self, name: str) -> float:
        """The scalar of field ``name``: the value, or the mean of a per-sample field (NaN if empty)."""
        tensor = self.fields[name]
        return float(tensor.float().mean()) if tensor.numel() else math.nan

    def scalars(self) -> dict[str, float]:
        """``{tag: value}`` of every field whose value is defined (NaN fields are left out)."""
        found = {}
        for metric in self.metrics:
            for name in metric.tags:
                value = self.value(name)
                if not math.isnan(value):
                    found[metric.tag(name, self.top_k)] = value
        return found


def drop_nonfinite(inputs: EmbeddingInputs) -> tuple[EmbeddingInputs, int, int]:
    """``(inputs without non-finite rows, how many embeddings were non-finite, how many in all)``.

    A ``clean`` row goes with its label; a sample of ``views`` goes when either view is
    non-finite. Counts are of embedding vectors: N clean rows plus 2M view rows, except that a
    ``clean`` that *is* ``view_a`` (the same tensor: clean inputs taken from the first view)
    is counted once, as the views.
    """
    clean_ok = torch.isfinite(inputs.clean).all(dim=1)
    view_a_ok, view_b_ok = torch.isfinite(inputs.view_a).all(dim=1), torch.isfinite(inputs.view_b).all(dim=1)
    total = 2 * inputs.view_a.shape[0]
    bad = total - int(view_a_ok.sum()) - int(view_b_ok.sum())
    if inputs.clean is not inputs.view_a:
        total += inputs.clean.shape[0]
        bad += inputs.clean.shape[0] - int(clean_ok.sum())
    if bad == 0:
        return inputs, 0, total
    pair_ok = view_a_ok & view_b_ok
    kept = replace(
        inputs,
        clean=inputs.clean[clean_ok],
        labels=inputs.labels[clean_ok],
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
    if names is None:
        metrics = tuple(EMBEDDING_METRICS.values())
    else:
        missing = [n for n in names if n not in EMBEDDING_METRICS]
        if missing:
            raise ValueError(f"unknown embedding metric(s) {missing}; registered: {sorted(EMBEDDING_METRICS)}")
        metrics = tuple(EMBEDDING_METRICS[n] for n in names)
    fields: dict[str, Tensor] = {}
    for metric in metrics:
        runnable = all(inputs.rows(name) >= (1 if name == "labels" else 2) for name in metric.reads)
        values = dict(metric.compute(inputs)) if runnable else {}
        if runnable and set(values) != set(metric.tags):
            raise ValueError(f"embedding metric {metric.name!r} returned {sorted(values)}, declared {sorted(metric.tags)}")
        for name in metric.tags:
            fields[name] = values.get(name, torch.tensor(math.nan))
    return EmbeddingReport(fields, inputs.top_k, nonfinite, total, metrics)


# ------------------------------------------------------------------------ the registered metrics
@register("alignment", reads=("views",), formula="mean_i ||za_i − zb_i||² over the two augmented views")
def _alignment(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"alignment": alignment(x.view_a, x.view_b)}


@register("uniformity", reads=("clean",), formula="−log mean_{i<j} exp(−2 ||z_i − z_j||²) over the clean input")
def _uniformity(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"uniformity": uniformity(x.clean)}


@register("tolerance", reads=("clean", "labels"), formula="mean z_i·z_j over same-label pairs i ≠ j of the clean input")
def _tolerance(x: EmbeddingInputs) -> dict[str, Tensor]:
    labelled = x.labels >= 0
    return {"tolerance": tolerance(x.clean[labelled], x.labels[labelled])}


@register(
    "positive_vs_topk_negatives",
    reads=("views",),
    formula="s_ii = za_i·zb_i and the top-k za_i·zb_j (j ≠ i) of the two augmented views",
    tags={"pos_sim": "pos_sim", "neg_sim": "top{k}_neg_sim"},
)
def _positive_vs_negatives(x: EmbeddingInputs) -> dict[str, Tensor]:
    sims = positive_and_topk_negatives(x.view_a, x.view_b, k=min(x.top_k, x.view_a.shape[0] - 1))
    return {"pos_sim": sims.positive, "neg_sim": sims.negatives}


@register("effective_rank", reads=("clean",), formula="exp(entropy of σ/Σσ), σ the singular values of the clean input (RankMe)")
def _effective_rank(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"effective_rank": effective_rank(x.clean)}
