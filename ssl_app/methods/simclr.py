"""SimCLR: in-batch negatives from the global batch (Chen et al. 2020)."""

from __future__ import annotations

from typing import Any

import torch

from ssl_app import distributed
from ssl_app.losses.base import MaskedSimilarities
from ssl_app.methods.base import ContrastiveMethod, similarity
from ssl_app.methods.masks import contrast_masks, gathered_views, views_of
from ssl_app.methods.registry import METHODS


@METHODS.register
class SimCLR(ContrastiveMethod):
    """SimCLR with any loss strategy.

    Anchors are all views of the local batch (view-major); candidates are all views of the
    *global* batch, gathered from every DDP rank with gradient, so an anchor has the
    ``V·B·world − V`` embeddings of other images as negatives whatever the number of processes.
    The positives are the other views of the same image; the anchor itself is in neither mask.
    A label-based loss (SupCon) adds every candidate of the anchor's class (``masks``). A loss that
    ``needs_embedding_norms`` gets the projections' norms of the anchors and of the gathered candidates.

    All constructor arguments are those of ``ContrastiveMethod``.
    """

    def negatives_per_anchor(self, batch_size: int, world_size: int) -> int:
        return self.train_views * (batch_size * world_size - 1)

    def contrast(self, batch: Any) -> MaskedSimilarities:
        views, labels, _ = batch
        batch_size, num_views = views[0].shape[0], len(views)
        world, rank = distributed.world_size(), distributed.rank()
        features, z, norms = self.embed_for_loss(torch.cat(list(views), dim=0))
        sim = similarity(z, distributed.gather_with_grad(z))
        # A loss that reads the norms gets the candidates' the way it gets their embeddings: gathered with gradient.
        candidate_norms = distributed.gather_with_grad(norms) if norms is not None else None
        uses_labels = self.loss.uses_labels
        candidate_labels = distributed.gather(labels.repeat(num_views)) if uses_labels else None

        def masks() -> tuple[torch.Tensor, torch.Tensor]:
            return contrast_masks(
                views_of(rank * batch_size, batch_size, num_views, labels, z.device),
                gathered_views(batch_size, num_views, candidate_labels, world, z.device),
                uses_labels,
            )

        if uses_labels:
            pos_mask, neg_mask = masks()
        else:  # instance masks depend on the shapes only
            pos_mask, neg_mask = self.cached_masks(("simclr", batch_size, num_views, world, rank, z.device), masks)
        return MaskedSimilarities(
            sim,
            pos_mask,
            neg_mask,
            views=tuple(z.detach().chunk(num_views)),
            anchor_features=features,
            anchor_labels=labels.repeat(num_views),
            anchor_norms=norms,
            candidate_norms=candidate_norms,
        )
