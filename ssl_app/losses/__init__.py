"""Loss strategies over a similarity matrix: ``forward(sim, pos_mask, neg_mask) -> Tensor``."""

from ssl_app.losses.base import ContrastiveLoss
from ssl_app.losses.info_nce import InfoNCE

__all__ = ["ContrastiveLoss", "InfoNCE"]
