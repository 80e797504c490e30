"""Contrastive methods: each turns a batch into (sim, pos_mask, neg_mask) for a loss strategy."""

from ssl_app.losses.base import MaskedSimilarities
from ssl_app.methods.base import ContrastiveMethod
from ssl_app.methods.simclr import SimCLR

__all__ = ["MaskedSimilarities", "ContrastiveMethod", "SimCLR"]

from ssl_app.methods.memory_bank import MemoryBank  # noqa: E402
from ssl_app.methods.moco import MoCo  # noqa: E402

__all__ += ["MemoryBank", "MoCo"]
