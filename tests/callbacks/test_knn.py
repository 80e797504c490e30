"""The weighted kNN Metric against a plain loop, its DDP sums, and the KNNMonitor callback."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.trainer.states import TrainerFn

from callbacks import KNNMonitor
from callbacks.embedding_pass import evaluation_mode
from ssl_app.errors import ConfigError
from ssl_app.metrics import WeightedKNNAccuracy, weighted_knn_predict
from tests.callbacks import ddp_worker, long_tail_worker
from tests.callbacks.conftest import KNN_K
from tests.callbacks.helpers import EPOCHS, RecordingLogger, embed_views, events, tiny_data, tiny_model, tiny_trainer


def loop_predict(queries, bank, bank_labels, num_classes, k, temperature):
    """Wu et al.'s vote, one query at a time, straight from the definition."""
    predictions = []
    for q in queries:
        sims = [float(F.cosine_similarity(q, b, dim=0)) for b in bank]
        nearest = sorted(range(len(bank)), key=lambda j: sims[j], reverse=True)[:k]
        scores = [0.0] * num_classes
        for j in nearest:
            scores[int(bank_labels[j])] += torch.tensor(sims[j] / temperature, dtype=torch.float64).exp().item()
        predictions.append(max(range(num_classes), key=lambda c: scores[c]))
    return torch.tensor(predictions)


@pytest.mark.parametrize("k,temperature,chunk", [(1, 0.07, None), (5, 0.07, 3), (7, 0.5, 64), (50, 0.07, 4), (200, 0.07, None)])
def test_predictions_equal_the_loop(k, temperature, chunk):
    queries, _, bank, bank_labels = ddp_worker.knn_data()
    expected = loop_predict(queries, bank, bank_labels, ddp_worker.NUM_CLASSES, k, temperature)
    ours = weighted_knn_predict(queries, bank, bank_labels, ddp_worker.NUM_CLASSES, k, temperature, chunk_size=chunk)
    assert torch.equal(ours, expected)


def test_small_temperature_does_not_overflow():
    queries, _, bank, bank_labels = ddp_worker.knn_data()
    ours = weighted_knn_predict(queries, bank, bank_labels, 4, k=10, temperature=1e-3)
    nearest = F.normalize(queries, dim=1) @ F.normalize(bank, dim=1).T
    assert torch.equal(ours, bank_labels[nearest.argmax(dim=1)])  # σ → 0: the nearest row decides


def test_metric_accumulates_and_ignores_unlabelled_rows():
    queries, query_labels, bank, bank_labels = ddp_worker.knn_data()
    metric = WeightedKNNAccuracy(4, k=7, temperature=0.1)
    assert torch.isnan(metric.compute())
    metric.update(queries[:20], query_labels[:20], bank, bank_labels)
    masked = query_labels[20:].clone()
    masked[:5] = -1
    bank_labels_masked = torch.cat([bank_labels, torch.full((3,), -1)])
    metric.update(queries[20:], masked, torch.cat([bank, torch.randn(3, bank.shape[1])]), bank_labels_masked)
    predicted = loop_predict(queries, bank, bank_labels, 4, 7, 0.1)
    counted = torch.cat([torch.arange(20), torch.arange(25, 37)])
    assert int(metric.total) == len(counted)
    assert int(metric.correct) == int((predicted[counted] == query_labels[counted]).sum())


def test_two_ranks_sum_their_counts(ddp_results):
    queries, query_labels, bank, bank_labels = ddp_worker.knn_data()
    single = WeightedKNNAccuracy(4, k=7, temperature=0.1)
    single.update(queries, query_labels, bank, bank_labels)
    local = [r["knn_local_counts"] for r in ddp_results]
    assert sum(total for _, total in local) == len(queries) and local[0] != local[1]
    assert sum(correct for correct, _ in local) == int(single.correct)
    for result in ddp_results:
        assert float(result["knn_accuracy"]) == pytest.approx(float(single.compute()))


def test_two_ranks_sum_their_per_class_counts(ddp_results):
    """The tail_k vote's per-class counts (the kNN long-tail groups) of 2 query shards equal one process's."""
    queries, query_labels, bank, bank_labels = ddp_worker.knn_data()
    single = WeightedKNNAccuracy(4, k=7, temperature=0.1, tail_k=ddp_worker.TAIL_K)
    single.update(queries, query_labels, bank, bank_labels)
    expected = [t.tolist() for t in single.per_class.compute()]
    assert ddp_results[0]["knn_local_class_total"] != expected[1]  # each rank counted a part
    assert ddp_results[0]["knn_class_counts"] == ddp_results[1]["knn_class_counts"] == expected


# --------------------------------------------------------------------------- the callback
def direct_knn_accuracy(model, data, split="val", k=KNN_K, features="projection", max_train=None):
    encode = model.embed if features == "projection" else (lambda x: F.normalize(model(x), dim=1))
    _, bank_labels, bank, _ = embed_views(SimpleNamespace(embed=encode, eval=model.eval), data.embedding_dataloader("train"))
    _, labels, queries, _ = embed_views(SimpleNamespace(embed=encode, eval=model.eval), data.embedding_dataloader(split))
    if max_train is not None:
        bank, bank_labels = bank[:max_train], bank_labels[:max_train]
    predicted = weighted_knn_predict(queries, bank, bank_labels, int(bank_labels.max()) + 1, k, 0.07)
    return float((predicted == labels).float().mean())


def test_knn_accuracy_is_logged_every_epoch_and_equals_a_direct_computation(tiny_run):
    _, model, data, log_dir = tiny_run
    logged = events(log_dir).Scalars("metrics/knn_acc")
    assert len(logged) == EPOCHS
    assert logged[-1].value == pytest.approx(direct_knn_accuracy(model, data), abs=1e-6)


def test_backbone_features_a_train_subset_and_the_test_split():
    model, data, logger = tiny_model(), tiny_data(), RecordingLogger()
    monitor = KNNMonitor(k=15, features="backbone", max_train_samples=50)
    tiny_trainer([monitor], logger=logger).test(model, data, verbose=False)
    expected = direct_knn_accuracy(model, data, "test", k=15, features="backbone", max_train=50)
    assert logger.values("metrics/knn_acc") == [pytest.approx(expected, abs=1e-6)]


def test_the_groups_come_from_the_tail_k_vote_and_an_empty_group_is_not_logged(caplog):
    """Training counts 40/20/10/5 (IF 8): at the default 100/20 thresholds no class is many-shot,
    so ``metrics/knn_many`` is not logged (said at setup); the others equal the per-class mean of
    a direct k = 3 vote, while ``metrics/knn_acc`` keeps k = 15."""
    data, model, logger = long_tail_worker.long_tailed_data(), tiny_model(), RecordingLogger()
    monitor = KNNMonitor(k=15, tail_k=3, features="backbone")
    with caplog.at_level(logging.INFO):
        tiny_trainer([monitor], logger=logger).test(model, data, verbose=False)
    assert "0 many-shot (>100), 2 medium-shot (20–100), 2 few-shot (<20); not logged (no class): metrics/knn_many" in caplog.text
    assert data.train_class_counts() == [40, 20, 10, 5]
    encode = SimpleNamespace(embed=lambda x: F.normalize(model(x), dim=1), eval=model.eval)
    _, bank_labels, bank, _ = embed_views(encode, data.embedding_dataloader("train"))
    _, labels, queries, _ = embed_views(encode, data.embedding_dataloader("test"))
    predicted = weighted_knn_predict(queries, bank, bank_labels, 4, 3, 0.07)
    per_class = [float((predicted[labels == c] == c).double().mean()) for c in range(4)]
    assert logger.values("metrics/knn_medium") == [
        pytest.approx((per_class[0] + per_class[1]) / 2, abs=1e-6)
    ]  # logged as float32
    assert logger.values("metrics/knn_few") == [pytest.approx((per_class[2] + per_class[3]) / 2, abs=1e-6)]  # logged as float32
    assert logger.values("metrics/knn_many") == []
    assert logger.values("metrics/knn_acc") == [pytest.approx(direct_knn_accuracy(model, data, "test", 15, "backbone"), abs=1e-6)]


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(tail_k=0), "KNNMonitor: tail_k must be an int >= 1"),
        (dict(few_shot_below=30, many_shot_above=10), r"KNNMonitor: few_shot_below \(30\) must be <= many_shot_above \(10\)"),
        (dict(many_shot_above=-1), "KNNMonitor: many_shot_above must be an int >= 0"),
    ],
)
def test_bad_group_options_are_named(options, message):
    with pytest.raises(ConfigError, match=message):
        KNNMonitor(**options)


def test_shot_groups_off_or_no_class_counts_log_no_group():
    monitor = KNNMonitor(shot_groups=False)
    monitor.setup(SimpleNamespace(datamodule=tiny_data()), tiny_model(), "fit")
    assert monitor.groups == {}
    bare = SimpleNamespace(embedding_dataloader=tiny_data().embedding_dataloader)  # no train_class_counts
    monitor = KNNMonitor()
    monitor.setup(SimpleNamespace(datamodule=bare), tiny_model(), "fit")
    assert monitor.groups == {}


@pytest.mark.parametrize("fn,expected", [("fit", [1, 3, 5]), ("validate", [0, 1, 2, 3, 4, 5])])
def test_every_n_epochs_counts_epochs_of_fit_only(fn, expected, monkeypatch):
    monitor, done = KNNMonitor(every_n_epochs=2), []
    monkeypatch.setattr(monitor, "evaluate", lambda trainer, module, split: done.append(trainer.current_epoch))
    for epoch in range(6):
        trainer = SimpleNamespace(sanity_checking=False, current_epoch=epoch, state=SimpleNamespace(fn=TrainerFn(fn)))
        monitor.on_validation_epoch_end(trainer, None)
    monitor.on_validation_epoch_end(SimpleNamespace(sanity_checking=True), None)
    assert done == expected


def test_a_datamodule_without_embedding_dataloader_is_a_clear_error():
    with pytest.raises(ConfigError, match="KNNMonitor needs a datamodule with embedding_dataloader"):
        KNNMonitor().setup(SimpleNamespace(datamodule=None), tiny_model(), "fit")
    with pytest.raises(ConfigError, match="got object"):
        KNNMonitor().setup(SimpleNamespace(datamodule=object()), tiny_model(), "fit")


def test_evaluation_mode_restores_each_submodule_and_disables_grad():
    model = tiny_model().train()
    model.projection_head.eval()  # e.g. a frozen part
    with evaluation_mode(model):
        assert not model.training and not torch.is_grad_enabled()
    assert model.training and model.backbone.training and not model.projection_head.training
