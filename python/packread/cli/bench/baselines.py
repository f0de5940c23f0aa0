"""The baseline: the loop people write without packread (h5py ``d[i]``, ``numpy.load``,
``zipfile``, PIL), as a map-style Dataset, :class:`LoopDataset`."""

from __future__ import annotations

import contextlib
import io
import os
import zipfile
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..._common import BatchReader

#: How each format's plain loop reads one sample (a ``rows`` layout: rows of one array).
LOOPS = {
    "hdf5": "h5py d[i]",
    "npy": "numpy.load",
    "npy rows": "numpy.load(mmap_mode='r')[i]",
    "npz": "numpy.load(f)[key]",
    "npz rows": "numpy.load(f)[key] (each array loaded whole once), [i]",
    "zip": "zipfile read + frombuffer",
    "images": "PIL open + convert, Resize + CenterCrop (torchvision's, else PIL's)",
}


def loop_kind(kind: str, reader: BatchReader) -> str:
    """The loop's key in :data:`LOOPS` for a reader of format ``kind``: the format's name, or
    ``"<format> rows"`` for a reader of the rows of one array.

    >>> loop_kind("npy", packread.open("X.npy")), loop_kind("hdf5", packread.open("train.h5"))
    ('npy rows', 'hdf5')
    """
    return f"{kind} rows" if getattr(reader, "rows", False) else kind


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
        if kind in ("hdf5", "npy rows", "npz rows"):
            self.keys = list(reader.keys())  # type: ignore[attr-defined]
            self._single = not isinstance(reader.shape, dict)
            self.files = list(reader.paths)  # type: ignore[attr-defined]
        elif kind == "images":
            self.names = list(reader.names())  # type: ignore[attr-defined]
            self.decode = reader.decode  # type: ignore[attr-defined]
            self.files = list(reader.paths)  # type: ignore[attr-defined]
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
            elif self.kind == "zip" or (self.kind == "images" and zipfile.is_zipfile(self.path)):
                self._handle = zipfile.ZipFile(self.path)
            elif self.kind == "npy rows":
                pairs = zip(self.keys, self.files, strict=True)
                self._handle = {k: np.load(f, mmap_mode="r") for k, f in pairs}
            elif self.kind == "npz rows":
                with np.load(self.path) as f:
                    self._handle = {k: f[k] for k in self.keys}
        return self._handle

    def __getitem__(self, i: int) -> Any:
        handle = self._open()
        if self.kind in ("npy rows", "npz rows"):
            if self._single:
                return np.array(handle[self.keys[0]][i])
            return {k: np.array(handle[k][i]) for k in self.keys}
        if self.kind == "images":
            return self._image(handle, i)
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

    def _image(self, handle: Any, i: int) -> np.ndarray:
        """Image ``i`` as users decode it: its bytes (a ZIP member, or a file of the tree), PIL,
        then the reader's eval geometry (torchvision's transforms when installed)."""
        from PIL import Image

        name = self.names[i]
        if isinstance(handle, zipfile.ZipFile):
            raw = handle.read(name)
        else:  # a folder tree: names are paths
            with open(name, "rb") as f:
                raw = f.read()
        im = Image.open(io.BytesIO(raw)).convert(self.decode.mode)
        size = self.decode.size
        if size is not None:
            hw = (size, size) if isinstance(size, int) else tuple(size)
            resize = self.decode.resize or max(hw)
            try:
                import torchvision.transforms as T

                im = T.CenterCrop(hw)(T.Resize(resize)(im))
            except ImportError:  # PIL alone: the shorter side to `resize`, then the centre
                w, h = im.size
                scale = resize / min(w, h)
                im = im.resize((max(1, round(w * scale)), max(1, round(h * scale))))
                left, top = (im.size[0] - hw[1]) // 2, (im.size[1] - hw[0]) // 2
                im = im.crop((left, top, left + hw[1], top + hw[0]))
        out = np.array(im)  # writable, as torch wants it
        if out.ndim == 3 and self.decode.layout == "NCHW":
            out = np.ascontiguousarray(out.transpose(2, 0, 1))
        return out

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
