"""TensorBoard's embedding projector (``ssl_app.projector``) at the end of training: a fixed, seeded
subset of evaluation images with their embeddings, labels and thumbnails (``add_embedding``).

    <log_dir>/projector_config.pbtxt            which embeddings there are (TensorBoard reads it)
    <log_dir>/<step:05d>/projector_<split>/     tensors.tsv  metadata.tsv  sprite.png

The PROJECTOR tab then shows the space the loss made (PCA, t-SNE, UMAP), each point an image.
"""

from __future__ import annotations

from typing import Literal

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from callbacks.embedding_pass import (
    PassRequest,
    cached_pass,
    device_images,
    encoder,
    evaluation_mode,
    inference_batch_size,
    require_embedding_dataloader,
)
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
    """At the end of training in ``fit`` (``on_train_end``: the model still on its device; and at
    the end of ``validate``/``test`` with ``on_evaluate``), write ``max_samples`` images of ``split``
    to TensorBoard's projector as ``projector_<split>``.

    The subset is fixed (``projector_subset``: seeded, the same in every run of the data), its
    images embedded by the clean (evaluation) transform through ``pl_module.embed`` (or the
    backbone with ``features: backbone``); metadata columns ``label`` and ``index`` (the sample's
    index in its split, so rows align with any other output); thumbnails ``thumbnail_size`` pixels
    square. Only global rank 0 embeds and writes (no collective: the other ranks are not waited
    for). Needs a TensorBoardLogger (warned once, else nothing written).

    What it costs: in one process, when the last evaluation embedded the split and the weights have
    not changed since (the kNN and metric callbacks' clean pass, ``embed_split``'s cache), no forward
    pass at all; else only the subset's images are embedded when the datamodule keeps the split on the
    device (``eval_on``), and the split is read through its embedding dataloader only on the worker
    path. Never through compiled code (``evaluation_mode``).

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

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Not on_fit_end: Lightning's teardown has then moved the model to the CPU.
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
        cached = self._cached_rows(trainer, pl_module, chosen)
        embed = encoder(pl_module, self.features)
        rows: list[tuple[Tensor | None, Tensor, Tensor, Tensor]] = []
        with evaluation_mode(pl_module), trainer.precision_plugin.forward_context():
            for images, labels, indices in self._subset_batches(datamodule, chosen, pl_module.device):
                z = None if cached is not None else embed(images.to(pl_module.device)).float().cpu()
                rows.append((z, labels.cpu(), indices.cpu(), thumbnails(images, self.thumbnail_size, mean, std)))
        embeddings = cached.float().cpu() if cached is not None else torch.cat([z for z, *_ in rows])
        labels, indices, images = (torch.cat(part) for part in list(zip(*rows))[1:])
        return embeddings, labels, indices, images

    def _subset_batches(self, datamodule, chosen: Tensor, device: torch.device):
        """``(eval-transform images, labels, indices)`` of the subset, in index order: from the
        datamodule's device images (``eval_on``) in batches of its ``inference_batch_size``, else
        the subset's rows of each batch of the split's embedding dataloader (the worker path)."""
        kept = device_images(datamodule, self.split, device)
        if kept is not None:
            for part in chosen.split(inference_batch_size(datamodule, device) or len(chosen)):
                images, labels = kept.select(part)
                yield images, labels, part
            return
        for views, labels, indices in datamodule.embedding_dataloader(self.split, views=1, augment=False):
            keep = torch.isin(indices, chosen)
            if keep.any():
                yield views[0][keep], labels[keep], indices[keep]

    def _cached_rows(self, trainer: L.Trainer, pl_module: L.LightningModule, chosen: Tensor) -> Tensor | None:
        """The subset's embeddings from the last evaluation's clean pass over the whole split, when
        it is current and this is the only process (a rank's pass holds only its shard)."""
        if trainer.world_size != 1:
            return None
        found = cached_pass(trainer, pl_module, self.split, 1, False, PassRequest(self.features, False, None))
        if found is None:
            return None
        rows = found.local()
        keep = torch.isin(rows.indices, chosen.to(rows.indices.device))
        if int(keep.sum()) != len(chosen):
            return None
        return rows.view_features(0)[keep]  # rows are in index order, as ``chosen`` is
