"""What the 2-process tests run on each rank (gloo): the gather/dedupe path and the kNN Metric.

It lives in an importable module because ``torch.multiprocessing.spawn`` imports the worker in
each child process.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from callbacks import embedding_report
from callbacks.gather import SampleBuffer
from ssl_app.metrics import WeightedKNNAccuracy

WORLD = 2
N = 45  # odd: the DistributedSampler pads rank 1 with a repeat of sample 0
DIM = 8
BATCH = 8
MAX_SAMPLES = 30
NUM_CLASSES = 4


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


def worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        local = _collect(rank, None)
        gathered = local.gather()
        report = embedding_report(gathered.view_features(0), gathered.view_features(1), gathered.labels)
        subset = _collect(rank, MAX_SAMPLES).gather()
        lonely = _collect(rank, 1, skip_adds=rank == 1).gather()  # rank 1 holds no rows at all

        queries, query_labels, bank, bank_labels = knn_data()
        metric = WeightedKNNAccuracy(NUM_CLASSES, k=7, temperature=0.1)
        mine = torch.arange(rank, len(queries), WORLD)  # disjoint query shards
        metric.update(queries[mine], query_labels[mine], bank, bank_labels)
        local_counts = (int(metric.correct), int(metric.total))
        accuracy = metric.compute()  # synchronised
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
            },
            f"{out_dir}/rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()
