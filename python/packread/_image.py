"""Encoded images (JPEG, PNG, WebP) decoded on packread's threads into fixed-shape batches:
:class:`ImageReader`, over ZIP members, an ``ImageFolder`` tree (a directory, or a ZIP
holding one) or the rows of an HDF5 dataset of bytes."""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np

from . import _packread
from ._common import (
    Indices,
    PendingBatch,
    as_indices,
    check_num_threads,
    shown_name,
    warn_skipped,
)
from ._hdf5 import HDF5Reader
from ._open import HDF5_SUFFIXES, sniff
from ._reader import ArrayReader, Out
from ._remote import DEFAULT_CACHE_DIR_BYTES, is_remote, is_url, open_remote
from ._shards import is_shard_source, sharded
from .errors import InvalidArgumentError, MissingKeyError

#: Largest ``width * height`` an image may declare (PIL's ``MAX_IMAGE_PIXELS``).
DEFAULT_MAX_PIXELS: int = _packread.DEFAULT_MAX_PIXELS

#: The file names ``torchvision.datasets.ImageFolder`` takes for images (lower case); the
#: same, so that a tree gives the same samples and labels. packread decodes JPEG, PNG and
#: WebP; a file of another format among them is a ``DecodeError`` (or skipped).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

#: Largest encoded image read (a member declaring more is a ``LimitExceededError``, never an
#: allocation of that size); the same as for image files.
MAX_IMAGE_BYTES = 256 << 20

#: The JSON member read for labels when ``labels`` is not given (the tutorial's convention).
LABELS_MEMBER = "dataset.json"

Size = Union[int, Sequence[int]]


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMG_EXTENSIONS)


def _pair(value: Any, what: str, cast: type = float) -> tuple[Any, Any]:
    try:
        a, b = value
        return cast(a), cast(b)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{what} must be a pair of numbers, got {value!r}") from None


def _size(size: Size) -> tuple[int, int]:
    if isinstance(size, (int, np.integer)):
        h = w = int(size)
    else:
        h, w = _pair(size, "size", int)
    if h <= 0 or w <= 0:
        raise InvalidArgumentError(f"size must be positive, got {size!r}")
    return h, w


#: Labels are int64: a JSON integer outside this range is refused, never wrapped.
_LABEL_RANGE = range(-(2**63), 2**63)


def _labels_from_json(
    raw: bytes, where: str, names: list[str]
) -> tuple[np.ndarray, list[str] | None]:
    """Labels of ``names`` from ``{"labels": {name: label}}`` or
    ``{"labels": [[name, label], ...]}`` (a name without a label is an error naming it), and
    the optional ``"classes"`` list, class names by label (``packread convert`` writes one).
    A label must be a JSON integer in int64's range: ``"3"``, ``1.5``, ``true``, ``null``,
    ``NaN`` and lists are refused, never coerced."""
    forms = "{'labels': {name: label}} or {'labels': [[name, label], ...]}"
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidArgumentError(
            f"{where}: labels must be JSON of the form {forms} ({reason})"
        ) from None
    table = doc.get("labels") if isinstance(doc, dict) else None
    if isinstance(table, list):
        if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in table):
            raise InvalidArgumentError(f"{where}: labels must be JSON of the form {forms}")
        table = dict(table)
    if not isinstance(table, dict):
        raise InvalidArgumentError(f"{where}: labels must be JSON of the form {forms}")
    out = np.empty(len(names), dtype=np.int64)
    for k, n in enumerate(names):
        if n not in table:
            raise MissingKeyError(f"{where}: no label for {n!r}")
        label = table[n]
        if isinstance(label, bool) or not isinstance(label, int) or label not in _LABEL_RANGE:
            raise InvalidArgumentError(
                f"{where}: the label of {n!r} is {_shown(label)}, not an integer in int64's range"
            )
        out[k] = label
    classes = doc.get("classes")
    if isinstance(classes, list) and all(isinstance(c, str) for c in classes):
        return out, list(classes)
    return out, None


def _shown(value: Any) -> str:
    """A JSON value as a message shows it: its text, cut short."""
    try:
        text = json.dumps(value)
    except (ValueError, RecursionError):
        text = f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def _folder_tree(root: str) -> tuple[list[str], list[str], np.ndarray]:
    """``torchvision.datasets.ImageFolder``'s samples of ``root``: classes are the sorted
    sub-directory names, files are walked in sorted order (links followed) and kept by
    extension; returns paths, classes and labels."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    if not classes:
        raise InvalidArgumentError(
            f"{root}: no class folders (the ImageFolder layout is root/<class>/<file>)"
        )
    paths: list[str] = []
    labels: list[int] = []
    empty = []
    for k, cls in enumerate(classes):
        before = len(paths)
        for folder, _, files in sorted(os.walk(os.path.join(root, cls), followlinks=True)):
            for f in sorted(files):
                if _is_image(f):
                    paths.append(os.path.join(folder, f))
                    labels.append(k)
        if len(paths) == before:
            empty.append(cls)
    if empty:
        raise InvalidArgumentError(
            f"{root}: no image files in the class folders {empty} (extensions: {IMG_EXTENSIONS})"
        )
    return paths, classes, np.asarray(labels, dtype=np.int64)


def _zip_tree(names: list[str], where: str) -> tuple[list[str], list[str], np.ndarray] | None:
    """The ``ImageFolder`` tree inside an archive: below the members' common folder, the first
    folder of each image is its class. ``None`` when some image has no class folder."""
    dirs = [posixpath.dirname(n) for n in names]
    common = posixpath.commonpath(dirs) if dirs and all(dirs) else ""
    parts = []
    for n in names:
        rest = n[len(common) + 1 :] if common else n
        if "/" not in rest:
            return None
        cls, _ = rest.split("/", 1)
        parts.append((cls, posixpath.dirname(rest), posixpath.basename(rest), n))
    parts.sort()
    classes = sorted({p[0] for p in parts})
    index = {c: k for k, c in enumerate(classes)}
    ordered = [p[3] for p in parts]
    labels = np.asarray([index[p[0]] for p in parts], dtype=np.int64)
    return ordered, classes, labels


class ImageReader(ArrayReader):
    """Encoded images (JPEG, PNG, WebP; told by their first bytes) decoded, cropped, resized
    and written straight into one preallocated batch on packread's threads, with the GIL
    released.

    ``source`` is a ZIP archive or a folder:

    - a ZIP of images chosen by ``members`` (a glob pattern or a list of names; default:
      every member whose name ends in an image extension), in name order, labelled by a JSON
      member (``labels``, default ``dataset.json`` when the archive holds one) of the form
      ``{"labels": {name: label}}`` or ``{"labels": [[name, label], ...]}``;
    - an ``ImageFolder`` tree ``root/<class>/<file>``, as a folder or packed in a ZIP (below
      the members' common folder): ``classes`` are the sorted class folder names, labels their
      0-based positions, as ``torchvision.datasets.ImageFolder`` gives them;
    - an HDF5 file, one image a row of ``dataset``: variable-length bytes (h5py
      ``vlen_dtype(np.uint8)``, PyTables ``VLArray(UInt8Atom())``) or fixed-size rows of bytes
      (opaque ``np.void``, uint8; padding after the image is ignored), labelled by the integer
      dataset ``labels`` names.

    A list or glob pattern of ZIP archives or HDF5 files (sorted) opens as one
    :class:`~packread.ShardedReader` (``shard_index=``, ``max_open_shards=``): every shard
    must have the same classes; each draws its random crops from a seed of its own.

    Each sample is ``size`` (``S`` or ``(H, W)``) in ``mode`` (``"RGB"``, ``"L"``,
    ``"RGBA"``), laid out ``"NHWC"`` or ``"NCHW"``, uint8 (or float32/float16 with
    ``normalize=(mean, std)`` or ``(mean, std, "float16")``: ``(x / 255 - mean) / std``):

    - ``crop="center"`` (eval): torchvision's ``Resize(resize)`` (default: the larger side of
      ``size``) then ``CenterCrop(size)``;
    - ``crop="random"`` (train): torchvision's ``RandomResizedCrop(size, scale, ratio)`` and,
      with ``flip=True``, ``RandomHorizontalFlip``, drawn from ``(seed, epoch, sample)``: an
      epoch repeats its crops exactly (``batch(idx, epoch=...)``).

    ``size=None`` gives each image whole at its own (upright) size: ``batch`` returns a list of
    arrays (``(h, w, c)`` or ``(c, h, w)``), or with ``ragged="flat"`` ``(values, offsets,
    shapes)`` for collation; ``flip``, ``mode``, ``layout`` and ``normalize`` still apply.

    ``draft=True`` lets eval crops of large JPEGs decode at 1/2, 1/4 or 1/8 scale in the IDCT
    (as PIL's ``Image.draft``) while the crop keeps two or more decoded pixels per output pixel
    (PIL's ``reducing_gap=2``): 1.3-1.7x faster on such images, within 7 levels of the full
    decode's result (mean under 0.6) instead of 1-2.

    Resizing is PIL's antialiased bilinear filter (results within 1-2 levels of PIL's);
    without resizing, pixels equal PIL's ``Image.open(f).convert(mode)``. ``exif_transpose``
    turns images upright first, as ``PIL.ImageOps.exif_transpose``. An image that does not
    decode raises :class:`~packread.DecodeError` naming the archive and member or the file;
    with ``on_error="skip"`` it is replaced in its slot by the next sample (in index order,
    wrapping around) that decodes, recorded in :attr:`errors`, with one warning per reader.

    >>> r = ImageReader("images.zip", size=32)
    >>> r.batch([0, 1]).shape, r.labels[:2]
    ((2, 32, 32, 3), array([0, 1]))
    """

    _single = True

    def __new__(cls, source: Any = None, **kwargs: Any) -> Any:
        """A list or glob of archives or HDF5 files opens as one
        :class:`~packread.ShardedReader`."""
        if is_shard_source(source):
            return sharded("images", source, kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        source: str | os.PathLike[str],
        *,
        members: str | Sequence[str] | None = None,
        dataset: str | None = None,
        labels: str | bool | None = None,
        size: Size | None = None,
        resize: int | None = None,
        crop: str = "center",
        flip: bool = False,
        layout: str = "NHWC",
        mode: str = "RGB",
        normalize: Any = None,
        seed: int = 0,
        exif_transpose: bool = False,
        on_error: str = "raise",
        num_threads: int | None = None,
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        max_pixels: int = DEFAULT_MAX_PIXELS,
        ragged: str = "list",
        draft: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        index_cache: bool | str | os.PathLike[str] = True,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_dir_bytes: int = DEFAULT_CACHE_DIR_BYTES,
    ) -> None:
        # An opened object (a pickled reader's) is read as it was opened, not reopened by URL.
        opened = source if is_remote(source) else None
        path = opened.url if opened is not None else os.fspath(source)
        remote = opened is not None or is_url(path)
        self._options: dict[str, Any] = {
            "members": members if members is None or isinstance(members, str) else list(members),
            "dataset": dataset,
            "labels": labels,
            "size": size,
            "resize": resize,
            "crop": crop,
            "flip": flip,
            "layout": layout,
            "mode": mode,
            "normalize": normalize,
            "seed": seed,
            "exif_transpose": exif_transpose,
            "on_error": on_error,
            "num_threads": num_threads,
            "scale": tuple(scale),
            "ratio": tuple(ratio),
            "max_pixels": max_pixels,
            "ragged": ragged,
            "draft": draft,
            "storage_options": storage_options,
            "index_cache": index_cache,
            "cache_dir": cache_dir,
            "cache_dir_bytes": cache_dir_bytes,
        }
        hw = None if size is None else _size(size)
        if ragged not in ("list", "flat"):
            raise InvalidArgumentError(f"ragged must be 'list' or 'flat', not {ragged!r}")
        if crop not in ("center", "random"):
            raise InvalidArgumentError(f"crop must be 'center' or 'random', got {crop!r}")
        if layout not in ("NHWC", "NCHW"):
            raise InvalidArgumentError(f"layout must be 'NHWC' or 'NCHW', got {layout!r}")
        if mode not in ("RGB", "L", "RGBA"):
            raise InvalidArgumentError(f"mode must be 'RGB', 'L' or 'RGBA', got {mode!r}")
        if on_error not in ("raise", "skip"):
            raise InvalidArgumentError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        channels = len(mode)
        norm = None
        if normalize is not None:
            mean, std, *rest = normalize
            dtype = np.dtype(rest[0] if rest else "float32").name
            if dtype not in ("float32", "float16"):
                raise InvalidArgumentError(
                    f"normalize's dtype must be float32 or float16, got {dtype}"
                )
            mean = [float(x) for x in np.broadcast_to(np.asarray(mean, float), (channels,))]
            std = [float(x) for x in np.broadcast_to(np.asarray(std, float), (channels,))]
            if any(s == 0 for s in std):
                raise InvalidArgumentError("normalize's std must not be 0")
            norm = (mean, std, dtype)
        resize_to = int(resize) if resize is not None else max(hw or (1,))
        s0, s1 = _pair(scale, "scale")
        r0, r1 = _pair(ratio, "ratio")
        if not (0 < s0 <= s1 <= 1) or not (0 < r0 <= r1):
            raise InvalidArgumentError(f"scale {scale!r} or ratio {ratio!r} out of range")

        self.classes: list[str] | None = None
        self.labels: np.ndarray | None = None
        #: Where :attr:`labels` came from: ``"folders"`` (class folders), the JSON member's
        #: name, ``"hdf5:<dataset>"``, or ``None`` (no labels).
        self.label_source: str | None = None
        archive = None
        hdf5 = None
        positions: list[int] = []
        paths: list[str] = []
        if remote:
            is_hdf5 = path.lower().endswith(HDF5_SUFFIXES)
        else:
            is_hdf5 = not os.path.isdir(path) and (
                path.lower().endswith(HDF5_SUFFIXES) or sniff(path) == "hdf5"
            )
        # An object's first request: the HDF5 file's head, or the archive's tail.
        src: Any = opened or (
            open_remote(
                path,
                storage_options,
                tail=not is_hdf5,
                index_cache=index_cache,
                cache_dir=cache_dir,
                cache_dir_bytes=cache_dir_bytes,
            )
            if remote
            else path
        )
        self._src = src
        if dataset is not None and not is_hdf5:
            raise InvalidArgumentError(
                f"{path}: dataset= names an HDF5 dataset of images, and this is not an HDF5 file"
            )
        if is_hdf5:
            if dataset is None:
                raise InvalidArgumentError(
                    f"{path}: name the dataset of encoded images with dataset="
                )
            if members is not None:
                raise InvalidArgumentError("members= selects ZIP members; an HDF5 file has none")
            hdf5 = _packread.HDF5File(src, [dataset], check_num_threads(num_threads))
            count = len(hdf5)
            names = [f"{dataset.lstrip('/')}[{k}]" for k in range(count)]
            if isinstance(labels, str):
                self.labels = _labels_from_hdf5(src, labels, count)
                self.label_source = f"hdf5:{labels}"
            elif labels not in (None, False):
                raise InvalidArgumentError(
                    "labels= names an HDF5 dataset of integer labels, one a row"
                )
        elif not remote and os.path.isdir(path):
            if members is not None:
                raise InvalidArgumentError("members= selects ZIP members; a folder has none")
            paths, self.classes, self.labels = _folder_tree(path)
            self.label_source = "folders"
            names = paths
        else:
            archive = _packread.ZipArchive(
                src, True, MAX_IMAGE_BYTES, 1 << 20, check_num_threads(num_threads)
            )
            all_names = list(archive.names())
            if members is None:
                chosen = sorted(n for n in all_names if _is_image(n))
            elif isinstance(members, str):
                chosen = sorted(n for n in all_names if fnmatch.fnmatchcase(n, members))
            else:
                chosen = list(members)
            if not chosen:
                raise InvalidArgumentError(f"{path}: no members are images (members={members!r})")
            label_member = labels if isinstance(labels, str) else None
            if labels is None and LABELS_MEMBER in all_names:
                label_member = LABELS_MEMBER
            if label_member is not None:
                (pos,) = archive.positions([label_member])
                raw = _read_member(archive, pos)
                where = f"{path}:{label_member}"
                self.labels, self.classes = _labels_from_json(raw, where, chosen)
                self.label_source = label_member
            elif labels is None and members is None:
                tree = _zip_tree(chosen, path)
                if tree is not None:
                    chosen, self.classes, self.labels = tree
                    self.label_source = "folders"
            names = chosen
            positions = list(archive.positions(chosen))
        self._names = list(names)
        self._sized = hw is None
        self._ragged = ragged
        self._file = _packread.ImageFile(
            archive,
            positions,
            paths,
            hdf5,
            0,
            # As messages name them: a file name that is not UTF-8 (a str with surrogates, as
            # os.listdir gives it) with its bytes escaped; `paths` keep them exact.
            [shown_name(n) for n in self._names],
            hw,
            crop,
            resize_to,
            (s0, s1),
            (r0, r1),
            bool(flip),
            layout,
            mode,
            norm,
            bool(exif_transpose),
            int(max_pixels),
            int(seed) & (2**64 - 1),
            on_error == "skip",
            check_num_threads(num_threads),
            bool(draft),
        )
        self._bind(self._file.reader)
        self._warned = False
        self._path = path

    @property
    def class_to_idx(self) -> dict[str, int] | None:
        """Class name to label, for folder trees (``None`` otherwise)."""
        return None if self.classes is None else {c: k for k, c in enumerate(self.classes)}

    @property
    def errors(self) -> dict[int, str]:
        """Every sample found not to decode so far (``on_error="skip"``), with why."""
        return dict(self._file.errors())

    def crop_params(self, i: int, epoch: int = 0) -> tuple[int, int, int, int, bool]:
        """``(top, left, height, width, flipped)`` of the crop sample ``i`` gets in ``epoch``,
        in its (upright) pixels: torchvision's ``resized_crop(img, top, left, height, width,
        size)`` (then ``hflip`` when flipped) on the PIL image gives the same sample (eval
        crops: the box ``Resize`` + ``CenterCrop`` covers, rounded).

        >>> ImageReader("images.zip", size=32, crop="random").crop_params(0, epoch=1)
        (...)
        """
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self._path}: sample {i} of {n}")
        return tuple(self._file.crop(i % n, int(epoch)))  # type: ignore[return-value]

    def names(self) -> list[str]:
        """The samples' names: member names, or file paths.

        >>> ImageReader("images.zip", size=32).names()[:2]
        ['00.png', '01.png']
        """
        return list(self._names)

    @property
    def shape(self) -> Any:
        """Shape of one sample; with ``size=None`` the height and width are ``None``."""
        if self._sized:
            c = len(self._options["mode"])
            return (None, None, c) if self._options["layout"] == "NHWC" else (c, None, None)
        return super().shape

    def encoded(self, i: int) -> bytes:
        """The encoded bytes of sample ``i``, as stored (a ZIP member inflated, an HDF5 row).

        >>> ImageReader("images.zip", size=32).encoded(0)[:4]
        b'\\x89PNG'
        """
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self._path}: sample {i} of {n}")
        return self._file.encoded(i % n)

    def batch(self, idx: Indices, *, epoch: int = 0, out: Out = None) -> Any:
        """Images ``idx`` as one array ``(len(idx),) + shape``; random crops are those of
        ``epoch``.

        >>> ImageReader("images.zip", size=32, crop="random").batch([0], epoch=1).shape
        (1, 32, 32, 3)
        """
        return self.batch_async(idx, epoch=epoch, out=out).result()

    def batch_async(self, idx: Indices, *, epoch: int = 0, out: Out = None) -> PendingBatch[Any]:
        """Like :meth:`batch`, but returns at once with the read running on the pool.

        >>> ImageReader("images.zip", size=32).batch_async([0]).result().shape
        (1, 32, 32, 3)
        """
        if epoch < 0:
            raise InvalidArgumentError(f"epoch must be >= 0, got {epoch}")
        if self._sized:
            return self._sized_async(idx, int(epoch), out)
        names = self._array_keys()
        read, arrays = self._start(idx, names, out, int(epoch))
        value = arrays[names[0]]

        def finish() -> Any:
            self._warn_errors()
            return value

        return PendingBatch(read, value, finish)

    def _sized_async(self, idx: Indices, epoch: int, out: Out) -> PendingBatch[Any]:
        if out is not None:
            raise InvalidArgumentError("out= cannot hold images at their own sizes (size=None)")
        self._check_open()
        rows = as_indices(idx, len(self), self._describe())
        read, slot = self._file.read_sized(rows, epoch)
        dtype = np.dtype("uint8")
        if self._options["normalize"] is not None:
            _, _, *rest = self._options["normalize"]
            dtype = np.dtype(rest[0] if rest else "float32")

        def finish() -> Any:
            storage, nbytes, offsets, shapes = slot.take()
            values = storage.view(np.uint8)[:nbytes].view(dtype)
            self._warn_errors()
            if self._ragged == "flat":
                return values, offsets, np.asarray(shapes, dtype=np.int64).reshape(-1, 3)
            return [
                values[a:b].reshape(s)
                for a, b, s in zip(offsets[:-1], offsets[1:], shapes, strict=True)
            ]

        return PendingBatch(read, None, finish)

    def _warn_errors(self) -> None:
        if not self._warned and len(self._file.error_log):
            self._warned = True
            warn_skipped(self._path, self._file.errors(), stacklevel=4)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_images, (self._src, self._options))

    def __repr__(self) -> str:
        return f"ImageReader({self._path!r}, {len(self)} images, shape={self.shape})"

    def _describe(self) -> str:
        return self._path


def _labels_from_hdf5(src: Any, name: str, count: int) -> np.ndarray:
    """The integer dataset ``name`` of ``src`` (a path or an opened object) as int64, one
    label per image."""
    reader = HDF5Reader(src, name)
    path = reader.path
    if reader.dtype.kind not in "iu" or reader.shape != ():
        raise InvalidArgumentError(
            f"{path}:{name}: labels must be one integer a row, not {reader.dtype} x {reader.shape}"
        )
    if len(reader) != count:
        raise InvalidArgumentError(f"{path}:{name}: {len(reader)} labels for {count} images")
    return np.asarray(reader.batch(np.arange(count)), dtype=np.int64)


def _read_member(archive: Any, position: int) -> bytes:
    size = archive.info(position)[1]
    if size > 64 << 20:
        raise InvalidArgumentError("the labels member is over 64 MiB")
    return bytes(archive.read(position))


def _reopen_images(path: str, options: dict[str, Any]) -> ImageReader:
    return ImageReader(path, **options)
