"""No code that runs in a data worker touches CUDA, and workers start safely on a machine with a GPU
(issue 38 item 8: forked workers aborted with ``CUDA error: initialization error``).

Real DataLoaders of every datamodule kind (generated shapes, a CIFAR-shaped copy, an image folder),
every loader a run uses (training on each ``augment_on`` path, validation, the evaluation passes'
embedding and classification loaders), 2 workers each, with Lightning's worker seeding
(``seed_everything(workers=True)``, which the CLI turns on). In the workers CUDA looks available, so
code that asks takes its GPU path, and initialising it raises; any other CUDA call fails on this
machine anyway (no driver). The fork server path (the one a GPU machine takes) runs the same loaders.
"""

from __future__ import annotations

import multiprocessing.context
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torchvision.datasets.cifar as tv_cifar
from lightning.fabric.utilities.data import _auto_add_worker_init_fn
from PIL import Image
from torch.utils.data import get_worker_info

from datamodules import CIFAR10DataModule, ImageFolderDataModule
from datamodules.augment import ViewAugmentation
from datamodules.base import ContrastiveDataModule
from tests.datamodules.test_torchvision_sets import write_fake_cifar
from tests.helpers import tiny_data

WORKERS = 2


@pytest.fixture(autouse=True)
def cifar_copies_pass_the_md5_check(monkeypatch):
    """The tiny CIFAR copy is not the real files: only torchvision's md5 check of them is bypassed."""
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)


def shapes(tmp_path: Path, **options: Any) -> ContrastiveDataModule:
    return tiny_data(num_workers=WORKERS, **options)


def cifar(tmp_path: Path, **options: Any) -> ContrastiveDataModule:
    write_fake_cifar(tmp_path, per_batch=8)
    return CIFAR10DataModule(root=str(tmp_path), batch_size=8, num_workers=WORKERS, **options)


def image_folder(tmp_path: Path, **options: Any) -> ContrastiveDataModule:
    root = tmp_path / "images"
    for split in ("train", "val"):
        for k, name in enumerate(("cat", "dog")):
            (root / split / name).mkdir(parents=True)
            for i in range(8):  # of one size: augment_on device needs it
                Image.new("RGB", (20, 20), (40 * k + 10 * i, 100, 200)).save(root / split / name / f"{i}.png")
    return ImageFolderDataModule(str(root), batch_size=4, num_workers=WORKERS, augmentation=ViewAugmentation(crop_size=16),
                                 **options)  # fmt: skip


KINDS = [shapes, cifar, image_folder]


def every_loader(make: Callable[..., ContrastiveDataModule], tmp_path: Path) -> list[Any]:
    """The loaders a run of this kind uses: training on each ``augment_on`` path, validation, and the
    evaluation passes' (all three built before the first is iterated, as a run holds them)."""
    loaders = []
    for n, augment_on in enumerate(("workers", "workers_batched", "device")):
        data = make(tmp_path / augment_on, augment_on=augment_on, pin_memory=False)
        data.setup("fit")
        loaders.append(data.train_dataloader())
        if n == 0:
            loaders += [data.val_dataloader(), data.embedding_dataloader("train"), data.classification_dataloader("val")]
    for loader in loaders:
        _auto_add_worker_init_fn(loader, rank=0)  # what Lightning does to its loaders with seed_everything(workers=True)
    return loaders


@pytest.fixture
def cuda_forbidden_in_workers(monkeypatch):
    """In a data worker (forked: it inherits these), CUDA is available and initialising it raises."""
    available, initialise = torch.cuda.is_available, torch.cuda._lazy_init

    def is_available() -> bool:
        return get_worker_info() is not None or available()

    def lazy_init() -> None:
        if get_worker_info() is not None:
            raise AssertionError("a data worker initialised CUDA")
        initialise()

    monkeypatch.setattr(torch.cuda, "is_available", is_available)
    monkeypatch.setattr(torch.cuda, "_lazy_init", lazy_init)
    L.seed_everything(0, workers=True)


@pytest.mark.parametrize("make", KINDS, ids=lambda make: make.__name__)
def test_no_data_worker_touches_cuda(make, tmp_path, cuda_forbidden_in_workers):
    """Catches a worker's code asking for CUDA: a generator or tensor on the GPU when one is available, a
    decode or pin on the device, CUDA seeding that initialises it (the worker re-raises it here)."""
    for loader in every_loader(make, tmp_path):
        assert isinstance(loader.multiprocessing_context, multiprocessing.context.ForkContext)  # no GPU here
        assert len(list(zip(range(2), loader))) == min(2, len(loader))  # the workers' first batches
        assert not torch.cuda.is_initialized()


class AsksForCuda(torch.utils.data.Dataset):
    """A dataset whose items are made on the GPU when one is available: what the test must catch."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.zeros(2, device="cuda" if torch.cuda.is_available() else "cpu")


def test_the_guard_catches_a_worker_that_initialises_cuda(cuda_forbidden_in_workers):
    """The negative control: the harness above fails on a worker that uses CUDA."""
    from ssl_app.workers import loader_options

    loader = torch.utils.data.DataLoader(AsksForCuda(), batch_size=4, num_workers=WORKERS, **loader_options(WORKERS))
    with pytest.raises(AssertionError, match="a data worker initialised CUDA"):
        next(iter(loader))


@pytest.mark.slow
@pytest.mark.parametrize("make", KINDS, ids=lambda make: make.__name__)
def test_on_a_gpu_machine_every_loader_starts_its_workers_from_the_fork_server(make, tmp_path, monkeypatch):
    """What a GPU machine runs, on the CPU: catches a dataset or collate function that cannot be pickled
    to a worker that is not a fork, and a worker started by a fork of a process that uses CUDA."""
    with monkeypatch.context() as while_made:
        while_made.setattr(torch.cuda, "is_available", lambda: True)
        loaders = every_loader(make, tmp_path)
    for loader in loaders:
        assert isinstance(loader.multiprocessing_context, multiprocessing.context.ForkServerContext)
        assert len(list(zip(range(2), loader))) == min(2, len(loader))
