"""Statistics for :mod:`packread.torch`'s datasets (:mod:`packread._stats` holds the
arithmetic): each dataset's :class:`~packread._stats.Recorder` in this process, workers'
totals carried with their batches, and the methods every dataset shares (:class:`Measured`)."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from .. import _packread
from .._stats import (
    LoaderStats,
    Recorder,
    batch_rows,
    gather,
    now,
    reader_threads,
    snapshot,
    timed,
)
from .._trace import Tracer, trace_path, tracer

#: This process's recorders by dataset token, for workers' batches to report to as they arrive.
_RECORDERS: weakref.WeakValueDictionary[str, Recorder] = weakref.WeakValueDictionary()


def _stamp() -> float:
    """Unpickled first of a worker's batch: when its unpickling began here."""
    return now()


class _Stamp:
    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_stamp, ())


def _arrive(began: float, item: Any, token: str, payload: dict[str, Any]) -> Any:
    """A worker's batch unpickled here: its worker's totals go to the dataset's recorder, with
    the time receiving it took (mapping its memory, the hand-off's end in this process)."""
    rec = _RECORDERS.get(token)
    if rec is not None:
        rec.arrived(payload, now() - began)
    return item


class WithStats:
    """A worker's batch with its worker's totals: pickled to the main process as the batch
    itself (:func:`_arrive`)."""

    __slots__ = ("item", "payload", "token")

    def __init__(self, item: Any, token: str, payload: dict[str, Any]) -> None:
        self.item, self.token, self.payload = item, token, payload

    def __reduce__(self) -> tuple[Any, ...]:
        return (_arrive, (_Stamp(), self.item, self.token, self.payload))


class Meter:
    """What a dataset's loop records into in this process: its recorder, its token (for
    workers' batches), and its tracer (``None``: not tracing)."""

    __slots__ = ("on", "rec", "token", "trace", "worker")

    def __init__(self, rec: Recorder, token: str, trace: Tracer | None, worker: int | None) -> None:
        self.rec, self.token, self.trace, self.worker = rec, token, trace, worker
        #: Whether statistics are on (``packread.set_stats``, ``PACKREAD_STATS=0``): off, the
        #: loop records nothing (the benchmarks' baseline for what recording costs).
        self.on = bool(_packread.stats_enabled())


class Measured:
    """``stats()``, ``reset_stats()`` and ``timed()``, shared by packread's datasets. A dataset
    sets ``_token`` and ``trace`` and calls :meth:`_start_measuring` in its constructor."""

    _token: str
    trace: str | None

    def _start_measuring(self) -> None:
        self._rec_at: tuple[int, Recorder] | None = None
        self._recorder()

    def _recorder(self) -> Recorder:
        """This process's recorder (a worker makes its own)."""
        at = getattr(self, "_rec_at", None)
        if at is None or at[0] != os.getpid():
            rec = Recorder()
            self._rec_at = (os.getpid(), rec)
            if torch.utils.data.get_worker_info() is None:
                _RECORDERS[self._token] = rec
            return rec
        return at[1]

    def _reader_threads(self) -> int:
        """The threads this dataset's reader reads with (its sources' most, for a mixture)."""
        return max(reader_threads(s.get()) for s in self._slots())

    def _slots(self) -> list[Any]:
        return [self._slot]  # type: ignore[attr-defined]

    def _meter(self) -> Meter:
        info = torch.utils.data.get_worker_info()
        rec = self._recorder()
        if rec.made == 0:
            rec.threads = self._reader_threads()
        return Meter(
            rec,
            self._token,
            tracer(trace_path(self.trace)),
            None if info is None else info.id,
        )

    def stats(self, all_ranks: bool = False) -> LoaderStats:
        """What loading did since this dataset was made (or since :meth:`reset_stats`): the
        consumer's waits, each stage of reading (with DataLoader workers' reads, sent with
        their batches), threads, queue depth and caches, as a
        :class:`~packread.LoaderStats`; ``.verdict()`` says whether training waits on data.
        ``all_ranks=True`` gathers every rank's over ``torch.distributed`` (every rank must
        call it) and names the slowest.

        >>> ds = PackDataset("train.h5", batch_size=16)
        >>> for batch in ds:
        ...     pass
        >>> ds.stats().batches
        4
        """
        stats = snapshot(self._recorder())
        if all_ranks:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                gathered: list[Any] = [None] * dist.get_world_size()
                dist.all_gather_object(gathered, stats.to_dict())
            else:
                gathered = [stats.to_dict()]
            stats = gather(stats, gathered)
        return stats

    def reset_stats(self) -> None:
        """Starts the statistics again from now (workers' totals so far are left out).

        >>> ds = PackDataset("train.h5", batch_size=16)
        >>> ds.reset_stats()
        >>> ds.stats().batches
        0
        """
        rec = self._recorder()
        marked = rec._mark is not None
        rec.reset()
        if marked:
            rec.mark()

    def timed(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """``iterable`` (a ``DataLoader`` over this dataset, or anything made from it), with
        each ``next()`` timed as this dataset's consumer: how long training waited on data
        with DataLoader workers, which the dataset cannot see by itself.

        >>> ds = PackDataset("train.h5", batch_size=16)
        >>> for batch in ds.timed(DataLoader(ds, batch_size=None, num_workers=2)):
        ...     pass
        >>> ds.stats().measured
        True
        """
        meter = self._meter()
        items = timed(meter.rec, iterable, batch_rows, meter.trace)
        try:
            yield from items
        finally:
            items.close()
            if meter.trace is not None:
                meter.trace.merge()
