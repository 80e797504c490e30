"""Row sharding: slice bounds, the balanced pair band, and real 2-process DDP runs (gloo, CPU)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ssl_app.metrics import embedding
from ssl_app.metrics.pairs import band_pair_count, band_tiles
from ssl_app.metrics.sharding import resolve_world, row_range

WORLD = 2
N = 1001  # odd, so the two slices have unequal lengths (500 and 501)


# ------------------------------------------------------------------------- slices and band
@pytest.mark.parametrize("n, world", [(1001, 2), (10, 3), (7, 7), (3, 5), (0, 2)])
def test_row_ranges_tile_the_rows_in_order(n, world):
    ranges = [row_range(n, r, world) for r in range(world)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(stop == next_start for (_, stop), (next_start, _) in zip(ranges, ranges[1:]))
    sizes = [stop - start for start, stop in ranges]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 11, 64, 101])
@pytest.mark.parametrize("chunk, tile", [(1, 1), (2, 3), (5, 7), (64, 4096)])
def test_band_visits_every_unordered_pair_once(n, chunk, tile):
    visits = torch.zeros(n, n, dtype=torch.int64)
    for t in band_tiles(n, 0, n, chunk, tile):
        block = torch.ones(t.row_stop - t.row_start, t.col_stop - t.col_start, dtype=torch.int64)
        visits[t.row_start : t.row_stop, t.col_start : t.col_stop] += block if t.mask is None else t.mask
    assert torch.equal(visits + visits.T, 1 - torch.eye(n, dtype=torch.int64))
    assert band_pair_count(n, 0, n) == n * (n - 1) // 2


@pytest.mark.parametrize("n", [1000, 1001])
def test_band_gives_row_slices_an_equal_share_of_the_pairs(n):
    counts = [band_pair_count(n, *row_range(n, r, 4)) for r in range(4)]
    assert sum(counts) == n * (n - 1) // 2
    assert max(counts) - min(counts) <= n // 2 + 1  # at most one row's worth (~0.4% here)


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
        "positive": positive,
        "negatives": negatives,
    }


def _record_rows(calls: list, name: str):
    """Wrap a per-slice kernel of ``embedding`` so the test sees which anchor rows it was given."""
    kernel = getattr(embedding, name)

    def recording(*args):
        result = kernel(*args)
        start, stop = args[-3], args[-2]  # every kernel ends with (start, stop, chunk)
        calls.append({"kernel": name, "start": start, "stop": stop})
        if name == "_uniformity_rows":
            calls[-1]["pairs"] = result[1]
        return result

    setattr(embedding, name, recording)


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)  # two processes on two cores
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        za, zb, labels = make_data()  # the gathered set: identical on every rank
        single = compute_all(za, zb, labels, world_size=1)  # opt out of sharding
        calls: list = []
        for name in ("_uniformity_rows", "_tolerance_rows", "_topk_rows"):
            _record_rows(calls, name)
        sharded = compute_all(za, zb, labels)  # rank/world_size from the process group
        local = embedding.positive_and_topk_negatives(za, zb, k=10, chunk_size=97, gather=False)
        torch.save(
            {"single": single, "sharded": sharded, "calls": calls, "local": local, "rows": row_range(N, rank, WORLD)},
            f"{out_dir}/rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics_ddp")
    mp.spawn(_worker, args=(str(tmp / "init"), str(tmp)), nprocs=WORLD, join=True)
    return [torch.load(tmp / f"rank{r}.pt") for r in range(WORLD)]


@pytest.mark.parametrize("metric", ["uniformity", "tolerance"])
def test_every_rank_returns_the_single_process_scalar(ddp_results, metric):
    reference = embedding.__dict__[metric]
    za, _, labels = make_data()
    expected = (reference(za) if metric == "uniformity" else reference(za, labels)).item()
    for result in ddp_results:
        assert result["single"][metric].item() == pytest.approx(expected, abs=1e-12)
        assert result["sharded"][metric].item() == pytest.approx(expected, abs=1e-6)


def test_every_rank_gathers_all_topk_rows(ddp_results):
    za, zb, _ = make_data()
    positive, negatives = embedding.positive_and_topk_negatives(za, zb, k=10)
    for result in ddp_results:
        torch.testing.assert_close(result["sharded"]["positive"], positive, atol=1e-6, rtol=0)
        torch.testing.assert_close(result["sharded"]["negatives"], negatives, atol=1e-6, rtol=0)


def test_without_gather_a_rank_returns_its_own_rows(ddp_results):
    _, negatives = embedding.positive_and_topk_negatives(*make_data()[:2], k=10)
    for result in ddp_results:
        start, stop = result["rows"]
        torch.testing.assert_close(result["local"].negatives, negatives[start:stop], atol=1e-6, rtol=0)


def test_each_rank_processes_only_its_slice(ddp_results):
    assert [result["rows"] for result in ddp_results] == [(0, 500), (500, 1001)]
    pairs = []
    for result in ddp_results:
        calls = result["calls"]
        # one call per kernel, each on exactly this rank's rows
        assert sorted(call["kernel"] for call in calls) == ["_tolerance_rows", "_topk_rows", "_uniformity_rows"]
        assert all((call["start"], call["stop"]) == result["rows"] for call in calls)
        pairs += [call["pairs"] for call in calls if call["kernel"] == "_uniformity_rows"]
    assert sum(pairs) == N * (N - 1) // 2
    assert pairs == [500 * 500, 501 * 500]  # every row has (N−1)/2 = 500 partners
