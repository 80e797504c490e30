"""Weighted k-nearest-neighbour classification of embeddings (Wu et al. 2018), the kNN monitor.

For a query q and a labelled bank {(b_j, y_j)} (rows L2-normalised, s_j = q·b_j):

    N_k(q)   = the k bank rows with the largest s_j
    score_c  = Σ_{j ∈ N_k(q), y_j = c} exp(s_j / σ)
    ŷ(q)     = argmax_c score_c

with k = 200 and σ = 0.07 in Wu et al. and in Wang & Liu. Accuracy = mean [ŷ(q) = y(q)].

Several k from one search (``weighted_knn_votes``): the top-max(k) rows are found once and the
vote of each k reads its first k of them (the top-k rows, in order). A small k is what lets a rare
class win: with 5 training images a class holds at most 5 of the 200 votes, so at k = 200 it
wins only where its rows are far closer than the 195 others; ``WeightedKNNAccuracy(tail_k=10)``
also counts the per-class hits of the k = 10 vote (Kukleva et al.'s kNN@10) for the long-tail
groups (``ssl_app.metrics.long_tail``).

Queries are processed in blocks of rows, so memory is O(block × M) for M bank rows, never
O(N × M). ``WeightedKNNAccuracy`` keeps ``correct``/``total`` as summed torchmetrics states:
under DDP each rank classifies its own queries against the full (gathered) bank and
``compute()`` sums the counts over ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import Metric

from ssl_app.checks import PositiveInt, is_a
from ssl_app.metrics.long_tail import ClassAccuracy

# Default block budget: rows × M similarities per block, 2^24 floats = 64 MB.
_BLOCK_ELEMENTS = 1 << 24
#: Wu et al.'s neighbours and vote temperature σ, the defaults here and of ``callbacks.KNNMonitor``
#: (the report assumes them for a run whose saved config does not say).
DEFAULT_K = 200
DEFAULT_TEMPERATURE = 0.07
#: Neighbours of the per-class vote behind the long-tail groups: Kukleva et al.'s kNN@10 (their
#: evaluation code, Annusha/temperature_schedules, reports kNN@1 and kNN@10).
DEFAULT_TAIL_K = 10


def weighted_knn_predict(
    queries: Tensor,
    bank: Tensor,
    bank_labels: Tensor,
    num_classes: int,
    k: int = DEFAULT_K,
    temperature: float = DEFAULT_TEMPERATURE,
    *,
    chunk_size: Optional[int] = None,
) -> Tensor:
    """Predicted class [N] of each query by the weighted vote of its k nearest bank rows.

    Rows of ``queries`` [N, d] and ``bank`` [M, d] are L2-normalised here; ``bank_labels`` [M]
    must lie in ``[0, num_classes)``. With fewer than k bank rows, all of them vote. The
    weights of a row are computed as ``exp((s_j − max_j s_j)/σ)``: the common factor leaves
    the argmax unchanged and keeps small σ from overflowing.

    Args:
        chunk_size: query rows per block (default: as many as fit 2^24 similarities).
    """
    return weighted_knn_votes(queries, bank, bank_labels, num_classes, (k,), temperature, chunk_size=chunk_size)[0]


@torch.no_grad()
def weighted_knn_votes(
    queries: Tensor,
    bank: Tensor,
    bank_labels: Tensor,
    num_classes: int,
    ks: Sequence[int],
    temperature: float = DEFAULT_TEMPERATURE,
    *,
    chunk_size: Optional[int] = None,
) -> list[Tensor]:
    """``weighted_knn_predict`` for each k of ``ks`` (one [N] tensor each), from one top-max(ks) search."""
    for k in ks:
        _check_inputs(queries, bank, bank_labels, num_classes, k, temperature)
    if not ks:
        raise ValueError("ks must name at least one k")
    if queries.shape[0] == 0:
        return [torch.empty(0, dtype=torch.long, device=queries.device) for _ in ks]
    with torch.autocast(queries.device.type, enabled=False):
        q = F.normalize(queries.detach().float(), dim=1)
        b = F.normalize(bank.detach().float(), dim=1).to(q.device)
        labels = bank_labels.to(q.device, torch.long)
        neighbours = [min(k, b.shape[0]) for k in ks]
        rows = chunk_size or max(1, _BLOCK_ELEMENTS // b.shape[0])
        predictions: list[list[Tensor]] = [[] for _ in ks]
        for start in range(0, q.shape[0], rows):
            sim = q[start : start + rows] @ b.T
            top_sim, top_idx = sim.topk(max(neighbours), dim=1)  # sorted: the first k are the top k
            del sim
            weights = ((top_sim - top_sim[:, :1]) / temperature).exp()
            voters = labels[top_idx]
            for found, k in zip(predictions, neighbours):
                scores = weights.new_zeros(top_sim.shape[0], num_classes)
                scores.scatter_add_(1, voters[:, :k], weights[:, :k])
                found.append(scores.argmax(dim=1))
        return [torch.cat(found) for found in predictions]


class WeightedKNNAccuracy(Metric):
    """Accuracy of the weighted kNN classifier (see the module docstring) as a torchmetrics Metric.

    ``update(queries, query_labels, bank, bank_labels)`` classifies the queries against the bank
    and adds to the ``correct`` and ``total`` counts (``dist_reduce_fx="sum"``); ``compute()``
    returns ``correct / total`` summed over every rank (NaN before any labelled query). Queries
    and bank rows labelled < 0 (unlabelled) are ignored.

    With ``tail_k``, the same search also takes the vote of the ``tail_k`` nearest rows, and
    ``per_class`` (a ``ClassAccuracy``, its own summed states: call its ``compute()`` on every
    rank) counts that vote's hits per class, for the many/medium/few-shot groups.

    Args:
        num_classes: number of classes; labels are ``0 .. num_classes − 1``.
        k: neighbours that vote (Wu et al.: 200).
        temperature: σ of the vote weights ``exp(s/σ)`` (Wu et al.: 0.07).
        chunk_size: query rows per similarity block (default: 2^24 similarities per block).
        tail_k: neighbours of the per-class vote (``None``: no per-class counts).
        kwargs: passed to ``torchmetrics.Metric``.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    correct: Tensor
    total: Tensor

    def __init__(
        self,
        num_classes: int,
        k: int = DEFAULT_K,
        temperature: float = DEFAULT_TEMPERATURE,
        chunk_size: Optional[int] = None,
        tail_k: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        _check_options(num_classes, k, temperature)
        if tail_k is not None:
            _check_options(num_classes, tail_k, temperature, name="tail_k")
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
            raise ValueError(f"chunk_size must be an int >= 1 or None, got {chunk_size!r}")
        self.num_classes = num_classes
        self.k = k
        self.temperature = temperature
        self.chunk_size = chunk_size
        self.tail_k = tail_k
        self.add_state("correct", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.per_class = ClassAccuracy(num_classes) if tail_k is not None else None

    def update(self, queries: Tensor, query_labels: Tensor, bank: Tensor, bank_labels: Tensor) -> None:
        if query_labels.dim() != 1 or query_labels.shape[0] != queries.shape[0]:
            raise ValueError(f"query_labels must have shape [{queries.shape[0]}], got {tuple(query_labels.shape)}")
        query_labels = query_labels.to(queries.device)
        bank_labels = bank_labels.to(bank.device)
        keep_bank, keep_query = bank_labels >= 0, query_labels >= 0
        bank, bank_labels = bank[keep_bank], bank_labels[keep_bank]
        queries, query_labels = queries[keep_query], query_labels[keep_query]
        if bank.shape[0] == 0:
            raise ValueError("the kNN bank has no labelled rows (all labels < 0)")
        ks = (self.k,) if self.per_class is None else (self.k, self.tail_k)
        predicted = weighted_knn_votes(
            queries, bank, bank_labels, self.num_classes, ks, self.temperature, chunk_size=self.chunk_size
        )
        self.correct += (predicted[0] == query_labels).sum().to(self.correct.device)
        self.total += query_labels.shape[0]
        if self.per_class is not None:
            self.per_class.update(predicted[1], query_labels)

    def reset(self) -> None:
        super().reset()
        if self.per_class is not None:
            self.per_class.reset()

    def compute(self) -> Tensor:
        if self.total == 0:
            return torch.tensor(float("nan"), device=self.total.device)
        return self.correct.float() / self.total


def _check_options(num_classes: int, k: int, temperature: float, name: str = "k") -> None:
    for option, value in (("num_classes", num_classes), (name, k)):
        if not is_a(PositiveInt, value):  # a plain ValueError: the callback that passed it on names itself
            raise ValueError(f"{option} must be an int >= 1, got {value!r}")
    if not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


def _check_inputs(queries: Tensor, bank: Tensor, bank_labels: Tensor, num_classes: int, k: int, temperature: float) -> None:
    _check_options(num_classes, k, temperature)
    if queries.dim() != 2 or bank.dim() != 2 or queries.shape[1] != bank.shape[1]:
        raise ValueError(f"queries [N, d] and bank [M, d] must share d, got {tuple(queries.shape)} and {tuple(bank.shape)}")
    if bank.shape[0] == 0:
        raise ValueError("the kNN bank is empty")
    if bank_labels.shape != (bank.shape[0],):
        raise ValueError(f"bank_labels must have shape [{bank.shape[0]}], got {tuple(bank_labels.shape)}")
    if bank_labels.min() < 0 or bank_labels.max() >= num_classes:
        raise ValueError(f"bank_labels must lie in [0, num_classes={num_classes})")
