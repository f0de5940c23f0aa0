"""The option groups every reader and dataset takes, each a small value object built once and
passed anywhere: :class:`Remote` (object storage and its caches), :class:`ImageDecode` (what
an encoded image becomes) and :class:`Limits` (how far a file is trusted). Each checks its
values when made, and says how the extension takes it (``binding()``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Union

import numpy as np

from . import _packread
from .errors import InvalidArgumentError, PackreadTypeError

#: numpy's default limit on NPY header size (``max_header_size``).
DEFAULT_MAX_HEADER_SIZE: int = _packread.DEFAULT_MAX_HEADER_SIZE
#: Largest decoded ZIP member read by default (a header may not ask for more).
DEFAULT_MAX_MEMBER_BYTES: int = _packread.DEFAULT_MAX_MEMBER_BYTES
#: Largest encoded image read by default: an image member or file over it is refused.
DEFAULT_MAX_IMAGE_BYTES: int = 256 << 20
#: Largest ``width * height`` an image may declare (PIL's ``MAX_IMAGE_PIXELS``).
DEFAULT_MAX_PIXELS: int = _packread.DEFAULT_MAX_PIXELS
#: Default bound of the data cache: 10 GiB.
DEFAULT_DATA_CACHE_BYTES: int = 10 << 30

PathLike = Union[str, "os.PathLike[str]"]


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise PackreadTypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < low:
        raise InvalidArgumentError(f"{name} must be >= {low}, not {value}")
    return int(value)


def default_cache_dir() -> Path:
    """Where packread's caches live unless told: ``$PACKREAD_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/packread``, else ``~/.cache/packread``."""
    if os.environ.get("PACKREAD_CACHE_DIR"):
        return Path(os.environ["PACKREAD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "packread"


def _cache_folder(name: str, value: Any, default: Path) -> str | None:
    """A cache's folder: ``True`` the default one, ``False`` none, or a folder."""
    if value is True:
        return str(default)
    if value is False or value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise PackreadTypeError(f"{name} must be a bool or a folder, not {type(value).__name__}")


@dataclass(frozen=True)
class Remote:
    """How objects in object storage (``s3://``, ``gs://``, ``az://``, ``http(s)://``) are read.

    - ``storage_options``: the client's settings (credentials, ``region``, ``endpoint``,
      ``anon``...), as object_store and fsspec name them; values may be str, bool or numbers.
    - ``index_cache``: keep what opening an object read (headers, directories, chunk indexes)
      on disk, so that a reopen makes no metadata request: ``True`` (under
      ``~/.cache/packread``), ``False``, or a folder.
    - ``data_cache``: keep fetched data (1 MiB blocks) on local disk, for repeated epochs on
      one node: ``False`` (the default), ``True`` (under ``~/.cache/packread/data``), or a
      folder; at most ``data_cache_bytes``, the least recently used evicted first.

    Built once, it is passed to any reader or dataset (``remote=``); a plain dict is taken as
    ``Remote(storage_options=that_dict)``.

    >>> remote = packread.Remote({"region": "eu-west-1"}, data_cache="/scratch/cache")
    >>> packread.HDF5Reader("s3://bucket/train.h5", remote=remote)  # doctest: +SKIP
    """

    storage_options: Mapping[str, Any] | None = None
    index_cache: bool | PathLike = True
    data_cache: bool | PathLike = False
    data_cache_bytes: int = DEFAULT_DATA_CACHE_BYTES

    def __post_init__(self) -> None:
        if self.storage_options is not None and not isinstance(self.storage_options, Mapping):
            raise PackreadTypeError(
                f"storage_options must be a dict, not {type(self.storage_options).__name__}"
            )
        for key in self.storage_options or {}:
            if not isinstance(key, str):
                raise PackreadTypeError(f"storage option names are str, not {type(key).__name__}")
        _cache_folder("index_cache", self.index_cache, default_cache_dir())
        _cache_folder("data_cache", self.data_cache, default_cache_dir() / "data")
        _int("data_cache_bytes", self.data_cache_bytes, 1)

    def _pairs(self) -> list[tuple[str, str]]:
        """The storage options as the extension takes them: pairs of strings (booleans as
        ``"true"``/``"false"``)."""
        out = []
        for key, value in (self.storage_options or {}).items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            out.append((key, str(value)))
        return out

    def _binding(self) -> dict[str, Any]:
        """The extension's options: ``storage_options``, ``index_cache``, ``data_cache``."""
        data = _cache_folder("data_cache", self.data_cache, default_cache_dir() / "data")
        return {
            "storage_options": self._pairs(),
            "index_cache": _cache_folder("index_cache", self.index_cache, default_cache_dir()),
            "data_cache": None if data is None else (data, int(self.data_cache_bytes)),
        }

    @classmethod
    def _of(cls, value: Remote | Mapping[str, Any] | None) -> Remote:
        """``value`` as a :class:`Remote`: itself, a dict of storage options, or the
        defaults."""
        if value is None:
            return cls()
        if isinstance(value, Remote):
            return value
        if isinstance(value, Mapping):
            return cls(storage_options=value)
        raise PackreadTypeError(
            f"remote must be a packread.Remote or a dict of storage options, not "
            f"{type(value).__name__}"
        )


@dataclass(frozen=True)
class Limits:
    """How far packread trusts a file: what a header may ask to allocate.

    - ``max_header_size``: largest NPY header (numpy's ``max_header_size``).
    - ``max_member_bytes``: largest decoded ZIP member read; ``None`` is each format's own
      (4 GiB for samples and NPZ arrays, 256 MiB for an encoded image, member or file).
    - ``max_pixels``: largest ``width * height`` an image may declare (PIL's
      ``MAX_IMAGE_PIXELS``).

    A file asking for more is a ``LimitExceededError`` before anything is allocated.

    >>> len(packread.NpzReader("data/npz/", limits=packread.Limits(max_header_size=1 << 16)))
    8
    """

    max_header_size: int = DEFAULT_MAX_HEADER_SIZE
    max_member_bytes: int | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS

    def __post_init__(self) -> None:
        _int("max_header_size", self.max_header_size, 1)
        if self.max_member_bytes is not None:
            _int("max_member_bytes", self.max_member_bytes, 0)
        _int("max_pixels", self.max_pixels, 1)

    def _binding(self, member_default: int = DEFAULT_MAX_MEMBER_BYTES) -> dict[str, Any]:
        """The extension's options, ``max_member_bytes`` defaulting to ``member_default``."""
        member = member_default if self.max_member_bytes is None else self.max_member_bytes
        return {
            "max_header_size": int(self.max_header_size),
            "max_member_bytes": int(member),
            "max_pixels": int(self.max_pixels),
        }

    @classmethod
    def _of(cls, value: Limits | None) -> Limits:
        if value is None:
            return _DEFAULT_LIMITS  # frozen: one instance serves every call
        if not isinstance(value, Limits):
            raise PackreadTypeError(f"limits must be a packread.Limits, not {type(value).__name__}")
        return value


_DEFAULT_LIMITS = Limits()


Size = Union[int, Sequence[int]]


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


@dataclass(frozen=True)
class ImageDecode:
    """What each encoded image (JPEG, PNG, WebP) becomes: torchvision's transforms, done while
    decoding, straight into the batch.

    - ``size``: ``S`` or ``(H, W)`` of every sample; ``None`` gives each image whole at its
      own (upright) size (a ragged batch: a list of arrays, or with ``ragged="flat"``
      ``(values, offsets, shapes)``).
    - ``crop="center"`` (eval): ``Resize(resize)`` (default: the larger side of ``size``) then
      ``CenterCrop(size)``; ``crop="random"`` (train): ``RandomResizedCrop(size, scale,
      ratio)``, and with ``flip=True`` ``RandomHorizontalFlip``, drawn from ``(augment_seed,
      epoch, sample)``: an epoch repeats its crops exactly.
    - ``mode``: ``"RGB"``, ``"L"`` or ``"RGBA"``; ``layout``: ``"NHWC"`` or ``"NCHW"``.
    - ``normalize=(mean, std)`` or ``(mean, std, "float16")``: float32 (or float16) samples
      ``(x / 255 - mean) / std``; uint8 otherwise.
    - ``exif_transpose``: turn images upright first, as ``PIL.ImageOps.exif_transpose``.
    - ``draft``: eval crops of large JPEGs decode at 1/2, 1/4 or 1/8 scale in the IDCT while
      two or more decoded pixels remain per output pixel (PIL's ``draft`` with
      ``reducing_gap=2``): 1.3-1.7x faster on such images, within 7 levels of the full decode.

    >>> decode = packread.ImageDecode(224, crop="random", flip=True, layout="NCHW")
    >>> packread.ImageReader("train.zip", decode=decode)  # doctest: +SKIP
    """

    size: Size | None = None
    crop: str = "center"
    resize: int | None = None
    scale: Sequence[float] = (0.08, 1.0)
    ratio: Sequence[float] = (3 / 4, 4 / 3)
    flip: bool = False
    layout: str = "NHWC"
    mode: str = "RGB"
    normalize: Any = None
    exif_transpose: bool = False
    draft: bool = False
    #: The checked values the extension takes, made once.
    _checked: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        hw = None if self.size is None else _size(self.size)
        if self.crop not in ("center", "random"):
            raise InvalidArgumentError(f"crop must be 'center' or 'random', got {self.crop!r}")
        if self.layout not in ("NHWC", "NCHW"):
            raise InvalidArgumentError(f"layout must be 'NHWC' or 'NCHW', got {self.layout!r}")
        if self.mode not in ("RGB", "L", "RGBA"):
            raise InvalidArgumentError(f"mode must be 'RGB', 'L' or 'RGBA', got {self.mode!r}")
        channels = len(self.mode)
        norm = None
        if self.normalize is not None:
            mean, std, *rest = self.normalize
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
        s0, s1 = _pair(self.scale, "scale")
        r0, r1 = _pair(self.ratio, "ratio")
        if not (0 < s0 <= s1 <= 1) or not (0 < r0 <= r1):
            raise InvalidArgumentError(f"scale {self.scale!r} or ratio {self.ratio!r} out of range")
        resize = int(self.resize) if self.resize is not None else max(hw or (1,))
        self._checked.update(
            size=hw,
            crop=self.crop,
            resize=resize,
            scale=(s0, s1),
            ratio=(r0, r1),
            flip=bool(self.flip),
            layout=self.layout,
            mode=self.mode,
            normalize=norm,
            exif_transpose=bool(self.exif_transpose),
            draft=bool(self.draft),
        )

    def _binding(self) -> dict[str, Any]:
        """The extension's options."""
        return dict(self._checked)

    @property
    def varies_by_epoch(self) -> bool:
        """Whether samples differ from epoch to epoch (random crops or flips)."""
        return self.size is not None and (self.crop == "random" or bool(self.flip))

    @property
    def dtype(self) -> np.dtype[Any]:
        """The samples' element type."""
        norm = self._checked["normalize"]
        return np.dtype("uint8") if norm is None else np.dtype(norm[2])

    @classmethod
    def _of(cls, value: ImageDecode | None) -> ImageDecode:
        if value is None:
            return cls()
        if not isinstance(value, ImageDecode):
            raise PackreadTypeError(
                f"decode must be a packread.ImageDecode, not {type(value).__name__}"
            )
        return value

    @classmethod
    def _names(cls) -> list[str]:
        """Its parameters' names."""
        return [f.name for f in fields(cls) if f.init]


__all__ = ["ImageDecode", "Limits", "Remote"]
