"""NPY files, and folders of ``.npy`` or ``.npz`` files: the file sizes plus the headers of a
few files spread over the folder, and the advice on many small files and on compressed NPZ
files."""

from __future__ import annotations

import math
import os
from collections import Counter

from ..._npy import NpyReader
from ..._npz import NpzReader
from ..._zip import ZipReader
from ...errors import PackreadError
from .._format import human_bytes
from .archive import _compression_advice, _method, _ratio
from .fixes import _stem
from .report import Advice, Item, Report
from .thresholds import MANY_FILES, SAMPLED_FILES, SMALL_FILE_BYTES


def _inspect_npy_file(path: str) -> Report:
    r = NpyReader([path])
    data = math.prod(r.shape) * r.dtype.itemsize
    item = Item(
        os.path.basename(path),
        "array",
        dtype=str(r.dtype),
        shape=list(r.shape),
        sample_shape=list(r.shape[1:]),
        samples=r.shape[0] if r.shape else None,
        layout="stored",
        data_bytes=data,
        stored_bytes=os.path.getsize(path),
    )
    return Report(path, "npy", os.path.getsize(path), 1, item.samples, [item], [])


def _inspect_folder(path: str) -> Report:
    entries = sorted(
        (e for e in os.scandir(path) if e.is_file() and e.name.endswith((".npy", ".npz"))),
        key=lambda e: e.name,
    )
    npy = [e for e in entries if e.name.endswith(".npy")]
    npz = [e for e in entries if e.name.endswith(".npz")]
    if not entries:
        raise FileNotFoundError(f"{path}: no .npy or .npz files in this folder")
    chosen, suffix = (npz, "npz") if len(npz) >= len(npy) else (npy, "npy")
    sizes = [e.stat().st_size for e in chosen]
    n, disk = len(chosen), sum(sizes)
    step = max(1, n // SAMPLED_FILES)
    sampled = [chosen[i].path for i in range(0, n, step)][:SAMPLED_FILES]
    if chosen[-1].path not in sampled:
        sampled.append(chosen[-1].path)
    items: list[Item] = []
    advice: list[Advice] = []
    checked = f"headers checked on {len(sampled)} of {n:,} files"
    if suffix == "npy":
        item = Item("*.npy", "files", count=n, layout="one file per sample", stored_bytes=disk)
        try:
            r = NpyReader(sampled)
            item.dtype, item.sample_shape = str(r.dtype), list(r.shape)
            item.data_bytes = n * math.prod(r.shape) * r.dtype.itemsize
            item.note = checked
        except PackreadError as e:
            item.note = str(e)
            advice.append(Advice("inconsistent", "warning", path, f"files disagree: {e}"))
        items.append(item)
    else:
        advice.extend(_npz_folder(path, sampled, n, items, checked))
    if n >= MANY_FILES and disk / n < SMALL_FILE_BYTES:
        advice.append(
            Advice(
                "many-small-files",
                "warning",
                path,
                f"{n:,} files of {human_bytes(disk // n)} on average: every sample is an open, "
                f"a read and a close ({n:,} opens per epoch); one archive is read with pread "
                "on a single open file",
                f"packread convert {path} {_stem(path)}.h5  (or {_stem(path)}.zip)",
            )
        )
    if len(npy) and len(npz):
        advice.append(
            Advice(
                "inconsistent",
                "note",
                path,
                f"the folder holds {len(npy):,} .npy and {len(npz):,} .npz files; "
                f"the {suffix} files are inspected",
            )
        )
    return Report(path, f"{suffix}-folder", disk, n, n, items, advice)


def _npz_folder(
    path: str, sampled: list[str], n: int, items: list[Item], checked: str
) -> list[Advice]:
    advice: list[Advice] = []
    try:
        r = NpzReader(sampled)
        r.batch(range(len(sampled)))  # every sampled file checked against the first
    except PackreadError as e:
        items.append(Item("*.npz", "files", count=n, note=str(e)))
        return [Advice("inconsistent", "warning", path, f"files disagree: {e}")]
    methods: dict[str, Counter[int]] = {k: Counter() for k in r.keys()}
    size: dict[str, int] = dict.fromkeys(r.keys(), 0)
    stored: dict[str, int] = dict.fromkeys(r.keys(), 0)
    for file in sampled:
        z = ZipReader(file)
        for k, name in enumerate(z.names()):
            key = name[:-4] if name.endswith(".npy") else name
            if key in methods:
                info = z.info(k)
                methods[key][info.method] += 1
                size[key] += info.size
                stored[key] += info.compressed_size
    for key in r.keys():
        kinds = methods[key]
        sample = r.shape[key]
        items.append(
            Item(
                key,
                "array",
                count=n,
                dtype=str(r.dtype[key]),
                sample_shape=list(sample),
                samples=n,
                layout=_method(next(iter(kinds))) if len(kinds) == 1 else "mixed",
                data_bytes=n * math.prod(sample) * r.dtype[key].itemsize,
                ratio=_ratio(size[key], stored[key]),
                note=checked,
            )
        )
    deflated = [k for k, c in methods.items() if any(m != 0 for m in c)]
    if deflated:
        total = sum(size[k] for k in deflated)
        ratio = total / max(1, sum(stored[k] for k in deflated))
        per_file = total / len(sampled)
        advice.append(_compression_advice(path, True, 0, 0, ratio, int(per_file * n), folder=True))
    return advice
