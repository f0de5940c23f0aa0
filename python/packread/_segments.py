"""Contiguous row ranges ("segments") cut from a reader's samples along its storage: every cut
falls on a chunk boundary (``samples_per_chunk`` rows from a shard's start) or a shard's
start, so no stored chunk is decoded by two segments, while a segment may run on into the
next shard (many small files make few segments). :mod:`packread.ray` makes its read tasks'
blocks of them, :mod:`packread.dask` its chunks. numpy only: no Ray, no Dask."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from .errors import InvalidArgumentError

#: One segment: rows ``start`` to ``stop`` (exclusive), global indices.
Segment = tuple[int, int]


def cut(lengths: Sequence[int], rows_per_chunk: int, rows: int) -> list[Segment]:
    """The rows of shards of ``lengths`` (in order), cut into segments of about ``rows`` rows:
    each ends at the last chunk boundary at or before ``start + rows`` (or, where the chunk
    holding ``start`` is longer than that, at that chunk's end), a shard's start counting as
    a boundary. Segments cover every row once, in order.

    >>> cut([10, 10], 4, 6)  # chunks of 4 rows from each shard's start
    [(0, 4), (4, 10), (10, 14), (14, 20)]
    >>> cut([3, 3, 3], 1, 5)  # small shards: a segment spans files
    [(0, 5), (5, 9)]
    """
    if rows_per_chunk < 1 or rows < 1:
        raise InvalidArgumentError("rows per chunk and per segment must be >= 1")
    starts = [0, *itertools.accumulate(int(n) for n in lengths)]
    total = starts[-1]

    def shard_of(row: int) -> int:
        """The shard holding ``row`` (a shard of no samples never holds one)."""
        return bisect.bisect_right(starts, row) - 1

    out: list[Segment] = []
    a = 0
    while a < total:
        target = a + rows
        if target >= total:
            b = total
        else:
            j = shard_of(target)
            b = starts[j] + (target - starts[j]) // rows_per_chunk * rows_per_chunk
            if b <= a:  # the chunk holding `a` is longer than `rows`: to its end
                k = shard_of(a)
                b = starts[k] + ((a - starts[k]) // rows_per_chunk + 1) * rows_per_chunk
                b = min(b, starts[k + 1])
        out.append((a, b))
        a = b
    return out


def rows_for(row_bytes: int, target_bytes: int, rows_per_chunk: int) -> int:
    """Rows a segment of ``target_bytes`` holds when a row decodes to ``row_bytes``: whole
    chunks where a chunk fits, at least one row."""
    rows = max(1, target_bytes // max(row_bytes, 1))
    if rows >= rows_per_chunk:
        rows -= rows % rows_per_chunk
    return rows


def balance(segments: Sequence[Segment], groups: int) -> list[list[Segment]]:
    """``segments`` (in the order given) dealt into at most ``groups`` runs of consecutive
    segments holding about as many rows each.

    >>> balance([(0, 2), (2, 4), (4, 6), (6, 7)], 2)
    [[(0, 2), (2, 4)], [(4, 6), (6, 7)]]
    """
    groups = max(1, min(groups, len(segments)))
    total = sum(b - a for a, b in segments)
    out: list[list[Segment]] = []
    seen = 0
    for seg in segments:
        # The group this segment's first row falls in, had rows been dealt evenly.
        k = min(groups - 1, seen * groups // max(total, 1))
        if len(out) <= k:
            out.append([])
        out[-1].append(seg)
        seen += seg[1] - seg[0]
    return out
