"""What every contrastive method shares: encoder, projection head, loss strategy, optimiser.

A method's only job is ``contrast(batch) -> MaskedSimilarities``: turn a batch into the similarity
matrix and masks that every loss strategy reads (``ssl_app.losses.base``, where the hand-over lives).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Literal, Optional, Union

import lightning as L
import torch
from jsonargparse import lazy_instance
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from ssl_app.checks import PositiveInt, plain, plain_hyperparameters
from ssl_app.errors import ConfigError
from ssl_app.handover import MaskedSimilarities
from ssl_app.losses import ContrastiveLoss, InfoNCE
from ssl_app.losses.base import LossResult, own_copy
from ssl_app.methods.masks import MaskCache
from ssl_app.methods.observer import LossObserver
from ssl_app.models import BackboneName, build_backbone, build_projection_head, channels_last_pays, eager
from ssl_app.models.backbones import NormName
from ssl_app.models.encoder import EncoderPass, compiled_encoder, encode_with
from ssl_app.optim import Optimization, configure, progress


class ContrastiveMethod(L.LightningModule, ABC):
    """Base LightningModule: ``images → backbone → projection head → L2-normalised z``.

    Batches are ``((view_1, view_2, ...), labels, indices)`` as the ``datamodules`` yield them;
    ``train_views`` says how many views a training batch needs (the datamodule builds that many).
    A new method subclasses this, implements :meth:`contrast`, and states in its constructor
    only its own options and the defaults it changes, passing the rest on as ``**kwargs``
    (README, "Writing a method", has a complete example).

    Args:
        loss: the loss strategy (any ``ssl_app.losses`` class, chosen by class path).
        backbone: ``small_cnn``, ``resnet32_cifar`` (He et al.'s CIFAR ResNet-32), ``resnet18_cifar`` (3×3 stem,
            no max-pool), ``resnet18``, ``resnet50``.
        backbone_norm: normalisation inside ``small_cnn`` (``batch``, ``group`` or ``none``).
        proj_dim: dimension of the embedding z (the paper: 128).
        proj_hidden_dim: hidden width of an MLP head.
        proj_layers: 1 = linear head (the paper's), 2 = SimCLR's MLP.
        proj_batch_norm: BatchNorm inside an MLP head.
        proj_output_batch_norm: with ``proj_batch_norm``, BatchNorm on the MLP head's output layer too
            (lightly's SimCLR head); ``false``: the hidden layers only, as the PaCo authors' LT head.
        optim: optimiser and learning-rate schedule (``ssl_app.optim.Optimization``).
        channels_last: keep the encoders' weights and input images in the channels-last memory
            layout (NHWC): ``true``, ``false``, or ``auto`` (the default: NHWC when the run
            trains on the CPU or on CUDA, where it was measured faster — every shipped
            backbone's step 1.1–1.8× on the CPU, ResNet-18's SimCLR step 2.4× and MoCo's 1.7×
            on an H200 in bf16, benchmarks/README.md; PyTorch's default layout on other devices:
            ``models.channels_last_pays``). The numbers are the same either way to rounding,
            and checkpoints load into either layout.
        compile: ``torch.compile`` each encoder pass (backbone, head, normalisation: one graph,
            :meth:`run_encoder`; the loss stays eager) at the start of the run (needs a C++ compiler
            on the CPU). Training steps only: validation, test and the callbacks' evaluation passes
            run the eager code (``models.eager``), so nothing recompiles for an evaluation.

    The loss is called one way, ``loss(contrast, with_stats)`` (``ssl_app.losses.base``); the
    method asks for its diagnostics on the steps whose values reach the logger, and its
    :class:`~ssl_app.methods.observer.LossObserver` (``self.observer``) logs what it returns: the
    method trains, the observer observes. A loss that owns parameters sized by the data
    (``ContrastiveLoss.prepare``) receives the backbone's feature width and the datamodule's class
    counts at every ``setup``; a loss that can classify (``classify``, PaCo's centres) makes
    :attr:`class_logits` available.
    """

    train_views: int = 2
    #: Constructor arguments of the configurations the generic tests run this method in (with every
    #: loss: mixed precision, no host sync, channels_last, checkpoints), on top of a tiny backbone and
    #: head (``small_cnn``, 8-d embeddings) and tiny data (3 classes of 16 images of 8×8 pixels,
    #: batches of 4 to 8): ``{}``, the defaults, unless the method has required arguments or its
    #: defaults do not fit such data (tests/generic.py, docs/extending.md).
    examples: ClassVar[tuple[dict[str, Any], ...]] = ({},)

    def __init__(
        self,
        loss: ContrastiveLoss = lazy_instance(InfoNCE, temperature=0.5),
        backbone: BackboneName = "resnet18_cifar",
        backbone_norm: NormName = "batch",
        proj_dim: PositiveInt = 128,
        proj_hidden_dim: PositiveInt = 512,
        proj_layers: PositiveInt = 2,
        proj_batch_norm: bool = True,
        proj_output_batch_norm: bool = True,
        optim: Optimization = Optimization(),
        channels_last: Union[bool, Literal["auto"]] = "auto",
        compile: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(loss, ContrastiveLoss):
            raise ConfigError(f"model.loss must be an ssl_app.losses strategy, got {type(loss).__name__}")
        if not (isinstance(channels_last, bool) or channels_last == "auto"):
            raise ConfigError(f"model.channels_last must be true, false or auto, got {channels_last!r}")
        self.save_hyperparameters(ignore=["loss"])
        plain_hyperparameters(self)  # a subclass's **kwargs reach them as parsed: range types (proj_dim)
        self.loss = own_copy(loss)
        self.optim = dataclasses.replace(optim)  # a copy: the default instance is shared
        self.embedding_dim = plain(proj_dim)
        self.backbone, self.feature_dim = build_backbone(backbone, backbone_norm)
        self.projection_head = build_projection_head(
            self.feature_dim, proj_hidden_dim, proj_dim, proj_layers, proj_batch_norm, proj_output_batch_norm
        )
        self.masks = MaskCache()
        self.channels_last = channels_last
        # The layout in force: "auto" stays contiguous until ``setup`` knows the device.
        self.memory_format = torch.channels_last if channels_last is True else torch.contiguous_format
        self.compile_backbone = bool(compile)
        self._compiled = False
        self._encoder: EncoderPass = encode_with  # compiled by ``setup`` with ``compile``
        # The run's optimiser steps (None: no limit), known once the optimiser is configured (Progress.fraction).
        self._run_steps: Optional[int] = None
        # What is logged and when (a loss that keeps every negative: ``on_train_start`` settles it for one that may not).
        self.observer = LossObserver(every_negative_used=self.loss.same_as_with_every_negative is None)
        self.changing_stats = self.observer.changes  # scalars written when they change (MoCo's key momentum too)

    @property
    def loss_and_chance(self) -> Optional[tuple[Tensor, Tensor]]:
        """The last training step's ``(loss, chance value)``, detached, on the steps whose loss computed its
        diagnostics and declares a chance value (``ContrastiveLoss.chance_value``); ``None`` on the others.
        ``callbacks.EmbeddingMetrics`` reads it for its loss-at-chance rule."""
        return self.observer.loss_and_chance

    # --- encoders -------------------------------------------------------------------------
    def forward(self, images: Tensor) -> Tensor:
        """Backbone features [B, feature_dim] (what linear and kNN evaluation read)."""
        return self.backbone(self.to_memory_format(images))

    def encode(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """Backbone features [B, feature_dim] and their L2-normalised projections z [B, proj_dim]."""
        return self.run_encoder(self.backbone, self.projection_head, images)

    def run_encoder(self, backbone: nn.Module, head: nn.Module, images: Tensor, with_norms: bool = False) -> tuple[Tensor, ...]:
        """``models.encode_with`` on ``images`` in the encoders' layout: one graph with ``compile``."""
        return self._encoder(backbone, head, self.to_memory_format(images), with_norms=with_norms)

    def embed(self, images: Tensor) -> Tensor:
        """L2-normalised projections z [B, proj_dim] (what the loss and the metrics read)."""
        return self.encode(images)[1]

    def to_memory_format(self, images: Tensor) -> Tensor:
        """``images`` in the encoders' memory layout (``channels_last``); a no-op by default."""
        if self.memory_format is torch.contiguous_format or images.dim() != 4:
            return images
        return images.contiguous(memory_format=self.memory_format)

    def setup(self, stage: str) -> None:
        """Give the loss what the data decides (``ContrastiveLoss.prepare``), then apply
        ``channels_last`` and ``compile`` (subclasses call this after changing modules)."""
        if self._trainer is not None:
            self._prepare_loss(stage)
        if self.channels_last == "auto":
            self.memory_format = torch.channels_last if channels_last_pays(self._training_device()) else torch.contiguous_format
        if self.memory_format is torch.channels_last:
            self.to(memory_format=torch.channels_last)
        if self.compile_backbone and not self._compiled:
            self._encoder, self._compiled = compiled_encoder(), True

    def _training_device(self) -> torch.device:
        """The Trainer's device (the model may not have moved there yet), else the parameters'."""
        strategy = getattr(self._trainer, "strategy", None)
        return strategy.root_device if strategy is not None else next(self.parameters()).device

    def embed_anchors(self, images: Tensor) -> tuple[Optional[Tensor], Tensor]:
        """``(features, z)`` of anchor images for ``contrast``: the backbone features only when the
        loss needs them (``needs_anchor_features``: ``MaskedSimilarities.anchor_features``), else
        ``(None, embed(images))``, so a subclass that overrides ``embed`` keeps it for every other loss
        (with such a loss, override ``encode``)."""
        if self.loss.needs_anchor_features:
            return self.encode(images)
        return None, self.embed(images)

    def embed_for_loss(self, images: Tensor) -> tuple[Optional[Tensor], Tensor, Optional[Tensor]]:
        """``(features, z, norms)``: :meth:`embed_anchors`, and the projections' L2 norms [B] before normalisation
        (same pass, with gradient) when the loss ``needs_embedding_norms`` (else ``None``)."""
        if not self.loss.needs_embedding_norms:
            return (*self.embed_anchors(images), None)
        features, z, norms = self.run_encoder(self.backbone, self.projection_head, images, with_norms=True)
        return (features if self.loss.needs_anchor_features else None), z, norms

    # --- what the loss needs from the data, and a loss that classifies ----------------------
    def _prepare_loss(self, stage: str) -> None:
        """``loss.prepare(feature_dim, num_classes, class_counts)``: the datamodule's number of classes,
        and at ``fit`` its training samples per class, for a loss that sizes parameters from them."""
        if type(self.loss).prepare is ContrastiveLoss.prepare:
            return  # the loss needs nothing from the data
        datamodule = getattr(self.trainer, "datamodule", None)
        found = getattr(datamodule, "num_classes", None) if datamodule is not None else None
        num_classes = found if isinstance(found, int) and not isinstance(found, bool) else None
        read_counts = getattr(datamodule, "train_class_counts", None)
        counts = [int(n) for n in read_counts()] if stage == "fit" and callable(read_counts) else None
        self.loss.prepare(self.feature_dim, num_classes, counts, fitting=stage == "fit")

    @property
    def class_logits(self) -> Callable[[Tensor], Tensor]:
        """``class_logits(images)``: the loss's classifier on the backbone feature, logits
        [B, num_classes] without any training-time prior: what evaluation reads
        (``callbacks.LongTailAccuracy``).

        Present only when the loss can classify (``loss.classify``, e.g. PaCo's centres):
        otherwise the attribute does not exist, so ``hasattr(model, "class_logits")`` says whether
        the model can classify, as for ``ssl_app.evaluation.LinearProbe``.
        """
        classify = getattr(self.loss, "classify", None)
        if not callable(classify):
            # nn.Module.__getattr__ then reports "'<Method>' object has no attribute 'class_logits'".
            raise AttributeError("class_logits")
        return lambda images: classify(self(images))

    @property
    def state_built_in_setup(self) -> tuple[str, ...]:
        """Keys the loss sizes from the data at ``setup`` (not compared by ``--ckpt_path``'s check)."""
        return tuple(f"loss.{key}" for key in self.loss.state_built_in_setup)

    def upgrade_state_dict(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's state dict in this version's layout (the loss moves keys it once kept
        elsewhere: ``upgrade_state_dict`` of the loss), in place; returns it."""
        upgrade = getattr(self.loss, "upgrade_state_dict", None)
        if callable(upgrade):
            upgrade(state_dict, "loss.")
        return state_dict

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.observer.save_to(checkpoint, self.current_epoch)  # this epoch's mean training loss so far

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.upgrade_state_dict(checkpoint["state_dict"])
        self.observer.load_from(checkpoint)

    def compute_loss(self, contrast: MaskedSimilarities, with_stats: bool = False) -> LossResult:
        """The loss strategy on the hand-over (one call, one answer)."""
        self.loss.check_handed_over(contrast, type(self).__name__)
        if contrast.mask_memo is None:
            contrast.mask_memo = self.masks.memo(contrast.pos_mask, contrast.neg_mask)
        return self.loss(contrast, with_stats)

    # --- the one method-specific piece -----------------------------------------------------
    @abstractmethod
    def contrast(self, batch: Any) -> MaskedSimilarities:
        """Turn a batch ``(views, labels, indices)`` into anchors × candidates similarities and masks.

        Called by every train/val/test step; the loss strategy then reads ``(sim, pos_mask,
        neg_mask)``. Use ``self.embed`` (``embed_for_loss``: and what the loss needs), ``similarity`` for ``sim``
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
        if stage == "train":
            # The loss diagnostics are logged per training step, so they are computed only on the steps whose
            # values the logger keeps (every trainer.log_every_n_steps).
            result = self.compute_loss(contrast, with_stats=self._step_is_logged())
            self.observer.training_step(self, result, contrast.sim.shape[0])
            return result.value
        result = self.compute_loss(contrast)
        self.observer.evaluation_step(self, result, contrast, stage)
        # Validation/test: hand the view embeddings to callbacks (see ``MaskedSimilarities.views``).
        return {"loss": result.value, "embeddings": contrast.views}

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.observer.batch_end(self)

    def cached_masks(self, key: tuple, build: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """``build()``'s ``(pos_mask, neg_mask)``, built once per ``key`` (naming everything they depend on: sizes,
        rank, world size, device) and reused: for masks that depend only on the batch's shape (``MaskCache``)."""
        return self.masks.get(key, build)

    def _step_is_logged(self) -> bool:
        """Whether values logged with ``on_step=True`` now reach the logger (``LossObserver.logs_this_step``)."""
        return self.observer.logs_this_step(self._trainer)

    def negatives_per_anchor(self, batch_size: int, world_size: int) -> Optional[int]:
        """How many negatives one anchor has in a training step (``None``: unknown); for warnings."""
        return None

    def ignored_options(self) -> list[str]:
        """Options set to a non-default value that this configuration does not use."""
        ignored = []
        if self.hparams.get("proj_layers") == 1:
            for name, default in (("proj_hidden_dim", 512), ("proj_batch_norm", True), ("proj_output_batch_norm", True)):
                if self.hparams.get(name, default) != default:
                    ignored.append(f"{name} (a linear head, proj_layers=1, has no hidden layer)")
        return ignored

    def on_train_start(self) -> None:
        """Name the settings that silently do nothing, once, before the first step (``LossObserver.train_start``:
        resumed mid-epoch, the epoch's mean training loss goes on)."""
        self.observer.train_start(self)
        for option in self.ignored_options():
            rank_zero_warn(f"{type(self).__name__}: model.{option} is ignored")

    def on_train_epoch_start(self) -> None:
        self.observer.epoch_start()

    def on_train_epoch_end(self) -> None:
        self.observer.epoch_end(self)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        self.loss.set_progress(progress(self._trainer, batch_idx, self._run_steps))  # for the loss's τ policy
        return self._step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        with eager():  # the compiled encoder's eager code: no recompile for eval mode and new batch shapes
            return self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        with eager():
            return self._step(batch, "test")

    def configure_optimizers(self) -> dict:
        optimisers, self._run_steps = configure(self.optim, self.trainer, self.parameter_groups(), self.horizon_needed_by())
        return optimisers

    def parameter_groups(self) -> list[dict[str, Any]]:
        """The optimiser's parameter groups: every parameter, and the loss's ``undecayed_parameters`` (a
        learnable τ, Sigmoid's bias) in a group of its own without weight decay. One group when there is
        none, as checkpoints written before temperature policies have."""
        undecayed = {id(p) for p in self.loss.undecayed_parameters()}
        groups = [{"params": [p for p in self.parameters() if id(p) not in undecayed]}]
        if undecayed:
            groups.append({"params": [p for p in self.parameters() if id(p) in undecayed], "weight_decay": 0.0})
        return groups

    def horizon_needed_by(self) -> list[str]:
        """The options that spread over the whole run, so need its length (``trainer.max_epochs`` or ``max_steps``)."""
        return ["model.init_args.optim.schedule=cosine"] if self.optim.schedule == "cosine" else []


def similarity(anchors: Tensor, candidates: Tensor) -> Tensor:
    """Cosine similarities of normalised rows, computed in float32 even under autocast.

    A bf16 matmul would round s to ~3 significant digits, which at τ = 0.01 is an error of
    ~0.4 in the logits; the [N, M] product is cheap next to the encoder.
    """
    with torch.autocast(device_type=anchors.device.type, enabled=False):
        return anchors.float() @ candidates.float().T
