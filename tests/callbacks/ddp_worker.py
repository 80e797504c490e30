"""What the 2-process tests run on each rank (gloo): the gather/dedupe path, the kNN Metric, and
EmbeddingMetrics' own passes (augmented views and clean embeddings) of a tiny model.

It lives in an importable module because ``torch.multiprocessing.spawn`` imports the worker in
each child process.
"""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import torch
from torch.utils.data import DistributedSampler

from callbacks import EmbeddingMetrics, embedding_report
from callbacks.embedding_pass import embed_split
from callbacks.gather import SampleBuffer
from ssl_app.metrics import WeightedKNNAccuracy, effective_rank
from tests.callbacks.helpers import tiny_data, tiny_model
from tests.ranks import gloo_rank

WORLD = 2
N = 45  # odd: the DistributedSampler pads rank 1 with a repeat of sample 0
DIM = 8
BATCH = 8
MAX_SAMPLES = 30
NUM_CLASSES = 4
TAIL_K = 3  # the kNN metric's per-class vote


def views_and_labels() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two views [N, DIM] and labels [N] of N samples, a fixed function of the sample index."""
    g = torch.Generator().manual_seed(0)
    za = torch.randn(N, DIM, generator=g)
    zb = za + 0.3 * torch.randn(N, DIM, generator=g)
    return za, zb, torch.arange(N) % NUM_CLASSES


def knn_data() -> tuple[torch.Tensor, ...]:
    """Queries [37, DIM] with labels, and a bank [60, DIM] with labels."""
    g = torch.Generator().manual_seed(1)
    centres = torch.randn(NUM_CLASSES, DIM, generator=g)
    bank_labels = torch.randint(0, NUM_CLASSES, (60,), generator=g)
    query_labels = torch.randint(0, NUM_CLASSES, (37,), generator=g)
    bank = centres[bank_labels] + torch.randn(60, DIM, generator=g)
    queries = centres[query_labels] + torch.randn(37, DIM, generator=g)
    return queries, query_labels, bank, bank_labels


def _collect(rank: int, max_samples: int | None, skip_adds: bool = False) -> SampleBuffer:
    """Feed this rank's DistributedSampler batches (padded, as Lightning's) into a buffer."""
    za, zb, labels = views_and_labels()
    order = list(DistributedSampler(range(N), num_replicas=WORLD, rank=rank, shuffle=False))
    buffer = SampleBuffer(max_samples)
    if skip_adds:
        return buffer
    for start in range(0, len(order), BATCH):
        idx = torch.tensor(order[start : start + BATCH])
        buffer.add(idx, labels[idx], (za[idx], zb[idx]))
    return buffer


CALLBACK_MAX_SAMPLES = 41  # of the 45 validation samples: the shards stop at different batches


def stub_trainer(data, rank: int, world_size: int) -> SimpleNamespace:
    """What ``embed_split`` and ``EmbeddingMetrics.measure`` read of a Trainer."""
    return SimpleNamespace(
        datamodule=data, global_rank=rank, world_size=world_size, precision_plugin=SimpleNamespace(forward_context=nullcontext)
    )


def callback_report(rank: int, world_size: int, uniformity_inputs: str, eval_on: str = "auto"):
    """EmbeddingMetrics(split="val")'s report of a tiny model, each rank embedding its own shard
    (``eval_on: auto``: the clean images from the device, the CPU here)."""
    data, model = tiny_data(eval_on=eval_on), tiny_model()
    trainer = stub_trainer(data, rank, world_size)
    callback = EmbeddingMetrics(
        split="val",
        max_samples=CALLBACK_MAX_SAMPLES,
        uniformity_inputs=uniformity_inputs,
        negatives_from="train" if uniformity_inputs == "clean" else "views",
    )
    views = embed_split(trainer, model, "val", views=2, augment=True, max_samples=CALLBACK_MAX_SAMPLES).gather()
    return callback.measure(trainer, model, "val", views)


def worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    with gloo_rank(rank, WORLD, init_file):
        local = _collect(rank, None)
        gathered = local.gather()
        report = embedding_report(gathered.view_features(0), gathered.view_features(1), gathered.labels)
        subset = _collect(rank, MAX_SAMPLES).gather()
        lonely = _collect(rank, 1, skip_adds=rank == 1).gather()  # rank 1 holds no rows at all

        queries, query_labels, bank, bank_labels = knn_data()
        metric = WeightedKNNAccuracy(NUM_CLASSES, k=7, temperature=0.1, tail_k=TAIL_K)
        mine = torch.arange(rank, len(queries), WORLD)  # disjoint query shards
        metric.update(queries[mine], query_labels[mine], bank, bank_labels)
        local_counts = (int(metric.correct), int(metric.total))
        local_class_total = metric.per_class.total.tolist()
        accuracy = metric.compute()  # synchronised
        class_counts = [t.tolist() for t in metric.per_class.compute()]  # synchronised
        za, _, _ = views_and_labels()
        clean = callback_report(rank, WORLD, "clean")
        augmented = callback_report(rank, WORLD, "augmented")
        torch.save(
            {
                "local_rows": len(local.local()),
                "indices": gathered.indices,
                "labels": gathered.labels,
                "features": gathered.features,
                "report": report,
                "subset_indices": subset.indices,
                "lonely_indices": lonely.indices,
                "lonely_shape": tuple(lonely.features.shape),
                "knn_local_counts": local_counts,
                "knn_accuracy": accuracy,
                "knn_local_class_total": local_class_total,
                "knn_class_counts": class_counts,
                "effective_rank": effective_rank(za),
                "clean_scalars": clean.scalars(),
                "negative_histogram": clean.negative_histogram.summary(),
                "augmented_scalars": augmented.scalars(),
            },
            f"{out_dir}/rank{rank}.pt",
        )
