"""The paths that run on a GPU in real use, on the device of the ``device`` fixture (tests/conftest.py:
``SSL_APP_TEST_DEVICE``, ``cpu`` by default; ``benchmarks/gpu_check.py`` runs this file with ``cuda``),
and the sync listing of ``benchmarks/syncs.py`` that watches their training steps there."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

from datamodules.augment import ViewAugmentation
from datamodules.device_augment import BatchViewAugmentation
from ssl_app.losses import InfoNCE
from ssl_app.methods import MemoryBank, MoCo, SimCLR
from ssl_app.metrics import alignment, tolerance, uniformity
from tests.helpers import tiny_data, tiny_trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from syncs import SYNC_MESSAGE, SyncListing  # noqa: E402

SMALL = dict(backbone="small_cnn", proj_hidden_dim=16, proj_dim=8, channels_last=True)
METHODS = {
    "simclr": lambda: SimCLR(loss=InfoNCE(0.5), **SMALL),
    "moco": lambda: MoCo(loss=InfoNCE(0.2), queue_size=32, **SMALL),
    "memory_bank": lambda: MemoryBank(loss=InfoNCE(0.2), **SMALL),
}


def training_step(listing: SyncListing, message: str) -> None:
    """Stands in for a method's training_step: raises what PyTorch raises on a synchronising call."""
    warnings.warn(message, UserWarning, stacklevel=1)


def test_sync_listing_names_the_line_inside_training_step_and_lets_other_warnings_through():
    """Catches the listing missing a sync (the warning filtered as seen once, or swallowed), blaming
    the warnings machinery instead of the caller's line, or eating unrelated warnings. On the CPU
    PyTorch's sync debug mode raises nothing, so the warning is raised by hand."""
    listing = SyncListing(own_code=[str(Path(__file__).parent) + "/"])
    with warnings.catch_warnings(record=True) as passed:
        warnings.simplefilter("default")  # Python's own: each line's warning once (the listing must count them all)
        for _ in range(3):
            listing.start()
            training_step(listing, f"called a {SYNC_MESSAGE}")
            training_step(listing, f"called a {SYNC_MESSAGE}")
            training_step(listing, "something else")
            listing.stop()
    (row,) = listing.sites()
    assert row["ours"].startswith("tests/benchmarks/test_on_device.py:") and row["ours"].endswith(" in training_step")
    assert row["code"] == "warnings.warn(message, UserWarning, stacklevel=1)"
    assert (row["count"], row["steps"], row["in_training_step"]) == (6, 3, True) and listing.steps == 3
    assert [str(w.message) for w in passed] == ["something else"] * 3


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_trains_on_the_device_in_its_precision_and_layout(tmp_path, device, name):
    """Catches a tensor left on the CPU (a mask, the queue, the bank, a generator: an error on a GPU),
    a loss that turns NaN in bf16, or a sync listing that does not follow the Trainer's steps. On CUDA:
    bf16-mixed and channels_last, views made on the device, and the syncs of each step printed."""
    torch.manual_seed(0)
    model = METHODS[name]()
    cuda = device.type == "cuda"
    listing = SyncListing()
    trainer = tiny_trainer(
        tmp_path, max_steps=3, accelerator="gpu" if cuda else "cpu", precision="bf16-mixed" if cuda else "32-true",
        callbacks=[listing], log_every_n_steps=1,
    )  # fmt: skip
    before = [p.detach().clone() for p in model.backbone.parameters()]
    trainer.fit(model, datamodule=tiny_data(augment_on="device", batch_size=16))
    assert listing.steps == 3 and trainer.global_step == 3
    assert all(p.device.type == device.type for p in model.parameters())
    convs = [m.weight for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.weight.shape[-1] > 1]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous() for w in convs)
    assert torch.isfinite(trainer.callback_metrics["train/loss_step"]).item()
    assert any(not torch.equal(a.cpu(), b.cpu()) for a, b in zip(before, model.backbone.parameters()))
    for row in listing.sites():
        print(f"{name}: sync {row['count']}× in {row['steps']} steps at {row['ours']} ({row['synchronised_at']})")


def test_metrics_on_the_device_match_float64_on_the_cpu(device):
    """Catches a metric whose chunked path indexes, masks or accumulates wrongly on another device."""
    generator = torch.Generator().manual_seed(0)
    za = torch.nn.functional.normalize(torch.randn(300, 16, generator=generator, dtype=torch.float64), dim=1)
    zb = torch.nn.functional.normalize(za + 0.3 * torch.randn(300, 16, generator=generator, dtype=torch.float64), dim=1)
    labels = torch.randint(0, 5, (300,), generator=generator)
    for metric, args in ((uniformity, (za,)), (alignment, (za, zb)), (tolerance, (za, labels))):
        expected = metric(*args)
        got = metric(*(a.to(device, torch.float32) if a.is_floating_point() else a.to(device) for a in args))
        assert got.device.type == device.type
        torch.testing.assert_close(got.cpu().double(), expected, rtol=1e-4, atol=1e-5)


def test_views_are_made_on_the_device_of_the_images(device):
    """Catches a crop grid, a jitter factor or the normalisation built on the CPU (a device mismatch
    on a GPU), and views out of the normalised range."""
    augmentation = BatchViewAugmentation(ViewAugmentation(crop_size=16, mean=(0.5,) * 3, std=(0.25,) * 3))
    images = torch.randint(0, 256, (8, 3, 20, 24), dtype=torch.uint8, device=device)
    views = augmentation(images, 2)
    assert len(views) == 2 and all(v.shape == (8, 3, 16, 16) and v.device.type == device.type for v in views)
    assert all(torch.isfinite(v).all().item() and v.abs().max().item() <= 2.0 + 1e-4 for v in views)


def test_data_workers_started_while_the_device_is_in_use_do_not_abort(device):
    """Issue 38 item 8: on CUDA, DataLoader workers forked from a process that had used the GPU aborted
    (``CUDA error: initialization error``, "terminate called") when they freed an inherited pinned or
    device tensor: the parent's garbage, collected in the child. Garbage of that kind (a cycle, freed
    only by the gc) is left right before the workers start; each loader of a run is read to its end.
    Catches workers that inherit the process's CUDA state (they start from a fork server on a GPU
    machine: ``ssl_app.workers``); a worker that aborts ends its loader with a RuntimeError here."""
    cuda = device.type == "cuda"
    copied = torch.ones(1 << 16).pin_memory() if cuda else torch.ones(1 << 16)
    garbage: list = [copied, copied.to(device, non_blocking=True), torch.ones(64, device=device)]
    garbage.append(garbage)
    del garbage, copied
    data = tiny_data(num_workers=2, pin_memory=cuda, augment_on="workers")
    data.setup("fit")
    for loader in (data.train_dataloader(), data.val_dataloader(), data.embedding_dataloader("train")):
        assert sum(len(batch[2]) for batch in loader) > 0
