"""Lightning callbacks that orchestrate: collect embeddings, call ``ssl_app.metrics``, log.

- ``EmbeddingMetrics``: every metric registered in ``ssl_app.metrics.families`` (alignment,
  positive vs top-k negative similarity on two augmented views; uniformity, tolerance and
  effective rank on clean embeddings), histograms, a figure, and a collapse alarm with history.
- ``KNNMonitor``: weighted kNN accuracy against the train split.
- ``LongTailAccuracy``: a classifier's top-1 overall and on many/medium/few-shot classes (``lt/*``).
- ``EmbeddingProjector``: a fixed subset of evaluation images, embedded, in TensorBoard's projector.

They log values that are identical on every rank (``sync_dist=False``); under DDP Lightning
advises an epoch-level sync for such values, which ``python -m ssl_app`` silences for the
``metrics/`` and ``lt/`` tags while it runs (``ssl_app.quiet.known_noise_silenced``).
Importing this package changes no global state, the warnings filter included.
"""

from callbacks.collapse import CollapseCriteria
from callbacks.embedding_metrics import EmbeddingMetrics, embedding_report
from callbacks.knn import KNNMonitor
from callbacks.long_tail import LongTailAccuracy
from callbacks.projector import EmbeddingProjector

__all__ = ["CollapseCriteria", "EmbeddingMetrics", "EmbeddingProjector", "KNNMonitor", "LongTailAccuracy", "embedding_report"]
