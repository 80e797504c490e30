"""Contrastive methods: each turns a batch into (sim, pos_mask, neg_mask) for a loss strategy.

``METHODS`` lists them (``python -m ssl_app list methods``); each registers itself with one line,
``@METHODS.register`` above its class (``ssl_app.registering``), and ``tests/ssl_app/test_registry.py``
names any exported method that does not.
"""

from ssl_app.losses.base import MaskedSimilarities
from ssl_app.methods.base import ContrastiveMethod
from ssl_app.methods.registry import METHODS
from ssl_app.methods.simclr import SimCLR

__all__ = ["METHODS", "MaskedSimilarities", "ContrastiveMethod", "SimCLR"]

from ssl_app.methods.memory_bank import MemoryBank  # noqa: E402, I001 - registration order is the listing order

# isort: off
# Registration order (`python -m ssl_app list methods`): SimCLR, MoCo, the memory bank.
from ssl_app.methods.moco import MoCo  # noqa: E402

# isort: on
__all__ += ["MemoryBank", "MoCo"]
