"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) from real files: NPY headers
written by numpy, archives by zipfile and numpy.savez, chunks by h5py, hdf5plugin and PyTables.
Each seed is laid out as its target reads its input (see fuzz/fuzz_targets/*.rs), so that every
seed decodes: the fuzzer starts from valid inputs and mutates them. Run by `make fuzz-seeds`;
the output is committed (small: a few KB a target)."""

from __future__ import annotations

import io
import os
import struct
import sys
import tarfile
import tempfile
import zipfile

import h5py
import hdf5plugin
import numpy as np
import tables

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target: str, name: str, data: bytes) -> None:
    folder = os.path.join(OUT, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def npy(arr: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, **kw)
    return buf.getvalue()


def npy_seeds() -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "f4": rng.random((3, 4), dtype=np.float32),
        "u1_image": rng.integers(0, 255, (3, 8, 8), dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "fortran": np.asfortranarray(np.arange(12, dtype=">i8").reshape(3, 4)),
        "structured": np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8", (2,))]),
        "unicode": np.array(["ab", "c"]),
        "s0": np.ndarray((2,), dtype="S0"),
        "scalar": np.array(7, dtype="<u2"),
        "empty": np.zeros((0, 5), dtype="<c8"),
        "datetime": np.array(["2020-01-01"], dtype="M8[D]"),
    }
    for name, arr in arrays.items():
        put("npy_header", name, npy(arr))
    from numpy.lib import format as fmt

    buf = io.BytesIO()
    fmt.write_array(buf, np.arange(4.0), version=(2, 0))
    put("npy_header", "v2", buf.getvalue())
    buf = io.BytesIO()
    fmt.write_array(buf, np.array(["é"]), version=(3, 0))
    put("npy_header", "v3_utf8", buf.getvalue())


def zip_seeds() -> None:
    rng = np.random.default_rng(1)
    for name, savez in (("npz_stored", np.savez), ("npz_deflated", np.savez_compressed)):
        buf = io.BytesIO()
        savez(buf, image=rng.integers(0, 9, (2, 4), dtype=np.uint8), mask=np.arange(3.0))
        put("zip_archive", name, buf.getvalue())
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.raw", bytes(range(64)))
        z.writestr("dir/b.raw", b"x" * 100, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("c.npy", npy(np.arange(5, dtype="<i2")))
    put("zip_archive", "mixed", buf.getvalue())
    buf = io.BytesIO()
    with (
        zipfile.ZipFile(buf, "w", allowZip64=True) as z,
        z.open("big.raw", "w", force_zip64=True) as f,
    ):
        f.write(b"abc" * 10)
    put("zip_archive", "zip64", buf.getvalue())
    put("zip_archive", "empty", zipfile_bytes())


def tar_seeds() -> None:
    """Tars as tarfile writes them in its three formats (a GNU long name, a PAX path record),
    holding webdataset-style samples (key.field members), a link and a folder."""
    samples = [("000000.jpg", b"\xff\xd8" + bytes(600)), ("000000.cls", b"3")]
    samples += [("d/" + "x" * 120 + ".txt", b"long"), ("000001.json", b'{"a": 1}')]
    for name, fmt in (
        ("ustar", tarfile.USTAR_FORMAT),
        ("gnu", tarfile.GNU_FORMAT),
        ("pax", tarfile.PAX_FORMAT),
    ):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
            for member, data in samples:
                if fmt == tarfile.USTAR_FORMAT and len(member) > 100:
                    member = member[-90:]
                info = tarfile.TarInfo(member)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            link = tarfile.TarInfo("000002.jpg")
            link.type, link.linkname = tarfile.SYMTYPE, "000000.jpg"
            t.addfile(link)
            folder = tarfile.TarInfo("d")
            folder.type = tarfile.DIRTYPE
            t.addfile(folder)
        put("tar_archive", name, buf.getvalue())


def zipfile_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w"):
        pass
    return buf.getvalue()


def chunks(path: str, name: str) -> list[bytes]:
    with h5py.File(path, "r") as f:
        ds = f[name]
        count = min(ds.id.get_num_chunks(), 2)
        offsets = [ds.id.get_chunk_info(i).chunk_offset for i in range(count)]
        return [ds.id.read_direct_chunk(o)[1] for o in offsets]


def hdf5_seeds(tmp: str) -> None:
    rng = np.random.default_rng(2)
    data = (rng.integers(0, 40, (4, 16, 16)) * [1, 3, 5, 7][0]).astype("<u2")
    nbytes = data[0].nbytes
    path = os.path.join(tmp, "codecs.h5")
    with h5py.File(path, "w") as f:
        kw = {"chunks": (1, 16, 16)}
        f.create_dataset("deflate", data=data, compression="gzip", **kw)
        f.create_dataset("shuffle", data=data, shuffle=True, **kw)
        f.create_dataset("fletcher", data=data, fletcher32=True, **kw)
        f.create_dataset("lzf", data=data, compression="lzf", **kw)
        f.create_dataset("blosc", data=data, **hdf5plugin.Blosc(cname="lz4", shuffle=1), **kw)
        f.create_dataset("blosc_zstd", data=data, **hdf5plugin.Blosc(cname="zstd", shuffle=2), **kw)
        f.create_dataset("lz4", data=data, **hdf5plugin.LZ4(), **kw)
        f.create_dataset("zstd", data=data, **hdf5plugin.Zstd(), **kw)
        f.create_dataset("bitshuffle", data=data, **hdf5plugin.Bitshuffle(cname="none"), **kw)
        f.create_dataset("bitshuffle_lz4", data=data, **hdf5plugin.Bitshuffle(cname="lz4"), **kw)
        f.create_dataset("gzip_shuffle", data=data, compression="gzip", shuffle=True, **kw)
    n4 = struct.pack("<H", nbytes // 4)
    for k, c in enumerate(chunks(path, "deflate")):
        put("deflate", f"zlib{k}", n4 + b"\x01" + c)
    for k, c in enumerate(chunks(path, "shuffle")):
        put("shuffle", f"u2_{k}", b"\x02" + c)
    for k, c in enumerate(chunks(path, "fletcher")):
        put("fletcher32", f"chunk{k}", c)
    for k, c in enumerate(chunks(path, "lzf")):
        put("lzf", f"chunk{k}", struct.pack("<H", nbytes) + c)
    for name in ("blosc", "blosc_zstd"):
        for k, c in enumerate(chunks(path, name)):
            put("blosc", f"{name}{k}", n4 + c)
    for k, c in enumerate(chunks(path, "lz4")):
        put("lz4", f"hdf5_{k}", n4 + b"\x01" + c)
    for k, c in enumerate(chunks(path, "zstd")):
        put("zstd", f"chunk{k}", n4 + c)
    n2 = struct.pack("<H", nbytes // 2)
    for name, inner in (("bitshuffle", 0), ("bitshuffle_lz4", 1)):
        for k, c in enumerate(chunks(path, name)):
            # Element size 2, the default block; the chunk as stored (with LZ4 inside it
            # starts with bitshuffle's 12-byte header, which the decoder reads).
            put("bitshuffle", f"{name}{k}", n2 + bytes([2, 0, inner]) + c)
    # Pipelines as HDF5 stores them: gzip then shuffle (decoded in reverse: inflate, unshuffle).
    for k, c in enumerate(chunks(path, "gzip_shuffle")):
        put("pipeline", f"gzip_shuffle{k}", struct.pack("<H", nbytes) + bytes([2, 1, 0, 4, 2]) + c)
    for k, c in enumerate(chunks(path, "fletcher")):
        put("pipeline", f"fletcher{k}", struct.pack("<H", nbytes) + bytes([1, 3, 0]) + c)
    # PyTables: blosc chunks of a CArray.
    ptpath = os.path.join(tmp, "pytables.h5")
    with tables.open_file(ptpath, "w") as t:
        filters = tables.Filters(complevel=5, complib="blosc:lz4", shuffle=True)
        t.create_carray("/", "x", obj=data, chunkshape=(1, 16, 16), filters=filters)
    for k, c in enumerate(chunks(ptpath, "x")):
        put("blosc", f"pytables{k}", n4 + c)


def blosc2_seeds(tmp: str) -> None:
    """blosc2 frames: hdf5plugin's 1-d chunk (a plain frame) and 3-d chunk (a b2nd array),
    and PyTables' blosc2 CArray."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 40, (4, 16, 16)).astype("<u2")
    path = os.path.join(tmp, "blosc2.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "flat",
            data=data.reshape(-1),
            chunks=(256,),
            **hdf5plugin.Blosc2(cname="lz4", filters=hdf5plugin.Blosc2.SHUFFLE),
        )
        f.create_dataset(
            "b2nd",
            data=data,
            chunks=(2, 16, 16),
            **hdf5plugin.Blosc2(cname="zstd", filters=hdf5plugin.Blosc2.BITSHUFFLE),
        )
    for name, nbytes in (("flat", 256 * 2), ("b2nd", 2 * 16 * 16 * 2)):
        for k, c in enumerate(chunks(path, name)):
            put("blosc2", f"{name}{k}", struct.pack("<H", nbytes // 4) + c)
    ptpath = os.path.join(tmp, "pytables_blosc2.h5")
    with tables.open_file(ptpath, "w") as t:
        filters = tables.Filters(complevel=5, complib="blosc2:lz4", shuffle=True)
        t.create_carray("/", "x", obj=data, chunkshape=(1, 16, 16), filters=filters)
    for k, c in enumerate(chunks(ptpath, "x")):
        put("blosc2", f"pytables{k}", struct.pack("<H", 16 * 16 * 2 // 4) + c)


ITEMSIZES = [1, 2, 4, 8, 3, 16]
FILTER_IDS = [1, 2, 3, 32000, 32001, 32004, 32008, 32015, 32026, 307]


def hdf5_chunk_seed(ds, k: int = 0) -> bytes:
    """One stored chunk of `ds` laid out as the hdf5_chunk target reads it: item size, rank,
    dimensions, the filter pipeline (ids and parameters as the file stores them), the chunk's
    filter mask and its bytes."""
    dcpl = ds.id.get_create_plist()
    head = bytes([ITEMSIZES.index(ds.dtype.itemsize), len(ds.chunks) - 1])
    head += b"".join(struct.pack("<I", d - 1) for d in ds.chunks)
    filters = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
    head += bytes([len(filters)])
    for fid, _flags, params, _name in filters:
        head += bytes([FILTER_IDS.index(fid), len(params)])
        head += b"".join(struct.pack("<I", p) for p in params)
    info = ds.id.get_chunk_info(k)
    mask, data = ds.id.read_direct_chunk(info.chunk_offset)
    return head + struct.pack("<I", mask) + data


def hdf5_chunk_seeds(tmp: str) -> None:
    """Chunks of every codec packread decodes, with the pipelines and shapes real writers use:
    h5py + hdf5plugin (blosc, blosc2 1-d and b2nd, tiled b2nd blocks, bitshuffle, lz4, zstd,
    gzip + shuffle, LZF, Fletcher-32) and PyTables (blosc, blosc2)."""
    rng = np.random.default_rng(4)
    img = rng.integers(0, 60, (4, 3, 32, 32)).astype("<u2")
    big = rng.integers(0, 16, (4, 3, 128, 128)).astype("<f4")
    path = os.path.join(tmp, "pipelines.h5")
    c = {"chunks": (1, 3, 32, 32)}
    with h5py.File(path, "w") as f:
        f.create_dataset("gzip_shuffle", data=img, compression="gzip", shuffle=True, **c)
        f.create_dataset("lzf_fletcher", data=img, compression="lzf", fletcher32=True, **c)
        f.create_dataset("blosc_lz4", data=img, **hdf5plugin.Blosc(cname="lz4", shuffle=1), **c)
        f.create_dataset("blosc_zstd", data=img, **hdf5plugin.Blosc(cname="zstd", shuffle=2), **c)
        f.create_dataset("blosc2_b2nd", data=img, **hdf5plugin.Blosc2(cname="lz4"), **c)
        f.create_dataset("blosc2_flat", data=img.reshape(-1), chunks=(1024,), **hdf5plugin.Blosc2())
        f.create_dataset(
            "blosc2_tiled", data=big, chunks=(4, 3, 128, 128), **hdf5plugin.Blosc2(cname="zstd")
        )
        f.create_dataset("bitshuffle_lz4", data=img, **hdf5plugin.Bitshuffle(cname="lz4"), **c)
        f.create_dataset("bitshuffle_zstd", data=img, **hdf5plugin.Bitshuffle(cname="zstd"), **c)
        f.create_dataset("lz4", data=img, **hdf5plugin.LZ4(), **c)
        f.create_dataset("zstd", data=img, **hdf5plugin.Zstd(), **c)
        names = list(f)
    with h5py.File(path, "r") as f:
        for name in names:
            put("hdf5_chunk", name, hdf5_chunk_seed(f[name]))
    ptpath = os.path.join(tmp, "pytables_pipelines.h5")
    with tables.open_file(ptpath, "w") as t:
        for lib in ("blosc:lz4", "blosc2:zstd"):
            filters = tables.Filters(complevel=5, complib=lib, shuffle=True)
            name = lib.replace(":", "_")
            t.create_carray("/", name, obj=img, chunkshape=(2, 3, 32, 32), filters=filters)
    with h5py.File(ptpath, "r") as f:
        for name in ("blosc_lz4", "blosc2_zstd"):
            put("hdf5_chunk", f"pytables_{name}", hdf5_chunk_seed(f[name]))


def planner_seeds() -> None:
    # (head: rank-1 + 4 * itemsize choice, shape, chunk, rows)
    put("planner", "image_rows", bytes([2 + 4 * 0, 8, 3, 4, 1, 2, 4, 0, 7, 7, 3, 1]))
    put("planner", "auto_chunks", bytes([3 + 4 * 3, 6, 5, 4, 3, 4, 2, 3, 2, 5, 0, 5, 2, 2]))
    put("planner", "one_dim", bytes([0 + 4 * 4, 8, 3, 0, 1, 2, 7, 7, 6]))


def image_seeds() -> None:
    """Small re-encodings of a photograph in every kind the image decoders read; the first
    byte picks the mode and crop (see fuzz_targets/image.rs)."""
    import skimage
    from PIL import Image

    photo = Image.open(os.path.join(os.path.dirname(skimage.__file__), "data", "chelsea.png"))
    im = photo.convert("RGB").resize((40, 27))
    exif = Image.Exif()
    exif[0x0112] = 6
    kinds = {
        "baseline.jpg": (im, "JPEG", {"quality": 80}),
        "progressive.jpg": (im, "JPEG", {"quality": 80, "progressive": True}),
        "gray.jpg": (im.convert("L"), "JPEG", {}),
        "cmyk.jpg": (im.convert("CMYK"), "JPEG", {}),
        "rotated.jpg": (im, "JPEG", {"exif": exif.tobytes()}),
        "rgb.png": (im, "PNG", {}),
        "rgba.png": (im.convert("RGBA"), "PNG", {}),
        "palette.png": (im.convert("P"), "PNG", {}),
        "lossless.webp": (im, "WEBP", {"lossless": True}),
        "lossy.webp": (im, "WEBP", {"quality": 70}),
    }
    for k, (name, (img, fmt, kw)) in enumerate(kinds.items()):
        buf = io.BytesIO()
        img.save(buf, fmt, **kw)
        put("image", name, bytes([k * 37 % 256]) + buf.getvalue())


def main() -> None:
    npy_seeds()
    image_seeds()
    zip_seeds()
    tar_seeds()
    planner_seeds()
    with tempfile.TemporaryDirectory() as tmp:
        hdf5_seeds(tmp)
        blosc2_seeds(tmp)
        hdf5_chunk_seeds(tmp)
    total = sum(len(fs) for _, _, fs in os.walk(OUT))
    print(f"{total} seeds in {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
