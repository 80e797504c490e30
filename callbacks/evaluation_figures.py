"""The figures ``EmbeddingMetrics`` logs at each evaluation, as TensorBoard Images.

- ``similarity/positive_vs_top{k}_negative``: positive vs top-k negative similarity densities
  (``ssl_app.drawing.figures.SimilarityDensities``, binned on the device by ``callbacks.distributions``)
  on a fixed x-range (default [−1, 1]) and fixed bins;
- ``figures/uniformity_tolerance_path``: the run's path so far on the uniformity–tolerance plane
  (``callbacks.plane_path``), kept in the callback's checkpoint state;
- ``figures/singular_value_spectrum``: the singular values of the clean embeddings and their
  backbone features (``callbacks.spectrum_plot``), the σ the metrics computed.

Every title names the run (its log folder) and its loss with τ, so images of two runs side by
side say which is which, and the epoch and step it shows: in a ``validate``/``test`` of a checkpoint,
the run that wrote the checkpoint and the checkpoint's epoch and step (``callbacks.plots.position``).
The figures are handed over as plain data and drawn, during ``fit``, in a process of their own
(``callbacks.figure_process``; ``EmbeddingMetrics.figure_process``), each written at its
evaluation's step and time once drawn, at the latest at the end of ``fit``.
"""

from __future__ import annotations

import math
import time

import lightning as L
from tensorboard.compat.proto.summary_pb2 import Summary
from torch import Tensor

from callbacks.distributions import SimilarityDistributions
from callbacks.figure_process import FigureDrawer
from callbacks.plane_path import PLANE_PATH_TAG, PlanePath, PlanePoint
from callbacks.plots import SIMILARITY_RANGE, check_similarity_range, figure_title, position
from callbacks.spectrum_plot import SPECTRUM_TAG, local_spectra, spectrum_drawing
from ssl_app.drawing.figures import Drawing, Rendered
from ssl_app.metrics import EmbeddingReport

#: The report's spectra (``EmbeddingReport.spectra``) by the names the spectrum figure gives them.
SPECTRUM_NAMES = {"clean": "projection", "backbone": "backbone"}


class EvaluationFigures:
    """The figures' options and state: ``similarity_range`` of the similarity figure's x-axis,
    the plane's ``path`` (recorded on every rank during ``fit``; drawn on rank 0), and the ``drawer``
    (``process``: a process of its own during ``fit``)."""

    def __init__(self, similarity_range: tuple[float, float] = SIMILARITY_RANGE, process: bool = True) -> None:
        self.similarity_range = check_similarity_range(similarity_range, "EmbeddingMetrics")
        self.path = PlanePath()
        self.drawer = FigureDrawer(process)

    def record(self, report: EmbeddingReport, epoch: int) -> None:
        """Add this evaluation's point to the plane's path (``fit`` only)."""
        self.path.add(epoch, report.value("uniformity"), report.value("tolerance"))

    def drawings(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        report: EmbeddingReport,
        distributions: SimilarityDistributions | None,
        clean: tuple[Tensor, Tensor | None] | None,
        fitting: bool,
    ) -> list[Drawing]:
        """This evaluation's figures as plain data, by tag. ``clean``: the clean embeddings and their
        backbone features the report read, for a spectrum the report did not compute (``None``: none)."""
        found: list[Drawing] = []
        if distributions is not None:
            k = report["neg_sim"].shape[1]
            title = figure_title(trainer, pl_module, f"positive vs top-{k} negative similarity")
            tag = f"similarity/positive_vs_top{report.top_k}_negative"
            found.append((tag, distributions.figure(k, title, self.similarity_range)))
        current = None
        if not fitting:  # a validate/test evaluation is drawn, not recorded
            point = PlanePoint(position(trainer).epoch, report.value("uniformity"), report.value("tolerance"))
            current = None if math.isnan(point.uniformity) or math.isnan(point.tolerance) else point
        path = self.path.drawing(figure_title(trainer, pl_module, "path on the uniformity–tolerance plane"), current)
        if path is not None:
            found.append((PLANE_PATH_TAG, path))
        spectra = {SPECTRUM_NAMES[name]: sigma for name, sigma in report.spectra.items()}
        if "projection" not in spectra and clean is not None:  # a metric subset without the spectrum
            spectra = local_spectra(*clean)
        if spectra:
            found.append((SPECTRUM_TAG, spectrum_drawing(spectra, figure_title(trainer, pl_module, "singular-value spectrum"))))
        return found

    def log(self, experiment, trainer: L.Trainer, drawings: list[Drawing], fitting: bool) -> None:
        """Draw ``drawings`` and write them at this evaluation's step and time (rank 0): during ``fit``
        through the drawer (when it is a process, written later), else at once."""
        step, walltime = trainer.global_step, time.time()

        def write(images: list[tuple[str, Rendered]]) -> None:
            for tag, image in images:
                write_image(experiment, tag, image, step, walltime)

        self.drawer.submit(drawings, write, here=not fitting)


def write_image(experiment, tag: str, image: Rendered, step: int, walltime: float) -> None:
    """An Image summary of the PNG ``image`` at ``step`` and ``walltime``: what ``add_figure`` writes for the
    same figure (RGB pixels at the figure's dpi), without encoding it again."""
    summary = Summary(
        value=[
            Summary.Value(
                tag=tag,
                image=Summary.Image(height=image.height, width=image.width, colorspace=3, encoded_image_string=image.png),
            )
        ]
    )
    experiment._get_file_writer().add_summary(summary, step, walltime)  # the writer add_image itself uses
