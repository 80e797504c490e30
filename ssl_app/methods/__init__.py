"""Contrastive methods: each turns a batch into (sim, pos_mask, neg_mask) for a loss strategy.

``METHODS`` lists them (``python -m ssl_app list methods``). The registrations below are to move
next to each class as ``@METHODS.register`` (``ssl_app.registry``); until then a new method is
registered here, one line, or ``tests/ssl_app/test_registry.py`` names it as missing.
"""

from ssl_app.methods.base import ContrastiveMethod, MaskedSimilarities
from ssl_app.methods.simclr import SimCLR
from ssl_app.registry import METHODS

__all__ = ["METHODS", "MaskedSimilarities", "ContrastiveMethod", "SimCLR"]

from ssl_app.methods.memory_bank import MemoryBank  # noqa: E402
from ssl_app.methods.moco import MoCo  # noqa: E402

__all__ += ["MemoryBank", "MoCo"]

METHODS.register(SimCLR)
METHODS.register(MoCo)
METHODS.register(MemoryBank)
