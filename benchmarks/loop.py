"""Where an epoch's time goes inside the Trainer: the training loop's rate against the bare step on
the same batches, and the evaluation passes (validation loop + metric callbacks) against the
training epoch, side by side in one process.

    python benchmarks/loop.py --config configs/quickstart.yaml
    python benchmarks/loop.py --cifar10-folder DATA/cifar10 --config configs/cifar10/memory_bank.yaml \\
        --set model.init_args.backbone=small_cnn trainer.limit_train_batches=40 --epochs 2

The run is built exactly as ``python -m ssl_app fit --config ...`` builds it (``benchmarks/common.py``;
logs and checkpoints go to a temporary folder) and trained for ``--epochs`` epochs with a timing
callback. Per epoch it records the training part (from the epoch's start to the start of
validation: data loading, steps, logging, progress bar, callbacks) and the evaluation part (from
the start of validation to its end: the validation loop and the metric callbacks' passes). The
**in-loop rate** is training images per second of the training part; the **bare rate** is the same
model's step (contrast, loss, backward, optimiser step) on batches of the same train loader held
in memory, timed after the fit. With ``trainer.limit_train_batches`` the training part is scaled to
the full epoch (time per batch × batches per epoch) before the evaluation share is computed,
since the evaluation passes always cover whole splits, and the evaluation share is the time of
all evaluations over that of the whole run (so a config that validates every n epochs is measured
as it runs: use ``--epochs`` a multiple of n). The first epoch's training part is reported but
left out of the rate and the mean (workers starting).
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import bare_step_rate, build_run, cifar10_pickles, take_batches, trust_cifar_files
from lightning.pytorch.callbacks import Callback


class EpochTimer(Callback):
    """Wall time of each epoch's training part and of each evaluation, and the images trained on."""

    def __init__(self) -> None:
        self.train: list[tuple[float, int]] = []  # per epoch: (seconds, images)
        self.evaluations: list[dict[str, float]] = []  # per validation: seconds in all, in the loop
        self._start = self._eval_start = self._loop_end = 0.0
        self._images = 0
        self._in_epoch = False

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start, self._images, self._in_epoch = time.perf_counter(), 0, True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._images += batch[1].shape[0]

    def _end_training_part(self) -> None:
        if self._in_epoch:
            self.train.append((time.perf_counter() - self._start, self._images))
            self._in_epoch = False

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._end_training_part()
            self._eval_start = self._loop_end = time.perf_counter()

    def on_validation_batch_end(self, trainer, pl_module, *args, **kwargs) -> None:
        self._loop_end = time.perf_counter()  # the last one: the validation loop's batches are done

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            end = time.perf_counter()
            self.evaluations.append(
                {"epoch": trainer.current_epoch, "eval": end - self._eval_start, "loop": self._loop_end - self._eval_start}
            )

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._end_training_part()  # epochs without validation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", required=True)
    parser.add_argument("--set", nargs="*", default=[], help="config overrides, e.g. trainer.limit_train_batches=40")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--bare-batches", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cifar10-folder", type=Path, help="shared/data/get_cifar10.py's OUT/cifar10 folder")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="ssl_app_loop_"))
    config = [part for path in args.config for part in ("--config", path)]
    config += [f"--{item}" for item in args.set]
    config += [f"--trainer.max_epochs={args.epochs}", f"--trainer.logger.init_args.save_dir={work}"]
    if args.cifar10_folder is not None:
        root = cifar10_pickles(args.cifar10_folder, args.cifar10_folder.parent / "cifar10_torchvision")
        trust_cifar_files()
        config.append(f"--data.init_args.root={root}")
    cli = build_run(config)
    timer = EpochTimer()
    cli.trainer.callbacks.append(timer)
    cli.trainer.fit(cli.model, cli.datamodule)

    model, datamodule, trainer = cli.model, cli.datamodule, cli.trainer
    batches = take_batches(datamodule.train_dataloader(), args.bare_batches, datamodule, model.train_views)
    bare = bare_step_rate(model, batches)
    full_batches = len(datamodule.train_dataloader())
    limited = trainer.num_training_batches
    scale = full_batches / limited if math.isfinite(limited) and limited < full_batches else 1.0
    print(
        f"{' + '.join(args.config)} {' '.join(args.set)}: {type(model).__name__}/{model.hparams['backbone']}, "
        f"batch {datamodule.batch_size}, {datamodule.num_workers} workers; train part scaled ×{scale:.2f} to a full epoch"
    )
    for number, (seconds, images) in enumerate(timer.train):
        print(f"  epoch {number}: training part {seconds:.2f} s, {images / seconds:.0f} img/s in the loop")
    for evaluation in timer.evaluations:
        print(
            f"  evaluation after epoch {evaluation['epoch']}: {evaluation['eval']:.2f} s (validation batches "
            f"{evaluation['loop']:.2f} s, then the callbacks {evaluation['eval'] - evaluation['loop']:.2f} s)"
        )
    steady = timer.train[1:] or timer.train  # epoch 0 starts the workers
    rate = statistics.median(images / seconds for seconds, images in steady)
    train_time = statistics.mean(seconds for seconds, _ in steady) * scale * len(timer.train)
    eval_time = sum(evaluation["eval"] for evaluation in timer.evaluations)
    print(
        f"  in-loop {rate:.0f} img/s vs bare step {bare:.0f} img/s: ratio {rate / bare:.2f}; evaluation "
        f"{100 * eval_time / (train_time + eval_time):.0f}% of the run's time ({len(timer.train)} epochs, "
        f"{len(timer.evaluations)} evaluation(s); training scaled to full epochs)"
    )


if __name__ == "__main__":
    main()
