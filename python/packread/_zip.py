"""Members of ZIP archives as samples (:class:`ZipReader`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Union

import numpy as np

from . import _packread
from ._common import Indices, PendingBatch, check_num_threads
from ._deprecated import SampleKeys, fold, source_names, warn
from ._keyed import Fields, KeyedSamples, keyed_binding, open_keyed
from ._options import ImageDecode, Limits, Remote
from ._reader import ArrayReader, Out, check_ragged
from ._registry import Format, register
from ._sources import classify
from .errors import (
    IndexOutOfRangeError,
    InvalidArgumentError,
    MissingKeyError,
    PackreadTypeError,
    UnsupportedError,
)

#: Largest decoded member read by default (a header may not ask for more).
DEFAULT_MAX_MEMBER_BYTES: int = _packread.DEFAULT_MAX_MEMBER_BYTES

#: ZIP's local header signature, and an empty archive's end record's.
ZIP_SIGNATURES = (b"PK\x03\x04", b"PK\x05\x06")

Members = Union[Sequence[str], Indices]


def is_zip(head: Any) -> bool:
    """Whether a file's first bytes are a ZIP archive's."""
    return bool(head(0).startswith(ZIP_SIGNATURES))


def descr_text(dtype: Any) -> str | None:
    """A dtype as the extension takes it: the repr of its numpy descr."""
    if dtype is None:
        return None
    return repr(np.lib.format.dtype_to_descr(np.dtype(dtype)))


def members_option(members: Any) -> Any:
    """``members`` checked: ``None``, a pattern, or a list of names."""
    if members is None or isinstance(members, str):
        return members
    names = list(members)
    if any(not isinstance(m, str) for m in names):
        raise PackreadTypeError("members must be a glob pattern or a list of names")
    if len(set(names)) != len(names):
        raise InvalidArgumentError("members are named more than once")
    return names


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


class ZipReader(SampleKeys, ArrayReader):
    """Members of ZIP archives as samples, read in parallel with the GIL released.

    ``source`` is an archive (a path, a URL, bytes), or many: a list or
    a glob pattern (``"part*.zip"``, sorted) whose members follow each other (``shards``;
    ``shard_index=``, ``max_open_shards=``). The central directory is parsed once; members
    are then read with ``pread``, so a reader can be shared by threads and used in forked
    ``DataLoader`` workers. Every member read is checked against its CRC-32 unless
    ``verify_crc=False``.

    ``members`` selects the samples: ``None`` (every member, in archive order), a glob pattern
    such as ``"*.raw"`` (of many archives: a shard where it matches nothing holds no
    samples), or a list of names. Positions, ``names()``, ``len`` and ``in`` all refer to the
    selection. ``.npy`` members are parsed as NPY (shape and dtype from their headers); other
    members are raw bytes viewed as ``dtype`` (default ``uint8``) and ``shape`` (default: one
    dimension, from the first member's size).

    ``fields=`` reads a ZIP whose members are laid out by key as WebDataset lays out tar
    shards (``000123.jpg``, ``000123.cls``): each sample is a key, each field read by its kind,
    with the options of :class:`~packread.TarReader` (``kinds``, ``decode``, ``augment_seed``,
    ``on_error``, ``on_missing``, ``ragged``); ``members``, ``dtype`` and ``shape`` then do not
    apply.

    >>> z = ZipReader("train.zip", members="*.raw", shape=(3, 32, 32))
    >>> images = z.batch([0, 5, 9])  # (3, 3, 32, 32) uint8
    >>> images.shape, images.dtype
    ((3, 3, 32, 32), dtype('uint8'))
    """

    format = "zip"
    #: Whether the samples are members grouped by key (``fields=``).
    _keyed: bool = False
    _keyed_inner: Any = None
    _keyed_names: list[str] | None = None

    @source_names("ZipReader", "path")
    def __init__(
        self,
        source: Any,
        *,
        members: str | Sequence[str] | None = None,
        dtype: Any = None,
        shape: Sequence[int] | None = None,
        fields: Fields = None,
        kinds: Mapping[str, str] | None = None,
        decode: ImageDecode | None = None,
        augment_seed: int = 0,
        on_error: str = "raise",
        on_missing: str = "raise",
        ragged: str = "list",
        verify_crc: bool = True,
        num_threads: int | None = None,
        remote: Remote | dict[str, Any] | None = None,
        limits: Limits | None = None,
        shard_index: str | os.PathLike[str] | None = None,
        max_open_shards: int | None = None,
        **deprecated: Any,
    ) -> None:
        kwargs = fold("ZipReader", ZipReader.__init__, locals(), deprecated)
        self._setup(source, None, **kwargs)

    def _setup(
        self,
        source: Any,
        state: dict[str, Any] | None,
        members: Any = None,
        dtype: Any = None,
        shape: Any = None,
        fields: Any = None,
        kinds: Any = None,
        decode: Any = None,
        augment_seed: int = 0,
        on_error: str = "raise",
        on_missing: str = "raise",
        ragged: str = "list",
        verify_crc: bool = True,
        num_threads: int | None = None,
        remote: Any = None,
        limits: Any = None,
        shard_index: Any = None,
        max_open_shards: Any = None,
    ) -> None:
        remote, limits = Remote._of(remote), Limits._of(limits)
        common = {
            "verify_crc": bool(verify_crc),
            "num_threads": check_num_threads(num_threads),
            "remote": remote,
            "limits": limits,
            "shard_index": shard_index,
            "max_open_shards": max_open_shards,
        }
        if fields is not None:
            keyed = {
                "fields": fields,
                "kinds": kinds,
                "decode": ImageDecode._of(decode),
                "augment_seed": int(augment_seed),
                "on_error": on_error,
                "on_missing": on_missing,
                "ragged": ragged,
            }
            self._setup_keyed(source, state, {**keyed, **common}, (members, dtype, shape))
            return
        keyed_only = {
            "kinds": kinds is not None,
            "decode": decode is not None,
            "augment_seed": augment_seed != 0,
            "on_error": on_error != "raise",
            "on_missing": on_missing != "raise",
            "ragged": ragged != "list",
        }
        given = [k for k, v in keyed_only.items() if v]
        if given:
            raise InvalidArgumentError(
                f"ZipReader: {given[0]}= applies to samples grouped by key; pass fields="
            )
        members = members_option(members)
        shape = None if shape is None else tuple(int(d) for d in shape)
        self._kwargs = {"members": members, "dtype": dtype, "shape": shape, **common}
        self._options = {
            "members": members,
            "dtype": descr_text(dtype),
            "shape": None if shape is None else list(shape),
            "verify_crc": bool(verify_crc),
            "num_threads": self._kwargs["num_threads"],
            **limits._binding(DEFAULT_MAX_MEMBER_BYTES),
            **remote._binding(),
        }
        src = classify(source, remote)
        self._source = source
        self._inner: Any = None
        self._names: list[str] | None = None
        self._readers: dict[tuple[Any, ...], Any] = {}
        if src.many:
            reader = self._open_shards(
                src.value, self._options, shard_index, max_open_shards, state
            ).reader()
        else:
            # An object's tail: the end records and the directory.
            target = self._target(src, remote, "a ZIP archive", tail=True)
            self._inner = _packread.ZipArchive(target, self._options)
            self._paths = [self._inner.path]
            reader, self._names = self._inner.samples(self._options)
            self._positions = np.asarray(
                self._inner.positions(self._names) if self._names else [], dtype=np.int64
            )
            self._by_name = {n: k for k, n in enumerate(self._names)}
        self._bind(reader)
        # A user's dtype is kept as given (a structured one, say): the extension views it.
        if dtype is not None:
            self._arrays["data"].dtype = np.dtype(dtype)

    def _setup_keyed(
        self, source: Any, state: dict[str, Any] | None, kwargs: dict[str, Any], raw: Any
    ) -> None:
        """Members grouped into samples by key (``fields=``), as :class:`TarReader` reads a
        tar's."""
        if any(v is not None for v in raw):
            raise InvalidArgumentError(
                "ZipReader: members=, dtype= and shape= select raw members; with fields= the "
                "samples are keys"
            )
        self._keyed = self._names_arrays = True
        self._ragged = check_ragged(kwargs["ragged"])
        self._kwargs = kwargs
        options = keyed_binding(
            kwargs["fields"],
            kwargs["kinds"],
            kwargs["decode"],
            kwargs["augment_seed"],
            kwargs["on_error"],
            kwargs["on_missing"],
            kwargs["num_threads"],
            kwargs["remote"],
            kwargs["limits"],
        )
        options["verify_crc"] = kwargs["verify_crc"]
        self.decode = kwargs["decode"]
        self.varies_by_epoch = self.decode.varies_by_epoch
        self._source = source
        self._readers = {}
        src = classify(source, kwargs["remote"])
        open_keyed(
            self,
            "zip",
            src,
            options,
            kwargs["remote"],
            kwargs["shard_index"],
            kwargs["max_open_shards"],
            state,
            5,  # this, _setup, __init__, the deprecated-names wrapper, the caller
        )
        self._names = self._keyed_names

    @property
    def skipped(self) -> list[tuple[str, str, str]]:
        """With ``fields=``: ``(archive, key, batch key)`` of every sample left out for a
        missing field (``on_missing="skip"``); ``[]`` otherwise.

        >>> ZipReader("train.zip").skipped
        []
        """
        return KeyedSamples.skipped.fget(self) if self._keyed else []  # type: ignore[attr-defined]

    @property
    def path(self) -> str:
        """The archive's path (the first archive's, for a reader of several)."""
        return self._paths[0]

    def names(self) -> list[str]:
        """The samples' names: the selected members' names, in sample order (of several
        archives, each archive's in turn: a member name may then repeat).

        >>> ZipReader("train.zip", members="img/*.raw").names()[:2]
        ['img/00.raw', 'img/01.raw']
        """
        if self._names is None:
            self._names = self._shard_names()
        return list(self._names)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def _one_archive(self, what: str) -> Any:
        if self._keyed:
            raise UnsupportedError(
                f"{self._describe()}: {what} of members; with fields= the samples are keys "
                "(open the archive without fields= for its members)"
            )
        if self._inner is None:
            raise UnsupportedError(
                f"{self._describe()}: {what} of a reader of several archives; open one: "
                "ZipReader(reader.paths[k])"
            )
        self._check_open()
        return self._inner

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
        n = len(self)
        if not -n <= member < n:
            raise IndexOutOfRangeError(
                f"{self.path}: member position {int(member)} is out of range for {n} members"
            )
        return int(member) % n

    def info(self, member: str | int) -> ZipMemberInfo:
        """Sizes, compression method and CRC-32 of a member (by name or position).

        >>> ZipReader("train.zip").info("img/01.raw").size
        3072
        """
        inner = self._one_archive("info()")
        return ZipMemberInfo(*inner.info(int(self._positions[self._sample_position(member)])))

    def read(self, member: str | int) -> bytes:
        """The whole decoded member, like ``zipfile.ZipFile.read``.

        >>> len(ZipReader("train.zip").read("img/01.raw"))
        3072
        """
        inner = self._one_archive("read()")
        return bytes(inner.read(int(self._positions[self._sample_position(member)])))

    def npy_header(self, member: str | int) -> tuple[np.dtype[Any], tuple[int, ...]] | None:
        """The dtype and shape a ``.npy`` member's header declares (by name or position), read
        from the header alone; ``None`` for a member that is not NPY (raw bytes).

        >>> ZipReader("arrays.zip").npy_header("a.npy")
        (dtype('float32'), (4, 8))
        >>> ZipReader("train.zip").npy_header(0) is None
        True
        """
        inner = self._one_archive("npy_header()")
        found = inner.npy_info(int(self._positions[self._sample_position(member)]))
        if found is None:
            return None
        dtype, shape = found
        return np.dtype(dtype), tuple(int(d) for d in shape)

    def _rows(self, members: Any) -> Any:
        """Indices, or members named (a list of names), as sample positions."""
        if (
            isinstance(members, Sequence)
            and not isinstance(members, (str, range))
            and len(members) > 0
            and isinstance(members[0], str)
        ):
            self._one_archive("members by name")
            return [self._sample_position(m) for m in members]
        if isinstance(members, str):
            raise PackreadTypeError(
                "members must be a sequence of names or positions, not one name"
            )
        return members

    def batch_async(
        self, idx: Indices, *, out: Out = None, epoch: int = 0, **deprecated: Any
    ) -> PendingBatch[Any]:
        """Like :meth:`batch`, but returns at once; ``idx`` may also name members.

        >>> ZipReader("train.zip").batch_async([1, 2]).result().shape
        (2, 3072)
        """
        if self._keyed and not deprecated:
            return ArrayReader.batch_async(self, idx, out=out, epoch=epoch)
        rows = self._rows(idx)
        if deprecated:
            return self._batch_as(rows, out, deprecated)
        own = self._own_kind(rows)
        if own is not None:
            return self._view(own).batch_async(rows, out=out)
        return super().batch_async(rows, out=out, epoch=epoch)

    def _read_into_args(self, idx: Indices, out: Out, epoch: int = 0) -> tuple[Any, ...] | None:
        # A batch whose members are of another kind is read through a view of that kind.
        if not self._keyed and self._own_kind(idx) is not None:
            return None
        return super()._read_into_args(idx, out, epoch)

    def _own_kind(self, rows: Any) -> tuple[str, tuple[int, ...], int] | None:
        """Members of one archive that are not of the reader's kind (a ``.npy`` of another
        header, a raw member of another size where nobody gave a shape) are read as the
        batch's first member is, as ``zipfile`` users read members of several kinds:
        ``(dtype, shape, sample)`` of that member, or ``None`` where it is the reader's kind."""
        if self._inner is None or self.closed:
            return None
        try:
            first = np.asarray(rows, dtype=np.int64).reshape(-1)[:1]
        except (OverflowError, TypeError, ValueError):
            return None  # not indices: the batch itself says why
        if len(first) == 0 or not -len(self) <= int(first[0]) < len(self):
            return None
        sample = int(first[0]) % len(self)
        position = int(self._positions[sample])
        npy = self._inner.npy_info(position)
        if npy is not None:
            dtype, shape = np.dtype(npy[0]), tuple(int(d) for d in npy[1])
        elif self._kwargs["shape"] is not None:
            return None
        else:
            dtype = np.dtype(self._kwargs["dtype"] or np.uint8)
            size = int(self._inner.info(position)[1])
            if dtype.itemsize == 0 or size % dtype.itemsize:
                return None
            shape = (size // dtype.itemsize,)
        if (dtype, shape) == (self.dtype, self.shape):
            return None
        return dtype.str, shape, sample

    def _view(self, kind: tuple[str, tuple[int, ...], int]) -> ArrayReader:
        """A reader of the same members as samples of ``kind`` (one per kind, kept)."""
        dtype, shape, sample = kind
        key = ("kind", dtype, shape)
        if key not in self._readers:
            options = {**self._options, "reference": sample}
            self._readers[key] = self._inner.samples(options)[0]
        view = ArrayReader.__new__(ArrayReader)
        view._paths = self._paths
        view._bind(self._readers[key])
        if self._kwargs["dtype"] is not None:  # a user's dtype, as given (structured, say)
            view._arrays["data"].dtype = np.dtype(self._kwargs["dtype"])
        return view

    def batch(self, idx: Indices, *, out: Out = None, epoch: int = 0, **deprecated: Any) -> Any:
        """Members (positions, or names) stacked into one ``(len(idx),) + shape`` array.

        >>> ZipReader("train.zip").batch(["img/03.raw", 0]).shape
        (2, 3072)
        """
        return self.batch_async(idx, out=out, epoch=epoch, **deprecated).result()

    def _batch_as(self, rows: Any, out: Any, given: dict[str, Any]) -> PendingBatch[Any]:
        """The deprecated ``batch(..., dtype=, shape=)``: the members viewed otherwise."""
        unknown = set(given) - {"dtype", "shape"}
        if unknown:
            raise TypeError(f"batch() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        warn("ZipReader.batch(dtype=, shape=)", "ZipReader(..., dtype=, shape=)")
        inner = self._one_archive("batch(dtype=, shape=)")
        dtype = given.get("dtype", self._kwargs["dtype"])
        shape = given.get("shape", self._kwargs["shape"])
        key = (descr_text(dtype), None if shape is None else tuple(int(d) for d in shape))
        if key not in self._readers:
            options = {
                **self._options,
                "dtype": key[0],
                "shape": None if key[1] is None else list(key[1]),
            }
            self._readers[key] = inner.samples(options)[0]
        view = ArrayReader.__new__(ArrayReader)
        view._paths = self._paths
        view._bind(self._readers[key])
        if dtype is not None:
            view._arrays["data"].dtype = np.dtype(dtype)
        return view.batch_async(rows, out=out)

    def close(self) -> None:
        """Releases the archive; later calls raise ``ReaderClosedError``.

        >>> with ZipReader("train.zip") as z:
        ...     first = z.read(0)
        >>> z.closed
        True
        """
        self._readers.clear()
        super().close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        files = "" if self._set is None else f", {len(self._paths)} shards"
        return f"ZipReader({self._describe()!r}, {len(self)} members{files})"


register(Format(name="zip", reader=ZipReader, suffixes=(".zip",), magic=is_zip))

__all__ = ["DEFAULT_MAX_MEMBER_BYTES", "ZipMemberInfo", "ZipReader"]
