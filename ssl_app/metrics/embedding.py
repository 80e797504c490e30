"""Exact embedding-space metrics of docs/science.md: alignment, uniformity, tolerance, top-k negatives.

Conventions shared by every function here:

- Inputs are [N, d] floating tensors; every row is L2-normalised inside (``F.normalize``, so an
  all-zero row stays zero and its values are meaningless). Half precision is computed in
  float32, float64 stays float64, and autocast is switched off.
- Results are exact (every pair, no sampling) and free of gradients. Sums of many terms are
  accumulated in float64 (float32 on MPS, which has no float64).
- Pairwise work runs in blocks of ``chunk_size`` anchor rows, so extra memory is
  O(chunk_size × N) (uniformity: O(chunk_size × 4000)) and never O(N²).
- Sharded under DDP (see ``sharding``): pass the *gathered* embeddings on every rank; each rank
  computes its slice of the anchor rows and one collective makes every rank return the
  single-process value. ``rank``/``world_size`` default to the default process group;
  ``world_size=1`` computes everything locally without communicating.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ssl_app.metrics.histogram import SimilarityHistogram
from ssl_app.metrics.pairs import pair_blocks, pair_count, pair_tiles
from ssl_app.metrics.rows import accumulation_dtype, check_chunk, check_rows, unit_rows
from ssl_app.metrics.sharding import all_gather_rows, all_logsumexp, all_reduce_sum, resolve_world, row_range

# Column tile of the uniformity blocks: cache-sized and deliberately not a power of two
# (benchmarks/README.md, "Tuning notes", has the measurements).
_TILE_COLS = 4000
# Anchor rows per block for uniformity (blocks are rows × _TILE_COLS).
_UNIFORMITY_CHUNK = 1024
# Rows per step of the O(N·d) metrics (alignment, tolerance): few, large steps (8 MB per [rows, 128]
# float32 temporary), since each op pays a thread wake-up on a busy CPU.
_ROW_CHUNK = 16384
# Default block budget of the top-k search (rows × N similarities): 2^25 floats = 128 MB.
_TOPK_BLOCK_ELEMENTS = 1 << 25
# Up to this t, exp(2t·s) for s ∈ [−1, 1] and its tile sums fit in float32 without a shift.
_UNSHIFTED_MAX_T = 30.0


class PositiveAndNegatives(NamedTuple):
    """Per-anchor positive similarity ``s_ii`` [rows] and largest negatives, descending [rows, k]."""

    positive: Tensor
    negatives: Tensor


@torch.no_grad()
def alignment(za: Tensor, zb: Tensor, alpha: float = 2.0) -> Tensor:
    """Alignment (Wang & Isola): ``mean_i ||za_i − zb_i||^alpha`` over the N pairs of views.

    Rows are L2-normalised first; 0 for identical views, 4 (α = 2) for opposite ones. Returns a
    0-d tensor. O(N·d) in chunks of 16384 rows, so not sharded: every rank simply computes it on
    what it is given.
    """
    check_rows("za", za, 1)
    check_rows("zb", zb, 1)
    if za.shape != zb.shape:
        raise ValueError(f"za and zb must have the same shape, got {tuple(za.shape)} and {tuple(zb.shape)}")
    if not isinstance(alpha, (int, float)) or not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    with torch.autocast(za.device.type, enabled=False):
        total = torch.zeros((), dtype=accumulation_dtype(za), device=za.device)
        for a in range(0, za.shape[0], _ROW_CHUNK):  # O(chunk·d) extra memory
            ua, ub = unit_rows(za[a : a + _ROW_CHUNK]), unit_rows(zb[a : a + _ROW_CHUNK])
            total += (ua - ub).norm(dim=1).pow(alpha).sum(dtype=total.dtype)
        return total / za.shape[0]


@torch.no_grad()
def uniformity(
    z: Tensor,
    t: float = 2.0,
    *,
    chunk_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> Tensor:
    """Uniformity as reported by Wang & Liu: ``−log mean_{i<j} exp(−t ||z_i − z_j||²)``.

    Higher is more uniform: 0 for a collapsed set; for independent uniform points on S^{d−1}
    the pair mean tends to ``E exp(2t·s) = 0F1(; d/2; t²) ≈ exp(2t²/d)``, giving
    ``2t − log 0F1(; d/2; t²) ≈ 3.9375`` at d = 128, t = 2 (the paper's cap). For unit rows
    ``||z_i − z_j||² = 2 − 2 z_i·z_j``, so each pair costs one dot product (blocked matrix
    products) and one exp:

        −L_unif = 2t + log(N(N−1)/2) − log Σ_{i<j} exp(2t · z_i·z_j)

    The sum visits each unordered pair once, in whole tiles of ``chunk_size`` rows (default
    1024) × ≤ 4000 columns whose rows are spread evenly over the ranks (see ``pairs``); tile sums
    are accumulated in float64 and combined in log space. For t > 30, where exp(2t·s) would
    leave float32's range, each tile is shifted by its maximum first.

    Args:
        z: [N, d] embeddings, N ≥ 2 (gathered from every rank under DDP).
        t: the temperature of the Gaussian potential, > 0 (2 in both papers).
        chunk_size: anchor rows per block.
        rank, world_size: see the module docstring.
    """
    check_rows("z", z, 2)
    if not isinstance(t, (int, float)) or not t > 0:
        raise ValueError(f"t must be > 0, got {t!r}")
    chunk = check_chunk(chunk_size, _UNIFORMITY_CHUNK)
    rank, world_size = resolve_world(rank, world_size)
    n = z.shape[0]
    with torch.autocast(z.device.type, enabled=False):
        u = unit_rows(z)
        blocks = pair_blocks(n, world_size, chunk)
        per_rank = len(blocks) // world_size  # this rank's blocks cover its row_range
        log_sum, _ = _uniformity_blocks(u, float(t), blocks, rank * per_rank, (rank + 1) * per_rank)
        log_sum = all_logsumexp(log_sum, world_size)
        return 2 * t + math.log(n * (n - 1) / 2) - log_sum


def _uniformity_blocks(u: Tensor, t: float, blocks: list[tuple[int, int]], first: int, last: int) -> tuple[Tensor, int]:
    """``(log Σ exp(2t·u_i·u_j), pair count)`` over the pairs of ``blocks[first:last]`` (see ``pairs``)."""
    acc = accumulation_dtype(u)
    log_sum = torch.tensor(float("-inf"), dtype=acc, device=u.device)
    rows, rows_start = None, None
    for tile in pair_tiles(blocks, first, last, _TILE_COLS):
        if tile.row_start != rows_start:  # tiles come block by block: scale each block once
            rows, rows_start = u[tile.row_start : tile.row_stop] * (2 * t), tile.row_start
        g = torch.mm(rows, u[tile.col_start : tile.col_stop].T)
        if tile.own_cols:
            g.diagonal(tile.row_start - tile.col_start).fill_(float("-inf"))  # i = j: exp(−inf) = 0
        shift = g.max() if t > _UNSHIFTED_MAX_T else None
        if shift is not None:
            g.sub_(shift)
        total = g.exp_().sum(dim=1).to(acc).sum()
        if tile.own_cols:  # the block against itself sees each of its pairs twice
            total = total - 0.5 * g[:, : tile.own_cols].sum(dim=1).to(acc).sum()
        tile_log = total.log() if shift is None else total.log() + shift.to(acc)
        log_sum = torch.logaddexp(log_sum, tile_log)
        del g  # free this tile before the next one is allocated
    return log_sum, pair_count(blocks, first, last)


@torch.no_grad()
def tolerance(
    z: Tensor,
    labels: Tensor,
    *,
    chunk_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> Tensor:
    """Tolerance (Wang & Liu): mean ``z_i·z_j`` over pairs ``i ≠ j`` with ``labels_i == labels_j``.

    Exact in O(N·d) with the class sums ``S_c = Σ_{i∈c} z_i``:

        Σ_{i≠j, same class} z_i·z_j = Σ_c ( ||S_c||² − Σ_{i∈c} ||z_i||² ),
        count = Σ_c n_c (n_c − 1)

    (classes with a single member contribute nothing and are skipped). Rows are normalised and
    their class sums accumulated in float64, ``chunk_size`` rows at a time (default 16384);
    under DDP each rank sums its row slice and the [classes, d] sums are all-reduced. Returns
    NaN when no two rows share a label.

    Args:
        z: [N, d] embeddings (gathered from every rank under DDP).
        labels: [N] integer class labels, any values.
        chunk_size, rank, world_size: see the module docstring.
    """
    check_rows("z", z, 1)
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.shape[0] != z.shape[0]:
        shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"labels must be a 1-D tensor of length N={z.shape[0]} (rows of z), got {shape}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be an integer tensor, got {labels.dtype}")
    chunk = check_chunk(chunk_size, _ROW_CHUNK)
    rank, world_size = resolve_world(rank, world_size)
    with torch.autocast(z.device.type, enabled=False):
        _, cls, sizes = torch.unique(labels.to(z.device), return_inverse=True, return_counts=True)
        count = (sizes * (sizes - 1)).sum().item()
        if count == 0:
            return torch.tensor(float("nan"), dtype=accumulation_dtype(z), device=z.device)
        # Renumber the classes with ≥ 2 members 0..C−1; singletons get −1 and are skipped.
        shared = sizes >= 2
        new_id = torch.cumsum(shared, 0) - 1
        cls = torch.where(shared[cls], new_id[cls], -1)
        start, stop = row_range(z.shape[0], rank, world_size)
        # One buffer, one collective: rows 0..C−1 hold S_c, the last row holds Σ||z_i||² in column 0.
        sums = _tolerance_rows(z, cls, int(shared.sum()), start, stop, chunk)
        sums = all_reduce_sum(sums, world_size)
        class_sums, self_sim = sums[:-1], sums[-1, 0]
        return ((class_sums * class_sums).sum() - self_sim) / count


def _tolerance_rows(z: Tensor, cls: Tensor, num_classes: int, start: int, stop: int, chunk: int) -> Tensor:
    """[C + 1, d]: class sums of the unit rows ``[start, stop)``, then Σ ||u_i||² (column 0) of their members."""
    acc = accumulation_dtype(z)
    sums = torch.zeros(num_classes + 1, z.shape[1], dtype=acc, device=z.device)
    for a in range(start, stop, chunk):
        b = min(a + chunk, stop)
        ids = cls[a:b]
        keep = ids >= 0
        rows, ids = unit_rows(z[a:b][keep]).to(acc), ids[keep]
        sums[:-1].index_add_(0, ids, rows)
        sums[-1, 0] += (rows * rows).sum()
    return sums


@torch.no_grad()
def positive_and_topk_negatives(
    za: Tensor,
    zb: Tensor,
    k: int = 10,
    *,
    chunk_size: int | None = None,
    gather: bool = True,
    histogram: SimilarityHistogram | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> PositiveAndNegatives:
    """For each anchor i: the positive ``s_ii = za_i·zb_i`` and the k largest ``za_i·zb_j``, j ≠ i.

    The histograms of both (docs/science.md, "Positive vs top-k negative similarity") show how far the hardest negatives
    sit from the positive. Exact: each block of ``chunk_size`` anchors is compared with all N
    candidates (default: as many rows as fit 2^25 similarities, 128 MB), the diagonal is read
    off as the positive and excluded, and ``topk`` keeps the k largest.

    Under DDP each rank searches its slice of anchors; with ``gather=True`` (default) the slices
    are all-gathered so every rank returns all N rows in order, with ``gather=False`` a rank
    returns only its rows ``sharding.row_range(N, rank, world_size)``.

    ``histogram``: reset, then filled from the same blocks with every negative ``s_ij`` (j ≠ i) of
    all N anchors, N(N−1) values, and summed over ranks (``SimilarityHistogram``).

    Returns:
        ``PositiveAndNegatives(positive [rows], negatives [rows, k])``, negatives descending.
    """
    check_rows("za", za, 2)
    check_rows("zb", zb, 2)
    if za.shape != zb.shape:
        raise ValueError(f"za and zb must have the same shape, got {tuple(za.shape)} and {tuple(zb.shape)}")
    n = za.shape[0]
    if not isinstance(k, int) or not 1 <= k <= n - 1:
        raise ValueError(f"k must be an int in [1, N-1={n - 1}], got {k!r}")
    chunk = check_chunk(chunk_size, max(1, _TOPK_BLOCK_ELEMENTS // n))
    rank, world_size = resolve_world(rank, world_size)
    with torch.autocast(za.device.type, enabled=False):
        start, stop = row_range(n, rank, world_size)
        ub = unit_rows(zb)
        if histogram is not None:
            histogram.reset(ub.device, accumulation_dtype(ub))
        positive, negatives = _topk_rows(za, ub, k, start, stop, chunk, histogram)
        if histogram is not None:
            _negative_moments(za[start:stop], ub, positive, histogram)
            histogram.all_reduce(world_size)
        if gather:
            positive = all_gather_rows(positive, n, world_size)
            negatives = all_gather_rows(negatives, n, world_size)
        return PositiveAndNegatives(positive, negatives)


@torch.no_grad()
def topk_similarities(
    anchors: Tensor,
    candidates: Tensor,
    k: int = 10,
    *,
    chunk_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> Tensor:
    """The k largest ``u_i·c_j`` of each anchor over every candidate, [N, k] descending (unit rows).

    For candidates that hold no anchor's own sample (e.g. the training set's embeddings of
    evaluation anchors), so nothing is excluded. Exact and sharded as
    ``positive_and_topk_negatives`` (anchor blocks of ``chunk_size``; under DDP each rank searches
    its ``row_range`` of anchors and every rank returns all N rows).
    """
    check_rows("anchors", anchors, 1)
    check_rows("candidates", candidates, 1)
    m = candidates.shape[0]
    if not isinstance(k, int) or not 1 <= k <= m:
        raise ValueError(f"k must be an int in [1, M={m}], got {k!r}")
    chunk = check_chunk(chunk_size, max(1, _TOPK_BLOCK_ELEMENTS // m))
    rank, world_size = resolve_world(rank, world_size)
    with torch.autocast(anchors.device.type, enabled=False):
        units = unit_rows(candidates)
        start, stop = row_range(anchors.shape[0], rank, world_size)
        blocks = [
            torch.mm(unit_rows(anchors[a : min(a + chunk, stop)]).to(units.dtype), units.T).topk(k, dim=1).values
            for a in range(start, stop, chunk)
        ]
        local = torch.cat(blocks) if blocks else units.new_zeros(0, k)
        return all_gather_rows(local, anchors.shape[0], world_size)


def _negative_moments(za: Tensor, ub: Tensor, positive: Tensor, histogram: SimilarityHistogram) -> None:
    """Count, sum and sum of squares of the negatives ``u_i·ub_j`` (j ≠ i) of the anchors ``za``
    into ``histogram``, exactly and in O(rows·d²): Σ_j u_i·ub_j = u_i·(Σ_j ub_j) and
    Σ_j (u_i·ub_j)² = u_iᵀ (Ubᵀ Ub) u_i, less the positives ``positive`` (the j = i terms)."""
    acc = histogram.moments.dtype
    units, candidates = unit_rows(za).to(acc), ub.to(acc)
    total = (units @ candidates.sum(dim=0)).sum() - positive.to(acc).sum()
    squares = ((units @ (candidates.T @ candidates)) * units).sum() - positive.to(acc).square().sum()
    histogram.add_moments(za.shape[0] * (ub.shape[0] - 1), total, squares)


def _topk_rows(
    za: Tensor, ub: Tensor, k: int, start: int, stop: int, chunk: int, histogram: SimilarityHistogram | None = None
) -> tuple[Tensor, Tensor]:
    """Positives [stop − start] and top-k negatives [stop − start, k] of anchors ``[start, stop)``
    (and, into ``histogram``, all their negatives).

    ``za`` is normalised a block at a time; the candidates ``ub`` must already be unit rows.
    """
    positives, negatives = [], []
    for a in range(start, stop, chunk):
        sim = torch.mm(unit_rows(za[a : min(a + chunk, stop)]).to(ub.dtype), ub.T)
        diagonal = sim.diagonal(offset=a)  # sim[r, a + r] = s_ii
        positives.append(diagonal.clone())
        diagonal.fill_(float("-inf"))
        negatives.append(sim.topk(k, dim=1).values)
        if histogram is not None:
            histogram.add(sim, diagonal=a)  # overwrites sim, no longer needed
        del sim, diagonal  # free this block before the next one is allocated
    if not positives:  # an empty slice (more ranks than rows)
        return ub.new_empty(0), ub.new_empty(0, k)
    return torch.cat(positives), torch.cat(negatives)
