"""Long-tail evaluation: top-1 overall and on many-, medium- and few-shot classes, every validation epoch."""

from __future__ import annotations

from typing import Literal, Optional

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from callbacks.embedding_pass import device_images, evaluation_mode, inference_batch_size
from callbacks.labels import missing_labels, say_skipped
from ssl_app.checks import check_optional_int
from ssl_app.errors import ConfigError
from ssl_app.metrics.long_tail import (
    FEW_SHOT_BELOW,
    MANY_SHOT_ABOVE,
    ClassAccuracy,
    check_thresholds,
    group_accuracies,
    groups_line,
    named_groups,
)


class LongTailAccuracy(Callback):
    """Top-1 accuracy of a classifier, overall and per class-frequency group (``ssl_app.metrics.long_tail``).

    Logs ``lt/top1`` (pooled over the split's samples) and ``lt/many``, ``lt/medium``, ``lt/few``
    (mean per-class accuracy of the classes with ``> many_shot_above``, ``few_shot_below …
    many_shot_above`` and ``< few_shot_below`` training images; the literature's 100 and 20)
    after every validation epoch of ``fit`` (not the sanity check), on ``validate`` and, for the
    test split, on ``test``. A group without any class is not logged, said once in the line
    printed at setup; every logged value is a finite number.

    On data without labels (the datamodule's ``labelled`` is False) it does nothing, said in one
    line at setup. Otherwise, what it needs (checked at setup, each failure one ConfigError):

    - the model's ``class_logits(images) -> [B, num_classes]``, logits without any prior (a
      method with a classifier; ``ssl_app.evaluation.LinearProbe`` for a SupCon-trained encoder);
    - the datamodule's ``train_class_counts()`` (training images per class, the groups) and
      ``classification_dataloader(split, batch_size=, rank=, world_size=)`` (every
      ``datamodules`` class has both).

    Its own pass, once per evaluation: the split through the eval pipeline (clean images, as
    the literature measures, not the validation loop's augmented views; from the module's device
    when the datamodule keeps the split there, ``eval_on``), the model in eval mode, without
    gradients or compiled code, each DDP rank a disjoint shard (no DistributedSampler padding), the
    per-class counts summed over ranks (``ClassAccuracy``): the values equal the single-process
    ones. The split is the datamodule's ``classification_split`` unless ``split`` says otherwise:
    ``val`` of a contrastive datamodule (CIFAR: the test set), ``test`` of
    ``LinearEvalDataModule`` (its ``val`` is held out of the long-tailed training split).

    Args:
        many_shot_above: classes with more training images than this are many-shot (100).
        few_shot_below: classes with fewer training images than this are few-shot (20).
        split: ``val`` or ``test`` during fit/validate (``None``: the datamodule's ``classification_split``).
        batch_size: batch size of the pass (default: the datamodule's ``eval_batch_size``).
    """

    def __init__(
        self,
        many_shot_above: int = MANY_SHOT_ABOVE,
        few_shot_below: int = FEW_SHOT_BELOW,
        split: Optional[Literal["val", "test"]] = None,
        batch_size: Optional[int] = None,
    ) -> None:
        super().__init__()
        many_shot_above, few_shot_below = check_thresholds(many_shot_above, few_shot_below, "LongTailAccuracy")
        if split not in (None, "val", "test"):
            raise ConfigError(f"LongTailAccuracy: split must be val, test or null, got {split!r}")
        self.many_shot_above = many_shot_above
        self.few_shot_below = few_shot_below
        self.split = split
        self.batch_size = check_optional_int(batch_size, "LongTailAccuracy: batch_size")
        self.groups: dict[str, list[int]] = {}
        self.num_classes = 0
        self.skipped = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        reason = missing_labels(trainer)
        self.skipped = reason is not None
        if reason is not None:  # nothing to classify against: skipped, whatever the model
            say_skipped("LongTailAccuracy", "lt/*", reason)
            return
        if not callable(getattr(pl_module, "class_logits", None)):
            raise ConfigError(
                f"LongTailAccuracy needs a model with class_logits(images) -> [B, num_classes] logits; "
                f"{type(pl_module).__name__} has none (for an encoder without a classifier, evaluate its "
                f"checkpoint with ssl_app.evaluation.LinearProbe, configs/linear.yaml)"
            )
        datamodule = getattr(trainer, "datamodule", None)
        missing = [name for name in ("train_class_counts", "classification_dataloader") if not hasattr(datamodule, name)]
        if missing:
            found = "no datamodule" if datamodule is None else type(datamodule).__name__
            raise ConfigError(
                f"LongTailAccuracy needs a datamodule with {' and '.join(missing)} (any datamodules class); got {found}"
            )
        counts = datamodule.train_class_counts()
        self.groups = named_groups(counts, self.many_shot_above, self.few_shot_below)
        self.num_classes = len(counts)
        rank_zero_info(groups_line("LongTailAccuracy", "lt/", self.groups, self.many_shot_above, self.few_shot_below))

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.evaluate(trainer, pl_module, self.split or getattr(trainer.datamodule, "classification_split", "val"))

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.evaluate(trainer, pl_module, "test")

    def evaluate(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> dict[str, float]:
        """Classify ``split``, log ``lt/*`` and return what was logged (identical on every rank)."""
        if self.skipped:
            return {}
        num_classes = self.num_classes
        datamodule, device = trainer.datamodule, pl_module.device
        batch_size = self.batch_size or inference_batch_size(datamodule, device)
        kept = device_images(datamodule, split, device)
        if kept is not None:  # the split on the device (eval_on): the same images, no workers
            loader = ((images, labels) for images, labels, _ in kept.batches(batch_size, trainer.global_rank, trainer.world_size))
        else:
            loader = datamodule.classification_dataloader(
                split, batch_size=batch_size, rank=trainer.global_rank, world_size=trainer.world_size
            )
        metric = ClassAccuracy(num_classes).to(device)
        with evaluation_mode(pl_module), trainer.precision_plugin.forward_context():
            for inputs, labels in loader:
                logits = pl_module.class_logits(inputs.to(device, non_blocking=True))
                if logits.dim() != 2 or logits.shape[1] != num_classes:
                    raise ConfigError(
                        f"LongTailAccuracy: {type(pl_module).__name__}.class_logits gave shape {tuple(logits.shape)}, "
                        f"but the datamodule has {num_classes} classes"
                    )
                metric.update(logits.float(), labels.to(device, non_blocking=True))
        correct, total = metric.compute()  # summed over the ranks
        values = group_accuracies(correct, total, self.groups)
        unseen = [name for name, classes in self.groups.items() if classes and name not in values]
        if unseen:
            rank_zero_warn(f"LongTailAccuracy: the {split} split has no labelled sample of the {'/'.join(unseen)} classes")
        for name, value in values.items():
            pl_module.log(f"lt/{name}", value, sync_dist=False)  # identical on every rank
        return values
