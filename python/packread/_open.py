"""The one dispatcher: :func:`open` gives the reader of any source, asking the format registry
which format it is. The formats' modules register themselves when imported, here."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Union

from . import _clip, _hdf5, _image, _keyed, _npy, _npz, _zip  # noqa: F401  (each registers its format)
from ._common import BatchReader
from ._deprecated import GROUPED, RENAMED, source_names, unknown, warn
from ._registry import Format, detect, get
from ._sources import classify
from .errors import InvalidArgumentError, PackreadTypeError

Source = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]], BatchReader, Any]


def resolve(source: Any, format: str | None, options: dict[str, Any]) -> Format:
    """The format ``source`` is read as, with ``options``: ``format`` when given, else what the
    registry finds."""
    if format is not None:
        return get(format)
    return detect(classify(source, options.get("remote")), options)


def check_options(
    fmt: Format, options: dict[str, Any], where: str, own: Iterable[str] = ()
) -> None:
    """Refuses an option the format's reader does not take (an earlier release's name is
    left to the reader, which warns), suggesting the nearest of the reader's options and
    ``own``, the caller's own parameters."""
    from_old = set(RENAMED) | set(GROUPED)
    for name in options:
        if name not in fmt.options and name not in from_old:
            raise unknown(where, name, [*fmt.options, *own])


@source_names("packread.open")
def open(source: Source, *, format: str | None = None, **options: Any) -> BatchReader:
    """The packread reader for ``source``, of the format the registry finds (or ``format=``
    names: ``"hdf5"``, ``"zip"``, ``"npz"``, ``"npy"``, ``"images"``).

    ``source`` is a path, a URL, a list or glob of files, or bytes:

    - ``.h5``/``.hdf5`` files: :class:`~packread.HDF5Reader` (``arrays``: dataset paths);
    - ``.zip`` archives: :class:`~packread.ZipReader` (``members``: a pattern or names), or,
      when the archive holds images only (as ``packread convert`` writes them), or an image
      option is given (``decode=``, ``labels=``, ``images=``...), an
      :class:`~packread.ImageReader`;
    - a folder of class folders (``ImageFolder``): an :class:`~packread.ImageReader`;
    - one ``.npy`` file, or a mapping ``{"x": "X.npy", "y": "y.npy"}``: the rows of its
      arrays (:class:`~packread.NpyReader`); one ``.npz`` file: the rows of its stored
      arrays (:class:`~packread.NpzReader`, ``arrays``: keys);
    - a folder, glob or list of ``.npy`` files: :class:`~packread.NpyReader`, one sample a
      file; of ``.npz`` files: :class:`~packread.NpzReader`.

    A list or glob of HDF5 files or archives is one reader over their concatenated samples
    (``reader.shards``). A file with another suffix is recognised by its first bytes. A reader
    (anything with ``__len__``, ``shape``, ``dtype`` and ``batch``) is returned as it is.

    >>> reader = packread.open("train.h5", arrays="images")
    >>> reader.batch([0, 1]).shape == (2, *reader.shape)
    True
    """
    if isinstance(source, BatchReader) and not isinstance(source, (str, os.PathLike)):
        if format is not None or options:
            raise InvalidArgumentError(
                "format= and reader options apply when source is a path; this source is a "
                "reader already"
            )
        return source
    fmt = resolve(source, format, options)
    check_options(fmt, options, "packread.open")
    return fmt.reader(source, **options)  # type: ignore[no-any-return]


def legacy_datasets(source: Any, datasets: Any, options: dict[str, Any], where: str) -> None:
    """Puts the ``datasets=`` of earlier releases (what to read, whatever the format) into
    ``options`` under its name now: ``arrays`` (HDF5 datasets, NPZ keys), ``members`` (of an
    archive) or ``images`` (the HDF5 dataset of images)."""
    warn(f"{where}(datasets=)", "arrays= (HDF5, NPZ), members= (ZIP) or images= (images in HDF5)")
    fmt = resolve(source, options.get("format"), options)
    key = "members" if fmt.name == "zip" else "arrays"
    if fmt.name == "images":
        first = classify(source, options.get("remote")).first.lower()
        key = "images" if first.endswith(_hdf5.HDF5_SUFFIXES) else "members"
    if key in options:
        raise PackreadTypeError(f"{where}() got both datasets= and {key}=")
    options[key] = datasets


def open_reader(source: Source, datasets: Any = None, **options: Any) -> BatchReader:
    """Deprecated: :func:`packread.open` (``datasets`` is ``arrays``, or ``members`` of an
    archive).

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     packread.open_reader("train.h5", "images").shape
    (3, 32, 32)
    """
    warn("packread.open_reader()", "packread.open()")
    if datasets is not None:
        legacy_datasets(source, datasets, options, "open_reader")
    return open(source, **options)


__all__ = ["open", "open_reader"]
