"""MoCo: a momentum key encoder and a queue of past keys as extra candidates (He et al. 2020)."""

from __future__ import annotations

import copy
import numbers
from typing import Any, Literal, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from jsonargparse import lazy_instance
from lightly.models.utils import deactivate_requires_grad, update_momentum
from lightly.utils.scheduler import cosine_schedule
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from ssl_app import distributed
from ssl_app.errors import ConfigError
from ssl_app.losses import ContrastiveLoss, InfoNCE
from ssl_app.methods.base import Contrast, ContrastiveMethod, similarity
from ssl_app.methods.queue import LabelledQueue
from ssl_app.methods.simclr import simclr_masks
from ssl_app.models import BackboneName
from ssl_app.models.backbones import NormName
from ssl_app.optim import Optimization

MomentumSchedule = Literal["constant", "cosine"]
KeyBatchNorm = Literal["shuffle", "sync", "none"]


def check_momentum(value: float, option: str) -> float:
    """Return ``value`` as a float; raise ``ConfigError`` naming ``option`` unless it is in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
        raise ConfigError(f"{option} must be in [0, 1), got {value!r}")
    return float(value)


def has_batch_norm(*modules: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for module in modules for m in module.modules())


class MoCo(ContrastiveMethod):
    """MoCo (v2 by default) with any loss strategy.

    The *query* encoder is the base's backbone + projection head, trained by the optimiser.
    The *key* encoder (``key_backbone`` + ``key_projection_head``) is a copy that receives no
    gradient and follows the query encoder by an exponential moving average,
    ``θ_k ← m·θ_k + (1 − m)·θ_q``, once per **optimiser** step (in ``optimizer_step``, so with
    ``accumulate_grad_batches = n`` it runs once every n batches; BatchNorm running statistics
    of the key encoder come from its own forward passes, as in MoCo).

    Anchors and candidates (``sim`` = anchors × candidates):

    - anchors: the queries of view 1 of the local batch (``symmetric``: of both views);
    - candidates: the keys of view 2 (``symmetric``: of both views) of the **global** batch,
      gathered from every DDP rank (rank-major), followed by the queue. Using the whole
      global batch (not only the local keys) makes N processes × B samples the same loss as
      one process with N·B samples (BatchNorm aside), and gives the current batch's other
      keys as fresh negatives on top of the queue.
    - positive: the key of the other view of the same image; every other key and every
      *filled* queue slot is a negative. With ``symmetric``, the query's key of its *own* view
      (a momentum copy of itself) is in neither mask: it is the positive of the other view's
      query, and pushing a query away from its own near-copy would be meaningless.
    - label-based losses (``loss.uses_labels``, SupCon): the positives are the key of the
      other view plus every key and queue entry with the anchor's label (labels < 0 mean
      "unlabelled" and never match); the negatives are the rest.

    The queue (``queue.features``, ``queue.labels``, ``queue.ptr``, ``queue.filled``) holds the
    last ``queue_size`` keys and their labels. After each training batch the keys
    of the *global* batch are appended in rank-major order, so every rank holds the identical
    queue. ``queue_size`` need not be a multiple of the keys per step (the ring wraps exactly,
    see :class:`~ssl_app.methods.queue.LabelledQueue`). The queue starts with random unit
    vectors, but the slots never written are masked out of both masks (``queue.filled``), so
    early steps contrast against real keys only. Validation and test compute the same loss
    without touching the queue. Queue and key encoder are persistent state (checkpoints).

    BatchNorm leakage (``key_bn``): with BatchNorm in the encoder, a query and its key
    computed in the same BatchNorm batch can "communicate" through the batch statistics and
    the task becomes easy without learning (He et al. 2020, "Shuffling BN").

    - ``shuffle`` (the default, MoCo v1/v2's remedy): under DDP, gather the key encoder's
      inputs from every rank, permute them with one permutation shared by all ranks, encode
      this rank's shard, gather the keys and undo the permutation. A key's BatchNorm batch is
      then a random subset of the global batch, unrelated to its query's. In a single process
      a permutation cannot change BatchNorm statistics, so it does nothing (and is skipped):
      the leakage is not prevented on one device. It is also skipped when the key encoder has
      no BatchNorm (e.g. ``backbone_norm: group`` with ``proj_batch_norm: false``).
    - ``sync``: the key encoder's BatchNorm layers become ``SyncBatchNorm`` (statistics over
      the global batch, MoCo v3's choice). PyTorch implements it on GPUs only, so more than
      one CPU process is rejected with a ``ConfigError``.
    - ``none``: keys are encoded per rank with ordinary BatchNorm.

    (``--trainer.sync_batchnorm=true`` converts every BatchNorm of the model, the key encoder's
    included, to ``SyncBatchNorm``; shuffling is then pointless but harmless.)

    Args:
        loss, backbone, backbone_norm, proj_dim, proj_hidden_dim, proj_layers,
            proj_batch_norm, optim: see ``ContrastiveMethod`` (the default loss here is
            InfoNCE with τ = 0.2, MoCo v2's).
        queue_size: number of past keys kept as extra candidates (MoCo: 65536 on ImageNet,
            4096 on CIFAR).
        momentum: the key encoder's EMA coefficient m ∈ [0, 1) (0.99 for CIFAR-size runs,
            0.999 in the ImageNet paper).
        momentum_schedule: ``constant``, or ``cosine`` from ``momentum`` at the first optimiser
            step to 1 at the last (BYOL / MoCo v3).
        key_bn: ``shuffle``, ``sync`` or ``none`` (above).
        symmetric: use both views as queries (each with the other view's key as positive),
            doubling anchors and keys per step.
    """

    def __init__(
        self,
        loss: ContrastiveLoss = lazy_instance(InfoNCE, temperature=0.2),
        backbone: BackboneName = "resnet18_cifar",
        backbone_norm: NormName = "batch",
        proj_dim: int = 128,
        proj_hidden_dim: int = 512,
        proj_layers: int = 2,
        proj_batch_norm: bool = True,
        optim: Optimization = Optimization(),
        queue_size: int = 4096,
        momentum: float = 0.99,
        momentum_schedule: MomentumSchedule = "constant",
        key_bn: KeyBatchNorm = "shuffle",
        symmetric: bool = False,
    ) -> None:
        if isinstance(queue_size, bool) or not isinstance(queue_size, numbers.Integral) or queue_size < 1:
            raise ConfigError(f"MoCo: queue_size must be an int >= 1, got {queue_size!r}")
        momentum = check_momentum(momentum, "MoCo: momentum")
        if momentum_schedule not in ("constant", "cosine"):
            raise ConfigError(f"MoCo: momentum_schedule must be 'constant' or 'cosine', got {momentum_schedule!r}")
        if key_bn not in ("shuffle", "sync", "none"):
            raise ConfigError(f"MoCo: key_bn must be 'shuffle', 'sync' or 'none', got {key_bn!r}")
        super().__init__(loss, backbone, backbone_norm, proj_dim, proj_hidden_dim, proj_layers, proj_batch_norm, optim)
        self.queue_size = int(queue_size)
        self.momentum = momentum
        self.momentum_schedule = momentum_schedule
        self.key_bn = key_bn
        self.symmetric = bool(symmetric)

        self.key_backbone = copy.deepcopy(self.backbone)
        self.key_projection_head = copy.deepcopy(self.projection_head)
        if key_bn == "sync":
            self.key_backbone = nn.SyncBatchNorm.convert_sync_batchnorm(self.key_backbone)
            self.key_projection_head = nn.SyncBatchNorm.convert_sync_batchnorm(self.key_projection_head)
        deactivate_requires_grad(self.key_backbone)
        deactivate_requires_grad(self.key_projection_head)
        self._key_has_bn = has_batch_norm(self.key_backbone, self.key_projection_head)

        self.queue = LabelledQueue(self.queue_size, proj_dim)
        # Every rank applies the same gathered update, so DDP must not broadcast the queue
        # from rank 0 before each forward (it would cost queue_size × proj_dim per step).
        self._ddp_params_and_buffers_to_ignore = [f"queue.{name}" for name, _ in self.queue.named_buffers()]
        self._pending: Optional[tuple[Tensor, Tensor]] = None
        self._total_steps: Optional[int] = None

    # --- key encoder ----------------------------------------------------------------------
    def key_embed(self, images: Tensor) -> Tensor:
        """L2-normalised keys [B, proj_dim] of the momentum encoder (no gradient)."""
        with torch.no_grad():
            return F.normalize(self.key_projection_head(self.key_backbone(images)), dim=1)

    @torch.no_grad()
    def global_keys(self, images: Tensor) -> Tensor:
        """Keys of every rank's ``images``, concatenated rank-major [world·B, proj_dim].

        In training with ``key_bn='shuffle'`` on several ranks (and BatchNorm in the key
        encoder), each rank encodes a random shard of the global batch (one permutation,
        broadcast from rank 0), and the keys are put back in the original order.
        """
        world = distributed.world_size()
        if not (self.training and self.key_bn == "shuffle" and world > 1 and self._key_has_bn):
            return distributed.gather(self.key_embed(images).float())
        all_images = distributed.gather(images)
        permutation = torch.randperm(all_images.shape[0], device=all_images.device)
        dist.broadcast(permutation, src=0)
        shard = permutation.view(world, -1)[distributed.rank()]
        shuffled_keys = distributed.gather(self.key_embed(all_images[shard]).float())
        # shuffled_keys[p] is the key of image permutation[p]
        keys = torch.empty_like(shuffled_keys)
        keys[permutation] = shuffled_keys
        return keys

    def momentum_at(self, step: int) -> float:
        """The EMA coefficient of optimiser step ``step`` (0-based)."""
        if self.momentum_schedule == "constant":
            return self.momentum
        total = self._total_steps
        if total is None:
            total = int(self.trainer.estimated_stepping_batches)
            self._total_steps = total
        return cosine_schedule(min(step, total), total, self.momentum, 1.0)

    @torch.no_grad()
    def update_key_encoder(self, momentum: float) -> None:
        """``θ_k ← m·θ_k + (1 − m)·θ_q`` for backbone and projection head (parameters only)."""
        update_momentum(self.backbone, self.key_backbone, momentum)
        update_momentum(self.projection_head, self.key_projection_head, momentum)

    # --- the contrast ---------------------------------------------------------------------
    def contrast(self, batch: Any) -> Contrast:
        views, labels, _ = batch
        if len(views) < 2:
            raise ValueError(f"MoCo needs 2 views per sample, got {len(views)}")
        view_1, view_2 = views[0], views[1]
        local_size = view_1.shape[0]
        world, rank = distributed.world_size(), distributed.rank()
        if self.symmetric:
            queries = self.embed(torch.cat([view_1, view_2], dim=0))
            keys = self.global_keys(torch.cat([view_1, view_2], dim=0))
            # Same layout as SimCLR's candidates: rank blocks of [keys of view 1; keys of view 2].
            own_key, positive = simclr_masks(local_size, 2, rank, world, queries.device)
            anchor_labels = labels.repeat(2)
        else:
            queries = self.embed(view_1)
            keys = self.global_keys(view_2)
            positive = torch.zeros(local_size, keys.shape[0], dtype=torch.bool, device=queries.device)
            positive[:, rank * local_size : (rank + 1) * local_size] = torch.eye(local_size, dtype=torch.bool, device=queries.device)
            own_key = torch.zeros_like(positive)
            anchor_labels = labels
        key_labels = distributed.gather(anchor_labels)

        sim = similarity(queries, torch.cat([keys, self.queue.features], dim=0))
        queue_valid = self.queue.valid()[None, :].expand(queries.shape[0], -1)
        if self.loss.uses_labels:
            labelled = anchor_labels[:, None] >= 0
            key_same = (anchor_labels[:, None] == key_labels[None, :]) & labelled & ~own_key
            queue_same = (anchor_labels[:, None] == self.queue.labels[None, :]) & labelled & queue_valid
            pos_mask = torch.cat([positive | key_same, queue_same], dim=1)
        else:
            pos_mask = torch.cat([positive, torch.zeros_like(queue_valid)], dim=1)
        usable = torch.cat([~own_key, queue_valid], dim=1)
        neg_mask = usable & ~pos_mask

        if self.training:
            self._pending = (keys, key_labels)
        return Contrast(sim, pos_mask, neg_mask)

    # --- Lightning hooks ------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        trainer = self._trainer
        if trainer is None:
            return
        if self.key_bn == "sync" and trainer.world_size > 1 and trainer.strategy.root_device.type == "cpu":
            raise ConfigError(
                "MoCo: key_bn='sync' needs GPUs (PyTorch's SyncBatchNorm has no CPU implementation); "
                "use key_bn='shuffle' for several CPU processes"
            )
        if stage == "fit" and self.key_bn == "shuffle" and trainer.world_size == 1 and self._key_has_bn:
            rank_zero_info(
                "MoCo: key_bn='shuffle' has no effect in a single process (BatchNorm statistics do not "
                "depend on the order of the batch); it prevents BatchNorm leakage only across several processes."
            )

    def on_train_start(self) -> None:
        self._total_steps = int(self.trainer.estimated_stepping_batches)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        # Lightning calls this once per optimiser step (not on accumulation batches).
        step = self.trainer.global_step
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        momentum = self.momentum_at(step)
        self.update_key_encoder(momentum)
        self.log("train/key_momentum", momentum, on_step=True, on_epoch=False, batch_size=1)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # The keys of this batch join the queue only after its loss (and backward) are done.
        if self._pending is not None:
            keys, labels = self._pending
            self._pending = None
            self.queue.enqueue(keys, labels)
