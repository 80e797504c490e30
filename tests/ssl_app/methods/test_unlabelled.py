"""Unlabelled samples (label -1) keep exactly their other views as positives, under every method.

A label-based loss (SupCon) makes same-label candidates positives; -1 means "no label" and must
never match another -1 (STL-10's ``train+unlabeled`` is mostly such samples). Checked through
each method's ``contrast`` in one process and on 2 gloo ranks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ssl_app.losses import SupCon
from ssl_app.methods import MemoryBank, MoCo, SimCLR

B = 4
LABELS = torch.tensor([-1, 2, -1, 2, -1, 0, -1, 0])  # the global batch: two ranks of B


def methods() -> dict:
    torch.manual_seed(0)
    common = dict(
        loss=SupCon(temperature=0.1),
        backbone="small_cnn",
        backbone_norm="group",
        proj_batch_norm=False,
        proj_hidden_dim=16,
        proj_dim=8,
    )
    return {
        "simclr": SimCLR(**common),
        "moco": MoCo(queue_size=8, **common),
        "moco_symmetric": MoCo(queue_size=8, symmetric=True, **common),
        "bank": MemoryBank(bank_size=16, **common),
    }


def local_batch(rank: int, world: int) -> tuple:
    size = B * 2 // world
    g = torch.Generator().manual_seed(0)
    views = [torch.randn(2 * B, 3, 8, 8, generator=g) for _ in range(2)]
    part = slice(rank * size, (rank + 1) * size)
    return [v[part] for v in views], LABELS[part], torch.arange(2 * B)[part]


def positives_of_unlabelled(world: int, rank: int) -> dict[str, list[list[int]]]:
    """For each method, the positive columns of every unlabelled anchor after 2 training steps."""
    found = {}
    for name, model in methods().items():
        model.train()
        batch = local_batch(rank, world)
        for _ in range(2):  # the second step sees a queue / bank holding labelled and unlabelled entries
            contrast = model.contrast(batch)
            model.on_after_backward()
        anchor_labels = batch[1].repeat(contrast.pos_mask.shape[0] // batch[1].shape[0])
        found[name] = [
            contrast.pos_mask[a].nonzero().flatten().tolist() for a in range(len(anchor_labels)) if anchor_labels[a] < 0
        ]
    return found


def expected(name: str, world: int, rank: int) -> list[list[int]]:
    size = B * 2 // world
    unlabelled = [i for i in range(size) if LABELS[rank * size + i] < 0]
    if name == "simclr":  # candidates: rank blocks of [view 1; view 2]
        block = rank * 2 * size
        return [[block + i + size] for i in unlabelled] + [[block + i] for i in unlabelled]
    if name == "moco":  # candidates: keys of view 2 of the global batch, then the queue
        return [[rank * size + i] for i in unlabelled]
    if name == "moco_symmetric":  # the key of the other view, in the rank's [view 1; view 2] block
        block = rank * 2 * size
        return [[block + i + size] for i in unlabelled] + [[block + i] for i in unlabelled]
    return [[rank * size + i] for i in unlabelled]  # bank: the own entry (index = global position)


def test_unlabelled_anchors_have_only_their_own_positive_in_one_process():
    found = positives_of_unlabelled(world=1, rank=0)
    for name, positives in found.items():
        assert positives == expected(name, 1, 0), name


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        torch.save(positives_of_unlabelled(world=2, rank=rank), f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_unlabelled_anchors_have_only_their_own_positive_on_two_ranks(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        found = torch.load(tmp_path / f"rank{rank}.pt")
        for name, positives in found.items():
            assert positives == expected(name, 2, rank), (name, rank)


def test_every_method_hands_its_view_embeddings_to_the_callbacks_outside_training():
    """Metric callbacks read ``views`` instead of re-embedding; they must be the online encoder's z."""
    batch = local_batch(0, 1)
    for name, model in methods().items():
        model.eval()
        with torch.no_grad():
            views = model.contrast(batch).views
            assert views is not None and len(views) == 2, name
            for view, images in zip(views, batch[0]):
                torch.testing.assert_close(view, model.embed(images), msg=name)
