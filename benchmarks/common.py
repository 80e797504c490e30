"""Shared pieces of the benchmarks: a run built from a config as ``python -m ssl_app`` builds it,
the bare training step on batches held in memory, and the real CIFAR-10 in torchvision's layout."""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning import LightningDataModule, LightningModule
from PIL import Image

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


def take_batches(loader: Iterable, count: int, datamodule: Any = None, views: int = 2) -> list[Any]:
    """The first ``count`` batches of ``loader``, in memory; with a ``datamodule`` whose views are
    made on the device (``augment_on: device``), as training batches (its views already made)."""
    batches = []
    device_views = getattr(datamodule, "augment_on", "workers") == "device"
    generator = torch.Generator().manual_seed(0)
    for batch in loader:
        if device_views:
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


def trust_cifar_files() -> None:
    """Skip torchvision's md5 check of the CIFAR files (benchmarks only; see :func:`cifar10_pickles`)."""
    import torchvision.datasets.cifar as tv_cifar

    tv_cifar.check_integrity = lambda *args, **kwargs: True
