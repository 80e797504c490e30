"""A run requeued on another number of processes (2 ranks → 1, 1 → 2) goes on with the samples of the
interrupted epoch that no rank had yet (issue 42 item 4): the real training dataloaders of each world
size (a stub Trainer for the DDP ranks), the place saved by one and loaded by the other as Lightning
does it (state first, ``iter``, then ``set_epoch``)."""

from __future__ import annotations

import copy
import logging
from collections import Counter
from typing import Any

import pytest
import torch

from tests.datamodules.test_resume_order import WORLD, ddp_loader
from tests.helpers import tiny_data

SAMPLES, BATCH = 52, 8  # 26 per rank of 2 (Lightning's padding), 3 batches each; 6 batches in one process


@pytest.fixture(autouse=True)
def run_seed_zero(monkeypatch):
    """The samplers' seed is the run's (``PL_GLOBAL_SEED``, which other tests' ``seed_everything`` leaves set)."""
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")


def one_process_loader(num_workers: int, train_size: int = SAMPLES) -> Any:
    data = tiny_data(train_size=train_size, num_workers=num_workers)
    data.setup("fit")
    return data.train_dataloader()


def take(loader: Any, batches: int | None, epoch: int = 1, state: dict | None = None) -> list[int]:
    """The indices of the first ``batches`` batches (all: None) of ``epoch``, from ``state`` if given."""
    if state is None:
        loader.sampler.set_epoch(epoch)
        iterator = iter(loader)
    else:  # as Lightning resumes: the state, the iterator (with workers: the first indices drawn), then set_epoch
        loader.load_state_dict(copy.deepcopy(state))
        iterator = iter(loader)
        loader.sampler.set_epoch(epoch)
    if batches is None:
        return [index for batch in iterator for index in batch[2].tolist()]
    return [index for _ in range(batches) for index in next(iterator)[2].tolist()]  # no batch drawn beyond


def permutation(epoch: int, seed: int = 0) -> list[int]:
    return torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(seed + epoch)).tolist()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_two_ranks_requeued_on_one_process_go_on_with_the_epochs_unseen_samples(num_workers, caplog):
    """Catches the old behaviour: the one process took up the saved place (1 batch of 8) in its own,
    unsharded order, seeing 8 samples twice and never 8 others, without a word."""
    loaders = [ddp_loader(rank, seed=rank, num_workers=num_workers) for rank in range(WORLD)]
    seen = [take(loader, 1) for loader in loaders]  # one step of 2 ranks: the permutation's first 16
    state = loaders[0].state_dict()  # the checkpoint holds rank 0's
    assert sorted(seen[0] + seen[1]) == sorted(permutation(1)[:16])
    with caplog.at_level(logging.INFO):
        rest = take(one_process_loader(num_workers), None, state=state)
    assert rest == permutation(1)[16:48]  # 36 left: 4 whole batches, in the permutation's order
    assert not set(rest) & set(seen[0] + seen[1])
    assert "from a checkpoint of 2: epoch 1 goes on with its 36 samples not yet seen" in caplog.text
    assert take(one_process_loader(num_workers), None, epoch=2) == permutation(2)[:48]  # the next epoch: whole


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_process_requeued_on_two_ranks_shares_out_the_rest_of_the_epoch(num_workers):
    """Catches each rank taking up the single process's place in its own shard (samples of the first
    16 seen again, others skipped), and ranks left with different numbers of batches (a DDP hang)."""
    single = one_process_loader(num_workers)
    seen = take(single, 2)
    state = single.state_dict()
    assert seen == permutation(1)[:16]
    rests = [take(ddp_loader(rank, seed=10 + rank, num_workers=num_workers), None, state=state) for rank in range(WORLD)]
    assert rests == [permutation(1)[16 + rank :: WORLD][:16] for rank in range(WORLD)]  # 18 each: 2 batches
    together = Counter(seen + rests[0] + rests[1])
    assert max(together.values()) == 1 and len(together) == 48

    # a second stop in that epoch, on the 2 ranks, resumed on 1: the samples not yet seen still
    loaders = [ddp_loader(rank, seed=rank, num_workers=num_workers) for rank in range(WORLD)]
    firsts = [take(loader, 1, state=state) for loader in loaders]
    rest = take(one_process_loader(num_workers), None, state=loaders[0].state_dict())
    assert rest == [i for i in permutation(1) if i not in set(seen + firsts[0] + firsts[1])][:16]


def test_a_place_that_cannot_be_continued_restarts_the_epoch_in_its_order_and_says_so():
    """Catches a resume past the end of a smaller epoch (no batch at all, silently)."""
    bigger = one_process_loader(0)
    take(bigger, 5)
    smaller = one_process_loader(0, train_size=24)
    with pytest.warns(UserWarning, match="cannot continue epoch 1 where it stopped .*restarts that epoch from its first"):
        rest = take(smaller, None, state=bigger.state_dict())
    assert rest == torch.randperm(24, generator=torch.Generator().manual_seed(1)).tolist()
