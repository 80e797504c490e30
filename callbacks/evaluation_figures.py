"""The figures ``EmbeddingMetrics`` logs at each evaluation, as TensorBoard Images.

- ``similarity/positive_vs_top{k}_negative``: positive vs top-k negative similarity densities
  (``callbacks.plots.similarity_figure``) on a fixed x-range (default [−1, 1]) and fixed bins;
- ``figures/uniformity_tolerance_path``: the run's path so far on the uniformity–tolerance plane
  (``callbacks.plane_path``), kept in the callback's checkpoint state;
- ``figures/singular_value_spectrum``: the singular values of the clean embeddings and their
  backbone features (``callbacks.spectrum_plot``).

Every title names the run (its log folder) and its loss with τ, so images of two runs side by
side say which is which.
"""

from __future__ import annotations

import math

import lightning as L
from torch import Tensor

from callbacks.plane_path import PLANE_PATH_TAG, PlanePath, PlanePoint
from callbacks.plots import SIMILARITY_RANGE, check_similarity_range, figure_title, similarity_figure
from callbacks.spectrum_plot import SPECTRUM_TAG, local_spectra, spectrum_figure
from ssl_app.metrics import EmbeddingReport


class EvaluationFigures:
    """The figures' options and state: ``similarity_range`` of the similarity figure's x-axis,
    the plane's ``path`` (recorded on every rank during ``fit``; drawn on rank 0)."""

    def __init__(self, similarity_range: tuple[float, float] = SIMILARITY_RANGE) -> None:
        self.similarity_range = check_similarity_range(similarity_range, "EmbeddingMetrics")
        self.path = PlanePath()

    def record(self, report: EmbeddingReport, epoch: int) -> None:
        """Add this evaluation's point to the plane's path (``fit`` only)."""
        self.path.add(epoch, report.value("uniformity"), report.value("tolerance"))

    def log(
        self,
        experiment,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        report: EmbeddingReport,
        clean: tuple[Tensor, Tensor | None] | None,
        fitting: bool,
    ) -> None:
        """Draw and log every figure at ``trainer.global_step`` (rank 0). ``clean``: the clean
        embeddings and their backbone features the report read (``None``: no spectrum)."""
        step = trainer.global_step
        positive, negatives = report["pos_sim"], report["neg_sim"]
        if negatives.dim() == 2 and negatives.numel():
            k = negatives.shape[1]
            title = figure_title(trainer, pl_module, f"positive vs top-{k} negative similarity")
            figure = similarity_figure(positive, negatives, k, title, self.similarity_range)
            experiment.add_figure(f"similarity/positive_vs_top{report.top_k}_negative", figure, step, close=True)
        current = None
        if not fitting:  # a validate/test evaluation is drawn, not recorded
            point = PlanePoint(trainer.current_epoch, report.value("uniformity"), report.value("tolerance"))
            current = None if math.isnan(point.uniformity) or math.isnan(point.tolerance) else point
        figure = self.path.figure(figure_title(trainer, pl_module, "path on the uniformity–tolerance plane"), current)
        if figure is not None:
            experiment.add_figure(PLANE_PATH_TAG, figure, step, close=True)
        spectra = local_spectra(*clean) if clean is not None else {}
        if spectra:
            figure = spectrum_figure(spectra, figure_title(trainer, pl_module, "singular-value spectrum"))
            experiment.add_figure(SPECTRUM_TAG, figure, step, close=True)
