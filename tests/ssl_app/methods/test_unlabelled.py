"""Unlabelled samples (label -1) keep exactly their instance positives, under every registered method.

A label-based loss (``uses_labels``, e.g. SupCon) makes same-label candidates positives; -1 means
"no label" and must never match another -1 (STL-10's ``train+unlabeled`` is mostly such samples).
Every method (tests/generic.py) is built twice from one seed, once with a loss that uses labels and
once with one that does not, and driven through ``contrast`` on the same batches: an unlabelled
anchor's row of positives must be the same in both (its own other views, wherever the method puts
them), and a labelled anchor's must only grow. In one process and on 2 gloo ranks.
"""

from __future__ import annotations

import torch
import torch.multiprocessing as mp

from ssl_app.registry import LOSSES
from tests.generic import method_cases, set_up
from tests.ranks import gloo_rank

B = 4
LABELS = torch.tensor([-1, 2, -1, 2, -1, 0, -1, 0])  # the global batch: two ranks of B
#: Options that make a method's numbers independent of how the batch is split over ranks.
RANK_FREE = dict(backbone_norm="group", proj_batch_norm=False)


def loss_that(uses_labels: bool):
    """The first registered loss with this ``uses_labels`` that reads nothing but the masks."""
    for entry in LOSSES.values():
        target = entry.target
        if target.uses_labels == uses_labels and not target.needs_anchor_features:
            return target(**dict(target.examples[0]))
    raise AssertionError(f"no registered loss with uses_labels={uses_labels}")


def local_batch(rank: int, world: int) -> tuple:
    size = B * 2 // world
    g = torch.Generator().manual_seed(0)
    views = [torch.randn(2 * B, 3, 8, 8, generator=g) for _ in range(2)]
    part = slice(rank * size, (rank + 1) * size)
    return [v[part] for v in views], LABELS[part], torch.arange(2 * B)[part]


def positive_rows(method_case, uses_labels: bool, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The positive mask after 2 training steps (the second sees a queue / bank holding labelled and
    unlabelled entries) and each anchor's label."""
    model = set_up(method_case.build(loss=loss_that(uses_labels), seed=0, **RANK_FREE)).train()
    batch = local_batch(rank, world)
    for _ in range(2):
        contrast = model.contrast(batch)
        model.on_after_backward()
    anchor_labels = batch[1].repeat(contrast.pos_mask.shape[0] // batch[1].shape[0])
    return contrast.pos_mask, anchor_labels


def compare(rank: int, world: int) -> dict[str, str]:
    """Per method: '' when unlabelled rows are equal and labelled rows only grow, else what differs."""
    found = {}
    for case in method_cases():
        labelled, anchor_labels = positive_rows(case, True, rank, world)
        instance, _ = positive_rows(case, False, rank, world)
        unlabelled = anchor_labels < 0
        problems = []
        if not torch.equal(labelled[unlabelled], instance[unlabelled]):
            problems.append("an unlabelled anchor's positives change with a label-based loss")
        if not instance[unlabelled].any(dim=1).all():
            problems.append("an unlabelled anchor has no positive")
        if (instance & ~labelled).any():
            problems.append("a label-based loss dropped an instance positive")
        if not (labelled & ~instance)[~unlabelled].any():
            problems.append("no labelled anchor gained a same-label positive")
        found[case.id] = "; ".join(problems)
    return found


def test_unlabelled_anchors_keep_only_their_instance_positives_in_one_process():
    """Catches -1 treated as a class (every unlabelled sample a positive of every other), label
    positives that replace the instance ones, and label masks that ignore the labels."""
    assert compare(rank=0, world=1) == {case.id: "" for case in method_cases()}


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    with gloo_rank(rank, 2, init_file):
        torch.save(compare(rank=rank, world=2), f"{out_dir}/rank{rank}.pt")


def test_unlabelled_anchors_keep_only_their_instance_positives_on_two_ranks(tmp_path):
    """As in one process, with the labels of the other rank's samples gathered (a -1 from another
    rank must not match either)."""
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        assert torch.load(tmp_path / f"rank{rank}.pt") == {case.id: "" for case in method_cases()}, rank


def test_every_method_hands_its_view_embeddings_to_the_callbacks_outside_training(method_case):
    """Catches a method whose ``views`` (what the metric callbacks read instead of re-embedding) are
    not the online encoder's embeddings of the two views."""
    batch = local_batch(0, 1)
    model = set_up(method_case.build(**RANK_FREE)).eval()
    with torch.no_grad():
        views = model.contrast(batch).views
        assert views is not None and len(views) == 2
        for view, images in zip(views, batch[0]):
            torch.testing.assert_close(view, model.embed(images))
