"""``packread convert``: rewrite data into the layout training reads want.

* HDF5 -> HDF5: every dataset of samples rechunked to ``k`` samples per chunk (by default one
  sample, or enough small samples to fill :data:`~packread.cli.inspect.MIN_CHUNK_BYTES`) with
  a codec packread decodes natively; other datasets, groups and attributes copied as they are.
* A folder of ``.npy`` or ``.npz`` files -> one HDF5 file (one dataset per array) or one
  uncompressed ZIP (``.npy`` files as they are; NPZ arrays as ``KEY/NAME.npy`` members).
* ZIP -> HDF5: ``.npy`` members (or raw members with ``dtype``/``shape``) as one dataset.

The source is only read. Samples stream through in blocks of about ``memory_bytes``; the
output is written to ``DST.partial`` and renamed to ``DST`` at the end, so ``DST`` never
exists half-written. After each checkpoint ``DST.partial.json`` records how far the copy got,
and ``resume=True`` (``--resume``) continues from there after a crash or an interrupt; it
starts over (and says why) when the run stopped before recording any sample, and does nothing
(and says so) when ``DST`` is already complete.
HDF5 output needs h5py (and hdf5plugin for zstd, lz4, blosc and bitshuffle).

>>> result = convert("data/train/", "train-packed.h5", progress=False)
>>> result.samples
64
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._common import expand_paths
from .._hdf5 import HDF5Reader
from .._npy import NpyReader
from .._open import HDF5_SUFFIXES, source_kind
from .._zip import NpzReader, ZipReader
from ..errors import InvalidArgumentError, PackreadError, UnsupportedError
from .inspect import samples_per_chunk_for

#: Codecs of ``--codec`` (each one packread decodes natively); ``:LEVEL`` may follow gzip,
#: zstd, blosc and bitshuffle:zstd.
CODECS = (
    "none",
    "gzip",
    "lzf",
    "zstd",
    "lz4",
    "blosc:blosclz",
    "blosc:lz4",
    "blosc:lz4hc",
    "blosc:zlib",
    "blosc:zstd",
    "bitshuffle:lz4",
    "bitshuffle:zstd",
)
#: What is converted into what.
PAIRS = (
    ("hdf5", "hdf5"),
    ("npy", "hdf5"),
    ("npy", "zip"),
    ("npz", "hdf5"),
    ("npz", "zip"),
    ("zip", "hdf5"),
)
#: Memory for one block of samples in flight.
DEFAULT_MEMORY_BYTES = 256 << 20
#: Seconds between checkpoints (each flushes the output and records progress).
DEFAULT_CHECKPOINT_SECONDS = 10.0
#: HDF5 refuses chunks of 4 GiB or more.
MAX_CHUNK_BYTES = (4 << 30) - 1
_JOURNAL_VERSION = 1
#: Fixed member times: the same input gives the same archive.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


class MismatchError(PackreadError, ValueError):
    """A converted sample differs from its source (raised by :func:`verify_conversion`)."""


@dataclass
class ConvertResult:
    """What :func:`convert` wrote.

    >>> convert("data/train/", "samples.zip", progress=False).datasets
    {'data': {'dtype': 'float32', 'sample_shape': [4, 8], 'chunks': None, 'members': '*.npy'}}
    """

    src: str
    dst: str
    samples: int
    #: Per converted array: dtype, sample shape, chunk shape and codec (HDF5) of the output.
    datasets: dict[str, dict[str, Any]]
    #: HDF5 datasets copied as they are (no sample axis shared with the others).
    copied: list[str] = field(default_factory=list)
    #: Samples already converted when a resumed run started (0 for a fresh run).
    resumed_from: int = 0
    #: Why a resumed run started over (nothing usable was recorded), or None.
    restarted: str | None = None
    #: A resumed run found DST already complete and wrote nothing.
    already_complete: bool = False
    seconds: float = 0.0
    dst_bytes: int = 0
    #: Attributes that could not be copied, and why.
    warnings: list[str] = field(default_factory=list)


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    codec: str = "none",
    samples_per_chunk: int | None = None,
    shuffle: str = "auto",
    datasets: list[str] | None = None,
    members: str | None = None,
    dtype: Any = None,
    shape: tuple[int, ...] | None = None,
    name: str = "data",
    force: bool = False,
    resume: bool = False,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
    verify: bool = False,
    progress: bool = True,
    on_checkpoint: Callable[[int], None] | None = None,
) -> ConvertResult:
    """Converts ``src`` into ``dst`` (see the module's description for the pairs).

    ``samples_per_chunk`` is ``k`` for every HDF5 output dataset (default: per dataset, one
    sample or enough to fill 4 KiB); ``codec`` one of :data:`CODECS` (``"gzip:6"``,
    ``"blosc:lz4:5"``...); ``shuffle`` ``"auto"`` (byte shuffle for items wider than a byte),
    ``"none"``, ``"byte"`` or ``"bit"`` (blosc only). ``datasets`` picks HDF5 datasets,
    ``members`` (a glob), ``dtype`` and ``shape`` the members of a ZIP source, ``name`` the
    dataset made from an NPY folder or a ZIP. ``dst`` must not exist unless ``force``.
    ``resume`` continues an interrupted run from its last checkpoint: from the start when no
    sample was recorded yet (``DST.partial`` without a progress record, or one at sample 0),
    and not at all when ``dst`` exists with no ``DST.partial`` and holds what this conversion
    writes (a finished run: ``already_complete``). ``on_checkpoint(samples_done)`` runs after
    every checkpoint. ``verify`` reads ``dst`` back and compares every sample with ``src``.

    >>> convert("train.h5", "train-1.h5", samples_per_chunk=1, codec="lz4", progress=False).samples
    64
    """
    started = time.perf_counter()
    src, dst = os.fspath(src), os.fspath(dst)
    out_kind = _output_kind(dst)
    if not os.path.exists(src):
        raise FileNotFoundError(f"{src}: no such file or folder")
    partial, journal = dst + ".partial", dst + ".partial.json"
    # A finished run leaves DST and no DST.partial (renamed last, as a whole): resuming it may
    # find it complete. With DST.partial beside DST, resuming would replace DST: --force.
    finished_before = False
    if os.path.exists(dst):
        if os.path.samefile(src, dst):
            raise InvalidArgumentError(f"{dst}: the output would replace the source")
        finished_before = resume and not os.path.lexists(partial)
        if not (force or finished_before):
            raise FileExistsError(f"{dst} exists; pass --force (force=True) to replace it")
    in_kind, _ = source_kind(src)
    if (in_kind, out_kind) not in PAIRS:
        pairs = ", ".join(f"{a} -> {b}" for a, b in PAIRS)
        raise UnsupportedError(f"cannot convert {in_kind} into {out_kind} (supported: {pairs})")
    if samples_per_chunk is not None and samples_per_chunk < 1:
        raise InvalidArgumentError(f"samples_per_chunk must be >= 1, not {samples_per_chunk}")
    if out_kind == "hdf5":
        codec_options(codec, 4, shuffle)  # refuses a bad codec before anything is written
    source = _open_source(src, in_kind, datasets, members, dtype, shape, name, out_kind)
    options = {
        "dst": os.path.abspath(dst),
        "codec": codec,
        "samples_per_chunk": samples_per_chunk,
        "shuffle": shuffle,
        "datasets": datasets,
        "members": members,
        "dtype": None if dtype is None else str(np.dtype(dtype)),
        "shape": None if shape is None else list(shape),
        "name": name,
    }
    rows = {k: 1 for k in source.arrays}  # samples per output chunk (HDF5 only)
    if out_kind == "hdf5":
        for k, (dt, shp) in source.arrays.items():
            per = samples_per_chunk or samples_per_chunk_for(math.prod(shp) * dt.itemsize)
            rows[k] = max(1, min(source.n, per))
    if finished_before:
        try:
            mismatch = _unlike_output(dst, out_kind, source, rows, codec, shuffle)
            if mismatch is None:
                return _already_complete(src, dst, source, rows, codec, verify, started)
        except BaseException:
            source.close()
            raise
        if not force:
            source.close()
            raise FileExistsError(
                f"{dst} exists and is not what this conversion writes ({mismatch}); "
                "pass --force (force=True) to replace it"
            )
    try:
        loaded = _load_state(partial, journal, source, options) if resume else None
    except BaseException:
        source.close()
        raise
    state, restarted = (None, loaded) if isinstance(loaded, str) else (loaded, None)
    if restarted is not None:  # nothing usable recorded yet
        print(f"packread convert: {partial}: {restarted}; starting over", file=sys.stderr)
    if state is None:
        _remove(partial, journal, journal + ".tmp", *_ZipSink.directories(partial))
    try:
        if out_kind == "hdf5":
            sink: _Sink = _H5Sink(partial, source, rows, codec, shuffle, state is not None)
        else:
            sink = _ZipSink(partial, source, state)
    except BaseException:
        if state is None:
            _remove(partial, journal)  # nothing written worth resuming
        raise
    done = state["done"] if state else 0
    block = _block_rows(source, rows, memory_bytes)
    bar = _progress(source.n, done, dst, progress)
    last = time.monotonic()
    finished = False
    try:
        if state is None:
            _save_state(journal, source, options, 0, sink.checkpoint())
            sink.committed()
        lo = done
        while lo < source.n:
            hi = min(source.n, lo + block)
            sink.write(lo, hi, source)
            bar.update(hi - lo)
            lo = hi
            if lo == source.n or time.monotonic() - last >= checkpoint_seconds:
                _save_state(journal, source, options, lo, sink.checkpoint())
                sink.committed()
                last = time.monotonic()
                if on_checkpoint is not None:
                    on_checkpoint(lo)
        sink.close()
        finished = True
    finally:
        bar.close()
        sink.abandon()
        if not (finished and verify):
            source.close()
    os.replace(partial, dst)
    _remove(journal, *_ZipSink.directories(partial))
    result = ConvertResult(
        src,
        dst,
        source.n,
        sink.describe(),
        copied=list(source.copies),
        resumed_from=done,
        restarted=restarted,
        dst_bytes=os.path.getsize(dst),
        warnings=sink.warnings,
    )
    if verify:
        try:
            verify_conversion(src, dst, result, source)
        finally:
            source.close()
    result.seconds = time.perf_counter() - started
    return result


def _already_complete(
    src: str,
    dst: str,
    source: _Source,
    rows: dict[str, int],
    codec: str,
    verify: bool,
    started: float,
) -> ConvertResult:
    """The result of resuming a finished run: DST is left as it is (its leftover progress
    files, from a run stopped between the rename and their removal, go)."""
    partial = dst + ".partial"
    _remove(partial + ".json", partial + ".json.tmp", *_ZipSink.directories(partial))
    print(f"packread convert: {dst} is complete; nothing to do", file=sys.stderr)
    if _output_kind(dst) == "hdf5":
        datasets = _h5_described(source, rows, codec)
    else:
        datasets = {
            n: {
                "dtype": str(dt),
                "sample_shape": list(shp),
                "chunks": None,
                "members": source.pattern(n),
            }
            for n, (dt, shp) in source.arrays.items()
        }
    result = ConvertResult(
        src,
        dst,
        source.n,
        datasets,
        copied=list(source.copies),
        resumed_from=source.n,
        dst_bytes=os.path.getsize(dst),
        already_complete=True,
    )
    try:
        if verify:
            verify_conversion(src, dst, result, source)
    finally:
        source.close()
    result.seconds = time.perf_counter() - started
    return result


def _unlike_output(
    dst: str,
    out_kind: str,
    source: _Source,
    rows: dict[str, int],
    codec: str,
    shuffle: str,
) -> str | None:
    """How ``dst`` differs from what this conversion writes (its arrays: names, sample
    count, dtype and sample shape; HDF5: chunks and filters; ZIP: member count), or None.
    Only metadata is read; ``verify`` compares the samples."""
    n = source.n
    if out_kind == "zip":
        try:
            with zipfile.ZipFile(dst) as z:
                count = len(z.infolist())
            for name, (dtype, sample) in source.arrays.items():
                reader = ZipReader(dst, members=source.pattern(name))
                got = (len(reader), reader.dtype, tuple(reader.shape))
                if got != (n, dtype, sample):
                    return (
                        f"{source.pattern(name)}: {got[0]:,} samples of {got[1]} {got[2]}, "
                        f"not {n:,} of {dtype} {sample}"
                    )
        except (PackreadError, OSError, ValueError, zipfile.BadZipFile) as e:
            return f"not a ZIP packread reads: {e}"
        if count != n * len(source.arrays):
            return f"{count:,} members, not {n * len(source.arrays):,}"
        return None
    h5py = _h5py()
    try:
        out = h5py.File(dst, "r")
    except OSError as e:
        return f"not an HDF5 file: {e}"
    # The datasets as this conversion creates them, in memory, for their filter pipelines.
    want = h5py.File(f"{dst}.expected", "w", driver="core", backing_store=False)
    with out, want:
        for name in source.copies:
            if name not in out:
                return f"no {name!r}"
        for name, (dtype, sample) in source.arrays.items():
            ds = out.get(name)
            if not isinstance(ds, h5py.Dataset):
                return f"no dataset {name!r}"
            if ds.shape != (n, *sample) or ds.dtype != dtype:
                return f"{name} is {ds.dtype} {ds.shape}, not {dtype} {(n, *sample)}"
            if not n:
                continue
            chunks = (rows[name], *(max(1, d) for d in sample))
            ref = want.create_dataset(
                name,
                shape=(n, *sample),
                dtype=dtype,
                chunks=chunks,
                **codec_options(codec, dtype.itemsize, shuffle),
            )
            if ds.chunks != chunks or _filters(ds) != _filters(ref):
                return f"{name} is not chunked and filtered as {codec} in chunks {chunks}"
    return None


def _filters(ds: Any) -> list[tuple[int, tuple[int, ...]]]:
    """The filter pipeline of an h5py dataset: (filter id, parameters) in order."""
    plist = ds.id.get_create_plist()
    out = []
    for i in range(plist.get_nfilters()):
        code, _flags, values, _name = plist.get_filter(i)
        out.append((code, tuple(values)))
    return out


def _h5_described(source: _Source, rows: dict[str, int], codec: str) -> dict[str, Any]:
    return {
        name: {
            "dtype": str(dtype),
            "sample_shape": list(sample),
            "chunks": [rows[name], *(max(1, d) for d in sample)],
            "codec": codec,
        }
        for name, (dtype, sample) in source.arrays.items()
    }


def _output_kind(dst: str) -> str:
    lower = dst.lower()
    if lower.endswith(HDF5_SUFFIXES):
        return "hdf5"
    if lower.endswith(".zip"):
        return "zip"
    raise InvalidArgumentError(f"{dst}: the output must end in .h5/.hdf5 (HDF5) or .zip (ZIP)")


# --------------------------------------------------------------------------------------------
# Codecs


def codec_options(codec: str, itemsize: int, shuffle: str = "auto") -> dict[str, Any]:
    """``h5py.Group.create_dataset`` keyword arguments for ``--codec`` (hdf5plugin's filters
    for zstd, lz4, blosc and bitshuffle).

    >>> codec_options("gzip:6", 4)
    {'compression': 'gzip', 'compression_opts': 6, 'shuffle': True}
    >>> codec_options("none", 4)
    {}
    """
    if shuffle not in ("auto", "none", "byte", "bit"):
        raise InvalidArgumentError(f"shuffle must be auto, none, byte or bit, not {shuffle!r}")
    parts = codec.lower().split(":")
    kind, rest = parts[0], parts[1:]
    byte = shuffle == "byte" or (shuffle == "auto" and itemsize > 1)

    def level(at: int, default: int, low: int, high: int) -> int:
        if len(rest) <= at:
            return default
        try:
            value = int(rest[at])
        except ValueError:
            raise InvalidArgumentError(f"codec {codec!r}: {rest[at]!r} is not a level") from None
        if not low <= value <= high:
            raise InvalidArgumentError(f"codec {codec!r}: level must be {low} to {high}")
        return value

    def extra(allowed: int) -> None:
        if len(rest) > allowed:
            raise InvalidArgumentError(f"codec {codec!r}: too many ':' parts")

    if shuffle == "bit" and kind != "blosc":
        raise InvalidArgumentError(
            "shuffle='bit' works with blosc codecs; use --codec bitshuffle:lz4 or bitshuffle:zstd"
        )
    if kind == "none":
        extra(0)
        return {}
    if kind == "gzip":
        extra(1)
        return {"compression": "gzip", "compression_opts": level(0, 4, 0, 9), "shuffle": byte}
    if kind == "lzf":
        extra(0)
        return {"compression": "lzf", "shuffle": byte}
    plugin = _hdf5plugin()
    if kind == "zstd":
        extra(1)
        return {**plugin.Zstd(clevel=level(0, 3, 1, 22)), "shuffle": byte}
    if kind == "lz4":
        extra(0)
        return {**plugin.LZ4(), "shuffle": byte}
    if kind == "blosc":
        names = ("blosclz", "lz4", "lz4hc", "zlib", "zstd")
        if not rest or rest[0] not in names:
            raise InvalidArgumentError(f"codec {codec!r}: blosc needs one of {', '.join(names)}")
        extra(2)
        mode = {"none": 0, "byte": 1, "bit": 2, "auto": 1 if itemsize > 1 else 0}[shuffle]
        return dict(plugin.Blosc(cname=rest[0], clevel=level(1, 5, 0, 9), shuffle=mode))
    if kind == "bitshuffle":
        inner = rest[0] if rest else "lz4"
        if inner not in ("lz4", "zstd"):
            raise InvalidArgumentError(f"codec {codec!r}: bitshuffle takes lz4 or zstd")
        extra(2 if inner == "zstd" else 1)
        return dict(plugin.Bitshuffle(cname=inner, clevel=level(1, 3, 1, 22)))
    raise InvalidArgumentError(f"unknown codec {codec!r} (codecs: {', '.join(CODECS)})")


def _hdf5plugin() -> Any:
    try:
        import hdf5plugin
    except ImportError:
        raise UnsupportedError(
            "this codec is written by hdf5plugin: pip install 'packread[convert]'"
        ) from None
    return hdf5plugin


def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise UnsupportedError(
            "HDF5 output is written by h5py: pip install 'packread[convert]'"
        ) from None
    with contextlib.suppress(ImportError):  # registers blosc, zstd, lz4, bzip2... for h5py
        import hdf5plugin  # noqa: F401
    return h5py


# --------------------------------------------------------------------------------------------
# Sources: what is read, a block of samples at a time


class _Source:
    """The arrays of a source, read a block of samples at a time."""

    #: ``{name: (dtype, sample shape)}`` of the arrays converted.
    arrays: dict[str, tuple[np.dtype[Any], tuple[int, ...]]]
    n: int
    #: HDF5 datasets copied as they are.
    copies: list[str]
    #: The HDF5 file the copies, groups and attributes come from.
    h5_path: str | None = None

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def members(self, lo: int, hi: int) -> list[tuple[str, bytes]]:
        """ZIP members for samples ``lo:hi``: ``(name, bytes)``."""
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        raise NotImplementedError

    def pattern(self, name: str) -> str:
        """The ZIP members holding array ``name`` (a glob)."""
        raise NotImplementedError

    def close(self) -> None:
        """Releases what the source holds open."""


def _file_stamp(path: str) -> list[Any]:
    st = os.stat(path)
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns]


class _HDF5Source(_Source):
    def __init__(self, path: str, datasets: list[str] | None) -> None:
        h5py = _h5py()
        self.h5_path = path
        self.path = path
        reader = HDF5Reader(path)
        self.n = len(reader)
        h5 = h5py.File(path, "r")
        self._h5 = h5
        names: list[str] = []
        h5.visititems(lambda n, obj: names.append(n) if isinstance(obj, h5py.Dataset) else None)
        wanted = set(names) if datasets is None else {d.strip("/") for d in datasets}
        missing = wanted - set(names)
        if missing:
            raise InvalidArgumentError(f"{path}: no dataset {sorted(missing)[0]!r}")
        self.arrays = {}
        self.copies = []
        self._by_h5py: set[str] = set()
        native = []
        for n in sorted(wanted):
            ds = h5[n]
            vlen = h5py.check_vlen_dtype(ds.dtype) is not None
            if not (ds.shape and ds.shape[0] == self.n and not vlen):
                self.copies.append(n)
            elif n in reader.keys():
                self.arrays[n] = (reader[n].dtype, tuple(reader[n].shape[1:]))
                native.append(n)
            elif _unreadable(path, n):
                # No decoder in packread: h5py reads it, with hdf5plugin's filters.
                self.arrays[n] = (ds.dtype, tuple(ds.shape[1:]))
                self._by_h5py.add(n)
            else:
                self.copies.append(n)
        self._reader = HDF5Reader(path, native) if native else None

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        if self._reader is not None:
            out.update(self._reader.batch(range(lo, hi)))
        for n in self._by_h5py:
            out[n] = self._h5[n][lo:hi]
        return out

    def fingerprint(self) -> dict[str, Any]:
        return {"file": _file_stamp(self.path)}

    def close(self) -> None:
        self._h5.close()


def _unreadable(path: str, name: str) -> bool:
    """Whether packread has no decoder for dataset ``name`` (left out of a reader of all)."""
    try:
        return HDF5Reader(path, name)[name].read_path.startswith("unreadable")
    except PackreadError:
        return False


class _FolderSource(_Source):
    def __init__(self, path: str, suffix: str) -> None:
        self.path = path
        self.files = expand_paths(path, suffix) if isinstance(path, str) else list(path)
        self.copies = []

    def fingerprint(self) -> dict[str, Any]:
        stamps = [_file_stamp(f) for f in self.files]
        return {"files": len(stamps), "stamps": stamps}


class _NpySource(_FolderSource):
    def __init__(self, path: str, name: str) -> None:
        super().__init__(path, ".npy")
        self.reader = NpyReader(self.files)
        self.n = len(self.reader)
        self.name = name
        self.arrays = {name: (self.reader.dtype, tuple(self.reader.shape))}

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        return {self.name: self.reader.batch(range(lo, hi))}

    def members(self, lo: int, hi: int) -> list[tuple[str, bytes]]:
        out = []
        for f in self.files[lo:hi]:
            with open(f, "rb") as fh:
                out.append((os.path.basename(f), fh.read()))  # the .npy file as it is
        return out

    def pattern(self, name: str) -> str:
        return "*.npy"


class _NpzSource(_FolderSource):
    def __init__(self, path: str) -> None:
        super().__init__(path, ".npz")
        self.reader = NpzReader(self.files)
        self.n = len(self.reader)
        self.arrays = {k: (self.reader.dtype[k], self.reader.shape[k]) for k in self.reader.keys()}

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        return self.reader.batch(range(lo, hi))

    def members(self, lo: int, hi: int) -> list[tuple[str, bytes]]:
        block = self.read(lo, hi)
        out = []
        for i, f in enumerate(self.files[lo:hi]):
            stem = os.path.splitext(os.path.basename(f))[0]
            for key, arrays in block.items():
                out.append((f"{key}/{stem}.npy", _npy_bytes(arrays[i])))
        return out

    def pattern(self, name: str) -> str:
        return f"{name}/*.npy"


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return buf.getvalue()


class _ZipSource(_Source):
    def __init__(self, path: str, members: str | None, dtype: Any, shape: Any, name: str) -> None:
        self.path = path
        self.copies = []
        if members is None:
            names = ZipReader(path).keys()
            members = "*.npy" if any(n.endswith(".npy") for n in names) else None
        self.reader = ZipReader(path, members=members, dtype=dtype, shape=shape)
        self.n = len(self.reader)
        self.name = name
        self.arrays = {name: (self.reader.dtype, tuple(self.reader.shape))}

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        return {self.name: self.reader.batch(range(lo, hi))}

    def fingerprint(self) -> dict[str, Any]:
        return {"file": _file_stamp(self.path)}


def _open_source(
    src: str,
    kind: str,
    datasets: list[str] | None,
    members: str | None,
    dtype: Any,
    shape: Any,
    name: str,
    out_kind: str,
) -> _Source:
    if kind != "hdf5" and datasets is not None:
        raise InvalidArgumentError("datasets= applies to an HDF5 source")
    if kind != "zip" and (members is not None or dtype is not None or shape is not None):
        raise InvalidArgumentError("members=, dtype= and shape= apply to a ZIP source")
    if kind == "hdf5":
        return _HDF5Source(src, datasets)
    if kind == "npy":
        return _NpySource(src, name)
    if kind == "npz":
        return _NpzSource(src)
    return _ZipSource(src, members, dtype, shape, name)


def _block_rows(source: _Source, rows: dict[str, int], memory_bytes: int) -> int:
    """Samples per block: within ``memory_bytes`` (at least one sample), and a multiple of
    every output chunk when that fits, so that each chunk is written once, whole."""
    per_sample = sum(math.prod(s) * d.itemsize for d, s in source.arrays.values()) or 1
    unit = math.lcm(*rows.values()) if rows else 1
    if unit * per_sample > memory_bytes:
        unit = 1
    return unit * max(1, memory_bytes // (per_sample * unit))


# --------------------------------------------------------------------------------------------
# Sinks: where it is written


class _Sink:
    warnings: list[str]

    def write(self, lo: int, hi: int, source: _Source) -> None:
        raise NotImplementedError

    def checkpoint(self) -> dict[str, Any]:
        """Makes everything written so far durable; returns what resuming needs."""
        raise NotImplementedError

    def committed(self) -> None:
        """The progress record now names the last checkpoint: older resume data can go."""

    def close(self) -> None:
        raise NotImplementedError

    def abandon(self) -> None:
        """Releases the output file without finishing it (after an error, or after close)."""

    def describe(self) -> dict[str, dict[str, Any]]:
        raise NotImplementedError


class _H5Sink(_Sink):
    def __init__(
        self,
        partial: str,
        source: _Source,
        rows: dict[str, int],
        codec: str,
        shuffle: str,
        resume: bool,
    ) -> None:
        h5py = _h5py()
        self.warnings = []
        try:
            self.file = h5py.File(partial, "r+" if resume else "w")
        except OSError as e:
            if not resume:
                raise
            raise InvalidArgumentError(
                f"{partial}: cannot be resumed ({e}); run again without --resume"
            ) from None
        self._described: dict[str, dict[str, Any]] = {}
        src_h5 = h5py.File(source.h5_path, "r") if source.h5_path else None
        try:
            for name, (dtype, sample) in source.arrays.items():
                chunks = (rows[name], *(max(1, d) for d in sample))
                nbytes = math.prod(chunks) * dtype.itemsize
                if nbytes > MAX_CHUNK_BYTES:
                    raise InvalidArgumentError(
                        f"{name}: chunks of {rows[name]} samples would hold {nbytes:,} bytes; "
                        "HDF5 allows less than 4 GiB (lower samples_per_chunk)"
                    )
                self._described[name] = {
                    "dtype": str(dtype),
                    "sample_shape": list(sample),
                    "chunks": list(chunks),
                    "codec": codec,
                }
                if resume:
                    ds = self.file.get(name)
                    if ds is None or ds.shape != (source.n, *sample) or ds.chunks != chunks:
                        raise InvalidArgumentError(
                            f"{partial}: {name} is not as this conversion writes it; "
                            "start again without --resume"
                        )
                    continue
                maxshape = None
                if src_h5 is not None and name in src_h5:
                    maxshape = src_h5[name].maxshape
                self.file.create_dataset(
                    name,
                    shape=(source.n, *sample),
                    dtype=dtype,
                    chunks=chunks if source.n else None,
                    maxshape=maxshape,
                    **codec_options(codec, dtype.itemsize, shuffle),
                )
            if src_h5 is not None and not resume:
                self._copy_structure(src_h5, source)
        finally:
            if src_h5 is not None:
                src_h5.close()

    def _copy_structure(self, src: Any, source: _Source) -> None:
        """Groups and attributes as in the source; datasets without the sample axis copied
        as they are (libhdf5 copies their stored bytes)."""
        import h5py

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Group):
                self.file.require_group(name)

        src.visititems(visit)
        for name in source.copies:
            parent = os.path.dirname(name)
            dest = self.file.require_group(parent) if parent else self.file
            src.copy(src[name], dest, name=os.path.basename(name))
        self._copy_attrs(src, self.file, "/")
        for name in [*source.arrays, *self._groups(src)]:
            self._copy_attrs(src[name], self.file[name], name)

    @staticmethod
    def _groups(src: Any) -> list[str]:
        import h5py

        out: list[str] = []
        src.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Group) else None)
        return out

    def _copy_attrs(self, src: Any, dst: Any, where: str) -> None:
        for key in src.attrs:
            try:
                dst.attrs[key] = src.attrs[key]
            except Exception as e:  # an attribute h5py cannot read back or write
                self.warnings.append(f"{where}: attribute {key!r} not copied ({e})")

    def write(self, lo: int, hi: int, source: _Source) -> None:
        for name, block in source.read(lo, hi).items():
            self.file[name][lo:hi] = block

    def checkpoint(self) -> dict[str, Any]:
        self.file.flush()
        return {}

    def close(self) -> None:
        self.file.close()

    def abandon(self) -> None:
        if self.file.id.valid:
            self.file.close()

    def describe(self) -> dict[str, dict[str, Any]]:
        return self._described


class _ZipSink(_Sink):
    """An uncompressed ZIP written with :mod:`zipfile`. A checkpoint closes the archive (so
    its central directory is written), keeps a copy of that directory beside it (named by its
    offset, so the progress record and the copy always agree), and opens it again for
    appending; resuming cuts the file where the directory was and puts it back."""

    def __init__(self, partial: str, source: _Source, state: dict[str, Any] | None) -> None:
        self.warnings = []
        self.partial = partial
        self._kept: str | None = None
        self._newest: str | None = None
        self._described = {
            name: {"dtype": str(dtype), "sample_shape": list(sample), "chunks": None}
            for name, (dtype, sample) in source.arrays.items()
        }
        self.patterns = {name: source.pattern(name) for name in source.arrays}
        if state is None:
            self.zip = zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED, allowZip64=True)
            return
        self._kept = self._directory_path(state["sink"]["cd_offset"])
        with open(self._kept, "rb") as f:
            directory = f.read()
        with open(partial, "r+b") as f:
            f.truncate(state["sink"]["cd_offset"])
            f.seek(state["sink"]["cd_offset"])
            f.write(directory)
        self.zip = zipfile.ZipFile(partial, "a", zipfile.ZIP_STORED, allowZip64=True)

    def write(self, lo: int, hi: int, source: _Source) -> None:
        for name, data in source.members(lo, hi):
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            self.zip.writestr(info, data)

    def checkpoint(self) -> dict[str, Any]:
        # zipfile writes the central directory at start_dir: where the next member would go.
        cd_offset = self.zip.start_dir
        self.zip.close()
        with open(self.partial, "rb") as f:
            f.seek(cd_offset)
            directory = f.read()
        path = self._directory_path(cd_offset)
        with open(path + ".tmp", "wb") as f:
            f.write(directory)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        self._newest = path
        self.zip = zipfile.ZipFile(self.partial, "a", zipfile.ZIP_STORED, allowZip64=True)
        return {"cd_offset": cd_offset}

    def committed(self) -> None:
        if self._kept is not None and self._kept != self._newest:
            _remove(self._kept)
        self._kept = self._newest

    def _directory_path(self, offset: int) -> str:
        return f"{self.partial}.cd-{offset}"

    @staticmethod
    def directories(partial: str) -> list[str]:
        """The central-directory copies of an output being written."""
        return glob.glob(glob.escape(partial) + ".cd-*")

    def close(self) -> None:
        self.zip.close()

    def abandon(self) -> None:
        if self.zip.fp is not None:
            self.zip.close()

    def describe(self) -> dict[str, dict[str, Any]]:
        return {n: {**d, "members": self.patterns[n]} for n, d in self._described.items()}


# --------------------------------------------------------------------------------------------
# Progress records and bars


def _load_state(
    partial: str, journal: str, source: _Source, options: dict[str, Any]
) -> dict[str, Any] | str:
    """The progress record to resume from, or why the run must start over: it stopped before
    recording any sample (DST.partial without a record, as a run killed in its first
    moments leaves it: an empty file, the bare HDF5 structure or an empty ZIP, perhaps
    with a half-written record or directory copy; or a record at sample 0)."""
    if not os.path.exists(partial):
        raise FileNotFoundError(
            f"{partial}: no interrupted conversion to resume; run again without --resume"
        )
    if not os.path.exists(journal):
        return (
            f"no progress record ({os.path.basename(journal)}): "
            "the run stopped before its first checkpoint"
        )
    with open(journal) as f:
        state = json.load(f)
    if state.get("version") != _JOURNAL_VERSION or state.get("options") != options:
        raise InvalidArgumentError(
            f"{journal}: the interrupted conversion had other options "
            f"({state.get('options')}); run again without --resume to start over"
        )
    if state.get("source") != source.fingerprint():
        raise InvalidArgumentError(
            f"{journal}: the source changed since the interrupted conversion; "
            "run again without --resume to start over"
        )
    if state.get("done") == 0:
        return "its progress record holds no sample yet"
    return state


def _save_state(
    journal: str, source: _Source, options: dict[str, Any], done: int, sink: dict[str, Any]
) -> None:
    state = {
        "version": _JOURNAL_VERSION,
        "options": options,
        "source": source.fingerprint(),
        "done": done,
        "sink": sink,
    }
    tmp = journal + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, journal)


def _remove(*paths: str) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)


class _NoBar:
    """Stands in for tqdm when it is not installed or not wanted."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, initial: int, dst: str, show: bool) -> Any:
    if not show:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        print(
            f"converting {total:,} samples into {dst} (pip install tqdm for a progress bar)",
            file=sys.stderr,
        )
        return _NoBar()
    return tqdm(
        total=total,
        initial=initial,
        unit="sample",
        unit_scale=total >= 10_000,
        desc=os.path.basename(dst),
        file=sys.stderr,
    )


# --------------------------------------------------------------------------------------------
# Verification


def verify_conversion(
    src: str, dst: str, result: ConvertResult, source: _Source | None = None
) -> None:
    """Reads every sample of ``dst`` and compares it with ``src``, bit for bit; raises
    ``ValueError`` naming the first sample that differs.

    >>> result = convert("data/train/", "checked.zip", progress=False)
    >>> verify_conversion("data/train/", "checked.zip", result)
    """
    src, dst = os.fspath(src), os.fspath(dst)
    if source is None:
        in_kind, _ = source_kind(src)
        names = list(result.datasets) if in_kind == "hdf5" else None
        name = next(iter(result.datasets), "data")
        source = _open_source(src, in_kind, names, None, None, None, name, _output_kind(dst))
    readers: dict[str, Any] = {}
    for name in result.datasets:
        if _output_kind(dst) == "hdf5":
            readers[name] = HDF5Reader(dst, name)
        else:
            readers[name] = ZipReader(dst, members=source.pattern(name))
    step = _block_rows(source, dict.fromkeys(result.datasets, 1), DEFAULT_MEMORY_BYTES)
    for lo in range(0, source.n, step):
        hi = min(source.n, lo + step)
        want = source.read(lo, hi)
        for name, reader in readers.items():
            got, exp = reader.batch(range(lo, hi)), want[name]
            if got.dtype != exp.dtype or got.shape != exp.shape:
                raise MismatchError(
                    f"{dst}: {name} holds {got.dtype} {got.shape[1:]} samples, "
                    f"{src} {exp.dtype} {exp.shape[1:]}"
                )
            if got.tobytes() != exp.tobytes():
                bad = next(i for i in range(hi - lo) if got[i].tobytes() != exp[i].tobytes())
                raise MismatchError(f"{dst}: {name} sample {lo + bad} differs from {src}")
