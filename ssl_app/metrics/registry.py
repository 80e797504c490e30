"""The embedding-metric registry: the ``@register`` decorator, the inputs a metric may read, and the lookup.

A metric family is one module of ``ssl_app/metrics/families/`` (one import line in its
``__init__``, whose order is the order metrics run, are listed and become report columns): a
pure function that reads some of the ``EmbeddingInputs`` of one evaluation and returns named
fields (0-d tensors, or per-sample tensors such as the positive similarities whose mean is the
scalar), registered with one decorator::

    @register("uniformity", reads=("clean",), formula="−log mean_{i<j} exp(−2||z_i − z_j||²)")
    def _uniformity(x: EmbeddingInputs) -> dict[str, Tensor]:
        return {"uniformity": uniformity(x.clean)}

Each field is logged as the scalar ``metrics/<tag>`` (its mean) and becomes a column of the
Table-1 report (``ssl_app.report.summary``) with its formula as the column's meaning. A tag
belongs to one field only: ``register`` refuses a field or tag that another metric, or a
callback beside the registry (``CALLBACK_TAGS``), already logs. ``ssl_app.metrics.evaluate``
runs the registered metrics. What the inputs are:

- ``clean``: one embedding per sample, [N, d], with ``labels`` [N]. By default (the callback's
  ``uniformity_inputs: clean``) the evaluation-transform embedding of each image, the quantity
  of Wang & Liu's Table 1; with ``augmented``, the first augmented view.
- ``views``: two augmented views per sample, ``view_a`` and ``view_b`` [M, d] (row i of both is
  sample i): what alignment and the positive similarity are defined on.
- ``labels``: the class labels of the ``clean`` rows (< 0: unlabelled).
- ``backbone``: the backbone features of the ``clean`` rows, unnormalised, [N, f] (from the same
  pass as ``clean``; absent, so its metrics are NaN, with ``uniformity_inputs: augmented``).
- ``train``: clean embeddings of the training split, [T, d], where the evaluation anchors look
  for their hardest negatives (the paper's memory-bank comparison; absent unless the callback's
  ``negatives_from: train``).
- ``multiview``: q ≥ 2 augmented views of each of n samples, [n, q, d], what LiDAR's LDA reads
  (absent unless the callback's ``lidar_views`` ≥ 2).

The metric functions are pure (no Lightning); under DDP pass the same gathered tensors on every
rank and the metric functions shard their own work.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from torch import Tensor

from ssl_app.errors import ConfigError
from ssl_app.metrics.histogram import SimilarityHistogram
from ssl_app.metrics.rank import Moments, gram_singular_values, moments

Input = Literal["clean", "views", "labels", "backbone", "train", "multiview"]
INPUTS: tuple[Input, ...] = ("clean", "views", "labels", "backbone", "train", "multiview")

#: Hardest negatives per anchor unless the callback's ``top_k`` says otherwise (Wang & Liu: 10).
DEFAULT_TOP_K = 10
#: The ``metrics/`` tags that callbacks log beside the registered metrics, and who logs them: no
#: registered field may take one.
CALLBACK_TAGS: Mapping[str, str] = {
    "nonfinite": "callbacks.EmbeddingMetrics (non-finite embeddings)",
    "collapsed": "callbacks.EmbeddingMetrics (collapse alarm)",
    "inputs": "callbacks.EmbeddingMetrics (text: each tag's inputs)",
    "knn_acc": "callbacks.KNNMonitor",
    "knn_many": "callbacks.KNNMonitor (many-shot classes)",
    "knn_medium": "callbacks.KNNMonitor (medium-shot classes)",
    "knn_few": "callbacks.KNNMonitor (few-shot classes)",
}
#: A tag's only placeholder: ``{k}``, replaced by ``top_k``.
_TAG = re.compile(r"(?:[A-Za-z0-9_.-]|\{k\})+")


@dataclass(frozen=True)
class EmbeddingInputs:
    """What the metrics of one evaluation may read (every tensor gathered, the same on every rank).

    ``clean`` [N, d] with ``labels`` [N]; ``view_a``, ``view_b`` [M, d]; ``top_k``: hardest
    negatives per anchor for the metrics that need it; ``backbone`` [N, f]: the unnormalised
    backbone features of the ``clean`` rows (``None``: not available); ``train`` [T, d]: clean
    embeddings of the training split (``None``: not available); ``negative_histogram``: when
    given, filled with every negative similarity ``za_i·zb_j`` (j ≠ i) of the views, from the
    top-k search's own blocks (``None``: not computed); ``multiview`` [n, q, d]: q augmented views of
    n samples (``None``: not computed).
    """

    clean: Tensor
    labels: Tensor
    view_a: Tensor
    view_b: Tensor
    top_k: int = DEFAULT_TOP_K
    backbone: Tensor | None = None
    train: Tensor | None = None
    negative_histogram: SimilarityHistogram | None = None
    multiview: Tensor | None = None
    spectra: dict[str, Tensor] = field(default_factory=dict, init=False, repr=False, compare=False)
    sums: dict[str, Moments] = field(default_factory=dict, init=False, repr=False, compare=False)

    def moments(self, name: Literal["clean", "backbone"]) -> Moments:
        """The count, sum and Gram matrix of ``clean`` (its unit rows) or ``backbone`` (as given), computed
        once (``ssl_app.metrics.rank.moments``, a collective under DDP): the singular values and −W₂ read
        the same sums, so −W₂ costs no pass of its own."""
        if name not in self.sums:
            rows = self.clean if name == "clean" else self.backbone
            if rows is None:
                raise ValueError("EmbeddingInputs.moments: no backbone features")
            self.sums[name] = moments(rows, normalize=name == "clean")
        return self.sums[name]

    def singular_values(self, name: Literal["clean", "backbone"]) -> Tensor:
        """The singular values of ``clean`` (its unit rows) or ``backbone`` (as given), computed once
        (``ssl_app.metrics.rank.singular_values``, a collective under DDP): the effective ranks, the
        power-law exponents and the spectrum figure read the same σ, one Gram matrix and one
        eigen-decomposition per input and evaluation."""
        if name not in self.spectra:
            self.spectra[name] = gram_singular_values(self.moments(name).gram)
        return self.spectra[name]

    def rows(self, name: Input) -> int:
        """How many samples the input ``name`` holds (labels: how many are labelled)."""
        if name == "clean":
            return self.clean.shape[0]
        if name == "views":
            return self.view_a.shape[0]
        if name == "backbone":
            return 0 if self.backbone is None else self.backbone.shape[0]
        if name == "train":
            return 0 if self.train is None else self.train.shape[0]
        if name == "multiview":
            return 0 if self.multiview is None else self.multiview.shape[0]
        return int((self.labels >= 0).sum())


Compute = Callable[[EmbeddingInputs], Mapping[str, Tensor]]


@dataclass(frozen=True)
class EmbeddingMetric:
    """A registered metric: ``compute`` reads ``reads`` and returns the fields of ``tags``.

    ``tags`` maps each field to its log name (``{k}`` is replaced by ``top_k``); ``formulas``
    says for each field what it computes and from which inputs (``{k}`` again ``top_k``), for the
    docs, TensorBoard's ``metrics/inputs`` text and the report's column meanings.
    """

    name: str
    compute: Compute
    reads: tuple[Input, ...]
    tags: Mapping[str, str]
    formulas: Mapping[str, str]

    def tag(self, field_name: str, top_k: int) -> str:
        return self.tags[field_name].format(k=top_k)

    def formula(self, field_name: str, top_k: int | None = None) -> str:
        """What field ``field_name`` computes; ``{k}`` in it is ``top_k`` when given."""
        text = self.formulas[field_name]
        return text if top_k is None else text.replace("{k}", str(top_k))


EMBEDDING_METRICS: dict[str, EmbeddingMetric] = {}


def register(
    name: str,
    *,
    reads: tuple[Input, ...],
    formula: str | Mapping[str, str],
    tags: Mapping[str, str] | None = None,
) -> Callable[[Compute], Compute]:
    """Decorator: add ``compute`` to ``EMBEDDING_METRICS`` under ``name``. Metrics run in
    registration order.

    ``tags`` maps each field ``compute`` returns to its log tag (default: one field and tag named
    ``name``); ``formula`` is one text for every field, or one per field. Raises ``ConfigError``
    for unknown inputs, a name already registered, a tag with a placeholder other than ``{k}``,
    and a field or tag already taken: by another field of this metric, by a registered metric
    (naming both metrics and the field) or by a callback (``CALLBACK_TAGS``).
    """
    unknown = set(reads) - set(INPUTS)
    if unknown or not reads:
        raise ConfigError(f"register({name!r}): reads must be a non-empty subset of {INPUTS}, got {reads!r}")
    if name in EMBEDDING_METRICS:
        raise ConfigError(f"register({name!r}): an embedding metric of that name is already registered")
    tags = dict(tags or {name: name})
    for field_name, tag in tags.items():
        if not _TAG.fullmatch(tag):
            raise ConfigError(
                f"register({name!r}): field {field_name!r} has tag {tag!r}; a tag holds letters, digits, '_', '.', '-' "
                "and at most the placeholder {k} (top_k)"
            )
    formulas = {field_name: formula for field_name in tags} if isinstance(formula, str) else dict(formula)
    if set(formulas) != set(tags):
        raise ConfigError(f"register({name!r}): formula must give one text per field {sorted(tags)}, got {sorted(formulas)}")
    _check_tags_are_free(name, tags)

    def decorator(compute: Compute) -> Compute:
        EMBEDDING_METRICS[name] = EmbeddingMetric(name, compute, tuple(reads), tags, formulas)
        return compute

    return decorator


def _check_tags_are_free(name: str, tags: Mapping[str, str]) -> None:
    """Raise ``ConfigError`` when a field or tag of the metric ``name`` is already taken."""
    taken = [(other.name, field_name, tag) for other in EMBEDDING_METRICS.values() for field_name, tag in other.tags.items()]
    for field_name, tag in tags.items():
        for callback_tag, owner in CALLBACK_TAGS.items():
            if _same_tag(tag, callback_tag):
                raise ConfigError(
                    f"register({name!r}): field {field_name!r} would log metrics/{tag}, which {owner} already logs; "
                    "choose another tag"
                )
        for other, other_field, other_tag in taken:
            if field_name == other_field or _same_tag(tag, other_tag):
                raise ConfigError(
                    f"register({name!r}): field {field_name!r} (metrics/{tag}) is already taken by field {other_field!r} "
                    f"(metrics/{other_tag}) of the registered metric {other!r}; choose another field name and tag"
                )
        clash = [other for other, other_tag in tags.items() if other != field_name and _same_tag(tag, other_tag)]
        if clash:
            raise ConfigError(f"register({name!r}): fields {field_name!r} and {clash[0]!r} share the tag metrics/{tag}")


def _same_tag(a: str, b: str) -> bool:
    """Whether the tag templates ``a`` and ``b`` can name the same tag for some ``top_k``
    (``top{k}_neg_sim`` and ``top5_neg_sim`` do, at k = 5)."""

    def pattern(tag: str) -> str:
        return r"\d+".join(re.escape(part) for part in tag.split("{k}"))

    return bool(re.fullmatch(pattern(a), b.replace("{k}", "1")) or re.fullmatch(pattern(b), a.replace("{k}", "1")))


def registered_fields() -> list[tuple[EmbeddingMetric, str]]:
    """``(metric, field)`` of every registered field, in registration order: each is logged as
    the scalar ``metrics/<metric.tag(field, top_k)>``."""
    return [(metric, field_name) for metric in EMBEDDING_METRICS.values() for field_name in metric.tags]


def registered_metrics(names: tuple[str, ...] | None = None) -> tuple[EmbeddingMetric, ...]:
    """The registered metrics named ``names`` (default: all), in registration order for all.

    Raises ``ConfigError`` naming the unknown names and the registered ones.
    """
    if names is None:
        return tuple(EMBEDDING_METRICS.values())
    missing = [name for name in names if name not in EMBEDDING_METRICS]
    if missing:
        raise ConfigError(f"unknown embedding metric(s) {missing}; registered: {sorted(EMBEDDING_METRICS)}")
    return tuple(EMBEDDING_METRICS[name] for name in names)
