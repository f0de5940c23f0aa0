"""ZIP members (:class:`ZipReader`) and NPZ archives (:func:`load_npz`, :class:`NpzReader`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple, Union

import numpy as np

from . import _packread
from ._common import Indices, Paths, as_indices, expand_paths, new_output
from ._npy import DEFAULT_MAX_HEADER_SIZE, BytesLike
from .errors import InconsistentError, IndexOutOfRangeError, InvalidArgumentError

#: Largest decoded member read by default (a header may not ask for more).
DEFAULT_MAX_MEMBER_BYTES = 4 << 30

Members = Union[Sequence[str], Indices]


class ZipMemberInfo(NamedTuple):
    """What the central directory says about one member."""

    name: str
    size: int
    compressed_size: int
    #: ZIP compression method: 0 stored, 8 deflated.
    method: int
    crc32: int


class ZipReader:
    """Members of one ZIP archive, read in parallel with the GIL released.

    The central directory is parsed once, here; members are then read with ``pread``, so a
    reader can be shared by threads and used in forked ``DataLoader`` workers. It pickles by
    path. Every member read is checked against its CRC-32 unless ``verify_crc=False``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        verify_crc: bool = True,
        max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
        max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    ) -> None:
        self._options = {
            "verify_crc": verify_crc,
            "max_member_bytes": max_member_bytes,
            "max_header_size": max_header_size,
        }
        self._inner = _packread.ZipReader(
            os.fspath(path), verify_crc, max_member_bytes, max_header_size
        )
        self._names: list[str] = self._inner.names()
        self._name_set = frozenset(self._names)

    @property
    def path(self) -> str:
        return self._inner.path

    def names(self) -> list[str]:
        """Member names in archive order."""
        return list(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._name_set

    def _position(self, member: str | int) -> int:
        if isinstance(member, str):
            return self._inner.positions([member])[0]
        return int(member)

    def _positions(self, members: Members) -> np.ndarray:
        if isinstance(members, str):
            raise TypeError("members must be a sequence of names or positions, not one name")
        if (
            isinstance(members, Sequence)
            and not isinstance(members, range)
            and len(members) > 0
            and isinstance(members[0], str)
        ):
            return np.asarray(self._inner.positions(list(members)), dtype=np.int64)
        positions = as_indices(members, len(self))  # type: ignore[arg-type]
        n = len(self)
        bad = positions[(positions < -n) | (positions >= n)]
        if bad.size:
            raise IndexOutOfRangeError(
                f"{self.path}: member position {int(bad[0])} is out of range for {n} members"
            )
        return np.where(positions < 0, positions + n, positions)

    def info(self, member: str | int) -> ZipMemberInfo:
        """Sizes, compression method and CRC-32 of a member (by name or position)."""
        return ZipMemberInfo(*self._inner.info(self._position(member)))

    def read(self, member: str | int) -> bytes:
        """The whole decoded member, like ``zipfile.ZipFile.read``."""
        return self._inner.read(self._position(member))

    def batch(
        self,
        members: Members,
        dtype: Any = None,
        shape: Sequence[int] | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Members stacked into one ``(len(members),) + shape`` array.

        ``members`` are names or positions. ``.npy`` members are parsed as NPY: shape and
        dtype come from their headers (all must agree; ``dtype``/``shape``, if given, must
        match). Other members are raw bytes viewed as ``dtype`` (default ``uint8``) and
        ``shape`` (default: one dimension, from the first member's size); a member of another
        size is a ``ValueError`` naming it.
        """
        positions = self._positions(members)
        if len(positions) and self._names[int(positions[0])].endswith(".npy"):
            info = self._inner.npy_info(int(positions[0]))
            if info is not None:
                npy_dtype, npy_shape = info
                if dtype is not None and np.dtype(dtype) != npy_dtype:
                    raise InconsistentError(f"members hold {npy_dtype}, not {np.dtype(dtype)}")
                if shape is not None and tuple(shape) != npy_shape:
                    raise InconsistentError(f"members have shape {npy_shape}, not {tuple(shape)}")
                if out is None:
                    out = new_output(len(positions), npy_shape, npy_dtype)
                self._inner.batch_npy_into(positions, out)
                return out
        item = np.dtype(np.uint8 if dtype is None else dtype)
        if len(positions):
            # Size limits, method and encryption are checked before anything is allocated.
            self._inner.check(int(positions[0]))
        if shape is None:
            if not len(positions):
                shape = (0,)
            else:
                size = self._inner.info(int(positions[0]))[1]
                if item.itemsize == 0 or size % item.itemsize:
                    raise InconsistentError(
                        f"{self.path}:{self._names[int(positions[0])]}: {size} bytes is not a "
                        f"whole number of {item} items"
                    )
                shape = (size // item.itemsize,)
        sample = tuple(int(d) for d in shape)
        if out is None:
            out = new_output(len(positions), sample, item)
        elif not isinstance(out, np.ndarray) or out.shape != (len(positions), *sample):
            got = getattr(out, "shape", type(out).__name__)
            raise InvalidArgumentError(
                f"out= has shape {got}, expected {(len(positions), *sample)}"
            )
        elif out.dtype != item:
            raise InvalidArgumentError(f"out= has dtype {out.dtype}, expected {item}")
        self._inner.batch_raw_into(positions, out)
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_zip, (self.path, self._options))

    def __repr__(self) -> str:
        return f"ZipReader({self.path!r}, {len(self)} members)"


def _reopen_zip(path: str, options: dict[str, Any]) -> ZipReader:
    return ZipReader(path, **options)


def load_npz(
    src: str | os.PathLike[str] | BytesLike,
    *,
    verify_crc: bool = True,
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
) -> dict[str, Any]:
    """Load every array of an NPZ archive: equal to ``dict(numpy.load(src))``.

    ``src`` is a path or a bytes-like object. Members are read and inflated in parallel with
    the GIL released. From bytes, stored (``np.savez``) arrays come back as zero-copy,
    read-only views when aligned. Object arrays are refused; members that are not NPY come
    back as ``bytes``, as numpy returns them.
    """
    args = (verify_crc, max_member_bytes, max_header_size)
    if isinstance(src, (str, os.PathLike)):
        return _packread.load_npz_file(os.fspath(src), *args)
    return _packread.load_npz_buffer(src, *args)


class NpzReader:
    """Many NPZ files with the same keys (one sample each), read as stacked batches.

    ``paths`` is a list of files, a directory (its ``*.npz`` files, sorted) or a glob pattern
    (sorted). Keys, shapes and dtypes come from the first file; every other file is checked
    against them when first read (a mismatch is a ``ValueError`` naming file and key).
    """

    def __init__(
        self,
        paths: Paths,
        *,
        verify_crc: bool = True,
        max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
        max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    ) -> None:
        self._options = {
            "verify_crc": verify_crc,
            "max_member_bytes": max_member_bytes,
            "max_header_size": max_header_size,
        }
        files = expand_paths(paths, ".npz")
        self._inner = _packread.NpzReader(files, verify_crc, max_member_bytes, max_header_size)
        self._keys: list[str] = self._inner.keys()
        self._info = {k: self._inner.key_info(k) for k in self._keys}

    def __len__(self) -> int:
        return len(self._inner)

    def keys(self) -> list[str]:
        return list(self._keys)

    @property
    def paths(self) -> list[str]:
        return [os.fspath(p) for p in self._inner.paths]

    def shape(self, key: str) -> tuple[int, ...]:
        """Shape of one sample of ``key``."""
        return self._info[key][1]

    def dtype(self, key: str) -> np.dtype[Any]:
        return self._info[key][0]

    def batch(
        self,
        idx: Indices,
        keys: Sequence[str] | None = None,
        out: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """Samples ``idx`` of ``keys`` (default: all) as a dict of stacked arrays, every
        member of every file read and inflated in parallel; into ``out`` arrays when given."""
        rows = as_indices(idx, len(self))
        names = self._keys if keys is None else list(keys)
        if isinstance(keys, str):
            raise TypeError("keys must be a sequence of key names, not one name")
        for name in names:
            if name not in self._info:
                raise KeyError(name)
        result = dict(out) if out is not None else {}
        for name in names:
            if name not in result:
                dtype, shape = self._info[name]
                result[name] = new_output(len(rows), shape, dtype)
        self._inner.batch_into(rows, names, [result[n] for n in names])
        return {n: result[n] for n in names}

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {k: v[0] for k, v in self.batch([i]).items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_npz, (self.paths, self._options))

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {self.shape(k)} {self.dtype(k)}" for k in self._keys)
        return f"NpzReader({len(self)} files, {{{shapes}}})"


def _reopen_npz(paths: list[str], options: dict[str, Any]) -> NpzReader:
    return NpzReader(paths, **options)


__all__ = ["DEFAULT_MAX_MEMBER_BYTES", "NpzReader", "ZipMemberInfo", "ZipReader", "load_npz"]
