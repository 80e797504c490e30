"""TensorBoard's embedding projector (``ssl_app.projector``) at the end of ``fit``: a fixed, seeded
subset of evaluation images with their embeddings, labels and thumbnails (``add_embedding``).

    <log_dir>/projector_config.pbtxt            which embeddings there are (TensorBoard reads it)
    <log_dir>/<step:05d>/projector_<split>/     tensors.tsv  metadata.tsv  sprite.png

The PROJECTOR tab then shows the space the loss made (PCA, t-SNE, UMAP), each point an image.
"""

from __future__ import annotations

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
from ssl_app.projector import (
    DEFAULT_SAMPLES,
    DEFAULT_THUMBNAIL,
    check_projector_size,
    projector_subset,
    thumbnails,
    write_projector,
)


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
        max_samples: int = DEFAULT_SAMPLES,
        seed: int = 0,
        thumbnail_size: int = DEFAULT_THUMBNAIL,
        features: Literal["projection", "backbone"] = "projection",
        on_evaluate: bool = False,
    ) -> None:
        super().__init__()
        if split not in ("train", "val", "test"):
            raise ConfigError(f"EmbeddingProjector: split must be train, val or test, got {split!r}")
        check_projector_size(max_samples, thumbnail_size, "EmbeddingProjector", ("max_samples", "thumbnail_size"))
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
        write_projector(tensorboard.experiment, *self.embed_subset(trainer, pl_module), self.tag, trainer.global_step)

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
