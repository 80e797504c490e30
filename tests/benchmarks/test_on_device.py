"""The paths that run on a GPU in real use, on the device of the ``device`` fixture (tests/conftest.py:
``SSL_APP_TEST_DEVICE``, ``cpu`` by default; ``benchmarks/gpu_check.py`` runs this file with ``cuda``),
and the sync listing of ``benchmarks/syncs.py`` that watches their training steps there."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger
from PIL import Image

from datamodules.augment import ViewAugmentation
from datamodules.device_augment import BatchViewAugmentation
from datamodules.keyed_draws import ViewKeys, keyed_uniforms
from datamodules.view_graphs import ViewGraphs
from ssl_app.health import NumericalHealth
from ssl_app.losses import InfoNCE
from ssl_app.methods import MemoryBank, MoCo, SimCLR
from ssl_app.metrics import alignment, tolerance, uniformity
from tests.helpers import tiny_data, tiny_trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from syncs import PROTOTYPE_MESSAGE, SYNC_MESSAGE, SyncListing  # noqa: E402

# torch's notice, word for word as a GPU printed it (gpu_check, 2026-11-28)
PROTOTYPE_NOTICE = (
    f"{PROTOTYPE_MESSAGE} and does not yet detect all synchronizing operations "
    "(Triggered internally at /pytorch/torch/csrc/cuda/Module.cpp:1003.)"
)

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
    listing = SyncListing(own_code=[str(Path(__file__).parent) + "/"], host_reads=False)
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


def test_sync_listing_absorbs_torchs_notice_that_the_debug_mode_is_a_prototype(device, monkeypatch):
    """Catches the notice PyTorch prints when the sync debug mode is turned on (on CUDA, once per
    process) passed through as a warning of the run or counted as a sync, and the mode left on. On
    the CPU, torch.cuda's three calls are stood in for as CUDA behaves (the notice raised from inside
    ``set_sync_debug_mode``); on CUDA they are the real ones, and the notice is also raised by hand,
    since PyTorch raises it only once per process."""
    modes = []
    if device.type == "cpu":

        def set_mode(mode):
            modes.append(mode)
            warnings.warn(PROTOTYPE_NOTICE, UserWarning, stacklevel=1)  # as TORCH_WARN from C++ reaches Python

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
        monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_mode)
    listing = SyncListing(own_code=[str(Path(__file__).parent) + "/"], host_reads=False)
    with warnings.catch_warnings(record=True) as passed:
        warnings.simplefilter("always")
        for _ in range(2):
            listing.start()
            training_step(listing, PROTOTYPE_NOTICE)
            training_step(listing, f"called a {SYNC_MESSAGE}")
            listing.stop()
    assert [str(w.message) for w in passed] == []
    (row,) = listing.sites()
    assert row["count"] == 2 and row["synchronised_at"].endswith("in training_step")
    if device.type == "cpu":
        assert modes == ["warn", 0, "warn", 0]
    else:
        assert torch.cuda.get_sync_debug_mode() == 0


class OnTheDevice(Callback):
    """What must hold while training (Lightning's teardown moves the module back to the CPU after
    ``fit``): at every step's end, every parameter on the device, the convolutions in NHWC, a finite loss."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.seen = device, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        convs = [m.weight for m in pl_module.modules() if isinstance(m, torch.nn.Conv2d) and m.weight.shape[-1] > 1]
        nhwc = [w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous() for w in convs]
        self.seen.append({
            "on_device": all(p.device.type == self.device.type for p in pl_module.parameters()),
            "nhwc": bool(nhwc) and all(nhwc),
            "finite": torch.isfinite(outputs["loss"]),  # read after the fit (a read here would be a sync)
        })  # fmt: skip


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_trains_on_the_device_in_its_precision_and_layout(tmp_path, device, name):
    """Catches a tensor left on the CPU (a mask, the queue, the bank, a generator: an error on a GPU),
    a loss that turns NaN in bf16, or a sync listing that does not follow the Trainer's steps. On CUDA:
    bf16-mixed and channels_last, views made on the device, and the syncs of each step printed."""
    torch.manual_seed(0)
    model = METHODS[name]()
    cuda = device.type == "cuda"
    listing, checks = SyncListing(), OnTheDevice(device)
    trainer = tiny_trainer(
        tmp_path, max_steps=3, accelerator="gpu" if cuda else "cpu", precision="bf16-mixed" if cuda else "32-true",
        callbacks=[listing, checks], log_every_n_steps=1,
    )  # fmt: skip
    before = [p.detach().clone() for p in model.backbone.parameters()]
    trainer.fit(model, datamodule=tiny_data(augment_on="device", batch_size=16))
    assert listing.steps == 3 and trainer.global_step == 3
    seen = [step | {"finite": bool(step["finite"])} for step in checks.seen]
    assert seen == [{"on_device": True, "nhwc": True, "finite": True}] * 3
    assert torch.isfinite(trainer.callback_metrics["train/loss_step"]).item()
    assert any(not torch.equal(a.cpu(), b.cpu()) for a, b in zip(before, model.backbone.parameters()))
    for row in listing.sites():
        print(f"{name}: sync {row['count']}× in {row['steps']} steps at {row['ours']} ({row['synchronised_at']})")


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_training_step_that_does_not_log_never_waits_for_the_device(tmp_path, device, name):
    """Catches a host-device sync in a step that does not log: the numerical health check reading its
    flag, a number logged every step (copied to the device), a progress-bar value (Lightning turns
    each into a number after every batch), an ``.item()`` or a boolean test of a tensor anywhere in the
    step, the hooks, the logging or the next batch's views. On CUDA: PyTorch's sync debug mode; on the
    CPU, where it reports nothing, the listing counts the host reads instead (``benchmarks/syncs.py``),
    with the health check deciding on the device as it does by default on a GPU (``read_every_step: false``).
    The logged steps must show the reads they do make (the health flag), so a listing that records
    nothing fails too."""
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    listing = SyncListing()
    trainer = tiny_trainer(
        tmp_path, max_steps=8, accelerator="gpu" if cuda else "cpu", precision="bf16-mixed" if cuda else "32-true",
        callbacks=[listing, NumericalHealth(read_every_step=False if not cuda else None)], log_every_n_steps=3,
        enable_progress_bar=True, logger=TensorBoardLogger(tmp_path, name="tb"),
    )  # fmt: skip
    trainer.fit(METHODS[name](), datamodule=tiny_data(augment_on="device", batch_size=16))
    sites = listing.sites()
    for row in sites:
        print(f"{name}: {row['count']}× in {row['steps']} steps ({row['unlogged']}× in steps that do not log) at {row['ours']}")
    assert trainer.global_step == 8 and listing.logged == [2, 5] and listing.unlogged_steps == 5
    assert [row["ours"] for row in sites if row["unlogged"]] == []
    assert any("ssl_app/health.py" in row["ours"] and row["steps"] >= 2 for row in sites)


def test_a_nan_step_is_skipped_on_the_device_by_the_fused_optimiser(tmp_path, device, monkeypatch):
    """Issue 38 item 2 with item 4's fused optimiser: on CUDA, SGD is torch's fused one and the health
    check hands it the skip as ``found_inf`` (no copy of the parameters, no host read). Catches a flag
    the fused kernel ignores or reads wrongly on a GPU (a NaN gradient applied, the momentum moved), or
    the fused path not taken there. A NaN gradient at step 2 of 4, not logged: the parameters and
    momentum after it equal those before it, bit for bit. On the CPU the fused SGD is asked for."""
    from tests.ssl_app.test_numerical_health import Poisoned, same_bits

    cuda = device.type == "cuda"
    if not cuda:
        monkeypatch.setattr("ssl_app.optim.fused_pays", lambda params: True)
    torch.manual_seed(0)
    model = Poisoned(nan_grad_at=[2], backbone="small_cnn", proj_hidden_dim=16, proj_dim=8, channels_last=True)
    model.record = True
    health = NumericalHealth(on_nonfinite="skip", read_every_step=None if cuda else False)
    trainer = tiny_trainer(
        tmp_path, max_steps=4, accelerator="gpu" if cuda else "cpu", precision="bf16-mixed" if cuda else "32-true",
        callbacks=[health], log_every_n_steps=50,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skip's own warning
        trainer.fit(model, datamodule=tiny_data(augment_on="device", batch_size=16))
    assert trainer.optimizers[0].defaults["fused"] and health.skipped == 1
    after = model.after
    assert same_bits(after[1], after[2]) and not same_bits(after[0], after[1]) and not same_bits(after[2], after[3])


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


def test_jpegs_of_mixed_sizes_decode_and_augment_on_the_device(tmp_path, device):
    """The path of ``augment_on: device`` for image folders (``datamodules.decoded_views``): nvJPEG's
    pixels within torchvision's own tolerance of PIL's (a mean of 2 levels; libjpeg-turbo's on the
    CPU: equal), views of mixed sizes made on the device close to the CPU's from the same keys, and a
    truncated JPEG either named in one error or decoded as far as it goes, the device still usable
    (not a CUDA error that poisons the process)."""
    from datamodules.decoded_views import decode_images, encoded_views
    from datamodules.encoded_images import EncodedImages, collate_encoded
    from datamodules.image_files import CorruptImageError
    from tests.datamodules.test_encoded_images import truncated_jpeg, write_photos

    paths = write_photos(tmp_path, [(320, 240), (517, 333), (300, 300), (241, 480)])
    paths += write_photos(tmp_path, [(250, 260)], seed=1, mode="L") + write_photos(tmp_path, [(90, 70)], seed=2, suffix=".png")
    data = EncodedImages([(str(path), 0) for path in paths])
    batch = collate_encoded([data[(0, 0, k)] for k in range(len(paths))])[0]
    images = decode_images(batch, device)
    for path, image in zip(paths, images):
        pil = torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy()).permute(2, 0, 1)
        assert image.device.type == device.type and image.dtype == torch.uint8 and image.shape == pil.shape, path.name
        assert (image.cpu().float() - pil.float()).abs().mean().item() < 2.0, path.name
    augmentation = BatchViewAugmentation(ViewAugmentation(crop_size=64, blur_prob=0.5, mean=(0.5,) * 3, std=(0.25,) * 3))
    keys = torch.tensor([(0, 0, k) for k in range(len(paths))], dtype=torch.int64)
    views = encoded_views(batch, augmentation, 2, device, keys)
    on_cpu = encoded_views(batch, augmentation, 2, torch.device("cpu"), keys)
    assert all(v.shape == (len(paths), 3, 64, 64) and v.device.type == device.type for v in views)
    for view, expected in zip(views, on_cpu):
        assert (view.cpu() - expected).abs().mean().item() < 0.1  # decoders differ by ~1 level, not the draws

    broken = truncated_jpeg(tmp_path / "broken.jpg")
    bad = collate_encoded([data[(0, 0, 0)], EncodedImages([(str(broken), 0)])[0]])[0]
    try:
        decoded = decode_images(bad, device)
    except CorruptImageError as error:
        assert str(broken) in str(error)
    else:
        assert decoded[1].shape == (3, 90, 120)
    assert torch.equal(decode_images(batch, device)[0].cpu(), images[0].cpu())


def test_keyed_views_on_the_device_are_those_of_the_cpu(device):
    """Catches the keyed hash computed otherwise on the device (an integer overflow, a word table
    left on the CPU: a device mismatch on a GPU) and keyed views that depend on where they are made:
    the same keys give the same numbers exactly and the same views as on the CPU."""
    augmentation = BatchViewAugmentation(ViewAugmentation(crop_size=16, hue=0.3))
    images = torch.randint(0, 256, (8, 3, 20, 24), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    index = torch.tensor([0, 5, 2**32 + 1, 7, 9, 11, 13, 15])
    numbers = keyed_uniforms(3, 1, index.to(device), 2, 35)
    assert numbers.device.type == device.type and torch.equal(numbers.cpu(), keyed_uniforms(3, 1, index, 2, 35))
    on_cpu = augmentation(images, 2, keys=ViewKeys(3, 1, index))
    on_device = augmentation(images.to(device), 2, keys=ViewKeys(3, 1, index.to(device)))
    for a, b in zip(on_cpu, on_device):
        assert b.device.type == device.type
        torch.testing.assert_close(b.cpu(), a, rtol=0, atol=2e-3)  # matrix products of another library


def test_training_views_replayed_from_a_cuda_graph_are_the_eager_views(device):
    """Issue 38 item 4: the training path replays the keyed views of a batch shape from one CUDA graph
    (``datamodules.view_graphs``). Catches views that differ from the eager call's by a bit (another
    kernel, a constant re-made inside the capture), inputs not refreshed between batches, the seed or
    epoch baked into the graph (the second epoch would repeat the first's views), a graph captured per
    batch, and a capture that fails on CUDA (the shape would stay eager: ``graph`` None). On CUDA the
    real capture; on the CPU a stand-in that replays the captured call eagerly (what the buffer logic
    needs). CIFAR-10's augmentation, 64 images × 2 views of 32 px, 3 batches in each of 2 epochs."""
    from tests.datamodules.test_view_graphs import StandIn

    eager = BatchViewAugmentation(ViewAugmentation())
    cuda = device.type == "cuda"
    graphs = ViewGraphs() if cuda else ViewGraphs(capture=StandIn(), devices=("cpu",))
    generator = torch.Generator(device=device).manual_seed(0)
    for epoch in (0, 3):
        for _ in range(3):
            images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, device=device, generator=generator)
            index = torch.randperm(50_000, device=device, generator=generator)[:64]
            keys = ViewKeys(5, epoch, index)
            replayed = graphs(eager, images, 2, keys)
            expected = eager(images, 2, keys=keys)
            assert all(a.device.type == device.type and torch.equal(a, b) for a, b in zip(replayed, expected)), (epoch,)
    assert [graph is not None for graph in graphs._graphs.values()] == [True]  # one shape, captured once


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
