"""``packread inspect``: what a file or folder holds, how it is laid out on disk, and what that
layout costs a training loop reading random samples, each piece of advice with its reason in
numbers.

Only metadata is read: HDF5 chunk indexes (the same ones packread reads at open), ZIP central
directories, NPY headers, and for folders the file sizes plus the headers of a few files spread
over the folder. A file of any size inspects in about the time it takes to open it.

>>> report = inspect("train.h5")
>>> [item.name for item in report.items]
['images', 'labels']
>>> print(report.render())  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from .._hdf5 import DEFAULT_CACHE_BYTES, HDF5Dataset, HDF5Reader
from .._npy import NpyReader
from .._open import sniff
from .._zip import NpzReader, ZipReader
from ..errors import PackreadError, UnsupportedError

#: Chunks below this spend more on per-chunk work (a read, a decoder call, an index entry)
#: than on their bytes; chunks are best at least this large, or one whole sample.
MIN_CHUNK_BYTES = 4 << 10
#: Chunks below this are far too small: the per-chunk work dwarfs their bytes.
TINY_CHUNK_BYTES = 1 << 10
#: A sample split over chunks smaller than this pays the per-chunk work many times.
SPLIT_CHUNK_BYTES = 1 << 20
#: Compression that shrinks data by less than this factor is not worth a decode per read.
WEAK_RATIO = 1.1
#: A folder of at least this many files, averaging under ``SMALL_FILE_BYTES``, is worth
#: packing into one archive.
MANY_FILES = 1000
SMALL_FILE_BYTES = 1 << 20
#: Data below this size gets no layout advice: it reads in no time whatever its layout.
NEGLIGIBLE_BYTES = 1 << 20
#: Files of a folder whose headers are read (spread over the folder) to check they agree.
SAMPLED_FILES = 32
#: ZIP archives with more members than this are listed by pattern (folder and suffix).
LISTED_MEMBERS = 20
#: Decode speed of deflate on one core (libdeflate, from DESIGN.md's measurements).
INFLATE_BYTES_PER_S = 0.9e9


@dataclass
class Item:
    """One row of the tree: an HDF5 dataset, a ZIP member (or a pattern of members), an NPZ
    array, or the files of a folder.

    >>> images = inspect("train.h5").items[0]
    >>> images.sample_shape, images.chunks, images.filters
    ([3, 32, 32], [1, 3, 32, 32], ['gzip(4)'])
    """

    name: str
    #: ``"dataset"``, ``"member"``, ``"members"``, ``"array"`` or ``"files"``.
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
    #: ``compressed-npz``, ``compressed-members``, ``many-small-files``, ``inconsistent``.
    code: str
    #: ``"warning"`` (costs reads) or ``"note"`` (worth knowing).
    level: str
    #: The dataset, member pattern or path it is about.
    target: str
    message: str
    #: A command that fixes it, when there is one.
    fix: str | None = None


@dataclass
class Report:
    """What :func:`inspect` found: a tree of items and the advice on them.

    >>> report = inspect("train.h5")
    >>> report.format, report.samples
    ('hdf5', 64)
    """

    path: str
    #: ``"hdf5"``, ``"zip"``, ``"npz"``, ``"npy"``, ``"npy-folder"`` or ``"npz-folder"``.
    format: str
    #: Bytes on disk (all files, for a folder).
    disk_bytes: int
    files: int
    samples: int | None
    items: list[Item]
    advice: list[Advice]

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
        return json.dumps(self.to_dict(), indent=2)

    def render(self, ascii_only: bool = False) -> str:
        """The report as text: a header line, the tree with one row per item, then the advice.

        >>> print(inspect("train.h5").render())  # doctest: +ELLIPSIS
        train.h5  HDF5, ... on disk, 64 samples
        ...
        """
        return _render(self, ascii_only)


def inspect(path: str | os.PathLike[str]) -> Report:
    """Inspects an HDF5 file (h5py or PyTables), a ZIP archive, an NPZ or NPY file, or a folder
    of ``.npy`` or ``.npz`` files; only metadata is read.

    >>> report = inspect("train.h5")
    >>> sorted({a.code for a in report.advice})
    []
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return _inspect_folder(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file or folder")
    lower = path.lower()
    kind = sniff(path)
    if kind == "hdf5":
        return _inspect_hdf5(path)
    if kind == "zip":
        return _inspect_zip(path, npz=lower.endswith(".npz"))
    if kind == "npy":
        return _inspect_npy_file(path)
    raise UnsupportedError(
        f"{path}: not an HDF5, ZIP, NPZ or NPY file, nor a folder of .npy or .npz files"
    )


# --------------------------------------------------------------------------------------------
# HDF5


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


_BLOSC_NAMES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}
_BLOSC_SHUFFLE = {0: "", 1: ", shuffle", 2: ", bitshuffle"}
_BITSHUFFLE_INNER = {0: "", 2: ":lz4", 3: ":zstd"}


def describe_filter(filter_id: int, name: str, params: tuple[int, ...]) -> str:
    """A filter of an HDF5 pipeline in short: ``gzip(4)``, ``blosc(lz4, 5, shuffle)``, ...

    >>> describe_filter(1, "deflate", (4,))
    'gzip(4)'
    >>> describe_filter(32001, "blosc", (2, 2, 4, 10000, 5, 1, 1))
    'blosc(lz4, 5, shuffle)'
    """
    p = list(params)
    if filter_id == 1:
        return f"gzip({p[0]})" if p else "gzip"
    if filter_id == 2:
        return "shuffle"
    if filter_id == 3:
        return "fletcher32"
    if filter_id == 32000:
        return "lzf"
    if filter_id == 32001 and len(p) >= 6:  # PyTables leaves out the compressor for blosclz
        cname = _BLOSC_NAMES.get(p[6], p[6]) if len(p) > 6 else "blosclz"
        return f"blosc({cname}, {p[4]}{_BLOSC_SHUFFLE.get(p[5], '')})"
    if filter_id == 32004:
        return "lz4"
    if filter_id == 32008:
        inner = _BITSHUFFLE_INNER.get(p[4], "") if len(p) > 4 else ""
        return f"bitshuffle{inner}"
    if filter_id == 32015:
        return f"zstd({p[0]})" if p else "zstd"
    short = name.split(";")[0].split(" see ")[0].strip() or "filter"
    return f"{short} (id {filter_id})"


def codec_of(filters: list[str]) -> str:
    """The ``--codec`` of ``packread convert`` that stores data as these filters do, or
    ``"lz4"`` for codecs packread does not write.

    >>> codec_of(["shuffle", "gzip(4)"])
    'gzip:4'
    >>> codec_of([])
    'none'
    """
    for f in filters:
        if f.startswith("gzip"):
            return f"gzip:{f[5:-1]}" if "(" in f else "gzip"
        if f == "lzf" or f == "lz4":
            return f
        if f.startswith("zstd"):
            return f"zstd:{f[5:-1]}" if "(" in f else "zstd"
        if f.startswith("blosc("):
            cname, level = f[6:-1].split(", ")[:2]
            return f"blosc:{cname}:{level}" if cname != "snappy" else "blosc:lz4"
        if f.startswith("bitshuffle"):
            return "bitshuffle:zstd" if f.endswith("zstd") else "bitshuffle:lz4"
    compressing = [f for f in filters if f not in ("shuffle", "fletcher32")]
    return "lz4" if compressing else "none"


def samples_per_chunk_for(sample_bytes: int) -> int:
    """Samples per chunk for random reads: one, unless a sample is smaller than
    ``MIN_CHUNK_BYTES`` (then enough to fill that).

    >>> samples_per_chunk_for(196_608), samples_per_chunk_for(8)
    (1, 512)
    """
    if sample_bytes <= 0:
        return 1
    return max(1, math.ceil(MIN_CHUNK_BYTES / sample_bytes))


def _fix(path: str, codec: str) -> str:
    """The conversion that gives every dataset chunks of ``samples_per_chunk_for`` samples."""
    return f"packread convert {path} {_stem(path)}-packed.h5 --codec {codec}"


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
                    f"chunks {_shape(ds.chunks)} hold {c0} samples each: reading one sample "
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
                    f"{', '.join(compressing)} shrinks it by {item.ratio:.2f}x (saves "
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


# --------------------------------------------------------------------------------------------
# ZIP and NPZ


def _inspect_zip(path: str, npz: bool) -> Report:
    z = ZipReader(path)
    names = z.keys()
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
    if not z.keys()[position].endswith(".npy"):
        return
    try:
        info = z._inner.npy_info(int(z._archive_positions[position]))
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
            f"{what} deflate-compressed (numpy.savez_compressed; {ratio:.2f}x, saves "
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
        f"{deflated} of {members} members are deflated ({ratio:.2f}x, saves {saved:.0f}%): "
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


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(os.path.normpath(path)))[0] or "packed"


# --------------------------------------------------------------------------------------------
# NPY files and folders


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
        for k, name in enumerate(z.keys()):
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


# --------------------------------------------------------------------------------------------
# Text


def human_bytes(n: float | None) -> str:
    """``196608`` -> ``'192 KiB'``.

    >>> human_bytes(196608), human_bytes(1536), human_bytes(12)
    ('192 KiB', '1.5 KiB', '12 B')
    """
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(n)} B"
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def human_seconds(s: float) -> str:
    """``0.000073`` -> ``'73 µs'``.

    >>> human_seconds(0.000073), human_seconds(0.25), human_seconds(95)
    ('73 µs', '250 ms', '1.6 min')
    """
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.0f} ms"
    if s < 60:
        return f"{s:.3g} s"
    if s < 3600:
        return f"{s / 60:.2g} min"
    return f"{s / 3600:.2g} h"


def _shape(shape: Any) -> str:
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


_FORMATS = {
    "hdf5": "HDF5",
    "zip": "ZIP",
    "npz": "NPZ",
    "npy": "NPY",
    "npy-folder": "folder of .npy files",
    "npz-folder": "folder of .npz files",
}


def _row(label: str, item: Item | None) -> list[str]:
    if item is None:
        return [label]
    if item.note and not item.dtype:
        return [label, item.note]  # printed as it is, outside the columns
    where = item.layout
    if item.chunks:
        where = f"chunks {_shape(item.chunks)}"
    elif item.count > 1 and item.kind != "array":
        where = f"{item.count:,} x {item.layout}"
    sample = "" if item.sample_shape is None else f"sample {_shape(item.sample_shape)}"
    return [
        label,
        item.dtype or "bytes",
        sample,
        where,
        "+".join(item.filters),
        "" if item.ratio is None else f"{item.ratio:.2f}x",
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


def _render(report: Report, ascii_only: bool) -> str:
    head = [os.path.basename(os.path.normpath(report.path)) or report.path]
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
