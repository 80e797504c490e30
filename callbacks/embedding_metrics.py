"""Alignment, uniformity, tolerance and positive-vs-hardest-negative similarities, every epoch."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Optional

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn
from torch import Tensor

from callbacks.collapse import CollapseCriteria, random_points_uniformity
from callbacks.embedding_pass import embed_split
from callbacks.gather import SampleBuffer
from callbacks.plots import find_tensorboard, similarity_figure
from ssl_app.errors import ConfigError
from ssl_app.metrics import alignment, positive_and_topk_negatives, tolerance, uniformity

log = logging.getLogger(__name__)


@dataclass
class EmbeddingReport:
    """What one evaluation of the embedding space found (scalars as 0-d tensors).

    ``positive`` [N] is ``s_ii`` and ``negatives`` [N, k] the k largest ``s_ij`` (j ≠ i) of each
    anchor; ``tolerance`` is NaN without two labelled samples of one class.
    """

    alignment: Tensor
    uniformity: Tensor
    tolerance: Tensor
    positive: Tensor
    negatives: Tensor

    def scalars(self, top_k: int) -> dict[str, float]:
        values = {
            "metrics/alignment": float(self.alignment),
            "metrics/uniformity": float(self.uniformity),
            "metrics/tolerance": float(self.tolerance),
            "metrics/pos_sim": float(self.positive.mean()),
            f"metrics/top{top_k}_neg_sim": float(self.negatives.mean()),
        }
        return {name: value for name, value in values.items() if not math.isnan(value)}


def embedding_report(za: Tensor, zb: Tensor, labels: Tensor, top_k: int = 10) -> EmbeddingReport:
    """The PAPER.md metrics of N samples' two view embeddings ``za``, ``zb`` [N, d] (N ≥ 2).

    - alignment: ``mean_i ||za_i − zb_i||²`` (the two views of each sample);
    - uniformity: ``−log mean_{i<j} exp(−2 ||za_i − za_j||²)`` over the first views;
    - tolerance: mean ``za_i·za_j`` over same-label pairs (labels < 0, unlabelled, are left out);
    - positives ``za_i·zb_i`` and the ``min(top_k, N − 1)`` largest negatives ``za_i·zb_j``.

    Pass the same gathered tensors on every rank: the functions shard their work over the
    default process group and return the single-process values everywhere.
    """
    labelled = labels >= 0
    k = min(top_k, za.shape[0] - 1)
    sims = positive_and_topk_negatives(za, zb, k=k)
    return EmbeddingReport(
        alignment=alignment(za, zb),
        uniformity=uniformity(za),
        tolerance=tolerance(za[labelled], labels[labelled]) if labelled.any() else za.new_tensor(float("nan")),
        positive=sims.positive,
        negatives=sims.negatives,
    )


class EmbeddingMetrics(Callback):
    """Embedding-space metrics of the evaluation split, logged every ``every_n_epochs``.

    During validation (and ``validate``/``test``) it collects both view embeddings of each batch
    of the loop's split (val, or test during ``test``): the ``"embeddings"`` a method's
    ``validation_step``/``test_step`` returns, else ``pl_module.embed(view)``. At epoch end the
    rows are gathered from every rank, DistributedSampler repeats dropped by sample index, and
    ``embedding_report`` is logged:

    - scalars ``metrics/alignment``, ``metrics/uniformity``, ``metrics/tolerance``,
      ``metrics/pos_sim``, ``metrics/top{k}_neg_sim``, ``metrics/collapsed`` (0/1);
    - TensorBoard histograms ``similarity/positive``, ``similarity/top{k}_negative`` and the
      figure ``similarity/positive_vs_top{k}_negative`` (rank 0; needs a TensorBoardLogger).

    A collapse (see ``CollapseCriteria``) is reported once, as a console warning naming the
    epoch and the values.

    With ``split`` set (``train``, ``val`` or ``test``), the callback instead embeds that split
    itself at the end of each due validation/test epoch, two augmented views per sample that
    are a fixed function of the sample index (``datamodule.embedding_dataloader``), each rank
    a disjoint shard.

    Args:
        split: ``None``: the loop's own split and batches (no extra pass); otherwise the split
            to embed in an own pass, e.g. ``train`` to watch the training set.
        every_n_epochs: during ``fit``, evaluate after epochs n, 2n, ... (``validate``/``test``: always).
        max_samples: use only the samples with index < max_samples (``None``: the whole split).
        top_k: hardest negatives per anchor (Wang & Liu: 10).
        log_histograms: log the histograms and the figure.
        collapse_uniformity: collapsed if uniformity is below this (``None``: off).
        collapse_alignment: collapsed if alignment is below this while uniformity is below
            ``collapse_alignment_uniformity`` (``None``: off).
        collapse_alignment_uniformity: see ``collapse_alignment``.
        collapse_similarity: collapsed if the mean positive and the mean top-k negative
            similarities both reach this (``None``: off).
        stop_on_collapse: stop training (``trainer.should_stop``) when collapsed.
    """

    def __init__(
        self,
        split: Optional[Literal["train", "val", "test"]] = None,
        every_n_epochs: int = 1,
        max_samples: Optional[int] = None,
        top_k: int = 10,
        log_histograms: bool = True,
        collapse_uniformity: Optional[float] = 0.05,
        collapse_alignment: Optional[float] = 1e-3,
        collapse_alignment_uniformity: float = 1.0,
        collapse_similarity: Optional[float] = 0.995,
        stop_on_collapse: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(every_n_epochs, int) or every_n_epochs < 1:
            raise ValueError(f"EmbeddingMetrics: every_n_epochs must be an int >= 1, got {every_n_epochs!r}")
        if not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"EmbeddingMetrics: top_k must be an int >= 1, got {top_k!r}")
        if max_samples is not None and (not isinstance(max_samples, int) or max_samples < 2):
            raise ValueError(f"EmbeddingMetrics: max_samples must be an int >= 2 or None, got {max_samples!r}")
        if split not in (None, "train", "val", "test"):
            raise ConfigError(f"EmbeddingMetrics: split must be null, train, val or test, got {split!r}")
        self.split = split
        self.every_n_epochs = every_n_epochs
        self.max_samples = max_samples
        self.top_k = top_k
        self.log_histograms = log_histograms
        self.criteria = CollapseCriteria(
            collapse_uniformity, collapse_alignment, collapse_alignment_uniformity, collapse_similarity
        )
        self.stop_on_collapse = stop_on_collapse
        self.collapsed_at: Optional[int] = None  # the first epoch found collapsed
        self._buffer: Optional[SampleBuffer] = None
        self._warned_no_tensorboard = False

    # --- collecting ------------------------------------------------------------------------
    def on_validation_epoch_start(self, trainer: "L.Trainer", pl_module: "L.LightningModule") -> None:
        self._buffer = SampleBuffer(self.max_samples) if self._due(trainer) and self.split is None else None

    def on_test_epoch_start(self, trainer: "L.Trainer", pl_module: "L.LightningModule") -> None:
        self._buffer = SampleBuffer(self.max_samples) if self.split is None else None

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._collect(trainer, pl_module, outputs, batch, dataloader_idx)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._collect(trainer, pl_module, outputs, batch, dataloader_idx)

    def on_validation_epoch_end(self, trainer: "L.Trainer", pl_module: "L.LightningModule") -> None:
        if self.split is not None and self._due(trainer):
            self._embed_own_split(trainer, pl_module)
        self._evaluate(trainer, pl_module)

    def on_test_epoch_end(self, trainer: "L.Trainer", pl_module: "L.LightningModule") -> None:
        if self.split is not None:
            self._embed_own_split(trainer, pl_module)
        self._evaluate(trainer, pl_module)

    def _embed_own_split(self, trainer: "L.Trainer", pl_module: "L.LightningModule") -> None:
        self._buffer = embed_split(
            trainer, pl_module, self.split, views=2, augment=True, max_samples=self.max_samples, who="EmbeddingMetrics"
        )

    def _due(self, trainer: "L.Trainer") -> bool:
        if trainer.sanity_checking:
            return False
        return trainer.state.fn != TrainerFn.FITTING or (trainer.current_epoch + 1) % self.every_n_epochs == 0

    def _collect(self, trainer: "L.Trainer", pl_module: "L.LightningModule", outputs: Any, batch: Any, dataloader_idx: int) -> None:
        if self._buffer is None or dataloader_idx != 0:
            return
        views, labels, indices = batch
        embeddings = outputs.get("embeddings") if isinstance(outputs, Mapping) else None
        if embeddings is None:
            with torch.no_grad(), trainer.precision_plugin.forward_context():
                embeddings = [pl_module.embed(v) for v in views[:2]]
        if len(embeddings) < 2:
            raise ValueError(f"EmbeddingMetrics needs two views per sample, got {len(embeddings)}")
        self._buffer.add(indices, labels, embeddings[:2])

    # --- evaluating ------------------------------------------------------------------------
    def _evaluate(self, trainer: "L.Trainer", pl_module: "L.LightningModule") -> None:
        if self._buffer is None:
            return
        samples = self._buffer.gather(device=pl_module.device)
        self._buffer = None
        if len(samples) < 2:
            rank_zero_warn(f"EmbeddingMetrics: {len(samples)} sample(s) to evaluate, need at least 2; nothing logged")
            return
        report = embedding_report(samples.view_features(0), samples.view_features(1), samples.labels, self.top_k)
        scalars = report.scalars(self.top_k)
        reasons = self.criteria.reasons(
            scalars["metrics/alignment"], scalars["metrics/uniformity"],
            scalars["metrics/pos_sim"], scalars[f"metrics/top{self.top_k}_neg_sim"],
        )  # fmt: skip
        scalars["metrics/collapsed"] = float(bool(reasons))
        for name, value in scalars.items():
            pl_module.log(name, value, sync_dist=False)  # identical on every rank
        if self.log_histograms:
            self._log_distributions(trainer, report)
        if reasons:
            self._on_collapse(trainer, scalars, reasons, dim=samples.features.shape[-1])

    @rank_zero_only
    def _log_distributions(self, trainer: "L.Trainer", report: EmbeddingReport) -> None:
        tensorboard = find_tensorboard(trainer)
        if tensorboard is None:
            if not self._warned_no_tensorboard:
                self._warned_no_tensorboard = True
                rank_zero_warn("EmbeddingMetrics: no TensorBoardLogger, so the similarity histograms and figure are not logged")
            return
        step, k = trainer.global_step, self.top_k
        experiment = tensorboard.experiment
        experiment.add_histogram("similarity/positive", report.positive.float().cpu(), step)
        experiment.add_histogram(f"similarity/top{k}_negative", report.negatives.float().cpu().flatten(), step)
        title = f"epoch {trainer.current_epoch}: positive vs top-{k} negative similarity"
        figure = similarity_figure(report.positive, report.negatives, k, title)
        experiment.add_figure(f"similarity/positive_vs_top{k}_negative", figure, step, close=True)

    def _on_collapse(self, trainer: "L.Trainer", scalars: dict[str, float], reasons: list[str], dim: int) -> None:
        stop = self.stop_on_collapse and trainer.state.fn == TrainerFn.FITTING
        if stop:
            trainer.should_stop = True  # every rank computed the same values, so every rank stops
        if self.collapsed_at is not None:
            return
        self.collapsed_at = trainer.current_epoch
        k = self.top_k
        message = (
            f"Representation collapse at epoch {trainer.current_epoch}: "
            f"uniformity {max(scalars['metrics/uniformity'], 0.0):.4f} (random points: ~{random_points_uniformity(dim):.2f}), "
            f"alignment {scalars['metrics/alignment']:.2e}, positive similarity {scalars['metrics/pos_sim']:.4f}, "
            f"top-{k} negative similarity {scalars[f'metrics/top{k}_neg_sim']:.4f} ({'; '.join(reasons)}). "
            + ("Stopping training (stop_on_collapse=True)." if stop else "Training continues; this is reported once.")
        )
        rank_zero_only(log.warning)(message)

