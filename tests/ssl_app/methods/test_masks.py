"""The one mask builder: instance positives always, label positives only for labels >= 0."""

import pytest
import torch

from ssl_app.methods.masks import Members, contrast_masks, gathered_views, unmatched, views_of

CPU = torch.device("cpu")


@pytest.mark.parametrize("rank,world", [(0, 1), (0, 2), (1, 2), (2, 3)])
def test_in_batch_masks_pick_the_other_view_on_this_rank(rank, world):
    batch = 4
    n = 2 * batch
    pos, neg = contrast_masks(views_of(rank * batch, batch, 2, None, CPU), gathered_views(batch, 2, None, world, CPU), False)
    assert pos.shape == neg.shape == (n, world * n)
    ignored = ~pos & ~neg
    for anchor in range(n):
        assert ignored[anchor].nonzero().flatten().tolist() == [rank * n + anchor]  # itself only
        assert pos[anchor].nonzero().flatten().tolist() == [rank * n + (anchor + batch) % n]
    assert torch.equal(neg.sum(1), torch.full((n,), world * n - 2))


def test_three_views_have_two_positives():
    pos, _ = contrast_masks(views_of(0, 3, 3, None, CPU), gathered_views(3, 3, None, 1, CPU), False)
    assert torch.equal(pos.sum(1), torch.full((9,), 2))
    assert pos[0].nonzero().flatten().tolist() == [3, 6]


def test_unlabelled_anchors_keep_exactly_their_other_views():
    """Labels -1 must never match each other: the bug SimCLR + SupCon once had."""
    labels = torch.tensor([0, -1, 0, -1, 1])
    anchors = views_of(0, 5, 2, labels, CPU)
    candidates = gathered_views(5, 2, labels.repeat(2), 1, CPU)
    pos, neg = contrast_masks(anchors, candidates, uses_labels=True)
    for anchor in (1, 3, 6, 8):  # both views of the two unlabelled samples
        assert pos[anchor].nonzero().flatten().tolist() == [(anchor + 5) % 10]
    # a labelled anchor gets its class (both views of sample 2) and its own other view
    assert pos[0].nonzero().flatten().tolist() == [2, 5, 7]
    assert not (pos & neg).any()


def test_repeated_sample_on_another_rank_stays_a_negative():
    """Ids are positions: a DistributedSampler repeat is another draw, a negative as in one process."""
    pos, neg = contrast_masks(views_of(0, 2, 2, None, CPU), gathered_views(2, 2, None, 2, CPU), False)
    assert pos[:, 4:].sum() == 0 and neg[:, 4:].all()


def test_unusable_candidates_are_in_neither_mask():
    labels = torch.tensor([3, 3])
    anchors = views_of(0, 2, 1, labels, CPU)
    queue = unmatched(3, torch.tensor([3, 3, -1]), CPU)
    usable = torch.tensor([True, True, False])
    pos, neg = contrast_masks(anchors, queue, uses_labels=True, usable=usable)
    assert pos[:, :2].all() and not pos[:, 2].any() and not neg[:, 2].any()
    pos, neg = contrast_masks(anchors, queue, uses_labels=False, usable=usable)
    assert not pos.any() and neg[:, :2].all()


def test_members_cat_keeps_order_and_drops_labels_when_one_block_has_none():
    a = views_of(0, 2, 1, torch.tensor([5, 6]), CPU)
    b = unmatched(2, None, CPU)
    both = Members.cat(a, b)
    assert both.instance.tolist() == [0, 1, -1, -1] and both.labels is None
    with pytest.raises(ValueError, match="^a label-based loss needs labels on anchors and candidates$"):
        contrast_masks(a, both, uses_labels=True)
