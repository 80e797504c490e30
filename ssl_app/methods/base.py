"""What every contrastive method shares: encoder, projection head, loss strategy, optimiser.

A method's only job is ``contrast(batch) -> MaskedSimilarities``: turn a batch into the similarity
matrix and masks that every loss strategy reads (see ``ssl_app.losses.base``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Union

import lightning as L
import torch
import torch.nn.functional as F
from jsonargparse import lazy_instance
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from ssl_app.errors import ConfigError
from ssl_app.losses import ContrastiveLoss, InfoNCE
from ssl_app.models import BackboneName, build_backbone, build_projection_head
from ssl_app.models.backbones import NormName
from ssl_app.optim import Optimization


@dataclass
class MaskedSimilarities:
    """The method → loss hand-over: similarities plus masks.

    ``sim`` [N, M] raw cosine similarities of N anchors to M candidates, ``pos_mask`` and
    ``neg_mask`` [N, M] bool (build them with ``ssl_app.methods.masks``). ``views``: the
    online encoder's normalised embeddings of each local view ([B, d] each, in batch order);
    fill it outside training, so the metric callbacks need no second forward pass.
    """

    sim: Tensor
    pos_mask: Tensor
    neg_mask: Tensor
    views: Optional[tuple[Tensor, ...]] = None


class ContrastiveMethod(L.LightningModule, ABC):
    """Base LightningModule: ``images → backbone → projection head → L2-normalised z``.

    Batches are ``((view_1, view_2, ...), labels, indices)`` as the ``datamodules`` yield them;
    ``train_views`` says how many views a training batch needs (the datamodule builds that many).
    A new method subclasses this, implements :meth:`contrast`, and states in its constructor
    only its own options and the defaults it changes, passing the rest on as ``**kwargs``
    (README, "Writing a method", has a complete example).

    Args:
        loss: the loss strategy (any ``ssl_app.losses`` class, chosen by class path).
        backbone: ``small_cnn``, ``resnet18_cifar`` (3×3 stem, no max-pool), ``resnet18``, ``resnet50``.
        backbone_norm: normalisation inside ``small_cnn`` (``batch``, ``group`` or ``none``).
        proj_dim: dimension of the embedding z (the paper: 128).
        proj_hidden_dim: hidden width of an MLP head.
        proj_layers: 1 = linear head (the paper's), 2 = SimCLR's MLP.
        proj_batch_norm: BatchNorm inside an MLP head.
        optim: optimiser and learning-rate schedule (``ssl_app.optim.Optimization``).
        channels_last: keep the encoders' weights and input images in the channels-last memory
            layout (NHWC), which convolution kernels of CPUs and of GPUs with tensor cores run
            faster on (benchmarks/README.md has the measured effect).
        compile: compile the backbone(s) with ``torch.compile`` at the start of the run (the first
            steps then take longer while it compiles; needs a C++ compiler on the CPU).
    """

    train_views: int = 2

    def __init__(
        self,
        loss: ContrastiveLoss = lazy_instance(InfoNCE, temperature=0.5),
        backbone: BackboneName = "resnet18_cifar",
        backbone_norm: NormName = "batch",
        proj_dim: int = 128,
        proj_hidden_dim: int = 512,
        proj_layers: int = 2,
        proj_batch_norm: bool = True,
        optim: Optimization = Optimization(),
        channels_last: bool = False,
        compile: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(loss, ContrastiveLoss):
            raise ConfigError(f"model.loss must be an ssl_app.losses strategy, got {type(loss).__name__}")
        self.save_hyperparameters(ignore=["loss"])
        # A copy: the lazy default is one object shared by every model built without a loss.
        self.loss = copy.deepcopy(loss)
        self.optim = dataclasses.replace(optim)  # a copy: the default instance is shared
        self.embedding_dim = proj_dim
        self.backbone, self.feature_dim = build_backbone(backbone, backbone_norm)
        self.projection_head = build_projection_head(self.feature_dim, proj_hidden_dim, proj_dim, proj_layers, proj_batch_norm)
        self._mask_cache: dict[tuple, tuple[Tensor, Tensor]] = {}
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.compile_backbone = bool(compile)
        self._compiled = False

    # --- encoders -------------------------------------------------------------------------
    def forward(self, images: Tensor) -> Tensor:
        """Backbone features [B, feature_dim] (what linear and kNN evaluation read)."""
        return self.backbone(self.to_memory_format(images))

    def embed(self, images: Tensor) -> Tensor:
        """L2-normalised projections z [B, proj_dim] (what the loss and the metrics read)."""
        return F.normalize(self.projection_head(self.backbone(self.to_memory_format(images))), dim=1)

    def to_memory_format(self, images: Tensor) -> Tensor:
        """``images`` in the encoders' memory layout (``channels_last``); a no-op by default."""
        if self.memory_format is torch.contiguous_format or images.dim() != 4:
            return images
        return images.contiguous(memory_format=self.memory_format)

    def backbones(self) -> list[torch.nn.Module]:
        """The image encoders that ``compile`` compiles (MoCo adds its key backbone)."""
        return [self.backbone]

    def setup(self, stage: str) -> None:
        """Apply ``channels_last`` and ``compile`` (subclasses call this after changing modules)."""
        if self.memory_format is torch.channels_last:
            self.to(memory_format=torch.channels_last)
        if self.compile_backbone and not self._compiled:
            for module in self.backbones():
                module.compile()  # in place: parameter names and checkpoints stay as they were
            self._compiled = True

    # --- the one method-specific piece -----------------------------------------------------
    @abstractmethod
    def contrast(self, batch: Any) -> MaskedSimilarities:
        """Turn a batch ``(views, labels, indices)`` into anchors × candidates similarities and masks.

        Called by every train/val/test step; the loss strategy then reads ``(sim, pos_mask,
        neg_mask)``. Use ``self.embed`` for the trained embeddings, ``similarity`` for ``sim``
        (float32 even under autocast), ``ssl_app.distributed`` to gather candidates from every
        rank and ``ssl_app.methods.masks`` for the masks. Outside training (``not
        self.training``) fill ``MaskedSimilarities.views`` with the normalised embeddings of the first two
        views, which the metric callbacks read. State updates that must wait for backward
        (queues, banks) belong in ``on_after_backward``, which runs before any callback's
        ``on_train_batch_end`` (so a checkpoint of the step holds them).
        """

    # --- Lightning hooks ------------------------------------------------------------------
    def _step(self, batch: Any, stage: str) -> Union[Tensor, dict[str, Any]]:
        contrast = self.contrast(batch)
        on_step = stage == "train"
        # The loss diagnostics are logged per training step, so they are computed only on the
        # steps whose values the logger keeps (every trainer.log_every_n_steps).
        self.loss.stats_enabled = on_step and self._step_is_logged()
        loss = self.loss(contrast.sim, contrast.pos_mask, contrast.neg_mask)
        batch_size = contrast.sim.shape[0]
        self.log(
            f"{stage}/loss", loss, prog_bar=True, on_step=on_step, on_epoch=True, sync_dist=not on_step, batch_size=batch_size
        )
        if stage == "train":
            stats = {f"loss/{key}": value for key, value in self.loss.last_stats.items()}
            if stats:
                self.log_dict(stats, on_step=True, on_epoch=False, batch_size=batch_size)
            return loss
        # Validation/test: hand the view embeddings to callbacks (see ``MaskedSimilarities.views``).
        return {"loss": loss, "embeddings": contrast.views}

    def cached_masks(self, key: tuple, build: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """``build()``'s ``(pos_mask, neg_mask)``, built once per ``key`` and reused afterwards.

        For masks that depend only on the batch's shape (no labels, no per-step state): the key
        must name everything they depend on (sizes, rank, world size, device). Losses only read
        masks, so one pair serves every step; a few shapes are kept (e.g. a last, smaller batch).
        """
        masks = self._mask_cache.get(key)
        if masks is None:
            if len(self._mask_cache) >= 8:
                self._mask_cache.clear()
            masks = self._mask_cache[key] = build()
        return masks

    def _step_is_logged(self) -> bool:
        """Whether values logged with ``on_step=True`` now reach the logger (True without a Trainer)."""
        trainer = self._trainer
        if trainer is None:
            return True
        try:
            # Lightning's own rule (every log_every_n_steps, and on the last step before a stop).
            return bool(trainer._logger_connector.should_update_logs)
        except AttributeError:  # a Lightning without this property: compute every step
            return True

    def negatives_per_anchor(self, batch_size: int, world_size: int) -> Optional[int]:
        """How many negatives one anchor has in a training step (``None``: unknown); for warnings."""
        return None

    def ignored_options(self) -> list[str]:
        """Options set to a non-default value that this configuration does not use."""
        ignored = []
        if self.hparams.get("proj_layers") == 1:
            for name, default in (("proj_hidden_dim", 512), ("proj_batch_norm", True)):
                if self.hparams.get(name, default) != default:
                    ignored.append(f"{name} (a linear head, proj_layers=1, has no hidden layer)")
        return ignored

    def on_train_start(self) -> None:
        """Name the settings that silently do nothing, once, before the first step."""
        trainer = self.trainer
        batch_size = getattr(trainer.datamodule, "batch_size", None) if trainer.datamodule is not None else None
        kept = getattr(self.loss, "num_negatives", None)
        available = None if batch_size is None else self.negatives_per_anchor(batch_size, trainer.world_size)
        if kept is not None and available is not None and kept >= available:
            same_as = "Simple" if type(self.loss).__name__ == "HardSimple" else "InfoNCE"
            rank_zero_warn(
                f"{type(self.loss).__name__}: num_negatives={kept} keeps every negative: an anchor of "
                f"{type(self).__name__} has {available} negatives (batch {batch_size} per process × "
                f"{trainer.world_size} process(es)), so this loss is exactly {same_as}; lower num_negatives"
            )
        for option in self.ignored_options():
            rank_zero_warn(f"{type(self).__name__}: model.{option} is ignored")

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return self._step(batch, "test")

    def configure_optimizers(self) -> dict:
        trainer = self.trainer
        per_process_batch = getattr(trainer.datamodule, "batch_size", None) or self.optim.reference_batch_size
        global_batch = per_process_batch * trainer.world_size * trainer.accumulate_grad_batches
        total_steps = int(trainer.estimated_stepping_batches)  # also sizes the train dataloader
        # Optimiser steps per epoch from the dataloader, not total / max_epochs: a run bounded by
        # max_steps would otherwise place multistep milestones and warm-up at the wrong step.
        batches = trainer.num_training_batches
        if math.isfinite(batches):
            steps_per_epoch = max(math.ceil(batches / trainer.accumulate_grad_batches), 1)
        else:  # an iterable dataloader without a length
            steps_per_epoch = max(total_steps // max(trainer.max_epochs or 1, 1), 1)
        return self.optim.build(self.parameters(), global_batch, steps_per_epoch, total_steps)


def similarity(anchors: Tensor, candidates: Tensor) -> Tensor:
    """Cosine similarities of normalised rows, computed in float32 even under autocast.

    A bf16 matmul would round s to ~3 significant digits, which at τ = 0.01 is an error of
    ~0.4 in the logits; the [N, M] product is cheap next to the encoder.
    """
    with torch.autocast(device_type=anchors.device.type, enabled=False):
        return anchors.float() @ candidates.float().T
