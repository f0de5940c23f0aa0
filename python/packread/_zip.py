"""ZIP members (:class:`ZipReader`) and NPZ archives (:func:`load_npz`, :class:`NpzReader`)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Union

import numpy as np

from . import _packread
from ._common import (
    Closable,
    Indices,
    Paths,
    PendingBatch,
    as_indices,
    byte_view,
    check_num_threads,
    expand_paths,
    new_output,
)
from ._npy import DEFAULT_MAX_HEADER_SIZE, BytesLike
from ._reader import ArrayReader, deprecated_sample_keys
from ._remote import DEFAULT_CACHE_DIR_BYTES, is_remote, is_url, open_remote
from ._shards import is_shard_source, sharded
from .errors import (
    InconsistentError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    MissingKeyError,
    PackreadTypeError,
)

#: Largest decoded member read by default (a header may not ask for more).
DEFAULT_MAX_MEMBER_BYTES: int = _packread.DEFAULT_MAX_MEMBER_BYTES

Members = Union[Sequence[str], Indices]


class ZipMemberInfo(NamedTuple):
    """What the central directory says about one member.

    >>> ZipReader("train.zip").info(0)
    ZipMemberInfo(name='img/00.raw', size=3072, compressed_size=3072, method=0, crc32=...)
    """

    name: str
    size: int
    compressed_size: int
    #: ZIP compression method: 0 stored, 8 deflated.
    method: int
    crc32: int


class ZipReader(Closable):
    """Members of one ZIP archive, read in parallel with the GIL released.

    The central directory is parsed once, here; members are then read with ``pread``, so a
    reader can be shared by threads and used in forked ``DataLoader`` workers. It pickles by
    path. Every member read is checked against its CRC-32 unless ``verify_crc=False``.

    A list or glob pattern of archives (``"part*.zip"``, sorted) opens as one
    :class:`~packread.ShardedReader` of their members (``shard_index=``,
    ``max_open_shards=``); each archive's selection is made by the same options.

    ``members`` selects the samples: ``None`` (every member, in archive order), a glob pattern
    such as ``"*.raw"``, or a list of names. Positions, ``keys()``, ``len`` and ``in`` all refer
    to the selection. ``.npy`` members are parsed as NPY (shape and dtype from their headers);
    other members are raw bytes viewed as ``dtype`` (default ``uint8``) and ``shape`` (default:
    one dimension, from the first member's size).

    >>> z = ZipReader("train.zip", members="*.raw", shape=(3, 32, 32))
    >>> images = z.batch([0, 5, 9])  # (3, 3, 32, 32) uint8
    >>> images.shape, images.dtype
    ((3, 3, 32, 32), dtype('uint8'))
    """

    #: Each member is read on its own: no sample is decoded together with another.
    samples_per_chunk = 1

    def __new__(cls, path: Any = None, **kwargs: Any) -> Any:
        """A list or glob of archives opens as one :class:`~packread.ShardedReader`."""
        if is_shard_source(path):
            return sharded("zip", path, kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        members: str | Sequence[str] | None = None,
        dtype: Any = None,
        shape: Sequence[int] | None = None,
        verify_crc: bool = True,
        max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
        max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
        num_threads: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        index_cache: bool | str | os.PathLike[str] = True,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_dir_bytes: int = DEFAULT_CACHE_DIR_BYTES,
    ) -> None:
        # A URL opens the object here (its tail: the end records and directory); the
        # extension's RemoteObject then stands where a path would, and pickles as opened.
        if is_url(path):
            path = open_remote(
                path,
                storage_options,
                tail=True,
                index_cache=index_cache,
                cache_dir=cache_dir,
                cache_dir_bytes=cache_dir_bytes,
            )
        self._src = path if is_remote(path) else os.fspath(path)
        self._options: dict[str, Any] = {
            "members": members if members is None or isinstance(members, str) else list(members),
            "dtype": dtype,
            "shape": shape,
            "verify_crc": verify_crc,
            "max_member_bytes": max_member_bytes,
            "max_header_size": max_header_size,
            "num_threads": check_num_threads(num_threads),
        }
        self._inner = _packread.ZipArchive(
            self._src,
            verify_crc,
            max_member_bytes,
            max_header_size,
            self._options["num_threads"],
        )
        names: list[str] = self._inner.names()
        if members is None:
            chosen = list(range(len(names)))
        elif isinstance(members, str):
            chosen = [i for i, n in enumerate(names) if fnmatch.fnmatchcase(n, members)]
            if not chosen:
                raise MissingKeyError(f"{self.path}: no member matches {members!r}")
        else:
            wanted = list(members)
            if any(not isinstance(m, str) for m in wanted):
                raise PackreadTypeError("members must be a glob pattern or a list of names")
            if len(set(wanted)) != len(wanted):
                raise InvalidArgumentError("members are named more than once")
            chosen = list(self._inner.positions(wanted))
        self._archive_positions = np.asarray(chosen, dtype=np.int64)
        self._names = [names[i] for i in chosen]
        self._by_name = {n: k for k, n in enumerate(self._names)}
        self._dtype = None if dtype is None else np.dtype(dtype)
        self._shape = None if shape is None else tuple(int(d) for d in shape)
        self._sample: tuple[bool, np.dtype[Any], tuple[int, ...]] | None = None
        #: Batch readers of the selection, one per way of reading it (raw as a dtype and shape,
        #: or .npy against a reference member), made when first needed.
        self._readers: dict[tuple[Any, ...], Any] = {}

    @property
    def path(self) -> str:
        """The archive's path."""
        return self._inner.path

    def _describe(self) -> str:
        return self.path

    def names(self) -> list[str]:
        """The samples' names: the selected members' names, in sample order.

        >>> ZipReader("train.zip", members="img/*.raw").names()[:2]
        ['img/00.raw', 'img/01.raw']
        """
        return list(self._names)

    def keys(self) -> list[str]:
        """Deprecated: the selected members' names (``names()``); will return the array names.

        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", DeprecationWarning)
        ...     ZipReader("train.zip", members="img/*.raw").keys()[:2]
        ['img/00.raw', 'img/01.raw']
        """
        return deprecated_sample_keys(self, self.names())

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._by_name

    def _sample_type(self) -> tuple[bool, np.dtype[Any], tuple[int, ...]]:
        """``(is_npy, dtype, shape)`` of one sample, from the first selected member."""
        if self._sample is None:
            if not self._names:
                item = self._dtype if self._dtype is not None else np.dtype(np.uint8)
                self._sample = (False, item, self._shape or (0,))
            else:
                self._sample = self._type_of(0, self._dtype, self._shape)
        return self._sample

    def _type_of(
        self, k: int, dtype: np.dtype[Any] | None, shape: tuple[int, ...] | None
    ) -> tuple[bool, np.dtype[Any], tuple[int, ...]]:
        """``(is_npy, dtype, shape)`` of sample ``k`` read with these ``dtype``/``shape``."""
        at, name = int(self._archive_positions[k]), self._names[k]
        if name.endswith(".npy"):
            info = self._inner.npy_info(at)
            if info is not None:
                npy_dtype, npy_shape = info
                if dtype is not None and dtype != npy_dtype:
                    raise InconsistentError(
                        f"{self.path}:{name}: members hold {npy_dtype}, not {dtype}"
                    )
                if shape is not None and shape != npy_shape:
                    raise InconsistentError(
                        f"{self.path}:{name}: members have shape {npy_shape}, not {shape}"
                    )
                return True, npy_dtype, npy_shape
        item = dtype if dtype is not None else np.dtype(np.uint8)
        # Size limits, method and encryption are checked before anything is allocated.
        self._inner.check(at)
        if shape is None:
            size = self._inner.info(at)[1]
            if item.itemsize == 0 or size % item.itemsize:
                raise InconsistentError(
                    f"{self.path}:{name}: {size} bytes is not a whole number of {item} items"
                )
            shape = (size // item.itemsize,)
        return False, item, shape

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one sample (from the first member's NPY header, or ``shape=``/its size)."""
        return self._sample_type()[2]

    @property
    def dtype(self) -> np.dtype[Any]:
        """dtype of the samples (from the first member's NPY header, or ``dtype=``)."""
        return self._sample_type()[1]

    def _sample_position(self, member: str | int) -> int:
        if isinstance(member, str):
            try:
                return self._by_name[member]
            except KeyError:
                raise MissingKeyError(f"{self.path}: no member {member!r} in this reader") from None
        if isinstance(member, bool) or not isinstance(member, (int, np.integer)):
            raise PackreadTypeError(
                f"a member is a name or a position, not {type(member).__name__}"
            )
        return int(self._positions_of([int(member)])[0])

    def _positions_of(self, members: Members) -> np.ndarray:
        """Sample positions of names or positions (negative counts from the end)."""
        if isinstance(members, str):
            raise PackreadTypeError(
                "members must be a sequence of names or positions, not one name"
            )
        if (
            isinstance(members, Sequence)
            and not isinstance(members, range)
            and len(members) > 0
            and isinstance(members[0], str)
        ):
            return np.asarray([self._sample_position(m) for m in members], dtype=np.int64)
        positions = as_indices(members, len(self), self.path)  # type: ignore[arg-type]
        n = len(self)
        bad = positions[(positions < -n) | (positions >= n)]
        if bad.size:
            raise IndexOutOfRangeError(
                f"{self.path}: member position {int(bad[0])} is out of range for {n} members"
            )
        return np.where(positions < 0, positions + n, positions)

    def info(self, member: str | int) -> ZipMemberInfo:
        """Sizes, compression method and CRC-32 of a member (by name or position).

        >>> ZipReader("train.zip").info("img/01.raw").size
        3072
        """
        at = int(self._archive_positions[self._sample_position(member)])
        return ZipMemberInfo(*self._inner.info(at))

    def read(self, member: str | int) -> bytes:
        """The whole decoded member, like ``zipfile.ZipFile.read``.

        >>> len(ZipReader("train.zip").read("img/01.raw"))
        3072
        """
        return self._inner.read(int(self._archive_positions[self._sample_position(member)]))

    def batch(
        self,
        members: Members,
        *,
        dtype: Any = None,
        shape: Sequence[int] | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Members (names or positions) stacked into one ``(len(members),) + shape`` array.

        ``.npy`` members must all agree with the header of the batch's first member; raw
        members are viewed as ``dtype`` and ``shape`` (the reader's unless given here; by
        default ``uint8`` and the first member's size). A member that does not fit is an error
        naming it.

        >>> ZipReader("train.zip").batch(["img/03.raw", 0], shape=(3, 32, 32)).shape
        (2, 3, 32, 32)
        """
        return self.batch_async(members, dtype=dtype, shape=shape, out=out).result()

    def batch_async(
        self,
        members: Members,
        *,
        dtype: Any = None,
        shape: Sequence[int] | None = None,
        out: np.ndarray | None = None,
    ) -> PendingBatch[np.ndarray]:
        """Like :meth:`batch`, but returns at once: arguments are checked now (the same errors
        as ``batch``), the reads run on packread's pool; ``.result()`` gives the array.

        >>> ZipReader("train.zip").batch_async([1, 2], dtype="<u2").result().shape
        (2, 1536)
        """
        self._check_open()
        ks = self._positions_of(members)
        at = self._archive_positions[ks]
        want_dtype = np.dtype(dtype) if dtype is not None else self._dtype
        want_shape = tuple(int(d) for d in shape) if shape is not None else self._shape
        if dtype is None and shape is None and (len(ks) == 0 or ks[0] == 0):
            is_npy, item, sample = self._sample_type()
        elif len(ks) == 0:
            item = want_dtype if want_dtype is not None else np.dtype(np.uint8)
            is_npy, item, sample = False, item, want_shape or (0,)
        else:
            is_npy, item, sample = self._type_of(int(ks[0]), want_dtype, want_shape)
        if out is None:
            out = new_output(len(at), sample, item)
        elif not isinstance(out, np.ndarray) or out.shape != (len(at), *sample):
            got = getattr(out, "shape", type(out).__name__)
            raise InvalidArgumentError(f"out= has shape {got}, expected {(len(at), *sample)}")
        elif out.dtype != item:
            raise InvalidArgumentError(f"out= has dtype {out.dtype}, expected {item}")
        reader = self._reader_for(is_npy, item, sample, int(at[0]) if len(at) else 0)
        return PendingBatch(reader.read_into(ks, [0], [out]), out)

    def _reader_for(
        self, is_npy: bool, item: np.dtype[Any], sample: tuple[int, ...], reference: int
    ) -> Any:
        """The batch reader of the selection as samples of this kind. One per kind: `.npy`
        members are checked against the header of the member that made the reader, which
        holds this dtype and shape too."""
        key = ("npy" if is_npy else "raw", item, sample)
        reader = self._readers.get(key)
        if reader is None:
            selection = self._archive_positions.tolist()
            if is_npy:
                reader = self._inner.samples(selection, reference=reference)
            else:
                reader = self._inner.samples(selection, item, list(sample))
            self._readers[key] = reader
        return reader

    def _sample_reader(self) -> Any:
        """The batch reader of the selection as the reader's own samples (a shard's)."""
        is_npy, item, sample = self._sample_type()
        first = int(self._archive_positions[0]) if len(self._archive_positions) else 0
        return self._reader_for(is_npy, item, sample, first)

    def __getitem__(self, member: str | int) -> np.ndarray:
        return self.batch([member])[0]  # type: ignore[list-item]

    def close(self) -> None:
        """Releases the archive; later calls raise ``ReaderClosedError``.

        >>> with ZipReader("train.zip") as z:
        ...     first = z.read(0)
        >>> z.closed
        True
        """
        self._readers.clear()  # each holds the archive open too
        super().close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_zip, (self._src, self._options))

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
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

    >>> sorted(load_npz("sample.npz"))
    ['image', 'mask']
    """
    args = (verify_crc, max_member_bytes, max_header_size)
    if isinstance(src, (str, os.PathLike)):
        return _packread.load_npz_file(os.fspath(src), *args)
    return _packread.load_npz_buffer(byte_view(src, "NPZ"), *args)


class NpzReader(ArrayReader):
    """Many NPZ files with the same keys (one sample each), read as stacked batches.

    ``paths`` is a list of files, a directory (its ``*.npz`` files, sorted) or a glob pattern
    (sorted). Keys, shapes and dtypes come from the first file; every other file is checked
    against them when first read (a mismatch is a ``ValueError`` naming file and key). ``keys``
    selects the arrays a batch holds (default: all of the first file's).

    >>> n = NpzReader("data/npz/")
    >>> batch = n.batch([0, 4])  # {"image": (2, ...), "mask": (2, ...)}
    >>> batch["image"].shape, batch["mask"].shape
    ((2, 3, 32, 32), (2, 32, 32))
    """

    _single = False

    def __init__(
        self,
        paths: Paths,
        *,
        keys: Sequence[str] | None = None,
        verify_crc: bool = True,
        max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
        max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
        num_threads: int | None = None,
    ) -> None:
        self._options: dict[str, Any] = {
            "keys": None if keys is None else _key_list(keys),
            "verify_crc": verify_crc,
            "max_member_bytes": max_member_bytes,
            "max_header_size": max_header_size,
            "num_threads": check_num_threads(num_threads),
        }
        self._paths = expand_paths(paths, ".npz")
        self._bind(
            _packread.open_npz(
                self._paths,
                verify_crc,
                max_member_bytes,
                max_header_size,
                self._options["num_threads"],
            )
        )
        self._keys = self._array_keys_all() if keys is None else self._known(self._options["keys"])

    def _array_keys_all(self) -> list[str]:
        return list(self._arrays)

    def _known(self, keys: list[str]) -> list[str]:
        missing = [k for k in keys if k not in self._arrays]
        if missing:
            raise MissingKeyError(
                f"{self.paths[0]}: no key {missing[0]!r} (keys: {list(self._arrays)})"
            )
        return keys

    def _array_keys(self) -> list[str]:
        return list(self._keys)

    def names(self) -> list[str]:
        """The samples' names: their files' paths, in sample order.

        >>> NpzReader("data/npz/").names()[0]
        'data/npz/000.npz'
        """
        return self.paths

    def keys(self) -> list[str]:
        """The keys a batch holds.

        >>> NpzReader("data/npz/").keys()
        ['image', 'mask']
        """
        return list(self._keys)

    @property
    def paths(self) -> list[str]:
        """The files, in sample order."""
        return list(self._paths)

    @property
    def shape(self) -> dict[str, tuple[int, ...]]:
        """Shape of one sample of each key."""
        return {k: self._arrays[k].shape for k in self._keys}

    @property
    def dtype(self) -> dict[str, np.dtype[Any]]:
        """dtype of each key."""
        return {k: self._arrays[k].dtype for k in self._keys}

    def batch(
        self,
        idx: Indices,
        *,
        keys: Sequence[str] | None = None,
        out: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """Samples ``idx`` of ``keys`` (default: the reader's) as a dict of stacked arrays,
        every member of every file read and inflated in parallel; into ``out`` arrays when
        given.

        >>> NpzReader("data/npz/").batch([1, 2], keys=["mask"])["mask"].shape
        (2, 32, 32)
        """
        return self.batch_async(idx, keys=keys, out=out).result()

    def batch_async(
        self,
        idx: Indices,
        *,
        keys: Sequence[str] | None = None,
        out: dict[str, np.ndarray] | None = None,
    ) -> PendingBatch[dict[str, np.ndarray]]:
        """Like :meth:`batch`, but returns at once: arguments are checked now (the same errors
        as ``batch``), the reads run on packread's pool; ``.result()`` gives the dict.

        >>> sorted(NpzReader("data/npz/").batch_async([0]).result())
        ['image', 'mask']
        """
        names = self._keys if keys is None else self._known(_key_list(keys))
        if out is not None and not isinstance(out, dict):
            raise PackreadTypeError("out= must be a dict of arrays, one per key")
        read, arrays = self._start(idx, names, out)
        return PendingBatch(read, arrays)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {k: v[0] for k, v in self.batch([i]).items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_npz, (self.paths, self._options))

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        shapes = ", ".join(f"{k}: {self.shape[k]} {self.dtype[k]}" for k in self._keys)
        return f"NpzReader({len(self)} files, {{{shapes}}})"


def _key_list(keys: Sequence[str]) -> list[str]:
    if isinstance(keys, str) or any(not isinstance(k, str) for k in keys):
        raise PackreadTypeError("keys must be a sequence of key names")
    names = list(keys)
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"keys are named more than once: {names}")
    return names


def _reopen_npz(paths: list[str], options: dict[str, Any]) -> NpzReader:
    return NpzReader(paths, **options)


__all__ = ["DEFAULT_MAX_MEMBER_BYTES", "NpzReader", "ZipMemberInfo", "ZipReader", "load_npz"]
