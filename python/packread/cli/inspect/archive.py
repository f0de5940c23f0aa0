"""ZIP archives and NPZ files: their members (by pattern when there are many) from the central
directory and the ``.npy`` headers, and the advice on deflated members."""

from __future__ import annotations

import os
from typing import Any

from ..._zip import ZipReader
from ...errors import PackreadError
from .._format import human_bytes, human_ratio, human_seconds
from .fixes import _stem
from .report import Advice, Item, Report
from .thresholds import INFLATE_BYTES_PER_S, LISTED_MEMBERS, NEGLIGIBLE_BYTES, WEAK_RATIO


def _inspect_zip(path: str, npz: bool) -> Report:
    z = ZipReader(path)
    names = z.names()
    infos = [z.info(i) for i in range(len(names))]
    items: list[Item] = []
    if npz or len(names) <= LISTED_MEMBERS:
        for k, (name, info) in enumerate(zip(names, infos, strict=True)):
            item = Item(
                name[:-4] if npz and name.endswith(".npy") else name,
                "array" if npz else "member",
                layout=_method(info.method),
                data_bytes=info.size,
                stored_bytes=info.compressed_size,
                ratio=_ratio(info.size, info.compressed_size),
            )
            _npy_type(z, k, item, whole=True)
            items.append(item)
    else:
        groups: dict[str, list[int]] = {}
        for k, name in enumerate(names):
            groups.setdefault(_pattern(name), []).append(k)
        for pattern, members in groups.items():
            size = sum(infos[k].size for k in members)
            stored = sum(infos[k].compressed_size for k in members)
            methods = {infos[k].method for k in members}
            sizes = {infos[k].size for k in members}
            item = Item(
                pattern,
                "members",
                count=len(members),
                layout=_method(next(iter(methods))) if len(methods) == 1 else "mixed",
                data_bytes=size,
                stored_bytes=stored,
                ratio=_ratio(size, stored),
            )
            _npy_type(z, members[0], item, whole=False)
            if item.dtype is None and len(sizes) == 1:
                item.sample_shape = [sizes.pop()]
            elif item.dtype is None:
                item.note = f"sizes {min(sizes):,} to {max(sizes):,} bytes"
            items.append(item)
    advice = _zip_advice(path, npz, infos)
    patterns = {_pattern(n) for n in names}
    samples = len(names) if not npz and len(patterns) == 1 else None
    return Report(path, "npz" if npz else "zip", os.path.getsize(path), 1, samples, items, advice)


def _method(method: int) -> str:
    return {0: "stored", 8: "deflated"}.get(method, f"method {method}")


def _ratio(data: int, stored: int) -> float | None:
    return data / stored if stored else None


def _pattern(name: str) -> str:
    folder, base = os.path.split(name)
    suffix = os.path.splitext(base)[1]
    star = f"*{suffix}" if suffix else "*"
    return f"{folder}/{star}" if folder else star


def _npy_type(z: ZipReader, position: int, item: Item, whole: bool) -> None:
    """Fills dtype and shapes from a ``.npy`` member's header."""
    if not z.names()[position].endswith(".npy"):
        return
    try:
        info = z.npy_header(position)
    except PackreadError as e:
        item.note = str(e)
        return
    if info is None:
        return
    dtype, shape = info
    item.dtype = str(dtype)
    if whole:
        item.shape = list(shape)
        item.sample_shape = list(shape[1:])
        item.samples = shape[0] if shape else None
    else:
        item.sample_shape = list(shape)


def _zip_advice(path: str, npz: bool, infos: list[Any]) -> list[Advice]:
    deflated = [i for i in infos if i.method != 0]
    size = sum(i.size for i in deflated)
    if not deflated or (size < NEGLIGIBLE_BYTES and not npz):
        return []
    stored = sum(i.compressed_size for i in deflated)
    ratio = size / stored if stored else 1.0
    return [_compression_advice(path, npz, len(deflated), len(infos), ratio, size, folder=False)]


def _compression_advice(
    path: str, npz: bool, deflated: int, members: int, ratio: float, size: int, folder: bool
) -> Advice:
    saved = max(0.0, 1 - 1 / ratio) * 100 if ratio else 0.0
    cost = f"inflating {human_bytes(size)} takes ~{human_seconds(size / INFLATE_BYTES_PER_S)}"
    cost += " of one core"
    if npz:
        what = "NPZ files are" if folder else f"{deflated} of {members} arrays are"
        message = (
            f"{what} deflate-compressed (numpy.savez_compressed; {human_ratio(ratio)}, saves "
            f"{saved:.0f}%): every load inflates them, {cost} per pass; numpy.savez stores "
            "arrays as they are, read with one pread and no decode"
        )
        fix = (
            f"packread convert {path} {_stem(path)}.zip"
            if folder
            else "re-save with numpy.savez (not savez_compressed)"
        )
        return Advice("compressed-npz", "warning", path, message, fix)
    message = (
        f"{deflated} of {members} members are deflated ({human_ratio(ratio)}, saves {saved:.0f}%): "
        f"every read inflates them, {cost} per pass; stored members are read with one pread"
    )
    level = "warning" if ratio < WEAK_RATIO * 1.5 else "note"
    return Advice(
        "compressed-members",
        level,
        path,
        message,
        f"packread convert {path} {_stem(path)}.h5 --codec lz4",
    )
