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
from ._registry import Format, head_of, register
from ._remote import is_url, open_remote
from ._sources import FILES, FOLDER, MAPPING, URL, Source, classify, folder_files, in_place
from .errors import InvalidArgumentError

BytesLike = Union[bytes, bytearray, memoryview, np.ndarray]

#: What the array of a reader of one array (rows of one ``.npy``, or files) is named.
ARRAY_NAME = "data"

#: The NPY magic string.
NPY_MAGIC = b"\x93NUMPY"


#: The extension's options for the default limits (read, never changed, by the extension).
_DEFAULT_OPTIONS = Limits()._binding()


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
    if deprecated:
        limits = fold("load_npy", load_npy, locals(), deprecated)["limits"]
    # A load is a few microseconds: the default limits' options are made once.
    options = _DEFAULT_OPTIONS if limits is None else Limits._of(limits)._binding()
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
    raise InvalidArgumentError(
        f"{src.name}: NpyReader reads .npy files (a folder, glob or list of them), not a {src.kind}"
    )


def row_source(src: Source, remote: Remote) -> Any:
    """What the extension reads one array's rows from: a path, an opened object (a URL opened
    here), bytes as they are or as a ``uint8`` view, a binary file object."""
    if src.kind == URL:
        return open_remote(src.value, remote)
    if src.kind == FOLDER:
        raise InvalidArgumentError(f"{src.name}: a folder, not one .npy file")
    if src.kind in (FILES, MAPPING):
        raise InvalidArgumentError(f"{src.name}: a mapping names one .npy file by array")
    return in_place(src)


class NpyReader(SampleKeys, ArrayReader):
    """``.npy`` arrays read as batches, in one of two layouts, told apart by the source:

    * **Rows of one array** (``numpy.load(path, mmap_mode="r")[idx]``): one ``.npy`` (a path,
      a URL, bytes or a binary file object) whose first axis is the samples; or a mapping
      ``{"x": "X.npy", "y": "y.npy"}`` of arrays of equal length, read together (a batch is
      then a dict). Sample ``i`` is row ``i``.
    * **One file a sample**: a folder (its ``*.npy`` files, sorted), a glob (sorted) or a list
      of same-shape files, local or URLs.

    A single file is always rows; several files are always one sample each (a list of one
    file is a dataset of one sample). Headers are read and checked once, here. The rows of
    a batch are read in parallel straight into the output (rows next to each other in one
    read). ``num_threads`` gives the reader a pool of its own (default: packread's shared
    pool). Pickles by source.

    >>> NpyReader("X.npy").batch([3, 17, 42]).shape  # rows of one array
    (3, 32)
    >>> r = NpyReader("data/train/")  # one sample per file
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
        self._source = source
        src = classify(source, remote)
        #: Whether samples are rows of arrays (else one file each).
        self.rows = src.kind not in (FOLDER, FILES)
        if self.rows:
            named = (
                {str(k): classify(v, remote) for k, v in src.value.items()}
                if src.kind == MAPPING
                else {ARRAY_NAME: src}
            )
            self._paths = [s.name for s in named.values()]
            pairs = [(k, row_source(s, remote)) for k, s in named.items()]
            self._bind(_packread.open_npy_rows(pairs, options))
            if src.kind == MAPPING:
                self._choose(None)
            return
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

    def names(self) -> list[str] | None:
        """The samples' names: their files' paths, in sample order; ``None`` for rows of an
        array (rows have no names).

        >>> NpyReader("data/train/").names()[0]
        'data/train/000.npy'
        """
        return None if self.rows else self.paths

    def _describe(self) -> str:
        if getattr(self, "rows", False) and len(self._paths) > 1:
            return f"{self._paths[0]} (and {len(self._paths) - 1} more arrays)"
        return super()._describe()

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        if self.rows:
            return f"NpyReader({self._describe()!r}, {len(self)} rows, keys={self.keys()})"
        return f"NpyReader({len(self)} files, shape={self.shape}, dtype={self.dtype})"


def _claims(src: Source, options: dict[str, Any]) -> bool:
    """A folder holding ``.npy`` files (and no ``.npz``), or a mapping of ``.npy`` sources
    (rows of arrays read together)."""
    if src.kind == MAPPING:
        return all(_is_npy_source(classify(v)) for v in src.value.values())
    if src.kind != FOLDER:
        return False
    names = os.listdir(src.value)
    return any(n.endswith(".npy") for n in names) and not any(n.endswith(".npz") for n in names)


def _is_npy_source(src: Source) -> bool:
    """Whether one source is an ``.npy`` file: by its name's suffix, else its first bytes."""
    if src.kind in (FOLDER, FILES, MAPPING):
        return False
    if src.name.lower().endswith(".npy"):
        return True
    head = head_of(src)
    return head is not None and is_npy(head)


register(
    Format(
        name="npy", reader=NpyReader, suffixes=(".npy",), magic=is_npy, claims=_claims, shards=False
    )
)

__all__ = ["DEFAULT_MAX_HEADER_SIZE", "NpyReader", "load_npy"]
