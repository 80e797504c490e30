"""The method → loss hand-over: a similarity matrix and its masks (``MaskedSimilarities``).

Every method turns a batch into one, every loss reads one, and a temperature policy may read one (an
adaptive τ reads the batch's positives), so it lives here, below all three, rather than in any of them:

    sim       [N, M] float  cosine similarities of N anchors to M candidates (not divided by τ)
    pos_mask  [N, M] bool   True where candidate j is a positive of anchor i
    neg_mask  [N, M] bool   True where candidate j is a negative of anchor i
                            (an entry in neither mask, e.g. the anchor itself, is ignored)

plus, for a loss that declares it needs them (``needs_anchor_features``), who the anchors are:
``anchor_features`` [N, feature_dim] (the backbone features the anchors' embeddings came from, with
gradient) and ``anchor_labels`` [N] (< 0: unlabelled); and, for a loss that declares it needs them
(``needs_embedding_norms``), the L2 norms of the projections before their normalisation:
``anchor_norms`` [N] and ``candidate_norms`` [M] (with gradient where the embedding has one; a stored
candidate's is the norm stored with it). ``sim`` alone is the hand-over of unit-norm embeddings:
a loss reads absent norms as 1. ``ssl_app.losses.base`` documents the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from torch import Tensor


@dataclass
class MaskedSimilarities:
    """The method → loss hand-over: similarities plus masks (module docstring).

    ``views``: the online encoder's normalised embeddings of each local view ([B, d] each, in batch
    order); a method fills it outside training, so the metric callbacks need no second forward
    pass. ``anchor_features``/``anchor_labels``: for a loss that ``needs_anchor_features``.
    ``anchor_norms`` [N] / ``candidate_norms`` [M]: for a loss that ``needs_embedding_norms``, the norms
    ``‖h‖`` of the projections ``h`` before ``z = h/‖h‖`` (``None``: every norm is 1).
    ``mask_memo``: for masks reused from step to step (``ContrastiveMethod.cached_masks``), a dict that
    lives as long as they do, where a loss keeps what it derives from the masks alone (InfoNCE's
    ``MaskPlan``), so the loss itself keeps nothing between calls; ``None`` for masks made for this step.
    """

    sim: Tensor
    pos_mask: Tensor
    neg_mask: Tensor
    views: Optional[tuple[Tensor, ...]] = None
    anchor_features: Optional[Tensor] = None
    anchor_labels: Optional[Tensor] = None
    anchor_norms: Optional[Tensor] = None
    candidate_norms: Optional[Tensor] = None
    mask_memo: Optional[dict[str, Any]] = field(default=None, repr=False)
