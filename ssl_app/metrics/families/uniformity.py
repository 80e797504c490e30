"""Uniformity (Wang & Isola 2020): how evenly the clean embeddings spread over the sphere.

uniformity = −log mean_{i<j} exp(−2 ||z_i − z_j||²)  (larger: more uniform; 0: one point)
"""

from torch import Tensor

from ssl_app.metrics.embedding import uniformity
from ssl_app.metrics.registry import EmbeddingInputs, register


@register("uniformity", reads=("clean",), formula="−log mean_{i<j} exp(−2 ||z_i − z_j||²) over the clean input")
def _uniformity(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"uniformity": uniformity(x.clean)}
