"""What every reader shares: argument handling (paths, indices, options, output arrays), the
handle of a batch read in the background, and the protocol `packread.torch` reads through."""

from __future__ import annotations

import glob
import os
import stat
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar, Union, runtime_checkable

import numpy as np

from . import _packread
from .errors import (
    IndexOutOfRangeError,
    InvalidArgumentError,
    PackreadFileNotFoundError,
    PackreadIsADirectoryError,
    PackreadOSError,
    PackreadTypeError,
    ReaderClosedError,
)

PathLike = Union[str, "os.PathLike[str]"]
Paths = Union[PathLike, Iterable[PathLike]]
Indices = Union[Sequence[int], "np.ndarray", range, slice]

T = TypeVar("T")


def open_regular(path: PathLike) -> Any:
    """``path`` opened for binary reading if it is a regular file. The open never blocks: a
    FIFO or a device opened plainly would wait for a writer forever, beyond Ctrl-C's reach, so
    it is opened non-blocking and refused (``PackreadOSError``) when ``fstat`` says it is not a
    regular file (a folder: ``PackreadIsADirectoryError``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise PackreadIsADirectoryError(f"{os.fsdecode(path)}: a folder, not a file")
        if not stat.S_ISREG(mode):
            kind = "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"
            raise PackreadOSError(f"{os.fsdecode(path)}: not a regular file (a {kind})")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def shown_name(name: str) -> str:
    """``name`` as a message can carry it: a path that is not UTF-8 (a str holding lone
    surrogates, as ``os.fsdecode`` gives such bytes) with those escaped, ``\\udcff``."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def warn_skipped(
    where: str, errors: dict[int, str], stacklevel: int, what: str = "image(s)"
) -> None:
    """The one warning a reader gives when samples (``what``: images, clips) it read with
    ``on_error="skip"`` did not decode and were replaced."""
    k, why = min(errors.items())
    warnings.warn(
        f"{where}: {len(errors)} {what} did not decode and were replaced "
        f"(reader.errors has them all); first: sample {k}: {why}",
        RuntimeWarning,
        stacklevel=stacklevel + 1,
    )


class PendingBatch(Generic[T]):
    """A batch being read on packread's thread pool, returned by every reader's
    ``batch_async``.

    The reads run with the GIL released and no Python thread involved, so the caller can go on
    (with a training step, say) meanwhile. ``result()`` waits and returns the array (or dict of
    arrays) or raises the read's exception. Dropping a handle before the read finishes is safe:
    the arrays being written are released only when the read ends. Do not use an ``out=`` array
    passed to ``batch_async`` until ``result()`` has returned.

    >>> pending = packread.NpyReader("data/train/").batch_async([0, 1])
    >>> pending.result().shape
    (2, 4, 8)
    """

    __slots__ = ("_finish", "_reads", "_value")

    def __init__(
        self,
        read: _packread.PendingRead | Sequence[_packread.PendingRead],
        value: T,
        finish: Callable[[], T] | None = None,
    ) -> None:
        self._reads = [read] if isinstance(read, _packread.PendingRead) else list(read)
        self._value = value
        # Run once, after every read has succeeded: gives the value (reads that allocate their
        # own results are only turned into Python objects then).
        self._finish = finish

    def done(self) -> bool:
        """Whether the read has finished (successfully or not).

        >>> pending = packread.NpyReader("data/train/").batch_async([0])
        >>> _ = pending.result()
        >>> pending.done()
        True
        """
        return all(r.done() for r in self._reads)

    def result(self, timeout: float | None = None) -> T:
        """The batch, once read; raises the read's exception, or ``TimeoutError`` if it is
        still being read after ``timeout`` seconds (``None``: wait as long as it takes).

        >>> packread.NpyReader("data/train/").batch_async([3]).result(timeout=60).shape
        (1, 4, 8)
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for r in self._reads:
            r.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        finish, self._finish = self._finish, None
        if finish is not None:
            self._value = finish()
        return self._value

    def __repr__(self) -> str:
        return f"<PendingBatch {'done' if self.done() else 'reading'}>"


@runtime_checkable
class BatchReader(Protocol):
    """What `packread.torch` needs of a reader; every packread reader provides it, and so can
    any other class.

    ``shape`` and ``dtype`` describe one sample: a tuple and a ``numpy.dtype`` for readers whose
    ``batch`` returns one array, dicts keyed like the returned dict for the others. Readers may
    also offer ``batch_async(idx, out=None)`` returning a :class:`PendingBatch` (used for
    prefetching) and ``samples_per_chunk`` (samples decoded together; used by
    ``shuffle_mode="chunk"``).

    >>> isinstance(packread.NpyReader("data/train/"), BatchReader)
    True
    """

    def __len__(self) -> int: ...

    @property
    def shape(self) -> tuple[int, ...] | dict[str, tuple[int, ...]]:
        """Shape of one sample (a dict by array for readers of several arrays)."""
        ...

    @property
    def dtype(self) -> np.dtype[Any] | dict[str, np.dtype[Any]]:
        """dtype of the samples (a dict by array for readers of several arrays)."""
        ...

    def batch(self, idx: Indices, *, out: Any = None) -> Any:
        """Samples ``idx`` stacked along a new first axis (into ``out`` when given).

        >>> packread.NpyReader("data/train/").batch([0, 2]).shape
        (2, 4, 8)
        """
        ...


class _Closed:
    """Stands in for a closed reader's extension object: any use raises ReaderClosedError."""

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        self._what = what

    def _raise(self) -> Any:
        raise ReaderClosedError(f"{self._what} is closed; open a new reader")

    def __getattr__(self, name: str) -> Any:
        return self._raise()

    def __len__(self) -> int:
        return self._raise()


class Closable:
    """``close()`` and ``with`` for readers: closing drops the reader's open files and
    indexes (reads already started finish first); every later call raises
    :class:`~packread.errors.ReaderClosedError`. A closed reader still pickles (by path)."""

    #: The extension objects a reader holds (a format's object, its batch ``Reader``).
    _inner: Any
    _reader: Any

    def close(self) -> None:
        """Releases the reader's files; later calls raise ``ReaderClosedError``."""
        if self.closed:
            return
        closed = _Closed(f"{type(self).__name__} of {self._describe()}")
        for name in ("_inner", "_reader"):
            if name in self.__dict__:
                setattr(self, name, closed)

    def _describe(self) -> str:
        return "its files"

    def _handle(self) -> Any:
        """The first extension object this reader holds (``_reader``, else ``_inner``)."""
        for name in ("_reader", "_inner"):
            handle = self.__dict__.get(name)
            if handle is not None:
                return handle
        return None

    @property
    def closed(self) -> bool:
        return isinstance(self._handle(), _Closed)

    def _check_open(self) -> None:
        handle = self._handle()
        if isinstance(handle, _Closed):
            handle._raise()

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_num_threads(num_threads: int | None) -> int | None:
    """``num_threads`` of a reader: ``None`` (the shared pool) or a positive int."""
    if num_threads is None:
        return None
    if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)):
        raise PackreadTypeError(
            f"num_threads must be an int or None, not {type(num_threads).__name__}"
        )
    if num_threads < 1:
        raise InvalidArgumentError(f"num_threads must be >= 1, not {num_threads}")
    return int(num_threads)


def expand_paths(paths: Paths, suffix: str) -> list[str]:
    """A list of files from a list, a directory (its ``*suffix`` files) or a glob pattern.

    Directories and patterns are sorted so that sample order does not depend on the file system.
    """
    if isinstance(paths, (str, os.PathLike)):
        path = os.fspath(paths)
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith(suffix))
            files = [os.path.join(path, n) for n in names]
            if not files:
                raise PackreadFileNotFoundError(f"{path}: no {suffix} files in this directory")
            return files
        if glob.has_magic(path):
            files = sorted(glob.glob(path))
            if not files:
                raise PackreadFileNotFoundError(f"{path}: the pattern matches no files")
            return files
        return [path]
    return [os.fspath(p) for p in paths]


def as_indices(idx: Indices, length: int, where: str) -> np.ndarray:
    """Indices as a 1-d int64 array; order, duplicates and negatives are kept (the core checks
    bounds, raising ``IndexError``). ``where`` names the reader's file in errors."""
    if isinstance(idx, slice):
        return np.arange(*idx.indices(length), dtype=np.int64)
    if isinstance(idx, range):
        return np.arange(idx.start, idx.stop, idx.step, dtype=np.int64)
    arr = np.asarray(idx)
    if arr.ndim == 0:
        raise PackreadTypeError(
            "idx must be a sequence of ints, an integer array, a range or a slice, "
            f"not {type(idx).__name__}"
        )
    if arr.ndim != 1:
        raise InvalidArgumentError(f"idx must be one-dimensional, not of shape {arr.shape}")
    if arr.size == 0:
        return np.empty(0, dtype=np.int64)
    if arr.dtype.kind == "i":
        return np.ascontiguousarray(arr, dtype=np.int64)
    if arr.dtype.kind in "uO" and all(isinstance(i, (int, np.integer)) for i in arr.tolist()):
        # Integers beyond int64 (uint64, Python ints) cannot index anything.
        big = next((int(i) for i in arr.tolist() if not _INT64_MIN <= int(i) <= _INT64_MAX), None)
        if big is not None:
            raise IndexOutOfRangeError(f"{where}: index {big} is out of range for {length} samples")
        return np.asarray(arr.tolist(), dtype=np.int64)
    raise PackreadTypeError(f"idx must hold integers, not {arr.dtype}")


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def byte_view(src: Any, what: str) -> np.ndarray:
    """A zero-copy uint8 view of a bytes-like object, as the extension takes buffers (it is
    built for the stable ABI of Python 3.10, which has no buffer protocol). The view holds the
    buffer exported, so the bytes cannot move or shrink while it lives."""
    try:
        return np.frombuffer(src, dtype=np.uint8)
    except (BufferError, ValueError):
        raise InvalidArgumentError(f"{what} buffer must be C-contiguous") from None
    except TypeError:
        raise PackreadTypeError(
            f"expected a path or a bytes-like object, not {type(src).__name__}"
        ) from None


def new_output(rows: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised batch array; every byte of it is written by the read. ``np.ndarray``,
    not ``np.empty``: the latter turns a zero-size dtype (``S0``, ``U0``) into ``S1``/``U1``."""
    return np.ndarray((rows, *shape), dtype=dtype)
