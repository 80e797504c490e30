"""Is the data pipeline the bottleneck? Images per second of a config's train loader alone against
its bare training step on the same batches, side by side in one process.

    python benchmarks/data.py                                        # the quickstart
    python benchmarks/data.py --cifar10-folder DATA/cifar10          # + CIFAR-10 (memory bank, MoCo)
    python benchmarks/data.py --only quickstart --set data.init_args.augment_on=device
    python benchmarks/data.py --jpeg-folder /tmp/jpegs --only imagenet100_memory_bank --loader-only \
        --set data.init_args.num_workers=2 data.init_args.augment_on=device   # JPEGs decoded in the main process

Each case is a shipped config, built exactly as ``python -m ssl_app fit --config ...`` builds it
(``benchmarks/common.py``): its datamodule (default workers, augmentation, views per sample as
its method consumes) and its method (default backbone). The loader is timed alone, over
``--batches`` batches after its workers have started and delivered a first batch; the step is
timed on those same batches, held in memory (contrast, loss, backward, optimiser step; the loss
diagnostics off, as on 49 of 50 steps in the Trainer). The target is loader ≥ 2× step: then the
workers keep ahead of the model even while sharing the cores with it. Rounds alternate loader and
step. ``--cifar10-folder`` takes the image-folder tree of ``shared/data/get_cifar10.py`` and
writes it once, beside it, in torchvision's CIFAR-10 layout (``benchmarks/common.py``).
``--jpeg-folder`` is an ImageNet-100-shaped tree of 3,200 JPEGs of 240–520 px a side (written there
once, as ``gpu_check.py``'s loader part writes it) for ``configs/imagenet100/memory_bank.yaml``;
``--loader-only`` skips the step (a ResNet-50 step on a few CPU cores takes seconds).
``--workers-start fork|fork_server`` forces how the workers start (``ssl_app.workers`` takes the fork
server on a machine with a GPU, forks elsewhere): the fork server's workers timed on a CPU machine.
Each line also gives the workers' CPU time per image in the timed window and how busy they were.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Optional

# As `python -m ssl_app` does: spinning OpenMP threads made the main process's batched views (augment_on:
# device on the CPU) 6x slower beside the loader's workers (benchmarks/README.md, "Tuning notes").
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402
from common import (  # noqa: E402
    WORKER_STARTS,
    bare_step_rate,
    build_run,
    cifar10_pickles,
    cpu_seconds,
    take_batches,
    trust_cifar_files,
    worker_start_name,
    workers_started_by,
    write_jpeg_tree,
)

CASES = {
    "quickstart": ["--config", "configs/quickstart.yaml"],
    "cifar10_memory_bank": ["--config", "configs/cifar10/memory_bank.yaml"],
    "cifar10_moco": ["--config", "configs/cifar10/moco.yaml"],
    "imagenet100_memory_bank": ["--config", "configs/imagenet100/memory_bank.yaml"],
}


def loader_rate(datamodule, batches: int, views: int, device: Optional[torch.device] = None) -> tuple[float, list, dict]:
    """Images per second of the train loader (timed from its first batch on), its batches, and what
    its workers did in that time; with ``augment_on: device``, the views made from each batch on the
    device count as loading (on ``device`` for image files decoded there; the CPU by default).

    The workers are all up before the clock starts (the loader's ``iter`` waits for each one's
    first word, whether forked or started from the fork server), so neither start is timed. The
    third value: ``start`` (``fork``, ``fork_server``, ``main process``), ``cpu_ms_per_image`` (the
    workers' CPU time in the timed window per image) and ``busy`` (that CPU time over the window's
    wall time × workers: near 1 when the workers are the bottleneck), ``None`` where unreadable.
    """
    loader = datamodule.train_dataloader()
    iterator = iter(loader)
    first = take_batches([next(iterator)], 1, datamodule, views, device)[0]  # workers started, first batch delivered
    pids = [worker.pid for worker in getattr(iterator, "_workers", [])]
    synchronize(device)
    cpu_before, start = cpu_seconds(pids), time.perf_counter()
    taken = [first] + take_batches(iterator, batches, datamodule, views, device)
    synchronize(device)
    elapsed, cpu_after = time.perf_counter() - start, cpu_seconds(pids)
    images = sum(batch[1].shape[0] for batch in taken[1:])
    cpu = None if cpu_before is None or cpu_after is None or not pids else cpu_after - cpu_before
    workers = {
        "start": worker_start_name(loader),
        "cpu_ms_per_image": None if cpu is None else cpu / images * 1000,
        "busy": None if cpu is None else cpu / (elapsed * len(pids)),
    }
    del iterator, loader  # stop the workers before the step is timed
    return images / elapsed, taken, workers


def synchronize(device: Optional[torch.device]) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def run_case(name: str, args: argparse.Namespace) -> None:
    config = ["fit", *CASES[name], *[f"--{item}" for item in args.set]]
    if name.startswith("cifar10"):
        config.append(f"--data.init_args.root={args.cifar10_root}")
    if name.startswith("imagenet100"):
        config.append(f"--data.init_args.root={args.jpeg_folder}")
    cli = build_run(config[1:] if config[0] == "fit" else config)
    model, datamodule = cli.model, cli.datamodule
    if name.endswith("memory_bank"):
        model.bank.resize(datamodule.num_samples("train"))
    else:
        model.setup("fit")
    datamodule.train_views = lambda: model.train_views  # no Trainer attached: ask the method directly
    datamodule.setup("fit")
    loaders, steps, workers = [], [], []
    for _ in range(args.rounds):
        with workers_started_by(args.workers_start):
            rate, batches, used = loader_rate(datamodule, args.batches, model.train_views)
        loaders.append(rate)
        workers.append(used)
        steps.append(float("nan") if args.loader_only else bare_step_rate(model, batches[1:]))
    loader, step = statistics.median(loaders), statistics.median(steps)
    ratios = [a / b for a, b in zip(loaders, steps)]
    print(
        f"{name}: {type(model).__name__}/{model.hparams['backbone']}, batch {datamodule.batch_size}, "
        f"{datamodule.num_workers} workers, views made on {datamodule.augment_on}, {model.train_views} view(s): "
        f"loader {loader:.0f} img/s, step {step:.0f} img/s, "
        f"loader/step {statistics.median(ratios):.2f} (spread {min(ratios):.2f}–{max(ratios):.2f}); "
        f"loader per round: {', '.join(f'{rate:.0f}' for rate in loaders)} img/s; workers started by "
        f"{workers[0]['start']}{_worker_cpu(workers)}"
    )


def _worker_cpu(workers: list[dict]) -> str:
    """The workers' CPU time per image and busy share, per round (loader_rate's third value)."""
    if any(used["cpu_ms_per_image"] is None for used in workers):
        return ""
    per_image = ", ".join(f"{used['cpu_ms_per_image']:.1f}" for used in workers)
    busy = ", ".join(f"{used['busy']:.0%}" for used in workers)
    return f", their CPU per image {per_image} ms, busy {busy}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), help="the cases to run (default: all that have data)")
    parser.add_argument("--cifar10-folder", type=Path, help="shared/data/get_cifar10.py's OUT/cifar10 folder")
    parser.add_argument("--jpeg-folder", type=Path, help="an ImageNet-100-shaped tree of JPEGs (written there if absent)")
    parser.add_argument("--loader-only", action="store_true", help="time the loader alone, not the step")
    parser.add_argument(
        "--workers-start", choices=WORKER_STARTS, default="auto",
        help="how DataLoader workers start: as the application decides (auto: the fork server on a GPU machine), or forced",
    )  # fmt: skip
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], help="extra config overrides, e.g. data.init_args.num_workers=2")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cases = args.only or [
        name
        for name in CASES
        if (args.cifar10_folder or not name.startswith("cifar10")) and (args.jpeg_folder or not name.startswith("imagenet100"))
    ]
    if any(name.startswith("imagenet100") for name in cases):
        if args.jpeg_folder is None:
            parser.error("the ImageNet-100 case needs --jpeg-folder")
        if not (args.jpeg_folder / "train").is_dir():
            write_jpeg_tree(args.jpeg_folder, 32, 2)
    if any(name.startswith("cifar10") for name in cases):
        if args.cifar10_folder is None:
            parser.error("the CIFAR-10 cases need --cifar10-folder")
        args.cifar10_root = cifar10_pickles(args.cifar10_folder, args.cifar10_folder.parent / "cifar10_torchvision")
        trust_cifar_files()
    for name in cases:
        run_case(name, args)


if __name__ == "__main__":
    main()
