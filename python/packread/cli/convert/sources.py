"""What ``packread convert`` reads: an HDF5 file, a folder of ``.npy`` or ``.npz`` files, or
a ZIP archive, as arrays of samples read a block at a time (and, for a ZIP output, as the
members that hold them). A source is only read."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from ..._common import expand_paths
from ..._hdf5 import HDF5Reader
from ..._npy import NpyReader
from ..._zip import NpzReader, ZipReader
from ...errors import InvalidArgumentError, PackreadError
from .codecs import _h5py


class _Source:
    """The arrays of a source, read a block of samples at a time."""

    #: ``{name: (dtype, sample shape)}`` of the arrays converted.
    arrays: dict[str, tuple[np.dtype[Any], tuple[int, ...]]]
    n: int
    #: HDF5 datasets copied as they are.
    copies: list[str]
    #: The HDF5 file the copies, groups and attributes come from.
    h5_path: str | None = None

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def members(self, lo: int, hi: int) -> list[tuple[str, bytes]]:
        """ZIP members for samples ``lo:hi``: ``(name, bytes)``."""
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        raise NotImplementedError

    def pattern(self, name: str) -> str:
        """The ZIP members holding array ``name`` (a glob)."""
        raise NotImplementedError

    def close(self) -> None:
        """Releases what the source holds open."""


def _file_stamp(path: str) -> list[Any]:
    st = os.stat(path)
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns]


class _HDF5Source(_Source):
    def __init__(self, path: str, datasets: list[str] | None) -> None:
        h5py = _h5py()
        self.h5_path = path
        self.path = path
        reader = HDF5Reader(path)
        self.n = len(reader)
        h5 = h5py.File(path, "r")
        self._h5 = h5
        names: list[str] = []
        h5.visititems(lambda n, obj: names.append(n) if isinstance(obj, h5py.Dataset) else None)
        wanted = set(names) if datasets is None else {d.strip("/") for d in datasets}
        missing = wanted - set(names)
        if missing:
            raise InvalidArgumentError(f"{path}: no dataset {sorted(missing)[0]!r}")
        self.arrays = {}
        self.copies = []
        self._by_h5py: set[str] = set()
        native = []
        for n in sorted(wanted):
            ds = h5[n]
            vlen = h5py.check_vlen_dtype(ds.dtype) is not None
            if not (ds.shape and ds.shape[0] == self.n and not vlen):
                self.copies.append(n)
            elif n in reader.keys():
                self.arrays[n] = (reader[n].dtype, tuple(reader[n].shape[1:]))
                native.append(n)
            elif _unreadable(path, n):
                # No decoder in packread: h5py reads it, with hdf5plugin's filters.
                self.arrays[n] = (ds.dtype, tuple(ds.shape[1:]))
                self._by_h5py.add(n)
            else:
                self.copies.append(n)
        self._reader = HDF5Reader(path, native) if native else None

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        if self._reader is not None:
            out.update(self._reader.batch(range(lo, hi)))
        for n in self._by_h5py:
            out[n] = self._h5[n][lo:hi]
        return out

    def fingerprint(self) -> dict[str, Any]:
        return {"file": _file_stamp(self.path)}

    def close(self) -> None:
        self._h5.close()


def _unreadable(path: str, name: str) -> bool:
    """Whether packread has no decoder for dataset ``name`` (left out of a reader of all)."""
    try:
        return HDF5Reader(path, name)[name].read_path.startswith("unreadable")
    except PackreadError:
        return False


class _FolderSource(_Source):
    def __init__(self, path: str, suffix: str) -> None:
        self.path = path
        self.files = expand_paths(path, suffix) if isinstance(path, str) else list(path)
        self.copies = []

    def fingerprint(self) -> dict[str, Any]:
        stamps = [_file_stamp(f) for f in self.files]
        return {"files": len(stamps), "stamps": stamps}


class _NpySource(_FolderSource):
    def __init__(self, path: str, name: str) -> None:
        super().__init__(path, ".npy")
        self.reader = NpyReader(self.files)
        self.n = len(self.reader)
        self.name = name
        self.arrays = {name: (self.reader.dtype, tuple(self.reader.shape))}

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        return {self.name: self.reader.batch(range(lo, hi))}

    def members(self, lo: int, hi: int) -> list[tuple[str, bytes]]:
        out = []
        for f in self.files[lo:hi]:
            with open(f, "rb") as fh:
                out.append((os.path.basename(f), fh.read()))  # the .npy file as it is
        return out

    def pattern(self, name: str) -> str:
        return "*.npy"


class _NpzSource(_FolderSource):
    def __init__(self, path: str) -> None:
        super().__init__(path, ".npz")
        self.reader = NpzReader(self.files)
        self.n = len(self.reader)
        self.arrays = {k: (self.reader.dtype[k], self.reader.shape[k]) for k in self.reader.keys()}

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        return self.reader.batch(range(lo, hi))

    def members(self, lo: int, hi: int) -> list[tuple[str, bytes]]:
        block = self.read(lo, hi)
        out = []
        for i, f in enumerate(self.files[lo:hi]):
            stem = os.path.splitext(os.path.basename(f))[0]
            for key, arrays in block.items():
                out.append((f"{key}/{stem}.npy", _npy_bytes(arrays[i])))
        return out

    def pattern(self, name: str) -> str:
        return f"{name}/*.npy"


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return buf.getvalue()


class _ZipSource(_Source):
    def __init__(self, path: str, members: str | None, dtype: Any, shape: Any, name: str) -> None:
        self.path = path
        self.copies = []
        if members is None:
            names = ZipReader(path).names()
            members = "*.npy" if any(n.endswith(".npy") for n in names) else None
        self.reader = ZipReader(path, members=members, dtype=dtype, shape=shape)
        self.n = len(self.reader)
        self.name = name
        self.arrays = {name: (self.reader.dtype, tuple(self.reader.shape))}

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        return {self.name: self.reader.batch(range(lo, hi))}

    def fingerprint(self) -> dict[str, Any]:
        return {"file": _file_stamp(self.path)}


def _open_source(
    src: str,
    kind: str,
    datasets: list[str] | None,
    members: str | None,
    dtype: Any,
    shape: Any,
    name: str,
    out_kind: str,
) -> _Source:
    if kind != "hdf5" and datasets is not None:
        raise InvalidArgumentError("datasets= applies to an HDF5 source")
    if kind != "zip" and (members is not None or dtype is not None or shape is not None):
        raise InvalidArgumentError("members=, dtype= and shape= apply to a ZIP source")
    if kind == "hdf5":
        return _HDF5Source(src, datasets)
    if kind == "npy":
        return _NpySource(src, name)
    if kind == "npz":
        return _NpzSource(src)
    return _ZipSource(src, members, dtype, shape, name)


def _block_rows(source: _Source, rows: dict[str, int], memory_bytes: int) -> int:
    """Samples per block: within ``memory_bytes`` (at least one sample), and a multiple of
    every output chunk when that fits, so that each chunk is written once, whole."""
    per_sample = sum(math.prod(s) * d.itemsize for d, s in source.arrays.values()) or 1
    unit = math.lcm(*rows.values()) if rows else 1
    if unit * per_sample > memory_bytes:
        unit = 1
    return unit * max(1, memory_bytes // (per_sample * unit))
