"""packread: fast, parallel, GIL-free loading of NPY, NPZ, ZIP and HDF5 training data."""

from __future__ import annotations

from . import errors
from ._common import BatchReader, PendingBatch
from ._hdf5 import HDF5Dataset, HDF5Reader
from ._image import ImageReader
from ._npy import NpyReader, load_npy
from ._open import open_reader
from ._packread import __version__, get_num_threads, set_num_threads
from ._shards import Shard, ShardedReader
from ._zip import NpzReader, ZipMemberInfo, ZipReader, load_npz
from .errors import (
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
    "BadZipError",
    "BatchReader",
    "DecodeError",
    "HDF5Dataset",
    "HDF5Error",
    "HDF5Reader",
    "ImageReader",
    "InconsistentError",
    "IndexOutOfRangeError",
    "InternalError",
    "InvalidArgumentError",
    "LimitExceededError",
    "MissingKeyError",
    "NpyFormatError",
    "NpyReader",
    "NpzReader",
    "PackreadError",
    "PackreadTypeError",
    "PendingBatch",
    "ReaderClosedError",
    "Shard",
    "ShardedReader",
    "UnsupportedError",
    "ZipMemberInfo",
    "ZipReader",
    "__version__",
    "errors",
    "get_num_threads",
    "load_npy",
    "load_npz",
    "open_reader",
    "set_num_threads",
]
