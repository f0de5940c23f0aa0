"""What ``packread convert`` reads: an HDF5 file, a folder of ``.npy`` or ``.npz`` files, a
ZIP archive, as arrays of samples read a block at a time (and, for a ZIP output, as the
members that hold them), or an ``ImageFolder`` tree, as the files it holds. A source is only
read."""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Any

import numpy as np

from ..._common import expand_paths
from ..._hdf5 import HDF5Reader
from ..._image import LABELS_MEMBER, ImageReader
from ..._npy import NpyReader
from ..._npz import NpzReader
from ..._packread import image_info
from ..._zip import ZipReader
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

    def sample_bytes(self) -> int:
        """About how many bytes one sample takes in memory (what blocks are sized by)."""
        return sum(math.prod(s) * d.itemsize for d, s in self.arrays.values()) or 1

    def zip_description(self) -> dict[str, dict[str, Any]] | None:
        """What a ZIP output holds, when the source says it rather than its arrays."""
        return None

    def notes(self) -> list[str]:
        """What is worth saying about the samples written so far (warnings)."""
        return []

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


class _ImageTreeSource(_Source):
    """An ``ImageFolder`` tree as ``torchvision.datasets.ImageFolder`` (and
    :class:`packread.ImageReader`) reads it, for a ZIP output: first a ``dataset.json`` member,
    ``{"labels": {member: label}, "classes": [...]}``, then each image file as it is, named
    ``<class>/<file>`` (its path below the tree), in the tree's sample order. Headers are
    checked as the files go by; the files are copied whether they decode or not."""

    #: The ZIP members holding the images (``<class>/<file>``; deeper when class folders
    #: hold sub-folders).
    MEMBERS = "<class>/<file>"

    def __init__(self, path: str) -> None:
        self.path = path
        self.copies = []
        self.arrays = {}
        reader = ImageReader(path)
        assert reader.classes is not None
        assert reader.labels is not None
        self.files = reader.names()
        self.classes = list(reader.classes)
        self.labels = [int(k) for k in reader.labels.tolist()]
        self.names = [os.path.relpath(f, path).replace(os.sep, "/") for f in self.files]
        self.n = len(self.files)
        stats = [os.stat(f) for f in self.files]
        self._bytes = sum(st.st_size for st in stats) // max(1, self.n)
        stamps = hashlib.sha256()
        for f, st in zip(self.files, stats, strict=True):
            stamps.update(f"{os.path.abspath(f)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        self._fingerprint = {"images": self.n, "stamps": stamps.hexdigest()}
        doc = {"labels": dict(zip(self.names, self.labels, strict=True)), "classes": self.classes}
        self.labels_json = json.dumps(doc, ensure_ascii=False, indent=1).encode()
        self.undecodable = 0
        self._first_bad: tuple[str, str] | None = None

    def members(self, lo: int, hi: int) -> list[tuple[str, bytes]]:
        out = [(LABELS_MEMBER, self.labels_json)] if lo == 0 else []
        for k in range(lo, hi):
            with open(self.files[k], "rb") as f:
                data = f.read()
            try:
                image_info(data)
            except PackreadError as e:
                self.undecodable += 1
                self._first_bad = self._first_bad or (self.names[k], str(e))
            out.append((self.names[k], data))
        return out

    def sample_bytes(self) -> int:
        return self._bytes or 1

    def fingerprint(self) -> dict[str, Any]:
        return self._fingerprint

    def zip_description(self) -> dict[str, dict[str, Any]]:
        return {
            "images": {
                "dtype": None,
                "sample_shape": None,
                "chunks": None,
                "members": self.MEMBERS,
                "classes": len(self.classes),
                "labels": LABELS_MEMBER,
            }
        }

    def order_differs(self) -> tuple[str, str] | None:
        """The first two images that :class:`~packread.ImageReader`, reading the ZIP's images
        in name order, gives in another order than ImageFolder does (class names such as
        ``a`` and ``a-b``, or files beside sub-folders in a class folder), or ``None``."""
        for a, b in zip(self.names, self.names[1:], strict=False):
            if b < a:
                return a, b
        return None

    def notes(self) -> list[str]:
        out = []
        if self._first_bad is not None:
            name, why = self._first_bad
            images = f"{self.undecodable:,} image{'s' if self.undecodable > 1 else ''}"
            out.append(
                f"{images} do not decode as JPEG, PNG or WebP (first: {name}: {why}); copied "
                "as they are: ImageReader raises DecodeError on them, or with "
                "on_error='skip' replaces each by the next image that decodes"
            )
        swapped = self.order_differs()
        if swapped is not None:
            out.append(
                "ImageReader reads the archive's images in name order, which differs from "
                f"ImageFolder's order here ({swapped[1]} sorts before {swapped[0]}): the same "
                "images with the same labels, in another order"
            )
        return out


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
    if kind == "image-folder":
        return _ImageTreeSource(src)
    return _ZipSource(src, members, dtype, shape, name)


def _block_rows(source: _Source, rows: dict[str, int], memory_bytes: int) -> int:
    """Samples per block: within ``memory_bytes`` (at least one sample), and a multiple of
    every output chunk when that fits, so that each chunk is written once, whole."""
    per_sample = source.sample_bytes()
    unit = math.lcm(*rows.values()) if rows else 1
    if unit * per_sample > memory_bytes:
        unit = 1
    return unit * max(1, memory_bytes // (per_sample * unit))
