"""NPY: whole files or buffers (:func:`load_npy`) and folders of samples (:class:`NpyReader`)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any, Union

import numpy as np

from . import _packread
from ._common import Paths, byte_view, check_num_threads, expand_paths
from ._reader import ArrayReader, deprecated_sample_keys
from ._remote import (
    DEFAULT_CACHE_DIR_BYTES,
    cache_dir_of,
    data_cache_of,
    option_pairs,
    remote_paths,
)

#: numpy's default limit on NPY header size (``max_header_size``).
DEFAULT_MAX_HEADER_SIZE: int = _packread.DEFAULT_MAX_HEADER_SIZE

BytesLike = Union[bytes, bytearray, memoryview, np.ndarray]


def load_npy(
    src: str | os.PathLike[str] | BytesLike, *, max_header_size: int = DEFAULT_MAX_HEADER_SIZE
) -> np.ndarray:
    """Load one ``.npy`` array, equal to ``numpy.load(src)``.

    ``src`` is a path or a bytes-like object. From bytes, the result is a zero-copy, read-only
    view of ``src`` when the data is aligned for its dtype, else a copy. Object arrays are
    refused (they would need unpickling).

    >>> load_npy("sample.npy").shape
    (4, 8)
    >>> with open("sample.npy", "rb") as f:
    ...     view = load_npy(f.read())  # zero-copy when aligned
    >>> view.flags.writeable
    False
    """
    if isinstance(src, (str, os.PathLike)):
        return _packread.load_npy_file(os.fspath(src), max_header_size)
    dtype, fortran, shape, offset, aligned = _packread.parse_npy_buffer(
        byte_view(src, "NPY"), max_header_size
    )
    count = math.prod(shape)
    if count == 0 or dtype.itemsize == 0:
        # No bytes to fill; np.ndarray keeps a zero-size dtype (S0) that np.zeros makes S1.
        empty = np.ndarray(shape, dtype=dtype, order="F" if fortran else "C")
        empty.flags.writeable = False  # read-only like every other result from bytes
        return empty
    flat = np.frombuffer(src, dtype=dtype, count=count, offset=offset)
    if not aligned:
        flat = flat.copy()
    flat.flags.writeable = False
    if fortran:
        return flat.reshape(shape[::-1]).T
    return flat.reshape(shape)


class NpyReader(ArrayReader):
    """Many ``.npy`` files of the same shape and dtype, one sample each, read as batches.

    ``paths`` is a list of files, a directory (its ``*.npy`` files, sorted) or a glob pattern
    (sorted). Headers are read and checked once, here. ``num_threads`` gives the reader a pool
    of its own (default: packread's shared pool). Pickles by path.

    >>> r = NpyReader("data/train/")
    >>> r.batch([3, 17, 42]).shape == (3, *r.shape)
    True
    """

    def __init__(
        self,
        paths: Paths,
        *,
        max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
        num_threads: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        index_cache: bool | str | os.PathLike[str] = True,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_dir_bytes: int = DEFAULT_CACHE_DIR_BYTES,
        _stamps: list[tuple[int, str | None, int | None]] | None = None,
    ) -> None:
        self._options = {
            "max_header_size": max_header_size,
            "num_threads": check_num_threads(num_threads),
            "storage_options": storage_options,
            "index_cache": index_cache,
            "cache_dir": cache_dir,
            "cache_dir_bytes": cache_dir_bytes,
        }
        urls = remote_paths(paths, storage_options)
        if urls is None:
            self._paths = expand_paths(paths, ".npy")
            self._stamps = None
            self._bind(
                _packread.open_npy(self._paths, max_header_size, self._options["num_threads"])
            )
            return
        # Objects: opened together, each by one request for its head (header and, for a small
        # sample, its data); or, unpickled, with the sizes and ETags they were opened with.
        self._paths = urls
        reader, self._stamps = _packread.open_npy_remote(
            urls,
            option_pairs(storage_options),
            cache_dir_of(index_cache),
            _stamps,
            max_header_size,
            self._options["num_threads"],
            data_cache_of(cache_dir, cache_dir_bytes),
        )
        self._bind(reader)

    @property
    def paths(self) -> list[str]:
        """The files, in sample order."""
        return list(self._paths)

    def names(self) -> list[str]:
        """The samples' names: their files' paths, in sample order.

        >>> NpyReader("data/train/").names()[0]
        'data/train/000.npy'
        """
        return self.paths

    def keys(self) -> list[str]:
        """Deprecated: the samples' file paths (``names()``); will return the array names.

        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", DeprecationWarning)
        ...     NpyReader("data/train/").keys()[0]
        'data/train/000.npy'
        """
        return deprecated_sample_keys(self, self.paths)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.batch([i])[0]

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by path, so spawn/forkserver workers re-open the files themselves.
        options = (
            self._options if self._stamps is None else {**self._options, "_stamps": self._stamps}
        )
        return (_reopen_npy, (self.paths, options))

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        return f"NpyReader({len(self)} files, shape={self.shape}, dtype={self.dtype})"


def _reopen_npy(paths: list[str], options: dict[str, Any]) -> NpyReader:
    return NpyReader(paths, **options)
