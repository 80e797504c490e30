"""The one place that decides which candidates are positives, negatives or ignored.

Every method describes its anchors and candidates as :class:`Members` — who each row is — and
:func:`contrast_masks` turns the two descriptions into ``(pos_mask, neg_mask)``:

    same(a, c)     = instance_a == instance_c  and  instance_a ≥ 0
    is_self(a, c)  = same(a, c)  and  view_a == view_c           (the anchor itself: ignored)
    positive(a, c) = (same(a, c)  or  uses_labels and label_a == label_c ≥ 0)  and not is_self
    ignored(a, c)  = is_self  or  not usable(a, c)
    pos_mask = positive and not ignored;   neg_mask = not positive and not ignored

So instance identity always makes a positive, and a label-based loss (SupCon) adds the
candidates of the anchor's class — never for unlabelled samples (label < 0), which therefore
keep exactly their other views as positives under every method.

Instance ids are *positions*, not dataset indices: a DistributedSampler pads the last shards
with repeats of the first samples, and a repeat on another rank is a different draw that must
stay a negative, exactly as in a single process. An id of -1 matches nothing (queue entries).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor


@dataclass(frozen=True)
class Members:
    """Who the rows of one side of ``sim`` are: ``instance`` [n] and ``view`` [n] int64 ids,
    ``labels`` [n] int64 (``None`` when the method has none; < 0 means unlabelled)."""

    instance: Tensor
    view: Tensor
    labels: Optional[Tensor] = None

    @staticmethod
    def cat(*parts: Members) -> Members:
        """The members of concatenated candidate blocks, in order."""
        labels = None if any(p.labels is None for p in parts) else torch.cat([p.labels for p in parts])
        return Members(torch.cat([p.instance for p in parts]), torch.cat([p.view for p in parts]), labels)


def views_of(
    first: int, batch_size: int, views: int, labels: Optional[Tensor], device: torch.device, first_view: int = 0
) -> Members:
    """``views`` stacked copies of a batch of ``batch_size`` instances numbered from ``first``.

    Row ``v·B + b`` is view ``first_view + v`` of instance ``first + b`` (the view-major layout
    ``torch.cat([view_1, view_2, ...])``); ``labels`` [B] is repeated per view.
    """
    instance = torch.arange(first, first + batch_size, device=device).repeat(views)
    view = torch.arange(first_view, first_view + views, device=device).repeat_interleave(batch_size)
    return Members(instance, view, None if labels is None else labels.repeat(views))


def gathered_views(
    batch_size: int, views: int, labels: Optional[Tensor], world: int, device: torch.device, first_view: int = 0
) -> Members:
    """The members of every rank's :func:`views_of` block, concatenated rank-major.

    ``labels`` must already be gathered (``[world · views · B]``, rank-major, view-major within
    a rank), as ``distributed.gather(labels.repeat(views))`` returns them.
    """
    blocks = [views_of(r * batch_size, batch_size, views, None, device, first_view) for r in range(world)]
    members = Members.cat(*blocks)
    return Members(members.instance, members.view, labels)


def unmatched(n: int, labels: Optional[Tensor], device: torch.device) -> Members:
    """``n`` candidates that are no anchor's instance (queue or bank entries seen as negatives)."""
    minus_one = torch.full((n,), -1, dtype=torch.long, device=device)
    return Members(minus_one, minus_one, labels)


def contrast_masks(
    anchors: Members,
    candidates: Members,
    uses_labels: bool,
    usable: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor]:
    """``(pos_mask, neg_mask)`` [N, M] by the rules of the module docstring.

    Args:
        anchors, candidates: the rows and columns of ``sim``.
        uses_labels: add same-label positives (``loss.uses_labels``); both sides need labels.
        usable: bool [M] or [N, M]; False makes a candidate neither positive nor negative
            (e.g. queue slots never written). ``None``: every candidate is usable.
    """
    same = (anchors.instance[:, None] == candidates.instance[None, :]) & (anchors.instance[:, None] >= 0)
    is_self = same & (anchors.view[:, None] == candidates.view[None, :])
    positive = same
    if uses_labels:
        if anchors.labels is None or candidates.labels is None:
            raise ValueError("a label-based loss needs labels on anchors and candidates")
        labelled = anchors.labels[:, None] >= 0
        positive = positive | (labelled & (anchors.labels[:, None] == candidates.labels[None, :]))
    ignored = is_self if usable is None else is_self | ~usable
    return positive & ~ignored, ~positive & ~ignored


class MaskCache:
    """Masks that depend only on the batch's shape, built once per key and reused, each with its memo.

    The key must name everything the masks depend on (sizes, rank, world size, device). Losses only read
    masks, so one pair serves every step; a few shapes are kept (e.g. a last, smaller batch). Beside each
    pair lives a dict, ``MaskedSimilarities.mask_memo``, where a loss keeps what it derives from the masks
    alone (InfoNCE's plan), so the loss itself keeps nothing between calls.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._cached: dict[tuple, tuple[Tensor, Tensor, dict[str, Any]]] = {}

    def get(self, key: tuple, build: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """``build()``'s ``(pos_mask, neg_mask)``, built once per ``key`` and reused afterwards."""
        cached = self._cached.get(key)
        if cached is None:
            if len(self._cached) >= self.size:
                self._cached.clear()
            cached = self._cached[key] = (*build(), {})
        return cached[0], cached[1]

    def memo(self, pos_mask: Tensor, neg_mask: Tensor) -> Optional[dict[str, Any]]:
        """The memo of masks from :meth:`get` (the very tensors), or ``None`` for masks made for one step."""
        return next((memo for pos, neg, memo in self._cached.values() if pos is pos_mask and neg is neg_mask), None)
