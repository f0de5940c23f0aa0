# Type stubs for the compiled extension; checked against it by `mypy.stubtest` in `make lint`.
import os
from collections.abc import Callable, Sequence
from typing import Any, final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_MAX_HEADER_SIZE",
    "DEFAULT_MAX_MEMBER_BYTES",
    "DEFAULT_MAX_PIXELS",
    "MAX_THREADS",
    "SLAB_HEADER",
    "BufferPool",
    "HDF5File",
    "ImageErrors",
    "ImageFile",
    "Lease",
    "PendingRead",
    "RaggedResult",
    "Reader",
    "RemoteObject",
    "ShardSet",
    "SharedSlab",
    "SizedResult",
    "ZipArchive",
    "__version__",
    "epoch_order",
    "get_num_threads",
    "image_info",
    "is_url",
    "load_npy_file",
    "load_npz_buffer",
    "load_npz_file",
    "open_npy",
    "open_npy_remote",
    "open_npz",
    "parse_npy_buffer",
    "release_runtime",
    "remote_glob",
    "set_num_threads",
    "shard_order",
    "slab_bytes",
]
__version__: str
DEFAULT_MAX_HEADER_SIZE: int
DEFAULT_MAX_MEMBER_BYTES: int
DEFAULT_CACHE_BYTES: int
DEFAULT_MAX_PIXELS: int
MAX_THREADS: int
SLAB_HEADER: int

def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...
def epoch_order(
    n: int, seed: int, epoch: int, chunk: int = ..., window: int = ...
) -> NDArray[np.int64]: ...
def shard_order(
    lengths: Sequence[int],
    seed: int,
    epoch: int,
    batch: int,
    rank: int,
    world: int,
    workers: int,
    drop_last: bool,
    window: int,
) -> NDArray[np.int64]: ...

@final
class ShardSet:
    def __new__(
        cls,
        names: Sequence[str],
        lengths: Sequence[int],
        arrays: Sequence[tuple[str, np.dtype[Any], Sequence[int]]],
        opener: Callable[[int], Reader],
        max_open: int,
        opened: Sequence[tuple[int, Reader]],
        num_threads: int | None = ...,
    ) -> ShardSet: ...
    def __len__(self) -> int: ...
    def open_count(self) -> int: ...
    def reader(self) -> Reader: ...

@final
class PendingRead:
    def done(self) -> bool: ...
    def wait(self, timeout: float | None = ...) -> None: ...

def load_npy_file(path: str | os.PathLike[str], max_header_size: int = ...) -> NDArray[Any]: ...
def parse_npy_buffer(
    buffer: NDArray[np.uint8], max_header_size: int = ...
) -> tuple[np.dtype[Any], bool, tuple[int, ...], int, bool]: ...

@final
class Reader:
    def __len__(self) -> int: ...
    @property
    def location(self) -> str: ...
    def arrays(self) -> list[tuple[str, np.dtype[Any], tuple[int, ...]]]: ...
    def read_into(
        self,
        idx: NDArray[np.int64],
        arrays: list[int],
        outs: list[NDArray[Any]],
        epoch: int = ...,
    ) -> PendingRead: ...

def open_npy(
    paths: list[str | os.PathLike[str]],
    max_header_size: int = ...,
    num_threads: int | None = ...,
) -> Reader: ...
def open_npy_remote(
    urls: list[str],
    options: list[tuple[str, str]],
    cache_dir: str | os.PathLike[str] | None,
    stamps: list[tuple[int, str | None, int | None]] | None,
    max_header_size: int = ...,
    num_threads: int | None = ...,
    data_cache: tuple[str | os.PathLike[str], int] | None = ...,
) -> tuple[Reader, list[tuple[int, str | None, int | None]]]: ...
def remote_glob(pattern: str, options: list[tuple[str, str]]) -> list[str]: ...
def is_url(s: str) -> bool: ...
def release_runtime() -> None: ...

@final
class RemoteObject:
    def __new__(
        cls,
        url: str,
        options: list[tuple[str, str]],
        first: str,
        n: int,
        cache_dir: str | os.PathLike[str] | None,
        data_cache: tuple[str | os.PathLike[str], int] | None = ...,
    ) -> RemoteObject: ...
    @staticmethod
    def restore(
        url: str,
        options: list[tuple[str, str]],
        size: int,
        etag: str | None,
        cache_dir: str | os.PathLike[str] | None,
        data_cache: tuple[str | os.PathLike[str], int] | None = ...,
        modified: int | None = ...,
    ) -> RemoteObject: ...
    @property
    def url(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def etag(self) -> str | None: ...
    @property
    def modified(self) -> int | None: ...
    @property
    def options(self) -> list[tuple[str, str]]: ...
    @property
    def cache_dir(self) -> str | None: ...
    @property
    def data_cache(self) -> tuple[str, int] | None: ...
    @property
    def index_hit(self) -> bool: ...
    def fetched(self) -> tuple[int, int]: ...

@final
class ImageFile:
    def __new__(
        cls,
        archive: ZipArchive | None,
        members: list[int],
        paths: list[str],
        hdf5: HDF5File | None,
        dataset: int,
        names: list[str],
        size: tuple[int, int] | None,
        crop: str,
        resize: int,
        scale: tuple[float, float],
        ratio: tuple[float, float],
        flip: bool,
        layout: str,
        mode: str,
        normalize: tuple[list[float], list[float], str] | None,
        exif_transpose: bool,
        max_pixels: int,
        seed: int,
        skip: bool,
        num_threads: int | None,
        draft: bool = ...,
    ) -> ImageFile: ...
    def __len__(self) -> int: ...
    @property
    def reader(self) -> Reader: ...
    def crop(self, index: int, epoch: int) -> tuple[int, int, int, int, bool]: ...
    def read_sized(self, idx: NDArray[np.int64], epoch: int) -> tuple[PendingRead, SizedResult]: ...
    def encoded(self, index: int) -> bytes: ...
    def errors(self) -> dict[int, str]: ...
    @property
    def error_log(self) -> ImageErrors: ...

@final
class ImageErrors:
    def errors(self) -> dict[int, str]: ...
    def __len__(self) -> int: ...

@final
class SizedResult:
    def take(
        self,
    ) -> tuple[NDArray[np.uint64], int, NDArray[np.int64], list[tuple[int, int, int]]]: ...

def image_info(data: bytes, max_pixels: int = ...) -> tuple[str, int, int, bool, bool]: ...

@final
class ZipArchive:
    def __new__(
        cls,
        path: str | os.PathLike[str] | RemoteObject,
        verify_crc: bool = ...,
        max_member_bytes: int = ...,
        max_header_size: int = ...,
        num_threads: int | None = ...,
    ) -> ZipArchive: ...
    def __len__(self) -> int: ...
    @property
    def path(self) -> str: ...
    def names(self) -> list[str]: ...
    def positions(self, names: list[str]) -> list[int]: ...
    def check(self, position: int) -> None: ...
    def info(self, position: int) -> tuple[str, int, int, int, int]: ...
    def read(self, position: int) -> bytes: ...
    def npy_info(self, position: int) -> tuple[np.dtype[Any], tuple[int, ...]] | None: ...
    def samples(
        self,
        positions: list[int],
        dtype: np.dtype[Any] | None = ...,
        shape: list[int] | None = ...,
        reference: int | None = ...,
    ) -> Reader: ...

def open_npz(
    paths: list[str | os.PathLike[str]],
    verify_crc: bool = ...,
    max_member_bytes: int = ...,
    max_header_size: int = ...,
    num_threads: int | None = ...,
) -> Reader: ...
def load_npz_file(
    path: str | os.PathLike[str],
    verify_crc: bool = ...,
    max_member_bytes: int = ...,
    max_header_size: int = ...,
) -> dict[str, NDArray[Any] | bytes]: ...
def load_npz_buffer(
    buffer: NDArray[np.uint8],
    verify_crc: bool = ...,
    max_member_bytes: int = ...,
    max_header_size: int = ...,
) -> dict[str, NDArray[Any] | bytes]: ...

@final
class HDF5File:
    def __new__(
        cls,
        src: str | os.PathLike[str] | bytes | RemoteObject,
        datasets: list[str] | None = ...,
        num_threads: int | None = ...,
        cache_bytes: int = ...,
        in_memory: bool = ...,
    ) -> HDF5File: ...
    def __len__(self) -> int: ...
    @property
    def path(self) -> str: ...
    def reader(self) -> Reader: ...
    def names(self) -> list[str]: ...
    def skipped(self) -> dict[str, str]: ...
    def info(self, name: str) -> dict[str, Any]: ...
    def attrs(self, name: str) -> list[tuple[Any, ...]]: ...
    def read_ragged(
        self, idx: NDArray[np.int64], name: str
    ) -> tuple[PendingRead, RaggedResult]: ...

@final
class RaggedResult:
    def take(self) -> tuple[NDArray[np.uint64], int, NDArray[np.int64]]: ...

# Recycled batch memory (src/py/buffers.rs).
_Specs = list[tuple[tuple[int, ...], np.dtype[Any]]]

def slab_bytes(specs: _Specs) -> int: ...

@final
class BufferPool:
    def __new__(
        cls, keep: int, allocate: Callable[[int], NDArray[np.uint8]] | None = None
    ) -> BufferPool: ...
    def arrays(self, specs: _Specs) -> list[NDArray[Any]]: ...
    def stats(self) -> dict[str, int]: ...
    def clear(self) -> None: ...

@final
class Lease: ...

@final
class SharedSlab:
    def __new__(cls, memory: NDArray[np.uint8]) -> SharedSlab: ...
    def claim(self) -> int: ...
    def unclaim(self) -> None: ...
    def registered(self) -> None: ...
    def evict(self) -> bool: ...
    def arrays(self, specs: _Specs) -> list[NDArray[Any]]: ...
    def lease(self, specs: _Specs) -> list[NDArray[Any]]: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def state_word(self) -> int: ...
