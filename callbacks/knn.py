"""The weighted kNN monitor: how well the current embeddings classify, without training a probe."""

from __future__ import annotations

import math
from typing import Optional

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from callbacks.embedding_pass import Features, embed_split, encoder, require_embedding_dataloader
from callbacks.labels import missing_labels, say_skipped
from callbacks.schedule import check_every_n_epochs, evaluation_due
from ssl_app.checks import PositiveFinite, PositiveInt, check_optional_int, plain
from ssl_app.metrics import WeightedKNNAccuracy
from ssl_app.metrics.knn import DEFAULT_K, DEFAULT_TAIL_K, DEFAULT_TEMPERATURE
from ssl_app.metrics.long_tail import (
    FEW_SHOT_BELOW,
    MANY_SHOT_ABOVE,
    check_thresholds,
    group_accuracies,
    groups_line,
    tail_groups,
)


class KNNMonitor(Callback):
    """Weighted kNN accuracy (Wu et al. 2018) of the evaluation split against the train split.

    Every ``every_n_epochs`` validation epoch of ``fit`` (and on ``validate``/``test``) it embeds
    the train split (the bank) and the evaluation split (val; test during ``test``), one view
    each with the deterministic eval transform, through the datamodule's
    ``embedding_dataloader`` (or from the module's device, ``eval_on``; one pass per split and
    evaluation, shared with the other callbacks: ``embed_split``): each rank embeds a disjoint
    shard, the bank is gathered to every rank, each rank classifies its own queries, and
    ``WeightedKNNAccuracy`` sums the counts
    over ranks. Each query's k most similar bank rows vote with weight ``exp(s/σ)``; the result
    is logged as ``metrics/knn_acc``. The module is in eval mode, without gradients, meanwhile.
    On data without labels (``labelled`` False: a folder of unlabelled images) it does nothing,
    said in one line at setup.

    Long-tail groups (``shot_groups``, on when the datamodule's ``train_class_counts()`` put
    classes in at least two groups, :func:`~ssl_app.metrics.long_tail.tail_groups`; a balanced
    split has no tail): from the same similarity search, the vote of the ``tail_k``
    nearest rows (Kukleva et al.'s kNN@10 by default: at k = 200 a class with 5 training images
    holds at most 5 of the votes) is counted per class, and ``metrics/knn_many``,
    ``metrics/knn_medium``, ``metrics/knn_few`` are the mean per-class accuracies of the classes
    with ``> many_shot_above``, ``few_shot_below … many_shot_above`` and ``< few_shot_below``
    training images (``ssl_app.metrics.long_tail``, the definition of ``lt/*``). A group without
    any class (CIFAR-10-LT at IF 100, 5,000 … 50 images: no few-shot class) is not logged, said in
    the line printed at setup. Counts are summed over ranks: exact under DDP.

    Args:
        k: neighbours that vote (Wu et al.: 200).
        temperature: σ of the vote weights (Wu et al.: 0.07).
        every_n_epochs: during ``fit``, evaluate after epochs n, 2n, ... (``validate``/``test``: always).
        max_train_samples: bank = the train samples with index < max_train_samples (``None``: all).
        features: ``projection``: the normalised embedding z (``pl_module.embed``);
            ``backbone``: the normalised backbone features ``pl_module(images)``.
        batch_size: batch size of the embedding passes (default: the datamodule's ``eval_batch_size``;
            a pass another callback already made at this evaluation is reused as it is).
        chunk_size: query rows per similarity block (default: 2^24 similarities per block).
        shot_groups: log the many/medium/few-shot kNN accuracies (when the datamodule has class counts).
        tail_k: neighbours of the per-class vote behind the groups (``null``: ``k``'s vote).
        many_shot_above: classes with more training images than this are many-shot (100).
        few_shot_below: classes with fewer training images than this are few-shot (20).
    """

    def __init__(
        self,
        k: PositiveInt = DEFAULT_K,
        temperature: PositiveFinite = DEFAULT_TEMPERATURE,
        every_n_epochs: PositiveInt = 1,
        max_train_samples: Optional[PositiveInt] = None,
        features: Features = "projection",
        batch_size: Optional[int] = None,
        chunk_size: Optional[int] = None,
        shot_groups: bool = True,
        tail_k: Optional[PositiveInt] = DEFAULT_TAIL_K,
        many_shot_above: int = MANY_SHOT_ABOVE,
        few_shot_below: int = FEW_SHOT_BELOW,
    ) -> None:
        super().__init__()
        every_n_epochs = check_every_n_epochs(every_n_epochs, "KNNMonitor")
        max_train_samples = check_optional_int(max_train_samples, "KNNMonitor: max_train_samples")
        tail_k = check_optional_int(tail_k, "KNNMonitor: tail_k")
        self.many_shot_above, self.few_shot_below = check_thresholds(many_shot_above, few_shot_below, "KNNMonitor")
        WeightedKNNAccuracy(1, k, temperature, chunk_size)  # validates k, temperature, chunk_size now
        self.k = plain(k)
        self.temperature = plain(temperature)
        self.every_n_epochs = every_n_epochs
        self.max_train_samples = max_train_samples
        self.features = features
        self.batch_size = batch_size
        self.chunk_size = chunk_size
        self.shot_groups = bool(shot_groups)
        self.tail_k = tail_k
        self.groups: dict[str, list[int]] = {}  # set at setup, when the datamodule has class counts
        self.skipped = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        require_embedding_dataloader(trainer, "KNNMonitor")  # fail before training, not after an epoch
        encoder(pl_module, self.features)
        reason = missing_labels(trainer)
        self.skipped = reason is not None
        if reason is not None:
            say_skipped("KNNMonitor", "metrics/knn_acc", reason)
            return
        read_counts = getattr(trainer.datamodule, "train_class_counts", None)
        counts = read_counts() if self.shot_groups and callable(read_counts) else []
        self.groups = tail_groups(counts, self.many_shot_above, self.few_shot_below)
        if self.groups:
            vote = f"tail_k={self.tail_k}" if self.tail_k is not None else f"k={self.k}"
            who = f"KNNMonitor (groups of the {vote} vote)"
            rank_zero_info(groups_line(who, "metrics/knn_", self.groups, self.many_shot_above, self.few_shot_below))

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if evaluation_due(trainer, self.every_n_epochs):
            self.evaluate(trainer, pl_module, "val")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.evaluate(trainer, pl_module, "test")

    def evaluate(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Optional[float]:
        """Embed, classify and log ``metrics/knn_acc`` for ``split``; returns the accuracy (or None)."""
        if self.skipped:
            return None
        common = dict(views=1, augment=False, features=self.features, batch_size=self.batch_size, who="KNNMonitor")
        bank = embed_split(trainer, pl_module, "train", max_samples=self.max_train_samples, **common)
        bank = bank.gather(device=pl_module.device)
        labelled = bank.labels >= 0
        if not bool(labelled.any()):
            rank_zero_warn("KNNMonitor: the train split has no labels; metrics/knn_acc is not logged")
            return None
        # keep_backbone: the same pass as EmbeddingMetrics' clean one, whichever callback runs first
        queries = embed_split(trainer, pl_module, split, keep_backbone=True, **common).local()
        # The classes a bank can vote for are the ones it holds; same on every rank (gathered).
        num_classes = max(int(bank.labels.max()) + 1, sum(len(classes) for classes in self.groups.values()))
        tail_k = (self.tail_k or self.k) if self.groups else None
        metric = WeightedKNNAccuracy(num_classes, self.k, self.temperature, self.chunk_size, tail_k=tail_k)
        metric = metric.to(pl_module.device)
        query_features = queries.view_features(0) if len(queries) else bank.view_features(0)[:0]  # a rank may get no rows
        metric.update(
            query_features.to(pl_module.device), queries.labels.to(pl_module.device), bank.view_features(0), bank.labels
        )
        accuracy = float(metric.compute())  # sums correct/total over the ranks
        if math.isnan(accuracy):
            rank_zero_warn(f"KNNMonitor: the {split} split has no labels; metrics/knn_acc is not logged")
            return None
        pl_module.log("metrics/knn_acc", accuracy, sync_dist=False)  # identical on every rank
        if metric.per_class is not None:
            correct, total = metric.per_class.compute()  # summed over the ranks
            for name, value in group_accuracies(correct, total, self.groups).items():
                if name in self.groups:  # not the pooled top1 of the tail_k vote
                    pl_module.log(f"metrics/knn_{name}", value, sync_dist=False)
        return accuracy
