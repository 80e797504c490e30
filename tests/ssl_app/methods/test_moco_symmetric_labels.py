"""Symmetric MoCo with SupCon when some samples are unlabelled (label −1)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssl_app.losses import SupCon
from ssl_app.methods import MoCo

B = 4
QUEUE = 8


def make_moco(batch_negatives: bool) -> MoCo:
    torch.manual_seed(0)
    return MoCo(
        loss=SupCon(temperature=0.2),
        backbone="small_cnn",
        backbone_norm="group",
        proj_hidden_dim=32,
        proj_dim=16,
        proj_batch_norm=False,
        queue_size=QUEUE,
        symmetric=True,
        batch_negatives=batch_negatives,
    )


def expected_masks(labels: torch.Tensor, queue_labels: torch.Tensor, filled: int, batch_negatives: bool):
    """From the definition: anchors [v1; v2] of the batch, candidates [keys v1; keys v2; queue];
    without ``batch_negatives`` the only batch key that is a candidate is the other view's."""
    n = 2 * B
    anchor_labels = labels.repeat(2)
    pos = torch.zeros(n, n + QUEUE, dtype=torch.bool)
    neg = torch.zeros_like(pos)
    for a in range(n):
        y = anchor_labels[a].item()
        for c in range(n + QUEUE):
            if c < n:
                if c == a:  # the query's own-view key: neither
                    continue
                other_view = c == (a + B) % n
                if not (other_view or batch_negatives):  # another sample's key: no candidate
                    continue
                same = y >= 0 and anchor_labels[c].item() == y
            else:
                if c - n >= filled:  # never-written slot: neither
                    continue
                other_view = False
                same = y >= 0 and queue_labels[c - n].item() == y
            pos[a, c] = other_view or same
            neg[a, c] = not pos[a, c]
    return pos, neg


@pytest.mark.parametrize("batch_negatives", [False, True], ids=["queue_only", "batch_negatives"])
@pytest.mark.parametrize("labels", [[0, -1, 0, -1], [-1, -1, -1, -1], [1, -1, 2, 1]])
def test_unlabelled_anchor_positives_are_exactly_its_other_views_key(labels, batch_negatives):
    """Catches label −1 treated as a class (unlabelled samples, keys and queue entries matching each other)."""
    labels = torch.tensor(labels)
    model = make_moco(batch_negatives)
    queue_labels = torch.tensor([-1, 0, 1, -1, 2])  # enqueued, some unlabelled; 3 slots stay empty
    model.queue.enqueue(F.normalize(torch.randn(5, 16), dim=1), queue_labels)
    g = torch.Generator().manual_seed(1)
    views = (torch.randn(B, 3, 8, 8, generator=g), torch.randn(B, 3, 8, 8, generator=g))
    contrast = model.contrast((views, labels, torch.arange(B)))
    pos, neg = expected_masks(labels, model.queue.labels, filled=5, batch_negatives=batch_negatives)
    assert torch.equal(contrast.pos_mask, pos)
    assert torch.equal(contrast.neg_mask, neg)
    unlabelled = (labels.repeat(2) < 0).nonzero().flatten()
    for a in unlabelled.tolist():
        assert contrast.pos_mask[a].nonzero().flatten().tolist() == [(a + B) % (2 * B)]
    value = model.loss(contrast).value
    assert torch.isfinite(value)
