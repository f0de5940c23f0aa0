"""Encoded images (JPEG, PNG, WebP) decoded on packread's threads into batches:
:class:`ImageReader`, over ZIP members, an ``ImageFolder`` tree (a folder, or a ZIP holding
one) or the rows of an HDF5 dataset of bytes. Which images, their names and labels are found
in the core, the same for one file and for every shard of many."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _packread
from ._common import check_num_threads
from ._deprecated import GROUPED, fold, source_names
from ._hdf5 import HDF5_SUFFIXES
from ._options import DEFAULT_MAX_IMAGE_BYTES, ImageDecode, Limits, Remote
from ._reader import ArrayReader, check_ragged
from ._registry import Format, head_of, identify, register
from ._sources import (
    BYTES,
    FILE,
    FILE_OBJECT,
    FILES,
    FOLDER,
    OBJECT,
    URL,
    Source,
    classify,
    in_place,
)
from ._zip import is_zip, members_option
from .errors import InvalidArgumentError, PackreadError, UnsupportedError

#: The file names ``torchvision.datasets.ImageFolder`` takes for images (lower case); the
#: same, so that a tree gives the same samples and labels. packread decodes JPEG, PNG and
#: WebP; a file of another format among them is a ``DecodeError`` (or skipped).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

#: The JSON member read for labels when ``labels`` is not given (the tutorial's convention).
LABELS_MEMBER = "dataset.json"

#: The formats whose files this reader reads images from (and folder trees).
IMAGE_CONTAINERS = ("zip", "hdf5")

#: Options only the image reader takes: given any, a source is read as images.
IMAGE_OPTIONS = frozenset({"decode", "images", "labels", "augment_seed", "on_error"})


def is_image_name(name: str) -> bool:
    return name.lower().endswith(IMG_EXTENSIONS)


class LabelledReader(ArrayReader):
    """What readers of named, labelled samples share (images, clips): opening one source or
    many as shards, the samples' names, labels and classes, and the methods that need one
    source."""

    _inner: Any = None
    _names: list[str] | None = None
    #: Where :attr:`labels` came from: ``"folders"`` (class folders), a JSON member's or list
    #: file's name, ``"hdf5:<dataset>"``, or ``None`` (no labels, or shards).
    label_source: str | None = None
    #: Each sample's label (int64), or ``None`` where the source has none.
    labels: np.ndarray | None = None
    #: The class names by label, where the source names them.
    classes: list[str] | None = None

    def _open_labelled(
        self,
        src: Source,
        options: dict[str, Any],
        make: Any,
        what: str,
        remote: Remote,
        shard_index: Any,
        max_open_shards: Any,
        state: dict[str, Any] | None,
    ) -> Any:
        """Opens ``src`` (``make(target, options)`` for one source, shards of this reader's
        format for many), sets the names, labels and classes; returns the batch reader."""
        if src.many:
            shards = self._open_shards(src.value, options, shard_index, max_open_shards, state)
            reader = shards.reader()
            found, classes = shards.labels, shards.classes
            self._names = None
        else:
            # An object's first request: an HDF5 file's head, or the archive's tail.
            tail = not (src.kind == URL and src.value.lower().endswith(HDF5_SUFFIXES))
            target = self._target(src, remote, what, tail=tail, folder=True)
            self._inner = make(target, options)
            self._paths = [self._inner.location if src.kind != FOLDER else src.value]
            reader = self._inner.reader
            found, classes = self._inner.labels, self._inner.classes
            self.label_source = self._inner.label_source
            self._names = list(self._inner.names())
        self.labels = found
        self.classes = None if classes is None else list(classes)
        return reader

    @property
    def class_to_idx(self) -> dict[str, int] | None:
        """Class name to label, for class folders (``None`` otherwise).

        >>> ImageReader("images.zip").class_to_idx is None  # labelled by dataset.json
        True
        """
        return None if self.classes is None else {c: k for k, c in enumerate(self.classes)}

    def names(self) -> list[str]:
        """The samples' names: member names, file paths, ``dataset[k]``, or a clip's video.

        >>> ImageReader("images.zip", decode=packread.ImageDecode(32)).names()[:2]
        ['00.png', '01.png']
        """
        if self._names is None:
            self._names = self._shard_names()
        return list(self._names)

    def _one_file(self, what: str) -> Any:
        if self._inner is None:
            raise UnsupportedError(
                f"{self._describe()}: {what} of a reader of several files; open one: "
                f"{type(self).__name__}(reader.paths[k], ...)"
            )
        self._check_open()
        return self._inner


class ImageReader(LabelledReader):
    """Encoded images (JPEG, PNG, WebP; told by their first bytes) decoded, cropped, resized
    and written straight into one preallocated batch on packread's threads, with the GIL
    released. A batch is ``{"images": ..., "labels": ...}`` (``labels`` where the source has
    them; ``arrays="images"`` gives the images alone).

    ``source`` is one of, or a list or glob of (``shards``; every shard must have the same
    classes, and each draws its random crops from a seed of its own):

    - a ZIP of images chosen by ``members`` (a glob pattern or a list of names; default:
      every member whose name ends in an image extension), in name order, labelled by a JSON
      member (``labels``, default ``dataset.json`` when the archive holds one) of the form
      ``{"labels": {name: label}}`` or ``{"labels": [[name, label], ...]}``;
    - an ``ImageFolder`` tree ``root/<class>/<file>``, as a folder or packed in a ZIP (below
      the members' common folder): ``classes`` are the sorted class folder names, labels their
      0-based positions, as ``torchvision.datasets.ImageFolder`` gives them;
    - an HDF5 file, one image a row of the dataset ``images`` names: variable-length bytes
      (h5py ``vlen_dtype(np.uint8)``, PyTables ``VLArray(UInt8Atom())``) or fixed-size rows
      of bytes (opaque ``np.void``, uint8; padding after the image is ignored), labelled by
      the integer dataset ``labels`` names.

    A path, a URL or bytes all work. ``decode`` (a
    :class:`~packread.ImageDecode`) says what each image becomes: size, crop, flip, layout,
    mode, normalisation. Random crops and flips are drawn from ``(augment_seed, epoch,
    sample)``: ``batch(idx, epoch=...)`` repeats an epoch's crops exactly.

    Resizing is PIL's antialiased bilinear filter (results within 1-2 levels of PIL's);
    without resizing, pixels equal PIL's ``Image.open(f).convert(mode)``. An image that does
    not decode raises :class:`~packread.DecodeError` naming the archive and member or the
    file; with ``on_error="skip"`` it is replaced in its slot by the next sample (in index
    order, wrapping around) that decodes, recorded in :attr:`errors`, with one warning per
    reader.

    >>> r = ImageReader("images.zip", decode=packread.ImageDecode(32))
    >>> batch = r.batch([0, 1])
    >>> batch["images"].shape, batch["labels"]
    ((2, 32, 32, 3), array([0, 1]))
    """

    format = "images"

    @source_names("ImageReader")
    def __init__(
        self,
        source: Any,
        *,
        decode: ImageDecode | None = None,
        arrays: str | Sequence[str] | None = None,
        members: str | Sequence[str] | None = None,
        images: str | None = None,
        labels: str | bool | None = None,
        augment_seed: int = 0,
        on_error: str = "raise",
        ragged: str = "list",
        num_threads: int | None = None,
        remote: Remote | dict[str, Any] | None = None,
        limits: Limits | None = None,
        shard_index: str | os.PathLike[str] | None = None,
        max_open_shards: int | None = None,
        **deprecated: Any,
    ) -> None:
        kwargs = fold("ImageReader", ImageReader.__init__, locals(), deprecated)
        self._setup(source, None, **kwargs)

    def _setup(
        self,
        source: Any,
        state: dict[str, Any] | None,
        decode: Any = None,
        arrays: Any = None,
        members: Any = None,
        images: Any = None,
        labels: Any = None,
        augment_seed: int = 0,
        on_error: str = "raise",
        ragged: str = "list",
        num_threads: int | None = None,
        remote: Any = None,
        limits: Any = None,
        shard_index: Any = None,
        max_open_shards: Any = None,
    ) -> None:
        decode, remote, limits = ImageDecode._of(decode), Remote._of(remote), Limits._of(limits)
        if on_error not in ("raise", "skip"):
            raise InvalidArgumentError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if labels is not None and labels is not False and not isinstance(labels, str):
            raise InvalidArgumentError(
                "labels must be a JSON member's or an HDF5 dataset's name, or False"
            )
        self._ragged = check_ragged(ragged)
        members = members_option(members)
        self._kwargs = {
            "decode": decode,
            "arrays": arrays,
            "members": members,
            "images": images,
            "labels": labels,
            "augment_seed": int(augment_seed),
            "on_error": on_error,
            "ragged": ragged,
            "num_threads": check_num_threads(num_threads),
            "remote": remote,
            "limits": limits,
            "shard_index": shard_index,
            "max_open_shards": max_open_shards,
        }
        options = {
            **decode._binding(),
            "augment_seed": int(augment_seed) & (2**64 - 1),
            "on_error": on_error,
            "members": members,
            "labels": labels,
            "images": images,
            "num_threads": self._kwargs["num_threads"],
            **limits._binding(DEFAULT_MAX_IMAGE_BYTES),
            **remote._binding(),
        }
        self.decode = decode
        self.varies_by_epoch = decode.varies_by_epoch
        src = classify(source, remote)
        self._source = source
        reader = self._open_labelled(
            src,
            options,
            _packread.ImageFile,
            "images",
            remote,
            shard_index,
            max_open_shards,
            state,
        )
        found = self.labels
        self._bind(reader, ["images"], None if found is None else {"labels": found})
        # Without labels a batch is the images themselves, as an HDF5Reader of one dataset.
        self._choose(arrays if arrays is not None or found is not None else "images")

    def crop_params(self, i: int, epoch: int = 0) -> tuple[int, int, int, int, bool]:
        """``(top, left, height, width, flipped)`` of the crop sample ``i`` gets in ``epoch``,
        in its (upright) pixels: torchvision's ``resized_crop(img, top, left, height, width,
        size)`` (then ``hflip`` when flipped) on the PIL image gives the same sample (eval
        crops: the box ``Resize`` + ``CenterCrop`` covers, rounded).

        >>> decode = packread.ImageDecode(32, crop="random")
        >>> ImageReader("images.zip", decode=decode).crop_params(0, epoch=1)
        (...)
        """
        inner = self._one_file("crop_params()")
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self._describe()}: sample {i} of {n}")
        return tuple(inner.crop(i % n, int(epoch)))  # type: ignore[return-value]

    def encoded(self, i: int) -> bytes:
        """The encoded bytes of sample ``i``, as stored (a ZIP member inflated, an HDF5 row).

        >>> ImageReader("images.zip").encoded(0)[:4]
        b'\\x89PNG'
        """
        inner = self._one_file("encoded()")
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self._describe()}: sample {i} of {n}")
        return bytes(inner.encoded(i % n))

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        return f"ImageReader({self._describe()!r}, {len(self)} images, shape={self.shape})"


#: Earlier releases' names that also said "images": the geometry options and ``dataset``.
_OLD_IMAGE_OPTIONS = frozenset(
    {n for n, (_, group) in GROUPED.items() if group == "decode"} | {"dataset", "max_pixels"}
)


def is_image_tree(path: str) -> bool:
    """A folder of class folders and no ``.npy``/``.npz`` files: the ``ImageFolder`` layout."""
    entries = list(os.scandir(path))
    if any(e.name.endswith((".npy", ".npz")) for e in entries):
        return False
    return any(e.is_dir() for e in entries)


def holds_images(src: Source) -> bool:
    """Whether an archive holds images (at least half of its files, besides its
    ``dataset.json``), as ``packread convert`` writes one or a tree is zipped."""
    first = src.first
    if src.kind in (URL, OBJECT) or (src.kind == FILES and "://" in first):
        if not first.lower().endswith(".zip"):
            return False
    else:
        head = head_of(src)
        if head is None or not (first.lower().endswith(".zip") or is_zip(head)):
            return False
    target: Any = first
    if src.kind in (BYTES, FILE_OBJECT):
        target = in_place(src)
    elif src.kind == OBJECT:
        target = src.value
    try:
        archive = _packread.ZipArchive(target, {})
        names = list(archive.names())
    except PackreadError:
        return False
    files = [n for n in names if n != LABELS_MEMBER and not n.endswith("/")]
    images = sum(1 for n in files if is_image_name(n))
    # Mostly images: a tree's stray notes are skipped, as torchvision's ImageFolder skips them.
    return images > 0 and 2 * images >= len(files)


def _claims(src: Source, options: dict[str, Any]) -> bool:
    """Images: a source given an option only images take, an ``ImageFolder`` tree, or an
    archive of images."""
    given = set(options)
    if given & IMAGE_OPTIONS or given & _OLD_IMAGE_OPTIONS:
        # Unless the file is of a format whose files hold no images this reader reads.
        folders = src.kind == FOLDER or (src.kind == FILES and os.path.isdir(src.first))
        own = None if folders else identify(src)
        return own is None or own.name in IMAGE_CONTAINERS
    if src.kind == FOLDER:
        return is_image_tree(src.value)
    if src.kind == FILES and os.path.isdir(src.first):
        return True
    if src.kind in (FILE, FILES, URL, BYTES, FILE_OBJECT):
        return holds_images(src)
    return False


register(Format(name="images", reader=ImageReader, claims=_claims))

__all__ = ["IMG_EXTENSIONS", "ImageReader", "LabelledReader"]
