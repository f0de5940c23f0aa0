"""Helpers shared by the HDF5 tests: h5py's answer for a batch, sample data that compresses
(or not), index forms, and the byte offsets of a dataset's storage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from support.helpers import random_array


def h5py_rows(ds: h5py.Dataset, rows) -> np.ndarray:
    """What a batch of ``rows`` must equal: h5py's ``ds[i]`` for each row, stacked, keeping
    h5py's dtype (``np.stack`` would turn big-endian into native byte order). Each row is read
    as the one-row slice ``ds[i:i + 1]`` so that the copy into the result is a plain memcpy."""
    n = ds.shape[0]
    rows = [int(i) for i in rows]
    out = np.empty((len(rows), *ds.shape[1:]), dtype=ds.dtype)
    for k, i in enumerate(rows):
        j = i % n if -n <= i < n else i
        out[k : k + 1] = ds[j : j + 1]
    return out


def all_rows(path, name: str) -> np.ndarray:
    """Every row of a dataset as h5py reads it one by one (see :func:`h5py_rows`)."""
    with h5py.File(path, "r") as f:
        ds = f[name]
        return h5py_rows(ds, range(ds.shape[0]))


def sample_data(rng: np.random.Generator, shape, dtype, *, compressible: bool = True) -> np.ndarray:
    """Random data of any fixed-size dtype. ``compressible``: two rows in three are made of runs
    of 8 equal bytes (deflate and LZF shrink them), the third is random bytes (LZF gives up on
    those chunks and libhdf5 records it in the chunk's filter mask)."""
    dtype = np.dtype(dtype)
    arr = random_array(rng, tuple(shape), dtype)
    if not compressible or dtype.kind == "b" or arr.size == 0 or arr.ndim == 0:
        return arr
    flat = arr.reshape(shape[0], -1).view(np.uint8)
    runs = np.repeat(rng.integers(0, 256, size=(shape[0], -(-flat.shape[1] // 8))), 8, axis=1)
    keep_random = (np.arange(shape[0]) % 3) == 2
    flat[~keep_random] = runs[~keep_random, : flat.shape[1]]
    if dtype.names is not None:
        # Bools inside records must stay 0/1 (anything else is not a numpy bool).
        _fix_bools(arr)
    return arr


def _fix_bools(arr: np.ndarray) -> None:
    for name in arr.dtype.names or ():
        field = arr[name]
        if field.dtype.names is not None:
            _fix_bools(field)
        elif field.dtype.kind == "b" or (
            field.dtype.subdtype is not None and field.dtype.subdtype[0].kind == "b"
        ):
            arr[name] = field.view(np.uint8) & 1


def index_forms(n: int, seed: int = 0) -> Iterator[tuple[str, Any, list[int]]]:
    """Every form ``idx`` may take, with the rows it means: ``(label, idx, rows)``."""
    rng = np.random.default_rng(seed)
    every = list(range(n))
    mixed = [n - 1, 0, n // 2, n // 2, 0, -1, -n, 1 % n]
    rand = rng.integers(-n, n, size=3 * n + 5).tolist()
    yield "first", [0], [0]
    yield "last-negative", [-1], [n - 1]
    yield "all-sorted", every, every
    yield "reversed", every[::-1], every[::-1]
    yield "mixed-dups-negatives", mixed, [i % n for i in mixed]
    yield "random-with-dups", rand, [i % n for i in rand]
    yield "empty-list", [], []
    yield "empty-array", np.array([], dtype=np.int64), []
    yield "range", range(n), every
    yield "range-step", range(n - 1, -1, -3), every[n - 1 :: -3]
    yield "slice-all", slice(None), every
    yield "slice-step", slice(2, None, 5), every[2::5]
    yield "slice-negative-step", slice(None, None, -2), every[::-2]
    yield "tuple", tuple(mixed), [i % n for i in mixed]
    for dt in ("int8", "int32", "int64", "uint16", "uint64"):
        arr = np.array(
            [i % n for i in mixed] if dt[0] == "u" else mixed,
            dtype=dt if n <= 127 or dt != "int8" else "int64",
        )
        yield f"ndarray-{dt}", arr, [i % n for i in arr.tolist()]
    yield "numpy-int-list", [np.int64(n - 1), np.int32(0), np.int16(-1)], [n - 1, 0, n - 1]


def chunk_spans(path, name: str) -> list[tuple[int, int, int]]:
    """``(byte_offset, size, filter_mask)`` of every stored chunk, in file order."""
    with h5py.File(path, "r") as f:
        dsid = f[name].id
        infos = [dsid.get_chunk_info(i) for i in range(dsid.get_num_chunks())]
    return sorted((c.byte_offset, c.size, c.filter_mask) for c in infos)


def contiguous_offset(path, name: str) -> int:
    with h5py.File(path, "r") as f:
        return f[name].id.get_offset()


def patch(path, offset: int, data: bytes) -> None:
    """Overwrites bytes of a file in place."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)
