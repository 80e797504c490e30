"""Image folders of any size with ``augment_on: device``: files decoded on the device, views cropped
from each image at its own size (``datamodules.decoded_views``).

The argument: (1) the decoded pixels are PIL's (the worker path's reader); (2) each view's crop box
is drawn from its own image's size by the same keyed numbers as the one-size path, and every view
equals what the one-size path (``BatchViewAugmentation``, tested against torchvision and PIL in
test_device_augment.py) makes of that image alone with the same key; (3) end to end the views of
mixed sizes have the statistics of the worker path's; (4) in the Trainer such a folder trains, a
resumed run and DDP ranks see the same views, and a file that does not decode is named.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities.exceptions import SIGTERMException
from PIL import Image

from datamodules import ImageFolderDataModule, decoded_views
from datamodules.augment import ViewAugmentation
from datamodules.decoded_views import decode_images, encoded_views, mixed_size_views
from datamodules.device_augment import BatchViewAugmentation, sample_crop_boxes
from datamodules.encoded_images import EncodedImages, collate_encoded
from datamodules.image_files import CorruptImageError
from ssl_app.checkpointing import InterruptCheckpoint
from ssl_app.losses import InfoNCE
from ssl_app.methods import SimCLR
from tests.datamodules.test_device_augment import Z, ks_critical, ks_distances, mean_z, view_statistics
from tests.datamodules.test_encoded_images import photo, truncated_jpeg, write_photos
from tests.datamodules.test_resume_views import ViewLog, assert_same_batches
from tests.helpers import tiny_trainer

CPU = torch.device("cpu")
AUGMENTATION = ViewAugmentation(crop_size=16, hue=0.3, jitter_prob=0.8, grayscale_prob=0.3, blur_prob=0.5)


def batch_of(paths: list[Path], seed: int = 0, epoch: int = 0) -> tuple:
    data = EncodedImages([(str(path), k) for k, path in enumerate(paths)])
    return collate_encoded([data[(seed, epoch, k)] for k in range(len(paths))])


def keys_of(count: int, seed: int = 0, epoch: int = 0) -> torch.Tensor:
    return torch.tensor([(seed, epoch, k) for k in range(count)], dtype=torch.int64)


# --- (1) the pixels ------------------------------------------------------------------------------------
def test_decoded_pixels_are_pils(tmp_path):
    """On the CPU ``decode_jpeg`` and PIL are both libjpeg-turbo: the same pixels, exactly (on a GPU,
    nvJPEG's within a mean of 2 levels: tests/benchmarks/test_on_device.py). Catches channels or
    planes in another order, a grayscale JPEG left with one channel, and images out of batch order."""
    paths = write_photos(tmp_path, [(40, 30), (23, 31)]) + write_photos(tmp_path, [(35, 20)], seed=1, mode="L")
    paths += write_photos(tmp_path, [(18, 18)], seed=2, mode="CMYK") + write_photos(tmp_path, [(16, 22)], seed=3, suffix=".png")
    progressive = tmp_path / "progressive.jpg"
    photo(27, 19, seed=4).save(progressive, quality=85, progressive=True)
    paths.append(progressive)
    batch, _, _ = batch_of(paths)
    assert batch.jpeg_at == [0, 1, 2, 5] and batch.pixels_at == [3, 4]
    for path, image in zip(paths, decode_images(batch, CPU)):
        expected = torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy()).permute(2, 0, 1)
        assert image.dtype == torch.uint8 and torch.equal(image, expected), path.name


# --- (2) each image's own boxes, the one-size path's views ---------------------------------------------
def test_crop_boxes_of_mixed_sizes_are_each_sizes_own():
    """Row by row, the boxes drawn for many sizes at once are those drawn for each size alone, the
    fallback (no try fits an 8 × 64 image at 90% of its area) included; all lie inside their image."""
    sizes = [(8, 64), (40, 40), (300, 200), (33, 517), (64, 8)]
    n = 400
    uniform = torch.rand(n, 22, generator=torch.Generator().manual_seed(0))
    heights = torch.tensor([sizes[k % len(sizes)][0] for k in range(n)], dtype=torch.float32)
    widths = torch.tensor([sizes[k % len(sizes)][1] for k in range(n)], dtype=torch.float32)
    for min_scale in (0.9, 0.2):
        boxes = sample_crop_boxes(uniform, heights, widths, min_scale)
        for k, (height, width) in enumerate(sizes):
            rows = slice(k, None, len(sizes))
            assert torch.equal(boxes[rows], sample_crop_boxes(uniform[rows], height, width, min_scale)), (height, width)
        assert (boxes[:, :2] >= 0).all() and (boxes[:, 2:] >= 1).all()
        assert (boxes[:, 0] + boxes[:, 2] <= widths).all() and (boxes[:, 1] + boxes[:, 3] <= heights).all()


def uint8_images(sizes: list[tuple[int, int]], seed: int = 0) -> list[torch.Tensor]:
    return [torch.from_numpy(np.asarray(photo(w, h, seed + k)).copy()).permute(2, 0, 1) for k, (w, h) in enumerate(sizes)]


def test_each_view_is_what_the_one_size_path_makes_of_its_image_alone():
    """The views of a batch of mixed sizes are a function of each image and its key: each equals the
    one-size path's view of that image alone with the same ``(seed, epoch, index)`` (crop, flip,
    jitter, grayscale, blur, normalisation). Catches boxes drawn from another image's size (or the
    largest), keys or views out of order, other draws than the one-size path's, and another resampling."""
    sizes = [(40, 30), (23, 61), (64, 64), (16, 12), (50, 19)]
    images = uint8_images(sizes)
    augmentation = BatchViewAugmentation(AUGMENTATION)
    keys = torch.tensor([(3, 2, index) for index in (11, 4, 9, 0, 7)], dtype=torch.int64)
    views = mixed_size_views(images, augmentation, 3, keys)
    assert len(views) == 3 and all(v.shape == (5, 3, 16, 16) and v.dtype == torch.float32 for v in views)
    for b, image in enumerate(images):
        alone = augmentation(image.unsqueeze(0), 3, keys=keys[b : b + 1])
        for v in range(3):
            torch.testing.assert_close(views[v][b], alone[v][0], atol=2e-5, rtol=0)
    other_epoch = mixed_size_views(images, augmentation, 3, keys + torch.tensor([0, 1, 0]))
    assert not torch.equal(other_epoch[0], views[0]) and not torch.equal(views[0], views[1])


def test_a_batch_of_one_size_takes_the_one_size_path(tmp_path, monkeypatch):
    """One size: stacked, and the batched crops of ``BatchViewAugmentation`` (no per-image crops)."""
    paths = write_photos(tmp_path, [(24, 20)] * 3)
    batch, _, _ = batch_of(paths)
    monkeypatch.setattr(decoded_views, "mixed_size_views", lambda *args: pytest.fail("took the per-image path"))
    augmentation = BatchViewAugmentation(AUGMENTATION)
    views = encoded_views(batch, augmentation, 2, CPU, keys_of(3))
    images = torch.stack(decode_images(batch, CPU))
    expected = augmentation(images, 2, keys=keys_of(3))
    assert all(torch.equal(a, b) for a, b in zip(views, expected))


# --- (3) the statistics of the worker path --------------------------------------------------------------
N_VIEWS = 2000


@functools.cache
def mixed_images() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [photo(int(w), int(h), k) for k, (w, h) in enumerate(rng.integers(16, 57, (N_VIEWS, 2)))]


def test_views_of_mixed_sizes_have_the_worker_paths_statistics():
    """As test_device_augment.py compares the paths on images of one size: per view the channel means
    and spreads, the colour spread and the gradient (which the crop's scale sets), of the PIL
    pipeline and of the device path over images of 16–56 px a side."""
    augmentation = ViewAugmentation(crop_size=24, blur_prob=0.3)
    transform = augmentation.train_transform()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        worker = torch.stack([transform(image) for image in mixed_images()])
    images = [torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1) for image in mixed_images()]
    (device,) = mixed_size_views(images, BatchViewAugmentation(augmentation), 1, keys_of(N_VIEWS, seed=5))
    a, b = view_statistics(worker, augmentation), view_statistics(device, augmentation)
    assert mean_z(a, b).abs().max() < Z, mean_z(a, b)
    assert ks_distances(a, b).max() < ks_critical(N_VIEWS, N_VIEWS, comparisons=a.shape[1]), ks_distances(a, b)
    # Boxes drawn from the batch's largest size (images padded to it, as a padded batch would crop them)
    # are seen by the same comparison.
    wrong = [F.pad(image, (0, 56 - image.shape[2], 0, 56 - image.shape[1]), mode="replicate") for image in images]
    (bug,) = mixed_size_views(wrong, BatchViewAugmentation(augmentation), 1, keys_of(N_VIEWS, seed=5))
    c = view_statistics(bug, augmentation)
    assert mean_z(a, c).abs().max() >= Z or ks_distances(a, c).max() >= ks_critical(N_VIEWS, N_VIEWS, comparisons=a.shape[1])


# --- (4) in the Trainer ------------------------------------------------------------------------------------
def photo_folder(root: Path, per_class: int = 24) -> Path:
    """train/{a,b} of JPEGs of 14–40 px a side (one grayscale, one PNG among them), val/{a,b} of 2 each."""
    rng = np.random.default_rng(0)
    for k, name in enumerate(("a", "b")):
        sizes = [tuple(int(x) for x in size) for size in rng.integers(14, 41, (per_class - 2, 2))]
        write_photos(root / "train" / name, sizes, seed=k)
        write_photos(root / "train" / name, [(20, 17)], seed=10 + k, mode="L")
        write_photos(root / "train" / name, [(15, 26)], seed=20 + k, suffix=".png")
        write_photos(root / "val" / name, [(20, 20), (30, 18)], seed=30 + k)
    return root


def folder_data(root: Path, **options: Any) -> ImageFolderDataModule:
    settings = dict(batch_size=8, num_workers=0, augment_on="device", augmentation=ViewAugmentation(crop_size=12))
    return ImageFolderDataModule(str(root), **{**settings, **options})


def fit(run: Path, data_root: Path, seed: int, *, stop_at: int | None = None, ckpt_path: str | None = None, **data: Any) -> list:
    L.seed_everything(seed)
    interrupt = InterruptCheckpoint()
    log = ViewLog(interrupt, stop_at)
    model = SimCLR(loss=InfoNCE(), backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
    trainer = tiny_trainer(run, max_epochs=2, callbacks=[log, interrupt])
    if stop_at is None:
        trainer.fit(model, datamodule=folder_data(data_root, **data), ckpt_path=ckpt_path)
    else:
        with pytest.raises(SIGTERMException):
            trainer.fit(model, datamodule=folder_data(data_root, **data))
    return log.batches


def test_a_folder_of_mixed_sizes_trains_and_a_resumed_run_sees_the_same_views(tmp_path):
    """48 JPEGs of 14–40 px (and a grayscale JPEG and a PNG per class) train with ``augment_on: device``;
    interrupted mid-epoch and resumed under another seed, and with another ``num_workers``, the run
    sees the uninterrupted run's batches and views. Catches views drawn from a stateful RNG, a batch
    that cannot cross from a worker, and the worker's ``EncodedBatch`` reaching the method."""
    root = photo_folder(tmp_path / "data")
    straight = fit(tmp_path / "straight", root, 0, num_workers=1)
    assert len(straight) == 12 and straight[0][2].shape == (2, 8, 3, 12, 12)
    stop = 8  # mid-epoch 1
    interrupted = fit(tmp_path / "interrupted", root, 0, stop_at=stop)
    assert_same_batches(interrupted, straight[:stop])
    last = tmp_path / "interrupted" / "checkpoints" / "last.ckpt"
    assert_same_batches(fit(tmp_path / "resumed", root, 1, ckpt_path=str(last)), straight[stop:])


def rank_views(root: Path, rank: int, world: int, batch_size: int) -> dict[int, torch.Tensor]:
    """``{index: views}`` of epoch 1's first batch of ``rank`` of ``world`` processes (a stub Trainer,
    as test_resume_views.py's)."""
    data = folder_data(root, batch_size=batch_size)
    distributed = world > 1
    data.trainer = SimpleNamespace(
        world_size=world, global_rank=rank, training=True, lightning_module=None,
        distributed_sampler_kwargs={"num_replicas": world, "rank": rank},
        _accelerator_connector=SimpleNamespace(use_distributed_sampler=distributed, is_distributed=distributed),
    )  # fmt: skip
    data.setup("fit")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PL_GLOBAL_SEED", "5")
        loader = data.train_dataloader()
    loader.sampler.set_epoch(1)
    views, _, indices = data.on_after_batch_transfer(next(iter(loader)), 0)
    return dict(zip(indices.tolist(), torch.stack(views, dim=1)))


def test_ddp_ranks_together_see_the_one_process_batch_and_its_views(tmp_path):
    root = photo_folder(tmp_path)
    single = rank_views(root, 0, 1, 16)
    ranks = [rank_views(root, rank, 2, 8) for rank in range(2)]
    assert not ranks[0].keys() & ranks[1].keys() and ranks[0].keys() | ranks[1].keys() == single.keys()
    for shard in ranks:
        for index, views in shard.items():
            torch.testing.assert_close(views, single[index], rtol=0, atol=1e-6)


@pytest.mark.parametrize("on_bad_image", ["error", "skip"])
def test_a_jpeg_that_does_not_decode_stops_the_run_naming_it(tmp_path, on_bad_image):
    """The policy of ``on_bad_image`` for a file whose header reads but whose pixels do not: found when
    decoded (on the device), it stops the run in either mode with the one error that names it (a
    ConfigError: the CLI prints one ``error:`` line), not the decoder's error for the batch."""
    root = photo_folder(tmp_path / "data", per_class=8)
    broken = truncated_jpeg(root / "train" / "b" / "broken.jpg")
    with pytest.raises(CorruptImageError, match=f"corrupted or unreadable image: {broken}"):
        fit(tmp_path / "run", root, 0, on_bad_image=on_bad_image)


def test_when_the_batched_decode_fails_the_images_are_decoded_one_by_one(tmp_path, monkeypatch):
    """nvJPEG refusing a batch (a JPEG variant it does not read) costs a slower batch, not the run."""
    paths = write_photos(tmp_path, [(30, 20), (17, 40)]) + write_photos(tmp_path, [(12, 10)], seed=1, suffix=".png")
    batch, _, _ = batch_of(paths)
    expected = decode_images(batch, CPU)
    real = decoded_views.decode_jpeg

    def refuses_lists(data: Any, **options: Any) -> Any:
        if isinstance(data, list):
            raise RuntimeError("nvjpegDecodeBatched failed")
        return real(data, **options)

    monkeypatch.setattr(decoded_views, "decode_jpeg", refuses_lists)
    assert all(torch.equal(a, b) for a, b in zip(decode_images(batch, CPU), expected))
