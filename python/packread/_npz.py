"""NPZ archives: whole ones loaded (:func:`load_npz`), and many read as samples
(:class:`NpzReader`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from . import _packread
from ._common import PendingBatch, byte_view, check_num_threads
from ._deprecated import fold, source_names, warn
from ._npy import BytesLike
from ._options import Limits, Remote
from ._reader import ArrayReader, Out
from ._registry import Format, register
from ._remote import is_url
from ._sources import FILES, FOLDER, Source, classify, folder_files
from ._zip import DEFAULT_MAX_MEMBER_BYTES
from .errors import InvalidArgumentError, MissingKeyError, PackreadTypeError, UnsupportedError


@source_names("load_npz", "src")
def load_npz(
    source: str | os.PathLike[str] | BytesLike | Any,
    *,
    verify_crc: bool = True,
    limits: Limits | None = None,
    **deprecated: Any,
) -> dict[str, Any]:
    """Load every array of an NPZ archive: equal to ``dict(numpy.load(source))``.

    ``source`` is a path or a bytes-like object. Members are read and
    inflated in parallel with the GIL released. From bytes, stored (``np.savez``) arrays come
    back as zero-copy, read-only views when aligned. Object arrays are refused; members that
    are not NPY come back as ``bytes``, as numpy returns them.

    >>> sorted(load_npz("sample.npz"))
    ['image', 'mask']
    """
    if deprecated:
        kwargs = fold("load_npz", load_npz, locals(), deprecated)
        verify_crc, limits = kwargs["verify_crc"], kwargs["limits"]
    options = {
        "verify_crc": bool(verify_crc),
        **Limits._of(limits)._binding(DEFAULT_MAX_MEMBER_BYTES),
    }
    if isinstance(source, (bytes, bytearray, memoryview)) or type(source).__name__ == "ndarray":
        return _packread.load_npz_buffer(byte_view(source, "NPZ"), options)
    if isinstance(source, (str, os.PathLike)):
        source = os.fspath(source)
    return _packread.load_npz_file(source, options)


def npz_files(src: Source) -> list[str]:
    """The files of a folder, glob or list of ``.npz`` files (one sample each)."""
    paths = folder_files(src.value, ".npz") if src.kind == FOLDER else list(src.value)
    if any(is_url(p) for p in paths):
        raise UnsupportedError(
            f"{src.name}: NpzReader reads many .npz files (one sample each) from local paths "
            "only; one .npz object (its rows) opens from a URL"
        )
    return paths


class NpzReader(ArrayReader):
    """NPZ archives read as batches of their keys, in one of two layouts, told apart by the
    source (as for :class:`NpyReader`):

    * **Rows of one archive** (``numpy.savez(path, x=X, y=y)``): one ``.npz`` (a path, a URL,
      bytes or a binary file object) whose arrays all have the same first axis, the samples;
      sample ``i`` holds row ``i`` of each. Its members must be stored (``numpy.savez``, not
      ``savez_compressed``: a compressed member's rows cannot be reached without inflating
      all of it). A row is not checked against its member's CRC-32, which covers the whole
      member.
    * **One file a sample**: a list of files, a folder (its ``*.npz`` files, sorted) or a
      glob pattern (sorted). Keys, shapes and dtypes come from the first file; every other
      file is checked against them when first read (a mismatch is a ``ValueError`` naming
      file and key).

    ``arrays`` selects the keys a batch holds (default: all of the first file's).

    >>> n = NpzReader("data/npz/")
    >>> batch = n.batch([0, 4])  # {"image": (2, ...), "mask": (2, ...)}
    >>> batch["image"].shape, batch["mask"].shape
    ((2, 3, 32, 32), (2, 32, 32))
    """

    format = "npz"
    _single = False

    @source_names("NpzReader", "paths")
    def __init__(
        self,
        source: Any,
        *,
        arrays: str | Sequence[str] | None = None,
        verify_crc: bool = True,
        num_threads: int | None = None,
        remote: Remote | dict[str, Any] | None = None,
        limits: Limits | None = None,
        **deprecated: Any,
    ) -> None:
        kwargs = fold("NpzReader", NpzReader.__init__, locals(), deprecated)
        self._setup(source, None, **kwargs)

    def _setup(
        self,
        source: Any,
        state: dict[str, Any] | None,
        arrays: Any = None,
        verify_crc: bool = True,
        num_threads: int | None = None,
        remote: Any = None,
        limits: Any = None,
    ) -> None:
        limits, remote = Limits._of(limits), Remote._of(remote)
        if arrays is not None and not isinstance(arrays, str):
            arrays = list(arrays)
            if any(not isinstance(k, str) for k in arrays):
                raise PackreadTypeError("arrays must be a key or a sequence of key names")
        self._kwargs = {
            "arrays": arrays,
            "verify_crc": bool(verify_crc),
            "num_threads": check_num_threads(num_threads),
            "remote": remote,
            "limits": limits,
        }
        options = {
            "verify_crc": bool(verify_crc),
            "num_threads": self._kwargs["num_threads"],
            **limits._binding(DEFAULT_MAX_MEMBER_BYTES),
        }
        src = classify(source, remote)
        self._source = source
        #: Whether samples are rows of one archive's arrays (else one file each).
        self.rows = src.kind not in (FOLDER, FILES)
        if self.rows:
            target = self._target(src, remote, "one .npz archive")
            keys = [arrays] if isinstance(arrays, str) else arrays
            self._paths = [src.name]
            self._bind(_packread.open_npz_rows(target, keys, options))
        else:
            self._paths = npz_files(src)
            self._bind(_packread.open_npz(self._paths, options))
        self._choose(arrays)
        if arrays is None:
            self._single = False

    def names(self) -> list[str] | None:
        """The samples' names: their files' paths, in sample order; ``None`` for rows of one
        archive.

        >>> NpzReader("data/npz/").names()[0]
        'data/npz/000.npz'
        """
        return None if self.rows else self.paths

    def batch_async(
        self, idx: Any, *, out: Out = None, epoch: int = 0, keys: Sequence[str] | None = None
    ) -> PendingBatch[Any]:
        """Like :meth:`batch`, but returns at once.

        >>> sorted(NpzReader("data/npz/").batch_async([0]).result())
        ['image', 'mask']
        """
        if keys is None:
            return super().batch_async(idx, out=out, epoch=epoch)
        warn("NpzReader.batch(keys=)", "NpzReader(..., arrays=)")
        if isinstance(keys, str):
            raise PackreadTypeError("keys must be a list of keys, not one key")
        names = list(keys)
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InvalidArgumentError(f"keys names {twice[0]!r} more than once")
        for n in names:
            if n not in self._arrays:
                raise MissingKeyError(f"{self._describe()}: no key {n!r} (keys: {self.keys()})")
        return self._start(idx, out, epoch, names, False)

    def batch(
        self, idx: Any, *, out: Out = None, epoch: int = 0, keys: Sequence[str] | None = None
    ) -> Any:
        """Samples ``idx`` as a dict of stacked arrays (one by key), every member of every
        file read and inflated in parallel; into ``out`` arrays when given.

        >>> NpzReader("data/npz/", arrays=["mask"]).batch([1, 2])["mask"].shape
        (2, 32, 32)
        """
        return self.batch_async(idx, out=out, epoch=epoch, keys=keys).result()

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        shapes = ", ".join(
            f"{k}: {a.shape} {a.dtype}" for k, a in self._arrays.items() if k in self._chosen
        )
        what = "rows" if self.rows else "files"
        return f"NpzReader({len(self)} {what}, {{{shapes}}})"


def _claims(src: Source, options: dict[str, Any]) -> bool:
    """A folder holding ``.npz`` files (and no ``.npy``)."""
    if src.kind != FOLDER:
        return False
    names = os.listdir(src.value)
    return any(n.endswith(".npz") for n in names) and not any(n.endswith(".npy") for n in names)


register(Format(name="npz", reader=NpzReader, suffixes=(".npz",), claims=_claims, shards=False))

__all__ = ["NpzReader", "load_npz"]
