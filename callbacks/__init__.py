"""Lightning callbacks that orchestrate: collect embeddings, call ``ssl_app.metrics``, log.

- ``EmbeddingMetrics``: every metric registered in ``ssl_app.metrics.registry`` (alignment,
  positive vs top-k negative similarity on two augmented views; uniformity, tolerance and
  effective rank on clean embeddings), histograms, a figure, and a collapse alarm with history.
- ``KNNMonitor``: weighted kNN accuracy against the train split.
- ``LongTailAccuracy``: a classifier's top-1 overall and on many/medium/few-shot classes (``lt/*``).
"""

import warnings

from callbacks.embedding_metrics import EmbeddingMetrics, embedding_report
from callbacks.knn import KNNMonitor
from callbacks.long_tail import LongTailAccuracy

# The callbacks log values that are identical on every rank by construction (gathered inputs,
# metrics that all-reduce), so the epoch-level sync Lightning advises would change nothing;
# silence that advice for their ``metrics/`` and ``lt/`` tags only.
warnings.filterwarnings("ignore", message=r"It is recommended to use `self\.log\('(metrics|lt)/")

__all__ = ["EmbeddingMetrics", "KNNMonitor", "LongTailAccuracy", "embedding_report"]
