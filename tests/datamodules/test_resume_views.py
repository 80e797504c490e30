"""Every training view is a function of ``(seed, epoch, sample index, view)``: an interrupted and
resumed run, a run with another ``num_workers``, DDP ranks and another loss or method see the same
views as the plain run, on each ``augment_on`` path.

In-process ``Trainer.fit`` runs of the real ``SyntheticDataModule`` (the interruption goes through
``InterruptCheckpoint``, as in ``test_resume_order.py``); the DDP ranks' loaders are built in-process
with a stub Trainer, as in ``test_resume_order.py``'s sampler test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ssl_app.checkpointing import InterruptCheckpoint
from ssl_app.losses import HardContrastive, InfoNCE
from ssl_app.methods import MemoryBank, MoCo, SimCLR
from tests.helpers import tiny_data, tiny_trainer

EPOCHS = 2
BATCHES = 6  # 48 training samples in batches of 8
STOP = BATCHES + 2  # mid-epoch 1
PATHS = ["workers", "workers_batched", "device"]


class ViewLog(L.Callback):
    """Records ``(epoch, indices, views [V, B, 3, H, W])`` of every training batch as the method got
    it; asks for a stop after step ``stop_at``."""

    def __init__(self, interrupt: InterruptCheckpoint, stop_at: int | None = None) -> None:
        self.interrupt, self.stop_at = interrupt, stop_at
        self.batches: list[tuple[int, list[int], torch.Tensor]] = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        views, _, indices = batch
        self.batches.append((trainer.current_epoch, indices.tolist(), torch.stack(views).detach().clone()))
        if trainer.global_step == self.stop_at:
            self.interrupt.requested = signal.SIGTERM  # what the signal handler sets


def fit(
    root: Path, seed: int, *, stop_at: int | None = None, ckpt_path: str | None = None, model: Any = None, **data: Any
) -> list[tuple[int, list[int], torch.Tensor]]:
    L.seed_everything(seed)
    interrupt = InterruptCheckpoint()
    log = ViewLog(interrupt, stop_at)
    model = model or SimCLR(loss=InfoNCE(), backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
    trainer = tiny_trainer(root, max_epochs=EPOCHS, callbacks=[log, interrupt])
    if stop_at is None:
        trainer.fit(model, datamodule=tiny_data(**data), ckpt_path=ckpt_path)
    else:
        with pytest.raises(SIGTERMException):
            trainer.fit(model, datamodule=tiny_data(**data))
    return log.batches


def assert_same_batches(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for step, ((epoch, indices, views), (epoch_e, indices_e, views_e)) in enumerate(zip(got, expected)):
        assert (epoch, indices) == (epoch_e, indices_e), step
        assert torch.equal(views, views_e), f"step {step}: other views"


@pytest.mark.parametrize("augment_on", PATHS)
def test_a_resumed_run_sees_the_uninterrupted_runs_views(tmp_path, augment_on):
    """Catches resumed steps whose augmentations are drawn afresh (a device generator seeded at the
    resumed run's first batch, the workers' RNG of the new process). The resumed run is seeded
    differently: its views can only come from the checkpoint's seed."""
    straight = fit(tmp_path / "straight", 0, augment_on=augment_on)
    interrupted = fit(tmp_path / "interrupted", 0, stop_at=STOP, augment_on=augment_on)
    assert_same_batches(interrupted, straight[:STOP])
    last = tmp_path / "interrupted" / "checkpoints" / "last.ckpt"
    assert_same_batches(fit(tmp_path / "resumed", 1, ckpt_path=str(last), augment_on=augment_on), straight[STOP:])
    # Views still differ between epochs and between the two views of a sample.
    first, second = straight[0][2], straight[BATCHES][2]
    assert not torch.equal(first[0], first[1]) and not torch.equal(first, second)


@pytest.mark.parametrize("augment_on", ["workers", "workers_batched"])
def test_the_views_do_not_depend_on_num_workers(tmp_path, augment_on):
    """Catches views drawn from each worker's RNG (seeded per worker), and a resume with another
    ``num_workers`` that reshuffles the rest of the epoch: interrupted with 2 workers, resumed with 0."""
    straight = fit(tmp_path / "straight", 0, augment_on=augment_on, num_workers=0)
    assert_same_batches(fit(tmp_path / "workers", 0, augment_on=augment_on, num_workers=2), straight)
    fit(tmp_path / "interrupted", 0, stop_at=STOP, augment_on=augment_on, num_workers=2)
    last = tmp_path / "interrupted" / "checkpoints" / "last.ckpt"
    assert_same_batches(fit(tmp_path / "resumed", 1, ckpt_path=str(last), augment_on=augment_on, num_workers=0), straight[STOP:])


HEAD = dict(backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
#: The models of a paired comparison: another loss, another method (MoCo builds a key encoder and a
#: queue, the memory bank a bank of random vectors: each draws something else from the global RNG).
CONFIGURATIONS: dict[str, Callable[[], L.LightningModule]] = {
    "SimCLR+InfoNCE": lambda: SimCLR(loss=InfoNCE(), **HEAD),
    "SimCLR+HardContrastive": lambda: SimCLR(loss=HardContrastive(temperature=0.2, num_negatives=4), **HEAD),
    "MoCo+InfoNCE": lambda: MoCo(loss=InfoNCE(temperature=0.2), queue_size=16, split_bn_groups=2, **HEAD),
    "MemoryBank+InfoNCE": lambda: MemoryBank(loss=InfoNCE(temperature=0.2), backbone="small_cnn", proj_dim=8),
}


def first_batches(root: Path, seed: int, name: str, augment_on: str) -> list[tuple[int, list[int], torch.Tensor]]:
    """The first training batch of each of 2 epochs (indices and views after augmentation), the
    model built after seeding, as the CLI does."""
    L.seed_everything(seed)
    model = CONFIGURATIONS[name]()
    log = ViewLog(InterruptCheckpoint())
    trainer = tiny_trainer(root, max_epochs=2, limit_train_batches=1, callbacks=[log])
    trainer.fit(model, datamodule=tiny_data(augment_on=augment_on))
    return log.batches


def test_the_same_seed_gives_another_loss_and_method_the_same_batches(tmp_path):
    """What a paired comparison needs (seed k of configuration A against seed k of B): on each
    ``augment_on`` path every configuration's first batch of each epoch holds the same samples and
    the same views (the memory bank's one view is the others' view 0). Catches an order or views that
    depend on what the model's construction drew from the global RNG (a sampler seeded from it), or
    on the loss; another seed gives another batch (the check is not vacuous)."""
    for augment_on in PATHS:
        expected = None
        for name in CONFIGURATIONS:
            got = first_batches(tmp_path / augment_on / name, 3, name, augment_on)
            if expected is None:
                expected = got
                other = first_batches(tmp_path / augment_on / "seed4", 4, name, augment_on)
                assert other[0][1] != got[0][1] and not torch.equal(other[0][2], got[0][2]), augment_on
            else:
                # The memory bank draws one view per image (its bank holds the other): view 0 of the others.
                views = got[0][2].shape[0]
                assert views == (1 if name.startswith("MemoryBank") else 2), name
                try:
                    assert_same_batches(got, [(epoch, indices, seen[:views]) for epoch, indices, seen in expected])
                except AssertionError as error:
                    raise AssertionError(f"{augment_on}, {name}: {error}") from None


WORLD = 2


def rank_views(augment_on: str, rank: int, world: int, batch_size: int, seed: int = 5) -> dict[int, torch.Tensor]:
    """``{index: views [V, 3, H, W]}`` of epoch 1's first batch of ``rank`` of ``world`` processes (a stub Trainer)."""
    torch.manual_seed(rank)  # the processes' global RNGs need not agree
    data = tiny_data(augment_on=augment_on, batch_size=batch_size)
    distributed = world > 1
    data.trainer = SimpleNamespace(
        world_size=world,
        global_rank=rank,
        training=True,
        lightning_module=None,
        distributed_sampler_kwargs={"num_replicas": world, "rank": rank},
        _accelerator_connector=SimpleNamespace(use_distributed_sampler=distributed, is_distributed=distributed),
    )
    data.setup("fit")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PL_GLOBAL_SEED", str(seed))
        loader = data.train_dataloader()
    loader.sampler.set_epoch(1)
    batch = data.on_after_batch_transfer(next(iter(loader)), 0)
    views, _, indices = batch
    stacked = torch.stack(views, dim=1)
    return dict(zip(indices.tolist(), stacked))


@pytest.mark.parametrize("augment_on", PATHS)
def test_ddp_ranks_together_see_the_one_process_batch_and_its_views(augment_on):
    """``batch_size`` is per process: 2 ranks of 8 see at each step the samples and views of one
    process of 16. Catches a one-process order that is not the DDP permutation, and views that
    depend on the rank or on the batch a sample lands in."""
    single = rank_views(augment_on, 0, 1, 16)
    ranks = [rank_views(augment_on, rank, WORLD, 8) for rank in range(WORLD)]
    assert not ranks[0].keys() & ranks[1].keys()
    assert ranks[0].keys() | ranks[1].keys() == single.keys()
    for shard in ranks:
        for index, views in shard.items():
            torch.testing.assert_close(views, single[index], rtol=0, atol=1e-6)


# --- real processes: 2 gloo ranks through the CLI against one process ---------------------------
REPO = Path(__file__).resolve().parents[2]
DDP_ARGS = [
    "fit",
    "--config",
    str(REPO / "configs" / "quickstart.yaml"),
    "--seed_everything=11",
    "--trainer.accelerator=cpu",
    "--trainer.max_epochs=2",
    "--trainer.limit_val_batches=0",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_progress_bar=false",
    "--trainer.callbacks=[]",
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=16",
    "--data.init_args.test_size=16",
    "--data.init_args.image_size=16",
]


class ViewDump(L.Callback):
    """Saves ``{index: views [V, 3, H, W]}`` of each training step to ``<folder>/step<s>_rank<r>.pt``."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        views, _, indices = batch
        stacked = torch.stack(views, dim=1).detach().cpu()
        torch.save(dict(zip(indices.tolist(), stacked)), self.folder / f"step{trainer.global_step}_rank{trainer.global_rank}.pt")


def cli_fit(folder: Path, *extra: str) -> None:
    folder.mkdir()
    dump = [f"--trainer.callbacks+={__name__}.ViewDump", f"--trainer.callbacks.folder={folder}"]
    done = subprocess.run(
        [sys.executable, "-m", "ssl_app", *DDP_ARGS, *dump, *extra],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_two_gloo_ranks_see_the_one_process_views_at_every_step(tmp_path):
    """End to end (CLI, gloo, the quickstart's ``augment_on: device``): at every step of 2 epochs the
    2 ranks' batches of 8 together hold the samples and views of one process's batch of 16. Catches
    anything the in-process test above stubs out (Lightning's sampler injection, the seed reaching
    the ranks, the epoch reaching the views)."""
    cli_fit(tmp_path / "one", "--trainer.devices=1", "--data.init_args.batch_size=16")
    cli_fit(tmp_path / "two", "--trainer.devices=2", "--trainer.strategy=ddp", "--data.init_args.batch_size=8")
    for step in range(1, 9):  # 4 steps per epoch
        single = torch.load(tmp_path / "one" / f"step{step}_rank0.pt", weights_only=True)
        ranks = [torch.load(tmp_path / "two" / f"step{step}_rank{rank}.pt", weights_only=True) for rank in range(WORLD)]
        assert not ranks[0].keys() & ranks[1].keys(), step
        assert ranks[0].keys() | ranks[1].keys() == single.keys(), step
        for shard in ranks:
            for index, views in shard.items():
                torch.testing.assert_close(views, single[index], rtol=0, atol=1e-6)
