"""Lightning callbacks that orchestrate: collect embeddings, call ``ssl_app.metrics``, log.

- ``EmbeddingMetrics``: alignment, uniformity, tolerance, positive vs top-k negative similarity
  (scalars, histograms, a figure) and a collapse alarm.
- ``KNNMonitor``: weighted kNN accuracy against the train split.
"""

import warnings

from callbacks.embedding_metrics import EmbeddingMetrics, embedding_report
from callbacks.knn import KNNMonitor

# Both callbacks log values that are identical on every rank by construction (gathered inputs,
# metrics that all-reduce), so the epoch-level sync Lightning advises would change nothing;
# silence that advice for their ``metrics/`` tags only.
warnings.filterwarnings("ignore", message=r"It is recommended to use `self\.log\('metrics/")

__all__ = ["EmbeddingMetrics", "KNNMonitor", "embedding_report"]
