"""Exact, chunked, DDP-sharded embedding-space metrics (docs/science.md, "Embedding metrics").

    alignment(za, zb, alpha=2.0)                    mean ||za_i − zb_i||^alpha
    uniformity(z, t=2.0)                            −log mean_{i<j} exp(−t ||z_i − z_j||²)
    tolerance(z, labels)                            mean z_i·z_j over same-label pairs i ≠ j
    positive_and_topk_negatives(za, zb, k=10)       s_ii and the k largest s_ij, j ≠ i
    topk_similarities(anchors, candidates, k=10)    the k largest u_i·c_j (candidates: no anchor's own)
    effective_rank(z, normalize=True)               exp(entropy of σ/Σσ), σ = singular values of the
                                                    unit rows (normalize=False: the rows as given, RankMe)

``registry``: the ``@register`` decorator and the inputs a metric may read (clean embeddings,
two augmented views, labels, the clean rows' backbone features, the train split); ``families``:
the registered metrics, one family per module, each one function plus one ``@register`` line;
``evaluate``: ``evaluate_metrics`` runs them.

Pure tensor functions; callbacks gather embeddings and call them on every rank.
"""

from ssl_app.metrics import families  # noqa: F401  (importing it registers the built-in metrics)
from ssl_app.metrics.embedding import (
    PositiveAndNegatives,
    alignment,
    positive_and_topk_negatives,
    tolerance,
    topk_similarities,
    uniformity,
)
from ssl_app.metrics.evaluate import EmbeddingReport, drop_nonfinite, evaluate_metrics
from ssl_app.metrics.rank import effective_rank
from ssl_app.metrics.registry import (
    CALLBACK_TAGS,
    DEFAULT_TOP_K,
    EMBEDDING_METRICS,
    EmbeddingInputs,
    EmbeddingMetric,
    register,
    registered_fields,
    registered_metrics,
)
from ssl_app.metrics.sharding import resolve_world, row_range

__all__ = [
    "CALLBACK_TAGS",
    "DEFAULT_TOP_K",
    "EMBEDDING_METRICS",
    "EmbeddingInputs",
    "EmbeddingMetric",
    "EmbeddingReport",
    "PositiveAndNegatives",
    "alignment",
    "drop_nonfinite",
    "effective_rank",
    "evaluate_metrics",
    "positive_and_topk_negatives",
    "topk_similarities",
    "register",
    "registered_fields",
    "registered_metrics",
    "resolve_world",
    "row_range",
    "tolerance",
    "uniformity",
]

from ssl_app.metrics.knn import WeightedKNNAccuracy, weighted_knn_predict  # noqa: E402

__all__ += ["WeightedKNNAccuracy", "weighted_knn_predict"]

from ssl_app.metrics.long_tail import ClassAccuracy, group_accuracies  # noqa: E402

__all__ += ["ClassAccuracy", "group_accuracies"]
