"""Tolerance (Wang & Liu 2021): how close samples of one class are, over the labelled clean rows.

tolerance = mean z_i·z_j over same-label pairs i ≠ j  (unlabelled rows, label < 0, left out)
"""

from torch import Tensor

from ssl_app.metrics.embedding import tolerance
from ssl_app.metrics.registry import EmbeddingInputs, register


@register("tolerance", reads=("clean", "labels"), formula="mean z_i·z_j over same-label pairs i ≠ j of the clean input")
def _tolerance(x: EmbeddingInputs) -> dict[str, Tensor]:
    labelled = x.labels >= 0
    return {"tolerance": tolerance(x.clean[labelled], x.labels[labelled])}
