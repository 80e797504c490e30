"""Loss strategies over a similarity matrix, called one way: ``loss(MaskedSimilarities, with_stats) -> LossResult``.

``LOSSES`` lists them (``python -m ssl_app list losses``); each registers itself with one line,
``@LOSSES.register`` above its class (``ssl_app.registering``), and ``tests/ssl_app/test_registry.py``
names any exported loss that does not.
"""

from ssl_app.losses.base import ContrastiveLoss, LossResult, LossTerms, MaskedSimilarities

# isort: off
# The order of these imports is the order of registration, i.e. of `python -m ssl_app list losses`.
from ssl_app.losses.info_nce import InfoNCE
from ssl_app.losses.hard_contrastive import HardContrastive
from ssl_app.losses.simple import HardSimple, Simple
from ssl_app.losses.supcon import SupCon
from ssl_app.losses.paco import PaCo
from ssl_app.losses.dcl import DCL, DCLW
from ssl_app.losses.debiased import Debiased
from ssl_app.losses.hcl import HCL
from ssl_app.losses.hypersphere import Hypersphere
from ssl_app.losses.macl import MACL
from ssl_app.losses.spectral import Spectral
from ssl_app.losses.sigmoid import Sigmoid

# isort: on
from ssl_app.losses.registry import LOSSES

__all__ = [
    "LOSSES",
    "DCL",
    "DCLW",
    "HCL",
    "MACL",
    "ContrastiveLoss",
    "Debiased",
    "HardContrastive",
    "HardSimple",
    "Hypersphere",
    "InfoNCE",
    "LossResult",
    "LossTerms",
    "MaskedSimilarities",
    "PaCo",
    "Sigmoid",
    "Simple",
    "Spectral",
    "SupCon",
]
