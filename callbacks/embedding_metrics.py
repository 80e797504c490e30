"""The registered embedding metrics (``ssl_app.metrics.families``) of the evaluation split, every epoch."""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn
from torch import Tensor

from callbacks.collapse import (
    ChanceGap,
    CollapseAlarm,
    CollapseCriteria,
    CollapseEvidence,
    LossEvidence,
    random_points_uniformity,
)
from callbacks.distributions import similarity_distributions, write_histogram
from callbacks.embedding_pass import embed_split, evaluation_mode, require_embedding_dataloader
from callbacks.evaluation_figures import EvaluationFigures
from callbacks.gather import SampleBuffer, Samples
from callbacks.inputs_table import UniformityInputs, claim_table, inputs_table
from callbacks.labels import missing_labels, say_skipped
from callbacks.plots import SIMILARITY_RANGE, find_tensorboard
from callbacks.schedule import check_every_n_epochs, evaluation_due
from ssl_app.checkpointing import first_nonfinite
from ssl_app.checks import IntAtLeast2, PositiveInt, check_int, check_optional_int, plain
from ssl_app.errors import ConfigError, NonFiniteError
from ssl_app.io.changes import OnChange
from ssl_app.metrics import DEFAULT_TOP_K, EmbeddingInputs, EmbeddingReport, evaluate_metrics
from ssl_app.metrics.histogram import SimilarityHistogram

log = logging.getLogger(__name__)

NegativesFrom = Literal["views", "train"]


def embedding_report(
    za: Tensor,
    zb: Tensor,
    labels: Tensor,
    top_k: int = DEFAULT_TOP_K,
    clean: Tensor | None = None,
    clean_labels: Tensor | None = None,
    backbone: Tensor | None = None,
    train: Tensor | None = None,
    negative_histogram: SimilarityHistogram | None = None,
    multiview: Tensor | None = None,
) -> EmbeddingReport:
    """Every registered metric of N samples' two view embeddings ``za``, ``zb`` [N, d].

    ``clean`` [N', d] with ``clean_labels`` are the one-per-sample embeddings that uniformity,
    tolerance and the effective rank read; ``None``: the first views ``za`` with ``labels``
    (the ``uniformity_inputs: augmented`` behaviour). ``backbone`` [N', f]: the unnormalised
    backbone features of the ``clean`` rows, which ``effective_rank_backbone`` reads (``None``:
    not computed). ``train`` [T, d]: clean embeddings of the training split, where
    ``top{k}_train_neg_sim`` looks for each anchor's hardest negatives (``None``: not computed).
    ``negative_histogram``: filled with every negative view similarity (``report.negative_histogram``).
    ``multiview`` [n, q, d]: q augmented views of n samples, which ``lidar`` reads (``None``: not computed).
    Pass the same gathered tensors on every rank: the functions shard their work and return the
    single-process values everywhere.
    """
    if clean is None:
        clean, clean_labels = za, labels
    elif clean_labels is None:
        raise ValueError("embedding_report: clean needs clean_labels")
    return evaluate_metrics(EmbeddingInputs(clean, clean_labels, za, zb, top_k, backbone, train, negative_histogram, multiview))


def collapse_evidence(report: EmbeddingReport) -> CollapseEvidence:
    """The typed values the collapse alarm reads (every registered field is in every report)."""
    return CollapseEvidence(
        uniformity=report.value("uniformity"),
        alignment=report.value("alignment"),
        pos_sim=report.value("pos_sim"),
        neg_sim=report.value("neg_sim"),
        effective_rank=report.value("effective_rank"),
        nonfinite=report.nonfinite,
        total=report.total,
    )


class EmbeddingMetrics(Callback):
    """Embedding-space metrics of the evaluation split, logged every ``every_n_epochs``.

    Every metric registered in ``ssl_app.metrics.families`` is computed and each of its fields
    logged as ``metrics/<field>``. Which inputs (docs/science.md, "Which inputs each metric reads"):

    - **two augmented views** of each sample: ``metrics/alignment`` (mean ‖z_a − z_b‖²),
      ``metrics/pos_sim`` (mean s_ii = z_a·z_b) and ``metrics/top{k}_neg_sim`` (mean of each
      anchor's k largest z_a,i·z_b,j, j ≠ i). During validation/test they are the ``"embeddings"``
      a method's ``validation_step``/``test_step`` returns, else ``pl_module.embed(view)`` of the
      loop's batch; with ``split`` set, an own pass (two augmented views per sample that are a
      fixed function of the sample index).
    - **clean** embeddings, one per sample: ``metrics/uniformity`` (−log mean_{i<j}
      exp(−2‖z_i − z_j‖²)), ``metrics/tolerance`` (mean z_i·z_j over same-label pairs; on data
      without labels, skipped with one line at setup) and
      ``metrics/effective_rank`` (exp of the entropy of the normalised singular values of the
      L2-normalised projections), and ``metrics/effective_rank_backbone``, the same of the
      backbone features, unnormalised, from the same clean pass (RankMe as Garrido et al. define
      it; not logged with ``uniformity_inputs: augmented``, which makes no clean pass).
      With ``uniformity_inputs: clean`` (default) these are the evaluation-transform embeddings
      of the same samples (an own pass through ``datamodule.embedding_dataloader(split,
      views=1, augment=False)``, each rank a disjoint shard), the quantity of Wang & Liu's
      Table 1. With ``augmented`` they are the first augmented view (lower uniformity and
      tolerance than the clean values, and no extra pass, but a different quantity).

    Rows are gathered from every rank (DistributedSampler repeats dropped by sample index), so
    every value equals the single-process one. Also logged: ``metrics/nonfinite`` (how many
    embeddings, clean rows plus view rows, had a NaN/inf entry; they are left out of the other
    metrics, warned about, and mark the evaluation collapsed), ``metrics/collapsed`` (0/1, see
    ``CollapseCriteria``); these two flags are in ``callback_metrics`` at every evaluation and
    written to the loggers when they change (``ssl_app.io.changes``). TensorBoard histograms
    (``callbacks.distributions``: 200 fixed bins over [−1, 1], counted on the device, exact count,
    mean and extremes) ``similarity/positive``, ``similarity/top{k}_negative`` and
    ``similarity/negative`` (every negative z_a,i·z_b,j, j ≠ i: N(N−1) values counted from the top-k
    search's own blocks and summed over ranks; the report's relative-penalty curve reads it),
    the figures (``callbacks.evaluation_figures``; every title names the run and its loss/τ;
    drawn in a process of their own during ``fit``: ``figure_process``)
    ``similarity/positive_vs_top{k}_negative`` (fixed x-range ``similarity_range`` and bins),
    ``figures/uniformity_tolerance_path`` (the run's path on the uniformity–tolerance plane, kept
    in the checkpoint state, fixed axes) and ``figures/singular_value_spectrum`` (σ_i/σ_1 of the
    clean embeddings and backbone features, log–log, with α and the effective rank) and,
    once, the text ``metrics/inputs``, a Markdown table of each tag the evaluation logged with its
    formula and inputs (rank 0; needs a TensorBoardLogger).

    Collapse modes (``callbacks.collapse``): ``diverged``, ``sudden``, ``progressive`` and, for a
    run that does not learn, ``loss_at_chance`` and ``concentrating``. ``metrics/collapsed`` is 1
    when any holds. For ``loss_at_chance`` the callback watches the training steps itself: on
    every logged step (``trainer.log_every_n_steps``) it reads the method's
    ``loss_and_chance`` (``ContrastiveMethod``: the step's loss and its loss's ``chance`` value,
    also logged as ``loss/chance``), accumulates on the device, and reads the epoch's evidence
    once, at the evaluation (an epoch without logged steps is not judged on its loss).

    A collapse is reported once, as a console warning naming the epoch, the modes and the
    values. ``collapse_summary()`` says which mode held first, since which epoch and why (plain
    JSON types, for the run's record). Only ``fit`` records: the history the history-based
    rules need (best and earlier uniformities) and the summary are saved in checkpoints;
    ``validate``/``test`` judge and log but record nothing.

    Args:
        split: ``None``: the loop's own split and batches for the views; otherwise the split
            to embed in an own pass, e.g. ``train`` to watch the training set.
        every_n_epochs: during ``fit``, evaluate after epochs n, 2n, ... (``validate``/``test``: always).
        max_samples: use only the samples with index < max_samples (``None``: the whole split).
        top_k: hardest negatives per anchor (Wang & Liu: 10).
        uniformity_inputs: ``clean`` or ``augmented``: what uniformity, tolerance and the
            effective rank are computed on (see above).
        log_histograms: log the histograms (``similarity/negative`` costs one bincount per
            similarity block of the top-k search) and the figures.
        collapse: the alarm's criteria, one object (``callbacks.collapse.CollapseCriteria``; ``None`` turns one off):
            ``uniformity_below`` (0.05), ``alignment_below`` (1e-3) with ``alignment_uniformity_below`` (1.0),
            ``similarity_above`` (0.995: the mean positive and top-k negative similarities both reach it),
            ``uniformity_drop`` (0.75 of the run's best, once that best reached ``drop_min_best``, 1.0, with the
            top-k negatives at ``drop_similarity``, 0.99, or above), ``chance_tolerance`` (0.01: every logged
            training step of an epoch ≥ 1 has ``|loss − chance| ≤ this × max(|chance|, 1)``),
            ``concentrating_evaluations`` (3: uniformity fell at each of at least this many evaluations in a row)
            by ``concentrating_drop`` (0.5) of its value before. A config written before they were one object
            (``collapse_uniformity: 0.05``, …) is read as this (``callbacks.collapse.LEGACY_OPTIONS``).
        stop_on_collapse: stop training (``trainer.should_stop``) when collapsed.
        negatives_from: ``views`` (default): only the two-view comparison above. ``train``: also
            ``metrics/top{k}_train_neg_sim``, each evaluation anchor's (first view's) k largest
            similarities to the clean embeddings of the whole train split (an own pass, shared
            with ``KNNMonitor``'s bank when their options agree; gathered from every rank): the
            paper's comparison, whose negatives come from its memory bank of the training set.
            Needs an evaluation split other than ``train``.
        stop_on_nonfinite: during ``fit``, stop the run as diverged (``NonFiniteError``, naming the
            step and the first non-finite parameter or buffer) when any embedding is NaN/inf:
            training on would only write a non-finite state (``false``: evaluate the finite
            ones, warn, and train on).
        similarity_range: the x-range ``[low, high]`` of the similarity figure (default
            [−1, 1]; −1 ≤ low < high ≤ 1), the same at every epoch and in every run; values
            outside it are counted in its edge bins.
        figure_process: during ``fit``, draw the figures in a process of their own (rank 0;
            ``callbacks.figure_process``): an evaluation hands over their data (a few kilobytes) and
            goes on, and each figure is written at its evaluation's step and time when drawn, at the
            latest at the end of ``fit`` (``on_fit_end``; after a stop signal or a failure in
            ``on_exception``). The process starts with training (``on_train_start``). ``false``: drawn
            in the training process, 0.3–0.7 s of CPU per evaluation that a GPU waits for.
            ``validate`` and ``test`` draw in the training process.
        lidar_views: q, the augmented views of each evaluation image that ``metrics/lidar`` (LiDAR, Thilak et
            al. 2024) reads: each image a class of an LDA (``ssl_app.metrics.geometry.lidar``). 0 (default):
            not computed. q ≥ 2 (10 in both reference implementations): an own pass of q augmented views (the
            datamodule's training augmentation, a fixed function of the sample index) of the first
            ``lidar_samples`` images of the evaluation split, i.e. q × ``lidar_samples`` forward passes per
            evaluation (10 × 1,000 = 10,000: about one CIFAR-10 validation pass).
        lidar_samples: n, the images LiDAR reads (those with index < n, also below ``max_samples``; ``None``: all).
    """

    def __init__(
        self,
        split: Literal["train", "val", "test"] | None = None,
        every_n_epochs: PositiveInt = 1,
        max_samples: IntAtLeast2 | None = None,
        top_k: PositiveInt = DEFAULT_TOP_K,
        uniformity_inputs: UniformityInputs = "clean",
        log_histograms: bool = True,
        collapse: CollapseCriteria = CollapseCriteria(),
        stop_on_collapse: bool = False,
        stop_on_nonfinite: bool = True,
        negatives_from: NegativesFrom = "views",
        similarity_range: tuple[float, float] = SIMILARITY_RANGE,
        figure_process: bool = True,
        lidar_views: int = 0,
        lidar_samples: IntAtLeast2 | None = 1000,
    ) -> None:
        super().__init__()
        if lidar_views != 0:  # 0: off; else q >= 2 views per image
            check_int(lidar_views, "EmbeddingMetrics: lidar_views (0 turns LiDAR off)", minimum=2)
        check_optional_int(lidar_samples, "EmbeddingMetrics: lidar_samples", minimum=2)
        every_n_epochs = check_every_n_epochs(every_n_epochs, "EmbeddingMetrics")
        if not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"EmbeddingMetrics: top_k must be an int >= 1, got {top_k!r}")
        if max_samples is not None and (not isinstance(max_samples, int) or max_samples < 2):
            raise ConfigError(f"EmbeddingMetrics: max_samples must be an int >= 2 or None, got {max_samples!r}")
        if split not in (None, "train", "val", "test"):
            raise ConfigError(f"EmbeddingMetrics: split must be null, train, val or test, got {split!r}")
        if uniformity_inputs not in ("clean", "augmented"):
            raise ConfigError(f"EmbeddingMetrics: uniformity_inputs must be clean or augmented, got {uniformity_inputs!r}")
        if negatives_from not in ("views", "train"):
            raise ConfigError(f"EmbeddingMetrics: negatives_from must be views or train, got {negatives_from!r}")
        if negatives_from == "train" and split == "train":
            raise ConfigError(
                "EmbeddingMetrics: negatives_from=train looks for negatives in the train split, so the evaluation "
                "split must be another one (split: null, val or test)"
            )
        if not isinstance(collapse, CollapseCriteria):
            raise ConfigError(f"EmbeddingMetrics: collapse must be a callbacks.CollapseCriteria, got {type(collapse).__name__}")
        self.split = split
        self.every_n_epochs = every_n_epochs
        self.max_samples = plain(max_samples)
        self.top_k = plain(top_k)
        self.uniformity_inputs = uniformity_inputs
        self.negatives_from = negatives_from
        self.log_histograms = log_histograms
        self.lidar_views = lidar_views
        self.lidar_samples = plain(lidar_samples)
        self.alarm = CollapseAlarm(collapse)
        self.stop_on_collapse = stop_on_collapse
        self.stop_on_nonfinite = bool(stop_on_nonfinite)
        self._buffer: SampleBuffer | None = None
        self._chance_gap = ChanceGap()
        self._warned_no_tensorboard = False
        self._warned_no_labels = False
        self._labels_missing = False
        self._described_inputs = False
        self.study: Path | None = None  # a sweep's folder: its fits share one metrics/inputs table
        self.figures = EvaluationFigures(similarity_range, process=figure_process)
        self._clean_rows: tuple[Tensor, Tensor | None] | None = None  # the last clean pass, for the spectrum
        self._flags = OnChange()

    @property
    def criteria(self) -> CollapseCriteria:
        return self.alarm.criteria

    @property
    def collapsed_at(self) -> int | None:
        """The first epoch found collapsed (``None``: never)."""
        return self.alarm.collapsed_at

    def collapse_summary(self) -> dict[str, Any] | None:
        """``{"mode", "since_epoch", "reasons", "modes"}`` of the run's collapse (``None``: never
        collapsed during ``fit``); see ``CollapseAlarm.summary``. JSON-serialisable, and in the
        checkpoint state, so a resumed run keeps it."""
        return self.alarm.summary()

    @property
    def state_key(self) -> str:
        return self._generate_state_key(split=self.split, uniformity_inputs=self.uniformity_inputs)

    def state_dict(self) -> dict[str, Any]:
        path = self.figures.path.state_dict()  # the plane's path, so a resumed run keeps it
        return {"uniformity_inputs": self.uniformity_inputs, **self.alarm.state_dict(), "plane_path": path}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("uniformity_inputs", self.uniformity_inputs) != self.uniformity_inputs:
            rank_zero_warn("EmbeddingMetrics: the checkpoint's collapse history used other uniformity_inputs; starting a new one")
            return
        self.alarm.load_state_dict(state_dict)
        self.figures.path.load_state_dict(state_dict.get("plane_path", []))

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        reason = missing_labels(trainer)
        self._labels_missing = reason is not None
        if reason is not None:  # said once here, not every epoch
            say_skipped("EmbeddingMetrics", "metrics/tolerance", f"{reason}; the other metrics are logged")
        if self.uniformity_inputs == "clean":  # fail before training, not after an epoch
            require_embedding_dataloader(
                trainer, "EmbeddingMetrics with uniformity_inputs=clean (or set uniformity_inputs: augmented)"
            )
        elif self.split is not None:
            require_embedding_dataloader(trainer, f"EmbeddingMetrics with split={self.split}")
        if self.negatives_from == "train":
            require_embedding_dataloader(trainer, "EmbeddingMetrics with negatives_from=train")
        if self.lidar_views:
            require_embedding_dataloader(trainer, f"EmbeddingMetrics with lidar_views={self.lidar_views}")

    # --- collecting ------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._chance_gap.reset()
        self.figures.drawer.collect()  # write the figures drawn since (never waits)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        pair = getattr(pl_module, "loss_and_chance", None)
        if pair is not None and self.criteria.chance_tolerance is not None:
            self._chance_gap.add(*pair)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.figures.drawer.collect()
        self._buffer = SampleBuffer(self.max_samples) if self._due(trainer) and self.split is None else None

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._buffer = SampleBuffer(self.max_samples) if self.split is None else None

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._collect(trainer, pl_module, outputs, batch, dataloader_idx)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._collect(trainer, pl_module, outputs, batch, dataloader_idx)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.split is not None and self._due(trainer):
            self._embed_own_split(trainer, pl_module)
        self._evaluate(trainer, pl_module, self.split or "val")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.split is not None:
            self._embed_own_split(trainer, pl_module)
        self._evaluate(trainer, pl_module, self.split or "test")

    def _embed_own_split(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._buffer = embed_split(
            trainer, pl_module, self.split, views=2, augment=True, max_samples=self.max_samples, who="EmbeddingMetrics"
        )

    def _due(self, trainer: L.Trainer) -> bool:
        return evaluation_due(trainer, self.every_n_epochs)

    def _collect(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, dataloader_idx: int) -> None:
        if self._buffer is None or dataloader_idx != 0:
            return
        views, labels, indices = batch
        embeddings = outputs.get("embeddings") if isinstance(outputs, Mapping) else None
        if embeddings is None:
            with evaluation_mode(pl_module), trainer.precision_plugin.forward_context():  # no grad, eager code
                embeddings = [pl_module.embed(v) for v in views[:2]]
        if len(embeddings) < 2:
            raise ValueError(f"EmbeddingMetrics needs two views per sample, got {len(embeddings)}")
        self._buffer.add(indices, labels, embeddings[:2])

    def clean_samples(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str, views: Samples) -> Samples:
        """The eval-transform embeddings of the samples in ``views`` (a collective under DDP).

        Each rank embeds its disjoint shard of ``split`` (indices < ``max_samples``); the
        gathered rows are then restricted to the indices the views hold, so both inputs describe
        the same samples even when the loop saw only part of the split.
        """
        buffer = embed_split(
            trainer,
            pl_module,
            split,
            views=1,
            augment=False,
            max_samples=self.max_samples,
            who="EmbeddingMetrics",
            keep_backbone=True,
        )
        clean = buffer.gather(device=pl_module.device)
        return clean.select(torch.isin(clean.indices, views.indices))

    def measure(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str, views: Samples) -> EmbeddingReport:
        """Every registered metric of the gathered ``views`` (and, for ``clean``, an own pass of ``split``)."""
        za, zb = views.view_features(0), views.view_features(1)
        train = self.train_embeddings(trainer, pl_module) if self.negatives_from == "train" else None
        multiview = self.lidar_embeddings(trainer, pl_module, split) if self.lidar_views else None
        histogram = SimilarityHistogram() if self.log_histograms else None
        if self.uniformity_inputs == "clean":
            clean = self.clean_samples(trainer, pl_module, split, views)
            self._clean_rows = (clean.view_features(0), clean.backbone)
            return embedding_report(
                za, zb, views.labels, self.top_k, clean.view_features(0), clean.labels, clean.backbone, train, histogram,
                multiview,
            )  # fmt: skip
        self._clean_rows = (za, None)
        return embedding_report(za, zb, views.labels, self.top_k, train=train, negative_histogram=histogram, multiview=multiview)

    def lidar_embeddings(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Tensor:
        """[n, q, d]: ``lidar_views`` augmented views of the first ``lidar_samples`` images of ``split``, gathered
        from every rank (each embeds a disjoint shard; a collective)."""
        limits = [limit for limit in (self.lidar_samples, self.max_samples) if limit is not None]
        buffer = embed_split(
            trainer, pl_module, split, views=self.lidar_views, augment=True, max_samples=min(limits) if limits else None,
            who="EmbeddingMetrics (lidar_views)",
        )  # fmt: skip
        return buffer.gather(device=pl_module.device).features

    def train_embeddings(self, trainer: L.Trainer, pl_module: L.LightningModule) -> Tensor:
        """The clean embeddings of the whole train split, gathered from every rank (a collective)."""
        buffer = embed_split(trainer, pl_module, "train", views=1, augment=False, who="EmbeddingMetrics")
        return buffer.gather(device=pl_module.device).view_features(0)

    # --- evaluating ------------------------------------------------------------------------
    def _evaluate(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> None:
        if self._buffer is None:
            return
        views = self._buffer.gather(device=pl_module.device)
        self._buffer = None
        if len(views) < 2:
            rank_zero_warn(f"EmbeddingMetrics: {len(views)} sample(s) to evaluate, need at least 2; nothing logged")
            return
        report = self.measure(trainer, pl_module, split, views)
        evidence = collapse_evidence(report)
        fitting = trainer.state.fn == TrainerFn.FITTING
        best_before = self.alarm.best_uniformity
        if fitting:
            self.figures.record(report, trainer.current_epoch)
        modes = self.alarm.judge(evidence, trainer.current_epoch, record=fitting, loss=self._loss_evidence(trainer, pl_module))
        scalars = {f"metrics/{tag}": value for tag, value in report.scalars().items()}
        for name, value in scalars.items():
            pl_module.log(name, value, sync_dist=False)  # identical on every rank
        # The flags stay 0 in a healthy run: in callback_metrics (the run record) always, written when they change.
        flags = {"metrics/nonfinite": float(report.nonfinite), "metrics/collapsed": float(bool(modes))}
        for name, value in flags.items():
            pl_module.log(name, value, sync_dist=False, logger=False)
        self._flags.write(pl_module.loggers, flags, trainer.global_step)
        if report.nonfinite and fitting and self.stop_on_nonfinite:
            tensor = first_nonfinite(pl_module)
            raise NonFiniteError(
                f"EmbeddingMetrics: {report.nonfinite} of {report.total} embeddings are non-finite at epoch "
                f"{trainer.current_epoch}, step {trainer.global_step}: the run diverged ("
                + (
                    f"{tensor} holds NaN or infinite values"
                    if tensor
                    else "every parameter and buffer is finite: the forward pass overflows"
                )
                + "; EmbeddingMetrics.stop_on_nonfinite=false evaluates the finite ones and trains on)"
            )
        if report.nonfinite:
            rank_zero_warn(
                f"EmbeddingMetrics: {report.nonfinite} of {report.total} embeddings are non-finite (diverged) "
                f"at epoch {trainer.current_epoch}; the metrics use the finite ones"
            )
        if math.isnan(report.value("tolerance")) and not (self._warned_no_labels or self._labels_missing):
            self._warned_no_labels = True
            rank_zero_warn(
                f"EmbeddingMetrics: the {split} split has no two labelled samples of one class; "
                "metrics/tolerance is not logged (the other metrics are)"
            )
        self._describe_inputs(trainer, scalars)
        if self.log_histograms:
            self._log_distributions(trainer, pl_module, report)
        self._clean_rows = None
        if modes:
            self._on_collapse(trainer, evidence, modes, best_before, dim=views.features.shape[-1])

    def _loss_evidence(self, trainer: L.Trainer, pl_module: L.LightningModule) -> LossEvidence | None:
        """This epoch's training loss against its chance value (``None`` outside ``fit`` or when off)."""
        if trainer.state.fn != TrainerFn.FITTING or self.criteria.chance_tolerance is None:
            return None
        return self._chance_gap.read(trainer.strategy, pl_module.device)  # the same on every rank

    def _tensorboard(self, trainer: L.Trainer):
        tensorboard = find_tensorboard(trainer)
        if tensorboard is None and not self._warned_no_tensorboard:
            self._warned_no_tensorboard = True
            rank_zero_warn("EmbeddingMetrics: no TensorBoardLogger, so the similarity histograms and figure are not logged")
        return tensorboard

    @rank_zero_only
    def _describe_inputs(self, trainer: L.Trainer, logged: Collection[str]) -> None:
        if self._described_inputs:
            return
        tensorboard = find_tensorboard(trainer)
        if tensorboard is not None:
            self._described_inputs = True
            table = inputs_table(self.top_k, self.uniformity_inputs, {*logged, "metrics/nonfinite"})
            if self.study is None or claim_table(self.study, Path(tensorboard.log_dir), table):
                tensorboard.experiment.add_text("metrics/inputs", table, trainer.global_step)

    def describe_inputs_once_in(self, study: Path) -> None:
        """Write the ``metrics/inputs`` table only when no other fit of the study at ``study`` (a sweep's folder)
        wrote the same table (``callbacks.inputs_table.claim_table``): once per study, not once per run."""
        self.study = Path(study)

    @rank_zero_only
    def _log_distributions(self, trainer: L.Trainer, pl_module: L.LightningModule, report: EmbeddingReport) -> None:
        tensorboard = self._tensorboard(trainer)
        distributions = similarity_distributions(report, self.figures.similarity_range) if tensorboard else None
        if distributions is None:
            return
        step, experiment = trainer.global_step, tensorboard.experiment
        for tag, summary in distributions.histograms.items():
            write_histogram(experiment, tag, summary, step)
        fitting = trainer.state.fn == TrainerFn.FITTING
        drawings = self.figures.drawings(trainer, pl_module, report, distributions, self._clean_rows, fitting)
        self.figures.log(experiment, trainer, drawings, fitting)

    # --- the figures drawn beside training -------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.log_histograms and trainer.is_global_zero and find_tensorboard(trainer) is not None:
            self.figures.drawer.start()  # its imports and fonts load during the first epoch, not at an evaluation's end

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Every figure written before the loggers close; the other callbacks' end of training (the
        # projector's files) ran meanwhile.
        self.figures.drawer.finish()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        try:  # the figures of the evaluations done, written before the loggers close (SIGTERM, a failure)
            self.figures.drawer.finish()
        except Exception as error:  # noqa: BLE001 - never hide the exception that ends the run
            rank_zero_warn(f"EmbeddingMetrics: the figures of the last evaluations could not be written: {error!r}")

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.figures.drawer.finish()

    def _on_collapse(
        self, trainer: L.Trainer, e: CollapseEvidence, modes: dict[str, list[str]], best_before: float, dim: int
    ) -> None:
        stop = self.stop_on_collapse and trainer.state.fn == TrainerFn.FITTING
        if stop:
            trainer.should_stop = True  # every rank computed the same values, so every rank stops
        if self.alarm.collapsed_at is not None:
            return
        self.alarm.collapsed_at = trainer.current_epoch
        best = f", best so far {best_before:.4f}" if math.isfinite(best_before) else ""
        reasons = "; ".join(f"{mode}: {', '.join(why)}" for mode, why in modes.items())
        message = (
            f"Representation collapse at epoch {trainer.current_epoch} ({', '.join(modes)}): "
            f"uniformity {max(e.uniformity, 0.0):.4f} (random points: ~{random_points_uniformity(dim):.2f}{best}), "
            f"alignment {e.alignment:.2e}, positive similarity {e.pos_sim:.4f}, "
            f"top-{self.top_k} negative similarity {e.neg_sim:.4f}, effective rank {e.effective_rank:.2f} of {dim} "
            f"({reasons}). "
            + ("Stopping training (stop_on_collapse=True)." if stop else "Training continues; this is reported once.")
        )
        rank_zero_only(log.warning)(message)
