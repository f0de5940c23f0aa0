"""HDF5 files (h5py or PyTables): one row per dataset from the chunk indexes packread reads at
open, and the advice on chunk shapes, codecs and how packread reads each dataset."""

from __future__ import annotations

import math
import os

from ..._hdf5 import DEFAULT_CACHE_BYTES, HDF5Dataset, HDF5Reader
from ...errors import PackreadError
from .._format import human_bytes, human_ratio, human_shape
from .._layout import samples_per_chunk_for
from .filters import codec_of, describe_filter
from .fixes import _fix
from .report import Advice, Item, Report
from .thresholds import NEGLIGIBLE_BYTES, SPLIT_CHUNK_BYTES, TINY_CHUNK_BYTES, WEAK_RATIO


def _inspect_hdf5(path: str) -> Report:
    reader = HDF5Reader(path)
    found: dict[str, HDF5Dataset | str] = {name: reader[name] for name in reader.keys()}
    for name, why in reader.skipped.items():
        try:
            found[name] = HDF5Reader(path, name)[name]
        except PackreadError:
            found[name] = why  # no first axis, or no fixed-size type: listed with the reason
    items, advice = [], []
    for name in sorted(found):
        ds = found[name]
        if isinstance(ds, str):
            items.append(Item(name, "dataset", note=ds))
            continue
        item = _dataset_item(ds)
        if name in reader.skipped:
            item.note = reader.skipped[name]
        items.append(item)
        advice.extend(_dataset_advice(path, ds, item))
    return Report(
        path,
        "hdf5",
        os.path.getsize(path),
        1,
        len(reader) if reader.keys() else None,
        items,
        advice,
    )


def _dataset_item(ds: HDF5Dataset) -> Item:
    itemsize = ds.dtype.itemsize
    data = None if ds.vlen is not None else math.prod(ds.shape) * itemsize
    ratio = None
    if ds.chunks and ds.stored_bytes and ds.vlen is None:
        ratio = ds.chunks_written * math.prod(ds.chunks) * itemsize / ds.stored_bytes
    elif ds.stored_bytes and data:
        ratio = data / ds.stored_bytes
    # "contiguous", "never written", "libhdf5" (compact, external...), "unreadable"
    layout = "chunked" if ds.chunks else ds.read_path.split(":")[0].split(" (")[0]
    dtype = str(ds.dtype) if ds.vlen is None else f"vlen {ds.vlen['kind']} of {ds.dtype}"
    return Item(
        name=ds.name,
        kind="dataset",
        dtype=dtype,
        shape=list(ds.shape),
        sample_shape=list(ds.shape[1:]),
        samples=ds.shape[0] if ds.shape else None,
        chunks=list(ds.chunks) if ds.chunks else None,
        layout=layout,
        filters=[describe_filter(*f) for f in ds.filters],
        data_bytes=data,
        stored_bytes=ds.stored_bytes,
        ratio=ratio,
        read_path=ds.read_path,
    )


def _dataset_advice(path: str, ds: HDF5Dataset, item: Item) -> list[Advice]:
    out: list[Advice] = []
    name = ds.name
    compressing = [f for f in item.filters if f not in ("shuffle", "fletcher32")]
    weak = bool(compressing) and item.ratio is not None and item.ratio < WEAK_RATIO
    codec = "none" if weak else codec_of(item.filters)
    if ds.read_path.startswith("unreadable"):
        why = ds.read_path[len("unreadable (") : -1]
        out.append(
            Advice(
                "no-decoder",
                "warning",
                name,
                f"packread cannot read it: {why}; convert it with h5py and hdf5plugin installed",
                _fix(path, "zstd"),
            )
        )
        return out
    if ds.read_path.startswith("libhdf5"):
        why = ds.read_path[len("libhdf5 (") : -1]
        out.append(
            Advice(
                "libhdf5-read",
                "warning" if (item.data_bytes or 0) >= NEGLIGIBLE_BYTES else "note",
                name,
                f"read by libhdf5 ({why}): under its global lock, one read at a time, "
                "not decoded in parallel",
                _fix(path, "lz4"),
            )
        )
    data = item.data_bytes or 0
    if ds.vlen is not None or data < NEGLIGIBLE_BYTES or not ds.shape or ds.shape[0] == 0:
        return out
    sample_bytes = _sample_bytes(ds)
    k = samples_per_chunk_for(sample_bytes)
    if ds.chunks:
        c0 = ds.chunks[0]
        chunk_bytes = math.prod(ds.chunks) * ds.dtype.itemsize
        spans = math.prod(
            math.ceil(s / c) for s, c in zip(ds.shape[1:], ds.chunks[1:], strict=True) if s and c
        )
        decoded = spans * chunk_bytes
        if c0 > k and sample_bytes:
            out.append(
                Advice(
                    "misaligned-chunks",
                    "warning",
                    name,
                    f"chunks {human_shape(ds.chunks)} hold {c0} samples each: reading one sample "
                    f"decodes {c0} samples ({human_bytes(decoded)}, "
                    f"{decoded / sample_bytes:.0f}x the {human_bytes(sample_bytes)} it needs)",
                    _fix(path, codec),
                )
            )
            if chunk_bytes > DEFAULT_CACHE_BYTES:
                out.append(
                    Advice(
                        "huge-chunks",
                        "warning",
                        name,
                        f"chunks of {human_bytes(chunk_bytes)} are larger than packread's "
                        f"chunk cache ({human_bytes(DEFAULT_CACHE_BYTES)}): a chunk cannot be "
                        "kept for the next batch, so every batch decodes its chunks again",
                        _fix(path, codec),
                    )
                )
        if spans > 1 and chunk_bytes < SPLIT_CHUNK_BYTES:
            out.append(
                Advice(
                    "split-samples",
                    "warning",
                    name,
                    f"one sample spans {spans} chunks of {human_bytes(chunk_bytes)}: "
                    f"{spans} reads and decodes for every sample",
                    _fix(path, codec),
                )
            )
        elif c0 < k and chunk_bytes < TINY_CHUNK_BYTES:
            out.append(
                Advice(
                    "tiny-chunks",
                    "warning",
                    name,
                    f"chunks of {human_bytes(chunk_bytes)} are far too small: "
                    f"{ds.chunks_written:,} chunks, each a separate read and decode; "
                    f"{k} samples per chunk make them {human_bytes(k * sample_bytes)}",
                    _fix(path, codec),
                )
            )
        if weak and item.ratio is not None:
            saved = max(0.0, 1 - 1 / item.ratio) * 100
            out.append(
                Advice(
                    "weak-compression",
                    "warning",
                    name,
                    f"{', '.join(compressing)} shrinks it by {human_ratio(item.ratio)} (saves "
                    f"{saved:.0f}%), yet every read decodes it",
                    _fix(path, "none"),
                )
            )
    elif item.layout == "contiguous":
        out.append(
            Advice(
                "contiguous",
                "note",
                name,
                f"contiguous and uncompressed ({human_bytes(data)}): one pread per sample, the "
                "fastest layout for random reads, but it cannot be compressed; chunks of "
                f"{k} sample{'s' if k > 1 else ''} with a codec can (packread convert --codec)",
            )
        )
    return out


def _sample_bytes(ds: HDF5Dataset) -> int:
    return math.prod(ds.shape[1:]) * ds.dtype.itemsize
