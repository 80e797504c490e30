"""Images per second of the two ways to make training views (``augment_on``), side by side in one process.

    python benchmarks/augment.py                       # batch 256, 8 timed batches, 2 rounds
    python benchmarks/augment.py --batches 4 --rounds 1

Both sides produce the same training batches for the same data: two normalised 32×32 views per
image (``((view_1, view_2), labels, indices)``), batch 256, from

- ``shapes``: the quickstart's generated shapes (``SyntheticDataModule``, its augmentation with
  hue 0.5, saturation 0.8, grayscale 0.5);
- ``cifar-like``: 32×32 uint8 random colour textures with CIFAR-10's default augmentation
  (MoCo v2: jitter 0.4/0.4/0.4/0.1 with p 0.8, grayscale 0.2), served as PIL images like
  torchvision's CIFAR-10.

Cases, each timed over ``--batches`` batches after warm-up batches (worker start-up and prefetched
batches excluded):

- ``workers=0`` / ``workers=2``: ``augment_on: workers``, the real training dataloader
  (PIL pipeline per image, per view) with 0 or 2 worker processes;
- ``device cpu``: ``augment_on: device`` on the CPU, end to end: the real training dataloader
  (uint8 images, 0 workers) and ``BatchViewAugmentation`` on the batch, in the main process with
  ``--threads`` intra-op threads;
- ``device cpu (views only)``: the same views from a batch already collated (what the GPU
  path leaves to the device);
- with CUDA: ``device cuda``: uint8 batches from 2 workers, pinned, copied to the GPU, views
  made there (synchronised before the clock stops), and the views alone.

Rounds alternate the cases so that load from other processes hits them alike; the best round
is reported, with the ratio to ``workers=2``. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import time

# As `python -m ssl_app` does (benchmarks/README.md, "Tuning notes"): spinning OpenMP threads made
# CPU steps several times slower whenever DataLoader workers shared the cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as TF
from torch import Tensor

from datamodules.augment import ViewAugmentation
from datamodules.base import ContrastiveDataModule
from datamodules.synthetic import ShapesDataset, SyntheticDataModule

PREFETCH = 2  # DataLoader's default prefetch_factor: batches each worker makes ahead


class TextureDataModule(ContrastiveDataModule):
    """CIFAR-like 32×32 random colour textures (10 labels), CIFAR-10's default augmentation."""

    def __init__(self, size: int, **kwargs) -> None:
        super().__init__(**kwargs)
        gen = torch.Generator().manual_seed(0)
        base = torch.tensor([0.49, 0.48, 0.45]).view(1, 3, 1, 1) + 0.2 * torch.randn(size, 3, 1, 1, generator=gen)
        texture = TF.interpolate(torch.rand(size, 3, 8, 8, generator=gen) - 0.5, size=(32, 32), mode="bilinear")
        self.images = ((base + 0.6 * texture).clamp(0, 1) * 255).round().to(torch.uint8)
        self.labels = torch.randint(0, 10, (size,), generator=gen)

    @property
    def num_classes(self) -> int:
        return 10

    def build_split(self, split):
        return ShapesDataset(self.images, self.labels)  # in-memory uint8 served as PIL, like CIFAR


def datamodule(data: str, size: int, batch: int, workers: int, augment_on: str) -> ContrastiveDataModule:
    options = dict(batch_size=batch, num_workers=workers, augment_on=augment_on, pin_memory=torch.cuda.is_available())
    if data == "shapes":
        return SyntheticDataModule(train_size=size, val_size=16, test_size=16, **options)
    return TextureDataModule(size, augmentation=ViewAugmentation(), **options)


def endless(make_loader: Callable[[], torch.utils.data.DataLoader]) -> Iterator:
    while True:
        yield from make_loader()


def timed(next_batch: Callable[[], object], batches: int, batch: int, sync: Callable[[], None], warmup: int) -> float:
    """Images per second over ``batches`` calls after ``warmup`` untimed calls (which also drain what
    the workers prefetched while other cases ran, so every timed batch is made while timed)."""
    for _ in range(warmup):
        next_batch()
    sync()
    start = time.perf_counter()
    for _ in range(batches):
        next_batch()
    sync()
    return batches * batch / (time.perf_counter() - start)


Case = tuple[Callable[[], object], Callable[[], None], int]


def cases(data: str, size: int, batch: int) -> dict[str, Case]:
    """``name -> (produce one training batch, sync, warm-up batches)``; loaders live as long as the benchmark."""
    no_sync: Callable[[], None] = lambda: None  # noqa: E731
    out: dict[str, Case] = {}
    for workers in (0, 2):
        dm = datamodule(data, size, batch, workers, "workers")
        dm.setup("fit")
        it = endless(dm.train_dataloader)
        out[f"workers={workers}"] = (lambda it=it: next(it), no_sync, 1 + PREFETCH * workers)

    dm = datamodule(data, size, batch, 0, "device")
    dm.setup("fit")
    augment = dm.device_augmentation
    cpu_gen = torch.Generator().manual_seed(0)
    it = endless(dm.train_dataloader)

    def device_cpu(it=it):
        images, labels, index = next(it)
        return augment(images, 2, cpu_gen), labels, index

    images_cpu: Tensor = next(iter(dm.train_dataloader()))[0]
    out["device cpu"] = (device_cpu, no_sync, 1)
    out["device cpu (views only)"] = (lambda: augment(images_cpu, 2, cpu_gen), no_sync, 1)

    if torch.cuda.is_available():
        cuda = torch.device("cuda")
        dm2 = datamodule(data, size, batch, 2, "device")
        dm2.setup("fit")
        it2 = endless(dm2.train_dataloader)
        cuda_gen = torch.Generator(device=cuda).manual_seed(0)

        def device_cuda(it=it2):
            images, labels, index = next(it)
            images = images.to(cuda, non_blocking=True)
            return augment(images, 2, cuda_gen), labels.to(cuda), index.to(cuda)

        images_cuda = images_cpu.to(cuda)
        out["device cuda"] = (device_cuda, torch.cuda.synchronize, 1 + PREFETCH * 2)
        out["device cuda (views only)"] = (lambda: augment(images_cuda, 2, cuda_gen), torch.cuda.synchronize, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["shapes", "cifar-like"], choices=["shapes", "cifar-like"])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    size = args.batch * (args.batches + 2 + 2 * PREFETCH)
    print(f"torch {torch.__version__}, {args.threads} threads, CUDA: {torch.cuda.is_available()}, batch {args.batch}, 2 views")
    print("| data | path | images/s | / workers=2 |")
    print("| --- | --- | ---: | ---: |")
    for data in args.data:
        runs = cases(data, size, args.batch)
        best = {name: 0.0 for name in runs}
        for _ in range(args.rounds):
            for name, (step, sync, warmup) in runs.items():
                best[name] = max(best[name], timed(step, args.batches, args.batch, sync, warmup))
        for name, rate in best.items():
            print(f"| {data} | {name} | {rate:,.0f} | {rate / best['workers=2']:.2f} |")


if __name__ == "__main__":
    main()
