"""A :class:`~packread.cli.inspect.report.Report` written out: as text (a header line, the tree
with one row per item in aligned columns, then the advice and the commands that fix it) and
as the JSON ``--json`` prints."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .._format import human_bytes, human_ratio, human_shape, path_name

if TYPE_CHECKING:
    from .report import Item, Report

_FORMATS = {
    "hdf5": "HDF5",
    "zip": "ZIP",
    "npz": "NPZ",
    "npy": "NPY",
    "npy-folder": "folder of .npy files",
    "npz-folder": "folder of .npz files",
    "image-folder": "ImageFolder tree",
    "image-zip": "ZIP of images",
    "frame-folder": "frame folders",
    "frame-zip": "ZIP of frame folders",
    "tar": "tar shards",
}
#: How a ZIP of images is labelled, for the header line.
_ZIP_LABELS = {
    "folders": "ZIP of an ImageFolder tree",
    "dataset.json": "ZIP of images labelled by dataset.json",
}
#: Classes listed one a line; above this, the fewest and the most.
_LISTED_CLASSES = 20
_BAR = 30


def _json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2)


def _row(label: str, item: Item | None) -> list[str]:
    if item is None:
        return [label]
    if item.note and not item.dtype:
        return [label, item.note]  # printed as it is, outside the columns
    where = item.layout
    if item.chunks:
        where = f"chunks {human_shape(item.chunks)}"
    elif item.count > 1 and item.kind != "array":
        where = f"{item.count:,} x {item.layout}"
    sample = "" if item.sample_shape is None else f"sample {human_shape(item.sample_shape)}"
    return [
        label,
        item.dtype or "bytes",
        sample,
        where,
        "+".join(item.filters),
        "" if item.ratio is None else human_ratio(item.ratio),
        human_bytes(item.stored_bytes) if item.stored_bytes is not None else "",
    ]


def _tree(items: list[Item], ascii_only: bool) -> list[tuple[str, Item | None]]:
    """``(label, item)`` rows: groups of the paths as a tree, items at its leaves."""
    tee, last, bar, gap = (
        ("|-- ", "`-- ", "|   ", "    ")
        if ascii_only
        else (
            "├── ",
            "└── ",
            "│   ",
            "    ",
        )
    )
    root: dict[str, Any] = {}
    for item in items:
        node = root
        parts = [p for p in item.name.strip("/").split("/") if p] or [item.name]
        for part in parts[:-1]:
            node = node.setdefault(part + "/", {})
        node[parts[-1]] = item
    rows: list[tuple[str, Item | None]] = []

    def walk(node: dict[str, Any], prefix: str) -> None:
        keys = list(node)
        for i, key in enumerate(keys):
            end = i == len(keys) - 1
            value = node[key]
            label = prefix + (last if end else tee) + key
            if isinstance(value, dict):
                rows.append((label, None))
                walk(value, prefix + (gap if end else bar))
            else:
                rows.append((label, value))

    walk(root, "")
    return rows


def _text(report: Report, ascii_only: bool) -> str:
    head = [path_name(report.path) or report.path]
    what = _FORMATS.get(report.format, report.format)
    if report.format == "image-zip" and report.images is not None:
        what = _ZIP_LABELS.get(report.images.labels or "", what)
    head.append(f"{what}, {human_bytes(report.disk_bytes)} on disk")
    if report.files > 1:
        head[-1] += f" in {report.files:,} files"
    if report.samples is not None:
        noun = "images" if report.images is not None else "samples"
        noun = "videos" if report.clips is not None else noun
        head[-1] += f", {report.samples:,} {noun}"
    lines = ["  ".join(head)]
    if report.images is not None:
        lines += _images_text(report, ascii_only)
        return _advice_text(report, lines)
    if report.clips is not None:
        lines += _clips_text(report)
        return _advice_text(report, lines)
    table = [_row(label, item) for label, item in _tree(report.items, ascii_only)]
    full = [r for r in table if len(r) == 7]
    widths = [max(len(r[c]) for r in full) for c in range(7)] if full else []
    for r in table:
        if len(r) < 7:
            lines.append("  ".join(r))
            continue
        cells = [r[c].ljust(widths[c]) if c < 5 else r[c].rjust(widths[c]) for c in range(7)]
        lines.append("  ".join(cells).rstrip())
    for item in report.items:
        if item.note and item.dtype:
            lines.append(f"  {item.name}: {item.note}")
    return _advice_text(report, lines)


def _advice_text(report: Report, lines: list[str]) -> str:
    lines.append("")
    if not report.advice:
        lines.append("advice: none; this layout suits random sample reads")
        return "\n".join(lines)
    lines.append("advice:")
    for a in report.advice:
        mark = "!" if a.level == "warning" else "-"
        target = "" if a.target == report.path else f"{a.target}: "
        lines.append(f"  {mark} {target}{a.message}")
    fixes = list(dict.fromkeys(a.fix for a in report.advice if a.fix))
    if fixes:
        lines.append("")
        lines.append("to fix:" if len(fixes) == 1 else "to fix (one of):")
        lines.extend(f"  {fix}" for fix in fixes)
    return "\n".join(lines)


def _clips_text(report: Report) -> list[str]:
    """A clip source: frames per video, the sampled frames' sizes and formats, the classes."""
    c = report.clips
    assert c is not None
    lines = [f"  {c.frames:,} frames in {c.videos:,} videos"]
    if c.frames_per_video:
        f = c.frames_per_video
        lines.append(
            f"  frames per video: min {f['min']:,}, median {f['median']:,}, max {f['max']:,}"
        )
    if c.width and c.height:
        w, h = c.width, c.height
        lines.append(
            f"  frame size (first, middle, last of each video): {w['min']}-{w['max']} wide "
            f"(median {w['median']}), {h['min']}-{h['max']} high (median {h['median']})"
        )
    if c.formats:
        lines.append("  formats: " + ", ".join(f"{k} {v:,}" for k, v in sorted(c.formats.items())))
    if c.classes is not None:
        lines.append(f"  {c.classes} classes (labels from {c.labels})")
    return lines


def _images_text(report: Report, ascii_only: bool) -> list[str]:
    """An image source: a row per format (with the undecodable images named), the histogram
    of the shorter side, the spread of widths and heights, and the classes."""
    summary = report.images
    assert summary is not None
    tee, last = ("|-- ", "`-- ") if ascii_only else ("├── ", "└── ")
    rows = []
    for k, item in enumerate(report.items):
        rows.append(
            [
                (last if k == len(report.items) - 1 else tee) + item.name,
                f"{item.count:,} image{'s' if item.count != 1 else ''}",
                item.layout,
                "" if item.ratio is None else human_ratio(item.ratio),
                human_bytes(item.stored_bytes),
                item.note or "",
            ]
        )
    lines = _columns(rows, right={1, 3, 4})
    for name, why in summary.undecodable:
        lines.append(f"      {name}: {why}")
    listed = len(summary.undecodable)
    if summary.formats.get("undecodable", 0) > listed:
        lines.append(f"      ... and {summary.formats['undecodable'] - listed:,} more")
    counts = [b["count"] for b in summary.shorter_side]
    if any(counts):
        first = next(k for k, c in enumerate(counts) if c)
        end = max(k for k, c in enumerate(counts) if c) + 1
        top, total = max(counts), sum(counts)
        lines += ["", "shorter side (pixels)"]
        bar = "#" if ascii_only else "█"
        hist = [
            [
                f"  {_bucket_label(b)}",
                f"{b['count']:,}",
                f"{100 * b['count'] / total:.0f}%",
                bar * round(_BAR * b["count"] / top),
            ]
            for b in summary.shorter_side[first:end]
        ]
        lines += _columns(hist, right={1, 2})
    if summary.width and summary.height:
        spread = [
            [f"{what}  min", f"{s['min']:,}", "median", f"{s['median']:,}", "max", f"{s['max']:,}"]
            for what, s in (("width ", summary.width), ("height", summary.height))
        ]
        lines += _columns(spread, right={1, 3, 5})
    if summary.per_class is not None:
        where = {"folders": "class folders", "dataset.json": "labels in dataset.json"}
        total = sum(summary.per_class.values())
        lines += [
            "",
            f"classes: {summary.classes:,} ({where.get(summary.labels or '', 'labels')}), "
            f"{total:,} images",
        ]
        by_count = sorted(summary.per_class.items(), key=lambda kv: (kv[1], kv[0]))
        if len(by_count) <= _LISTED_CLASSES:
            lines += _columns([[f"  {c}", f"{n:,}"] for c, n in summary.per_class.items()], {1})
        else:
            values = sorted(summary.per_class.values())
            (low, low_n) = min(summary.per_class.items(), key=lambda kv: kv[1])
            (high, high_n) = max(summary.per_class.items(), key=lambda kv: kv[1])
            lines.append(
                f"  per class: min {low_n:,} ({low}), median {values[(len(values) - 1) // 2]:,},"
                f" max {high_n:,} ({high})"
            )
            if low_n != high_n:
                lines.append("  fewest: " + ", ".join(f"{c} {n:,}" for c, n in by_count[:5]))
    return lines


def _columns(rows: list[list[str]], right: set[int]) -> list[str]:
    """Rows of cells in aligned columns (those in ``right`` aligned right)."""
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))] if rows else []
    return [
        "  ".join(
            cell.rjust(widths[c]) if c in right else cell.ljust(widths[c])
            for c, cell in enumerate(r)
        ).rstrip()
        for r in rows
    ]


def _bucket_label(bucket: dict[str, Any]) -> str:
    if bucket["min"] == 0:
        return f"<{bucket['max'] + 1}"
    if bucket["max"] is None:
        return f">={bucket['min']}"
    return f"{bucket['min']}-{bucket['max']}"
