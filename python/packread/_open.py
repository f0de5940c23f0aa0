"""Which reader a path needs: the format of a file (by suffix, else by its first bytes), a
folder or a pattern, shared by :mod:`packread.torch` and the command line."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Union

from ._common import BatchReader, expand_paths, open_regular
from ._hdf5 import HDF5Reader
from ._npy import NpyReader
from ._remote import is_url
from ._zip import NpzReader, ZipReader
from .errors import (
    InvalidArgumentError,
    PackreadFileNotFoundError,
    PackreadIsADirectoryError,
    PackreadOSError,
    PackreadTypeError,
)

Source = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]], BatchReader]

HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5", ".nc")
#: The HDF5 superblock signature; it sits at byte 0 or, after a user block, at 512, 1024, ...
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
NPY_MAGIC = b"\x93NUMPY"

#: Options only :class:`~packread.ImageReader` takes: given any of them, a path opens as images.
IMAGE_OPTIONS = frozenset(
    {
        "size",
        "resize",
        "crop",
        "flip",
        "layout",
        "mode",
        "normalize",
        "exif_transpose",
        "on_error",
        "labels",
        "scale",
        "ratio",
        "max_pixels",
        "ragged",
    }
)


def opens_images(source: Any, options: dict[str, Any]) -> bool:
    """Whether :func:`open_reader` opens ``source`` as an :class:`~packread.ImageReader`: a
    path given with an image option, or an ``ImageFolder`` tree."""
    if isinstance(source, (list, tuple)):
        return bool(IMAGE_OPTIONS.intersection(options))
    if not isinstance(source, (str, os.PathLike)):
        return False
    return bool(IMAGE_OPTIONS.intersection(options)) or _is_image_tree(os.fspath(source))


def _is_image_tree(path: str) -> bool:
    """A folder of class folders and no ``.npy``/``.npz`` files: the ``ImageFolder`` layout."""
    if not os.path.isdir(path):
        return False
    entries = list(os.scandir(path))
    if any(e.name.endswith((".npy", ".npz")) for e in entries):
        return False
    return any(e.is_dir() for e in entries)


def open_reader(source: Source, datasets: Any = None, **options: Any) -> BatchReader:
    """The packread reader for ``source``: an ``.h5``/``.hdf5`` file (``datasets``: dataset
    paths), a ``.zip`` archive (``datasets``: the members, a pattern or a list), a folder, glob
    pattern or list of ``.npy`` files, or of ``.npz`` files (``datasets``: the keys). A glob or
    list of HDF5 files or ZIP archives opens as one :class:`~packread.ShardedReader`. A reader
    (anything with ``__len__``, ``shape``, ``dtype`` and ``batch``) is returned as it is.
    A file with another suffix is recognised by its first bytes. Encoded images open as an
    :class:`~packread.ImageReader`: an ``ImageFolder`` tree, or any path given with an image
    option (``size=``, ``crop=``, ...; ``datasets`` then names the ZIP members or the HDF5
    dataset of images).

    >>> reader = open_reader("train.h5", "images")
    >>> reader.batch([0, 1]).shape == (2, *reader.shape)
    True
    """
    if not isinstance(source, (str, os.PathLike, list, tuple)):
        if not isinstance(source, BatchReader):
            raise PackreadTypeError(
                "source must be a path, a list of paths or a reader (with __len__, shape, "
                f"dtype and batch), not {type(source).__name__}"
            )
        if datasets is not None or options:
            raise InvalidArgumentError(
                "datasets= and reader options apply when source is a path; this source is "
                "a reader already"
            )
        return source
    if opens_images(source, options):
        from ._image import ImageReader

        if datasets is not None:
            first = source[0] if isinstance(source, (list, tuple)) else source
            path = os.fspath(first)  # type: ignore[arg-type]
            is_hdf5 = path.lower().endswith(HDF5_SUFFIXES) or sniff(path) == "hdf5"
            options["dataset" if is_hdf5 else "members"] = datasets
        return ImageReader(source, **options)  # type: ignore[arg-type]
    kind, target = source_kind(source)
    if kind == "hdf5":
        return HDF5Reader(target, datasets, **options)
    if kind == "zip":
        if datasets is not None:
            options["members"] = datasets
        return ZipReader(target, **options)
    if kind == "npz":
        if datasets is not None:
            options["keys"] = datasets
        return NpzReader(target, **options)
    if datasets is not None:
        raise InvalidArgumentError("datasets= does not apply to .npy files (one array each)")
    return NpyReader(target, **options)


def source_kind(source: Any) -> tuple[str, Any]:
    """``("hdf5" | "zip" | "npz" | "npy", what the reader opens)``: a path, glob or list of
    files for HDF5 and ZIP (several open as shards), a folder or a list of files for NPY and
    NPZ."""
    if isinstance(source, (list, tuple)):
        files = [os.fspath(p) for p in source]
        if any(is_url(f) for f in files) and not all(is_url(f) for f in files):
            raise InvalidArgumentError("a list source holds either URLs or local paths, not both")
        if not files:
            raise InvalidArgumentError("source is an empty list of files")
        suffixes = {os.path.splitext(f)[1].lower() for f in files}
        if suffixes == {".npz"}:
            return "npz", files
        if suffixes == {".npy"}:
            return "npy", files
        if suffixes and all(x in HDF5_SUFFIXES for x in suffixes):
            return "hdf5", files
        if suffixes == {".zip"}:
            return "zip", files
        raise InvalidArgumentError(
            "a list source must hold files of one format (.npy, .npz, .h5/.hdf5 or .zip), "
            f"not {sorted(suffixes)}"
        )
    path = os.fspath(source)
    if is_url(path):
        # An object (or a glob over a listing): told by its suffix, the readers open it.
        lower = path.lower()
        for suffixes, kind in ((HDF5_SUFFIXES, "hdf5"), ((".zip",), "zip"), ((".npy",), "npy")):
            if lower.endswith(suffixes):
                return kind, path
        raise InvalidArgumentError(
            f"{path}: cannot tell the format of an object from its name (expected .h5/.hdf5, "
            ".zip or .npy); pass a reader instead"
        )
    if os.path.isdir(path):
        names = os.listdir(path)
        has_npy = any(n.endswith(".npy") for n in names)
        has_npz = any(n.endswith(".npz") for n in names)
        if has_npy and has_npz:
            raise InvalidArgumentError(
                f"{path}: the folder holds both .npy and .npz files; pass a glob pattern"
            )
        if not (has_npy or has_npz):
            raise PackreadFileNotFoundError(f"{path}: no .npy or .npz files in this folder")
        return ("npz" if has_npz else "npy"), path
    lower = path.lower()
    if lower.endswith(HDF5_SUFFIXES):
        return "hdf5", path
    if lower.endswith(".zip"):
        return "zip", path
    if lower.endswith(".npz"):
        return "npz", expand_paths(path, ".npz")
    if lower.endswith(".npy"):
        return "npy", expand_paths(path, ".npy")
    sniffed = sniff(path)
    if sniffed in ("hdf5", "zip"):
        return sniffed, path
    if sniffed == "npy":
        return "npy", [path]
    raise InvalidArgumentError(
        f"{path}: cannot tell the format (expected .h5/.hdf5, .zip, or a folder, list or glob "
        "of .npy or .npz files); pass a reader instead"
    )


def sniff(path: str) -> str | None:
    """``"hdf5"``, ``"zip"`` or ``"npy"`` from a file's first bytes; ``None`` if none fits (or
    the file cannot be read, or is a folder). A FIFO, socket or device is refused at once
    (``PackreadOSError``), never opened in a way that blocks."""
    try:
        with open_regular(path) as f:
            head = f.read(8)
            if head == HDF5_SIGNATURE:
                return "hdf5"
            if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
                return "zip"
            if head.startswith(NPY_MAGIC):
                return "npy"
            size = os.fstat(f.fileno()).st_size
            at = 512
            while at + 8 <= size and at <= 1 << 20:
                f.seek(at)
                if f.read(8) == HDF5_SIGNATURE:
                    return "hdf5"
                at *= 2
    except PackreadIsADirectoryError:
        return None
    except PackreadOSError:
        raise
    except OSError:
        return None
    return None
