"""Loss strategies over a similarity matrix: ``forward(sim, pos_mask, neg_mask) -> Tensor``."""

from ssl_app.losses.base import ContrastiveLoss
from ssl_app.losses.hard_contrastive import HardContrastive
from ssl_app.losses.info_nce import InfoNCE
from ssl_app.losses.paco import PaCo
from ssl_app.losses.simple import HardSimple, Simple
from ssl_app.losses.supcon import SupCon

__all__ = ["ContrastiveLoss", "HardContrastive", "HardSimple", "InfoNCE", "PaCo", "Simple", "SupCon"]
