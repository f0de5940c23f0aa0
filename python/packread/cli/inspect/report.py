"""What an inspection produces: a :class:`Report` holding a tree of :class:`Item` rows and the
:class:`Advice` on them (all plain data; :meth:`Report.render` and :meth:`Report.to_json`
write it out)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .render import _json, _text


@dataclass
class Item:
    """One row of the tree: an HDF5 dataset, a ZIP member (or a pattern of members), an NPZ
    array, the files of a folder, or the images of one format.

    >>> images = inspect("train.h5").items[0]
    >>> images.sample_shape, images.chunks, images.filters
    ([3, 32, 32], [1, 3, 32, 32], ['gzip(4)'])
    """

    name: str
    #: ``"dataset"``, ``"member"``, ``"members"``, ``"array"``, ``"files"`` or ``"images"``.
    kind: str
    #: Members or files this row stands for.
    count: int = 1
    dtype: str | None = None
    #: The whole array's shape (an HDF5 dataset, an NPY file, an NPZ array).
    shape: list[int] | None = None
    #: The shape of one sample (one index along the first axis, or one file or member).
    sample_shape: list[int] | None = None
    samples: int | None = None
    chunks: list[int] | None = None
    #: ``"chunked"``, ``"contiguous"``, ``"stored"``, ``"deflated"``, ``"mixed"``, ...
    layout: str = ""
    filters: list[str] = field(default_factory=list)
    #: Bytes of the data decoded, and as stored on disk.
    data_bytes: int | None = None
    stored_bytes: int | None = None
    #: ``data_bytes / stored_bytes`` over the chunks or members written.
    ratio: float | None = None
    #: How packread reads it (HDF5).
    read_path: str | None = None
    note: str | None = None


@dataclass
class Advice:
    """Something about the layout that will cost training reads, with the numbers behind it.

    >>> [a.code for a in inspect("data/npz/").advice]
    ['compressed-npz']
    """

    #: A stable identifier: ``misaligned-chunks``, ``split-samples``, ``tiny-chunks``,
    #: ``huge-chunks``, ``weak-compression``, ``libhdf5-read``, ``no-decoder``, ``contiguous``,
    #: ``compressed-npz``, ``compressed-members``, ``many-small-files``, ``inconsistent``,
    #: ``missing-fields`` (tar shards);
    #: for images ``undecodable-images``, ``deflated-images``, ``progressive-jpeg``,
    #: ``cmyk-jpeg``, ``unlabelled``, ``bad-labels``.
    code: str
    #: ``"warning"`` (costs reads) or ``"note"`` (worth knowing).
    level: str
    #: The dataset, member pattern or path it is about.
    target: str
    message: str
    #: A command that fixes it, when there is one.
    fix: str | None = None


@dataclass
class ImageSummary:
    """What the headers of an image source's images say (:attr:`Report.images`): formats,
    sizes and, for labelled sources, the classes.

    >>> summary = inspect("images.zip").images
    >>> summary.formats, summary.labels, summary.classes
    ({'PNG': 4}, 'dataset.json', 4)
    """

    images: int
    #: Images per format: ``"JPEG"``, ``"PNG"``, ``"WebP"``, and ``"undecodable"`` for the
    #: ones whose header does not read (another format, a damaged file).
    formats: dict[str, int]
    #: JPEGs in CMYK (or YCCK), and progressive JPEGs.
    cmyk: int
    progressive: int
    #: The first few undecodable images: ``[name, why]``.
    undecodable: list[list[str]]
    #: ``{"min", "median", "max"}`` over the images that decode, in pixels as stored (an
    #: EXIF rotation not applied).
    width: dict[str, int] | None
    height: dict[str, int] | None
    #: Images by their shorter side: ``{"min", "max" (None: no bound), "count"}`` for each
    #: bucket; the counts add up to the images that decode.
    shorter_side: list[dict[str, Any]]
    #: Where labels come from: ``"folders"`` (an ImageFolder tree), ``"dataset.json"``, or
    #: ``None`` (unlabelled).
    labels: str | None = None
    #: Number of classes (class folders, or distinct labels), and images per class (by class
    #: name when the names are known, else by label).
    classes: int | None = None
    per_class: dict[str, int] | None = None


@dataclass
class ClipSummary:
    """What a clip source's videos hold (:attr:`Report.clips`, ``packread inspect --clips``):
    videos, frames per video, and the sizes and formats of three frames of each (its first,
    middle and last).

    >>> summary = inspect("frames/", clips=True).clips
    >>> summary.videos, summary.frames_per_video
    (3, {'min': 8, 'median': 10, 'max': 12})
    """

    videos: int
    frames: int
    #: ``{"min", "median", "max"}`` of the videos' frames.
    frames_per_video: dict[str, int] | None
    #: ``{"min", "median", "max"}`` of the sampled frames' widths and heights.
    width: dict[str, int] | None
    height: dict[str, int] | None
    #: Sampled frames per format (``"undecodable"`` for those whose header does not read).
    formats: dict[str, int]
    #: The first few undecodable frames: ``[name, why]``.
    undecodable: list[list[str]]
    #: The first few videos without frames, and with frames of different sizes.
    empty: list[str]
    mixed_sizes: list[str]
    #: Where labels come from (``"folders"``, a list file), classes, and videos per class.
    labels: str | None = None
    classes: int | None = None
    per_class: dict[str, int] | None = None


@dataclass
class Report:
    """What :func:`inspect` found: a tree of items and the advice on them.

    >>> report = inspect("train.h5")
    >>> report.format, report.samples
    ('hdf5', 64)
    """

    path: str
    #: ``"hdf5"``, ``"zip"``, ``"npz"``, ``"npy"``, ``"npy-folder"``, ``"npz-folder"``,
    #: ``"image-folder"`` (an ImageFolder tree), ``"image-zip"`` (a ZIP of images),
    #: ``"frame-folder"`` or ``"frame-zip"`` (frame folders, as clips), ``"tar"`` (tar shards).
    format: str
    #: Bytes on disk (all files, for a folder).
    disk_bytes: int
    files: int
    samples: int | None
    items: list[Item]
    advice: list[Advice]
    #: For an image source: its images' formats, sizes and classes (``None`` otherwise).
    images: ImageSummary | None = None
    #: For a clip source (``inspect(..., clips=True)``): its videos and frames.
    clips: ClipSummary | None = None

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain data (what ``--json`` prints).

        >>> inspect("train.h5").to_dict()["items"][0]["name"]
        'images'
        """
        return asdict(self)

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON.

        >>> import json
        >>> json.loads(inspect("train.h5").to_json())["format"]
        'hdf5'
        """
        return _json(self)

    def render(self, ascii_only: bool = False) -> str:
        """The report as text: a header line, the tree with one row per item, then the advice.

        >>> print(inspect("train.h5").render())  # doctest: +ELLIPSIS
        train.h5  HDF5, ... on disk, 64 samples
        ...
        """
        return _text(self, ascii_only)
