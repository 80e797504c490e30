"""``python -m ssl_app embed --ckpt RUN/checkpoints/last.ckpt [--data PATH] --out features.npz``: features of a data set.

The checkpoint's backbone (``ssl_app.cli.export.load_encoder``), in eval mode, encodes every image
of a data set once through the run's clean (evaluation) transform — resize, centre crop,
normalise, as its ``augmentation`` says — in batches on the chosen device, with a progress bar.

- Without ``--data``: the split ``--split`` (default ``test``, the evaluation split) of the data
  the run was trained on, built from the run's saved config (``ssl_app.resume.checkpoint_config``).
- ``--data PATH``: an image folder, one sub-folder per class (``PATH/<class>/*``, labels in the
  sorted order of the class names) or images without class folders (labels -1).

The ``.npz`` (written atomically) holds ``features`` [N, feature_dim] float32, ``labels`` [N]
int64 (-1: unlabelled), ``indices`` [N] (each image's index in its split or folder), ``paths`` [N]
(the image files, where the data has files), ``classes`` (class names, where known) and, with
``--projections``, ``projections`` [N, proj_dim] (L2-normalised, what the loss compared).

This command reads data through ``datamodules`` (the run's datamodule, the transform and the image
reader), by class path like the CLI's configs: ``ssl_app`` imports no ``datamodules`` module at import time.
"""

from __future__ import annotations

import importlib
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from ssl_app.cli.export import TrainedEncoder, check_output, load_encoder, run_command
from ssl_app.cli.tool_options import embed_parser as parser
from ssl_app.errors import ConfigError, OutputError, causes, find_cause
from ssl_app.io.atomic import atomic_file
from ssl_app.normalisation import KEYS, settle_input, shown
from ssl_app.projector import (
    check_projector_size,
    projector_subset,
    thumbnails,
    write_projector,
)
from ssl_app.trust import import_trusted, is_known_class
from ssl_app.workers import loader_options


@dataclass
class EmbeddingData:
    """Batches of ``(images, labels, indices)`` in order, and what the ``.npz`` says about them."""

    loader: DataLoader
    paths: Optional[list[str]]
    classes: Optional[list[str]]
    description: str


class FolderImages(Dataset):
    """Image files with their labels, read as 8-bit RGB and put through ``transform``: ``(image, label, index)``."""

    def __init__(self, files: list[Path], labels: list[int], transform: Any) -> None:
        from datamodules.image_files import load_rgb  # the reader training used

        self.files, self.labels, self.transform, self.load = files, labels, transform, load_rgb

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        return self.transform(self.load(str(self.files[index]))), self.labels[index], index


def folder_data(path: Path, encoder: TrainedEncoder, batch_size: int, num_workers: int) -> EmbeddingData:
    """``--data PATH``: class folders (labelled) or a folder of images (unlabelled), through the run's eval transform."""
    from datamodules.image_files import list_images

    if not path.is_dir():
        raise ConfigError(f"--data: {path} is not a folder of images")
    direct = list_images_here(path)
    folders = sorted(entry for entry in path.iterdir() if entry.is_dir())
    if direct or not folders:  # images at the top: one unlabelled folder (its sub-folders' images too)
        files, labels, classes = list_images(path), None, None
    else:
        classes = [folder.name for folder in folders]
        files, labels = [], []
        read = [os.path.realpath(path)]  # shared: a link from one class folder into another is refused
        for label, folder in enumerate(folders):
            found = list_images(folder, read)
            files += found
            labels += [label] * len(found)
    if not files:
        raise ConfigError(f"--data: no image files in {path}")
    data = FolderImages(files, labels if labels is not None else [-1] * len(files), eval_transform(encoder))
    what = f"{len(files)} images of {path}" + (f" in {len(classes)} classes" if classes else " (no class folders: labels -1)")
    loader = DataLoader(data, batch_size=batch_size, shuffle=False, num_workers=num_workers, **loader_options(num_workers))
    return EmbeddingData(loader, [str(file) for file in files], classes, what)


def list_images_here(folder: Path) -> list[Path]:
    from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

    return [entry for entry in folder.iterdir() if entry.is_file() and has_file_allowed_extension(entry.name, IMG_EXTENSIONS)]


def eval_transform(encoder: TrainedEncoder) -> Any:
    """The run's evaluation transform (``ViewAugmentation.eval_transform`` of its saved augmentation)."""
    from datamodules.augment import ViewAugmentation

    augmentation = _saved_data_args(encoder).get("augmentation")
    if not isinstance(augmentation, dict):
        raise ConfigError(
            f"--ckpt: {encoder.meta['checkpoint']} does not record the data's augmentation, so the transform is unknown"
        )
    resolved = encoder.meta.get("input") or {}  # null crop size / normalisation: what the run read from its data
    filled = {key: resolved[key] for key in ("crop_size", "mean", "std") if augmentation.get(key) is None and key in resolved}
    return ViewAugmentation(**{**augmentation, **filled}).eval_transform()


def input_line(encoder: TrainedEncoder) -> str:
    """The one line saying where the crop size and normalisation ``embed`` feeds the encoder come from."""
    resolved = encoder.meta.get("input") or {}
    known = {key: resolved[key] for key in KEYS if resolved.get(key) is not None}
    missing = [key for key in KEYS if key not in known]
    if not known:
        return "embed: the encoder's input: the checkpoint records no crop size or normalisation"
    return f"embed: the encoder's input: {shown(known)} from the checkpoint" + (
        f"; {' and '.join(missing)} not recorded in it" if missing else ""
    )


def _saved_data_args(encoder: TrainedEncoder) -> dict[str, Any]:
    data = (encoder.config or {}).get("data")
    if not isinstance((data if isinstance(data, dict) else {}).get("class_path"), str):
        raise ConfigError(
            f"--ckpt: {encoder.meta['checkpoint']} does not record the config of its run (an older version wrote it); "
            "pass --data PATH"
        )
    return data.get("init_args") or {}


def run_data(encoder: TrainedEncoder, split: str, batch_size: int, num_workers: Optional[int]) -> EmbeddingData:
    """The split ``split`` of the run's own datamodule, rebuilt from its saved config, through the eval transform."""
    _saved_data_args(encoder)
    config = encoder.config["data"]  # type: ignore[index]
    class_path = config["class_path"]
    module = class_path.rpartition(".")[0]
    if not is_known_class(class_path):  # load_checkpoint refused it already; importing a module runs its code
        raise ConfigError(
            f"--ckpt: the run's datamodule {class_path} is not part of ssl_app; embed its data from Python after "
            f"`import {module}`, or pass --data PATH"
        )
    datamodule = instantiate_datamodule(config)
    settle_input(datamodule, encoder.meta.get("input"), "embed")  # not measured again: as the encoder was trained
    if num_workers is not None:
        datamodule.num_workers = num_workers
    loader = datamodule.embedding_dataloader(split, views=1, augment=False, batch_size=batch_size)
    dataset = datamodule.dataset(split)
    samples = getattr(dataset, "samples", None)  # torchvision's ImageFolder: (path, label) pairs
    paths = [str(sample[0]) for sample in samples] if isinstance(samples, list) else None
    classes = getattr(datamodule, "classes", None) or getattr(dataset, "classes", None)
    classes = [str(name) for name in classes] if isinstance(classes, (list, tuple)) else None
    what = f"the {split} split of {class_path} ({len(dataset)} images)"  # type: ignore[arg-type]
    return EmbeddingData(_single_view(loader), paths, classes, what)


class _single_view:  # noqa: N801 - a thin iterable adapter
    """``(views, labels, indices)`` batches of one view → ``(images, labels, indices)``."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self.dataset = loader.dataset  # its length: how many images there are

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Any:
        for views, labels, indices in self.loader:
            yield views[0], labels, indices


def instantiate_datamodule(config: dict[str, Any]) -> Any:
    """The datamodule a saved ``data`` config describes (``class_path`` + ``init_args``), as the CLI builds it."""
    from jsonargparse import ArgumentParser
    from lightning.pytorch import LightningDataModule

    importlib.import_module(config["class_path"].rpartition(".")[0])
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(LightningDataModule, "data")
    try:
        parsed = parser.parse_object({"data": config})
        instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # renamed in jsonargparse 4.49
        return instantiate(parsed).data
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - a config this version cannot build: say so in one line
        cause = find_cause(error, ConfigError) or list(causes(error))[-1]  # the reason, not jsonargparse's wrapping
        reason = " ".join(str(cause).split())[:300]
        raise ConfigError(
            f"--ckpt: the run's data ({config['class_path']}) cannot be built here: {reason}; pass --data PATH"
        ) from None


def choose_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available here; use --device cpu")
    return torch.device(name)


@dataclass
class ProjectorRequest:
    """``--projector``: the subset ``chosen`` (indices in the data) whose ``thumbnail_size``-pixel
    thumbnails ``embed`` keeps (``mean``/``std``: the normalisation to undo), in ``thumbnails``."""

    folder: Path
    chosen: torch.Tensor
    thumbnail_size: int
    mean: Optional[Sequence[float]]
    std: Optional[Sequence[float]]
    thumbnails: list[torch.Tensor] = field(default_factory=list)


@torch.inference_mode()
def embed(
    encoder: TrainedEncoder,
    data: EmbeddingData,
    device: torch.device,
    projections: bool,
    progress: bool = True,
    projector: Optional[ProjectorRequest] = None,
) -> dict[str, np.ndarray]:
    """Every batch of ``data`` through the backbone (and head): the arrays the ``.npz`` holds
    (``projector``: also keep the thumbnails of its subset, in index order)."""
    from tqdm import tqdm

    backbone = encoder.backbone.to(device).eval()
    head = encoder.head.to(device).eval() if projections and encoder.head is not None else None
    features, projected, labels, indices = [], [], [], []
    for images, batch_labels, batch_indices in tqdm(data.loader, desc="embed", unit="batch", disable=not progress):
        if projector is not None:
            keep = torch.isin(torch.as_tensor(batch_indices), projector.chosen)
            if keep.any():
                projector.thumbnails.append(thumbnails(images[keep], projector.thumbnail_size, projector.mean, projector.std))
        batch = backbone(images.to(device, non_blocking=True)).float()
        features.append(batch.cpu())
        if head is not None:
            projected.append(F.normalize(head(batch), dim=1).cpu())
        labels.append(torch.as_tensor(batch_labels))
        indices.append(torch.as_tensor(batch_indices))
    if not features:
        raise ConfigError(f"--data: {data.description} holds no images")
    arrays = {
        "features": torch.cat(features).numpy(),
        "labels": torch.cat(labels).long().numpy(),
        "indices": torch.cat(indices).long().numpy(),
    }
    if head is not None:
        arrays["projections"] = torch.cat(projected).numpy()
    if data.paths is not None:
        arrays["paths"] = np.asarray(data.paths)
    if data.classes is not None:
        arrays["classes"] = np.asarray(data.classes)
    return arrays


def write_npz(out: Path, arrays: dict[str, np.ndarray]) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    try:
        with atomic_file(out) as file:
            file.write(buffer.getvalue())
    except OSError as error:
        raise OutputError(f"cannot write {out}: {error.strerror or error}") from error


def main(args: Sequence[str], out: Any = None, err: Any = None) -> int:
    """Run ``embed``; return the exit status (0; 2 with one ``error:`` line for bad input; 1 when unwritable)."""
    return run_command(parser(), args, write_features, out, err)


def write_features(options: Any) -> list[str]:
    """Embed the data ``options`` name and write the ``.npz``; the lines that say what was written."""
    target = Path(options.out)
    if options.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {options.batch_size}")
    if options.num_workers is not None and options.num_workers < 0:
        raise ConfigError(f"--num-workers must be >= 0, got {options.num_workers}")
    check_output(target, options.overwrite)
    if options.data is not None and not Path(options.data).is_dir():
        missing = not Path(options.data).exists()
        raise ConfigError(f"--data: no such folder: {options.data}" if missing else f"--data: {options.data} is not a folder")
    device = choose_device(options.device)
    import_trusted(options.imports)
    import ssl_app.evaluation  # noqa: F401 - a probe's checkpoint names its class, which is ours: known (ssl_app.trust)

    encoder = load_encoder(options.ckpt)
    if options.projections and encoder.head is None:
        raise ConfigError(f"--projections: {options.ckpt} has no projection head")
    if options.data is not None:
        data = folder_data(Path(options.data), encoder, options.batch_size, options.num_workers or 0)
    else:
        data = run_data(encoder, options.split, options.batch_size, options.num_workers)
    request = projector_request(options, encoder, len(data.loader.dataset)) if options.projector else None
    arrays = embed(encoder, data, device, options.projections, projector=request)
    write_npz(target, arrays)
    shape = "×".join(str(n) for n in arrays["features"].shape)
    lines = [input_line(encoder), f"Wrote {target}: features {shape} of {data.description}, on {device}"]
    if request is not None:
        tag = "projector_folder" if options.data is not None else f"projector_{options.split}"
        lines.append(write_embed_projector(request, arrays, tag))
    return lines


def projector_request(options: Any, encoder: TrainedEncoder, size: int) -> ProjectorRequest:
    """``--projector``'s subset of the ``size`` images, its options checked."""
    check_projector_size(options.projector_samples, options.thumbnail_size, "embed", ("--projector-samples", "--thumbnail-size"))
    folder = Path(options.projector)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--projector: {folder} is not a folder")
    resolved = encoder.meta.get("input") or {}
    chosen = projector_subset(size, options.projector_samples, options.projector_seed)
    return ProjectorRequest(folder, chosen, options.thumbnail_size, resolved.get("mean"), resolved.get("std"))


def write_embed_projector(request: ProjectorRequest, arrays: dict[str, np.ndarray], tag: str) -> str:
    """Write the subset's rows (the projections if saved, else the features) to the projector."""
    from torch.utils.tensorboard import SummaryWriter

    rows = np.flatnonzero(np.isin(arrays["indices"], request.chosen.numpy()))
    vectors = torch.from_numpy(arrays.get("projections", arrays["features"])[rows])
    labels, indices = torch.from_numpy(arrays["labels"][rows]), torch.from_numpy(arrays["indices"][rows])
    try:
        with SummaryWriter(log_dir=str(request.folder)) as writer:
            write_projector(writer, vectors, labels, indices, torch.cat(request.thumbnails), tag, step=0)
    except OSError as error:
        raise OutputError(f"cannot write the projector to {request.folder}: {error.strerror or error}") from error
    return (
        f"Wrote {len(rows)} images to TensorBoard's projector in {request.folder} ({tag}; tensorboard --logdir {request.folder})"
    )
