"""Masks that depend only on shapes are built once; label- or state-dependent ones every step;
and a whole training step of every method stays free of host-device syncs."""

from __future__ import annotations

import torch

from ssl_app.losses import InfoNCE, SupCon
from ssl_app.methods import MoCo, SimCLR
from ssl_app.methods.masks import contrast_masks, gathered_views, views_of
from tests.generic import set_up
from tests.helpers import HostSyncRecorder

SMALL = dict(backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)


def _batch(labels):
    generator = torch.Generator().manual_seed(int(labels.sum()))
    views = [torch.randn(len(labels), 3, 8, 8, generator=generator) for _ in range(2)]
    return views, labels, torch.arange(len(labels))


def test_simclr_reuses_its_instance_masks_and_they_are_the_rule_s_masks():
    """Catches a cache that rebuilds every step (no saving) or hands out masks of another shape."""
    model = SimCLR(loss=InfoNCE(0.5), **SMALL).train()
    first = model.contrast(_batch(torch.arange(6) % 3))
    second = model.contrast(_batch(torch.arange(6) % 2))
    assert first.pos_mask is second.pos_mask and first.neg_mask is second.neg_mask
    expected = contrast_masks(views_of(0, 6, 2, None, "cpu"), gathered_views(6, 2, None, 1, "cpu"), False)
    assert torch.equal(first.pos_mask, expected[0]) and torch.equal(first.neg_mask, expected[1])
    smaller = model.contrast(_batch(torch.arange(4) % 2))
    assert smaller.pos_mask.shape == (8, 8)


def test_label_based_masks_follow_each_batch_s_labels():
    """Catches caching SupCon's masks, which depend on the labels: the second batch would be
    trained with the first batch's positives."""
    model = SimCLR(loss=SupCon(0.1), **SMALL).train()
    first = model.contrast(_batch(torch.tensor([0, 0, 1, 1])))
    second = model.contrast(_batch(torch.tensor([0, 1, 0, 1])))
    assert bool(first.pos_mask[0, 1]) and not bool(second.pos_mask[0, 1])


def test_moco_caches_its_masks_only_once_the_queue_is_full_and_forgets_fullness_on_load():
    """Catches cached masks that still hide written queue slots (or show unwritten ones), and a
    queue that still believes it is full after a checkpoint of a younger queue is loaded."""
    model = MoCo(loss=InfoNCE(0.2), queue_size=8, key_bn="none", **SMALL).train()
    young_state = {k: v.clone() for k, v in model.state_dict().items()}
    seen = []
    for step in range(4):  # 4 keys per step: the queue fills after step 2
        contrast = model.contrast(_batch(torch.arange(4)))
        seen.append(contrast)
        assert int(contrast.neg_mask[0, 4:].sum()) == min(4 * step, 8)
        model.on_after_backward()
    assert model.queue.is_full() and seen[2].neg_mask is seen[3].neg_mask
    assert seen[1].neg_mask is not seen[2].neg_mask
    model.load_state_dict(young_state)
    assert not model.queue.is_full()
    assert int(model.contrast(_batch(torch.arange(4))).neg_mask[0, 4:].sum()) == 0


def test_a_whole_training_step_has_no_host_sync(method_case, loss_group):
    """Catches a sync anywhere in contrast → loss → backward → store update (e.g. asking the
    queue whether it is full with ``.item()`` each step): on a GPU each one stalls the step. Every
    registered method with one loss of each set of declarations (instance or label positives,
    anchor features), since those choose the method's path (tests/generic.py)."""
    model = set_up(method_case.build(loss=loss_group.build())).train()
    for _ in range(5):  # stores that fill within a few steps (a queue of the example's size) reach their full state
        batch = _batch(torch.arange(4) % 2)
        with HostSyncRecorder() as recorder:
            contrast = model.contrast(batch)
            model.compute_loss(contrast).value.backward()
            model.on_after_backward()
        assert recorder.syncs == []
