"""HDF5 datasets read as batches along their first axis (:class:`HDF5Reader`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _packread
from ._common import Indices, as_indices, check_num_threads
from ._deprecated import fold, source_names
from ._options import Remote
from ._reader import ArrayInfo, ArrayReader, Out, check_ragged, ragged_values
from ._registry import Format, register
from ._sources import OBJECT, URL, classify
from .errors import (
    InvalidArgumentError,
    MissingKeyError,
    PackreadTypeError,
    UnsupportedError,
)

#: Decoded chunks kept between batches by default (chunks holding several samples).
DEFAULT_CACHE_BYTES: int = _packread.DEFAULT_CACHE_BYTES

#: File name suffixes of HDF5 files.
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5", ".nc")
#: The HDF5 superblock signature; it sits at byte 0 or, after a user block, at 512, 1024, ...
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def is_hdf5(head: Callable[[int], bytes]) -> bool:
    """Whether a file's leading bytes hold an HDF5 superblock signature."""
    at = 0
    while at <= 1 << 20:
        got = head(at)
        if got == HDF5_SIGNATURE:
            return True
        if len(got) < 8:
            return False
        at = 512 if at == 0 else at * 2
    return False


def _attr_value(raw: tuple[Any, ...]) -> Any:
    """An attribute as h5py (or, in a PyTables file, PyTables) gives it."""
    kind = raw[1]
    if kind == "empty":
        return None
    if kind == "strings":
        values, shape, scalar = raw[2:]
        if scalar:
            return values[0]
        return np.array(values, dtype=object).reshape(shape)
    dtype, shape, data, scalar, text = raw[2:]
    arr = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if text:  # a UTF-8 fixed-length string PyTables reads as str
        arr = np.char.decode(arr, "utf-8")
    return arr[()] if scalar else arr


class HDF5Dataset:
    """One dataset of an :class:`HDF5Reader`: its metadata, and reads along the first axis.

    >>> ds = HDF5Reader("train.h5")["images"]
    >>> ds.shape, ds.chunks, ds.filters
    ((64, 3, 32, 32), (1, 3, 32, 32), [(1, 'deflate', (4,))])
    """

    def __init__(
        self,
        inner: _packread.HDF5File,
        info: ArrayInfo,
        meta: dict[str, Any],
        ragged: str,
        reopen: tuple[Any, ...],
    ) -> None:
        # The extension object, not the Python reader: no reference cycle keeps a dropped
        # reader's file open.
        self._inner = inner
        self._info = info
        self._reopen = reopen
        self._ragged = ragged
        self.name = info.name
        self.dtype: np.dtype[Any] = meta["dtype"]
        self.shape: tuple[int, ...] = meta["shape"]
        self.chunks: tuple[int, ...] | None = meta["chunks"]
        #: The filter pipeline in write order: ``(id, name, parameters)``.
        self.filters: list[tuple[int, str, tuple[int, ...]]] = meta["filters"]
        #: How packread reads it (pread + decode, or libhdf5 and why).
        self.read_path: str = meta["read_path"]
        #: For variable-length data (``dtype`` is then the sequences' element type):
        #: ``{"dtype", "elem_shape", "kind"}``, ``kind`` one of ``"array"``, ``"bytes"``,
        #: ``"unicode"``; ``None`` for fixed-size data.
        self.vlen: dict[str, Any] | None = meta["vlen"]
        #: Bytes the data takes in the file (chunks as stored, compressed or not), from the
        #: chunk index read at open; ``None`` where libhdf5 keeps it (compact, external or
        #: virtual storage). For variable-length data, the heap IDs only.
        self.stored_bytes: int | None = meta["stored_bytes"]
        #: Chunks written (absent ones read as the fill value); 0 when not chunked.
        self.chunks_written: int = meta["chunks_written"]
        #: Chunks stored with a filter skipped (PyTables stores chunks blosc cannot shrink so).
        self.chunks_unfiltered: int = meta["chunks_unfiltered"]
        if self.vlen is not None:
            self.dtype = self.vlen["dtype"]
        #: The dataset's attributes as h5py reads them; in a PyTables file only the user
        #: attributes (PyTables' own bookkeeping left out), strings as PyTables reads them.
        #: Pickled values (PyTables stores Python objects so) stay bytes: never unpickled.
        self.attrs: dict[str, Any] = {a[0]: _attr_value(a) for a in inner.attrs(info.name)}

    def __len__(self) -> int:
        return self.shape[0]

    def read(self, sel: int | Indices, out: np.ndarray | None = None) -> Any:
        """Samples along the first axis: an int gives one sample, anything else a batch.

        >>> ds = HDF5Reader("train.h5")["images"]
        >>> ds.read(0).shape, ds.read([0, 5]).shape
        ((3, 32, 32), (2, 3, 32, 32))
        """
        one = isinstance(sel, (int, np.integer))
        rows = as_indices([int(sel)] if one else sel, len(self), self._inner.path)  # type: ignore[arg-type]
        reader = self._inner.reader()
        info = self._info
        if info.ragged is not None:
            if out is not None:
                raise InvalidArgumentError(
                    f"out= cannot hold {self.name!r}: its samples differ in size"
                )
            read, slot = reader.read_ragged(rows, info.position, 0)
            read.wait(None)
            got = ragged_values(info, slot.take(), "list" if one else self._ragged)
        else:
            got = out if out is not None else np.ndarray((len(rows), *info.shape), info.dtype)
            reader.read_into(rows, [info.position], [got], 0).wait(None)
        return got[0] if one else got

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_dataset, (*self._reopen, self.name))

    def __repr__(self) -> str:
        return (
            f"<HDF5Dataset {self.name!r} shape={self.shape} dtype={self.dtype} "
            f"chunks={self.chunks}>"
        )


class HDF5Reader(ArrayReader):
    """Datasets of HDF5 files (h5py or PyTables), read as batches with the GIL released.

    ``source`` is a file: a path, a URL (``s3://``, ``gs://``, ``az://``, ``https://``), the
    bytes of a whole file (any bytes-like object, read in place) ; or
    many files, a list or a glob pattern (``"train_*.h5"``, sorted), whose samples follow
    each other (``shards``; ``shard_index=``, ``max_open_shards=``).

    ``arrays`` is one dataset path (``batch`` returns an array), a list of paths, or
    ``None``: every dataset whose first dimension is the file's common sample count (``batch``
    returns a dict; ``skipped`` says what was left out and why). libhdf5 is used at open to
    find every chunk; batches are then read with ``pread`` and decoded in parallel outside its
    lock. ``chunk_cache_bytes`` bounds the decoded chunks kept for the next batch (0
    disables); ``in_memory=True`` reads the file whole first (like PyTables'
    ``driver="H5FD_CORE"``); ``num_threads`` gives this reader a pool of its own. Pickles by
    source.

    Variable-length datasets (PyTables ``VLArray``, h5py ``vlen_dtype`` and string data) give
    a list per batch (arrays, or ``bytes``/``str`` for strings), or with ``ragged="flat"`` a
    pair ``(values, offsets)`` of ``len(idx) + 1`` offsets, ready for collation.

    >>> h = HDF5Reader("train.h5")
    >>> batch = h.batch([3, 17, 42])  # {"images": (3, ...), "labels": (3,)}
    >>> batch["images"].shape, batch["labels"].tolist()
    ((3, 3, 32, 32), [3, 17, 42])
    """

    format = "hdf5"

    @source_names("HDF5Reader", "src")
    def __init__(
        self,
        source: Any,
        arrays: str | Sequence[str] | None = None,
        *,
        chunk_cache_bytes: int = DEFAULT_CACHE_BYTES,
        in_memory: bool = False,
        ragged: str = "list",
        num_threads: int | None = None,
        remote: Remote | dict[str, Any] | None = None,
        shard_index: str | os.PathLike[str] | None = None,
        max_open_shards: int | None = None,
        **deprecated: Any,
    ) -> None:
        kwargs = fold("HDF5Reader", HDF5Reader.__init__, locals(), deprecated)
        self._setup(source, None, **kwargs)

    def _setup(
        self,
        source: Any,
        state: dict[str, Any] | None,
        arrays: str | Sequence[str] | None = None,
        chunk_cache_bytes: int = DEFAULT_CACHE_BYTES,
        in_memory: bool = False,
        ragged: str = "list",
        num_threads: int | None = None,
        remote: Any = None,
        shard_index: Any = None,
        max_open_shards: Any = None,
    ) -> None:
        cache = chunk_cache_bytes
        if isinstance(cache, bool) or not isinstance(cache, (int, np.integer)):
            raise PackreadTypeError(f"chunk_cache_bytes must be an int, not {type(cache).__name__}")
        if cache < 0:
            raise InvalidArgumentError(f"chunk_cache_bytes must be >= 0, not {cache}")
        remote = Remote._of(remote)
        names = [arrays] if isinstance(arrays, str) else arrays
        if names is not None:
            names = list(names)
            if any(not isinstance(n, str) for n in names):
                raise PackreadTypeError("arrays must be a dataset path or a list of them")
            for n in names:
                if not n.isascii() and any(0xDC80 <= ord(c) <= 0xDCFF for c in n):
                    # Undecodable bytes (os.fsdecode's surrogates) name nothing: HDF5 names
                    # are UTF-8.
                    raise MissingKeyError(f"{source!s}: no dataset {n!r}")
            paths = [n.lstrip("/") for n in names]
            twice = sorted({n for n in paths if paths.count(n) > 1})
            if twice:
                raise InvalidArgumentError(f"arrays names {twice[0]!r} more than once")
        self._ragged = check_ragged(ragged)
        self._kwargs = {
            "arrays": arrays,
            "chunk_cache_bytes": int(cache),
            "in_memory": bool(in_memory),
            "ragged": ragged,
            "num_threads": check_num_threads(num_threads),
            "remote": remote,
            "shard_index": shard_index,
            "max_open_shards": max_open_shards,
        }
        options = {
            "datasets": names,
            "cache_bytes": int(cache),
            "in_memory": bool(in_memory),
            "num_threads": self._kwargs["num_threads"],
            **remote._binding(),
        }
        src = classify(source, remote)
        self._source = source
        self._inner: Any = None
        self._datasets: dict[str, HDF5Dataset] = {}
        if src.many:
            shards = self._open_shards(src.value, options, shard_index, max_open_shards, state)
            reader = shards.reader()
        else:
            if in_memory and src.kind in (URL, OBJECT):
                raise InvalidArgumentError("in_memory=True reads local files; not a URL")
            # libhdf5 reads the superblock and root group from an object's head.
            target = self._target(src, remote, "an HDF5 file")
            self._inner = _packread.HDF5File(target, options)
            self._paths = [self._inner.path]
            reader = self._inner.reader()
        self._bind(reader, [a[0].lstrip("/") for a in reader.arrays()])
        self._choose(arrays.lstrip("/") if isinstance(arrays, str) else None)
        if self._inner is not None:
            reopen = (self._source, self._kwargs)
            self._datasets = {
                n: HDF5Dataset(self._inner, info, self._inner.info(n), self._ragged, reopen)
                for n, info in self._arrays.items()
            }
            self.samples_per_chunk = _samples_per_chunk(self._datasets.values())

    @property
    def path(self) -> str:
        """The file's path (the first file's, for a reader of several; a name for bytes)."""
        return self._paths[0]

    @property
    def cache_bytes(self) -> int:
        """The budget for decoded chunks kept between batches (per file)."""
        return int(self._kwargs["chunk_cache_bytes"])

    @property
    def skipped(self) -> dict[str, str]:
        """Datasets left out of ``arrays=None``, with the reason."""
        if self._inner is None:
            return {}
        return {k.lstrip("/"): v for k, v in self._inner.skipped().items()}

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lstrip("/") in self._arrays

    def __getitem__(self, name: Any) -> Any:
        """One dataset's metadata and reads (a ``MissingKeyError``, a ``KeyError``, if this
        reader does not read it); an int is one sample, as on every reader."""
        if isinstance(name, (int, np.integer)) and not isinstance(name, bool):
            return super().__getitem__(int(name))
        key = name.lstrip("/") if isinstance(name, str) else name
        if self._inner is None and key in self._arrays:
            raise UnsupportedError(
                f"{self._describe()}: a reader of several files has no one dataset {key!r}; "
                "open one file: HDF5Reader(reader.paths[k])"
            )
        self._check_open()
        try:
            return self._datasets[key]
        except (KeyError, TypeError):
            raise MissingKeyError(
                f"{self.path}: no dataset {name!r} in this reader (datasets: {list(self._arrays)})"
            ) from None

    def batch(self, idx: Indices, *, out: Out = None, epoch: int = 0) -> Any:
        """Samples ``idx`` (order, duplicates and negatives kept) of every dataset, stacked:
        an array for a reader of one dataset, else a dict; into ``out`` when given.

        >>> HDF5Reader("train.h5", "labels").batch([5, -1, 5]).tolist()
        [5, 63, 5]
        """
        return self.batch_async(idx, out=out, epoch=epoch).result()

    def close(self) -> None:
        """Releases the file (once no dataset of it is in use elsewhere: each holds it too);
        later calls raise ``ReaderClosedError``. A ``with`` block closes the reader at its end.

        >>> with HDF5Reader("train.h5") as reader:
        ...     batch = reader.batch([0, 1])
        >>> reader.closed
        True
        """
        if not self.closed:
            super().close()
            for ds in self._datasets.values():
                ds._inner = self._inner


def _samples_per_chunk(datasets: Any) -> int:
    """Samples stored (and decoded) together: the first chunk dimension of the dataset whose
    chunks hold the most bytes; 1 when no chunk holds several samples."""
    best, rows = 0, 1
    for ds in datasets:
        if ds.chunks:
            nbytes = int(np.prod(ds.chunks)) * ds.dtype.itemsize
            if nbytes > best:
                best, rows = nbytes, ds.chunks[0]
    return max(rows, 1)


def _reopen_dataset(source: Any, kwargs: dict[str, Any], name: str) -> HDF5Dataset:
    reader = HDF5Reader.__new__(HDF5Reader)
    reader._setup(source, None, **kwargs)
    return reader[name]  # type: ignore[no-any-return]


register(
    Format(
        name="hdf5",
        reader=HDF5Reader,
        suffixes=HDF5_SUFFIXES,
        magic=is_hdf5,
    )
)

__all__ = ["DEFAULT_CACHE_BYTES", "HDF5Dataset", "HDF5Reader"]
