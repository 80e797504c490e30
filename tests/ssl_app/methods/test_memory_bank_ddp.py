"""The memory-bank update under DDP when a DistributedSampler pads the shards with repeated
indices: a real 2-process gloo run (see ``test_moco_ddp`` for the set-up).

Both ranks must end with bit-identical banks, equal to one process running the same global
batch, and equal to the formula with every repeated index getting the mean of its embeddings:
``bank[i] ← normalise(m·bank[i] + (1 − m)·mean_{occurrences} z)``.
"""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from ssl_app.losses import InfoNCE
from ssl_app.methods import MemoryBank
from tests.ranks import gloo_rank

pytestmark = pytest.mark.slow

WORLD = 2
DATASET = 7  # 2 ranks × 4 per rank = 8 slots: the sampler pads with one index again
BANK = DATASET
M = 0.3  # not 0.5: m and 1 − m differ
STEPS = 2


def make_bank() -> MemoryBank:
    torch.manual_seed(0)
    return MemoryBank(
        loss=InfoNCE(temperature=0.1),
        backbone="small_cnn",
        backbone_norm="group",
        proj_dim=8,
        bank_size=BANK,
        bank_momentum=M,
    )


def shard_indices(rank: int, epoch: int) -> torch.Tensor:
    sampler = DistributedSampler(range(DATASET), num_replicas=WORLD, rank=rank, shuffle=True, seed=epoch)
    sampler.set_epoch(epoch)
    return torch.tensor(list(sampler))


def shard(rank: int, step: int) -> tuple:
    """One rank's batch: every position gets its own views (a repeat is a new augmentation)."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    indices = shard_indices(rank, step)
    views = (torch.randn(len(indices), 3, 8, 8, generator=g), torch.randn(len(indices), 3, 8, 8, generator=g))
    return views, indices % 2, indices


def global_batch(step: int) -> tuple:
    parts = [shard(r, step) for r in range(WORLD)]
    views = tuple(torch.cat([p[0][v] for p in parts]) for v in range(2))
    return views, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])


def drive(model: MemoryBank, data_for_step) -> dict:
    """Contrast → loss → backward → on_after_backward, as Lightning runs a training step."""
    model.train()
    steps = []
    for step in range(STEPS):
        data = data_for_step(step)
        before = model.bank.features.clone()
        with torch.no_grad():
            z = model.embed(data[0][0])
        contrast = model.contrast(data)
        model.loss(contrast).value.backward()
        model.on_after_backward()
        steps.append({"before": before, "z": z, "indices": data[2]})
    return {"features": model.bank.features.clone(), "labels": model.bank.labels.clone(), "steps": steps}


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    with gloo_rank(rank, WORLD, init_file):
        torch.save(drive(make_bank(), lambda step: shard(rank, step)), f"{out_dir}/rank{rank}.pt")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("bank_ddp")
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def test_the_sampler_really_pads_with_repeats():
    """Control: the global batches hold repeated indices, so the tests below exercise the mean."""
    for step in range(STEPS):
        indices = global_batch(step)[2]
        assert indices.numel() == 8 and indices.unique().numel() == DATASET


def test_both_ranks_hold_identical_banks_equal_to_one_process(ranks):
    """Catches ranks that write only their own shard, or whose last writer wins on repeated indices."""
    rank0, rank1 = ranks
    assert torch.equal(rank0["features"], rank1["features"])
    assert torch.equal(rank0["labels"], rank1["labels"])
    single = drive(make_bank(), global_batch)
    torch.testing.assert_close(rank0["features"], single["features"], atol=1e-6, rtol=0)
    assert torch.equal(rank0["labels"], single["labels"])


def test_repeated_indices_get_the_mean_of_their_embeddings(ranks):
    """Catches a write-order-dependent update (one occurrence wins) or m and 1 − m swapped under DDP."""
    rank0, rank1 = ranks
    states = [s["before"] for s in rank0["steps"]] + [rank0["features"]]
    for step in range(STEPS):
        indices = torch.cat([rank0["steps"][step]["indices"], rank1["steps"][step]["indices"]])
        z = torch.cat([rank0["steps"][step]["z"], rank1["steps"][step]["z"]]).double()
        before, after = states[step].double(), states[step + 1].double()
        for i in range(BANK):
            occurrences = indices == i
            mean_z = z[occurrences].mean(dim=0)
            expected = F.normalize(M * before[i] + (1 - M) * mean_z, dim=0)
            torch.testing.assert_close(after[i], expected, atol=1e-6, rtol=0, msg=f"step {step} entry {i}")
