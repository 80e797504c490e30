"""The similarity distributions ``EmbeddingMetrics`` writes to TensorBoard, counted on the device.

Three histograms, each in ``HISTOGRAM_BINS`` fixed bins over [−1, 1] with its exact count, sum, sum of
squares, minimum and maximum (``ssl_app.metrics.histogram.SimilarityHistogram``):

- ``similarity/positive``: each anchor's positive similarity s_ii (N values);
- ``similarity/top{k}_negative``: each anchor's k largest negative similarities (N·k values);
- ``similarity/negative``: every negative view similarity s_ij, j ≠ i (N(N−1) values, counted by the
  top-k search from its own blocks: the report's ``negative_histogram``).

The similarity figure's densities come from the same values in its own bins (``SIMILARITY_BINS`` over
its x-range). Every count and moment of an evaluation is read from the device in one transfer; no
value of the N·k leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ssl_app.drawing.figures import SIMILARITY_BINS, SimilarityDensities
from ssl_app.metrics import EmbeddingReport
from ssl_app.metrics.histogram import DEFAULT_BINS, HistogramSummary, SimilarityHistogram, summaries

#: Bins of the TensorBoard histograms over [−1, 1] (width 0.01), the same for all three.
HISTOGRAM_BINS = DEFAULT_BINS
POSITIVE_HISTOGRAM_TAG = "similarity/positive"
#: TensorBoard histogram of every negative view similarity s_ij, j ≠ i (``log_histograms``).
NEGATIVE_HISTOGRAM_TAG = "similarity/negative"


def top_k_histogram_tag(k: int) -> str:
    return f"similarity/top{k}_negative"


@dataclass(frozen=True)
class SimilarityDistributions:
    """One evaluation's histograms by TensorBoard tag, and the similarity figure's two series in its bins."""

    histograms: dict[str, HistogramSummary]
    figure_positive: HistogramSummary
    figure_negative: HistogramSummary

    def figure(self, k: int, title: str, x_range: tuple[float, float]) -> SimilarityDensities:
        """The similarity figure (Wang & Liu, Fig. 8): densities in its bins, means of the values themselves."""
        low, high = x_range
        width = (high - low) / SIMILARITY_BINS
        positive = self.histograms[POSITIVE_HISTOGRAM_TAG]
        negative = self.histograms[top_k_histogram_tag(k)]
        return SimilarityDensities(
            density(self.figure_positive, width), density(self.figure_negative, width),
            positive.sum / positive.count, negative.sum / negative.count, k, title, (low, high),
        )  # fmt: skip


def density(summary: HistogramSummary, width: float) -> tuple[float, ...]:
    """Counts per bin as a density (its integral 1 over the bins)."""
    return tuple(count / (summary.count * width) for count in summary.counts)


def similarity_distributions(report: EmbeddingReport, x_range: tuple[float, float]) -> SimilarityDistributions | None:
    """The report's positive and top-k negative similarities (and its histogram of every negative), counted
    on their device and read in one transfer; ``None`` when the report has no top-k negatives."""
    positive, negatives = report["pos_sim"], report["neg_sim"]
    if negatives.dim() != 2 or negatives.numel() == 0:
        return None
    counted = {
        POSITIVE_HISTOGRAM_TAG: SimilarityHistogram.of(positive, HISTOGRAM_BINS),
        top_k_histogram_tag(negatives.shape[1]): SimilarityHistogram.of(negatives, HISTOGRAM_BINS),
    }
    if report.negative_histogram is not None:
        counted[NEGATIVE_HISTOGRAM_TAG] = report.negative_histogram
    low, high = x_range
    figure = [SimilarityHistogram.of(values, SIMILARITY_BINS, low, high) for values in (positive, negatives)]
    *read, figure_positive, figure_negative = summaries([*counted.values(), *figure])
    return SimilarityDistributions(dict(zip(counted, read)), figure_positive, figure_negative)


def write_histogram(experiment, tag: str, summary: HistogramSummary, step: int) -> None:
    """``tag``'s histogram at ``step`` from its bin counts (``add_histogram_raw``), nothing when empty. A
    leading empty bucket at the lower edge gives readers the first bin's left edge."""
    if summary.count == 0:
        return
    experiment.add_histogram_raw(
        tag,
        min=summary.min,
        max=summary.max,
        num=summary.count,
        sum=summary.sum,
        sum_squares=summary.sum_squares,
        bucket_limits=summary.edges,
        bucket_counts=[0.0, *summary.counts],
        global_step=step,
    )
