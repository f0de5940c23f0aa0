"""NPY: whole files or buffers (:func:`load_npy`) and files of one sample each
(:class:`NpyReader`)."""

from __future__ import annotations

import math
import os
from typing import Any, Union

import numpy as np

from . import _packread
from ._common import byte_view, check_num_threads
from ._deprecated import SampleKeys, fold, source_names
from ._options import DEFAULT_MAX_HEADER_SIZE, Limits, Remote
from ._reader import ArrayReader
from ._registry import Format, register
from ._remote import is_url
from ._sources import FILE, FILES, FOLDER, URL, Source, classify, folder_files
from .errors import InvalidArgumentError

BytesLike = Union[bytes, bytearray, memoryview, np.ndarray]

#: The NPY magic string.
NPY_MAGIC = b"\x93NUMPY"


def is_npy(head: Any) -> bool:
    """Whether a file's first bytes are an NPY file's."""
    return bool(head(0).startswith(NPY_MAGIC))


@source_names("load_npy", "src")
def load_npy(
    source: str | os.PathLike[str] | BytesLike | Any,
    *,
    limits: Limits | None = None,
    **deprecated: Any,
) -> np.ndarray:
    """Load one ``.npy`` array, equal to ``numpy.load(source)``.

    ``source`` is a path or a bytes-like object. From bytes, the result
    is a zero-copy, read-only view of ``source`` when the data is aligned for its dtype, else
    a copy. Object arrays are refused (they would need unpickling).

    >>> load_npy("sample.npy").shape
    (4, 8)
    >>> with open("sample.npy", "rb") as f:
    ...     view = load_npy(f.read())  # zero-copy when aligned
    >>> view.flags.writeable
    False
    """
    kwargs = fold("load_npy", load_npy, locals(), deprecated)
    options = Limits._of(kwargs["limits"])._binding()
    if not isinstance(source, (bytes, bytearray, memoryview, np.ndarray)):
        if isinstance(source, (str, os.PathLike)):
            source = os.fspath(source)
        return _packread.load_npy_file(source, options)
    dtype, fortran, shape, offset, aligned = _packread.parse_npy_buffer(
        byte_view(source, "NPY"), options
    )
    count = math.prod(shape)
    if count == 0 or dtype.itemsize == 0:
        # No bytes to fill; np.ndarray keeps a zero-size dtype (S0) that np.zeros makes S1.
        empty = np.ndarray(shape, dtype=dtype, order="F" if fortran else "C")
        empty.flags.writeable = False  # read-only like every other result from bytes
        return empty
    flat = np.frombuffer(source, dtype=dtype, count=count, offset=offset)
    if not aligned:
        flat = flat.copy()
    flat.flags.writeable = False
    if fortran:
        return flat.reshape(shape[::-1]).T
    return flat.reshape(shape)


def npy_files(src: Source) -> list[str]:
    """The files of a folder, glob or list of ``.npy`` files (one sample each)."""
    if src.kind == FOLDER:
        return folder_files(src.value, ".npy")
    if src.kind == FILES:
        return list(src.value)
    if src.kind in (FILE, URL):
        return [src.value]
    raise InvalidArgumentError(
        f"{src.name}: NpyReader reads .npy files (a folder, glob or list of them), not a {src.kind}"
    )


class NpyReader(SampleKeys, ArrayReader):
    """Many ``.npy`` files of the same shape and dtype, one sample each, read as batches.

    ``source`` is a list of files, a folder (its ``*.npy`` files, sorted) or a glob pattern
    (sorted), of local paths or URLs. Headers are read and checked once, here (objects: each
    by one request for its head, many in flight). ``num_threads`` gives the reader a pool of
    its own (default: packread's shared pool). Pickles by source.

    >>> r = NpyReader("data/train/")
    >>> r.batch([3, 17, 42]).shape == (3, *r.shape)
    True
    """

    format = "npy"

    @source_names("NpyReader", "paths")
    def __init__(
        self,
        source: Any,
        *,
        num_threads: int | None = None,
        remote: Remote | dict[str, Any] | None = None,
        limits: Limits | None = None,
        **deprecated: Any,
    ) -> None:
        kwargs = fold("NpyReader", NpyReader.__init__, locals(), deprecated)
        self._setup(source, None, **kwargs)

    def _setup(
        self,
        source: Any,
        state: Any,
        num_threads: int | None = None,
        remote: Any = None,
        limits: Any = None,
    ) -> None:
        remote, limits = Remote._of(remote), Limits._of(limits)
        self._kwargs = {
            "num_threads": check_num_threads(num_threads),
            "remote": remote,
            "limits": limits,
        }
        options = {
            "num_threads": self._kwargs["num_threads"],
            **limits._binding(),
            **remote._binding(),
        }
        src = classify(source, remote)
        self._paths = npy_files(src)
        self._source = self._paths
        if not any(is_url(p) for p in self._paths):
            self._bind(_packread.open_npy(self._paths, options))
            return
        # Objects: opened together, each by one request for its head (header and, for a small
        # sample, its data); or, unpickled, with the sizes and ETags they were opened with.
        reader, self._stamps = _packread.open_npy_remote(self._paths, state, options)
        self._bind(reader)

    def _state(self) -> Any:
        return getattr(self, "_stamps", None)

    def names(self) -> list[str]:
        """The samples' names: their files' paths, in sample order.

        >>> NpyReader("data/train/").names()[0]
        'data/train/000.npy'
        """
        return self.paths

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        return f"NpyReader({len(self)} files, shape={self.shape}, dtype={self.dtype})"


def _claims(src: Source, options: dict[str, Any]) -> bool:
    """A folder holding ``.npy`` files (and no ``.npz``)."""
    if src.kind != FOLDER:
        return False
    names = os.listdir(src.value)
    return any(n.endswith(".npy") for n in names) and not any(n.endswith(".npz") for n in names)


register(
    Format(
        name="npy", reader=NpyReader, suffixes=(".npy",), magic=is_npy, claims=_claims, shards=False
    )
)

__all__ = ["DEFAULT_MAX_HEADER_SIZE", "NpyReader", "load_npy"]
