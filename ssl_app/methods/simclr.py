"""SimCLR: in-batch negatives from the global batch (Chen et al. 2020)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ssl_app import distributed
from ssl_app.methods.base import Contrast, ContrastiveMethod, similarity


def simclr_masks(local_size: int, views: int, rank: int, world: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Self and positive masks of a rank's anchors against the rank-major global candidates.

    Anchors are this rank's ``views × B`` embeddings, view-major (``[v1; v2]``); candidates are
    every rank's anchors concatenated by rank. Anchor ``a`` is the candidate at
    ``rank·V·B + a``; its positives are the other views of the same image.
    """
    n = views * local_size
    offset = rank * n
    anchor = torch.arange(n, device=device)
    candidate = torch.arange(world * n, device=device)
    in_block = (candidate >= offset) & (candidate < offset + n)
    local_candidate = candidate - offset
    same_image = in_block[None, :] & ((local_candidate[None, :] % local_size) == (anchor[:, None] % local_size))
    is_self = in_block[None, :] & (local_candidate[None, :] == anchor[:, None])
    return is_self, same_image & ~is_self


class SimCLR(ContrastiveMethod):
    """SimCLR with any loss strategy.

    Anchors are both views of the local batch; candidates are both views of the *global*
    batch, gathered from every DDP rank with gradient, so the negatives of one anchor are the
    ``2·B·world − 2`` other embeddings whatever the number of processes. The positive is the
    other view; the anchor itself is in neither mask. With a label-based loss (SupCon) the
    positives are all other candidates of the anchor's class.

    All constructor arguments are those of ``ContrastiveMethod``.
    """

    def contrast(self, batch: Any) -> Contrast:
        views, labels, _ = batch
        local_size = views[0].shape[0]
        z = self.embed(torch.cat(list(views), dim=0))
        candidates = distributed.gather_with_grad(z)
        sim = similarity(z, candidates)
        is_self, positive = simclr_masks(local_size, len(views), distributed.rank(), distributed.world_size(), z.device)
        if self.loss.uses_labels:
            anchor_labels = labels.repeat(len(views))
            candidate_labels = distributed.gather(anchor_labels)
            positive = (anchor_labels[:, None] == candidate_labels[None, :]) & ~is_self
        negative = ~positive & ~is_self
        return Contrast(sim, positive, negative, views=tuple(z.detach().chunk(len(views))))
