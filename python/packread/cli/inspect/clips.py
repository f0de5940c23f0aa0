"""Clip sources, as :class:`packread.ClipReader` reads them (``packread inspect --clips``): a
tree of frame folders (on disk or in a ZIP) and HDF5 sequences or time axes.

For frame folders the report counts the videos and their frames (min, median, max), and reads
the headers of three frames of every video (its first, middle and last; nothing is decoded)
for the frames' sizes and formats, naming the videos whose frames differ in size (a clip's
frames share one crop, so the reader refuses them). For HDF5 it adds to the usual report
whether the chunks fit a clip: a chunk holding several rows makes every clip decode them all
(the spatiotemporal seed measured 78x between one datapoint a chunk and auto-chunking)."""

from __future__ import annotations

import contextlib
import os
import statistics
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from ..._clip import ClipReader
from ..._packread import image_info
from ..._registry import sniff
from ..._zip import ZipReader
from ...errors import PackreadError
from .._format import human_bytes
from .hdf5 import _inspect_hdf5
from .report import Advice, ClipSummary, Item, Report
from .thresholds import HEADER_THREADS


def _spread(values: list[int]) -> dict[str, int] | None:
    if not values:
        return None
    return {
        "min": min(values),
        "median": int(statistics.median(values)),
        "max": max(values),
    }


def _header(archive: ZipReader | None, name: str) -> tuple[str, int, int] | str:
    """``(format, width, height)`` of a frame (a file, or a member of ``archive``), or why
    not."""
    try:
        if archive is not None:
            data = archive.read(name)
        else:
            with open(name, "rb") as f:
                data = f.read(1 << 20)
        fmt, width, height, _, _ = image_info(data)
        return fmt, width, height
    except (OSError, PackreadError) as e:
        return str(e)


def _inspect_clips(path: str) -> Report:
    """Inspects a frame tree (a folder, or a ZIP holding one) or an HDF5 file as clips."""
    if not os.path.isdir(path) and sniff(path) == "hdf5":
        return _inspect_hdf5_clips(path)
    reader = ClipReader(path, 1, sampling="uniform", short="skip")
    videos = reader.videos
    counts = [n for _, n in videos]
    # Three frames a video: its first, middle and last (every frame would cost a read each).
    positions = []
    for v, (_, n) in enumerate(videos):
        for p in sorted({0, n // 2, n - 1} if n else set()):
            positions.append((v, p))
    frames: dict[int, list[str]] = {}
    for v, _ in positions:
        if v not in frames:
            frames[v] = reader.video_frames(v)
    picks = [(v, frames[v][p]) for v, p in positions]
    archive = None if os.path.isdir(path) else ZipReader(path)
    with ThreadPoolExecutor(HEADER_THREADS) as pool:
        headers = list(pool.map(lambda vn: _header(archive, vn[1]), picks))
    formats: Counter[str] = Counter()
    sizes: dict[int, set[tuple[int, int]]] = {}
    undecodable = []
    widths, heights = [], []
    for (v, name), h in zip(picks, headers, strict=True):
        if isinstance(h, str):
            formats["undecodable"] += 1
            if len(undecodable) < 5:
                undecodable.append([name, h])
            continue
        formats[h[0]] += 1
        sizes.setdefault(v, set()).add((h[1], h[2]))
        widths.append(h[1])
        heights.append(h[2])
    mixed = [videos[v][0] for v, s in sorted(sizes.items()) if len(s) > 1]
    all_sizes = {s for v in sizes.values() for s in v}
    per_class = None
    if reader.labels is not None and reader.classes is not None:
        by_video = Counter(reader.classes[int(label)] for label in reader.labels)
        per_class = dict(sorted(by_video.items()))
    summary = ClipSummary(
        videos=len(videos),
        frames=sum(counts),
        frames_per_video=_spread(counts),
        width=_spread(widths),
        height=_spread(heights),
        formats=dict(formats),
        undecodable=undecodable,
        empty=[name for name, n in videos if n == 0][:5],
        mixed_sizes=mixed[:5],
        labels=reader.label_source,
        classes=None if reader.classes is None else len(reader.classes),
        per_class=per_class,
    )
    advice = []
    if mixed:
        advice.append(
            Advice(
                "mixed-frame-sizes",
                "warning",
                path,
                f"{len(mixed)} video(s) hold frames of different sizes (first: {mixed[0]}); "
                "a clip's frames share one crop, so ClipReader refuses such a clip",
            )
        )
    if len(all_sizes) > 1:
        advice.append(
            Advice(
                "frame-sizes",
                "note",
                path,
                f"frames come in {len(all_sizes)} sizes: read with decode=ImageDecode(size) "
                "(frames at their own size must all be the first video's)",
            )
        )
    if summary.empty:
        advice.append(
            Advice(
                "empty-videos",
                "warning",
                path,
                f"video folder(s) without frames (first: {summary.empty[0]}): "
                "ClipReader refuses them unless short='skip'",
            )
        )
    if undecodable:
        advice.append(
            Advice(
                "undecodable-frames",
                "warning",
                path,
                f"{formats['undecodable']} sampled frame(s) do not decode (first: "
                f"{undecodable[0][0]}: {undecodable[0][1]})",
            )
        )
    if os.path.isdir(path) and sum(counts) >= 10_000:
        advice.append(
            Advice(
                "many-frame-files",
                "note",
                path,
                f"{sum(counts):,} frame files: every clip opens clip_len of them; a ZIP of the "
                "tree reads without an open per frame",
                fix=f"packread convert {path} {path.rstrip(os.sep)}.zip",
            )
        )
    disk = _disk(path)
    item = Item(
        "frames",
        "frames",
        count=sum(counts),
        note=f"{len(videos):,} videos" + ("" if not all_sizes else f", {len(all_sizes)} sizes"),
        data_bytes=None,
        stored_bytes=disk,
    )
    fmt = "frame-folder" if os.path.isdir(path) else "frame-zip"
    files = sum(counts) if os.path.isdir(path) else 1
    return Report(path, fmt, disk, files, len(videos), [item], advice, clips=summary)


def _disk(path: str) -> int:
    if not os.path.isdir(path):
        return os.path.getsize(path)
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(folder, name))
    return total


def _inspect_hdf5_clips(path: str) -> Report:
    """The HDF5 report, and whether each dataset's chunks fit a clip."""
    report = _inspect_hdf5(path)
    for item in report.items:
        if not item.shape or not item.chunks or len(item.shape) < 2:
            continue
        rows = item.chunks[0]
        if rows > 1:
            row_bytes = (item.data_bytes or 0) // max(item.shape[0], 1)
            report.advice.append(
                Advice(
                    "clip-chunks",
                    "warning",
                    item.name,
                    f"a chunk holds {rows} rows: a clip that needs one row (a sequence of "
                    f"(N, T, ...)) or a few (frames of a time axis) decodes all {rows} "
                    f"({human_bytes(rows * row_bytes)} for {human_bytes(row_bytes)} a row); "
                    "store one row a chunk, "
                    f"chunks=(1, {', '.join(str(c) for c in item.shape[1:])})",
                )
            )
    return report
