"""Reading batches for the datasets of :mod:`packread.torch`: the reader each process opens,
batches started (into shared memory in DataLoader workers) and numpy arrays made tensors."""

from __future__ import annotations

import math
import os
from typing import Any, cast

import numpy as np
import torch

from .. import _packread
from .._common import BatchReader
from .._hdf5 import HDF5Reader
from .._image import ImageReader
from .._npy import NpyReader
from .._open import Source, open_reader
from .._zip import NpzReader, ZipReader


class _ReaderSlot:
    """A reader opened on first use in each process: the one given (or opened) in the process
    that made the dataset, a fresh one (from the same arguments) in every other process."""

    def __init__(self, source: Source, datasets: Any, options: dict[str, Any]) -> None:
        reader = open_reader(source, datasets, **dict(options))
        # Opening an object in object storage started packread's I/O threads; the process
        # that made the dataset usually forks DataLoader workers next, and then keeps none.
        _packread.release_runtime()
        self._reader: BatchReader | None = reader
        self._pid = os.getpid()
        # Readers of packread pickle as their arguments; another reader travels as itself.
        self._recipe: Any = reader.__reduce__() if _is_packread(reader) else reader

    def get(self) -> BatchReader:
        if self._reader is None or self._pid != os.getpid():
            if isinstance(self._recipe, tuple):
                build, args = self._recipe[:2]
                self._reader = build(*args)
            else:
                self._reader = self._recipe
            self._pid = os.getpid()
        return self._reader

    def __getstate__(self) -> dict[str, Any]:
        return {"_reader": None, "_pid": -1, "_recipe": self._recipe}


def _is_packread(reader: Any) -> bool:
    return isinstance(reader, (HDF5Reader, ImageReader, NpyReader, NpzReader, ZipReader))


def _torch_ready(arr: np.ndarray) -> bool:
    """Whether ``torch.from_numpy`` takes ``arr`` as it is (a plain number type, native order)."""
    return arr.dtype.kind in "biufc" and arr.dtype.isnative and arr.dtype != np.longdouble


def to_torch(value: Any) -> Any:
    """numpy arrays to tensors without a copy (``torch.from_numpy``), recursively through dicts,
    lists and tuples. Arrays of a non-native byte order are converted (one copy); arrays torch
    cannot hold (strings, records, datetimes) stay numpy arrays."""
    if isinstance(value, np.ndarray):
        if _torch_ready(value):
            return torch.from_numpy(value)
        if value.dtype.kind in "biufc" and value.dtype != np.longdouble:
            return torch.from_numpy(value.astype(value.dtype.newbyteorder("=")))
        return value
    if isinstance(value, dict):
        return {k: to_torch(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(to_torch(v) for v in value)
    return value


def _shared_output(rows: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
    """``(tensor, array)``: an empty batch in shared memory, the tensor and a numpy view of it,
    or ``None`` where torch cannot hold the dtype. In a DataLoader worker, a batch read straight
    into shared memory reaches the main process without the copy the loader would make."""
    probe = np.empty(0, dtype=dtype)
    if not _torch_ready(probe):
        return None
    tdtype = torch.from_numpy(probe).dtype
    nbytes = rows * math.prod(shape) * dtype.itemsize
    storage = torch.UntypedStorage._new_shared(nbytes)
    # torch's stubs want a stride too; without one the tensor is contiguous, as wanted.
    tensor = torch.empty(0, dtype=tdtype).set_(storage, 0, (rows, *shape))  # type: ignore[call-overload]
    return tensor, tensor.numpy()


class _Done:
    """A batch already read (for readers without ``batch_async``)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> Any:
        return self._value


class _Labelled:
    """An image batch being read, with its labels: ``{"images": ..., "labels": ...}``."""

    def __init__(self, handle: Any, labels: np.ndarray | None) -> None:
        self._handle = handle
        self._labels = labels

    def result(self, timeout: float | None = None) -> Any:
        images = self._handle.result(timeout)
        if self._labels is None:
            return {"images": images}
        return {"images": images, "labels": self._labels}


def _start_images(
    reader: ImageReader, idx: np.ndarray, to_shared: bool, epoch: int
) -> tuple[Any, Any]:
    """:func:`_start_batch` for images: ``{"images", "labels"}`` (no labels for a source
    without any), the random crops of ``epoch``."""
    labels = None if reader.labels is None else reader.labels[idx]
    single = None
    if to_shared and None not in reader.shape:
        single = _shared_output(len(idx), reader.shape, reader.dtype)
    if single is None:
        return _Labelled(reader.batch_async(idx, epoch=epoch), labels), None
    tensor, out = single
    handle = _Labelled(reader.batch_async(idx, epoch=epoch, out=out), labels)
    tensors = {"images": tensor}
    if labels is not None:
        tensors["labels"] = torch.from_numpy(labels)
    return handle, tensors


def _start_batch(
    reader: BatchReader, idx: np.ndarray, to_shared: bool, epoch: int = 0
) -> tuple[Any, Any]:
    """Starts reading ``idx`` (in ``epoch``, which random image crops are drawn from); returns
    ``(handle, tensors)``, where ``tensors`` replaces the result when the batch was read into
    shared memory (``None`` otherwise)."""
    if isinstance(reader, ImageReader):
        return _start_images(reader, idx, to_shared, epoch)
    out: Any = None
    tensors: Any = None
    if to_shared:
        shape, dtype = reader.shape, reader.dtype
        if isinstance(dtype, dict):
            shapes = cast("dict[str, tuple[int, ...]]", shape)
            made = {k: _shared_output(len(idx), shapes[k], dtype[k]) for k in dtype}
            if all(m is not None for m in made.values()):
                out = {k: m[1] for k, m in made.items()}
                tensors = {k: m[0] for k, m in made.items()}
        else:
            single = _shared_output(len(idx), cast("tuple[int, ...]", shape), dtype)
            if single is not None:
                tensors, out = single
    start = getattr(reader, "batch_async", None)
    if start is not None:
        handle: Any = start(idx, out=out) if out is not None else start(idx)
    else:
        handle = _Done(reader.batch(idx, out=out) if out is not None else reader.batch(idx))
    return handle, tensors
