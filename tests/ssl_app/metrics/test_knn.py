"""The kNN vote at several k from one search, and its per-class counts and long-tail groups against a reference."""

from __future__ import annotations

import math

import pytest
import torch

from ssl_app.metrics import WeightedKNNAccuracy, group_accuracies, weighted_knn_predict
from ssl_app.metrics.knn import weighted_knn_votes
from ssl_app.metrics.long_tail import named_groups
from tests.callbacks import ddp_worker
from tests.callbacks.test_knn import loop_predict


def at_similarity(similarities: list[float], first_angle: float = 0.0) -> torch.Tensor:
    """Unit rows [n, 3] whose cosine similarity to the query (1, 0, 0) is ``similarities[i]`` (each at its own angle)."""
    rows = []
    for i, s in enumerate(similarities):
        rest, angle = math.sqrt(1.0 - s * s), first_angle + 0.1 * i
        rows.append([s, rest * math.cos(angle), rest * math.sin(angle)])
    return torch.tensor(rows)


def test_a_five_image_class_wins_the_tail_k_vote_and_loses_at_k_200():
    """Class 1 has 5 bank rows at similarity 0.90, class 0 has 300 at 0.85. With σ = 0.07 each
    class-1 vote weighs exp(0.05/0.07) ≈ 2.04 class-0 votes: 5 × 2.04 < 195 at k = 200, but
    5 × 2.04 > 5 at k = 10 (5 rows of each class)."""
    bank = torch.cat([at_similarity([0.90] * 5), at_similarity([0.85] * 300, first_angle=1.0)])
    bank_labels = torch.tensor([1] * 5 + [0] * 300)
    query, label = torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([1])
    assert 5 * math.exp(0.05 / 0.07) < 195 and 5 * math.exp(0.05 / 0.07) > 5
    assert weighted_knn_predict(query, bank, bank_labels, 2, k=200).tolist() == [0]
    assert weighted_knn_predict(query, bank, bank_labels, 2, k=10).tolist() == [1]
    metric = WeightedKNNAccuracy(2, k=200, tail_k=10)
    metric.update(query, label, bank, bank_labels)
    correct, total = metric.per_class.compute()
    assert float(metric.compute()) == 0.0 and correct.tolist() == [0, 1] and total.tolist() == [0, 1]


def test_the_votes_of_several_k_from_one_search_equal_each_k_alone():
    """Catches a vote that reads rows other than its own top k (an unsorted top-max search)."""
    queries, _, bank, bank_labels = ddp_worker.knn_data()
    votes = weighted_knn_votes(queries, bank, bank_labels, 4, (50, 7, 1), 0.1, chunk_size=5)
    for k, predicted in zip((50, 7, 1), votes):
        assert torch.equal(predicted, loop_predict(queries, bank, bank_labels, 4, k, 0.1)), k
        assert torch.equal(predicted, weighted_knn_predict(queries, bank, bank_labels, 4, k, 0.1)), k


def test_per_class_counts_and_groups_equal_a_reference():
    """Two updates with unlabelled queries; the groups of training counts 150/60/10/5 against a plain loop."""
    queries, query_labels, bank, bank_labels = ddp_worker.knn_data()
    query_labels = query_labels.clone()
    query_labels[:4] = -1
    metric = WeightedKNNAccuracy(4, k=20, temperature=0.1, tail_k=3)
    metric.update(queries[:15], query_labels[:15], bank, bank_labels)
    metric.update(queries[15:], query_labels[15:], bank, bank_labels)
    predicted = loop_predict(queries, bank, bank_labels, 4, 3, 0.1)
    hits = {c: [int(p == c) for p, y in zip(predicted, query_labels) if y == c] for c in range(4)}
    correct, total = metric.per_class.compute()
    assert correct.tolist() == [sum(h) for h in hits.values()] and total.tolist() == [len(h) for h in hits.values()]
    groups = named_groups([150, 60, 10, 5], 100, 20)  # many {0}, medium {1}, few {2, 3}
    expected = {name: sum(sum(hits[c]) / len(hits[c]) for c in classes) / len(classes) for name, classes in groups.items()}
    values = group_accuracies(correct, total, groups)
    assert {name: values[name] for name in groups} == pytest.approx(expected, abs=1e-12)
    # knn_acc keeps its own k
    at_k = loop_predict(queries, bank, bank_labels, 4, 20, 0.1)[4:]
    assert float(metric.compute()) == pytest.approx(float((at_k == query_labels[4:]).double().mean()))


def test_bad_tail_k_is_named():
    with pytest.raises(ValueError, match="tail_k must be an int >= 1, got 0"):
        WeightedKNNAccuracy(4, tail_k=0)
