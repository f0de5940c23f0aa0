"""The batch protocol every reader shares, written once over the extension's ``Reader`` (the
engine's one binding): ``len``, ``keys()`` (the arrays a sample holds), ``shape`` and ``dtype``
of one sample, ``batch`` and ``batch_async`` into new arrays or the caller's ``out=``."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from . import _packread
from ._common import Closable, Indices, PendingBatch, as_indices, new_output
from .errors import InvalidArgumentError, MissingKeyError, PackreadTypeError

#: What ``batch(..., out=)`` takes: one array for a reader of one array, else a dict of them.
Out = Union[np.ndarray, dict[str, np.ndarray], None]


class ArrayInfo:
    """Name, dtype and per-sample shape of one array a reader's samples hold."""

    __slots__ = ("dtype", "name", "shape")

    def __init__(self, name: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape


class ArrayReader(Closable):
    """A reader of samples that hold one or several fixed-size arrays. Subclasses set
    ``_reader`` (the extension's ``Reader``) and, for readers that return one array rather than
    a dict, ``_single``; they may give arrays other names in Python (``_names``)."""

    _reader: Any
    #: ``batch`` returns one array (the reader has one array, or was asked for one by name).
    _single: bool = True
    #: Each sample is read on its own: no sample is decoded together with another.
    samples_per_chunk = 1

    def _bind(self, reader: _packread.Reader, names: Sequence[str] | None = None) -> None:
        """Takes ``reader``'s arrays, named ``names`` in Python (default: as the core names
        them)."""
        self._reader = reader
        arrays = reader.arrays()
        names = [a[0] for a in arrays] if names is None else list(names)
        self._arrays = {
            n: ArrayInfo(n, a[1], tuple(a[2])) for n, a in zip(names, arrays, strict=True)
        }
        self._positions = {n: k for k, n in enumerate(names)}

    def __len__(self) -> int:
        return len(self._reader)

    def _array_keys(self) -> list[str]:
        return list(self._arrays)

    @property
    def shape(self) -> Any:
        """Shape of one sample: a tuple for a reader of one array, else a dict by array."""
        shapes = {n: a.shape for n, a in self._arrays.items()}
        return next(iter(shapes.values())) if self._single else shapes

    @property
    def dtype(self) -> Any:
        """dtype of the samples: one for a reader of one array, else a dict by array."""
        dtypes = {n: a.dtype for n, a in self._arrays.items()}
        return next(iter(dtypes.values())) if self._single else dtypes

    def _info(self, name: str) -> ArrayInfo:
        try:
            return self._arrays[name]
        except KeyError:
            raise MissingKeyError(
                f"{self._describe()}: no array {name!r} (arrays: {list(self._arrays)})"
            ) from None

    def _start(
        self, idx: Indices, names: list[str], out: Out, epoch: int = 0
    ) -> tuple[Any, dict[str, Any]]:
        """Starts reading samples ``idx`` of arrays ``names`` into new arrays, or those ``out``
        holds, in ``epoch`` (what random augmentation draws from); returns the read and the
        arrays by name."""
        self._check_open()
        rows = as_indices(idx, len(self), self._describe())
        if out is not None and not isinstance(out, dict):
            if len(names) != 1:
                raise PackreadTypeError(
                    "out= must be a dict of arrays for a batch of several arrays"
                )
            out = {names[0]: out}  # checked by the extension: an ndarray of the right kind
        result: dict[str, Any] = dict(out) if out is not None else {}
        unknown = set(result) - set(names)
        if unknown:
            raise InvalidArgumentError(
                f"out= names arrays this batch does not read: {sorted(unknown)}"
            )
        for n in names:
            if n not in result:
                info = self._info(n)
                result[n] = new_output(len(rows), info.shape, info.dtype)
        positions = [self._positions[n] for n in names]
        read = self._reader.read_into(rows, positions, [result[n] for n in names], epoch)
        return read, {n: result[n] for n in names}

    def batch(self, idx: Indices, *, out: Out = None) -> Any:
        """Samples ``idx`` (any sequence of ints, an integer array, a range or a slice; order,
        duplicates and negative indices kept) stacked along a new first axis, read in parallel
        with the GIL released: an array for a reader of one array, else a dict of arrays; into
        ``out`` when given (same shape and dtype, C-contiguous, writeable).

        >>> packread.NpyReader("data/train/").batch([3, -1]).shape
        (2, 4, 8)
        """
        return self.batch_async(idx, out=out).result()

    def batch_async(self, idx: Indices, *, out: Out = None) -> PendingBatch[Any]:
        """Like :meth:`batch`, but returns at once: arguments are checked now (the same errors
        as ``batch``), the reads run on packread's pool; ``.result()`` gives the batch.

        >>> packread.NpyReader("data/train/").batch_async(range(4)).result().shape
        (4, 4, 8)
        """
        names = self._array_keys()
        read, arrays = self._start(idx, names, out)
        return PendingBatch(read, arrays[names[0]] if self._single else arrays)

    def _describe(self) -> str:
        return str(self._reader.location)


def deprecated_sample_keys(reader: Any, names: list[str]) -> list[str]:
    """``keys()`` of a reader whose keys used to name its samples: still the samples for this
    release, with a warning; ``names()`` is their name now, and ``keys()`` will name the
    arrays, as it does on every other reader."""
    warnings.warn(
        f"{type(reader).__name__}.keys() returns the samples' names; use names(). In the "
        "next release keys() will return the array names, as on every reader.",
        DeprecationWarning,
        stacklevel=3,
    )
    return names
