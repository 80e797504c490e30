"""Linear evaluation: a linear classifier on the frozen, pooled backbone feature of a trained method.

The protocol of Wang & Liu (docs/science.md, "Linear evaluation protocol"): the backbone of a contrastive checkpoint is frozen, a
linear layer on its pooled feature is trained with cross-entropy for 100 epochs, SGD lr 30
(momentum 0.9, no weight decay), ×0.2 at epochs 40, 60 and 80, on horizontally flipped
training images. Top-1 (and top-5) accuracy is reported on the test split; ``linear/val_top1``
comes from a split held out of the training set, so nothing is chosen on the test set.

Two paths, the same model and metrics (pair it with ``datamodules.LinearEvalDataModule``):

- ``cache_features: none`` (the protocol): every step encodes a flipped-or-not image.
- ``cache_features: flips``: the backbone encodes every training image and its mirror image once
  (the whole support of a flip-only augmentation), and the linear layer trains on those cached
  features; ``clean``: only the unflipped images. The backbone runs once instead of once per
  epoch, so 100 epochs take about as long as one epoch of the slow path.
"""

from __future__ import annotations

import importlib
from typing import Any, Literal, Optional

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from ssl_app.checks import IntAtLeast2, NonNegativeInt, check, plain_hyperparameters
from ssl_app.errors import ConfigError
from ssl_app.metrics.long_tail import (
    FEW_SHOT_BELOW,
    MANY_SHOT_ABOVE,
    ClassAccuracy,
    check_thresholds,
    group_accuracies,
    groups_line,
    tail_groups,
)
from ssl_app.optim import Optimization, run_length

FeatureCache = Literal["none", "clean", "flips"]


def paper_linear_optim() -> Optimization:
    """SGD lr 30, momentum 0.9, no weight decay, ×0.2 at epochs 40/60/80 (Wang & Liu)."""
    return Optimization(
        optimizer="sgd", lr=30.0, momentum=0.9, weight_decay=0.0, schedule="multistep", milestones=[40, 60, 80], gamma=0.2
    )


#: The state-dict prefix of the method's loss, which the probe leaves out (``load_method``).
LOSS_STATE = "loss."


def load_method(checkpoint: str) -> L.LightningModule:
    """The contrastive method saved in ``checkpoint`` (written by ``python -m ssl_app fit``), on the CPU.

    The file is read with ``weights_only=True`` (tensors and plain containers only: a crafted
    pickle cannot run code) and checked like ``--ckpt_path`` (``ssl_app.checkpointing``). The
    method's class comes from the checkpoint's hyper-parameters (``_class_path``, which
    LightningCLI stores); it must be a ``ContrastiveMethod``.
    """
    from ssl_app.methods import ContrastiveMethod  # methods import losses; keep this module light
    from ssl_app.resume import checkpoint_method, load_checkpoint
    from ssl_app.trust import is_known_class

    saved = load_checkpoint(checkpoint, option="LinearProbe: checkpoint")
    class_path = checkpoint_method(saved)
    if not class_path:
        raise ConfigError(f"LinearProbe: {checkpoint} is not a checkpoint written by python -m ssl_app fit (it names no method)")
    module_name, _, class_name = class_path.rpartition(".")
    if not is_known_class(class_path):  # load_checkpoint refused it already; importing a module runs its code
        raise ConfigError(
            f"LinearProbe: {checkpoint} was written by {class_path}, whose module is not imported; to trust it, run the "
            f"probe from Python after `import {module_name}`"
        )
    try:
        method_class = getattr(importlib.import_module(module_name), class_name, None) if module_name else None
    except ImportError:
        method_class = None
    if not (isinstance(method_class, type) and issubclass(method_class, ContrastiveMethod)):
        raise ConfigError(f"LinearProbe: {checkpoint} holds a {class_path}, not an ssl_app contrastive method")
    # The method's hyper-parameters leave its loss out, so it is rebuilt with its default loss: the
    # loss's own state (PaCo's centres and prior, ``loss.*``) has nowhere to go and the probe does
    # not need it. Every other weight must be in the file and fit.
    try:
        method = method_class.load_from_checkpoint(checkpoint, map_location="cpu", weights_only=True, strict=False)
    except RuntimeError as error:
        raise ConfigError(
            f"LinearProbe: {checkpoint}: its weights do not fit {class_path} ({' '.join(str(error).split())[:300]})"
        ) from None
    expected, found = set(method.state_dict()), set(saved.get("state_dict") or {})
    missing = sorted(key for key in expected - found if not key.startswith(LOSS_STATE))
    unexpected = sorted(key for key in found - expected if not key.startswith(LOSS_STATE))
    if missing or unexpected:
        said = "; ".join(
            f"{what}: {', '.join(keys[:5])}" for what, keys in (("missing", missing), ("unexpected", unexpected)) if keys
        )
        raise ConfigError(f"LinearProbe: {checkpoint}: its weights do not fit {class_path} ({said})")
    return method


class LinearProbe(L.LightningModule):
    """A linear layer on the frozen backbone of a trained contrastive method.

    ``logits = W · f(x) + b`` with ``f`` the method's pooled backbone feature (512-d for
    ResNet-18), never updated: the backbone stays in eval mode (BatchNorm uses its running
    statistics) and receives no gradient. Loss: cross-entropy.

    Logs ``linear/train_loss`` every step; with the validation loaders of
    ``LinearEvalDataModule``: ``linear/val_top1`` (held-out part of the training split),
    ``linear/top1`` and ``linear/top5`` (test split) every validation epoch, and, when the
    datamodule has ``train_class_counts()`` (``LinearEvalDataModule``: those of its data),
    ``linear/many``, ``linear/medium``, ``linear/few``: the mean per-class top-1 on the test split
    of the classes with ``> many_shot_above``, ``few_shot_below … many_shot_above`` and
    ``< few_shot_below`` training images (``ssl_app.metrics.long_tail``, the definition of
    ``lt/*``), counted on the same test batches as ``linear/top1`` and summed over processes; a
    group without any class is not logged (said in one line at setup).
    ``class_logits`` serves ``callbacks.LongTailAccuracy`` (``lt/*`` on long-tailed data).

    Args:
        checkpoint: a checkpoint written by ``python -m ssl_app fit`` (any method).
        num_classes: classes of the classifier; ``None``: the datamodule's ``num_classes``.
        optim: optimiser and schedule (default: the paper's protocol, above).
        cache_features: ``none``, ``clean`` or ``flips`` (module docstring).
        many_shot_above: classes with more training images than this are many-shot (100).
        few_shot_below: classes with fewer training images than this are few-shot (20).
    """

    # The classifier's width may come from the datamodule in ``setup`` (checked by --ckpt_path).
    state_built_in_setup = ("classifier.",)

    def __init__(
        self,
        checkpoint: str,
        num_classes: Optional[IntAtLeast2] = None,
        optim: Optimization = paper_linear_optim(),
        cache_features: FeatureCache = "none",
        many_shot_above: NonNegativeInt = MANY_SHOT_ABOVE,
        few_shot_below: NonNegativeInt = FEW_SHOT_BELOW,
    ) -> None:
        super().__init__()
        self.many_shot_above, self.few_shot_below = check_thresholds(many_shot_above, few_shot_below, "LinearProbe")
        if cache_features not in ("none", "clean", "flips"):
            raise ConfigError(f"LinearProbe: cache_features must be none, clean or flips, got {cache_features!r}")
        num_classes = check(IntAtLeast2, num_classes, "LinearProbe: num_classes", none=True)
        self.save_hyperparameters()
        plain_hyperparameters(self)
        method = load_method(checkpoint)
        self.backbone = method.backbone
        self.feature_dim = method.feature_dim
        self.backbone.requires_grad_(False)
        self.backbone.eval()
        self.optim = optim
        self.cache_features = cache_features
        self.num_classes = num_classes
        self.classifier: Optional[nn.Linear] = None
        self.groups: dict[str, list[int]] = {}  # from the datamodule's class counts, at setup
        if num_classes is not None:
            self._build_classifier(num_classes)

    def _build_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.classifier = nn.Linear(self.feature_dim, num_classes)
        top5 = min(5, num_classes)
        self.val_top1 = MulticlassAccuracy(num_classes, top_k=1, average="micro", ignore_index=-1)
        self.test_top1 = MulticlassAccuracy(num_classes, top_k=1, average="micro", ignore_index=-1)
        self.test_top5 = MulticlassAccuracy(num_classes, top_k=top5, average="micro", ignore_index=-1)
        self.test_classes = ClassAccuracy(num_classes)

    def setup(self, stage: str) -> None:
        if self.classifier is None:
            found = getattr(getattr(self.trainer, "datamodule", None), "num_classes", None)
            if not isinstance(found, int) or found < 2:
                raise ConfigError("LinearProbe: set model.num_classes (the datamodule does not say how many classes it has)")
            self._build_classifier(found)
        read_counts = getattr(getattr(self.trainer, "datamodule", None), "train_class_counts", None)
        counts = read_counts() if callable(read_counts) else []
        self.groups = tail_groups(counts, self.many_shot_above, self.few_shot_below)
        if self.groups:
            rank_zero_info(groups_line("LinearProbe", "linear/", self.groups, self.many_shot_above, self.few_shot_below))

    def train(self, mode: bool = True) -> LinearProbe:
        super().train(mode)
        self.backbone.eval()  # frozen: BatchNorm keeps the statistics the method learned
        return self

    @torch.no_grad()
    def features(self, images: Tensor) -> Tensor:
        """The frozen pooled backbone feature [B, feature_dim]."""
        return self.backbone(images)

    def forward(self, inputs: Tensor) -> Tensor:
        """Logits [B, num_classes] of images [B, 3, H, W] or of cached features [B, feature_dim]."""
        feats = inputs if inputs.dim() == 2 else self.features(inputs)
        return self.classifier(feats.float())

    def class_logits(self, inputs: Tensor) -> Tensor:
        """Logits [B, num_classes] of the plain linear classifier (no prior), for ``callbacks.LongTailAccuracy``.

        Takes images or, when the probe caches features, the cached features (as ``forward``).
        """
        return self(inputs)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        inputs, labels = batch
        loss = F.cross_entropy(self(inputs), labels, ignore_index=-1)  # unlabelled samples
        self.log("linear/train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=labels.shape[0])
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        inputs, labels = batch
        logits = self(inputs)
        if self._loader_name(dataloader_idx) == "val":
            self.val_top1.update(logits, labels)
            self.log("linear/val_top1", self.val_top1, on_epoch=True, add_dataloader_idx=False, batch_size=labels.shape[0])
        else:
            self.test_top1.update(logits, labels)
            self.test_top5.update(logits, labels)
            self.test_classes.update(logits, labels)
            self.log("linear/top1", self.test_top1, on_epoch=True, add_dataloader_idx=False, batch_size=labels.shape[0])
            self.log("linear/top5", self.test_top5, on_epoch=True, add_dataloader_idx=False, batch_size=labels.shape[0])

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.validation_step(batch, batch_idx, dataloader_idx=1)  # the test loader is always "test"

    def on_validation_epoch_end(self) -> None:
        self._log_groups()

    def on_test_epoch_end(self) -> None:
        self._log_groups()

    def _log_groups(self) -> None:
        """Log ``linear/{many,medium,few}`` of the test batches seen since the last call (every rank calls it)."""
        if self.classifier is None or not self.test_classes.update_called:
            return
        correct, total = self.test_classes.compute()  # summed over the processes
        self.test_classes.reset()
        if self.trainer.sanity_checking:
            return
        for name, value in group_accuracies(correct, total, self.groups).items():
            if name in self.groups:  # linear/top1 is logged already
                self.log(f"linear/{name}", value, sync_dist=False)  # identical on every rank

    def _loader_name(self, dataloader_idx: int) -> str:
        names = getattr(getattr(self.trainer, "datamodule", None), "val_loader_names", ("test",))
        return names[dataloader_idx]

    def configure_optimizers(self) -> dict:
        trainer = self.trainer
        batch_size = getattr(trainer.datamodule, "batch_size", None) or self.optim.reference_batch_size
        cosine = ["model.init_args.optim.schedule=cosine"] if self.optim.schedule == "cosine" else []
        total_steps = run_length(trainer, cosine)  # None: no limit, and the schedule needs none
        steps_per_epoch = max(int(trainer.num_training_batches), 1) if trainer.num_training_batches != float("inf") else 1
        return self.optim.build(self.classifier.parameters(), batch_size * trainer.world_size, steps_per_epoch, total_steps or 0)
