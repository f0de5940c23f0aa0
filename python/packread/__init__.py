"""packread: fast, parallel, GIL-free loading of HDF5, ZIP, NPY/NPZ and encoded-image
training data, local or in object storage."""

from __future__ import annotations

from typing import Any

from . import errors
from ._clip import ClipReader
from ._common import BatchReader, PendingBatch
from ._deprecated import warn as _warn
from ._hdf5 import HDF5Dataset, HDF5Reader
from ._image import ImageReader
from ._keyed import TarReader
from ._npy import NpyReader, load_npy
from ._npz import NpzReader, load_npz
from ._open import open, open_reader
from ._options import ImageDecode, Limits, Remote
from ._packread import __version__, get_num_threads, set_num_threads, set_stats
from ._reader import ArrayReader
from ._shards import Shard
from ._stats import LoaderStats, StageStats, WorkerStats
from ._zip import ZipMemberInfo, ZipReader
from .errors import (
    BadTarError,
    BadZipError,
    DecodeError,
    HDF5Error,
    InconsistentError,
    IndexOutOfRangeError,
    InternalError,
    InvalidArgumentError,
    LimitExceededError,
    MissingKeyError,
    NpyFormatError,
    PackreadError,
    PackreadTypeError,
    ReaderClosedError,
    UnsupportedError,
)

__all__ = [
    "ArrayReader",
    "BadTarError",
    "BadZipError",
    "BatchReader",
    "ClipReader",
    "DecodeError",
    "HDF5Dataset",
    "HDF5Error",
    "HDF5Reader",
    "ImageDecode",
    "ImageReader",
    "InconsistentError",
    "IndexOutOfRangeError",
    "InternalError",
    "InvalidArgumentError",
    "LimitExceededError",
    "Limits",
    "LoaderStats",
    "MissingKeyError",
    "NpyFormatError",
    "NpyReader",
    "NpzReader",
    "PackreadError",
    "PackreadTypeError",
    "PendingBatch",
    "ReaderClosedError",
    "Remote",
    "Shard",
    "StageStats",
    "TarReader",
    "UnsupportedError",
    "WorkerStats",
    "ZipMemberInfo",
    "ZipReader",
    "__version__",
    "errors",
    "get_num_threads",
    "load_npy",
    "load_npz",
    "open",
    "open_reader",
    "set_num_threads",
    "set_stats",
]


def __getattr__(name: str) -> Any:
    # Names of earlier releases, kept for one more with a warning.
    if name == "ShardedReader":
        _warn("packread.ShardedReader", "the reader's own class (many files: reader.shards)")
        return ArrayReader
    raise AttributeError(f"module 'packread' has no attribute {name!r}")
