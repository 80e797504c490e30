"""MoCo's candidates: the positive key and the queue by default (MoCo v1/v2), the batch's other
keys with ``batch_negatives``, the batch's queries with ``query_candidates`` (PaCo's code)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssl_app import losses
from ssl_app.methods import MoCo

B, QUEUE, TAU = 4, 6, 0.2


def make_moco(**options) -> MoCo:
    torch.manual_seed(0)
    defaults = dict(
        loss=losses.InfoNCE(TAU), backbone="small_cnn", proj_hidden_dim=32, proj_dim=16, queue_size=QUEUE, key_bn="none"
    )
    return MoCo(**{**defaults, **options})


def batch(labels=None):
    g = torch.Generator().manual_seed(0)
    views = (torch.randn(B, 3, 8, 8, generator=g), torch.randn(B, 3, 8, 8, generator=g))
    return views, torch.arange(B) % 2 if labels is None else labels, torch.arange(B)


def fill_queue(model: MoCo, labels=None) -> torch.Tensor:
    queue = F.normalize(torch.randn(QUEUE, 16, generator=torch.Generator().manual_seed(1)), dim=1)
    model.queue.enqueue(queue, torch.arange(QUEUE) % 3 if labels is None else labels)
    return queue


def test_default_candidates_are_the_positive_key_and_the_queue_as_in_moco_v1_v2():
    """Catches the batch's other keys used as negatives by default (official MoCo v1/v2 use the
    queue only), checked against the authors' logits [q·k₊, q·queue] and their cross-entropy."""
    model = make_moco()
    queue = fill_queue(model)
    views = batch()
    contrast = model.contrast(views)
    assert contrast.sim.shape == (B, B + QUEUE)
    assert torch.equal(contrast.pos_mask[:, :B], torch.eye(B, dtype=torch.bool))
    assert not contrast.neg_mask[:, :B].any()  # the other keys: neither positive nor negative
    assert contrast.neg_mask[:, B:].all() and not contrast.pos_mask[:, B:].any()
    assert model.negatives_per_anchor(B, 1) == QUEUE
    with torch.no_grad():
        q, k = model.embed(views[0][0]), model.key_embed(views[0][1])
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ queue.T], dim=1) / TAU
        expected = F.cross_entropy(logits, torch.zeros(B, dtype=torch.long))
        torch.testing.assert_close(model.loss(contrast).value, expected, atol=1e-5, rtol=1e-5)


def test_batch_negatives_restores_the_other_keys_as_negatives():
    """Catches ``batch_negatives`` not reaching the masks: the other keys of the batch are negatives
    again (MoCo v3 / SimCLR-style), and the loss is the cross-entropy over [all keys, queue]."""
    model = make_moco(batch_negatives=True)
    queue = fill_queue(model)
    views = batch()
    contrast = model.contrast(views)
    eye = torch.eye(B, dtype=torch.bool)
    assert torch.equal(contrast.pos_mask[:, :B], eye) and torch.equal(contrast.neg_mask[:, :B], ~eye)
    with torch.no_grad():
        q, k = model.embed(views[0][0]), model.key_embed(views[0][1])
        logits = torch.cat([q @ k.T, q @ queue.T], dim=1) / TAU
        expected = F.cross_entropy(logits, torch.arange(B))
        torch.testing.assert_close(model.loss(contrast).value, expected, atol=1e-5, rtol=1e-5)


def test_label_positives_without_batch_negatives_come_from_the_queue_only():
    """Catches same-class keys of the batch kept as positives (or turned into negatives) when the
    batch's keys are no candidates: only the own key and the queue's class entries are positives."""
    model = make_moco(loss=losses.SupCon(TAU))
    queue_labels = torch.tensor([0, 1, 2, 0, 1, 2])
    fill_queue(model, queue_labels)
    labels = torch.tensor([0, 0, 1, -1])
    contrast = model.contrast(batch(labels))
    eye = torch.eye(B, dtype=torch.bool)
    assert torch.equal(contrast.pos_mask[:, :B], eye) and not contrast.neg_mask[:, :B].any()
    same = (labels[:, None] == queue_labels[None, :]) & (labels[:, None] >= 0)
    assert torch.equal(contrast.pos_mask[:, B:], same) and torch.equal(contrast.neg_mask[:, B:], ~same)


@pytest.mark.parametrize("symmetric", [False, True], ids=["asymmetric", "symmetric"])
def test_query_candidates_add_the_batch_queries_with_gradient(symmetric):
    """Catches PaCo's extra candidates missing, the anchor's own query not ignored, same-class
    queries not positives under a label loss, or the query block detached (no gradient through it)."""
    model = make_moco(loss=losses.SupCon(TAU), query_candidates=True, symmetric=symmetric)
    fill_queue(model)
    labels = torch.tensor([0, 0, 1, 2])
    contrast = model.contrast(batch(labels))
    n = B * (2 if symmetric else 1)
    assert contrast.sim.shape == (n, n + QUEUE + n)
    block_pos, block_neg = contrast.pos_mask[:, n + QUEUE :], contrast.neg_mask[:, n + QUEUE :]
    anchor_labels = labels.repeat(n // B)
    own = torch.eye(n, dtype=torch.bool)
    same_class = anchor_labels[:, None] == anchor_labels[None, :]
    assert torch.equal(block_pos, same_class & ~own)
    assert torch.equal(block_neg, ~same_class)
    with torch.no_grad():
        queries = model.embed(torch.cat(batch(labels)[0][: n // B]))
    torch.testing.assert_close(contrast.sim[:, n + QUEUE :], queries @ queries.T, atol=1e-5, rtol=0)
    model.loss(contrast).value.backward()
    assert contrast.sim.grad_fn is not None
    # With instance positives only, the queries are negatives except the anchor's other view's.
    instance = make_moco(query_candidates=True, symmetric=symmetric)
    fill_queue(instance)
    contrast = instance.contrast(batch(labels))
    other_view = own.roll(B, dims=1) if symmetric else torch.zeros_like(own)
    assert torch.equal(contrast.pos_mask[:, n + QUEUE :], other_view)
    assert torch.equal(contrast.neg_mask[:, n + QUEUE :], ~own & ~other_view)
