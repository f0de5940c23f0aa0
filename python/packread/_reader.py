"""What every reader shares, written once over the extension's ``Reader`` (the engine's one
binding): ``len``, ``keys()`` (the arrays a sample holds), ``names()`` (the samples'),
``shape`` and ``dtype``, one ``batch(idx, *, out=None, epoch=0)`` and its ``batch_async``,
ragged arrays (samples of different sizes), many files as one (``shards``), pickling by
source, and what a reader declares it can do for :mod:`packread.torch`."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any, ClassVar, Union

import numpy as np

from . import _packread
from ._common import (
    Closable,
    Indices,
    PendingBatch,
    _Closed,
    as_indices,
    new_output,
    warn_skipped,
)
from ._options import Remote
from ._remote import open_remote
from ._shards import Shard, check_max_open, open_set, shard_list
from ._sources import FILES, FOLDER, MAPPING, OBJECT, URL, Source, in_place
from .errors import (
    DecodeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    MissingKeyError,
    PackreadIsADirectoryError,
    PackreadTypeError,
)

#: What ``batch(..., out=)`` takes: one array for a reader of one array, else a dict of them.
Out = Union[np.ndarray, dict[str, np.ndarray], None]

#: How ragged samples come back: a list (one array, or ``bytes``/``str``, per sample), or
#: ``"flat"``: ``(values, offsets)`` (images: ``(values, offsets, shapes)``), sample ``k``
#: being ``values[offsets[k]:offsets[k + 1]]``.
RAGGED_MODES = ("list", "flat")


class ArrayInfo:
    """Name, dtype and per-sample shape of one array a reader's samples hold; ``shape`` has
    ``None`` where samples differ in size (``ragged`` then says what they are)."""

    __slots__ = ("dtype", "name", "position", "ragged", "shape")

    def __init__(
        self,
        name: str,
        dtype: np.dtype[Any],
        shape: tuple[Any, ...],
        ragged: str | None = None,
        position: int | None = None,
    ) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        #: ``None`` for a fixed-size array, else ``"array"``, ``"bytes"``, ``"unicode"``,
        #: ``"images"``, ``"text"`` (UTF-8 bytes, given as ``str``), ``"json"`` (parsed) or
        #: ``"arrays"`` (each of its own shape).
        self.ragged = ragged
        #: Its position among the extension reader's arrays; ``None`` for an array the reader
        #: holds in Python (labels).
        self.position = position


def check_ragged(ragged: Any) -> str:
    if ragged not in RAGGED_MODES:
        raise InvalidArgumentError(f"ragged must be 'list' or 'flat', not {ragged!r}")
    return str(ragged)


def ragged_values(info: ArrayInfo, taken: tuple[Any, ...], mode: str) -> Any:
    """A finished ragged read (``RaggedResult.take()``), as ``mode`` says."""
    storage, nbytes, offsets, shapes = taken
    values = storage.view(np.uint8)[:nbytes].view(info.dtype)
    if info.ragged == "images":
        shapes = np.asarray(shapes or [], dtype=np.int64).reshape(-1, 3)
        if mode == "flat":
            return values, offsets, shapes
        bounds = offsets.tolist()
        return [
            values[a:b].reshape(s)
            for (a, b), s in zip(itertools.pairwise(bounds), shapes.tolist(), strict=True)
        ]
    if info.ragged == "arrays":
        if not values.dtype.isnative:
            values = values.astype(values.dtype.newbyteorder("="))
        shapes = [tuple(int(d) for d in s) for s in shapes or []]
        if mode == "flat":
            return values, offsets, shapes
        bounds = offsets.tolist()
        return [
            values[a:b].reshape(s)
            for (a, b), s in zip(itertools.pairwise(bounds), shapes, strict=True)
        ]
    values = values.reshape((-1, *info.shape[1:]))
    if not values.dtype.isnative:
        # As h5py and PyTables give sequences: in native byte order.
        values = values.astype(values.dtype.newbyteorder("="))
    if mode == "flat":
        return values, offsets
    bounds = offsets.tolist()
    if info.ragged in ("bytes", "text", "json"):
        raw = values.tobytes()
        items = [raw[a:b] for a, b in itertools.pairwise(bounds)]
        if info.ragged == "bytes":
            return items
        return [_parse(info, k, item) for k, item in enumerate(items)]
    if info.ragged == "unicode":
        text = values.astype("<u4", copy=False)
        return [text[a:b].tobytes().decode("utf-32-le") for a, b in itertools.pairwise(bounds)]
    return [values[a:b] for a, b in itertools.pairwise(bounds)]


def _parse(info: ArrayInfo, k: int, item: bytes) -> Any:
    """A text or JSON sample's bytes, decoded (UTF-8) or parsed, as webdataset decodes them."""
    try:
        return json.loads(item) if info.ragged == "json" else item.decode("utf-8")
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DecodeError(f"{info.name!r} of sample {k} of the batch: {e}") from None


class ArrayReader(Closable):
    """The base of every packread reader (see the module): ``len``, ``keys()`` (the arrays a
    batch holds), ``names()`` (the samples'), ``shape``, ``dtype``, ``batch`` and
    ``batch_async``, indexing, pickling, ``close``. Subclasses open their source and call
    :meth:`_bind`.

    >>> r = packread.open("train.h5")
    >>> isinstance(r, packread.ArrayReader), r.keys()
    (True, ['images', 'labels'])
    """

    #: The registry's name of the format; many files open as shards of it in the core.
    format: ClassVar[str] = ""
    #: Whether batches differ from epoch to epoch (random image crops): datasets then pass
    #: each epoch to ``batch``.
    varies_by_epoch: bool = False
    #: Samples stored (and decoded) together.
    samples_per_chunk: int = 1

    _reader: Any
    _set: Any = None
    _paths: list[str]
    _arrays: dict[str, ArrayInfo]
    _chosen: list[str]
    _single: bool = True
    _ragged: str = "list"
    _held: dict[str, np.ndarray]
    _warned: bool = False
    #: What the samples ``on_error="skip"`` replaces are, in its warning.
    _skipped_what: str = "image(s)"
    #: What the reader was made from, for pickles: the source and the options.
    _source: Any
    _kwargs: dict[str, Any]

    # -- opening -------------------------------------------------------------------------

    def _bind(
        self,
        reader: _packread.Reader,
        names: Sequence[str] | None = None,
        held: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Takes ``reader``'s arrays (named ``names`` in Python, default as the core names
        them), and ``held``: arrays this reader keeps in Python (labels), one value a sample."""
        self._reader = reader
        arrays = reader.arrays()
        names = [a[0] for a in arrays] if names is None else list(names)
        self._arrays = {
            n: ArrayInfo(n, a[1], tuple(a[2]), a[3], k)
            for k, (n, a) in enumerate(zip(names, arrays, strict=True))
        }
        self._held = dict(held or {})
        for n, values in self._held.items():
            self._arrays[n] = ArrayInfo(n, values.dtype, tuple(values.shape[1:]))
        self._chosen = list(self._arrays)

    def _choose(self, arrays: str | Sequence[str] | None) -> None:
        """Which arrays a batch holds: all (a dict), one by name (that array), or a list (a
        dict of those)."""
        if arrays is None:
            self._chosen, self._single = list(self._arrays), False
            return
        if isinstance(arrays, str):
            self._chosen, self._single = [self._known(arrays)], True
            return
        names = list(arrays)
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InvalidArgumentError(f"arrays names {twice[0]!r} more than once")
        if not names or any(not isinstance(n, str) for n in names):
            raise PackreadTypeError("arrays must be a name or a non-empty list of names")
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"arrays are named more than once: {names}")
        self._chosen, self._single = [self._known(n) for n in names], False

    def _known(self, name: str) -> str:
        if name not in self._arrays:
            raise MissingKeyError(
                f"{self._describe()}: no array {name!r} (arrays: {list(self._arrays)})"
            )
        return name

    def _target(
        self, src: Source, remote: Remote, what: str, *, tail: bool = False, folder: bool = False
    ) -> Any:
        """What the extension opens one file of this reader's format from: a URL opened here
        (one request for its head, or with ``tail`` its last bytes), an opened object, a
        path, a binary file object, or bytes in place. A folder (unless ``folder``: an image
        tree) or a mapping is refused, naming ``what`` the reader reads; an object a URL
        opened becomes the source a pickle carries (its stamp with it)."""
        if src.kind == FOLDER and not folder:
            raise PackreadIsADirectoryError(f"{src.name}: a folder, not {what}")
        if src.kind in (MAPPING, FILES):
            raise InvalidArgumentError(f"{src.name}: a {src.kind}, not {what}")
        target = open_remote(src.value, remote, tail=tail) if src.kind == URL else in_place(src)
        if src.kind in (URL, OBJECT):
            self._source = target
        return target

    def _open_shards(
        self,
        paths: list[str],
        options: dict[str, Any],
        shard_index: Any,
        max_open_shards: Any,
        state: dict[str, Any] | None,
    ) -> Any:
        """The shards at ``paths``, opened in the core as this reader's format with
        ``options`` (the extension's); sets ``_set`` and ``_paths``."""
        self._max_open = check_max_open(max_open_shards)
        self._set = open_set(
            self.format,
            paths,
            options,
            shard_index=shard_index,
            max_open=self._max_open,
            state=state,
        )
        self._paths = list(paths)
        self.samples_per_chunk = int(self._set.samples_per_chunk)
        return self._set

    def _shard_names(self) -> list[str]:
        """Every shard's sample names, shards in turn (each shard opened to list its own)."""
        self._check_open()
        out: list[str] = []
        for k in range(len(self._paths)):
            out.extend(self._set.shard_names(k))
        return out

    def _state(self) -> dict[str, Any] | None:
        """What a pickle carries beyond the source and options: the shards' counted state."""
        return None if self._set is None or isinstance(self._set, _Closed) else self._set.state()

    # -- what a reader holds -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._reader)

    def keys(self) -> list[str]:
        """The arrays a batch holds, in order.

        >>> packread.HDF5Reader("train.h5").keys()
        ['images', 'labels']
        """
        return list(self._chosen)

    def names(self) -> list[str] | None:
        """The samples' names, in sample order (members, files), or ``None`` where samples
        have none (rows of an array).

        >>> print(packread.HDF5Reader("train.h5").names())
        None
        """
        return None

    @property
    def shape(self) -> Any:
        """Shape of one sample: a tuple for a batch of one array, else a dict by array;
        ``None`` where samples differ in size."""
        shapes = {n: self._arrays[n].shape for n in self._chosen}
        return shapes[self._chosen[0]] if self._single else shapes

    @property
    def dtype(self) -> Any:
        """dtype of the samples (of a ragged array, its elements'): one for a batch of one
        array, else a dict by array."""
        dtypes = {n: self._arrays[n].dtype for n in self._chosen}
        return dtypes[self._chosen[0]] if self._single else dtypes

    @property
    def ragged_keys(self) -> list[str]:
        """The arrays whose samples differ in size (a batch holds a list of them, or
        ``(values, offsets)``): such a batch cannot be read into ``out=``."""
        return [n for n in self._chosen if self._arrays[n].ragged is not None]

    @property
    def paths(self) -> list[str]:
        """The reader's files, in sample order."""
        return list(self._paths)

    @property
    def shards(self) -> list[Shard]:
        """Each file's path and the global indices of its samples (one for a reader of one
        file).

        >>> packread.HDF5Reader(["train.h5", "train.h5"]).shards
        [Shard(path='train.h5', range=range(0, 64)), Shard(path='train.h5', range=range(64, 128))]
        """
        if self._set is not None:
            return shard_list(self._paths, list(self._set.lengths))
        return shard_list(self._paths[:1], [len(self)])

    @property
    def shard_lengths(self) -> list[int] | None:
        """Samples in each shard, for a reader of several files; ``None`` otherwise."""
        return None if self._set is None else list(self._set.lengths)

    @property
    def open_shards(self) -> int:
        """Files open now."""
        return 1 if self._set is None else int(self._set.open_count())

    @property
    def errors(self) -> dict[int, str]:
        """Every sample found not to decode so far (images read with ``on_error="skip"``), by
        its index, with why; ``{}`` for readers that skip nothing."""
        source = self._set if self._set is not None else getattr(self, "_inner", None)
        if source is None or not hasattr(source, "errors"):
            return {}
        return dict(source.errors())

    def _error_count(self) -> int:
        if self.closed:  # a read started before close() finishes without its warning
            return 0
        if self._set is not None:
            return int(self._set.error_count())
        inner = getattr(self, "_inner", None)
        log = getattr(inner, "error_log", None)
        return 0 if log is None else len(log)

    def _warn_errors(self) -> None:
        if not self._warned and self._error_count():
            self._warned = True
            warn_skipped(self._describe(), self.errors, stacklevel=4, what=self._skipped_what)

    # -- reading -------------------------------------------------------------------------

    def batch(self, idx: Indices, *, out: Out = None, epoch: int = 0) -> Any:
        """Samples ``idx`` (any sequence of ints, an integer array, a range or a slice; order,
        duplicates and negative indices kept) stacked along a new first axis, read in parallel
        with the GIL released: an array for a batch of one array, else a dict of arrays; into
        ``out`` when given (same shape and dtype, C-contiguous, writeable). ``epoch`` is what
        random augmentation draws from (image crops); other readers ignore it.

        >>> packread.NpyReader("data/train/").batch([3, -1]).shape
        (2, 4, 8)
        """
        return self.batch_async(idx, out=out, epoch=epoch).result()

    def batch_async(self, idx: Indices, *, out: Out = None, epoch: int = 0) -> PendingBatch[Any]:
        """Like :meth:`batch`, but returns at once: arguments are checked now (the same errors
        as ``batch``), the reads run on packread's pool; ``.result()`` gives the batch.

        >>> packread.NpyReader("data/train/").batch_async(range(4)).result().shape
        (4, 4, 8)
        """
        return self._start(idx, out, epoch, self._chosen, self._single)

    def _start(
        self, idx: Indices, out: Out, epoch: int, names: list[str], single: bool
    ) -> PendingBatch[Any]:
        """Starts a batch of the arrays ``names`` (the bare array where ``single``)."""
        self._check_open()
        _check_epoch(epoch)
        rows = as_indices(idx, len(self), self._describe())
        if out is not None and not isinstance(out, dict):
            if not single:
                raise PackreadTypeError(
                    "out= must be a dict of arrays for a batch of several arrays"
                )
            out = {names[0]: out}  # checked by the extension: an ndarray of the right kind
        given: dict[str, Any] = dict(out) if out is not None else {}
        unknown = set(given) - set(names)
        if unknown:
            raise InvalidArgumentError(
                f"out= names arrays this batch does not read: {sorted(unknown)}"
            )
        infos = [self._arrays[n] for n in names]
        fixed = [i for i in infos if i.position is not None and i.ragged is None]
        ragged = [i for i in infos if i.ragged is not None]
        for i in ragged:
            if i.name in given:
                raise InvalidArgumentError(
                    f"out= cannot hold {i.name!r}: its samples are variable-length"
                )
        result: dict[str, Any] = {}
        for i in fixed:
            result[i.name] = given.get(i.name)
            if result[i.name] is None:
                result[i.name] = new_output(len(rows), i.shape, i.dtype)
        reads = []
        if fixed or not ragged:
            # Started whenever any array is read in place: it also checks the indices.
            reads.append(
                self._reader.read_into(
                    rows,
                    [i.position for i in fixed],
                    [result[i.name] for i in fixed],
                    int(epoch),
                )
            )
        pending = []
        for i in ragged:
            read, slot = self._reader.read_ragged(rows, i.position, int(epoch))
            reads.append(read)
            pending.append((i, slot))
        for n, values in self._held.items():
            if n in names:
                self._check_rows(rows)
                target = given.get(n)
                if target is not None and (
                    not isinstance(target, np.ndarray)
                    or target.shape != (len(rows), *values.shape[1:])
                    or target.dtype != values.dtype
                ):
                    raise InvalidArgumentError(
                        f"out= for {n!r} must be a {values.dtype} array of shape "
                        f"{(len(rows), *values.shape[1:])}"
                    )
                result[n] = np.take(values, rows, axis=0, out=target)
        mode = self._ragged

        def value() -> Any:
            return result[names[0]] if single else {n: result[n] for n in names}

        def finish() -> Any:
            for i, slot in pending:
                result[i.name] = ragged_values(i, slot.take(), mode)
            self._warn_errors()
            return value()

        return PendingBatch(reads, None if pending else value(), finish)

    def _read_into_args(self, idx: Indices, out: Out, epoch: int = 0) -> tuple[Any, ...] | None:
        """``(binding, rows, positions, outs, epoch)``: the read of ``idx`` into ``out`` (every
        array this reader's batches hold), checked, as :func:`read_together` runs it beside
        other readers' reads (arrays held in memory, labels say, are taken now, as
        :meth:`batch_async` takes them); ``None`` where this reader's batches are not read
        that way (variable-length arrays, ``out`` not given for every array). A subclass whose
        ``batch_async`` reads some batches otherwise says so here."""
        names = self._chosen
        infos = [self._arrays[n] for n in names]
        if any(i.ragged is not None for i in infos):
            return None
        if isinstance(out, dict):
            if set(out) != set(names):
                return None
            given = out
        elif self._single:
            given = {names[0]: out}
        else:
            return None
        self._check_open()
        _check_epoch(epoch)
        rows = as_indices(idx, len(self), self._describe())
        fixed = [i for i in infos if i.position is not None]
        for n, values in self._held.items():
            if n in given:
                self._check_rows(rows)
                np.take(values, rows, axis=0, out=given[n])
        outs = [given[i.name] for i in fixed]
        return (self._reader, rows, [i.position for i in fixed], outs, int(epoch))

    def _check_rows(self, rows: np.ndarray) -> None:
        n = len(self)
        bad = rows[(rows < -n) | (rows >= n)]
        if bad.size:
            raise IndexOutOfRangeError(
                f"{self._describe()}: index {int(bad[0])} is out of range for {n} samples"
            )

    def __getitem__(self, i: int) -> Any:
        """Sample ``i`` (a batch of one, without its first axis)."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise PackreadTypeError(f"a sample index is an int, not {type(i).__name__}")
        one = self.batch([int(i)])
        if isinstance(one, dict):
            return {k: v[0] for k, v in one.items()}
        return one[0]

    # -- closing and pickling ------------------------------------------------------------

    def close(self) -> None:
        """Releases the reader's files; later calls raise ``ReaderClosedError`` (a batch
        already started finishes first). A ``with`` block closes the reader at its end.

        >>> with packread.HDF5Reader("train.h5") as reader:
        ...     batch = reader.batch([0, 1])
        >>> reader.closed
        True
        >>> reader.close()  # closing again does nothing
        """
        if not self.closed:
            super().close()
            if self._set is not None:
                self._set = _Closed(f"{type(self).__name__} of {self._describe()}")

    def _describe(self) -> str:
        if not self.__dict__.get("_paths"):
            return type(self).__name__
        n = len(self._paths)
        return self._paths[0] if n == 1 else f"{self._paths[0]} (and {n - 1} more shards)"

    def __reduce__(self) -> tuple[Any, ...]:
        # By source and options (a file object or bytes travel as themselves), with the
        # shards' counted state: a DataLoader worker opens no shard to count.
        source = self._source
        if isinstance(source, memoryview):  # the one bytes-like type pickle refuses
            source = source.tobytes()
        return (_restore, (type(self), source, self._kwargs, self._state()))

    def _setup(self, source: Any, state: dict[str, Any] | None, **kwargs: Any) -> None:
        """Opens ``source`` with the new-vocabulary ``kwargs`` (each subclass's own)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        files = "" if self._set is None else f", {len(self._paths)} shards"
        name, keys = type(self).__name__, list(self._chosen)
        return f"{name}({self._describe()!r}, {len(self)} samples{files}, keys={keys})"


def _restore(cls: type, source: Any, kwargs: dict[str, Any], state: Any) -> Any:
    reader = cls.__new__(cls)
    reader._setup(source, state, **kwargs)
    return reader


def _check_epoch(epoch: Any) -> None:
    """A batch's ``epoch``: an int >= 0 (not a bool)."""
    if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
        raise InvalidArgumentError(f"epoch must be an int >= 0, got {epoch!r}")


def read_together(
    reads: Sequence[tuple[ArrayReader, tuple[Any, ...]]], value: Any
) -> PendingBatch[Any]:
    """Starts reads of several readers (each with its :meth:`ArrayReader._read_into_args`) as
    one job on packread's pool: a mixed batch costs one hand-off and one wait. ``result()`` is
    ``value`` (the arrays read into), after each reader has said its skipped samples."""
    started = _packread.read_together([args for _, args in reads])

    def finish() -> Any:
        for reader, _ in reads:
            reader._warn_errors()
        return value

    return PendingBatch(started, None, finish)
