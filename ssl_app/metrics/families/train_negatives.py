"""The hardest negatives from the training split: the paper's comparison with its memory bank.

    top{k}_train_neg_sim = the k largest za_i·t_j per evaluation anchor i, t_j the clean train embeddings

Only with the callback's ``negatives_from: train``; k is ``top_k``, capped at the train rows.
"""

from torch import Tensor

from ssl_app.metrics.embedding import topk_similarities
from ssl_app.metrics.registry import EmbeddingInputs, register


@register(
    "positive_vs_topk_train_negatives",
    reads=("views", "train"),
    formula="mean over anchors i of its {k} largest za_i·t_j, t_j the clean embeddings of the training split "
    "(negatives_from: train, the paper's comparison with its memory bank)",
    tags={"train_neg_sim": "top{k}_train_neg_sim"},
)
def _positive_vs_train_negatives(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"train_neg_sim": topk_similarities(x.view_a, x.train, k=min(x.top_k, x.train.shape[0]))}
