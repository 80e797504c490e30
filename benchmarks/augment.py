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

``--calls`` measures one call of ``BatchViewAugmentation`` instead (CIFAR-10's augmentation, 2 views
of 32-pixel images, ``--batch`` images, as the training step calls it: keyed by ``(seed, epoch,
index)``; and drawn from a generator): the tensor operations it dispatches (views apart: on a GPU
each is a kernel launch), the CUDA kernels it launches (with CUDA) and its time, on ``--device``;
on CUDA also the keyed call captured as one CUDA graph, bare and as the training path replays it
(``datamodules.view_graphs.ViewGraphs``: the inputs copied in, the replay, the views copied out);
with ``--baseline REV``, the same for the three modules of git revision ``REV`` side by side:

    python benchmarks/augment.py --calls --batch 512 --baseline 4f395d7 [--device cuda]

``--fetch`` times what a worker of the device path does per batch (``UnaugmentedImages`` +
``collate_images``: uint8 ``[B, 3, 32, 32]``, labels, indices) on CIFAR-like data served as PIL
images, as torchvision's CIFAR-10 serves them: item by item (a PIL image per sample), and in one
indexing of the array behind the data (``__getitems__``, ``datamodules/arrays.py``).
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

# As `python -m ssl_app` does (benchmarks/README.md, "Tuning notes"): spinning OpenMP threads made
# CPU steps several times slower whenever DataLoader workers shared the cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as TF
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from datamodules import device_augment
from datamodules.augment import ViewAugmentation
from datamodules.base import ContrastiveDataModule
from datamodules.device_augment import UnaugmentedImages, collate_images
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


# ---------------------------------------------------------------- one call of the batched views (--calls)
ROOT = Path(__file__).resolve().parents[1]
VIEW_MODULES = ("batch_ops", "keyed_draws", "device_augment")


class TensorOps(TorchDispatchMode):
    """Counts the tensor operations dispatched inside it, views (no kernel, no copy) apart."""

    def __init__(self) -> None:
        super().__init__()
        self.compute = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.compute += not func.is_view
        return func(*args, **(kwargs or {}))


def load_baseline(revision: str) -> ModuleType:
    """``datamodules/device_augment.py`` and the two modules it draws on, as git ``revision`` has
    them, imported as the package ``baseline_views`` (from a temporary folder)."""
    folder = Path(tempfile.mkdtemp(prefix="augment_baseline_")) / "baseline_views"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for name in VIEW_MODULES:
        text = subprocess.run(
            ["git", "show", f"{revision}:datamodules/{name}.py"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        for other in VIEW_MODULES:
            text = text.replace(f"from datamodules import {other}", f"from baseline_views import {other}")
            text = text.replace(f"from datamodules.{other} import", f"from baseline_views.{other} import")
        (folder / f"{name}.py").write_text(text)
    sys.path.insert(0, str(folder.parent))
    import baseline_views.device_augment as baseline

    return baseline


def call_cases(module: ModuleType, device: torch.device, batch: int) -> dict[str, dict[str, Any]]:
    """Per path (``keys``: as training calls it; ``generator``): ``call`` (one call of the views),
    its non-view tensor ops and its CUDA kernels (``None`` on the CPU). ``module`` is
    ``datamodules.device_augment`` or a baseline of it."""
    augmentation = module.BatchViewAugmentation(ViewAugmentation())
    gen = torch.Generator(device=device).manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, 32, 32), dtype=torch.uint8, device=device, generator=gen)
    index = torch.randperm(50_000, device=device, generator=gen)[:batch]
    keyed_draws = sys.modules[module.__name__.rsplit(".", 1)[0] + ".keyed_draws"]
    if hasattr(keyed_draws, "ViewKeys"):  # the batch's seed and epoch as ints, as the datamodule gives them
        keys = keyed_draws.ViewKeys(0, 3, index)
    else:  # before ViewKeys: rows (seed, epoch, index), as the datamodule gave them then
        keys = torch.stack((torch.zeros_like(index), torch.full_like(index, 3), index), dim=1)
    cases: dict[str, dict[str, Any]] = {}
    for path, options in (("keys", {"keys": keys}), ("generator", {"generator": gen})):
        call = functools.partial(augmentation, images, 2, **options)
        for _ in range(3):  # warm-up: per-device constants, the allocator's pools
            call()
        with TensorOps() as ops:
            call()
        cases[path] = {"call": call, "ops_per_call": ops.compute, "kernels_per_call": cuda_kernels(call, device)}
        if device.type == "cuda" and path == "keys":  # an experiment: the same call replayed as one CUDA graph
            try:
                cases["keys, one CUDA graph"] = {**cases[path], "call": captured(call)}
            except Exception as error:  # noqa: BLE001 (recorded: whether the views can be captured at all)
                cases["keys, one CUDA graph"] = {"error": f"{type(error).__name__}: {error}"[:300]}
            if module is device_augment:  # what training runs: inputs copied in, the graph replayed, the views copied out
                from datamodules.view_graphs import ViewGraphs

                call = functools.partial(ViewGraphs(), augmentation, images, 2, keys)
                call()
                with TensorOps() as ops:
                    call()
                graphed = all(graph is not None for graph in call.func._graphs.values())
                case = {"call": call, "ops_per_call": ops.compute, "kernels_per_call": cuda_kernels(call, device)}
                cases["keys, training path (ViewGraphs)"] = case if graphed else {**case, "error": "not captured: eager"}
    return cases


def cuda_kernels(call: Callable[[], object], device: torch.device) -> int | None:
    """The CUDA kernels (and copies, fills) one call of ``call`` launches; None off CUDA."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        call()
        torch.cuda.synchronize()
    return sum(event.device_type.name == "CUDA" for event in trace.events())


def captured(call: Callable[[], object]) -> Callable[[], None]:
    """``call`` captured as a CUDA graph (its inputs fixed: what replaying a training batch's views
    would need static buffers for); returns the graph's replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch.cuda.graphs asks
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph.replay


def time_calls(cases: dict[str, dict[str, Any]], device: torch.device, calls: int, rounds: int) -> None:
    """``ms_per_call`` of each case: the best of ``rounds`` rounds of ``calls`` calls (synchronised),
    the rounds alternating the cases so that load from other processes hits them alike."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(rounds):
        for case in cases.values():
            if "call" not in case:  # a case that could not be built (its "error" says why)
                continue
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                case["call"]()
            sync()
            ms = (time.perf_counter() - start) / calls * 1000
            case["ms_per_call"] = min(case.get("ms_per_call", ms), ms)


def report_calls(args: argparse.Namespace) -> None:
    device = torch.device(args.device)
    versions = {"this tree": device_augment}
    if args.baseline:
        versions = {args.baseline: load_baseline(args.baseline), **versions}
    cases = {}
    for name, module in versions.items():
        cases |= {(name, path): case for path, case in call_cases(module, device, args.batch).items()}
    time_calls(cases, device, args.batches, args.rounds)
    print(f"torch {torch.__version__}, {device}, {args.threads} threads, batch {args.batch} × 2 views of 32 px (CIFAR-10's)")
    print("| version | path | tensor ops per call | CUDA kernels per call | ms per call |")
    print("| --- | --- | ---: | ---: | ---: |")
    for (name, path), case in cases.items():
        if "error" in case:
            print(f"| {name} | {path} | – | – | {case['error']} |")
            continue
        kernels = "–" if case["kernels_per_call"] is None else case["kernels_per_call"]
        print(f"| {name} | {path} | {case['ops_per_call']} | {kernels} | {case['ms_per_call']:.2f} |")


def report_fetch(args: argparse.Namespace) -> None:
    dm = TextureDataModule(args.batch * 8, augmentation=ViewAugmentation(), batch_size=args.batch, num_workers=0)
    data = UnaugmentedImages(dm.build_split("train"))
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [[(0, 0, index) for index in order[i * args.batch : (i + 1) * args.batch]] for i in range(8)]
    cases: dict[str, Callable[[list], Any]] = {
        "item by item (a PIL image per sample)": lambda keys: collate_images([data[key] for key in keys]),
        "one indexing of the array (__getitems__)": lambda keys: collate_images(data.__getitems__(keys)),
    }
    best = dict.fromkeys(cases, 0.0)
    for _ in range(args.rounds):
        for name, fetch in cases.items():
            start = time.perf_counter()
            for keys in batches[: args.batches]:
                fetch(keys)
            best[name] = max(best[name], args.batches * args.batch / (time.perf_counter() - start))
    print(f"torch {torch.__version__}, one process, batch {args.batch} of CIFAR-like 32×32 images served as PIL")
    print("| uint8 batches | images/s |")
    print("| --- | ---: |")
    for name, rate in best.items():
        print(f"| {name} | {rate:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["shapes", "cifar-like"], choices=["shapes", "cifar-like"])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", action="store_true", help="one BatchViewAugmentation call: tensor ops, kernels, time")
    parser.add_argument("--baseline", metavar="REV", help="with --calls: also the views of this git revision")
    parser.add_argument("--device", default="cpu", help="with --calls: where the views are made")
    parser.add_argument("--fetch", action="store_true", help="the device path's uint8 batches: PIL per sample vs one indexing")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.calls:
        return report_calls(args)
    if args.fetch:
        return report_fetch(args)
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
