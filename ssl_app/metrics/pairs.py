"""Visit every unordered pair {i, j} of N points exactly once, in whole rectangular tiles, with the
same work for every rank.

The rows are cut into B blocks: each rank's ``row_range`` is split into the same number q of
near-equal blocks, so B = world_size · q and rank r owns blocks ``[r·q, (r+1)·q)``. Block p is
paired with itself (its c(c−1)/2 inner pairs: the square of its own rows without the diagonal,
halved) and with the next ``h = ⌊(B−1)/2⌋`` blocks cyclically, ``p + 1 … p + h (mod B)``. Of the
two cyclic distances o and B − o between two blocks exactly one is ≤ h, so each block pair is
visited once, except, when B is even, the antipodal pairs {p, p + B/2} (p < B/2): those go to
p if p is even, else to p + B/2, which spreads them evenly over the ranks.

Unlike the upper triangle (row i against j > i, so the first rows carry all the work), every
block has the same number of partners, and unlike a band of single rows no tile needs a mask:
a block's own rows and its partners' are contiguous (modulo the wrap), so one column range,
cut into tiles of at most ``tile_cols`` columns, covers all its pairs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from ssl_app.metrics.sharding import row_range


class PairTile(NamedTuple):
    """Rows ``[row_start, row_stop)`` against columns ``[col_start, col_stop)``.

    The first ``own_cols`` columns are rows of the block itself: there the diagonal entries
    (``col − row == row_start − col_start``) are not pairs and every other pair appears twice,
    so it counts half. Every other entry of the tile is one pair.
    """

    row_start: int
    row_stop: int
    col_start: int
    col_stop: int
    own_cols: int


def pair_blocks(n: int, world_size: int, chunk_rows: int) -> list[tuple[int, int]]:
    """The B = world_size · q row blocks ``(start, stop)``, q = ⌈⌈n / world_size⌉ / chunk_rows⌉.

    Rank r's blocks ``[r·q, (r+1)·q)`` exactly cover its ``row_range(n, r, world_size)``.
    """
    longest_range = -(-n // world_size)
    per_rank = max(1, -(-longest_range // chunk_rows))
    blocks = []
    for rank in range(world_size):
        start, stop = row_range(n, rank, world_size)
        rows = stop - start
        blocks += [(start + rows * i // per_rank, start + rows * (i + 1) // per_rank) for i in range(per_rank)]
    return blocks


def partner_count(num_blocks: int, p: int) -> int:
    """How many other blocks block p is paired with: h, plus its antipode if it takes it."""
    h = (num_blocks - 1) // 2
    if num_blocks % 2 == 1:
        return h
    half = num_blocks // 2
    takes_antipode = p % 2 == 0 if p < half else (p - half) % 2 == 1
    return h + int(takes_antipode)


def pair_count(blocks: list[tuple[int, int]], first: int, last: int) -> int:
    """Number of pairs visited by blocks ``[first, last)``; over all blocks it is n(n−1)/2."""
    total = 0
    for p in range(first, last):
        size = blocks[p][1] - blocks[p][0]
        total += size * (size - 1) // 2 + size * _partner_rows(blocks, p)
    return total


def pair_tiles(blocks: list[tuple[int, int]], first: int, last: int, tile_cols: int) -> Iterator[PairTile]:
    """Yield the tiles that visit, exactly once, the pairs of blocks ``[first, last)``.

    Block p's columns are its own rows followed by its partners' rows, ``[start, stop + width)``
    modulo n, cut into near-equal tiles of at most ``tile_cols`` columns (and at the wrap).
    """
    n = blocks[-1][1]
    for p in range(first, last):
        start, stop = blocks[p]
        if stop == start:
            continue
        length = (stop - start) + _partner_rows(blocks, p)
        pieces = -(-length // tile_cols)
        for i in range(pieces):
            lo, hi = start + length * i // pieces, start + length * (i + 1) // pieces
            while lo < hi:  # split at the wrap
                col = lo % n
                cols = min(hi - lo, n - col)
                own = max(0, min(stop - lo, cols))
                if not (own == cols == 1 and stop - start == 1):  # a lone diagonal entry has no pair
                    yield PairTile(start, stop, col, col + cols, own)
                lo += cols


def _partner_rows(blocks: list[tuple[int, int]], p: int) -> int:
    """Rows in block p's partners: they are consecutive, from the end of block p (mod n)."""
    n = blocks[-1][1]
    last_partner = blocks[(p + partner_count(len(blocks), p)) % len(blocks)]
    return (last_partner[1] - blocks[p][1]) % n
