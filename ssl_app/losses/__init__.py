"""Loss strategies over a similarity matrix: ``forward(sim, pos_mask, neg_mask) -> Tensor``.

``LOSSES`` lists them (``python -m ssl_app list losses``). The registrations below are to move
next to each class as ``@LOSSES.register`` (``ssl_app.registry``); until then a new loss is
registered here, one line, or ``tests/ssl_app/test_registry.py`` names it as missing.
"""

from ssl_app.losses.base import ContrastiveLoss
from ssl_app.losses.hard_contrastive import HardContrastive
from ssl_app.losses.info_nce import InfoNCE
from ssl_app.losses.paco import PaCo
from ssl_app.losses.simple import HardSimple, Simple
from ssl_app.losses.supcon import SupCon
from ssl_app.registry import LOSSES

LOSSES.register(InfoNCE)
LOSSES.register(HardContrastive)
LOSSES.register(Simple)
LOSSES.register(HardSimple)
LOSSES.register(SupCon)
LOSSES.register(PaCo)

__all__ = ["LOSSES", "ContrastiveLoss", "HardContrastive", "HardSimple", "InfoNCE", "PaCo", "Simple", "SupCon"]
