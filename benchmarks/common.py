"""Shared pieces of the benchmarks: a run built from a config as ``python -m ssl_app`` builds it,
the bare training step on batches held in memory, the real CIFAR-10 in torchvision's layout, and an
ImageNet-100-shaped folder of JPEGs."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from lightning import LightningDataModule, LightningModule
from PIL import Image

from datamodules.class_lists import read_class_list
from datamodules.encoded_images import EncodedBatch
from ssl_app.cli import SSLCLI, trainer_defaults
from ssl_app.runtime import keep_freed_memory


def build_run(config_args: list[str]) -> SSLCLI:
    """The model, datamodule and trainer of ``python -m ssl_app fit <config_args>``, not run."""
    keep_freed_memory()  # as python -m ssl_app does
    return SSLCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        auto_configure_optimizers=False,
        trainer_defaults=trainer_defaults(),
        save_config_kwargs={"overwrite": True},
        args=config_args,
        run=False,
    )


#: How DataLoader workers can be started (``ssl_app.workers``): ``auto`` as the application decides
#: (from the fork server on a machine with a GPU, forks of the main process otherwise), or forced.
WORKER_STARTS = ("auto", "fork", "fork_server")


@contextlib.contextmanager
def workers_started_by(start: str) -> Iterator[None]:
    """Inside, every DataLoader the application builds starts its workers as ``start`` says
    (``WORKER_STARTS``): how to time the fork server's workers on a CPU machine, or forked workers
    on a GPU machine (only before CUDA is in use there: ``ssl_app.workers``)."""
    import ssl_app.workers as workers

    if start == "auto":
        yield
        return
    original = workers.worker_context

    def forced() -> multiprocessing.context.BaseContext:
        if start == "fork":
            return workers._ForkContext()
        workers.start_fork_server()
        return workers._ForkServerContext()

    workers.worker_context = forced
    try:
        yield
    finally:
        workers.worker_context = original


def worker_start_name(loader: Any) -> str:
    """How ``loader``'s workers start: ``fork``, ``fork_server`` or ``main process`` (no workers)."""
    if not getattr(loader, "num_workers", 0):
        return "main process"
    context = getattr(loader, "multiprocessing_context", None)
    method = context.get_start_method() if context is not None else multiprocessing.get_start_method()
    return "fork_server" if method == "forkserver" else method


def cpu_seconds(pids: list[int]) -> Optional[float]:
    """User + system CPU seconds the processes ``pids`` have used (Linux's /proc), or None."""
    try:
        total = 0
        for pid in pids:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
        return total / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def take_batches(
    loader: Iterable, count: int, datamodule: Any = None, views: int = 2, device: Optional[torch.device] = None
) -> list[Any]:
    """The first ``count`` batches of ``loader``, in memory; with a ``datamodule`` whose views are
    made on the device (``augment_on: device``), as training batches (its views already made; files
    decoded and views made on ``device``, the CPU by default, as the Trainer's hook does)."""
    batches = []
    device_views = getattr(datamodule, "augment_on", "workers") == "device"
    generator = torch.Generator().manual_seed(0)
    for batch in loader:
        if device_views and isinstance(batch[0], EncodedBatch):
            files, labels, indices = batch
            on = torch.device("cpu") if device is None else device
            batch = datamodule.device_views((files, labels.to(on, non_blocking=True), indices.to(on, non_blocking=True)), views)
        elif device_views:
            images, labels, indices = batch
            batch = (datamodule.device_augmentation(images, views, generator=generator), labels, indices)
        batches.append(batch)
        if len(batches) == count:
            break
    return batches


def bare_step(model: Any, optimizer: torch.optim.Optimizer):
    """One training step of ``model`` without the Trainer: contrast → loss → backward → update."""

    def step(batch: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        contrast = model.contrast(batch)
        model.loss(contrast).value.backward()  # no diagnostics: the Trainer computes them on 1 step in log_every_n_steps
        model.on_after_backward()
        optimizer.step()
        update = getattr(model, "update_key_encoder", None)
        if update is not None:
            update(model.momentum)

    return step


def bare_step_rate(model: Any, batches: list[Any], repeats: int = 1) -> float:
    """Training images per second of the bare step over ``batches`` (after one warm-up step)."""
    model.train()
    step = bare_step(model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))
    step(batches[0])
    images = 0
    start = time.perf_counter()
    for _ in range(repeats):
        for batch in batches:
            step(batch)
            images += batch[1].shape[0]
    return images / (time.perf_counter() - start)


def cifar10_pickles(folder: Path, root: Path) -> Path:
    """Write the image-folder CIFAR-10 of ``get_cifar10.py`` (``folder/{train,test}/<class>/<i>.png``)
    in torchvision's ``cifar-10-batches-py`` layout under ``root`` (once) and return ``root``.

    The pixels are the real CIFAR-10's; the files are not byte-identical to the published ones, so
    torchvision's md5 check must be bypassed (:func:`trust_cifar_files`), as the tests do.
    """
    target = root / "cifar-10-batches-py"
    if (target / "test_batch").is_file():
        return root
    target.mkdir(parents=True, exist_ok=True)
    classes = sorted(p.name for p in (folder / "train").iterdir())
    for split, names in (("train", [f"data_batch_{i}" for i in range(1, 6)]), ("test", ["test_batch"])):
        files = sorted(
            ((int(path.stem), classes.index(path.parent.name), path) for path in (folder / split).glob("*/*.png")),
        )
        data = np.stack([np.asarray(Image.open(path).convert("RGB")).transpose(2, 0, 1).reshape(-1) for _, _, path in files])
        labels = [label for _, label, _ in files]
        for part, name in enumerate(names):
            rows = slice(part * len(files) // len(names), (part + 1) * len(files) // len(names))
            with open(target / name, "wb") as handle:
                pickle.dump({"data": data[rows], "labels": labels[rows]}, handle)
    with open(target / "batches.meta", "wb") as handle:
        pickle.dump({"label_names": classes}, handle)
    return root


def _write_jpegs(job: tuple[Path, int, int]) -> int:
    """JPEGs of mixed sizes (each side 240–520 pixels, about ImageNet's): smooth colour fields with
    noise, so they compress and decode like photographs rather than like pure noise."""
    folder, first, count = job
    rng = np.random.default_rng(first)
    for index in range(first, first + count):
        width, height = (int(x) for x in rng.integers(240, 521, size=2))
        coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((width, height), Image.BICUBIC)
        pixels = np.asarray(coarse, dtype=np.int16) + rng.integers(-20, 21, (height, width, 3), dtype=np.int16)
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(folder / f"{index}.JPEG", quality=90)
    return count


def write_jpeg_tree(root: Path, per_class: int, processes: int) -> int:
    """ImageNet-100's class folders in ``root/train`` (``per_class`` JPEGs each) and ``root/val`` (one
    each), written by ``processes`` processes; returns the number of training images."""
    jobs = []
    for number, wnid in enumerate(read_class_list("imagenet100")):
        for split, count in (("train", per_class), ("val", 1)):
            (root / split / wnid).mkdir(parents=True)
            jobs.append((root / split / wnid, number * 1000, count))
    with multiprocessing.Pool(processes) as pool:
        return sum(pool.map(_write_jpegs, jobs)) - len(jobs) // 2


def trust_cifar_files() -> None:
    """Skip torchvision's md5 check of the CIFAR files (benchmarks only; see :func:`cifar10_pickles`)."""
    import torchvision.datasets.cifar as tv_cifar

    tv_cifar.check_integrity = lambda *args, **kwargs: True


def fake_cifar10(root: Path, train: int, test: int, device: str) -> Path:
    """Random 32×32 images (drawn on ``device``) in torchvision's CIFAR-10 layout under ``root``."""
    target = root / "cifar-10-batches-py"
    target.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator(device=device).manual_seed(0)
    for names, count in (([f"data_batch_{i}" for i in range(1, 6)], train), (["test_batch"], test)):
        for part, name in enumerate(names):
            rows = count // len(names) + (part < count % len(names))
            data = torch.randint(0, 256, (rows, 3 * 32 * 32), dtype=torch.uint8, device=device, generator=generator).cpu().numpy()
            labels = torch.randint(0, 10, (rows,), device=device, generator=generator).tolist()
            with open(target / name, "wb") as handle:
                pickle.dump({"data": data, "labels": labels}, handle)
    with open(target / "batches.meta", "wb") as handle:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, handle)
    trust_cifar_files()
    return root
