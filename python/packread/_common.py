"""Argument handling shared by every reader: paths, indices and output arrays."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Sequence
from typing import Union

import numpy as np

from .errors import IndexOutOfRangeError, InvalidArgumentError, PackreadFileNotFoundError

PathLike = Union[str, "os.PathLike[str]"]
Paths = Union[PathLike, Iterable[PathLike]]
Indices = Union[Sequence[int], "np.ndarray", range, slice]


def expand_paths(paths: Paths, suffix: str) -> list[str]:
    """A list of files from a list, a directory (its ``*suffix`` files) or a glob pattern.

    Directories and patterns are sorted so that sample order does not depend on the file system.
    """
    if isinstance(paths, (str, os.PathLike)):
        path = os.fspath(paths)
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith(suffix))
            files = [os.path.join(path, n) for n in names]
            if not files:
                raise PackreadFileNotFoundError(f"{path}: no {suffix} files in this directory")
            return files
        if glob.has_magic(path):
            files = sorted(glob.glob(path))
            if not files:
                raise PackreadFileNotFoundError(f"{path}: the pattern matches no files")
            return files
        return [path]
    return [os.fspath(p) for p in paths]


def as_indices(idx: Indices, length: int) -> np.ndarray:
    """Indices as a 1-d int64 array; order, duplicates and negatives are kept (the core checks
    bounds, raising ``IndexError``)."""
    if isinstance(idx, slice):
        return np.arange(*idx.indices(length), dtype=np.int64)
    if isinstance(idx, range):
        return np.arange(idx.start, idx.stop, idx.step, dtype=np.int64)
    arr = np.asarray(idx)
    if arr.ndim == 0:
        raise TypeError(
            "idx must be a sequence of ints, an integer array, a range or a slice, "
            f"not {type(idx).__name__}"
        )
    if arr.ndim != 1:
        raise InvalidArgumentError(f"idx must be one-dimensional, not of shape {arr.shape}")
    if arr.size == 0:
        return np.empty(0, dtype=np.int64)
    if arr.dtype.kind == "i":
        return np.ascontiguousarray(arr, dtype=np.int64)
    if arr.dtype.kind in "uO" and all(isinstance(i, (int, np.integer)) for i in arr.tolist()):
        # Integers beyond int64 (uint64, Python ints) cannot index anything.
        big = next((int(i) for i in arr.tolist() if not _INT64_MIN <= int(i) <= _INT64_MAX), None)
        if big is not None:
            raise IndexOutOfRangeError(f"index {big} is out of range for {length} samples")
        return np.asarray(arr.tolist(), dtype=np.int64)
    raise TypeError(f"idx must hold integers, not {arr.dtype}")


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def new_output(rows: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised batch array; every byte of it is written by the read."""
    return np.empty((rows, *shape), dtype=dtype)
