"""A run interrupted mid-epoch and resumed sees the same training samples, in the same order, as
one that was never interrupted: over the rest of the interrupted epoch and the epochs after it.

In-process ``Trainer.fit`` runs of the real ``SyntheticDataModule``: the interruption goes
through ``InterruptCheckpoint`` (the stop flag a signal would set, then ``last.ckpt`` of that
step), and the resumed run is seeded differently, so the order can only come from the checkpoint.
The DDP sampler is tested in-process on each rank's dataloader (a stub Trainer), and once end to
end in a real 2-process run (slow).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import DistributedSampler

from ssl_app.checkpointing import InterruptCheckpoint
from ssl_app.losses import InfoNCE
from ssl_app.methods import SimCLR
from tests.helpers import tiny_data, tiny_trainer

EPOCHS = 3
BATCHES = 6  # 48 training samples in batches of 8
STOP = BATCHES + 2  # mid-epoch 1, so the resumed epoch is not the first


class SampleOrder(L.Callback):
    """Records ``(epoch, indices)`` of every training batch; asks for a stop after step ``stop_at``."""

    def __init__(self, interrupt: InterruptCheckpoint, stop_at: int | None = None) -> None:
        self.interrupt, self.stop_at = interrupt, stop_at
        self.batches: list[tuple[int, list[int]]] = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batches.append((trainer.current_epoch, batch[2].tolist()))
        if trainer.global_step == self.stop_at:
            self.interrupt.requested = signal.SIGTERM  # what the signal handler sets


def fit(root: Path, seed: int, *, stop_at: int | None = None, ckpt_path: str | None = None, **data: Any) -> SampleOrder:
    L.seed_everything(seed)
    interrupt = InterruptCheckpoint()
    order = SampleOrder(interrupt, stop_at)  # before InterruptCheckpoint: it agrees to stop in the same step
    model = SimCLR(loss=InfoNCE(), backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
    trainer = tiny_trainer(root, max_epochs=EPOCHS, callbacks=[order, interrupt])
    if stop_at is None:
        trainer.fit(model, datamodule=tiny_data(**data), ckpt_path=ckpt_path)
    else:
        with pytest.raises(SIGTERMException):
            trainer.fit(model, datamodule=tiny_data(**data))
        assert interrupt.saved_path is not None and interrupt.step == stop_at
    return order


@pytest.mark.parametrize(
    "data",
    [
        {"augment_on": "workers"},
        {"augment_on": "workers_batched"},
        {"augment_on": "device"},
        {"augment_on": "workers", "num_workers": 2},
    ],
    ids=["workers", "workers_batched", "device", "2_workers"],
)
def test_a_resumed_run_continues_the_epochs_sample_order(tmp_path, data):
    """Catches a resume that draws the rest of the epoch from a fresh shuffle (samples seen twice,
    others never) and one whose later epochs are shuffled from the resumed process's RNG."""
    straight = fit(tmp_path / "straight", 0, **data).batches
    assert len(straight) == EPOCHS * BATCHES
    interrupted = fit(tmp_path / "interrupted", 0, stop_at=STOP, **data).batches
    assert interrupted == straight[:STOP]
    last = tmp_path / "interrupted" / "checkpoints" / "last.ckpt"
    resumed = fit(tmp_path / "resumed", 1, ckpt_path=str(last), **data).batches
    assert resumed == straight[STOP:]
    # Each epoch is a permutation: the resumed epoch neither repeats nor skips a sample.
    for epoch in range(EPOCHS):
        seen = sorted(i for e, batch in interrupted + resumed if e == epoch for i in batch)
        assert seen == list(range(BATCHES * 8)), epoch


def test_resuming_with_another_num_workers_continues_the_epochs_order(tmp_path):
    """torchdata's loader asserts when a state saved with another worker count is loaded: catches a
    resume that then stops, or that reshuffles the rest of the epoch (interrupted with 2 workers,
    resumed with 0: the sampler's own place does not depend on num_workers)."""
    straight = fit(tmp_path / "straight", 0).batches
    fit(tmp_path / "interrupted", 0, stop_at=STOP, num_workers=2)
    last = tmp_path / "interrupted" / "checkpoints" / "last.ckpt"
    resumed = fit(tmp_path / "resumed", 1, ckpt_path=str(last), num_workers=0).batches
    assert resumed == straight[STOP:]


# --- the sampler of DDP runs ----------------------------------------------------------------------
WORLD = 2


def ddp_loader(rank: int, seed: int, num_workers: int) -> Any:
    """The training dataloader that rank ``rank`` of a 2-process DDP run gets (a stub Trainer)."""
    torch.manual_seed(seed)  # the processes' global RNGs need not agree
    data = tiny_data(train_size=52, num_workers=num_workers)  # 26 per rank: Lightning pads, drops the last 2
    data.trainer = SimpleNamespace(
        world_size=WORLD,
        global_rank=rank,
        lightning_module=None,
        distributed_sampler_kwargs={"num_replicas": WORLD, "rank": rank},
        _accelerator_connector=SimpleNamespace(use_distributed_sampler=True, is_distributed=True),
    )
    data.setup("fit")
    return data.train_dataloader()


def epoch_indices(loader: Any, epoch: int | None, iterator: Any = None) -> list[list[int]]:
    if iterator is None:
        loader.sampler.set_epoch(epoch)
        iterator = iter(loader)
    return [batch[2].tolist() for batch in iterator]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("cut", [2, 3], ids=["mid_epoch", "end_of_epoch"])  # of 3 batches per rank
def test_ddp_sampler_restores_its_epoch_and_position(num_workers, cut):
    """Lightning builds the resumed iterator (and, with workers, draws its first indices) before it
    calls ``set_epoch``: catches a sampler that then replays epoch 0's order (a plain
    DistributedSampler fast-forwarded; torchdata's StatefulDistributedSampler with workers), one
    that restarts the epoch, one whose next epoch still skips the saved count, ranks whose shards
    overlap, and a sampler Lightning would replace by its own."""
    for rank in range(WORLD):
        loader = ddp_loader(rank, seed=rank, num_workers=num_workers)
        assert isinstance(loader.sampler, DistributedSampler)  # so Lightning does not inject one
        straight = [epoch_indices(loader, epoch) for epoch in range(3)]
        assert straight[0] != straight[1] and len(straight[1]) == 3

        loader = ddp_loader(rank, seed=rank, num_workers=num_workers)
        epoch_indices(loader, 0)
        loader.sampler.set_epoch(1)
        iterator = iter(loader)
        head = [next(iterator)[2].tolist() for _ in range(cut)]  # Lightning stops at the length, never at StopIteration
        state = copy.deepcopy(loader.state_dict())
        del iterator, loader

        resumed = ddp_loader(rank, seed=10 + rank, num_workers=num_workers)  # a fresh sampler at epoch 0
        resumed.load_state_dict(state)
        iterator = iter(resumed)  # before set_epoch, as Lightning's FitLoop.setup_data does
        resumed.sampler.set_epoch(1)
        rest = [next(iterator)[2].tolist() for _ in range(3 - cut)]
        assert head + rest == straight[1]
        assert epoch_indices(resumed, 2) == straight[2]
    shards = [set(sum(epoch_indices(ddp_loader(rank, rank, 0), 1), [])) for rank in range(WORLD)]
    assert not shards[0] & shards[1] and len(shards[0]) == len(shards[1]) == 24


# --- a real 2-process DDP run, interrupted by SIGTERM and resumed through the CLI --------------------
REPO = Path(__file__).resolve().parents[2]
DDP_SEED, DDP_SAMPLES, DDP_BATCH, DDP_STOP = 7, 64, 8, 6  # 4 steps per epoch and rank: stop mid-epoch 1
DDP_ARGS = [
    "fit",
    "--config",
    str(REPO / "configs" / "quickstart.yaml"),
    f"--seed_everything={DDP_SEED}",
    "--trainer.accelerator=cpu",
    "--trainer.devices=2",
    "--trainer.strategy=ddp",
    "--trainer.max_epochs=2",
    "--trainer.limit_val_batches=0",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_progress_bar=false",
    "--trainer.callbacks=[]",
    f"--data.init_args.train_size={DDP_SAMPLES}",
    "--data.init_args.val_size=16",
    "--data.init_args.test_size=16",
    "--data.init_args.image_size=16",
    f"--data.init_args.batch_size={DDP_BATCH}",
]


class IndexLog(L.Callback):
    """Appends each training batch's indices to ``<folder>/rank<r>.jsonl``; rank 0 sends itself
    SIGTERM after step ``stop_at`` (the launcher gets the signal, as from a scheduler)."""

    def __init__(self, folder: str, stop_at: int = -1) -> None:
        self.folder, self.stop_at = Path(folder), stop_at

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        with open(self.folder / f"rank{trainer.global_rank}.jsonl", "a") as file:
            file.write(json.dumps([trainer.current_epoch, batch[2].tolist()]) + "\n")
        if trainer.is_global_zero and trainer.global_step == self.stop_at:
            os.kill(os.getpid(), signal.SIGTERM)


def ddp_fit(cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    log = [f"--trainer.callbacks+={__name__}.IndexLog", f"--trainer.callbacks.folder={cwd}"]
    return subprocess.run(
        [sys.executable, "-m", "ssl_app", *DDP_ARGS, *log, *extra],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_ddp_run_resumed_mid_epoch_sees_each_ranks_shards_in_order(tmp_path):
    """End to end under DDP (gloo, CLI, SIGTERM, ``--ckpt_path last``): catches anything between
    the sampler and Lightning's restore that the in-process tests stub out, e.g. Lightning injecting
    its own sampler or the saved position not reaching the resumed dataloader."""
    stopped = ddp_fit(tmp_path, f"--trainer.callbacks.stop_at={DDP_STOP}")
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    assert f"Interrupted by SIGTERM at epoch 1, step {DDP_STOP}" in stopped.stderr, stopped.stderr[-3000:]
    resumed = ddp_fit(tmp_path, "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for rank in range(WORLD):
        seen = [tuple(json.loads(line)) for line in (tmp_path / f"rank{rank}.jsonl").read_text().splitlines()]
        expected = []
        for epoch in range(2):
            sampler = DistributedSampler(range(DDP_SAMPLES), num_replicas=WORLD, rank=rank, shuffle=True, seed=DDP_SEED)
            sampler.set_epoch(epoch)
            order = list(sampler)
            expected += [(epoch, order[i : i + DDP_BATCH]) for i in range(0, len(order), DDP_BATCH)]
        assert seen == expected, rank
