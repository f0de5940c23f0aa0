"""Image sources, as :class:`packread.ImageReader` reads them: an ``ImageFolder`` tree (a
folder, or a ZIP holding one) and a ZIP of images labelled by its ``dataset.json``. Their
formats, sizes and classes are in every image's header, so unlike the other formats every
image is read (its bytes, on a few threads) and its header parsed; nothing is decoded."""

from __future__ import annotations

import bisect
import json
import os
import statistics
import zipfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Union

import numpy as np

from ..._image import LABELS_MEMBER, ImageReader
from ..._options import DEFAULT_MAX_PIXELS
from ..._packread import image_info
from ..._zip import ZipReader
from ...errors import PackreadError
from .._format import human_bytes, human_ratio, human_seconds
from .fixes import _stem
from .report import Advice, ImageSummary, Item, Report
from .thresholds import (
    HEADER_THREADS,
    INFLATE_BYTES_PER_S,
    LISTED_UNDECODABLE,
    MANY_FILES,
    SHORTER_SIDE_EDGES,
    SMALL_FILE_BYTES,
    WEAK_RATIO,
)

#: The formats packread decodes, in the order reports list them.
FORMATS = ("JPEG", "PNG", "WebP")
UNDECODABLE = "undecodable"
#: Images whose bytes are read at a time (the rest wait as indices, not as tasks).
_BLOCK = 4096

#: What one image's header says: ``(format, width, height, cmyk, progressive)``, or why it
#: does not read.
_Header = Union[tuple[str, int, int, bool, bool], str]


def _inspect_images(path: str, kind: str) -> Report:
    """Inspects ``path``: ``kind`` is ``"image-folder"`` (an ImageFolder tree) or
    ``"image-zip"`` (a ZIP of images, labelled or not)."""
    reader, labels_from, advice = _open(path, kind)
    names = reader.names()
    if kind == "image-folder":
        names = [os.path.relpath(n, path).replace(os.sep, "/") for n in names]
    n = len(names)
    headers = _headers(reader)
    stored: list[int] = [size for size, _ in headers]
    methods: list[int | None] = [None] * n
    if kind == "image-zip":
        z = ZipReader(path)
        by_name = {name: z.info(k) for k, name in enumerate(z.names())}
        stored = [by_name[name].compressed_size for name in reader.names()]
        methods = [by_name[name].method for name in reader.names()]
    summary = _summary(names, [h for _, h in headers])
    summary.labels = labels_from
    if reader.labels is not None:
        _classes(summary, path, reader)
    items = _items(summary, headers, stored, methods, kind)
    disk = os.path.getsize(path) if kind == "image-zip" else sum(stored)
    advice += _advice(path, kind, summary, headers, stored, methods)
    advice.sort(key=lambda a: a.level != "warning")  # warnings first
    files = n if kind == "image-folder" else 1
    return Report(path, kind, disk, files, n, items, advice, images=summary)


def _open(path: str, kind: str) -> tuple[ImageReader, str | None, list[Advice]]:
    """The reader at the images' own sizes, where its labels come from, and advice on labels
    that do not read (the images are inspected without them)."""
    if kind == "image-folder":
        return ImageReader(path), "folders", []
    try:
        reader = ImageReader(path)
    except PackreadError as e:
        reader = ImageReader(path, labels=False)
        why = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        return reader, None, [Advice("bad-labels", "warning", path, f"labels not read: {why}")]
    if reader.labels is None:
        note = (
            f"no labels: no {LABELS_MEMBER} member, and the images are not in class folders; "
            "ImageReader gives labels None"
        )
        return reader, None, [Advice("unlabelled", "note", path, note)]
    return reader, reader.label_source, []


def _headers(reader: ImageReader) -> list[tuple[int, _Header]]:
    """``(bytes, header)`` of every image, read on a few threads (reading an image releases
    the GIL; parsing its header is quick)."""

    def one(i: int) -> tuple[int, _Header]:
        try:
            data = reader.encoded(i)
        except (PackreadError, OSError) as e:
            return 0, str(e)
        try:
            fmt, w, h, cmyk, progressive = image_info(data, DEFAULT_MAX_PIXELS)
        except PackreadError as e:
            return len(data), str(e)
        return len(data), (fmt, w, h, cmyk, progressive)

    n = len(reader)
    out: list[tuple[int, _Header]] = []
    with ThreadPoolExecutor(max(1, min(HEADER_THREADS, os.cpu_count() or 1))) as pool:
        for lo in range(0, n, _BLOCK):
            out.extend(pool.map(one, range(lo, min(n, lo + _BLOCK))))
    return out


def _spread(values: list[int]) -> dict[str, int] | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median_low(values), "max": max(values)}


def _summary(names: list[str], headers: list[_Header]) -> ImageSummary:
    formats: Counter[str] = Counter()
    widths: list[int] = []
    heights: list[int] = []
    undecodable: list[list[str]] = []
    cmyk = progressive = 0
    lows = (0, *SHORTER_SIDE_EDGES)
    highs = (*(e - 1 for e in SHORTER_SIDE_EDGES), None)
    counts = [0] * len(lows)
    for name, header in zip(names, headers, strict=True):
        if isinstance(header, str):
            formats[UNDECODABLE] += 1
            if len(undecodable) < LISTED_UNDECODABLE:
                undecodable.append([name, header])
            continue
        fmt, w, h, is_cmyk, is_progressive = header
        formats[fmt] += 1
        cmyk += is_cmyk
        progressive += is_progressive
        widths.append(w)
        heights.append(h)
        counts[bisect.bisect_right(SHORTER_SIDE_EDGES, min(w, h))] += 1
    buckets: list[dict[str, Any]] = [
        {"min": lo, "max": hi, "count": c} for lo, hi, c in zip(lows, highs, counts, strict=True)
    ]
    return ImageSummary(
        images=len(names),
        formats={f: formats[f] for f in (*FORMATS, UNDECODABLE) if formats[f]},
        cmyk=cmyk,
        progressive=progressive,
        undecodable=undecodable,
        width=_spread(widths),
        height=_spread(heights),
        shorter_side=buckets,
    )


def _classes(summary: ImageSummary, path: str, reader: ImageReader) -> None:
    """Images per class: by class folder, or by label (named by the ``classes`` list of a
    ``dataset.json`` that ``packread convert`` wrote, when it names every label)."""
    assert reader.labels is not None
    counts = Counter(int(k) for k in np.asarray(reader.labels).tolist())
    names = reader.classes
    if names is None and summary.labels == LABELS_MEMBER:
        names = _json_classes(path)
        if names is not None and not all(0 <= k < len(names) for k in counts):
            names = None
    if names is not None:
        summary.classes = len(names)
        summary.per_class = {c: counts.get(k, 0) for k, c in enumerate(names)}
    else:
        summary.classes = len(counts)
        summary.per_class = {str(k): counts[k] for k in sorted(counts)}


def _json_classes(path: str) -> list[str] | None:
    try:
        with zipfile.ZipFile(path) as z:
            doc = json.loads(z.read(LABELS_MEMBER))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    classes = doc.get("classes") if isinstance(doc, dict) else None
    if isinstance(classes, list) and all(isinstance(c, str) for c in classes):
        return classes
    return None


def _layout(methods: list[int | None]) -> str:
    kinds = set(methods)
    if kinds == {None}:
        return "files"
    if len(kinds) > 1:
        return "mixed"
    return {0: "stored", 8: "deflated"}.get(kinds.pop(), "compressed")  # type: ignore[arg-type]


def _items(
    summary: ImageSummary,
    headers: list[tuple[int, _Header]],
    stored: list[int],
    methods: list[int | None],
    kind: str,
) -> list[Item]:
    """One row per format."""
    rows: dict[str, list[int]] = {}
    for k, (_, header) in enumerate(headers):
        rows.setdefault(UNDECODABLE if isinstance(header, str) else header[0], []).append(k)
    items = []
    for fmt in summary.formats:
        ks = rows[fmt]
        data = sum(headers[k][0] for k in ks)
        on_disk = sum(stored[k] for k in ks)
        note = None
        if fmt == "JPEG" and (summary.cmyk or summary.progressive):
            note = f"CMYK {summary.cmyk:,}, progressive {summary.progressive:,}"
        items.append(
            Item(
                fmt,
                "images",
                count=len(ks),
                layout=_layout([methods[k] for k in ks]),
                data_bytes=data,
                stored_bytes=on_disk,
                ratio=data / on_disk if any(methods[k] for k in ks) and on_disk else None,
                note=note,
            )
        )
    return items


def _advice(
    path: str,
    kind: str,
    summary: ImageSummary,
    headers: list[tuple[int, _Header]],
    stored: list[int],
    methods: list[int | None],
) -> list[Advice]:
    out = []
    n = summary.images
    bad = summary.formats.get(UNDECODABLE, 0)
    if bad:
        name = summary.undecodable[0][0]
        out.append(
            Advice(
                "undecodable-images",
                "warning",
                path,
                f"{bad:,} of {n:,} images do not decode as JPEG, PNG or WebP (first: {name}): "
                "ImageReader raises DecodeError on them, or with on_error='skip' replaces "
                "each by the next image that decodes",
            )
        )
    if kind == "image-folder" and n >= MANY_FILES and sum(stored) / n < SMALL_FILE_BYTES:
        out.append(
            Advice(
                "many-small-files",
                "warning",
                path,
                f"{n:,} image files of {human_bytes(sum(stored) // n)} on average: every sample "
                f"is an open, a read and a close ({n:,} opens per epoch); one uncompressed ZIP "
                "is read with pread on a single open file",
                f"packread convert {path} {_stem(path)}.zip",
            )
        )
    deflated = [k for k, m in enumerate(methods) if m not in (None, 0)]
    if deflated:
        size = sum(headers[k][0] for k in deflated)
        ratio = size / max(1, sum(stored[k] for k in deflated))
        saved = max(0.0, 1 - 1 / ratio) * 100
        out.append(
            Advice(
                "deflated-images",
                "warning" if ratio < WEAK_RATIO * 1.5 else "note",
                path,
                f"{len(deflated):,} of {n:,} images are deflated ({human_ratio(ratio)}, saves "
                f"{saved:.0f}%): JPEG, PNG and WebP are compressed already, and every read "
                f"inflates them ({human_seconds(size / INFLATE_BYTES_PER_S)} of one core per "
                "pass); stored members (zip -0) are read with one pread",
            )
        )
    jpegs = summary.formats.get("JPEG", 0)
    if summary.progressive:
        out.append(
            Advice(
                "progressive-jpeg",
                "note",
                path,
                f"{summary.progressive:,} of {jpegs:,} JPEGs are progressive: each decodes in "
                "several passes over its data, slower than a baseline JPEG",
            )
        )
    if summary.cmyk:
        out.append(
            Advice(
                "cmyk-jpeg",
                "note",
                path,
                f"{summary.cmyk:,} of {jpegs:,} JPEGs are CMYK: ImageReader converts them to "
                "RGB as PIL's convert('RGB') does",
            )
        )
    return out
