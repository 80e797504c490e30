"""The one collectives module: rank-major results, uneven lengths, gradients through the gather."""

from __future__ import annotations

import torch
import torch.multiprocessing as mp

from ssl_app import distributed
from tests.ranks import gloo_rank


def test_single_process_collectives_are_identities():
    x = torch.randn(3, 2)
    assert distributed.world_size() == 1 and distributed.rank() == 0
    for result in (distributed.gather(x), distributed.gather_uneven(x), distributed.gather_with_grad(x)):
        assert result is x
    assert distributed.all_reduce_sum(x) is x


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    with gloo_rank(rank, 2, init_file):
        rows = torch.arange(3 * rank * 2, dtype=torch.float32).view(-1, 2) + 100 * rank  # rank 0: no rows
        uneven = distributed.gather_uneven(rows)
        known = distributed.gather_uneven(rows, counts=[0, 3])
        x = torch.full((2,), float(rank + 1), requires_grad=True)
        gathered = distributed.gather_with_grad(x)
        (gathered * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
        total = distributed.all_reduce_sum(torch.tensor([float(rank + 1)]))
        torch.save({"uneven": uneven, "known": known, "grad": x.grad, "total": total}, f"{out_dir}/rank{rank}.pt")


def test_two_ranks_gather_uneven_rows_rank_major_and_all_reduce_gradients(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    expected_rows = torch.arange(6, dtype=torch.float32).view(3, 2) + 100
    for rank in range(2):
        out = torch.load(tmp_path / f"rank{rank}.pt")
        assert torch.equal(out["uneven"], expected_rows) and torch.equal(out["known"], expected_rows)
        assert out["total"].item() == 3.0
        # both ranks' losses use every gathered row: the gradient of rank r's x sums both ranks' weights
        weights = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(2, 2)[rank]
        assert torch.equal(out["grad"], 2 * weights)
