"""The map-style dataset of :mod:`packread.torch`: :class:`PackMapDataset`, for code that owns
its sampling."""

from __future__ import annotations

import inspect
import os
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from .._common import BatchReader
from .._deprecated import source_names
from .._epoch import check_int
from .._open import Source, legacy_datasets
from .._stats import now
from ..errors import PackreadTypeError
from ._clock import _EpochClock
from ._measure import Measured, WithStats
from ._reading import _ReaderSlot, finish_batch, start_batch, varies_by_epoch


class _Rows(list):
    """A batch as the list of its samples (row views, no copies), which is what torch's
    ``default_collate`` expects, carrying the whole batch for ``PackMapDataset.collate_fn``."""

    __slots__ = ("whole",)
    whole: Any


def _flat_rows(flat: tuple[Any, ...]) -> list[Any]:
    """The samples of a ``ragged="flat"`` array: ``(values, offsets)`` of variable-length HDF5
    data, or ``(values, offsets, shapes)`` of images at their own size."""
    values, offsets = flat[0], flat[1]
    rows = [values[int(offsets[k]) : int(offsets[k + 1])] for k in range(len(offsets) - 1)]
    if len(flat) == 3:
        rows = [
            r.reshape(tuple(int(d) for d in shape)) for r, shape in zip(rows, flat[2], strict=True)
        ]
    return rows


def _rows(batch: Any, read: bool = True) -> _Rows:
    """``batch`` as its samples. ``read``: the batch is as the reader made it (no transform),
    so a tuple in it is a ``ragged="flat"`` array, not one of the samples."""

    def split(v: Any) -> list[Any]:
        if isinstance(v, torch.Tensor):
            return list(v.unbind(0))
        if read and isinstance(v, tuple):
            return _flat_rows(v)
        return list(v)

    if isinstance(batch, dict):
        columns = {k: split(v) for k, v in batch.items()}
        n = len(next(iter(columns.values()))) if columns else 0
        rows = _Rows({k: col[i] for k, col in columns.items()} for i in range(n))
    else:
        rows = _Rows(split(batch))
    rows.whole = batch
    return rows


class PackMapDataset(Measured, Dataset):
    """A map-style ``Dataset`` over a packread reader, for code that owns its sampling.

    ``DataLoader`` calls ``__getitems__`` with a batch's indices, so a batch is one
    ``reader.batch`` call, with any sampler (the default, ``BatchSampler``,
    ``DistributedSampler``, your own). Pass ``collate_fn=PackMapDataset.collate_fn`` and the
    batch goes through as it was read: ``DataLoader(ds, batch_size=64, shuffle=True,
    collate_fn=ds.collate_fn)``; with torch's default collate it still works, at the cost of
    stacking the samples again. ``ds[i]`` is one sample. ``transform(batch)`` is given each
    batch as tensors, as a collate would give them (a batch of one for ``ds[i]``): a
    torchvision v2 transform works on it as written.

    ``source`` and ``**reader_options`` are what :func:`packread.open` takes. Encoded images
    give ``{"images": ..., "labels": ...}``. A reader whose batches vary by epoch (random
    crops and flips, drawn from ``(augment_seed, epoch, index)``) is given the epoch: call
    ``ds.set_epoch(epoch)`` at the start of every epoch, as with ``DistributedSampler``, or
    every epoch repeats the crops of epoch 0. The epoch reaches DataLoader workers, persistent
    ones included.

    >>> ds = PackMapDataset("train.h5", arrays="images")
    >>> len(ds), ds[3].shape
    (64, torch.Size([3, 32, 32]))
    """

    @source_names("PackMapDataset")
    def __init__(
        self,
        source: Source,
        *,
        transform: Callable[[Any], Any] | None = None,
        trace: str | os.PathLike[str] | None = None,
        **reader_options: Any,
    ) -> None:
        super().__init__()
        if transform is not None and not callable(transform):
            raise PackreadTypeError("transform must be callable")
        self.transform = transform
        datasets = reader_options.pop("datasets", None)
        if datasets is not None:
            legacy_datasets(source, datasets, reader_options, "PackMapDataset")
        own = inspect.signature(PackMapDataset.__init__).parameters
        self._slot = _ReaderSlot(source, reader_options, "PackMapDataset", own)
        self._len = len(self._slot.get())
        self._clock = _EpochClock()
        #: Names this dataset's batches arriving from workers (see ``_measure._arrive``).
        self._token = secrets.token_hex(8)
        self.trace = None if trace is None else os.fspath(trace)
        self._start_measuring()
        self._first = True

    def set_epoch(self, epoch: int) -> None:
        """The epoch random image crops are drawn from, in this process and its DataLoader
        workers, from the next batch on.

        >>> ds = PackMapDataset("images.zip", decode=packread.ImageDecode(32, crop="random"))
        >>> ds.set_epoch(3)
        """
        self._clock.set_fixed(check_int("epoch", epoch, 0))
        self._first = True

    def __len__(self) -> int:
        return self._len

    def _read(self, indices: Any) -> Any:
        reader = self._slot.get()
        idx = np.asarray(indices, dtype=np.int64)
        # In a DataLoader worker, straight into a new shared-memory block (the batch is the
        # sampler's, of any size: nothing to recycle).
        sink = "shared" if get_worker_info() is not None and self.transform is None else None
        epoch = self._clock.fixed() if varies_by_epoch(reader) else 0
        meter = self._meter()
        if not meter.on:
            return finish_batch(start_batch(reader, idx, sink, epoch), sink, self.transform)
        rec, first = meter.rec, self._first
        self._first = False
        # The consumer's wait is this read, where the DataLoader's main process reads.
        measure = meter.worker is None and not rec.outer
        if measure:
            rec.asked(first)
        rec.mark()
        began = now()
        started = start_batch(reader, idx, sink, epoch)
        batch = finish_batch(started, sink, self.transform)
        done = now()
        rec.pause()
        rec.read_wait += done - began - started.transform
        rec.transform += started.transform
        rec.made_one(len(idx), None, 0.0)
        if measure:
            rec.got(len(idx), first)
        if meter.trace is not None:
            meter.trace.span("batch", began, done, {"rows": len(idx)})
            if meter.worker is not None:
                # A worker's reads have no end to flush at (and workers skip atexit): each
                # batch's spans are written as it is sent.
                meter.trace.flush()
            else:
                meter.trace.batch_done()
        return batch

    def _sent(self, batch: Any) -> Any:
        """``batch`` as a worker sends it: with the worker's totals (see :meth:`collate_fn`)."""
        meter = self._meter()
        if meter.worker is None or not meter.on:
            return batch
        return WithStats(batch, meter.token, meter.rec.payload(meter.worker))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """The samples ``indices``, read as one batch (see :meth:`collate_fn`)."""
        rows = _rows(self._read(list(indices)), self.transform is None)
        rows.whole = self._sent(rows.whole)
        return rows

    def __getitem__(self, i: int) -> Any:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise PackreadTypeError(f"an index is an int, not {type(i).__name__}")
        return _rows(self._read([int(i)]), self.transform is None)[0]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_rec_at"] = None
        return state

    @staticmethod
    def collate_fn(batch: Any) -> Any:
        """The batch ``__getitems__`` read, as it is (a tensor or a dict of tensors); any other
        list of samples is collated by torch's ``default_collate``.

        >>> ds = PackMapDataset("train.h5")
        >>> loader = DataLoader(ds, batch_size=8, shuffle=True, collate_fn=ds.collate_fn)
        >>> next(iter(loader))["labels"].shape
        torch.Size([8])
        """
        if isinstance(batch, _Rows):
            return batch.whole
        if isinstance(batch, list):
            return torch.utils.data.default_collate(batch)
        return batch

    @property
    def reader(self) -> BatchReader:
        """The reader, opened in this process."""
        return self._slot.get()

    def __repr__(self) -> str:
        return f"PackMapDataset({self._len} samples, reader={self.reader!r})"
