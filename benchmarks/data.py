"""Is the data pipeline the bottleneck? Images per second of a config's train loader alone against
its bare training step on the same batches, side by side in one process.

    python benchmarks/data.py                                        # the quickstart
    python benchmarks/data.py --cifar10-folder DATA/cifar10          # + CIFAR-10 (memory bank, MoCo)
    python benchmarks/data.py --only quickstart --set data.init_args.augment_on=device

Each case is a shipped config, built exactly as ``python -m ssl_app fit --config ...`` builds it
(``benchmarks/common.py``): its datamodule (default workers, augmentation, views per sample as
its method consumes) and its method (default backbone). The loader is timed alone, over
``--batches`` batches after its workers have started and delivered a first batch; the step is
timed on those same batches, held in memory (contrast, loss, backward, optimiser step; the loss
diagnostics off, as on 49 of 50 steps in the Trainer). The target is loader ≥ 2× step: then the
workers keep ahead of the model even while sharing the cores with it. Rounds alternate loader and
step. ``--cifar10-folder`` takes the image-folder tree of ``shared/data/get_cifar10.py`` and
writes it once, beside it, in torchvision's CIFAR-10 layout (``benchmarks/common.py``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from common import bare_step_rate, build_run, cifar10_pickles, take_batches, trust_cifar_files

CASES = {
    "quickstart": ["--config", "configs/quickstart.yaml"],
    "cifar10_memory_bank": ["--config", "configs/cifar10/memory_bank.yaml"],
    "cifar10_moco": ["--config", "configs/cifar10/moco.yaml"],
}


def loader_rate(datamodule, batches: int, views: int) -> tuple[float, list]:
    """Images per second of the train loader (timed from its first batch on) and its batches; with
    ``augment_on: device``, the views made from each batch on the device count as loading."""
    loader = datamodule.train_dataloader()
    iterator = iter(loader)
    first = take_batches([next(iterator)], 1, datamodule, views)[0]  # workers started, first batch delivered
    start = time.perf_counter()
    taken = [first] + take_batches(iterator, batches, datamodule, views)
    elapsed = time.perf_counter() - start
    images = sum(batch[1].shape[0] for batch in taken[1:])
    del iterator, loader  # stop the workers before the step is timed
    return images / elapsed, taken


def run_case(name: str, args: argparse.Namespace) -> None:
    config = ["fit", *CASES[name], *[f"--{item}" for item in args.set]]
    if name.startswith("cifar10"):
        config.append(f"--data.init_args.root={args.cifar10_root}")
    cli = build_run(config[1:] if config[0] == "fit" else config)
    model, datamodule = cli.model, cli.datamodule
    if name.endswith("memory_bank"):
        model.bank.resize(datamodule.num_samples("train"))
    else:
        model.setup("fit")
    datamodule.train_views = lambda: model.train_views  # no Trainer attached: ask the method directly
    datamodule.setup("fit")
    loaders, steps = [], []
    for _ in range(args.rounds):
        rate, batches = loader_rate(datamodule, args.batches, model.train_views)
        loaders.append(rate)
        steps.append(bare_step_rate(model, batches[1:]))
    loader, step = statistics.median(loaders), statistics.median(steps)
    ratios = [a / b for a, b in zip(loaders, steps)]
    print(
        f"{name}: {type(model).__name__}/{model.hparams['backbone']}, batch {datamodule.batch_size}, "
        f"{datamodule.num_workers} workers, views made on {datamodule.augment_on}, {model.train_views} view(s): "
        f"loader {loader:.0f} img/s, step {step:.0f} img/s, "
        f"loader/step {statistics.median(ratios):.2f} (spread {min(ratios):.2f}–{max(ratios):.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), help="the cases to run (default: all that have data)")
    parser.add_argument("--cifar10-folder", type=Path, help="shared/data/get_cifar10.py's OUT/cifar10 folder")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], help="extra config overrides, e.g. data.init_args.num_workers=2")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cases = args.only or [name for name in CASES if args.cifar10_folder or not name.startswith("cifar10")]
    if any(name.startswith("cifar10") for name in cases):
        if args.cifar10_folder is None:
            parser.error("the CIFAR-10 cases need --cifar10-folder")
        args.cifar10_root = cifar10_pickles(args.cifar10_folder, args.cifar10_folder.parent / "cifar10_torchvision")
        trust_cifar_files()
    for name in cases:
        run_case(name, args)


if __name__ == "__main__":
    main()
