"""The seed files the whole-file fuzzer mutates, written at start by the real writers (h5py with
hdf5plugin, PyTables, numpy, zipfile), each with a map of its structured regions (chunks,
object headers and heaps, ZIP records and their fields, the NPY header) for targeted mutations.

Every seed is small (a few KB to a few tens of KB) and written the same way on every run
(fixed random data, fixed ZIP timestamps), so a run number and ``--seed`` replay an input."""

from __future__ import annotations

import io
import os
import struct
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: The formats, by the reference reader that checks them: ``hdf5`` files are written and checked
#: by h5py, ``pytables`` files by PyTables, ``images`` (one encoded image, read inside a ZIP, an
#: ImageFolder tree and an HDF5 dataset of rows) by PIL.
FORMATS = ("hdf5", "pytables", "zip", "npz", "npy", "images")
EXTENSIONS = {
    "hdf5": ".h5",
    "pytables": ".h5",
    "zip": ".zip",
    "npz": ".npz",
    "npy": ".npy",
    "images": ".img",
}

#: Rows of every HDF5 dataset (a chunk of 4 rows leaves a partial edge chunk).
ROWS = 50


@dataclass(frozen=True)
class Field:
    """An integer field of a structured record: ``width`` bytes at ``offset``."""

    label: str
    offset: int
    width: int
    big_endian: bool = False


@dataclass(frozen=True)
class Region:
    """A span of the file that means something (a chunk, a header, a record)."""

    label: str
    offset: int
    size: int
    fields: tuple[Field, ...] = ()


@dataclass
class Seed:
    name: str
    fmt: str
    data: bytes
    regions: list[Region] = field(default_factory=list)

    @property
    def ext(self) -> str:
        return EXTENSIONS[self.fmt]

    def region_at(self, offset: int) -> str:
        """Which region holds ``offset`` (for describing a mutation)."""
        for r in self.regions:
            if r.offset <= offset < r.offset + r.size:
                return f"{r.label}+{offset - r.offset}"
        return "?"


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Partly compressible values: small integers with some noise."""
    base = rng.integers(0, 12, shape)
    if np.dtype(dtype).kind == "f":
        return (base + np.round(rng.normal(size=shape), 1)).astype(dtype)
    return base.astype(dtype)


# --------------------------------------------------------------------------------------------
# HDF5


#: Signatures of HDF5 metadata structures (object headers v2 and continuation blocks, v1 and v2
#: B-trees, local, global and fractal heaps, symbol table nodes, chunk indexes).
H5_SIGNATURES = (
    b"OHDR",
    b"OCHK",
    b"TREE",
    b"BTHD",
    b"BTIN",
    b"BTLF",
    b"HEAP",
    b"GCOL",
    b"SNOD",
    b"FRHP",
    b"FHDB",
    b"FHIB",
    b"FAHD",
    b"FADB",
    b"EAHD",
    b"EAIB",
    b"EADB",
    b"EASB",
)


def _h5_regions(path: str, data: bytes) -> list[Region]:
    """Chunks (h5py's chunk info) and metadata (object headers, signatures) of a file."""
    import h5py

    regions = [Region("superblock", 0, 96)]
    found: list[Any] = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: found.append((name, obj)))
        for name, obj in found:
            info = h5py.h5o.get_info(obj.id)
            regions.append(Region(f"ohdr:{name}", int(info.addr), 256))
            if not isinstance(obj, h5py.Dataset):
                continue
            if obj.chunks is None:
                offset = obj.id.get_offset()
                if offset is not None:
                    size = obj.id.get_storage_size()
                    regions.append(Region(f"data:{name}", int(offset), int(size)))
                continue
            for k in range(obj.id.get_num_chunks()):
                c = obj.id.get_chunk_info(k)
                if c.byte_offset is not None and c.size:
                    regions.append(Region(f"chunk:{name}#{k}", int(c.byte_offset), int(c.size)))
    starts = []
    for sig in H5_SIGNATURES:
        at = data.find(sig)
        while at >= 0:
            starts.append((at, sig.decode()))
            at = data.find(sig, at + 4)
    # A structure runs to the next one (at most 2 KB): a B-tree node of 13 chunk keys is 700.
    starts.sort()
    ends = [a for a, _ in starts[1:]] + [len(data)]
    for (at, label), end in zip(starts, ends, strict=True):
        regions.append(Region(label, at, min(end - at, 2048)))
    return regions


def _blosc(cname: Any, shuffle: int) -> dict[str, Any]:
    import hdf5plugin

    return dict(hdf5plugin.Blosc(cname=cname, clevel=5, shuffle=shuffle))


def _h5py_codecs() -> dict[str, tuple[dict[str, Any], int | None]]:
    """Keyword arguments of ``create_dataset`` per seed, and rows per chunk (None: contiguous)."""
    import hdf5plugin

    b2 = hdf5plugin.Blosc2
    return {
        "contiguous": ({}, None),
        "chunked": ({}, 4),
        "gzip": ({"compression": "gzip", "compression_opts": 4}, 1),
        "gzip_shuffle": ({"compression": "gzip", "shuffle": True}, 4),
        "lzf": ({"compression": "lzf"}, 4),
        "fletcher32": ({"fletcher32": True}, 4),
        "fletcher32_gzip_shuffle": (
            {"fletcher32": True, "shuffle": True, "compression": "gzip"},
            5,
        ),
        "blosc_lz4_shuffle": (_blosc("lz4", 1), 4),
        "blosc_zstd_bitshuffle": (_blosc("zstd", 2), 4),
        "blosc_blosclz_noshuffle": (_blosc("blosclz", 0), 1),
        "blosc2_lz4_shuffle": (dict(b2(cname="lz4", filters=b2.SHUFFLE)), 4),
        "blosc2_zstd_bitshuffle": (dict(b2(cname="zstd", filters=b2.BITSHUFFLE)), 5),
        "bitshuffle_none": (dict(hdf5plugin.Bitshuffle(cname="none")), 4),
        "bitshuffle_lz4": (dict(hdf5plugin.Bitshuffle(cname="lz4")), 4),
        "bitshuffle_zstd": (dict(hdf5plugin.Bitshuffle(cname="zstd")), 4),
        "lz4": (dict(hdf5plugin.LZ4()), 4),
        "zstd": (dict(hdf5plugin.Zstd()), 4),
    }


def _h5py_seeds(tmp: str) -> list[tuple[str, str]]:
    """One file per codec: ``x`` (rows, 6, 6) float32 chunked by rows (n-d chunks: blosc2
    writes them as b2nd), ``y`` (rows,) int32 and, in some, ``z`` (rows, 4) big-endian uint16.
    Plus two files of variable-length data (uint8 sequences and UTF-8 strings)."""
    import h5py

    made = []
    for k, (name, (kw, rows)) in enumerate(_h5py_codecs().items()):
        rng = np.random.default_rng(100 + k)
        path = os.path.join(tmp, f"h5py_{name}.h5")
        with h5py.File(path, "w") as f:
            x = _values(rng, (ROWS, 6, 6), "<f4")
            y = _values(rng, (ROWS,), "<i4")
            if rows is None:
                f.create_dataset("x", data=x)
                f.create_dataset("y", data=y)
            else:
                # blosc2 splits the sample dimensions too: n-d chunks are b2nd arrays.
                xchunks = (rows, 3, 6) if name.startswith("blosc2") else (rows, 6, 6)
                f.create_dataset("x", data=x, chunks=xchunks, **kw)
                f.create_dataset("y", data=y, chunks=(min(16, ROWS),), **kw)
            if k % 3 == 0:
                z = _values(rng, (ROWS, 4), ">u2")
                f.create_dataset("g/z", data=z, chunks=None if rows is None else (8, 4), **kw)
        made.append((f"h5py_{name}", path))
    rng = np.random.default_rng(7)
    for name, layout in (("vlen_chunked", {"chunks": (8,)}), ("vlen_contiguous", {})):
        path = os.path.join(tmp, f"h5py_{name}.h5")
        with h5py.File(path, "w") as f:
            u8 = f.create_dataset("u8", (ROWS,), dtype=h5py.vlen_dtype(np.uint8), **layout)
            for i in range(ROWS):
                u8[i] = rng.integers(0, 255, int(rng.integers(0, 30)), dtype=np.uint8)
            words = [f"row {i} {'é' * (i % 4)}{'x' * (i % 7)}" for i in range(ROWS)]
            f.create_dataset("s", data=np.array(words, dtype=h5py.string_dtype()), **layout)
            f.create_dataset("y", data=_values(rng, (ROWS,), "<i4"), **layout)
        made.append((f"h5py_{name}", path))
    return made


def _pytables_seeds(tmp: str) -> list[tuple[str, str]]:
    """CArrays with blosc:lz4 and blosc2:zstd (n-d chunks), a Table, VLArrays of uint8."""
    import tables

    made = []
    rng = np.random.default_rng(8)
    specs: list[tuple[str, Callable[[Any], None]]] = []

    def carray_blosc(f: Any) -> None:
        filters = tables.Filters(complevel=5, complib="blosc:lz4", shuffle=True)
        f.create_carray(
            "/",
            "x",
            obj=_values(rng, (ROWS, 6, 6), "<f4"),
            filters=filters,
            chunkshape=(4, 6, 6),
            track_times=False,
        )
        f.create_carray(
            "/",
            "y",
            obj=_values(rng, (ROWS,), "<i8"),
            filters=filters,
            chunkshape=(16,),
            track_times=False,
        )

    def carray_blosc2(f: Any) -> None:
        filters = tables.Filters(complevel=5, complib="blosc2:zstd", shuffle=True)
        f.create_carray(
            "/",
            "x",
            obj=_values(rng, (ROWS, 6, 6), "<i2"),
            filters=filters,
            chunkshape=(5, 3, 6),
            track_times=False,
        )
        f.create_carray(
            "/",
            "y",
            obj=_values(rng, (ROWS,), "<f8"),
            filters=filters,
            chunkshape=(16,),
            track_times=False,
        )

    def table(f: Any) -> None:
        rec = np.zeros(ROWS, dtype=[("a", "<i4"), ("b", "<f8", (2,)), ("c", "S4")])
        rec["a"] = rng.integers(-100, 100, ROWS)
        rec["b"] = rng.normal(size=(ROWS, 2))
        rec["c"] = [b"r%d" % i for i in range(ROWS)]
        filters = tables.Filters(complevel=5, complib="blosc:zstd")
        t = f.create_table("/", "t", obj=rec, filters=filters, chunkshape=(8,), track_times=False)
        t.flush()

    def vlarray(filters: Any) -> Callable[[Any], None]:
        def write(f: Any) -> None:
            kw = {} if filters is None else {"filters": filters}
            v = f.create_vlarray(
                "/",
                "v",
                tables.UInt8Atom(),
                expectedrows=ROWS,
                chunkshape=(8,),
                track_times=False,
                **kw,
            )
            for _ in range(ROWS):
                v.append(rng.integers(0, 255, int(rng.integers(0, 40)), dtype=np.uint8))
            f.create_array("/", "y", obj=_values(rng, (ROWS,), "<i4"), track_times=False)

        return write

    specs = [
        ("carray_blosc_lz4", carray_blosc),
        ("carray_blosc2_zstd", carray_blosc2),
        ("table_blosc_zstd", table),
        ("vlarray_u8", vlarray(None)),
        ("vlarray_u8_blosc", vlarray(tables.Filters(complevel=5, complib="blosc:lz4"))),
    ]
    for name, write in specs:
        path = os.path.join(tmp, f"pytables_{name}.h5")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with tables.open_file(path, "w") as f:
                write(f)
        made.append((f"pytables_{name}", path))
    return made


# --------------------------------------------------------------------------------------------
# ZIP / NPZ

LOCAL_FIELDS = (
    ("version", 4, 2),
    ("flags", 6, 2),
    ("method", 8, 2),
    ("crc", 14, 4),
    ("csize", 18, 4),
    ("usize", 22, 4),
    ("nlen", 26, 2),
    ("xlen", 28, 2),
)
CENTRAL_FIELDS = (
    ("version_made", 4, 2),
    ("version", 6, 2),
    ("flags", 8, 2),
    ("method", 10, 2),
    ("crc", 16, 4),
    ("csize", 20, 4),
    ("usize", 24, 4),
    ("nlen", 28, 2),
    ("xlen", 30, 2),
    ("clen", 32, 2),
    ("disk", 34, 2),
    ("eattr", 38, 4),
    ("offset", 42, 4),
)
EOCD_FIELDS = (
    ("disk", 4, 2),
    ("cd_disk", 6, 2),
    ("entries_disk", 8, 2),
    ("entries", 10, 2),
    ("cd_size", 12, 4),
    ("cd_offset", 16, 4),
    ("comment_len", 20, 2),
)
ZIP64_EOCD_FIELDS = (
    ("size", 4, 8),
    ("entries_disk", 24, 8),
    ("entries", 32, 8),
    ("cd_size", 40, 8),
    ("cd_offset", 48, 8),
)
ZIP64_LOCATOR_FIELDS = (("disk", 4, 4), ("eocd64_offset", 8, 8), ("disks", 16, 4))


def _fields(at: int, spec: tuple[tuple[str, int, int], ...]) -> tuple[Field, ...]:
    return tuple(Field(label, at + off, width) for label, off, width in spec)


def _zip_regions(data: bytes) -> list[Region]:
    """Every local header (and its member's data), central directory record, ZIP64 record
    and the end record, with their integer fields."""
    regions = []
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        infos = z.infolist()
    for k, info in enumerate(infos):
        at = info.header_offset
        nlen, xlen = struct.unpack_from("<HH", data, at + 26)
        start = at + 30 + nlen + xlen
        regions.append(Region(f"local#{k}", at, 30 + nlen + xlen, _fields(at, LOCAL_FIELDS)))
        regions.append(Region(f"member#{k}", start, info.compress_size))
    end = data.rfind(b"PK\x05\x06")
    cd_offset = struct.unpack_from("<I", data, end + 16)[0]
    if cd_offset == 0xFFFFFFFF:
        at64 = data.rfind(b"PK\x06\x06")
        cd_offset = struct.unpack_from("<Q", data, at64 + 48)[0]
    at, k = cd_offset, 0
    while data[at : at + 4] == b"PK\x01\x02":
        nlen, xlen, clen = struct.unpack_from("<HHH", data, at + 28)
        size = 46 + nlen + xlen + clen
        regions.append(Region(f"central#{k}", at, size, _fields(at, CENTRAL_FIELDS)))
        at, k = at + size, k + 1
    at64 = data.rfind(b"PK\x06\x06")
    if at64 >= 0:
        regions.append(Region("eocd64", at64, 56, _fields(at64, ZIP64_EOCD_FIELDS)))
    loc = data.rfind(b"PK\x06\x07")
    if loc >= 0:
        regions.append(Region("eocd64_locator", loc, 20, _fields(loc, ZIP64_LOCATOR_FIELDS)))
    regions.append(Region("eocd", end, len(data) - end, _fields(end, EOCD_FIELDS)))
    return regions


FIXED_DATE = (5 << 11) | (0 << 5) | 0, (44 << 9) | (1 << 5) | 1  # 05:00:00, 2024-01-01


def fix_zip_times(data: bytes) -> bytes:
    """The archive with every record's DOS date and time fixed (numpy.savez stamps the time of
    writing): seeds must be the same bytes on every run."""
    out = bytearray(data)
    stamp = struct.pack("<HH", *FIXED_DATE)
    for r in _zip_regions(data):
        if r.label.startswith("local#"):
            out[r.offset + 10 : r.offset + 14] = stamp
        elif r.label.startswith("central#"):
            out[r.offset + 12 : r.offset + 16] = stamp
    return bytes(out)


def _npy(arr: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    from numpy.lib import format as npformat

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if version is None:
            np.save(buf, arr)
        else:
            npformat.write_array(buf, arr, version=version)
    return buf.getvalue()


def _zipfile(members: list[tuple[str, bytes, int, bool]]) -> bytes:
    """An archive written by zipfile: (name, data, method, force_zip64) per member."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data, method, zip64 in members:
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 5, 0, 0))
            info.compress_type = method
            if zip64:
                with z.open(info, "w", force_zip64=True) as f:
                    f.write(data)
            else:
                z.writestr(info, data)
    return buf.getvalue()


def _zip_seeds() -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(9)
    st, df = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED

    def raw(n: int) -> bytes:
        return bytes(rng.integers(0, 8, n, dtype=np.uint8))

    npys = [_npy(_values(rng, (4, 5), "<f4")) for _ in range(3)]
    return [
        (
            "zip_mixed",
            _zipfile(
                [
                    ("a.raw", raw(96), st, False),
                    ("b.raw", raw(96), df, False),
                    ("dir/c.raw", raw(96), st, False),
                    ("d.npy", npys[0], st, False),
                    ("e.npy", npys[1], df, False),
                ]
            ),
        ),
        ("zip_stored_npy", _zipfile([(f"s{i}.npy", npys[i], st, False) for i in range(3)])),
        ("zip_deflated_raw", _zipfile([(f"r{i}.raw", raw(300), df, False) for i in range(3)])),
        (
            "zip_zip64",
            _zipfile([("z0.raw", raw(64), st, True), ("z1.npy", npys[2], df, True)]),
        ),
    ]


def _npz_seeds() -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(10)
    arrays = {
        "image": _values(rng, (3, 8, 8), "|u1"),
        "mask": _values(rng, (8, 8), "<f8"),
        "label": np.array(3, dtype="<i8"),
        "name": np.array(["ab", "cde"]),
    }
    out = []
    savers: list[tuple[str, Any]] = [
        ("npz_savez", np.savez),
        ("npz_savez_compressed", np.savez_compressed),
    ]
    for name, save in savers:
        buf = io.BytesIO()
        save(buf, **arrays)
        out.append((name, fix_zip_times(buf.getvalue())))
    return out


# --------------------------------------------------------------------------------------------
# NPY


def _npy_seeds() -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(11)
    structured = np.zeros(4, dtype=[("a", "<i4"), ("b", "<f8", (2,)), ("c", "S3")])
    structured["a"] = [1, -2, 3, 4]
    structured["b"] = rng.normal(size=(4, 2))
    return [
        ("npy_f4", _npy(_values(rng, (6, 7), "<f4"))),
        ("npy_u1_image", _npy(_values(rng, (3, 8, 8), "|u1"))),
        ("npy_i8_be_fortran", _npy(np.asfortranarray(_values(rng, (5, 4), ">i8")))),
        ("npy_structured", _npy(structured)),
        ("npy_unicode", _npy(np.array(["ab", "é", ""]))),
        ("npy_bool", _npy(rng.integers(0, 2, 9).astype(bool))),
        ("npy_scalar", _npy(np.array(1.5, dtype="<f8"))),
        ("npy_empty", _npy(np.zeros((0, 3), dtype="<c8"))),
        ("npy_v2", _npy(_values(rng, (10,), "<u2"), version=(2, 0))),
        ("npy_datetime", _npy(np.array(["2020-01-01", "2021-06-30"], dtype="M8[D]"))),
    ]


def _npy_regions(data: bytes) -> list[Region]:
    if len(data) < 10:
        return []
    if data[6] == 1:
        hlen, pre = struct.unpack_from("<H", data, 8)[0], 10
        width = 2
    else:
        hlen, pre = struct.unpack_from("<I", data, 8)[0], 12
        width = 4
    return [
        Region("preamble", 0, pre, (Field("header_len", 8, width),)),
        Region("header", pre, hlen),
        Region("data", pre + hlen, len(data) - pre - hlen),
    ]


# --------------------------------------------------------------------------------------------
# Encoded images


def _photo(size: tuple[int, int]) -> Any:
    import skimage
    from PIL import Image

    path = os.path.join(os.path.dirname(skimage.__file__), "data", "chelsea.png")
    with Image.open(path) as im:
        return im.convert("RGB").resize(size)


def _encoded(im: Any, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def good_images() -> tuple[bytes, bytes]:
    """The good JPEGs every damaged image is read between (baseline, then progressive)."""
    im = _photo((45, 37))
    return _encoded(im, "JPEG", quality=90), _encoded(im, "JPEG", quality=85, progressive=True)


def _image_seeds() -> list[tuple[str, bytes]]:
    from PIL import Image

    im = _photo((41, 33))
    grey16 = Image.fromarray(np.asarray(im.convert("L")).astype(np.uint16) * 3)
    alpha = im.convert("RGBA")
    alpha.putalpha(im.convert("L"))
    return [
        ("img_jpeg_baseline", _encoded(im, "JPEG", quality=90)),
        ("img_jpeg_progressive", _encoded(im, "JPEG", quality=85, progressive=True)),
        ("img_jpeg_444", _encoded(im, "JPEG", quality=75, subsampling=0)),
        ("img_jpeg_gray", _encoded(im.convert("L"), "JPEG", quality=90)),
        ("img_jpeg_cmyk", _encoded(im.convert("CMYK"), "JPEG", quality=90)),
        ("img_png_rgb", _encoded(im, "PNG")),
        ("img_png_palette", _encoded(im.convert("P", palette=Image.Palette.ADAPTIVE), "PNG")),
        ("img_png_gray16", _encoded(grey16, "PNG")),
        ("img_png_rgba", _encoded(alpha, "PNG")),
        ("img_webp_lossless", _encoded(im, "WEBP", lossless=True)),
    ]


def _image_regions(data: bytes) -> list[Region]:
    """JPEG marker segments (their lengths as fields) and the entropy-coded data after the
    first scan header; PNG chunks (length and CRC as fields)."""
    regions: list[Region] = []
    if data.startswith(b"\xff\xd8"):
        pos = 2
        while pos + 4 <= len(data) and data[pos] == 0xFF:
            marker = data[pos + 1]
            length = struct.unpack_from(">H", data, pos + 2)[0]
            label = f"jpeg_{marker:02x}"
            regions.append(Region(label, pos, 2 + length, (Field("length", pos + 2, 2, True),)))
            pos += 2 + length
            if marker == 0xDA:
                regions.append(Region("entropy", pos, len(data) - pos))
                break
    elif data.startswith(b"\x89PNG"):
        pos = 8
        while pos + 12 <= len(data):
            length = struct.unpack_from(">I", data, pos)[0]
            kind = data[pos + 4 : pos + 8].decode("latin1")
            fields = (Field("length", pos, 4, True), Field("crc", pos + 8 + length, 4, True))
            regions.append(Region(f"png_{kind}", pos, 12 + length, fields))
            pos += 12 + length
    return regions


def write_image_containers(path: str, damaged: bytes) -> str:
    """The folder ``<path>.d`` holding the damaged image ``damaged`` between the two good ones
    (:func:`good_images`) in each container packread reads images from: ``between.zip``,
    ``tree/c/`` (an ImageFolder tree), ``rows.h5`` (h5py's variable-length bytes); and
    ``alone.zip`` (the damaged one alone) and ``goods.zip`` (the good ones where they are in
    the others, a good one in the damaged one's place)."""
    import h5py

    first, second = good_images()
    folder = Path(f"{path}.d")
    (folder / "tree" / "c").mkdir(parents=True)
    images = [first, damaged, second]

    def archive(name: str, members: list[bytes]) -> None:
        with zipfile.ZipFile(folder / name, "w") as z:
            for k, data in enumerate(members):
                z.writestr(zipfile.ZipInfo(f"{k}.jpg", date_time=(2024, 1, 1, 5, 0, 0)), data)

    archive("between.zip", images)
    archive("alone.zip", [damaged])
    archive("goods.zip", [first, first, second])
    for k, data in enumerate(images):
        (folder / "tree" / "c" / f"{k}.jpg").write_bytes(data)
    with h5py.File(folder / "rows.h5", "w") as f:
        rows = f.create_dataset("images", (3,), dtype=h5py.vlen_dtype(np.dtype("u1")))
        for k, data in enumerate(images):
            rows[k] = np.frombuffer(data, dtype=np.uint8)
    (folder / "first.jpg").write_bytes(first)
    (folder / "second.jpg").write_bytes(second)
    return str(folder)


# --------------------------------------------------------------------------------------------


def write_seeds(tmp: str, formats: tuple[str, ...] = FORMATS) -> list[Seed]:
    """Writes every seed of ``formats`` under ``tmp`` and returns them with their regions."""
    seeds: list[Seed] = []
    if "hdf5" in formats:
        for name, path in _h5py_seeds(tmp):
            data = Path(path).read_bytes()
            seeds.append(Seed(name, "hdf5", data, _h5_regions(path, data)))
    if "pytables" in formats:
        for name, path in _pytables_seeds(tmp):
            data = Path(path).read_bytes()
            seeds.append(Seed(name, "pytables", data, _h5_regions(path, data)))
    if "zip" in formats:
        seeds += [Seed(n, "zip", d, _zip_regions(d)) for n, d in _zip_seeds()]
    if "npz" in formats:
        seeds += [Seed(n, "npz", d, _zip_regions(d)) for n, d in _npz_seeds()]
    if "npy" in formats:
        seeds += [Seed(n, "npy", d, _npy_regions(d)) for n, d in _npy_seeds()]
    if "images" in formats:
        seeds += [Seed(n, "images", d, _image_regions(d)) for n, d in _image_seeds()]
    return seeds
