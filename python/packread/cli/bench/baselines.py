"""The baseline: the loop people write without packread (h5py ``d[i]``, ``numpy.load``,
``zipfile``), as a map-style Dataset, :class:`LoopDataset`."""

from __future__ import annotations

import contextlib
import io
import os
import zipfile
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..._common import BatchReader

#: How each format's plain loop reads one sample.
LOOPS = {
    "hdf5": "h5py d[i]",
    "npy": "numpy.load",
    "npz": "numpy.load(f)[key]",
    "zip": "zipfile read + frombuffer",
}


class LoopDataset:
    """The loop people write, as a map-style Dataset: one sample per ``__getitem__``, read with
    h5py, ``numpy.load`` or ``zipfile``, files opened lazily in each process (a handle opened
    before ``fork`` is not shared with DataLoader workers). ``batch(idx)`` stacks a batch the
    same way, for the batch-read comparison.

    >>> loop = LoopDataset("train.h5", "hdf5", packread.open("train.h5"))
    >>> sorted(loop[0])
    ['images', 'labels']
    """

    def __init__(self, path: str, kind: str, reader: BatchReader) -> None:
        self.path = path
        self.kind = kind
        self._len = len(reader)
        self._pid = -1
        self._handle: Any = None
        if kind == "hdf5":
            self.keys = list(reader.keys())  # type: ignore[attr-defined]
            self._single = not isinstance(reader.shape, dict)
        elif kind == "zip":
            self.keys = list(reader.names())  # type: ignore[attr-defined]
            self._dtype, self._shape = reader.dtype, reader.shape
        elif kind == "npz":
            self.keys = list(reader.keys())  # type: ignore[attr-defined]
            self.files = list(reader.paths)  # type: ignore[attr-defined]
        else:
            self.files = list(reader.paths)  # type: ignore[attr-defined]
        if kind == "hdf5":
            _import_h5py()

    def __len__(self) -> int:
        return self._len

    def _open(self) -> Any:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            if self.kind == "hdf5":
                h5py = _import_h5py()
                f = h5py.File(self.path, "r")
                self._handle = {k: f[k] for k in self.keys}  # datasets looked up once
            elif self.kind == "zip":
                self._handle = zipfile.ZipFile(self.path)
        return self._handle

    def __getitem__(self, i: int) -> Any:
        handle = self._open()
        if self.kind == "hdf5":
            if self._single:
                return handle[self.keys[0]][i]
            return {k: handle[k][i] for k in self.keys}
        if self.kind == "zip":
            raw = handle.read(self.keys[i])
            if self.keys[i].endswith(".npy"):
                return np.load(io.BytesIO(raw))
            # A copy, as the seed's `torch.tensor(buffer)` makes (torch wants it writable).
            return np.frombuffer(raw, dtype=self._dtype).reshape(self._shape).copy()
        if self.kind == "npz":
            with np.load(self.files[i]) as f:
                return {k: f[k] for k in self.keys}
        return np.load(self.files[i])

    def batch(self, idx: Iterable[int]) -> Any:
        """Samples ``idx`` read one by one, then stacked (a dict of stacks for several arrays).

        >>> loop = LoopDataset("train.h5", "hdf5", packread.open("train.h5"))
        >>> loop.batch([0, 1])["images"].shape
        (2, 3, 32, 32)
        """
        samples = [self[int(i)] for i in idx]
        if isinstance(samples[0], dict):
            return {k: np.stack([s[k] for s in samples]) for k in samples[0]}
        return np.stack(samples)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_handle"], state["_pid"] = None, -1
        return state


def _import_h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise ImportError("the HDF5 baseline reads with h5py: pip install h5py") from None
    with contextlib.suppress(ImportError):  # h5py then reads blosc, zstd, lz4... chunks
        import hdf5plugin  # noqa: F401
    return h5py
