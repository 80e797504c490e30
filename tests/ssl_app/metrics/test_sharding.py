"""Row sharding: slice bounds, the balanced pair tiles, and real 2-process DDP runs (gloo, CPU)."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.multiprocessing as mp

from ssl_app.metrics import embedding
from ssl_app.metrics.pairs import pair_blocks, pair_count, pair_tiles
from ssl_app.metrics.rank import effective_rank
from ssl_app.metrics.sharding import resolve_world, row_range
from tests.ranks import gloo_rank

WORLD = 2
N = 1001  # odd, so the two slices have unequal lengths (500 and 501)


# ------------------------------------------------------------------------ slices and tiles
@pytest.mark.parametrize("n, world", [(1001, 2), (10, 3), (7, 7), (3, 5), (0, 2)])
def test_row_ranges_tile_the_rows_in_order(n, world):
    ranges = [row_range(n, r, world) for r in range(world)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(stop == next_start for (_, stop), (next_start, _) in zip(ranges, ranges[1:]))
    sizes = [stop - start for start, stop in ranges]
    assert max(sizes) - min(sizes) <= 1


def visits(n: int, world: int, chunk: int, tile: int) -> torch.Tensor:
    """[n, n]: how much each ordered (row, column) entry counts as a pair, over every tile."""
    blocks = pair_blocks(n, world, chunk)
    per_rank = len(blocks) // world
    counts = torch.zeros(n, n, dtype=torch.float64)
    for rank in range(world):
        for t in pair_tiles(blocks, rank * per_rank, (rank + 1) * per_rank, tile):
            weight = torch.ones(t.row_stop - t.row_start, t.col_stop - t.col_start, dtype=torch.float64)
            weight[:, : t.own_cols] = 0.5
            weight.diagonal(t.row_start - t.col_start).zero_()
            counts[t.row_start : t.row_stop, t.col_start : t.col_stop] += weight
    return counts


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 11, 64, 101])
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("chunk, tile", [(1, 1), (2, 3), (5, 7), (64, 4096)])
def test_pair_tiles_visit_every_unordered_pair_once(n, world, chunk, tile):
    counts = visits(n, world, chunk, tile)
    assert torch.equal(counts + counts.T, 1 - torch.eye(n, dtype=torch.float64))
    blocks = pair_blocks(n, world, chunk)
    assert pair_count(blocks, 0, len(blocks)) == n * (n - 1) // 2


@pytest.mark.parametrize("n, world, chunk", [(1001, 2, 97), (1000, 2, 97), (1000, 4, 50), (10_000, 8, 1024)])
def test_each_rank_gets_its_row_range_and_an_equal_share_of_the_pairs(n, world, chunk):
    blocks = pair_blocks(n, world, chunk)
    per_rank = len(blocks) // world
    assert len(blocks) == world * per_rank
    shares = []
    for rank in range(world):
        mine = blocks[rank * per_rank : (rank + 1) * per_rank]
        assert (mine[0][0], mine[-1][1]) == row_range(n, rank, world)
        assert max(stop - start for start, stop in mine) <= chunk
        shares.append(pair_count(blocks, rank * per_rank, (rank + 1) * per_rank) / (n * (n - 1) / 2))
    assert max(shares) - min(shares) < 0.05 / world


def test_resolve_world_without_a_process_group():
    assert resolve_world() == (0, 1)
    assert resolve_world(0, 1) == (0, 1)
    with pytest.raises(ValueError, match="^world_size"):
        resolve_world(world_size=2)
    with pytest.raises(ValueError, match="^world_size"):
        resolve_world(world_size=0)


# --------------------------------------------------------------------------- real processes
def make_data():
    generator = torch.Generator().manual_seed(0)
    za = torch.randn(N, 32, generator=generator)
    zb = za + 0.5 * torch.randn(N, 32, generator=generator)
    labels = torch.randint(0, 7, (N,), generator=generator)
    return za, zb, labels


def compute_all(za, zb, labels, **world):
    positive, negatives = embedding.positive_and_topk_negatives(za, zb, k=10, chunk_size=97, **world)
    return {
        "uniformity": embedding.uniformity(za, chunk_size=97, **world),
        "tolerance": embedding.tolerance(za, labels, chunk_size=97, **world),
        "effective_rank": effective_rank(za, chunk_size=97, **world),
        "positive": positive,
        "negatives": negatives,
    }


def _record_rows(calls: list, name: str):
    """Wrap a per-slice kernel of ``embedding`` so the test sees which anchor rows it was given."""
    kernel = getattr(embedding, name)

    def recording(*args):
        result = kernel(*args)
        if name == "_uniformity_blocks":  # (u, t, blocks, first, last) -> (log_sum, pairs)
            blocks, first, last = args[2:]
            calls.append({"kernel": name, "rows": (blocks[first][0], blocks[last - 1][1]), "pairs": result[1]})
        else:  # (..., start, stop, chunk, ...): read by name, whatever follows
            bound = inspect.signature(kernel).bind(*args).arguments
            calls.append({"kernel": name, "rows": (bound["start"], bound["stop"])})
        return result

    setattr(embedding, name, recording)


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)  # two processes on two cores
    with gloo_rank(rank, WORLD, init_file):
        za, zb, labels = make_data()  # the gathered set: identical on every rank
        single = compute_all(za, zb, labels, world_size=1)  # opt out of sharding
        local = embedding.positive_and_topk_negatives(za, zb, k=10, chunk_size=97, gather=False)
        calls: list = []
        for name in ("_uniformity_blocks", "_tolerance_rows", "_topk_rows"):
            _record_rows(calls, name)
        sharded = compute_all(za, zb, labels)  # rank/world_size from the process group
        torch.save(
            {"single": single, "sharded": sharded, "calls": calls, "local": tuple(local), "rows": row_range(N, rank, WORLD)},
            f"{out_dir}/rank{rank}.pt",
        )


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics_ddp")
    mp.spawn(_worker, args=(str(tmp / "init"), str(tmp)), nprocs=WORLD, join=True)
    return [torch.load(tmp / f"rank{r}.pt") for r in range(WORLD)]


@pytest.mark.slow  # real processes (gloo)
@pytest.mark.parametrize("metric", ["uniformity", "tolerance", "effective_rank"])
def test_every_rank_returns_the_single_process_scalar(ddp_results, metric):
    za, _, labels = make_data()
    references = {"uniformity": embedding.uniformity, "tolerance": embedding.tolerance, "effective_rank": effective_rank}
    expected = (references[metric](za, labels) if metric == "tolerance" else references[metric](za)).item()
    for result in ddp_results:
        assert result["single"][metric].item() == pytest.approx(expected, abs=1e-7)  # other chunks/threads
        assert result["sharded"][metric].item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.slow  # real processes (gloo)
def test_every_rank_gathers_all_topk_rows(ddp_results):
    za, zb, _ = make_data()
    positive, negatives = embedding.positive_and_topk_negatives(za, zb, k=10)
    for result in ddp_results:
        torch.testing.assert_close(result["sharded"]["positive"], positive, atol=1e-6, rtol=0)
        torch.testing.assert_close(result["sharded"]["negatives"], negatives, atol=1e-6, rtol=0)


@pytest.mark.slow  # real processes (gloo)
def test_without_gather_a_rank_returns_its_own_rows(ddp_results):
    _, negatives = embedding.positive_and_topk_negatives(*make_data()[:2], k=10)
    for result in ddp_results:
        start, stop = result["rows"]
        torch.testing.assert_close(result["local"][1], negatives[start:stop], atol=1e-6, rtol=0)


@pytest.mark.slow  # real processes (gloo)
def test_each_rank_processes_only_its_slice(ddp_results):
    assert [result["rows"] for result in ddp_results] == [(0, 500), (500, 1001)]
    pairs = []
    for result in ddp_results:
        calls = result["calls"]
        # one call per kernel, each on exactly this rank's rows
        assert sorted(call["kernel"] for call in calls) == ["_tolerance_rows", "_topk_rows", "_uniformity_blocks"]
        assert all(call["rows"] == result["rows"] for call in calls)
        pairs += [call["pairs"] for call in calls if call["kernel"] == "_uniformity_blocks"]
    assert sum(pairs) == N * (N - 1) // 2
    assert abs(pairs[0] / sum(pairs) - 0.5) < 0.01  # and about half of the pairs
