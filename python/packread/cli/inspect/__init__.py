"""``packread inspect``: what a file or folder holds, how it is laid out on disk, and what that
layout costs a training loop reading random samples, each piece of advice with its reason in
numbers.

Only metadata is read: HDF5 chunk indexes (the same ones packread reads at open), ZIP central
directories, NPY headers, and for folders the file sizes plus the headers of a few files spread
over the folder. A file of any size inspects in about the time it takes to open it.

Image sources (what :class:`packread.ImageReader` reads: an ``ImageFolder`` tree, as a folder
or in a ZIP, and a ZIP of images labelled by its ``dataset.json``) are the exception: their
formats, sizes and classes are in every image's header, so every image is read (on a few
threads) and its header parsed, though none is decoded. The report counts the images per
format (and the undecodable ones, naming the first few), the CMYK and progressive JPEGs, the
images by their shorter side (to choose ``resize``), the spread of widths and heights, and the
images per class (:attr:`Report.images`).

>>> report = inspect("train.h5")
>>> [item.name for item in report.items]
['images', 'labels']
>>> print(report.render())  # doctest: +SKIP

The modules: :mod:`.report` (what an inspection produces), :mod:`.hdf5`, :mod:`.archive` (ZIP
and NPZ files), :mod:`.npy` (NPY files and folders), :mod:`.tars` (tar shards) and
:mod:`.images` (image sources) for each format, :mod:`.filters` (HDF5 filters in short),
:mod:`.fixes` (the commands advice suggests), :mod:`.thresholds` (the numbers advice is judged
by) and :mod:`.render` (text and JSON).
"""

from __future__ import annotations

import glob
import os
import types

from ..._keyed import COMPRESSED_SUFFIXES
from ..._registry import sniff
from ...errors import PackreadError, UnsupportedError
from .. import _images, _layout
from .._format import human_bytes as human_bytes
from .._format import human_seconds as human_seconds
from .._layout import samples_per_chunk_for as samples_per_chunk_for
from .archive import _inspect_zip
from .clips import _inspect_clips
from .filters import codec_of as codec_of
from .filters import describe_filter as describe_filter
from .hdf5 import _inspect_hdf5
from .images import _inspect_images
from .npy import _inspect_folder, _inspect_npy_file
from .report import Advice as Advice
from .report import ClipSummary as ClipSummary
from .report import ImageSummary as ImageSummary
from .report import Item as Item
from .report import Report as Report
from .tars import _inspect_tars
from .thresholds import INFLATE_BYTES_PER_S as INFLATE_BYTES_PER_S
from .thresholds import LISTED_MEMBERS as LISTED_MEMBERS
from .thresholds import MANY_FILES as MANY_FILES
from .thresholds import NEGLIGIBLE_BYTES as NEGLIGIBLE_BYTES
from .thresholds import SAMPLED_FILES as SAMPLED_FILES
from .thresholds import SMALL_FILE_BYTES as SMALL_FILE_BYTES
from .thresholds import SPLIT_CHUNK_BYTES as SPLIT_CHUNK_BYTES
from .thresholds import TINY_CHUNK_BYTES as TINY_CHUNK_BYTES
from .thresholds import WEAK_RATIO as WEAK_RATIO

__all__ = [
    "INFLATE_BYTES_PER_S",
    "LISTED_MEMBERS",
    "MANY_FILES",
    "MIN_CHUNK_BYTES",
    "NEGLIGIBLE_BYTES",
    "SAMPLED_FILES",
    "SMALL_FILE_BYTES",
    "SPLIT_CHUNK_BYTES",
    "TINY_CHUNK_BYTES",
    "WEAK_RATIO",
    "Advice",
    "ClipSummary",
    "ImageSummary",
    "Item",
    "Report",
    "codec_of",
    "describe_filter",
    "human_bytes",
    "human_seconds",
    "inspect",
    "samples_per_chunk_for",
]

#: Chunks below this spend more on per-chunk work (a read, a decoder call, an index entry)
#: than on their bytes; chunks are best at least this large, or one whole sample. (Defined in
#: ``packread.cli._layout``, which ``packread convert`` shares; the other numbers advice is
#: judged by are in :mod:`.thresholds`.)
MIN_CHUNK_BYTES = _layout.MIN_CHUNK_BYTES


def inspect(source: str | os.PathLike[str], *, clips: bool = False) -> Report:
    """Inspects an HDF5 file (h5py or PyTables), a ZIP archive, an NPZ or NPY file, a folder
    of ``.npy`` or ``.npz`` files, tar shards (a ``.tar``, a folder of them or a glob such as
    ``"shards/*.tar"``: keys, fields, missing fields, image formats; see :mod:`.tars`), or an
    image source: an ``ImageFolder`` tree (a folder of class folders, or a ZIP holding one) or a
    ZIP of images. Only metadata is read, except for
    image sources, whose every image header is. With ``clips``, a source is inspected as
    :class:`packread.ClipReader` reads it (see :mod:`.clips`).

    >>> report = inspect("train.h5")
    >>> sorted({a.code for a in report.advice})
    []
    >>> inspect("images.zip").format
    'image-zip'
    """
    path = os.fspath(source)
    if glob.has_magic(path):
        shards = sorted(glob.glob(path))
        if not shards:
            raise FileNotFoundError(f"{path}: no file matches")
        if all(sniff(p) == "tar" for p in shards):
            return _inspect_tars(shards, path)
        raise UnsupportedError(
            f"{path}: a pattern inspects tar shards; inspect other files one by one"
        )
    if clips:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file or folder")
        return _inspect_clips(path)
    if os.path.isdir(path):
        if _images.is_image_tree(path):
            try:
                return _inspect_images(path, "image-folder")
            except PackreadError as e:
                raise UnsupportedError(
                    f"{path}: no .npy or .npz files, and not an ImageFolder tree: {e}"
                ) from None
        tars = sorted(e.path for e in os.scandir(path) if e.name.lower().endswith(".tar"))
        if tars and not any(e.name.endswith((".npy", ".npz")) for e in os.scandir(path)):
            return _inspect_tars(tars, path)
        loose = _images.loose_images(path)
        if loose and not any(e.name.endswith((".npy", ".npz")) for e in os.scandir(path)):
            raise _images.loose_images_error(path, loose)
        return _inspect_folder(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file or folder")
    lower = path.lower()
    kind = sniff(path)
    if kind == "hdf5":
        return _inspect_hdf5(path)
    if kind == "zip":
        if _images.is_image_zip(path):
            return _inspect_images(path, "image-zip")
        return _inspect_zip(path, npz=lower.endswith(".npz"))
    if kind == "npy":
        return _inspect_npy_file(path)
    if kind == "tar" or lower.endswith(COMPRESSED_SUFFIXES):
        # A compressed tar is refused by the walk, with the command that converts it.
        return _inspect_tars([path], path)
    raise UnsupportedError(
        f"{path}: not an HDF5, ZIP, NPZ, NPY or tar file, nor a folder of .npy or .npz files"
    )


# These functions have always been public here: they are documented (and their examples run)
# as part of this module, wherever they are defined.
for _function in (describe_filter, codec_of, samples_per_chunk_for, human_bytes, human_seconds):
    _function.__module__ = __name__
del _function

#: The examples of the report's classes, for doctest (which finds on its own only what a
#: module defines itself): they run with this module's names, as they did when the classes
#: were defined here. The classes keep their own module.
__test__: dict[str, object] = {}
for _cls in (Item, Advice, Report, ImageSummary, ClipSummary):
    __test__[_cls.__name__] = _cls
    for _name, _value in vars(_cls).items():
        if not _name.startswith("_") and isinstance(_value, types.FunctionType):
            __test__[f"{_cls.__name__}.{_name}"] = _value
del _cls, _name, _value
