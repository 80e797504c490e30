"""``python -m ssl_app embed``: clean-transform features of the run's data or of an image folder, and no ``predict``."""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules.augment import ViewAugmentation
from ssl_app.cli.embed import main
from ssl_app.models import build_backbone
from tests.helpers import cli_in, tiny_data
from tests.sprites import assert_tiles_show, expected_tiles, projector_entry, sprite_tiles
from tests.ssl_app.cli.test_cli import QUICKSTART, TINY
from tests.ssl_app.cli.test_export import TINY_DATA_CONFIG, checkpoint_backbone, export, trained_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return trained_checkpoint(tmp_path_factory.mktemp("run"), "small_cnn")


def embed(*args: str) -> dict[str, np.ndarray]:
    err = io.StringIO()
    *_, out = args
    status = main([*args[:-1], "--out", out], out=io.StringIO(), err=err)
    assert status == 0, err.getvalue()
    with np.load(out) as saved:
        return {key: saved[key] for key in saved.files}


def image_folder(root: Path, classes: list[str] | None) -> list[Path]:
    """Random 12×10 PNGs: 3 per class folder, or 3 directly in ``root`` when ``classes`` is None."""
    generator = np.random.default_rng(0)
    files = []
    for name in classes or [""]:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(3):
            path = folder / f"{index}.png"
            Image.fromarray(generator.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(path)
            files.append(path)
    return files


def test_without_data_it_embeds_the_runs_test_split_through_the_clean_transform(checkpoint, tmp_path):
    """Catches augmented views instead of the eval transform, another split than the one asked for, a
    backbone left in training mode, and labels or indices out of step with the features."""
    saved = embed("--ckpt", str(checkpoint), "--projections", "--batch-size", "5", str(tmp_path / "f.npz"))
    data = tiny_data()
    test = data.dataset("test")
    transform = data.augmentation.eval_transform()
    images = torch.stack([transform(test[i][0]) for i in range(len(test))])
    method_backbone = checkpoint_backbone(checkpoint)
    with torch.no_grad():
        expected = method_backbone(images)
    assert saved["features"].shape == (16, expected.shape[1])
    assert np.allclose(saved["features"], expected.numpy(), atol=1e-5)
    assert saved["labels"].tolist() == [int(test[i][1]) for i in range(len(test))]
    assert saved["indices"].tolist() == list(range(16))
    assert np.allclose(np.linalg.norm(saved["projections"], axis=1), 1.0, atol=1e-5)
    assert "paths" not in saved  # generated data has no files


def test_export_and_embed_round_trip_to_the_same_features(checkpoint, tmp_path):
    """Catches an export and an embedding that disagree: the exported weights, loaded as documented,
    must give the features ``embed`` saved (to float tolerance)."""
    saved = torch.load(export(tmp_path, checkpoint), weights_only=True)
    encoder, _ = build_backbone(saved["meta"]["backbone"], saved["meta"]["backbone_norm"])
    encoder.load_state_dict(saved["state_dict"])
    features = embed("--ckpt", str(checkpoint), "--split", "val", str(tmp_path / "f.npz"))["features"]
    data = tiny_data()
    images = torch.stack([data.augmentation.eval_transform()(image) for image, _ in data.dataset("val")])
    with torch.no_grad():
        assert np.allclose(features, encoder.eval()(images).numpy(), atol=1e-5)


def test_a_labelled_image_folder_gives_features_labels_paths_and_classes(checkpoint, tmp_path):
    """Catches labels that do not follow the class folders, paths out of step with the features, and a
    transform other than the run's (the folder's images are 12×10, the run's crop 8)."""
    files = image_folder(tmp_path / "images", ["cat", "dog"])
    saved = embed("--ckpt", str(checkpoint), "--data", str(tmp_path / "images"), str(tmp_path / "f.npz"))
    assert saved["classes"].tolist() == ["cat", "dog"] and saved["labels"].tolist() == [0, 0, 0, 1, 1, 1]
    assert [Path(p) for p in saved["paths"]] == files
    transform = ViewAugmentation(**TINY_DATA_CONFIG["init_args"]["augmentation"]).eval_transform()
    images = torch.stack([transform(Image.open(path).convert("RGB")) for path in files])
    with torch.no_grad():
        assert np.allclose(saved["features"], checkpoint_backbone(checkpoint)(images).numpy(), atol=1e-5)


def test_a_folder_without_class_folders_is_unlabelled(checkpoint, tmp_path):
    """Catches images without class folders refused, or labelled by an invented class."""
    files = image_folder(tmp_path / "flat", None)
    saved = embed("--ckpt", str(checkpoint), "--data", str(tmp_path / "flat"), str(tmp_path / "f.npz"))
    assert saved["labels"].tolist() == [-1, -1, -1] and [Path(p) for p in saved["paths"]] == files
    assert "classes" not in saved


def test_every_bad_input_is_one_line_naming_it_and_writes_nothing(checkpoint, tmp_path):
    """Catches a traceback, or an output file, for a missing data folder, an empty one, an output that
    exists, a file that is not a checkpoint, CUDA asked for where there is none, a bad batch size."""
    (tmp_path / "empty").mkdir()
    exists = tmp_path / "exists.npz"
    exists.write_bytes(b"keep")
    out = str(tmp_path / "new.npz")
    cases = [
        (["--ckpt", str(checkpoint), "--data", str(tmp_path / "nowhere"), "--out", out], "no such folder"),
        (["--ckpt", str(checkpoint), "--data", str(tmp_path / "empty"), "--out", out], "no image files"),
        (["--ckpt", str(checkpoint), "--out", str(exists)], "exists; pass --overwrite"),
        (["--ckpt", str(exists), "--out", out], "not a readable checkpoint"),
        (["--ckpt", str(tmp_path / "missing.ckpt"), "--out", out], "no such file"),
        (["--ckpt", str(checkpoint), "--batch-size", "0", "--out", out], "--batch-size must be >= 1"),
    ]
    if not torch.cuda.is_available():
        cases.append((["--ckpt", str(checkpoint), "--device", "cuda", "--out", out], "no CUDA device"))
    for args, expected in cases:
        err = io.StringIO()
        assert main(args, out=io.StringIO(), err=err) == 2
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: embed: ") and expected in lines[0], (args, lines)
    assert exists.read_bytes() == b"keep"
    assert sorted(os.listdir(tmp_path)) == ["empty", "exists.npz"]


def test_predict_is_not_offered_and_leaves_no_run_folder(tmp_path, capsys):
    """Catches ``predict`` offered by ``--help`` again (it failed with ``predict_dataloader must be
    implemented``) and a refused ``predict`` that leaves a ``version_N`` folder."""
    with pytest.raises(SystemExit) as stop:
        cli_in(tmp_path, ["--help"])
    assert stop.value.code == 0
    help_text = capsys.readouterr().out
    assert "{fit,validate,test}" in help_text and "predict" not in help_text and "embed --ckpt" in help_text
    with pytest.raises(SystemExit) as stop:
        cli_in(tmp_path, ["predict", "--config", QUICKSTART])
    assert stop.value.code == 2
    assert "invalid choice: 'predict'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_cli_exports_and_embeds_a_fitted_run(tmp_path, capsys):
    """Catches ``python -m ssl_app export``/``embed`` not dispatched by the CLI, or not reading a checkpoint
    that ``fit`` wrote (its saved config, its run's data), end to end."""
    cli_in(tmp_path, ["fit", "--config", QUICKSTART, *TINY, "--trainer.max_epochs=1"])
    ckpt = "runs/quickstart/version_0/checkpoints/last.ckpt"
    for args in (["export", "--ckpt", ckpt, "--out", "encoder.pt"], ["embed", "--ckpt", ckpt, "--out", "features.npz"]):
        with pytest.raises(SystemExit) as stop:
            cli_in(tmp_path, args)
        assert stop.value.code == 0, capsys.readouterr().err
    saved = torch.load(tmp_path / "encoder.pt", weights_only=True)
    encoder, _ = build_backbone(saved["meta"]["backbone"], saved["meta"]["backbone_norm"])
    encoder.load_state_dict(saved["state_dict"])
    with np.load(tmp_path / "features.npz") as features:
        assert features["features"].shape == (64, saved["meta"]["feature_dim"])  # the run's test split (TINY: 64)
        assert saved["meta"]["input"]["crop_size"] == 32 and (features["labels"] >= 0).all()


def test_projector_writes_the_seeded_subset_of_the_saved_rows(checkpoint, tmp_path):
    """Catches projector rows out of step with the .npz (another subset, order or vectors) and a
    config pointing at files that are not there."""
    from google.protobuf import text_format
    from tensorboard.plugins.projector import projector_plugin
    from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig

    from ssl_app.projector import projector_subset

    board = tmp_path / "board"
    saved = embed(
        "--ckpt", str(checkpoint), "--projections", "--projector", str(board), "--projector-samples", "5",
        "--thumbnail-size", "8", str(tmp_path / "f.npz"),
    )  # fmt: skip
    [entry] = text_format.Parse((board / "projector_config.pbtxt").read_text(), ProjectorConfig()).embeddings
    assert entry.tensor_name.startswith("projector_test")
    for path in (entry.tensor_path, entry.metadata_path, entry.sprite.image_path):
        assert (board / path).is_file(), path
    chosen = projector_subset(len(saved["indices"]), 5, seed=0).numpy()
    tensor = projector_plugin._read_tensor_tsv_file(str(board / entry.tensor_path))
    assert np.allclose(tensor, saved["projections"][chosen], atol=1e-5)
    rows = [line.split("\t") for line in (board / entry.metadata_path).read_text().splitlines()[1:]]
    assert [int(i) for _, i in rows] == saved["indices"][chosen].tolist()
    assert [int(label) for label, _ in rows] == saved["labels"][chosen].tolist()
    err = io.StringIO()
    assert (
        main(
            ["--ckpt", str(checkpoint), "--out", str(tmp_path / "g.npz"), "--projector", str(board), "--thumbnail-size", "2"],
            err=err,
        )
        == 2
    )
    assert err.getvalue().count("\n") == 1 and "--thumbnail-size" in err.getvalue()


def test_tile_i_of_the_projectors_sprite_is_the_image_of_row_i(checkpoint, tmp_path):
    """Catches thumbnails out of step with the rows (a whole batch kept instead of the subset's images,
    another order), or the run's normalisation not undone: each tile of the sprite, cut as TensorBoard
    cuts it, against its row's image through the run's clean transform, resized to 4 px."""
    board = tmp_path / "board"
    embed("--ckpt", str(checkpoint), "--projector", str(board), "--projector-samples", "7", "--thumbnail-size", "4",
          "--batch-size", "5", str(tmp_path / "f.npz"))  # fmt: skip
    entry = projector_entry(board)
    tiles, rest = sprite_tiles(board, entry)
    indices = [int(line.split("\t")[1]) for line in (board / entry.metadata_path).read_text().splitlines()[1:]]
    data = tiny_data()
    transform, test = data.augmentation.eval_transform(), data.dataset("test")
    images = torch.stack([transform(test[index][0]) for index in indices])
    assert len(indices) == 7 and images.shape[-1] == 8
    assert_tiles_show(tiles, expected_tiles(images, 4, data.augmentation.mean, data.augmentation.std))
    assert len(rest) == 2 and not rest.any()  # 7 tiles in a 3 × 3 grid


@contextmanager
def disk_full_after(size: int) -> Iterator[None]:
    """Every file this process writes stops at ``size`` bytes with an ``OSError`` (EFBIG), as on a full
    disk, whatever the code writes it with (the file-size limit, its signal ignored so the write fails).
    The console (a progress bar) is kept in memory meanwhile: a log file it may be written to is larger."""
    resource = pytest.importorskip("resource")  # POSIX
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def test_an_overwrite_that_fails_midway_leaves_the_previous_file_whole(checkpoint, tmp_path):
    """Catches ``--overwrite`` removing or truncating the previous file before the new one is complete
    (a direct write, an unlink first): the disk fills half-way through the new file's bytes, and the
    previous file must stay byte for byte, with one line saying what could not be written and no
    temporary file left beside it."""
    out = tmp_path / "features.npz"
    embed("--ckpt", str(checkpoint), str(out))
    before = out.read_bytes()
    err = io.StringIO()
    with disk_full_after(len(before) // 2):  # the new file (with projections) is larger than the old
        status = main(["--ckpt", str(checkpoint), "--projections", "--overwrite", "--out", str(out)], out=io.StringIO(), err=err)
    lines = err.getvalue().strip().splitlines()
    assert status == 1 and len(lines) == 1 and lines[0].startswith(f"error: embed: cannot write {out}"), lines
    assert out.read_bytes() == before
    assert os.listdir(tmp_path) == ["features.npz"]
    assert "projections" in embed("--ckpt", str(checkpoint), "--projections", "--overwrite", str(out))  # room again: replaced


def test_an_overwrite_whose_embedding_pass_fails_leaves_the_previous_file_whole(checkpoint, tmp_path):
    """Catches an output begun before the pass has finished (written batch by batch, or opened and
    truncated first): a folder embedded once, then again after a truncated image was added, which
    stops the pass at its last batch; the previous file stays byte for byte and the error names the image."""
    images = tmp_path / "images"
    image_folder(images, None)
    out = tmp_path / "features.npz"
    embed("--ckpt", str(checkpoint), "--data", str(images), str(out))
    before = out.read_bytes()
    for index in range(3, 6):
        (images / f"{index}.png").write_bytes((images / "0.png").read_bytes())
    (images / "6.png").write_bytes((images / "0.png").read_bytes()[:40])  # a header, then nothing
    err = io.StringIO()
    args = ["--ckpt", str(checkpoint), "--data", str(images), "--batch-size", "2", "--overwrite", "--out", str(out)]
    status = main(args, out=io.StringIO(), err=err)
    lines = err.getvalue().strip().splitlines()
    assert status == 2 and len(lines) == 1 and "6.png" in lines[0], lines
    assert out.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["features.npz", "images"]
