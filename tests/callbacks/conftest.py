"""Runs shared by the callback tests: one tiny fit with both callbacks, one 2-process spawn."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from callbacks import EmbeddingMetrics, KNNMonitor
from tests.callbacks import ddp_worker
from tests.callbacks.helpers import LIDAR_SAMPLES, LIDAR_VIEWS, tensorboard, tiny_data, tiny_model, tiny_trainer

KNN_K = 20


@pytest.fixture(scope="package", autouse=True)
def one_thread():
    """One intra-op thread: on a busy 2-core machine, idle OpenMP workers made every op ~20x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="package")
def tiny_run(tmp_path_factory):
    """A 2-epoch SimCLR fit with EmbeddingMetrics (with the train-set negatives and LiDAR on 3 views of the
    first 40 val images, so every registered tag is logged) and KNNMonitor logging to TensorBoard."""
    logger = tensorboard(tmp_path_factory.mktemp("tiny_run"))
    data, model = tiny_data(), tiny_model()
    metrics = EmbeddingMetrics(negatives_from="train", lidar_views=LIDAR_VIEWS, lidar_samples=LIDAR_SAMPLES)
    trainer = tiny_trainer([metrics, KNNMonitor(k=KNN_K)], logger=logger)
    trainer.fit(model, data)
    return trainer, model, data, logger.log_dir


@pytest.fixture(scope="package")
def ddp_results(tmp_path_factory):
    """What every rank of ``ddp_worker.worker`` saved (2 gloo processes)."""
    tmp = tmp_path_factory.mktemp("callbacks_ddp")
    mp.spawn(ddp_worker.worker, args=(str(tmp / "init"), str(tmp)), nprocs=ddp_worker.WORLD, join=True)
    return [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(ddp_worker.WORLD)]
