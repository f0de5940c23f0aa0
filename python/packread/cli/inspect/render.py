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
}


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
    head.append(
        f"{_FORMATS.get(report.format, report.format)}, {human_bytes(report.disk_bytes)} on disk"
    )
    if report.files > 1:
        head[-1] += f" in {report.files:,} files"
    if report.samples is not None:
        head[-1] += f", {report.samples:,} samples"
    lines = ["  ".join(head)]
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
