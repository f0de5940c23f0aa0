"""Many files of one format read as one reader: the shards' samples follow each other in the
order given (a glob sorted). Every reader takes a list or a glob wherever it takes a path;
this module opens the extension's ``ShardSet`` for it.

Lengths are counted once, when the reader is made (each shard opened in the core with every
option the reader was given, the first ``max_open_shards`` kept open), or read from an index
file (``shard_index=``) that records them, so that a reopen opens no shard at all. A shard is
otherwise opened only when a batch first touches it; at most ``max_open_shards`` stay open,
the least recently used closed first. A members pattern applies to the set: a shard where it
matches nothing holds no samples, and only a pattern that matches nothing in any shard is an
error.
"""

from __future__ import annotations

import os
import resource
from typing import Any, NamedTuple

import numpy as np

from . import _packread, _shard_index
from .errors import InvalidArgumentError, PackreadTypeError


class Shard(NamedTuple):
    """One file of a reader: its path and the global indices of its samples.

    >>> packread.HDF5Reader(["a.h5", "b.h5"], "x").shards[1]
    Shard(path='b.h5', range=range(3, 8))
    """

    path: str
    range: range


def default_max_open() -> int:
    """Open shards kept by default: an eighth of the soft limit on open files (a shard may
    hold two descriptors), between 16 and 512."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 512
    return max(16, min(512, soft // 8))


def check_max_open(max_open: Any) -> int:
    max_open = default_max_open() if max_open is None else max_open
    if isinstance(max_open, bool) or not isinstance(max_open, (int, np.integer)):
        raise PackreadTypeError("max_open_shards must be an int")
    if max_open < 1:
        raise InvalidArgumentError(f"max_open_shards must be >= 1, not {max_open}")
    return int(max_open)


def open_set(
    format: str,
    paths: list[str],
    options: dict[str, Any],
    *,
    shard_index: str | os.PathLike[str] | None,
    max_open: int,
    state: dict[str, Any] | None,
) -> Any:
    """The extension's ``ShardSet`` of ``paths``, each opened as ``format`` with ``options``:
    from ``state`` (a pickle's) or the index file when it is current, else counted (and the
    index file written)."""
    index = None if shard_index is None else os.fspath(shard_index)
    want = None
    if state is None and index is not None:
        want = _shard_index.key(format, options, paths)
        state = _shard_index.read(index, want, len(paths))
        if state is not None:
            return _packread.ShardSet(format, paths, options, state, max_open)
    shards = _packread.ShardSet(format, paths, options, state, max_open)
    if index is not None and want is not None:
        _shard_index.write(index, want, shards.state())
    return shards


def shard_list(paths: list[str], lengths: list[int]) -> list[Shard]:
    """Each shard's path and the global indices of its samples."""
    starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).tolist()
    return [Shard(p, range(starts[k], starts[k + 1])) for k, p in enumerate(paths)]
