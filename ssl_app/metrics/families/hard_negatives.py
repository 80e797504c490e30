"""The positive against the hardest negatives of the two augmented views (Wang & Liu 2021, Table 1).

    s_ij = za_i·zb_j;  pos_sim = s_ii (per sample);  top{k}_neg_sim = the k largest s_ij, j ≠ i (per anchor)

k is the callback's ``top_k``, capped at the other samples there are; the search also fills the
inputs' histogram of every negative similarity when one is asked for.
"""

from torch import Tensor

from ssl_app.metrics.embedding import positive_and_topk_negatives
from ssl_app.metrics.registry import EmbeddingInputs, register


@register(
    "positive_vs_topk_negatives",
    reads=("views",),
    formula={
        "pos_sim": "mean_i s_ii, s_ij = za_i·zb_j over the two augmented views",
        "neg_sim": "mean over anchors i of its {k} largest s_ij (j ≠ i), s_ij = za_i·zb_j over the two augmented views",
    },
    tags={"pos_sim": "pos_sim", "neg_sim": "top{k}_neg_sim"},
)
def _positive_vs_negatives(x: EmbeddingInputs) -> dict[str, Tensor]:
    k = min(x.top_k, x.view_a.shape[0] - 1)
    sims = positive_and_topk_negatives(x.view_a, x.view_b, k=k, histogram=x.negative_histogram)
    return {"pos_sim": sims.positive, "neg_sim": sims.negatives}
