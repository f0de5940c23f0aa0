"""A packread reader's array as a ``dask.array`` (``pip install packread[dask]``).

:func:`from_reader` cuts the samples into Dask chunks that begin and end on the storage's
chunk boundaries (and shards' starts), so that no stored chunk is decoded by two Dask tasks,
and builds the array with ``lock=False``: packread reads with the GIL released and needs no
lock, where ``da.from_array(h5py_dataset)`` must serialise every read through one. The array
pickles by source, so it computes on Dask's threaded, process and distributed schedulers.
"""

from __future__ import annotations

import hashlib
import pickle
import uuid
from typing import Any

import numpy as np

try:
    import dask
    import dask.array as da
except ImportError:  # pragma: no cover - said to whoever imports it without Dask
    raise ImportError("packread.dask needs Dask: pip install 'packread[dask]'") from None

from ._reader import ArrayReader
from ._segments import cut, rows_for
from .errors import InvalidArgumentError, MissingKeyError, PackreadTypeError

__all__ = ["from_reader"]


def from_reader(
    reader: ArrayReader,
    name: str | None = None,
    *,
    chunk_bytes: int | str | None = None,
) -> da.Array:
    """Array ``name`` of ``reader`` (default: its one array) as a ``dask.array``, chunked
    along the first axis on storage chunk boundaries, about ``chunk_bytes`` a chunk (default:
    Dask's ``array.chunk-size``, 128 MiB; a number or a string such as ``"64 MiB"``).

    >>> x = packread.dask.from_reader(packread.HDF5Reader("train.h5"), "images")
    >>> x.shape, x.chunks[0]
    ((64, 3, 32, 32), (64,))
    >>> images = packread.HDF5Reader("train.h5", "images").batch(range(64))
    >>> float(x.mean().compute()) == float(images.mean())
    True
    """
    if not isinstance(reader, ArrayReader):
        raise PackreadTypeError(f"from_reader takes a packread reader, not {type(reader).__name__}")
    keys = list(reader._chosen)
    if name is None:
        if len(keys) != 1:
            raise InvalidArgumentError(f"{reader._describe()}: name one of its arrays {keys}")
        name = keys[0]
    if name not in reader._arrays:
        raise MissingKeyError(
            f"{reader._describe()}: no array {name!r} (arrays: {list(reader._arrays)})"
        )
    info = reader._arrays[name]
    if info.ragged is not None:
        raise InvalidArgumentError(
            f"{reader._describe()}: {name!r} holds samples of different sizes, which a Dask "
            "array cannot"
        )
    target = dask.utils.parse_bytes(chunk_bytes or dask.config.get("array.chunk-size"))
    row_bytes = int(np.prod(info.shape, dtype=np.int64)) * info.dtype.itemsize
    per_chunk = max(1, int(reader.samples_per_chunk))
    lengths = [len(s.range) for s in reader.shards]
    segments = cut(lengths, per_chunk, rows_for(row_bytes, target, per_chunk))
    rows = tuple(b - a for a, b in segments) or (0,)
    chunks = (rows, *((d,) for d in info.shape))
    array = _Rows(reader, name)
    return da.from_array(
        array,
        chunks=chunks,
        lock=False,
        asarray=False,
        fancy=False,
        name=f"packread-{name}-{array.token}",
        meta=np.empty((0,) * (1 + len(info.shape)), dtype=info.dtype),
    )


class _Rows:
    """What ``da.from_array`` reads chunks from: array ``name`` of ``reader``, sliced as
    numpy slices (rows read as one batch, the other axes sliced after)."""

    def __init__(self, reader: ArrayReader, name: str) -> None:
        self.reader = reader
        self.name = name
        info = reader._arrays[name]
        self.dtype = info.dtype
        self.shape = (len(reader), *info.shape)
        self.ndim = len(self.shape)
        try:
            raw = pickle.dumps((reader, name), protocol=pickle.HIGHEST_PROTOCOL)
        except (TypeError, AttributeError, pickle.PicklingError):
            # A source that does not pickle (an open file): an array of its own, which the
            # threaded scheduler computes (other schedulers say the reader does not pickle).
            raw = uuid.uuid4().bytes
        self.token = hashlib.sha1(raw).hexdigest()

    def __dask_tokenize__(self) -> str:
        return self.token

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        first, rest = (key[0] if key else slice(None)), key[1:]
        if isinstance(first, (int, np.integer)):
            return self[(slice(first, first + 1) if first != -1 else slice(-1, None), *rest)][0]
        rows = range(len(self.reader))[first] if isinstance(first, slice) else first
        got = self.reader._start(rows, None, 0, [self.name], True).result()
        return got[(slice(None), *rest)] if rest else got
