"""MoCo: a momentum key encoder and a queue of past keys as extra candidates (He et al. 2020)."""

from __future__ import annotations

import copy
from typing import Any, Literal, Optional

import torch
from jsonargparse import lazy_instance
from lightly.models.utils import deactivate_requires_grad, update_momentum
from lightly.utils.scheduler import cosine_schedule
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor, nn

from ssl_app import distributed
from ssl_app.checks import IntAtLeast2, PositiveInt, UnitIntervalOpenAbove, check_int, check_momentum
from ssl_app.errors import ConfigError
from ssl_app.losses import ContrastiveLoss, InfoNCE
from ssl_app.losses.base import MaskedSimilarities
from ssl_app.methods.base import ContrastiveMethod, similarity
from ssl_app.methods.masks import Members, contrast_masks, gathered_views, unmatched, views_of
from ssl_app.methods.registry import METHODS
from ssl_app.methods.stores import LabelledQueue, fill_unit_norms
from ssl_app.models.split_batchnorm import convert_to_split_batchnorm, has_batch_norm
from ssl_app.optim import run_length

MomentumSchedule = Literal["constant", "cosine"]
KeyBatchNorm = Literal["auto", "split", "shuffle", "sync", "none"]
KEY_BN_MODES = ("auto", "split", "shuffle", "sync", "none")
# Seed offset of the key-batch permutations (see ``MoCo._key_permutation``).
_KEY_SHUFFLE_SEED = 0x5EED


def resolve_key_bn(key_bn: str, world_size: int, has_bn: bool) -> str:
    """``auto``: ``none`` without BatchNorm, ``shuffle`` under DDP, ``split`` in one process."""
    if key_bn != "auto":
        return key_bn
    if not has_bn:
        return "none"
    return "shuffle" if world_size > 1 else "split"


@METHODS.register
class MoCo(ContrastiveMethod):
    """MoCo (v2 by default) with any loss strategy (README, "MoCo", has the background).

    Query encoder: the base's backbone + head, trained. Key encoder: a copy without gradient,
    ``θ_k ← m·θ_k + (1 − m)·θ_q`` once per optimiser step. Anchors are the queries of view 1
    (``symmetric``: of both views). The columns of ``sim`` are the keys of view 2 (``symmetric``:
    both) of the **global** batch, rank-major, then the queue of the last ``queue_size`` keys,
    then (``query_candidates``) the global batch's queries. The positive is the other view's key.
    By default, as in MoCo v1/v2, an anchor's candidates are that key and the queue only: the
    batch's other keys are in neither mask (``batch_negatives`` makes them candidates). With
    ``symmetric`` the query's key of its own view is in neither mask; queue slots never written
    are in neither mask; label-based losses add the candidates of the anchor's class among the
    queue (and among the batch's keys or queries when those are candidates). After each
    training batch the global keys join the queue, so every rank holds the same queue. A loss that
    ``needs_embedding_norms`` gets the projections' norms of the queries (with gradient), of the keys,
    of the queue (which then keeps each key's norm, ``LabelledQueue.keep_norms``) and of the queries
    among the candidates, gathered as the keys and queries are.

    Args:
        loss: the loss strategy (default InfoNCE, τ = 0.2, MoCo v2's).
        queue_size: past keys kept as extra candidates (4096 on CIFAR, 65536 on ImageNet).
        momentum: the EMA coefficient m ∈ [0, 1) (0.99 for CIFAR-size runs, 0.999 on ImageNet).
        momentum_schedule: ``constant``, or ``cosine`` from ``momentum`` to 1 over training.
        key_bn: how to stop a query and its key from meeting through BatchNorm statistics:
            ``split`` (one process: BatchNorm over ``split_bn_groups`` sub-batches in both
            encoders, key batch shuffled before the key encoder), ``shuffle`` (DDP: each rank
            encodes a random shard of the global key batch), ``sync`` (SyncBatchNorm in the key
            encoder, GPUs only), ``none``, or ``auto`` (the default: ``shuffle`` under DDP,
            ``split`` in one process, ``none`` without BatchNorm; logged at the start).
        split_bn_groups: S, the sub-batches of ``split`` (the per-process batch must be a
            multiple of S with at least 2 samples per group).
        symmetric: use both views as queries, doubling anchors and keys per step.
        batch_negatives: also contrast with the global batch's other keys (negatives, or
            positives of a label-based loss), as MoCo v3 (Chen et al. 2021, arXiv 2104.02057) and
            SimCLR-style in-batch contrast do and PaCo's code does. Default ``False``: MoCo v1/v2
            (He et al., arXiv 1911.05722; facebookresearch/moco), whose logits are the positive
            key and the queue only; the other keys are then no candidate at all (neither positive
            nor negative: their columns of ``sim`` are masked out), so a label-based loss finds
            its class positives in the queue only. Queue slots never written are no candidate
            either, so until the first keys are queued an anchor has no negative.
        query_candidates: also contrast with the global batch's queries (the anchor itself
            excluded; with ``symmetric`` its other view's query is a positive), with gradient
            through both sides, as PaCo's code does (``torch.cat((q, k, queue))`` as candidates,
            dvlab-research/Parametric-Contrastive-Learning, LT/moco/builder.py).
        **kwargs: every option of ``ContrastiveMethod`` (backbone, head, optim).
    """

    #: A queue that fills within a few steps of the generic tests' small batches, and 2 BatchNorm
    #: groups (the default 8 needs at least 16 images per batch).
    examples = ({"queue_size": 16, "split_bn_groups": 2},)

    def __init__(
        self,
        loss: ContrastiveLoss = lazy_instance(InfoNCE, temperature=0.2),
        queue_size: PositiveInt = 4096,
        momentum: UnitIntervalOpenAbove = 0.99,
        momentum_schedule: MomentumSchedule = "constant",
        key_bn: KeyBatchNorm = "auto",
        split_bn_groups: IntAtLeast2 = 8,
        symmetric: bool = False,
        batch_negatives: bool = False,
        query_candidates: bool = False,
        **kwargs: Any,
    ) -> None:
        queue_size = check_int(queue_size, "MoCo: queue_size")
        momentum = check_momentum(momentum, "MoCo: momentum")
        split_bn_groups = check_int(split_bn_groups, "MoCo: split_bn_groups", minimum=2)
        if momentum_schedule not in ("constant", "cosine"):
            raise ConfigError(f"MoCo: momentum_schedule must be 'constant' or 'cosine', got {momentum_schedule!r}")
        if key_bn not in KEY_BN_MODES:
            raise ConfigError(f"MoCo: key_bn must be one of {', '.join(KEY_BN_MODES)}, got {key_bn!r}")
        super().__init__(loss=loss, **kwargs)
        self.queue_size = queue_size
        self.momentum = momentum
        self.momentum_schedule = momentum_schedule
        self.key_bn = key_bn
        self.split_bn_groups = split_bn_groups
        self.symmetric = bool(symmetric)
        self.batch_negatives = bool(batch_negatives)
        self.query_candidates = bool(query_candidates)

        self.key_backbone = copy.deepcopy(self.backbone)
        self.key_projection_head = copy.deepcopy(self.projection_head)
        if key_bn == "sync":
            self.key_backbone = nn.SyncBatchNorm.convert_sync_batchnorm(self.key_backbone)
            self.key_projection_head = nn.SyncBatchNorm.convert_sync_batchnorm(self.key_projection_head)
        deactivate_requires_grad(self.key_backbone)
        deactivate_requires_grad(self.key_projection_head)
        self._has_bn = has_batch_norm(self.key_backbone, self.key_projection_head)
        self.resolved_key_bn: Optional[str] = None
        if key_bn != "auto":
            self._apply_key_bn(resolve_key_bn(key_bn, 1, self._has_bn))

        # The keys' norms are kept only for a loss that reads them: any other loss's checkpoints stay as they were.
        self.queue = LabelledQueue(queue_size, self.embedding_dim, keep_norms=self.loss.needs_embedding_norms)
        # Every rank applies the same gathered update, so DDP must not broadcast the queue
        # from rank 0 before each forward (it would cost queue_size × proj_dim per step).
        self._ddp_params_and_buffers_to_ignore = [f"queue.{name}" for name, _ in self.queue.named_buffers()]
        self._pending: Optional[tuple[Tensor, ...]] = None  # (keys, labels[, norms]) until the backward is done
        self._total_steps: Optional[int] = None

    # --- BatchNorm leakage ------------------------------------------------------------------
    def _apply_key_bn(self, mode: str) -> None:
        """Fix the key-BatchNorm mode; ``split`` converts both encoders' BatchNorms (once)."""
        if mode == "split" and self.resolved_key_bn != "split":
            for module in (self.backbone, self.projection_head, self.key_backbone, self.key_projection_head):
                convert_to_split_batchnorm(module, self.split_bn_groups)
        self.resolved_key_bn = mode

    def _key_bn_mode(self) -> str:
        if self.resolved_key_bn is None:  # used without a Trainer: resolve from the process group
            self._apply_key_bn(resolve_key_bn(self.key_bn, distributed.world_size(), self._has_bn))
        return self.resolved_key_bn

    # --- key encoder ----------------------------------------------------------------------
    def key_embed(self, images: Tensor) -> Tensor:
        """L2-normalised keys [B, proj_dim] of the momentum encoder (no gradient)."""
        with torch.no_grad():
            return self.run_encoder(self.key_backbone, self.key_projection_head, images)[1]

    def _key_rows(self, images: Tensor) -> Tensor:
        """:meth:`key_embed` in float32, and for a loss that ``needs_embedding_norms`` the key projections'
        norms before normalisation as one more column, so that every permutation and gather of the keys
        below carries each key's norm with it."""
        if not self.loss.needs_embedding_norms:
            return self.key_embed(images).float()
        with torch.no_grad():
            _, keys, norms = self.run_encoder(self.key_backbone, self.key_projection_head, images, with_norms=True)
        return torch.cat([keys.float(), norms.float()[:, None]], dim=1)

    def global_keys(self, images: Tensor) -> Tensor:
        """Keys of every rank's ``images``, concatenated rank-major [world·B, proj_dim] (:meth:`global_keys_and_norms`)."""
        return self.global_keys_and_norms(images)[0]

    def global_keys_and_norms(self, images: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        """``(keys, norms)``: :meth:`global_rows` split into the keys [world·B, proj_dim] and, for a loss
        that ``needs_embedding_norms``, their projections' norms [world·B] (else ``None``)."""
        rows = self.global_rows(images)
        if not self.loss.needs_embedding_norms:
            return rows, None
        return rows[:, :-1], rows[:, -1]

    @torch.no_grad()
    def global_rows(self, images: Tensor) -> Tensor:
        """:meth:`_key_rows` of every rank's ``images``, concatenated rank-major [world·B, ...].

        In training, ``split`` encodes a random permutation of the local batch (so a key's
        BatchNorm group differs from its query's) and ``shuffle`` on several ranks encodes a
        random shard of the global batch (one permutation, the same on every rank); either way
        the keys come back in the original order.
        """
        mode = self._key_bn_mode() if self.training else "none"
        world = distributed.world_size()
        if mode == "split":
            return distributed.gather(self._encode_permuted(images, self._key_permutation(images.shape[0], images.device)))
        if not (mode == "shuffle" and world > 1 and self._has_bn):
            return distributed.gather(self._key_rows(images))
        all_images = distributed.gather(images)
        permutation = self._key_permutation(all_images.shape[0], all_images.device)  # the same on every rank
        shard = permutation.view(world, -1)[distributed.rank()]
        shuffled_keys = distributed.gather(self._key_rows(all_images[shard]))
        return _unpermute(shuffled_keys, permutation)

    def _key_permutation(self, n: int, device: torch.device) -> Tensor:
        """A random permutation of the key batch drawn from the optimiser step, not the global RNG.

        Every rank draws the same one without a broadcast, and a run resumed from a checkpoint
        (which does not carry the RNG state) draws exactly the permutations it would have drawn.
        """
        step = self._trainer.global_step if self._trainer is not None else 0
        generator = torch.Generator(device=device).manual_seed(_KEY_SHUFFLE_SEED + step)
        return torch.randperm(n, generator=generator, device=device)

    def _encode_permuted(self, images: Tensor, permutation: Tensor) -> Tensor:
        return _unpermute(self._key_rows(images[permutation]), permutation)

    def momentum_at(self, step: int) -> float:
        """The EMA coefficient of optimiser step ``step`` (0-based)."""
        if self.momentum_schedule == "constant":
            return self.momentum
        if self._total_steps is None:
            self._total_steps = run_length(self.trainer, self.horizon_needed_by())
        total = self._total_steps
        return cosine_schedule(min(step, total), total, self.momentum, 1.0)

    @torch.no_grad()
    def update_key_encoder(self, momentum: float) -> None:
        """``θ_k ← m·θ_k + (1 − m)·θ_q`` for backbone and projection head (parameters only)."""
        update_momentum(self.backbone, self.key_backbone, momentum)
        update_momentum(self.projection_head, self.key_projection_head, momentum)

    def negatives_per_anchor(self, batch_size: int, world_size: int) -> int:
        """Once the queue is full: the queue, plus the global batch's other keys with
        ``batch_negatives`` and its other queries with ``query_candidates``."""
        views = 2 if self.symmetric else 1
        in_batch = views * (batch_size * world_size - 1)
        return self.queue_size + in_batch * (int(self.batch_negatives) + int(self.query_candidates))

    def ignored_options(self) -> list[str]:
        ignored = super().ignored_options()
        if self.resolved_key_bn not in (None, "split") and self.split_bn_groups != 8:
            ignored.append(f"split_bn_groups (key_bn resolved to {self.resolved_key_bn}, not split)")
        return ignored

    # --- the contrast ---------------------------------------------------------------------
    def contrast(self, batch: Any) -> MaskedSimilarities:
        views, labels, _ = batch
        if len(views) < 2:
            raise ValueError(f"MoCo needs 2 views per sample, got {len(views)}")
        batch_size, device = views[0].shape[0], views[0].device
        world, rank = distributed.world_size(), distributed.rank()
        query_views = 2 if self.symmetric else 1
        if self.symmetric:
            both = torch.cat([views[0], views[1]], dim=0)
            (features, queries, query_norms), (keys, key_norms) = self.embed_for_loss(both), self.global_keys_and_norms(both)
        else:
            (features, queries, query_norms), (keys, key_norms) = (
                self.embed_for_loss(views[0]),
                self.global_keys_and_norms(views[1]),
            )
        anchor_labels = labels.repeat(query_views)
        key_labels = distributed.gather(anchor_labels)

        def masks() -> tuple[Tensor, Tensor]:
            # Asymmetric: queries are view 0, keys view 1; symmetric: own-view keys are "self".
            anchors = views_of(rank * batch_size, batch_size, query_views, labels, device)
            key_view = 0 if self.symmetric else 1
            key_members = gathered_views(batch_size, query_views, key_labels, world, device, first_view=key_view)
            blocks = [key_members, unmatched(self.queue_size, self.queue.labels, device)]
            if self.batch_negatives:
                keys_usable = torch.ones(len(anchors.instance), keys.shape[0], dtype=torch.bool, device=device)
            else:  # MoCo v1/v2: of the batch's keys, only the anchor's own instance's are candidates
                keys_usable = anchors.instance[:, None] == key_members.instance[None, :]
            usable = [keys_usable, self.queue.valid()[None, :].expand(len(anchors.instance), -1)]
            if self.query_candidates:
                blocks.append(gathered_views(batch_size, query_views, key_labels, world, device))
                usable.append(torch.ones(len(anchors.instance), world * len(anchors.instance), dtype=torch.bool, device=device))
            return contrast_masks(anchors, Members.cat(*blocks), self.loss.uses_labels, torch.cat(usable, dim=1))

        if self.loss.uses_labels or not self.queue.is_full():
            pos_mask, neg_mask = masks()
        else:  # a full queue and instance positives: the masks depend on the shapes only
            shape = (batch_size, query_views, world, rank, self.queue_size, self.batch_negatives, self.query_candidates)
            pos_mask, neg_mask = self.cached_masks(("moco", *shape, device), masks)
        candidates = [keys, self.queue.features]
        if self.query_candidates:
            candidates.append(distributed.gather_with_grad(queries))
        sim = similarity(queries, torch.cat(candidates, dim=0))
        anchors = {"anchor_features": features, "anchor_labels": anchor_labels}
        if query_norms is not None:  # a loss that reads the norms: the candidates' in the order of sim's columns
            candidate_norms = [key_norms, self.queue.norms]
            if self.query_candidates:
                candidate_norms.append(distributed.gather_with_grad(query_norms))
            anchors.update(anchor_norms=query_norms, candidate_norms=torch.cat(candidate_norms))
        if self.training:
            self._pending = (keys, key_labels) if key_norms is None else (keys, key_labels, key_norms)
            return MaskedSimilarities(sim, pos_mask, neg_mask, **anchors)
        second = queries.chunk(2)[1] if self.symmetric else self.embed(views[1])
        return MaskedSimilarities(sim, pos_mask, neg_mask, views=(queries[:batch_size].detach(), second.detach()), **anchors)

    # --- Lightning hooks ------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        self._setup_key_bn(stage)
        super().setup(stage)  # the classifier and prior; channels_last and compile once the BatchNorms are final

    def _setup_key_bn(self, stage: str) -> None:
        trainer = self._trainer
        if trainer is None:
            return
        if self.key_bn == "sync" and trainer.world_size > 1 and trainer.strategy.root_device.type == "cpu":
            raise ConfigError(
                "MoCo: key_bn='sync' needs GPUs (PyTorch's SyncBatchNorm has no CPU implementation); "
                "use key_bn='shuffle' (or auto) for several CPU processes"
            )
        mode = resolve_key_bn(self.key_bn, trainer.world_size, self._has_bn)
        self._apply_key_bn(mode)
        if stage != "fit":
            return
        if mode == "split":
            self._check_split_batch(trainer)
        problem = self._key_bn_problem(mode, trainer.world_size)
        if problem is None:
            detail = f" (BatchNorm over {self.split_bn_groups} sub-batches, key batch shuffled)" if mode == "split" else ""
            rank_zero_info(f"MoCo: key_bn={self.key_bn} -> {mode}{detail}")
        else:
            rank_zero_warn(f"MoCo: key_bn={self.key_bn} -> {mode}: {problem}")

    def _key_bn_problem(self, mode: str, world_size: int) -> Optional[str]:
        """Why the resolved mode does not do what its name says here (``None``: it does)."""
        if mode == "shuffle" and world_size == 1 and self._has_bn:
            return "has no effect in one process, so queries and keys share BatchNorm statistics (use split or auto)"
        if mode in ("shuffle", "split", "sync") and not self._has_bn:
            return "does nothing: the encoder has no BatchNorm"
        if mode == "none" and self._has_bn:
            return "queries and keys share BatchNorm statistics; BatchNorm leakage is not prevented"
        return None

    def _check_split_batch(self, trainer: Any) -> None:
        batch_size = getattr(getattr(trainer, "datamodule", None), "batch_size", None)
        if batch_size is None:
            return  # checked at the first step by SplitBatchNorm itself
        encoded = batch_size * (2 if self.symmetric else 1)
        groups = self.split_bn_groups
        if encoded % groups != 0 or encoded // groups < 2:
            raise ConfigError(
                f"MoCo: key_bn=split needs the per-process batch ({encoded} images per encoder pass, "
                f"data.batch_size={batch_size}) to be a multiple of model.split_bn_groups={groups} with "
                "at least 2 per group; change either"
            )

    def on_train_start(self) -> None:
        super().on_train_start()
        self._total_steps = run_length(self.trainer, self.horizon_needed_by())  # None: no limit, constant momentum

    def horizon_needed_by(self) -> list[str]:
        cosine = ["model.init_args.momentum_schedule=cosine"] if self.momentum_schedule == "cosine" else []
        return super().horizon_needed_by() + cosine

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        # Lightning calls this once per optimiser step (not on accumulation batches).
        step = self.trainer.global_step
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        momentum = self.momentum_at(step)
        self.update_key_encoder(momentum)
        if self._step_is_logged():  # only then: logging a number copies it to the device, a host sync
            self.log("train/key_momentum", momentum, on_step=True, on_epoch=False, batch_size=1, logger=False)
            # constant without a schedule: written when it changes (ssl_app.io.changes)
            self.changing_stats.write(self.loggers, {"train/key_momentum": momentum}, step)

    def upgrade_state_dict(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """The base's, and a queue that keeps norms loading a checkpoint written without them: every norm 1."""
        fill_unit_norms(self.queue, state_dict, "queue.")
        return super().upgrade_state_dict(state_dict)

    def on_after_backward(self) -> None:
        # The keys join the queue once the loss's backward is done, and before any callback's
        # on_train_batch_end: a checkpoint taken at the end of this step must already hold them.
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self.queue.enqueue(*pending)  # (keys, labels[, norms])


def _unpermute(encoded: Tensor, permutation: Tensor) -> Tensor:
    """Rows back in the original order: ``encoded[p]`` belongs to item ``permutation[p]``."""
    restored = torch.empty_like(encoded)
    restored[permutation] = encoded
    return restored
