"""HDF5 datasets read as batches along their first axis (:class:`HDF5Reader`)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

import numpy as np

from . import _packread
from ._common import Closable, Indices, PendingBatch, as_indices, check_num_threads, new_output
from ._remote import DEFAULT_CACHE_DIR_BYTES, is_remote, is_url, open_remote
from ._shards import is_shard_source, sharded
from .errors import InvalidArgumentError, MissingKeyError, PackreadTypeError

#: Decoded chunks kept between batches by default (chunks holding several samples).
DEFAULT_CACHE_BYTES: int = _packread.DEFAULT_CACHE_BYTES

Out = Union[np.ndarray, dict[str, np.ndarray], None]

#: How variable-length samples come back: a list (one array, or ``bytes``/``str``, per
#: sample) or ``"flat"``: ``(values, offsets)``, sample ``k`` being
#: ``values[offsets[k]:offsets[k + 1]]``.
Ragged = Literal["list", "flat"]
RaggedBatch = Union[list[Any], tuple[np.ndarray, np.ndarray]]


def _ragged(ds: HDF5Dataset, taken: tuple[np.ndarray, int, np.ndarray], mode: str) -> RaggedBatch:
    """A finished variable-length read (``RaggedResult.take()``), as ``mode`` says."""
    storage, nbytes, offsets = taken
    vlen = ds.vlen or {}
    values = storage.view(np.uint8)[:nbytes].view(ds.dtype)
    values = values.reshape((-1, *vlen.get("elem_shape", ())))
    if not values.dtype.isnative:
        # As h5py and PyTables give sequences: in native byte order.
        values = values.astype(values.dtype.newbyteorder("="))
    if mode == "flat":
        return values, offsets
    bounds = offsets.tolist()
    kind = vlen.get("kind", "array")
    if kind == "bytes":
        raw = values.tobytes()
        return [raw[a:b] for a, b in itertools.pairwise(bounds)]
    if kind == "unicode":
        text = values.astype("<u4", copy=False)
        return [text[a:b].tobytes().decode("utf-32-le") for a, b in itertools.pairwise(bounds)]
    return [values[a:b] for a, b in itertools.pairwise(bounds)]


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


def _start(
    inner: _packread.HDF5File,
    datasets: dict[str, HDF5Dataset],
    names: list[str],
    rows: Any,
    out: dict[str, np.ndarray] | None,
    ragged: str = "list",
    pick: str | None = None,
) -> PendingBatch[Any]:
    """Starts reading samples ``rows`` of ``names`` into new arrays, or those of ``out``, on
    packread's pool. Variable-length datasets are read there too (their sizes are only known
    from the file), and turned into their Python form once the reads have finished. The batch
    is the dict of arrays, or with ``pick`` that dataset's array alone."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    result: dict[str, Any] = dict(out) if out is not None else {}
    unknown = set(result) - set(names)
    if unknown:
        raise InvalidArgumentError(
            f"out= names datasets this reader does not read: {sorted(unknown)}"
        )
    fixed = [n for n in names if datasets[n].vlen is None]
    for n in names:
        ds = datasets[n]
        if ds.vlen is not None and n in result:
            raise InvalidArgumentError(f"out= cannot hold variable-length data ({n!r})")
        if n not in result and ds.vlen is None:
            result[n] = new_output(len(rows), ds.shape[1:], ds.dtype)
    # Always started, fixed-size data or not: it checks the indices.
    positions = [datasets[n].position for n in fixed]
    reads = [inner.reader().read_into(rows, positions, [result[n] for n in fixed])]
    pending: list[tuple[str, _packread.RaggedResult]] = []
    for n in names:
        if datasets[n].vlen is not None:
            read, slot = inner.read_ragged(rows, datasets[n].name)
            reads.append(read)
            pending.append((n, slot))
    arrays = {n: result.get(n) for n in names}

    def finish() -> Any:
        for n, slot in pending:
            arrays[n] = _ragged(datasets[n], slot.take(), ragged)
        return arrays if pick is None else arrays[pick]

    value = arrays if pick is None else arrays[pick]
    return PendingBatch(reads, value, finish if pending else None)


class HDF5Dataset:
    """One dataset of an :class:`HDF5Reader`: its metadata, and reads along the first axis.

    >>> ds = HDF5Reader("train.h5")["images"]
    >>> ds.shape, ds.chunks, ds.filters
    ((64, 3, 32, 32), (1, 3, 32, 32), [(1, 'deflate', (4,))])
    """

    def __init__(
        self,
        inner: _packread.HDF5File,
        name: str,
        position: int,
        info: dict[str, Any],
        reopen: tuple[Any, ...],
    ) -> None:
        # The extension object, not the Python reader: no reference cycle keeps a dropped
        # reader's file open.
        self._inner = inner
        self._reopen = reopen
        self.name = name
        #: The dataset's position among the file reader's arrays.
        self.position = position
        self.dtype: np.dtype[Any] = info["dtype"]
        self.shape: tuple[int, ...] = info["shape"]
        self.chunks: tuple[int, ...] | None = info["chunks"]
        #: The filter pipeline in write order: ``(id, name, parameters)``.
        self.filters: list[tuple[int, str, tuple[int, ...]]] = info["filters"]
        #: How packread reads it (pread + decode, or libhdf5 and why).
        self.read_path: str = info["read_path"]
        #: For variable-length data (``dtype`` is then the sequences' element type):
        #: ``{"dtype", "elem_shape", "kind"}``, ``kind`` one of ``"array"``, ``"bytes"``,
        #: ``"unicode"``; ``None`` for fixed-size data.
        self.vlen: dict[str, Any] | None = info["vlen"]
        #: Bytes the data takes in the file (chunks as stored, compressed or not), from the
        #: chunk index read at open; ``None`` where libhdf5 keeps it (compact, external or
        #: virtual storage). For variable-length data, the heap IDs only.
        self.stored_bytes: int | None = info["stored_bytes"]
        #: Chunks written (absent ones read as the fill value); 0 when not chunked.
        self.chunks_written: int = info["chunks_written"]
        #: Chunks stored with a filter skipped (PyTables stores chunks blosc cannot shrink so).
        self.chunks_unfiltered: int = info["chunks_unfiltered"]
        if self.vlen is not None:
            self.dtype = self.vlen["dtype"]
        #: The dataset's attributes as h5py reads them; in a PyTables file only the user
        #: attributes (PyTables' own bookkeeping left out), strings as PyTables reads them.
        #: Pickled values (PyTables stores Python objects so) stay bytes: never unpickled.
        self.attrs: dict[str, Any] = {a[0]: _attr_value(a) for a in inner.attrs(name)}
        self._ragged: str = reopen[1].get("ragged", "list")

    def __len__(self) -> int:
        return self.shape[0]

    def read(self, sel: int | Indices, out: np.ndarray | None = None) -> Any:
        """Samples along the first axis: an int gives one sample, anything else a batch.

        >>> ds = HDF5Reader("train.h5")["images"]
        >>> ds.read(0).shape, ds.read([0, 5]).shape
        ((3, 32, 32), (2, 3, 32, 32))
        """
        me = {self.name: self}
        if isinstance(sel, (int, np.integer)):
            one = _start(self._inner, me, [self.name], [int(sel)], None, pick=self.name)
            return one.result()[0]
        rows = as_indices(sel, len(self), self._inner.path)
        outs = None if out is None else {self.name: out}
        return _start(self._inner, me, [self.name], rows, outs, self._ragged, self.name).result()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_dataset, (*self._reopen, self.name))

    def __repr__(self) -> str:
        return (
            f"<HDF5Dataset {self.name!r} shape={self.shape} dtype={self.dtype} "
            f"chunks={self.chunks}>"
        )


class HDF5Reader(Closable):
    """Datasets of one HDF5 file (h5py or PyTables), read as batches with the GIL released.

    ``datasets`` is one dataset path (``batch`` returns an array), a list of paths, or
    ``None``: every dataset whose first dimension is the file's common sample count (``batch``
    returns a dict; ``skipped`` says what was left out and why). libhdf5 is used at open to
    find every chunk; batches are then read with ``pread`` and decoded in parallel outside its
    lock. ``cache_bytes`` bounds the decoded chunks kept for the next batch (0 disables);
    ``num_threads`` gives this reader a pool of its own. Pickles by path.

    ``src`` may also be a list or a glob pattern of files (``"train_*.h5"``, sorted): they
    open as one :class:`~packread.ShardedReader` of their concatenated samples, which also
    takes ``shard_index=`` and ``max_open_shards=``.

    ``src`` may also be the bytes of a whole file (any bytes-like object; copied once), and
    ``in_memory=True`` reads the file at ``src`` whole into memory: either way libhdf5 and
    every batch then read from memory (like PyTables' ``driver="H5FD_CORE"``).

    Variable-length datasets (PyTables ``VLArray``, h5py ``vlen_dtype`` and string data) give
    a list per batch (arrays, or ``bytes``/``str`` for strings), or with ``ragged="flat"`` a
    pair ``(values, offsets)`` of ``len(idx) + 1`` offsets, ready for collation.

    >>> h = HDF5Reader("train.h5")
    >>> batch = h.batch([3, 17, 42])  # {"images": (3, ...), "labels": (3,)}
    >>> batch["images"].shape, batch["labels"].tolist()
    ((3, 3, 32, 32), [3, 17, 42])
    """

    def __new__(cls, src: Any = None, datasets: Any = None, **kwargs: Any) -> Any:
        """A list or glob of files opens as one :class:`~packread.ShardedReader`."""
        if is_shard_source(src):
            return sharded("hdf5", src, {"datasets": datasets, **kwargs})
        return super().__new__(cls)

    def __init__(
        self,
        src: str | os.PathLike[str] | bytes | bytearray | memoryview | np.ndarray,
        datasets: str | Sequence[str] | None = None,
        *,
        num_threads: int | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        in_memory: bool = False,
        ragged: Ragged = "list",
        storage_options: Mapping[str, Any] | None = None,
        index_cache: bool | str | os.PathLike[str] = True,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_dir_bytes: int = DEFAULT_CACHE_DIR_BYTES,
    ) -> None:
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, (int, np.integer)):
            raise PackreadTypeError(f"cache_bytes must be an int, not {type(cache_bytes).__name__}")
        if cache_bytes < 0:
            raise InvalidArgumentError(f"cache_bytes must be >= 0, not {cache_bytes}")
        num_threads = check_num_threads(num_threads)
        if ragged not in ("list", "flat"):
            raise InvalidArgumentError(f"ragged must be 'list' or 'flat', not {ragged!r}")
        if is_url(src):
            if in_memory:
                raise InvalidArgumentError("in_memory=True reads local files; not a URL")
            # libhdf5 reads the superblock and root group from the object's head.
            src = open_remote(
                src,
                storage_options,
                index_cache=index_cache,
                cache_dir=cache_dir,
                cache_dir_bytes=cache_dir_bytes,
            )
        if is_remote(src):
            source: Any = src
        elif isinstance(src, (str, os.PathLike)):
            source = os.fspath(src)
        else:
            source = bytes(memoryview(src).cast("B")) if not isinstance(src, bytes) else src
        self._args = (source, datasets)
        self._options = {
            "num_threads": num_threads,
            "cache_bytes": int(cache_bytes),
            "in_memory": bool(in_memory),
            "ragged": ragged,
        }
        self._single = isinstance(datasets, str)
        self._ragged: str = ragged
        # An empty list, a name given twice: checked (once) by the extension.
        names = [datasets] if isinstance(datasets, str) else datasets
        if names is not None:
            names = list(names)
        self._inner = _packread.HDF5File(
            source, names, num_threads, int(cache_bytes), bool(in_memory)
        )
        self._datasets = {
            k.lstrip("/"): HDF5Dataset(
                self._inner, k.lstrip("/"), p, self._inner.info(k), (self._args, self._options)
            )
            for p, k in enumerate(self._inner.names())
        }

    @property
    def path(self) -> str:
        """The file's path (or a name for one read from bytes)."""
        return self._inner.path

    def keys(self) -> list[str]:
        """The datasets this reader reads, in file order.

        >>> HDF5Reader("train.h5").keys()
        ['images', 'labels']
        """
        return list(self._datasets)

    def __len__(self) -> int:
        """The number of samples (the datasets' common first dimension)."""
        return len(self._inner)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lstrip("/") in self._datasets

    def __getitem__(self, name: str) -> HDF5Dataset:
        """One dataset's metadata and reads; a ``MissingKeyError`` (a ``KeyError``) if this
        reader does not read it."""
        key = name.lstrip("/") if isinstance(name, str) else name
        try:
            return self._datasets[key]  # type: ignore[index]
        except (KeyError, TypeError):
            raise MissingKeyError(
                f"{self.path}: no dataset {name!r} in this reader (datasets: {self.keys()})"
            ) from None

    @property
    def shape(self) -> tuple[int, ...] | dict[str, tuple[int, ...]]:
        """Shape of one sample: a tuple for a reader of one dataset, else a dict by dataset.
        (``reader[name].shape`` is the whole dataset's shape, as in h5py.)"""
        shapes = {k: ds.shape[1:] for k, ds in self._datasets.items()}
        return next(iter(shapes.values())) if self._single else shapes

    @property
    def dtype(self) -> np.dtype[Any] | dict[str, np.dtype[Any]]:
        """dtype of the samples: one for a reader of one dataset, else a dict by dataset."""
        dtypes = {k: ds.dtype for k, ds in self._datasets.items()}
        return next(iter(dtypes.values())) if self._single else dtypes

    @property
    def samples_per_chunk(self) -> int:
        """Samples stored (and decoded) together: the first chunk dimension of the dataset
        whose chunks hold the most bytes; 1 when no chunk holds several samples."""
        best, rows = 0, 1
        for ds in self._datasets.values():
            if ds.chunks:
                nbytes = int(np.prod(ds.chunks)) * ds.dtype.itemsize
                if nbytes > best:
                    best, rows = nbytes, ds.chunks[0]
        return max(rows, 1)

    @property
    def cache_bytes(self) -> int:
        """The budget for decoded chunks kept between batches."""
        return self._options["cache_bytes"]

    @property
    def skipped(self) -> dict[str, str]:
        """Datasets left out of ``datasets=None``, with the reason."""
        return {k.lstrip("/"): v for k, v in self._inner.skipped().items()}

    def batch(self, idx: Indices, *, out: Out = None) -> Any:
        """Samples ``idx`` (order, duplicates and negatives kept) of every dataset, stacked:
        an array for a reader of one dataset, else a dict; into ``out`` when given.

        >>> HDF5Reader("train.h5", "labels").batch([5, -1, 5]).tolist()
        [5, 63, 5]
        """
        return self.batch_async(idx, out=out).result()

    def batch_async(self, idx: Indices, *, out: Out = None) -> PendingBatch[Any]:
        """Like :meth:`batch`, but returns at once: arguments are checked now (the same errors
        as ``batch``), the reads run on packread's pool; ``.result()`` gives the batch.

        >>> pending = HDF5Reader("train.h5").batch_async(range(8))
        >>> pending.result()["images"].shape
        (8, 3, 32, 32)
        """
        self._check_open()
        rows = as_indices(idx, len(self), self.path)
        names = list(self._datasets)
        if self._single:
            outs = None if out is None else {names[0]: out}
            return _start(self._inner, self._datasets, names, rows, outs, self._ragged, names[0])
        if out is not None and not isinstance(out, dict):
            raise PackreadTypeError(
                "out= must be a dict of arrays for a reader of several datasets"
            )
        return _start(self._inner, self._datasets, names, rows, out, self._ragged)

    def _describe(self) -> str:
        return self.path

    def close(self) -> None:
        """Releases the file (once no dataset of it is in use elsewhere: each holds it too);
        later calls raise ``ReaderClosedError``. A ``with`` block closes the reader at its end.

        >>> with HDF5Reader("train.h5") as reader:
        ...     batch = reader.batch([0, 1])
        >>> reader.closed
        True
        >>> reader.close()  # closing again does nothing
        """
        if not self.closed:
            super().close()
            for ds in self._datasets.values():
                ds._inner = self._inner

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_hdf5, (self._args, self._options))

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        return f"HDF5Reader({self.path!r}, {len(self)} samples, datasets={self.keys()})"


def _reopen_hdf5(args: tuple[Any, Any], options: dict[str, Any]) -> HDF5Reader:
    return HDF5Reader(*args, **options)


def _reopen_dataset(args: tuple[Any, Any], options: dict[str, Any], name: str) -> HDF5Dataset:
    return HDF5Reader(*args, **options)[name]
