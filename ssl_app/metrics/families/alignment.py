"""Alignment (Wang & Isola 2020): how close the two augmented views of a sample land.

alignment = mean_i ||za_i − zb_i||²  (0: the views coincide; 4: antipodal)
"""

from torch import Tensor

from ssl_app.metrics.embedding import alignment
from ssl_app.metrics.registry import EmbeddingInputs, register


@register("alignment", reads=("views",), formula="mean_i ||za_i − zb_i||² over the two augmented views")
def _alignment(x: EmbeddingInputs) -> dict[str, Tensor]:
    return {"alignment": alignment(x.view_a, x.view_b)}
