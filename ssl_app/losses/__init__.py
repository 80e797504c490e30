"""Loss strategies over a similarity matrix, called one way: ``loss(MaskedSimilarities, with_stats) -> LossResult``."""

from ssl_app.losses.base import ContrastiveLoss, LossResult, LossTerms, MaskedSimilarities
from ssl_app.losses.hard_contrastive import HardContrastive
from ssl_app.losses.info_nce import InfoNCE
from ssl_app.losses.paco import PaCo
from ssl_app.losses.simple import HardSimple, Simple
from ssl_app.losses.supcon import SupCon

__all__ = [
    "ContrastiveLoss",
    "HardContrastive",
    "HardSimple",
    "InfoNCE",
    "LossResult",
    "LossTerms",
    "MaskedSimilarities",
    "PaCo",
    "Simple",
    "SupCon",
]
