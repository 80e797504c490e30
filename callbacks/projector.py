"""TensorBoard's embedding projector: a fixed, seeded subset of evaluation images with their
embeddings, labels and thumbnails (``SummaryWriter.add_embedding``).

    <log_dir>/projector_config.pbtxt            which embeddings there are (TensorBoard reads it)
    <log_dir>/<step:05d>/projector_<split>/     tensors.tsv  metadata.tsv  sprite.png

The PROJECTOR tab then shows the space the loss made (PCA, t-SNE, UMAP), each point an image.
"""

from __future__ import annotations

import math
from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from callbacks.embedding_pass import evaluation_mode, require_embedding_dataloader
from callbacks.plots import find_tensorboard
from ssl_app.errors import ConfigError

#: TensorBoard's projector draws a sprite image of at most 8192 × 8192 pixels.
MAX_SPRITE_SIDE = 8192
MAX_SAMPLES = 10_000


def projector_subset(n: int, max_samples: int, seed: int) -> Tensor:
    """The sorted indices of ``min(n, max_samples)`` samples of a split of ``n``, drawn without
    replacement by a generator seeded with ``seed``: the same subset at every call, in every run
    of the same data."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=generator)[:max_samples].sort().values


def thumbnails(images: Tensor, size: int, mean: tuple | None, std: tuple | None) -> Tensor:
    """[B, 3, size, size] images in [0, 1] for the sprite: the eval-transform images with their
    normalisation undone (``mean``/``std``; ``None``: each image stretched to [0, 1])."""
    images = images.float()
    if mean is not None and std is not None:
        images = images * torch.tensor(std).view(1, -1, 1, 1) + torch.tensor(mean).view(1, -1, 1, 1)
    else:
        low = images.amin(dim=(1, 2, 3), keepdim=True)
        high = images.amax(dim=(1, 2, 3), keepdim=True)
        images = (images - low) / (high - low).clamp(min=1e-12)
    return F.interpolate(images, size=(size, size), mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)


class EmbeddingProjector(Callback):
    """At the end of ``fit`` (and of ``validate``/``test`` with ``on_evaluate``), write
    ``max_samples`` images of ``split`` to TensorBoard's projector as ``projector_<split>``.

    The subset is fixed (``projector_subset``: seeded, the same in every run of the data), its
    images embedded by the clean (evaluation) transform through ``pl_module.embed`` (or the
    backbone with ``features: backbone``); metadata columns ``label`` and ``index`` (the sample's
    index in its split, so rows align with any other output); thumbnails ``thumbnail_size`` pixels
    square. Only global rank 0 embeds and writes (no collective: the other ranks are not waited
    for). Needs a TensorBoardLogger (warned once, else nothing written).

    Args:
        enabled: ``false`` writes nothing (the documented way to turn it off in a config).
        split: the split whose images are shown.
        max_samples: how many (1 … 10,000; the sprite must fit TensorBoard's 8192-pixel limit).
        seed: the subset's seed.
        thumbnail_size: thumbnail side in pixels (4 … 128).
        features: ``projection`` (the L2-normalised z the loss compared) or ``backbone``.
        on_evaluate: also write at the end of ``validate`` and ``test``.
    """

    def __init__(
        self,
        enabled: bool = True,
        split: Literal["train", "val", "test"] = "val",
        max_samples: int = 1000,
        seed: int = 0,
        thumbnail_size: int = 32,
        features: Literal["projection", "backbone"] = "projection",
        on_evaluate: bool = False,
    ) -> None:
        super().__init__()
        if split not in ("train", "val", "test"):
            raise ConfigError(f"EmbeddingProjector: split must be train, val or test, got {split!r}")
        if isinstance(max_samples, bool) or not isinstance(max_samples, int) or not 1 <= max_samples <= MAX_SAMPLES:
            raise ConfigError(f"EmbeddingProjector: max_samples must be an int in [1, {MAX_SAMPLES}], got {max_samples!r}")
        if isinstance(thumbnail_size, bool) or not isinstance(thumbnail_size, int) or not 4 <= thumbnail_size <= 128:
            raise ConfigError(f"EmbeddingProjector: thumbnail_size must be an int in [4, 128], got {thumbnail_size!r}")
        if math.ceil(math.sqrt(max_samples)) * thumbnail_size > MAX_SPRITE_SIDE:
            raise ConfigError(
                f"EmbeddingProjector: max_samples={max_samples} thumbnails of {thumbnail_size} px make a sprite wider than "
                f"TensorBoard's {MAX_SPRITE_SIDE} px; lower max_samples or thumbnail_size"
            )
        if features not in ("projection", "backbone"):
            raise ConfigError(f"EmbeddingProjector: features must be projection or backbone, got {features!r}")
        self.enabled = bool(enabled)
        self.split = split
        self.max_samples = max_samples
        self.seed = seed
        self.thumbnail_size = thumbnail_size
        self.features = features
        self.on_evaluate = bool(on_evaluate)

    @property
    def tag(self) -> str:
        return f"projector_{self.split}"

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.enabled:  # fail before training, not after it
            require_embedding_dataloader(trainer, "EmbeddingProjector (or set enabled: false)")

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.write(trainer, pl_module)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.on_evaluate and trainer.state.fn == TrainerFn.VALIDATING:
            self.write(trainer, pl_module)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.on_evaluate:
            self.write(trainer, pl_module)

    def write(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Embed the subset and hand it to ``add_embedding`` at ``trainer.global_step`` (rank 0 only)."""
        if not self.enabled or not trainer.is_global_zero:
            return
        tensorboard = find_tensorboard(trainer)
        if tensorboard is None:
            rank_zero_warn("EmbeddingProjector: no TensorBoardLogger, so the projector is not written")
            return
        embeddings, labels, indices, images = self.embed_subset(trainer, pl_module)
        tensorboard.experiment.add_embedding(
            embeddings,
            metadata=[[str(int(label)), str(int(index))] for label, index in zip(labels, indices)],
            metadata_header=["label", "index"],
            label_img=images,
            global_step=trainer.global_step,
            tag=self.tag,
        )
        tensorboard.experiment.flush()

    def embed_subset(self, trainer: L.Trainer, pl_module: L.LightningModule) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(embeddings [M, d], labels [M], indices [M], thumbnails [M, 3, s, s])`` of the subset, on the CPU."""
        datamodule = require_embedding_dataloader(trainer, "EmbeddingProjector")
        chosen = projector_subset(len(datamodule.dataset(self.split)), self.max_samples, self.seed)
        augmentation = getattr(datamodule, "augmentation", None)
        mean, std = getattr(augmentation, "mean", None), getattr(augmentation, "std", None)
        rows: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
        with evaluation_mode(pl_module), trainer.precision_plugin.forward_context():
            for views, labels, indices in datamodule.embedding_dataloader(self.split, views=1, augment=False):
                keep = torch.isin(indices, chosen)
                if not keep.any():
                    continue
                images = views[0][keep]
                batch = images.to(pl_module.device)
                z = pl_module.embed(batch) if self.features == "projection" else F.normalize(pl_module(batch), dim=1)
                small = thumbnails(images, self.thumbnail_size, mean, std)
                rows.append((z.float().cpu(), labels[keep].cpu(), indices[keep].cpu(), small))
        embeddings, labels, indices, images = (torch.cat(part) for part in zip(*rows))
        return embeddings, labels, indices, images
