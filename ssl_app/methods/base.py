"""What every contrastive method shares: encoder, projection head, loss strategy, optimiser.

A method's only job is ``contrast(batch) -> MaskedSimilarities``: turn a batch into the similarity
matrix and masks that every loss strategy reads (``ssl_app.losses.base``, where the hand-over lives).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Literal, Optional, Union

import lightning as L
import torch
import torch.nn.functional as F
from jsonargparse import lazy_instance
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from ssl_app.errors import ConfigError
from ssl_app.losses import ContrastiveLoss, InfoNCE
from ssl_app.losses.base import LossResult, MaskedSimilarities
from ssl_app.losses.hardness import HardnessProfile, write_profile
from ssl_app.models import BackboneName, build_backbone, build_projection_head, channels_last_pays
from ssl_app.models.backbones import NormName
from ssl_app.optim import Optimization, run_length
from ssl_app.runs.changes import OnChange
from ssl_app.temperature import Progress

#: Where a checkpoint keeps the mean training loss of the epoch it was saved in.
TRAIN_LOSS_KEY = "ssl_app_train_loss_mean"
#: Loss diagnostics that stay constant in most runs: written to the loggers when they change (``ssl_app.runs.changes``).
LOGGED_ON_CHANGE = ("loss/chance", "loss/used_negatives", "loss/temperature")


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
        compile: compile each encoder pass with ``torch.compile`` at the start of the run: the
            backbone, the projection head and the normalisation as one graph (:meth:`run_encoder`;
            the loss stays eager), for the query encoder and MoCo's key encoder. The first steps
            then take longer while it compiles (needs a C++ compiler on the CPU). Training steps
            only: validation, test and the callbacks' evaluation passes run the eager code
            (:meth:`uncompiled`), so an evaluation compiles nothing, and training goes on with the
            graphs it compiled (no recompilation after an evaluation or at an epoch's start).

    The loss is called one way, ``loss(contrast, with_stats)`` (``ssl_app.losses.base``); the
    method asks for its diagnostics on the steps whose values reach the logger and logs them as
    ``loss/<key>``, and sums the steps' hardness profiles (``ssl_app.losses.hardness``) into one per
    epoch, logged at the epoch's end as the TensorBoard histograms ``hardness/*``. A loss that owns
    parameters sized by the data (``ContrastiveLoss.prepare``) receives the backbone's feature width
    and the datamodule's class counts at every ``setup``; a loss that can classify (``classify``,
    PaCo's centres) makes :attr:`class_logits` available and ``{val,test}/classifier_top1`` logged.
    """

    train_views: int = 2
    #: Constructor arguments of the configurations the generic tests run this method in (with every
    #: loss: mixed precision, no host sync, channels_last, checkpoints), on top of a tiny backbone and
    #: head (``small_cnn``, 8-d embeddings) and tiny data (3 classes of 16 images of 8×8 pixels,
    #: batches of 4 to 8): ``{}``, the defaults, unless the method has required arguments or its
    #: defaults do not fit such data (tests/generic.py, docs/extending.md).
    examples: ClassVar[tuple[dict[str, Any], ...]] = ({},)
    #: The last training step's ``(loss, chance value)``, detached, on the steps whose loss computed
    #: its diagnostics and declares a chance value (``ContrastiveLoss.chance_value``); ``None`` on
    #: the others. ``callbacks.EmbeddingMetrics`` reads it for its loss-at-chance rule.
    loss_and_chance: Optional[tuple[Tensor, Tensor]] = None

    def __init__(
        self,
        loss: ContrastiveLoss = lazy_instance(InfoNCE, temperature=0.5),
        backbone: BackboneName = "resnet18_cifar",
        backbone_norm: NormName = "batch",
        proj_dim: int = 128,
        proj_hidden_dim: int = 512,
        proj_layers: int = 2,
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
        self.loss = _own_loss(loss)
        self.optim = dataclasses.replace(optim)  # a copy: the default instance is shared
        self.embedding_dim = proj_dim
        self.backbone, self.feature_dim = build_backbone(backbone, backbone_norm)
        self.projection_head = build_projection_head(
            self.feature_dim, proj_hidden_dim, proj_dim, proj_layers, proj_batch_norm, proj_output_batch_norm
        )
        self._mask_cache: dict[tuple, tuple[Tensor, Tensor]] = {}
        self.channels_last = channels_last
        # The layout in force: "auto" stays contiguous until ``setup`` knows the device.
        self.memory_format = torch.channels_last if channels_last is True else torch.contiguous_format
        self.compile_backbone = bool(compile)
        self._compiled = False
        # ``encode_with``, compiled by ``setup`` when ``compile`` is set (one graph per encoder pass).
        self._encoder: Callable[[nn.Module, nn.Module, Tensor], tuple[Tensor, Tensor]] = encode_with
        self.classifier_top1: Optional[nn.ModuleDict] = None
        # The epoch's mean training loss, kept by us rather than by Lightning's logger connector so that
        # a checkpoint saved mid-epoch carries it (see ``on_save_checkpoint``); "disable": no NaN check,
        # which would sync with the host every step (the health check watches the loss instead). Each
        # process's own mean, as Lightning's unsynced epoch value was: a synced compute would gather
        # whenever any rank first reads ``callback_metrics``, which the ranks do not do in step.
        self.train_loss_mean = MeanMetric(nan_strategy="disable", sync_on_compute=False)
        self._resumed_train_loss: Optional[dict[str, Any]] = None
        # The epoch's measured hardness profile (ssl_app.losses.hardness), from the steps with diagnostics.
        self.hardness_profile = HardnessProfile()
        # The run's optimiser steps (None: no limit), known once the optimiser is configured (Progress.fraction).
        self._run_steps: Optional[int] = None
        self._last_train_temperature: Union[float, Tensor, None] = None

        self.changing_stats = OnChange()
        self._pending_changes: Optional[tuple[dict[str, Tensor], int]] = None
        # Whether the loss keeps every negative, so ``loss/used_neg_sim`` is ``loss/mean_neg_sim`` (not
        # logged twice); ``on_train_start`` settles it for a loss that may keep fewer.
        self.every_negative_used = self.loss.same_as_with_every_negative is None

    # --- encoders -------------------------------------------------------------------------
    def forward(self, images: Tensor) -> Tensor:
        """Backbone features [B, feature_dim] (what linear and kNN evaluation read)."""
        return self.backbone(self.to_memory_format(images))

    def encode(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """Backbone features [B, feature_dim] and their L2-normalised projections z [B, proj_dim]."""
        return self.run_encoder(self.backbone, self.projection_head, images)

    def run_encoder(self, backbone: nn.Module, head: nn.Module, images: Tensor) -> tuple[Tensor, Tensor]:
        """``(backbone(images), normalize(head(features)))`` of ``images`` in the encoders' layout:
        one graph when ``compile`` is set (one compiled function for every encoder: the query's and
        MoCo's key encoder's weights are its inputs, not constants of it)."""
        return self._encoder(backbone, head, self.to_memory_format(images))

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
            # A compiled function, not compiled modules: parameter names and checkpoints stay as they were.
            self._encoder = torch.compile(encode_with)
            self._compiled = True

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
        classes = getattr(self.loss, "num_classes", None)
        if callable(getattr(self.loss, "classify", None)) and self.classifier_top1 is None and classes:
            self.classifier_top1 = nn.ModuleDict(
                {split: MulticlassAccuracy(classes, top_k=1, average="micro", ignore_index=-1) for split in ("val", "test")}
            ).to(self.device)

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
        """The running mean of this epoch's training loss (sum and weight), with the epoch it belongs to."""
        state = {name: value.detach().clone() for name, value in self.train_loss_mean.metric_state.items()}
        checkpoint[TRAIN_LOSS_KEY] = {"epoch": self.current_epoch, "state": state}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.upgrade_state_dict(checkpoint["state_dict"])
        self._resumed_train_loss = checkpoint.get(TRAIN_LOSS_KEY)

    def _restore_train_loss_mean(self) -> None:
        """Resumed mid-epoch: the epoch's mean training loss goes on from the steps before the stop, so
        ``train/loss_epoch`` equals the uninterrupted run's. A checkpoint of an epoch's end (the
        resumed run starts the next epoch) or of an older version leaves the mean empty. (Lightning
        calls no ``on_train_epoch_start`` for an epoch resumed in its middle; ``on_train_start`` runs
        once the loops are restored, with ``current_epoch`` the resumed one.)"""
        saved, self._resumed_train_loss = self._resumed_train_loss, None
        if saved is not None and saved.get("epoch") == self.current_epoch:
            for name, value in saved["state"].items():
                setattr(self.train_loss_mean, name, value.to(self.device))

    def compute_loss(self, contrast: MaskedSimilarities, with_stats: bool = False) -> LossResult:
        """The loss strategy on the hand-over (one call, one answer)."""
        if self.loss.needs_anchor_features and (contrast.anchor_features is None or contrast.anchor_labels is None):
            raise ConfigError(
                f"{type(self).__name__} does not hand its anchors' features and labels to the loss, which "
                f"{type(self.loss).__name__} needs (MaskedSimilarities.anchor_features / anchor_labels)"
            )
        return self.loss(contrast, with_stats)

    def _log_classifier_top1(self, contrast: MaskedSimilarities, stage: str) -> None:
        if self.classifier_top1 is None or contrast.anchor_features is None or contrast.anchor_labels is None:
            return
        metric = self.classifier_top1[stage]
        metric.update(self.loss.classify(contrast.anchor_features.detach()), contrast.anchor_labels)
        self.log(f"{stage}/classifier_top1", metric, on_epoch=True, batch_size=contrast.anchor_labels.shape[0])

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
        result = self.compute_loss(contrast, with_stats=on_step and self._step_is_logged())
        loss = result.value
        batch_size = contrast.sim.shape[0]
        if stage == "train":
            # Not in the progress bar: Lightning turns every prog_bar value into a number after each batch,
            # a host sync per step on a GPU (the bar shows train/loss_epoch; the loggers get every logged step;
            # tests/ssl_app/methods/test_loop_syncs.py).
            self.log("train/loss_step", loss, on_step=True, on_epoch=False, batch_size=batch_size)
            # Weighted by the batch size as Lightning's epoch mean is (the metric ignores ``weight`` when
            # its NaN check is disabled, so the value is repeated instead: a view, no copy).
            self.train_loss_mean.update(loss.detach().expand(batch_size))
            self.log("train/loss_epoch", self.train_loss_mean, prog_bar=True, on_step=False, on_epoch=True)
            stats = {f"loss/{key}": value for key, value in result.stats.items()}
            if stats:
                self._log_loss_stats(stats, batch_size)
            if result.hardness is not None:
                self.hardness_profile.update(result.hardness)
            chance = result.stats.get("chance")
            self.loss_and_chance = None if chance is None else (loss.detach(), chance)
            # The epoch's τ is its last training step's: validation, which runs before on_train_epoch_end,
            # sets the loss's temperature_in_force too (an adaptive τ: from its own batches).
            self._last_train_temperature = self.loss.temperature_in_force
            return loss
        self.log(f"{stage}/loss", loss, prog_bar=True, on_epoch=True, sync_dist=True, batch_size=batch_size)
        self._log_classifier_top1(contrast, stage)
        # Validation/test: hand the view embeddings to callbacks (see ``MaskedSimilarities.views``).
        return {"loss": loss, "embeddings": contrast.views}

    def _log_loss_stats(self, stats: dict[str, Tensor], batch_size: int) -> None:
        """Log the step's ``loss/*`` diagnostics: ``loss/used_neg_sim`` only when the loss may drop
        negatives, and the ``LOGGED_ON_CHANGE`` ones in ``callback_metrics`` every time but written to
        the loggers only when they change."""
        if self.every_negative_used:
            stats.pop("loss/used_neg_sim", None)
        steady = {tag: stats.pop(tag) for tag in LOGGED_ON_CHANGE if tag in stats}
        self.log_dict(stats, on_step=True, on_epoch=False, batch_size=batch_size)
        if steady:
            self.log_dict(steady, on_step=True, on_epoch=False, batch_size=batch_size, logger=False)
            self._pending_changes = (steady, self.global_step)  # written in on_train_batch_end

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Write the step's ``LOGGED_ON_CHANGE`` diagnostics that changed: here, once the step's backward
        and optimiser step are queued, since comparing them reads them on the host (as Lightning's own
        logging does next), which inside ``training_step`` would stall a GPU before its backward."""
        pending, self._pending_changes = self._pending_changes, None
        if pending is not None:
            self.changing_stats.write(self.loggers, *pending)

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
            for name, default in (("proj_hidden_dim", 512), ("proj_batch_norm", True), ("proj_output_batch_norm", True)):
                if self.hparams.get(name, default) != default:
                    ignored.append(f"{name} (a linear head, proj_layers=1, has no hidden layer)")
        return ignored

    def on_train_start(self) -> None:
        """Name the settings that silently do nothing, once, before the first step (and, resumed, restore
        the epoch's mean training loss)."""
        self._restore_train_loss_mean()
        trainer = self.trainer
        batch_size = getattr(trainer.datamodule, "batch_size", None) if trainer.datamodule is not None else None
        kept = getattr(self.loss, "num_negatives", None)
        available = None if batch_size is None else self.negatives_per_anchor(batch_size, trainer.world_size)
        same_as = self.loss.same_as_with_every_negative
        keeps_all = kept is not None and available is not None and kept >= available
        self.every_negative_used = same_as is None or keeps_all
        if same_as is not None and keeps_all:
            rank_zero_warn(
                f"{type(self.loss).__name__}: num_negatives={kept} keeps every negative: an anchor of "
                f"{type(self).__name__} has {available} negatives (batch {batch_size} per process × "
                f"{trainer.world_size} process(es)), so this loss is exactly {same_as}; lower num_negatives"
            )
        for option in self.ignored_options():
            rank_zero_warn(f"{type(self).__name__}: model.{option} is ignored")

    def on_train_epoch_start(self) -> None:
        """A new epoch's mean training loss starts empty: a run resumed from a checkpoint written during
        the previous epoch's validation got that epoch's mean back, which no training step of this
        process logged, so Lightning never reset it."""
        self.train_loss_mean.reset()

    def on_train_epoch_end(self) -> None:
        """Log ``loss/temperature_epoch`` (the τ of the epoch's last training step; written when it
        changes, ``ssl_app.runs.changes``) and the epoch's
        hardness profile, summed over processes (every rank computes it, since the sum is a
        collective; rank 0 writes it to the first TensorBoard logger), and reset it."""
        tau, self._last_train_temperature = self._last_train_temperature, None
        if tau is not None:  # the same on every rank (a global batch's or the progress's): no sync needed
            # in callback_metrics every epoch; written when it changes (a fixed τ: once)
            self.log("loss/temperature_epoch", tau, on_step=False, on_epoch=True, logger=False)
            self.changing_stats.write(self.loggers, {"loss/temperature_epoch": tau}, self.global_step)
        profile = self.hardness_profile
        if not profile.update_called:
            return
        mean_share, negatives = profile.compute()
        profile.reset()
        tensorboard = next((logger for logger in self.loggers if isinstance(logger, TensorBoardLogger)), None)
        if tensorboard is not None and self.trainer.is_global_zero:
            write_profile(tensorboard.experiment, mean_share, negatives, self.global_step)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        self.loss.set_progress(self.progress(batch_idx))
        return self._step(batch, "train")

    def progress(self, batch_idx: int) -> Progress:
        """Where training stands at this training step, for the loss's temperature policy: fractional
        epochs (``current_epoch + batch_idx / batches per epoch``), optimiser steps done
        (``global_step``) and their fraction of the run (``None`` without a length). Read from the
        Trainer's restored loop state, so a resumed run (also mid-epoch) goes on where it stopped."""
        trainer = self._trainer
        if trainer is None:
            return Progress()
        batches = trainer.num_training_batches
        within = batch_idx / batches if isinstance(batches, int) and batches > 0 else 0.0
        total = self._run_steps
        fraction = min(trainer.global_step / total, 1.0) if total else None
        return Progress(epoch=trainer.current_epoch + within, step=trainer.global_step, fraction=fraction)

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        with self.uncompiled():
            return self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        with self.uncompiled():
            return self._step(batch, "test")

    def uncompiled(self) -> contextlib.AbstractContextManager:
        """Inside, compiled backbones (``compile``) run their eager code: validation and test steps
        would otherwise recompile the training graphs for eval mode and each new batch shape."""
        return torch.compiler.set_stance("force_eager") if self._compiled else contextlib.nullcontext()

    def configure_optimizers(self) -> dict:
        trainer = self.trainer
        per_process_batch = getattr(trainer.datamodule, "batch_size", None) or self.optim.reference_batch_size
        global_batch = per_process_batch * trainer.world_size * trainer.accumulate_grad_batches
        total_steps = run_length(trainer, self.horizon_needed_by())  # also sizes the train dataloader
        self._run_steps = total_steps
        # Optimiser steps per epoch from the dataloader, not total / max_epochs: a run bounded by
        # max_steps would otherwise place multistep milestones and warm-up at the wrong step.
        batches = trainer.num_training_batches
        if math.isfinite(batches):
            steps_per_epoch = max(math.ceil(batches / trainer.accumulate_grad_batches), 1)
        else:  # an iterable dataloader without a length
            steps_per_epoch = max((total_steps or 0) // max(trainer.max_epochs or 1, 1), 1)
        # total_steps None (no limit): only a schedule that ignores the run's length gets here
        return self.optim.build(self.parameter_groups(), global_batch, steps_per_epoch, total_steps or 0)

    def parameter_groups(self) -> list[dict[str, Any]]:
        """The optimiser's parameter groups: every parameter, and the loss's temperature policy's (a
        learnable τ) in a group of its own without weight decay. One group when there is none, as
        checkpoints written before temperature policies have."""
        policy = self.loss._modules.get("temperature")
        undecayed = {id(p) for p in policy.parameters()} if policy is not None else set()
        groups = [{"params": [p for p in self.parameters() if id(p) not in undecayed]}]
        if undecayed:
            groups.append({"params": [p for p in self.parameters() if id(p) in undecayed], "weight_decay": 0.0})
        return groups

    def horizon_needed_by(self) -> list[str]:
        """The options that spread over the whole run, so need its length (``trainer.max_epochs`` or ``max_steps``)."""
        return ["model.init_args.optim.schedule=cosine"] if self.optim.schedule == "cosine" else []


def _own_loss(loss: ContrastiveLoss) -> ContrastiveLoss:
    """This model's own loss object: a copy, since the default (jsonargparse's ``lazy_instance``) is one
    object shared by every model built without a loss, and a real instance of its class, since a
    copied lazy instance forwards its calls to the original (its own state never changed)."""
    if callable(getattr(loss, "lazy_get_init_args", None)):
        lazy = [cls for cls in type(loss).__mro__ if hasattr(cls, "lazy_get_init_args")]
        real = next(cls for cls in type(loss).__mro__ if issubclass(cls, ContrastiveLoss) and cls not in lazy)
        return real(**dict(loss.lazy_get_init_args()))
    return copy.deepcopy(loss)


def encode_with(backbone: nn.Module, head: nn.Module, images: Tensor) -> tuple[Tensor, Tensor]:
    """``(features, z)``: the backbone's features [B, feature_dim] of ``images`` and their projections
    by ``head``, L2-normalised [B, proj_dim]: what ``compile`` compiles as one graph."""
    features = backbone(images)
    return features, F.normalize(head(features), dim=1)


def similarity(anchors: Tensor, candidates: Tensor) -> Tensor:
    """Cosine similarities of normalised rows, computed in float32 even under autocast.

    A bf16 matmul would round s to ~3 significant digits, which at τ = 0.01 is an error of
    ~0.4 in the logits; the [N, M] product is cheap next to the encoder.
    """
    with torch.autocast(device_type=anchors.device.type, enabled=False):
        return anchors.float() @ candidates.float().T
