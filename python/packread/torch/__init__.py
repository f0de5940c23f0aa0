"""PyTorch datasets over packread readers.

:class:`PackDataset` is an ``IterableDataset`` yielding whole batches: sharded by ``DataLoader``
worker and distributed rank, shuffled deterministically per epoch, prefetched on packread's
thread pool, and resumable mid-epoch. :class:`PackMapDataset` is the map-style counterpart, for
code that owns its sampling (``__getitems__`` reads a whole batch at once).

Both read through the :class:`packread.BatchReader` protocol (length, per-sample shape and
dtype, ``batch(idx, out=)``), so any reader works, packread's or not.

How an epoch is cut (the rule every rank and worker follows):

1. One permutation of the ``N`` samples from ``(seed, epoch)`` (identity with
   ``shuffle=False`` or ``shuffle_mode="none"``), identical on every rank.
2. Ranks: with ``drop_last=False`` each of the ``W`` ranks gets ``ceil(N / W)`` samples, the
   permutation padded by repeating it from its start (as ``DistributedSampler`` pads); with
   ``drop_last=True`` each gets ``floor(N / (W * B)) * B``, the rest of the permutation
   dropped. Rank ``r`` takes the ``r``-th contiguous block.
3. Batches: the rank's block cut into batches of ``B`` in order (the last one shorter unless
   ``drop_last``). Every rank has the same number of batches, ``len(dataset)``, so DDP never
   waits on a rank that has run out.
4. Workers: with ``K`` DataLoader workers, worker ``k`` reads batches ``k, k + K, k + 2K...``.
   The DataLoader hands them out in that same round-robin order, so the loader yields batches
   ``0, 1, 2...`` of the rank's epoch whatever ``K`` is; a resumed epoch starts at any batch.

``shuffle_mode="shard"`` (a reader of several files, :class:`packread.ShardedReader`) cuts
the epoch so that each worker reads few files at a time, which is what makes cold disks and
object storage fast:

1. One permutation of the *shards* from ``(seed, epoch)``, identical on every rank; their
   samples follow each other in that order, each shard's in file order.
2. Ranks: that sequence is cut as in step 2 above (``ceil(N / W)`` samples a rank, padded by
   repeating from the start, or whole batches only with ``drop_last``), so every rank reads
   the same number of batches; a shard may straddle two ranks.
3. Workers: the rank's run is cut into one contiguous block per worker, as many samples as
   the batches that worker reads (``k, k + K, ...``); the DataLoader still yields batches
   ``0, 1, 2...``.
4. Within each worker's block, the samples of every ``shard_window`` consecutive shards
   (default 4) are shuffled together.

Fewer shards holding samples than ranks x workers is an error that says so (use
``"sample"`` mode). The order depends on the number of workers: resume a shard-mode state
with the same ``num_workers``. What it costs in randomness: a batch mixes the samples of
about ``shard_window`` shards instead of the whole data set. With 200 shards of 500 samples
and batches of 64, a batch holds samples of 4.1 shards on average with ``shard_window=4``
(15.5 with 16) against 55 in ``"sample"`` mode, and two samples of one batch come from the
same shard with probability 0.25 (0.065 with 16) against 0.005. Where a shard holds one
class or one recording, raise ``shard_window`` as far as the open files and the read-ahead
allow.
"""

# The package's modules:
#   packread/_epoch.py  the epoch arithmetic above, in numpy alone (outside this package, so that
#                       importing it imports no torch): order, rank and worker cut, resume positions
#   _clock.py           the epoch clock the process that made a PackDataset shares with its workers
#   _reading.py         the reader each process opens, batches started, numpy arrays to tensors
#   _buffers.py         where batches are written: recycled buffers, DataLoader workers' shared
#                       slabs and the tickets that carry them, pinned memory, device copies
#   _iterable.py        PackDataset
#   _map.py             PackMapDataset
#   packread/_mix.py    a mixture's arithmetic, in numpy alone: which source each sample or batch
#                       comes from, where in its stream, how long an epoch is
#   _mixture.py         MixDataset

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from .._epoch import SHUFFLE_MODES as SHUFFLE_MODES
from .._open import open_reader
from ._headspace import Headspace, headspace, replay
from ._iterable import PackDataset
from ._map import PackMapDataset
from ._mixture import MixDataset, SourceBatch, SourceRead
from ._reading import to_torch as to_torch

# Names this module had before it became a package that pickles of its datasets name, so that
# those still load.
from ._clock import _EpochClock as _EpochClock  # isort: skip
from ._map import _Rows as _Rows  # isort: skip
from ._measure import Measured as _Measured  # isort: skip
from ._reading import _ReaderSlot as _ReaderSlot  # isort: skip

if TYPE_CHECKING:
    # The names the annotations of PackDataset and PackMapDataset use, which are presented as
    # this module's (see _document_here): the reference (`make docs`) resolves them here.
    from collections.abc import Callable, Iterator, Sequence  # noqa: F401
    from typing import Any  # noqa: F401

    import numpy as np  # noqa: F401

    from .._common import BatchReader  # noqa: F401
    from .._open import Source  # noqa: F401

__all__ = [
    "Headspace",
    "MixDataset",
    "PackDataset",
    "PackMapDataset",
    "SourceBatch",
    "SourceRead",
    "headspace",
    "open_reader",
    "replay",
]


def _document_here(cls: type) -> None:
    """Presents ``cls`` and its methods as this module's, where they are documented: the
    reference and doctest take them as defined here, and ``repr`` and pickles name
    ``packread.torch.X``, as before this module became a package."""
    cls.__module__ = __name__
    for value in vars(cls).values():
        if isinstance(value, property):
            funcs = [value.fget, value.fset, value.fdel]
        else:
            funcs = [getattr(value, "__func__", value)]
        for func in funcs:
            if inspect.isfunction(func):
                func.__module__ = __name__


for _cls in (PackDataset, PackMapDataset, MixDataset, SourceBatch, SourceRead, Headspace):
    _document_here(_cls)
_document_here(_Measured)
headspace.__module__ = replay.__module__ = __name__
del _cls
