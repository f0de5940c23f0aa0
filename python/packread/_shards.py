"""Many files of one format as one reader (:class:`ShardedReader`): ``HDF5Reader``,
``ZipReader`` and ``ImageReader`` given a list or a glob of files return one.

The shards' samples follow each other in the order given (a glob sorted). Every shard must
hold the same arrays (names, dtypes and per-sample shapes). Lengths are counted once, when the
reader is made (each shard opened, and the first ``max_open_shards`` kept open), or read from
an index file (``shard_index=``) that records them, so that a reopen opens no shard at all. A
shard is otherwise opened only when a batch first touches it; at most ``max_open_shards`` stay
open, the least recently used closed first.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import resource
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import _packread
from ._common import Indices, PendingBatch, check_num_threads, open_regular, warn_skipped
from ._reader import ArrayReader, Out
from ._remote import (
    is_remote,
    is_url,
    remote_glob,
    restore_remote,
    stamp_of,
    url_has_glob,
)
from .errors import (
    InconsistentError,
    InvalidArgumentError,
    PackreadFileNotFoundError,
    PackreadTypeError,
    UnsupportedError,
    os_error,
)

#: The version of the index file's layout.
INDEX_FORMAT = 1

#: Largest index file read (one of a million shards is about 100 MB); a larger one is rebuilt.
MAX_INDEX_BYTES = 1 << 30


class Shard(NamedTuple):
    """One file of a :class:`ShardedReader`: its path and the global indices of its samples.

    >>> packread.HDF5Reader(["a.h5", "b.h5"], "x").shards[1]
    Shard(path='b.h5', range=range(3, 8))
    """

    path: str
    range: range


def default_max_open() -> int:
    """Open shards kept by default: an eighth of the soft limit on open files (a shard may
    hold two descriptors), between 16 and 512."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 512
    return max(16, min(512, soft // 8))


def is_shard_source(src: Any) -> bool:
    """Whether ``src`` names several files: a list or tuple of paths, or a glob pattern that
    is not itself an existing file."""
    if isinstance(src, (list, tuple)):
        return True
    if is_url(src):
        return url_has_glob(src)
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        return isinstance(path, str) and glob.has_magic(path) and not os.path.exists(path)
    return False


def shard_paths(src: Any, storage_options: Any = None) -> list[str]:
    """The shards' paths: a list as given, a glob sorted (a URL's over the object listing)."""
    if isinstance(src, (list, tuple)):
        paths = [os.fspath(p) for p in src]
        if not paths:
            raise InvalidArgumentError("the list of shards is empty")
        if any(not isinstance(p, str) for p in paths):
            raise PackreadTypeError("shards are paths given as str or os.PathLike")
        return paths
    pattern = os.fspath(src)
    # An object store's listing, or the file system.
    paths = remote_glob(pattern, storage_options) if is_url(pattern) else sorted(glob.glob(pattern))
    if not paths:
        raise PackreadFileNotFoundError(f"{pattern}: the pattern matches no files")
    return paths


class Opened(NamedTuple):
    """What a format's opener gives for one shard."""

    #: The shard's batch reader (the extension's ``Reader``).
    reader: Any
    #: The names its arrays have in Python, in the reader's order.
    names: list[str]
    #: Whether ``batch`` returns one array rather than a dict.
    single: bool
    #: What must agree between shards beyond the arrays (an image reader's classes).
    agree: Any
    #: Per-sample values the reader keeps in Python (an image reader's labels), or ``None``.
    labels: np.ndarray | None
    #: Samples decoded together (a chunk's first dimension).
    samples_per_chunk: int
    #: The shard's opened object when it is in object storage (its size and ETag travel in a
    #: pickle, so a worker reads the object the parent counted), else ``None``.
    remote: Any = None
    #: Where the shard logs the images it skipped (``on_error="skip"``; an ``ImageErrors``,
    #: which holds nothing of the shard's files), else ``None``.
    errors: Any = None


def _open_hdf5(path: Any, k: int, options: dict[str, Any]) -> Opened:
    from ._hdf5 import HDF5Reader

    reader = HDF5Reader(path, **options)
    vlen = [name for name in reader.keys() if reader[name].vlen is not None]
    if vlen:
        raise UnsupportedError(
            f"{reader.path}: variable-length datasets {vlen} cannot be read as shards yet; "
            "read each file with its own HDF5Reader"
        )
    names = reader.keys()
    src = reader._args[0]
    return Opened(
        reader._inner.reader(),
        names,
        reader._single,
        None,
        None,
        reader.samples_per_chunk,
        src if is_remote(src) else None,
    )


def _open_zip(path: Any, k: int, options: dict[str, Any]) -> Opened:
    from ._zip import ZipReader

    reader = ZipReader(path, **options)
    remote = reader._src if is_remote(reader._src) else None
    return Opened(reader._sample_reader(), ["data"], True, None, None, 1, remote)


def _open_images(path: Any, k: int, options: dict[str, Any]) -> Opened:
    from ._image import ImageReader

    if options.get("size") is None:
        raise UnsupportedError(
            "size=None (images at their own sizes) cannot be read as shards yet; give size="
        )
    # Each shard draws its random crops from a seed of its own: sample 0 of every shard
    # would crop alike otherwise.
    seed = (int(options.get("seed", 0)) + k * 0x9E3779B97F4A7C15) & (2**64 - 1)
    reader = ImageReader(path, **{**options, "seed": seed})
    return Opened(
        reader._reader,
        list(reader._arrays),
        True,
        reader.classes,
        reader.labels,
        1,
        reader._src if is_remote(reader._src) else None,
        reader._file.error_log,
    )


#: How each kind of shard opens: ``(path, shard number, options) -> Opened``.
OPENERS: dict[str, Callable[[str, int, dict[str, Any]], Opened]] = {
    "hdf5": _open_hdf5,
    "zip": _open_zip,
    "images": _open_images,
}


def _spec(opened: Opened) -> list[tuple[str, np.dtype[Any], tuple[int, ...]]]:
    return [
        (name, np.dtype(a[1]), tuple(a[2]))
        for name, a in zip(opened.names, opened.reader.arrays(), strict=True)
    ]


def _spec_text(spec: list[tuple[str, np.dtype[Any], tuple[int, ...]]]) -> str:
    return ", ".join(f"{n!r}: {d} {s}" for n, d, s in spec)


def _check_shard(
    paths: list[str], k: int, opened: Opened, spec: Any, agree: Any, first: int
) -> None:
    """Shard ``k`` must hold what shard ``first`` holds."""
    mine = _spec(opened)
    if mine != spec:
        raise InconsistentError(
            f"{paths[k]}: shard {k} holds {{{_spec_text(mine)}}}, but "
            f"{paths[first]} holds {{{_spec_text(spec)}}}"
        )
    if opened.agree != agree:
        raise InconsistentError(
            f"{paths[k]}: shard {k} has classes {opened.agree}, but {paths[first]} has "
            f"{agree}; its labels would mean other classes"
        )


def shard_source(path: str, remote: dict[str, Any], options: dict[str, Any]) -> Any:
    """What a shard's reader opens: its path, or, for an object counted before (its size, ETag
    and Last-Modified time in ``remote``), the object as it was then, so that a replaced one is
    an error."""
    stamp = remote.get(path)
    if stamp is None:
        return path
    return restore_remote(
        path, options.get("storage_options"), stamp, options.get("index_cache", True)
    )


class _Opener:
    """Opens shard ``k`` for the extension when a batch first touches it, checked against the
    first shard, and keeps its error log in ``logs``. It holds no reference to the reader:
    the extension keeps it, and a cycle through it would keep a dropped reader's files open."""

    def __init__(
        self,
        kind: str,
        paths: list[str],
        options: dict[str, Any],
        state: Any,
        logs: dict[int, list[Any]],
    ) -> None:
        self.kind, self.paths, self.options, self.logs = kind, paths, options, logs
        self.spec = [(n, _dtype(d), tuple(s)) for n, d, s in state["arrays"]]
        agree = state.get("agree")
        self.agree = None if agree is None else list(agree)
        self.first = int(state.get("first", 0))
        self.remote: dict[str, Any] = state.get("remote") or {}

    def __call__(self, k: int) -> Any:
        opened = OPENERS[self.kind](
            shard_source(self.paths[k], self.remote, self.options), k, self.options
        )
        _check_shard(self.paths, k, opened, self.spec, self.agree, self.first)
        _keep_log(self.logs, k, opened)
        return opened.reader


def _keep_log(logs: dict[int, list[Any]], k: int, opened: Opened) -> None:
    """Keeps shard ``k``'s error log: a shard closed and opened again logs anew, and what its
    earlier opening logged stays readable."""
    if opened.errors is not None:
        logs.setdefault(k, []).append(opened.errors)


class ShardedReader(ArrayReader):
    """Many files of one format read as one: the concatenation of their samples, in the
    order given (a glob sorted). Made by ``HDF5Reader``, ``ZipReader`` and ``ImageReader``
    when given a list or a glob of files; it reads as they do (``len``, ``keys()``, ``shape``,
    ``dtype``, ``batch``, ``batch_async``), and a batch may span shards, read in parallel.

    - Every shard must hold the same arrays (names, dtypes, per-sample shapes; images also
      the same classes); the error for one that does not names it and the difference.
    - ``shard_index``: a JSON file recording each shard's length (and size and mtime, to
      tell when it is stale). Read when it matches the shards, else written: a reopen, and
      each DataLoader worker, then opens no shard until a batch touches it.
    - ``max_open_shards``: shards kept open at once (default: an eighth of ``ulimit -n``,
      between 16 and 512); the least recently used is closed first.

    >>> r = packread.HDF5Reader("train_*.h5", "images")
    >>> [(s.path, s.range) for s in r.shards][:1]
    [('train_000.h5', range(0, 500))]
    """

    def __init__(
        self,
        kind: str,
        src: Any,
        options: dict[str, Any],
        *,
        shard_index: str | os.PathLike[str] | None = None,
        max_open_shards: int | None = None,
        _state: dict[str, Any] | None = None,
    ) -> None:
        if kind not in OPENERS:
            raise InvalidArgumentError(f"no shards of kind {kind!r}")
        self.kind = kind
        self._options = dict(options)
        self._index_path = None if shard_index is None else os.fspath(shard_index)
        max_open = default_max_open() if max_open_shards is None else max_open_shards
        if isinstance(max_open, bool) or not isinstance(max_open, (int, np.integer)):
            raise PackreadTypeError("max_open_shards must be an int")
        if max_open < 1:
            raise InvalidArgumentError(f"max_open_shards must be >= 1, not {max_open}")
        self._max_open = int(max_open)
        self._num_threads = check_num_threads(self._options.get("num_threads"))
        paths = (
            list(_state["paths"])
            if _state is not None
            else shard_paths(src, self._options.get("storage_options"))
        )
        self._paths = paths
        # Each opened shard's log of images it skipped, by shard.
        self._logs: dict[int, list[Any]] = {}
        self._warned = False
        opened: dict[int, Opened] = {}
        state = _state or self._read_index()
        if state is None:
            state = self._count(opened)
            self._write_index(state)
        self._state = state
        self._lengths: list[int] = list(state["lengths"])
        spec = [(n, _dtype(d), tuple(s)) for n, d, s in state["arrays"]]
        self._names_py: list[str] = [n for n, _, _ in spec]
        self._single = bool(state["single"])
        self.samples_per_chunk = int(state["samples_per_chunk"])
        agree = state.get("agree")
        self.classes: list[str] | None = None if agree is None else list(agree)
        labels = state.get("labels")
        #: Labels of every sample (image shards with labels), else ``None``.
        self.labels: np.ndarray | None = (
            None if labels is None else np.asarray(labels, dtype=np.int64)
        )
        self._set = _packread.ShardSet(
            paths,
            self._lengths,
            [(n, d, list(s)) for n, d, s in spec],
            _Opener(self.kind, paths, self._options, state, self._logs),
            self._max_open,
            [(k, o.reader) for k, o in opened.items()],
            self._num_threads,
        )
        self._bind(self._set.reader(), self._names_py)
        starts = np.concatenate([[0], np.cumsum(self._lengths, dtype=np.int64)])
        self._starts = starts

    # -- opening -------------------------------------------------------------------------

    def _open_one(self, k: int) -> Opened:
        remote = (getattr(self, "_state", None) or {}).get("remote") or {}
        src = shard_source(self._paths[k], remote, self._options)
        return OPENERS[self.kind](src, k, self._options)

    def _check(self, k: int, opened: Opened, spec: Any, agree: Any, first: int) -> None:
        _check_shard(self._paths, k, opened, spec, agree, first)

    def _count(self, opened: dict[int, Opened]) -> dict[str, Any]:
        """Opens every shard once: their lengths, and the arrays they must agree on (those of
        the first shard holding samples; an empty shard's do not matter)."""
        # One shard open at a time beyond those kept: thousands of shards must not exhaust
        # the process's file descriptors.
        lengths: list[int] = []
        first: Opened | None = None
        first_k = 0
        spec: Any = None
        labelled: list[np.ndarray | None] = []
        remote: dict[str, Any] = {}
        for k in range(len(self._paths)):
            one = self._open_one(k)
            if one.remote is not None:
                remote[self._paths[k]] = stamp_of(one.remote)
            lengths.append(len(one.reader))
            _keep_log(self._logs, k, one)
            if lengths[k] == 0:
                continue
            if first is None:
                first, first_k, spec = one, k, _spec(one)
            self._check(k, one, spec, first.agree, first_k)
            labelled.append(one.labels)
            if len(opened) < self._max_open:
                opened[k] = one
        if first is None:  # every shard is empty: the first one's arrays
            first = self._open_one(0)
            spec = _spec(first)
        if any(lab is None for lab in labelled) and any(lab is not None for lab in labelled):
            raise InconsistentError(f"{self._paths[first_k]}: some shards have labels, some not")
        labels = None
        if labelled and labelled[0] is not None:
            labels = np.concatenate(labelled).tolist()  # type: ignore[arg-type]
        return {
            "paths": self._paths,
            "lengths": lengths,
            "arrays": [(n, _descr(d), list(s)) for n, d, s in spec],
            "single": first.single,
            "samples_per_chunk": first.samples_per_chunk,
            "agree": first.agree,
            "labels": labels,
            "first": first_k,
            "remote": remote,
        }

    # -- the index file ------------------------------------------------------------------

    def _key(self) -> dict[str, Any] | None:
        """What an index file must have been written for: the kind, options and files."""
        stamps = []
        for p in self._paths:
            try:
                st = os.stat(p)
            except OSError:
                return None  # a missing shard: counting opens it, and says so as packread does
            stamps.append([p, st.st_size, st.st_mtime_ns])
        return {
            "format": INDEX_FORMAT,
            "kind": self.kind,
            "options": repr(sorted(self._options.items())),
            "files": stamps,
        }

    def _read_index(self) -> dict[str, Any] | None:
        """The index file's state, when it was written for these shards as they are now and
        is intact; ``None`` otherwise (it is then rebuilt). A path that cannot hold the index
        (a folder, a FIFO, a device) is an error naming it."""
        if self._index_path is None:
            return None
        if not os.path.lexists(self._index_path):
            # Said now, not after every shard was counted for an index that cannot be written.
            folder = os.path.dirname(os.path.abspath(self._index_path))
            if not os.path.isdir(folder):
                raise PackreadFileNotFoundError(
                    f"shard_index {self._index_path}: its folder {folder} does not exist"
                )
            return None
        try:
            with open_regular(self._index_path) as f:
                raw = f.read(MAX_INDEX_BYTES + 1)
        except OSError as e:
            raise os_error(e, f"shard_index {self._index_path}") from None
        try:
            saved = json.loads(raw) if len(raw) <= MAX_INDEX_BYTES else None
        except (ValueError, RecursionError):
            return None  # damaged: rebuilt
        key = self._key()
        if key is None or not isinstance(saved, dict) or saved.get("key") != _jsonable(key):
            return None  # written for other files, other options, or files since changed
        state = saved.get("state")
        return state if _valid_state(state, len(self._paths)) else None

    def _write_index(self, state: dict[str, Any]) -> None:
        key = self._key()
        if self._index_path is None or key is None:
            return
        tmp = f"{self._index_path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"key": _jsonable(key), "state": state}, f)
            os.replace(tmp, self._index_path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise os_error(e, f"shard_index {self._index_path}: cannot write it") from None

    # -- reading -------------------------------------------------------------------------

    @property
    def shards(self) -> list[Shard]:
        """Each shard's path and the global indices of its samples.

        >>> packread.ZipReader(["a.zip", "b.zip"]).shards
        [Shard(path='a.zip', range=range(0, 10)), Shard(path='b.zip', range=range(10, 30))]
        """
        s = self._starts.tolist()
        return [Shard(p, range(s[k], s[k + 1])) for k, p in enumerate(self._paths)]

    @property
    def paths(self) -> list[str]:
        """The shards' paths, in sample order."""
        return list(self._paths)

    @property
    def shard_lengths(self) -> list[int]:
        """Samples in each shard."""
        return list(self._lengths)

    @property
    def errors(self) -> dict[int, str]:
        """Every sample found not to decode so far (image shards read with
        ``on_error="skip"``), by its index in the whole, with why; ``{}`` for other kinds."""
        out: dict[int, str] = {}
        for k, logs in self._logs.items():
            start = int(self._starts[k])
            for log in logs:
                out.update(
                    (start + i, f"{self._paths[k]}: {why}") for i, why in log.errors().items()
                )
        return dict(sorted(out.items()))

    def _warn_errors(self) -> None:
        if not self._warned and any(len(log) for logs in self._logs.values() for log in logs):
            self._warned = True
            warn_skipped(self._describe(), self.errors, stacklevel=4)

    @property
    def open_shards(self) -> int:
        """Shards open now."""
        return int(self._set.open_count())

    @property
    def cache_bytes(self) -> int:
        """The decoded-chunk budget of each HDF5 shard (0 for other kinds)."""
        from ._hdf5 import DEFAULT_CACHE_BYTES

        if self.kind != "hdf5":
            return 0
        return int(self._options.get("cache_bytes", DEFAULT_CACHE_BYTES))

    def keys(self) -> list[str]:
        """The arrays every sample holds.

        >>> packread.HDF5Reader("train_*.h5").keys()
        ['images', 'labels']
        """
        return self._array_keys()

    def batch(self, idx: Indices, *, out: Out = None, epoch: int = 0) -> Any:
        """Samples ``idx`` of the concatenation (order, duplicates and negatives kept), read
        in parallel across shards; ``epoch`` draws image shards' random crops.

        >>> packread.HDF5Reader(["a.h5", "b.h5"], "x").batch([0, -1]).shape
        (2, 4)
        """
        return self.batch_async(idx, out=out, epoch=epoch).result()

    def batch_async(self, idx: Indices, *, out: Out = None, epoch: int = 0) -> PendingBatch[Any]:
        """Like :meth:`batch`, but returns at once with the reads running on the pool.

        >>> packread.HDF5Reader(["a.h5", "b.h5"], "x").batch_async([0, 7]).result().shape
        (2, 4)
        """
        if epoch < 0:
            raise InvalidArgumentError(f"epoch must be >= 0, got {epoch}")
        names = self._array_keys()
        read, arrays = self._start(idx, names, out, int(epoch))
        value = arrays[names[0]] if self._single else arrays

        def finish() -> Any:
            self._warn_errors()
            return value

        return PendingBatch(read, value, finish)

    def close(self) -> None:
        """Closes every open shard; later calls raise ``ReaderClosedError`` (a batch already
        started finishes first).

        >>> with packread.HDF5Reader("train_*.h5") as r:
        ...     first = r.batch([0])
        >>> r.closed
        True
        """
        if not self.closed:
            super().close()
            self._set = self._reader  # the closed stand-in: the shards' files are released

    def _describe(self) -> str:
        n = len(self._paths)
        return self._paths[0] if n == 1 else f"{self._paths[0]} (and {n - 1} more shards)"

    def __reduce__(self) -> tuple[Any, ...]:
        # The counted lengths travel along: a DataLoader worker opens no shard to count.
        return (
            _reopen,
            (self.kind, self._options, self._index_path, self._max_open, self._state),
        )

    def __repr__(self) -> str:
        if "_set" not in self.__dict__ or self.closed:
            return f"<{'closed ' if '_set' in self.__dict__ else 'unopened '}ShardedReader>"
        return (
            f"ShardedReader({self.kind!r}, {len(self._paths)} shards, {len(self)} samples, "
            f"keys={self.keys()})"
        )


def _reopen(
    kind: str,
    options: dict[str, Any],
    index_path: str | None,
    max_open: int,
    state: dict[str, Any],
) -> ShardedReader:
    return ShardedReader(
        kind, None, options, shard_index=index_path, max_open_shards=max_open, _state=state
    )


def _descr(dtype: np.dtype[Any]) -> Any:
    return np.lib.format.dtype_to_descr(dtype)


def _dtype(descr: Any) -> np.dtype[Any]:
    if isinstance(descr, list):
        return np.lib.format.descr_to_dtype([tuple(f) for f in descr])
    return np.dtype(descr)


def _valid_state(state: Any, shards: int) -> bool:
    """Whether ``state`` (from an index file) is what :meth:`ShardedReader._count` writes for
    ``shards`` shards: a file edited by hand is rebuilt, never trusted."""

    def ints(v: Any, n: int | None = None) -> bool:
        return (
            isinstance(v, list)
            and (n is None or len(v) == n)
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)
        )

    if not isinstance(state, dict):
        return False
    lengths, arrays = state.get("lengths"), state.get("arrays")
    if not ints(lengths, shards) or not isinstance(arrays, list) or not arrays:
        return False
    for a in arrays:
        if not (isinstance(a, list) and len(a) == 3 and isinstance(a[0], str) and ints(a[2])):
            return False
        try:
            _dtype(a[1])
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, SyntaxError):
            return False
    agree, labels = state.get("agree"), state.get("labels")
    if agree is not None and not (
        isinstance(agree, list) and all(isinstance(c, str) for c in agree)
    ):
        return False
    if labels is not None and not (
        isinstance(labels, list)
        and len(labels) == sum(lengths)
        and all(isinstance(x, int) and not isinstance(x, bool) for x in labels)
    ):
        return False
    first, spc = state.get("first", 0), state.get("samples_per_chunk")
    return (
        isinstance(state.get("single"), bool)
        and isinstance(spc, int)
        and spc >= 1
        and isinstance(first, int)
        and 0 <= first < shards
        and isinstance(state.get("remote", {}), dict)
    )


def _jsonable(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples as lists)."""
    return json.loads(json.dumps(value))


def sharded(kind: str, src: Any, options: dict[str, Any]) -> ShardedReader:
    """A :class:`ShardedReader` of ``kind`` over ``src``, the shard options taken out of a
    format reader's ``options``."""
    shard_index = options.pop("shard_index", None)
    max_open = options.pop("max_open_shards", None)
    return ShardedReader(kind, src, options, shard_index=shard_index, max_open_shards=max_open)


__all__: Sequence[str] = ["Shard", "ShardedReader", "is_shard_source", "sharded"]
