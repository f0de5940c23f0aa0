"""HDF5 plugin codecs and ragged data: packread against h5py + hdf5plugin and PyTables.

Groups (all through :func:`conftest.compare`: fresh random batches, variants interleaved round
by round, results checked before and after timing; files of a few hundred MB, warm cache):

- ``hdf5-codec seed lz4hc9``: the h5py-vs-npy seed's layout scaled down: float64 rows of 100k
  values, ``blosc:lz4hc`` level 9, no shuffle, one row per chunk, batch 8; written by h5py +
  hdf5plugin and by PyTables.
- ``hdf5-codec images <codec>``: 3x256x256 uint8 images, one per chunk, batch 64: zstd,
  bitshuffle+LZ4, blosc-zstd with byte shuffle, blosc2-lz4 with byte shuffle and blosc2-zstd
  with bit shuffle (hdf5plugin; n-d chunks, so b2nd frames), PyTables' default blosc and
  PyTables' blosc2.
- ``hdf5-codec vlarray``: a PyTables VLArray of 1-4 KB float32 rows, batch 64.

Baselines: an h5py + hdf5plugin per-row loop (``out[k] = ds[i]``), or PyTables' ``node[i]``
loop. The ``reference`` row "codec alone" decodes the same stored chunk bytes (read before
timing with h5py's ``read_direct_chunk``) one after another on one thread with the codec's own
Python binding (``blosc2.decompress`` reads blosc 1 buffers, the ``bitshuffle`` package, the
reference implementation, bitshuffle+LZ4; hdf5plugin exposes no decoder, and python-blosc2
cannot read hdf5plugin's blosc2 frames), to compare with packread on one thread. Per-decoder speeds
against the C libraries themselves are in ``benches/hdf5_codecs.rs`` (criterion).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blosc2
import h5py
import hdf5plugin
import numpy as np
import pytest
import tables
from conftest import Variant, compare, compare_rows, fresh_batches, warm_page_cache

import packread

ROW = 100_000
SEED_ROWS = 320  # 256 MB raw
IMG = (3, 256, 256)
N_IMG = 1024  # 200 MB raw
N_VL = 60_000  # ~150 MB


def _h5py_loop(ds: h5py.Dataset, out: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    def run(idx: np.ndarray) -> np.ndarray:
        for k, i in enumerate(idx):
            out[k] = ds[i]
        return out

    return run


def _pytables_loop(node: Any, out: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    def run(idx: np.ndarray) -> np.ndarray:
        for k, i in enumerate(idx):
            out[k] = node[i]
        return out

    return run


def _codec_alone(ds: h5py.Dataset, out: np.ndarray) -> Callable[[np.ndarray], np.ndarray] | None:
    """``blosc2.decompress`` of each row's stored chunk into ``out`` on one thread, or None if
    some chunk is stored unfiltered (the codec alone could not read it)."""
    dsid = ds.id
    n = ds.shape[0]
    if any(dsid.get_chunk_info(i).filter_mask for i in range(n)):
        return None
    zeros = (0,) * (ds.ndim - 1)
    chunks = [dsid.read_direct_chunk((i, *zeros))[1] for i in range(n)]

    def run(idx: np.ndarray) -> np.ndarray:
        blosc2.set_nthreads(1)
        for k, i in enumerate(idx):
            blosc2.decompress(chunks[i], dst=out[k])
        return out

    return run


def _stored_chunks(ds: h5py.Dataset) -> list[bytes] | None:
    """Each row's stored chunk (one row per chunk), or None if some chunk is stored unfiltered
    (the codec alone could not read it)."""
    dsid = ds.id
    n = ds.shape[0]
    if any(dsid.get_chunk_info(i).filter_mask for i in range(n)):
        return None
    zeros = (0,) * (ds.ndim - 1)
    return [dsid.read_direct_chunk((i, *zeros))[1] for i in range(n)]


def _import_bitshuffle() -> Any:
    """The ``bitshuffle`` package on one thread: its OpenMP runtime (a copy of its own) reads
    OMP_NUM_THREADS once, when it loads; spinning OpenMP threads on a busy 2-core machine made
    it 40x slower. Set only for that load."""
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        import bitshuffle
    finally:
        if before is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = before
    return bitshuffle


def _bitshuffle_alone(
    ds: h5py.Dataset, out: np.ndarray
) -> Callable[[np.ndarray], np.ndarray] | None:
    """The reference bitshuffle (the ``bitshuffle`` package, its LZ4 build) decoding each row's
    stored chunk: HDF5's 12-byte header (total size, block size) stripped, blocks as stored."""
    chunks = _stored_chunks(ds)
    if chunks is None:
        return None
    bitshuffle = _import_bitshuffle()
    itemsize = ds.dtype.itemsize
    bodies = [np.frombuffer(c, np.uint8, offset=12) for c in chunks]
    block = int.from_bytes(chunks[0][8:12], "big") // itemsize
    shape = (int(np.prod(ds.shape[1:])),)

    def run(idx: np.ndarray) -> np.ndarray:
        for k, i in enumerate(idx):
            out[k] = bitshuffle.decompress_lz4(bodies[i], shape, ds.dtype, block).reshape(
                out.shape[1:]
            )
        return out

    return run


# --------------------------------------------------------------------------------------------
# the seed layout


def _signals(rng: np.random.Generator, n: int, length: int) -> np.ndarray:
    """Sensor-like time series: a quantized random walk holding each value 4 samples."""
    steps = rng.integers(-3, 4, size=(n, length // 4)).astype(np.float64) / 100
    return np.repeat(np.cumsum(steps, axis=1), 4, axis=1)[:, :length]


@dataclass(frozen=True)
class SeedFiles:
    h5py_path: Path
    pytables_path: Path
    data: np.ndarray


@pytest.fixture(scope="session")
def seed_files(bench_dir: Path) -> SeedFiles:
    data = _signals(np.random.default_rng(1), SEED_ROWS, ROW)
    a, b = bench_dir / "codec_seed_h5py.h5", bench_dir / "codec_seed_pytables.h5"
    with h5py.File(a, "w") as f:
        f.create_dataset(
            "data",
            data=data,
            chunks=(1, ROW),
            **hdf5plugin.Blosc(cname="lz4hc", clevel=9, shuffle=hdf5plugin.Blosc.NOSHUFFLE),
        )
    with tables.open_file(str(b), "w") as f:
        f.create_carray(
            "/",
            "data",
            obj=data,
            chunkshape=(1, ROW),
            filters=tables.Filters(9, "blosc:lz4hc", shuffle=False),
        )
    warm_page_cache([a, b])
    return SeedFiles(a, b, data)


def test_seed_blosc_lz4hc9(benchmark: Any, seed_files: SeedFiles) -> None:
    batch = 8
    outs = [np.empty((batch, ROW), np.float64) for _ in range(4)]
    h5 = h5py.File(seed_files.h5py_path, "r")
    pt = tables.open_file(str(seed_files.pytables_path), "r")
    two = packread.HDF5Reader(seed_files.h5py_path, "data")
    two_pt = packread.HDF5Reader(seed_files.pytables_path, "data")
    one = packread.HDF5Reader(seed_files.h5py_path, "data", num_threads=1)
    codec = _codec_alone(h5["data"], outs[2])
    assert codec is not None
    stored = sum(h5["data"].id.get_chunk_info(i).size for i in range(SEED_ROWS))
    compare_rows(
        benchmark,
        group="hdf5-codec seed lz4hc9",
        variants=[
            Variant("baseline", "h5py + hdf5plugin loop", _h5py_loop(h5["data"], outs[0])),
            Variant("variant", "PyTables loop", _pytables_loop(pt.root.data, outs[1])),
            Variant("reference", "codec alone (blosc2.decompress), 1 thread", codec),
            Variant("packread", "HDF5Reader.batch, 2 threads", lambda i: two.batch(i, out=outs[3])),
            Variant("packread", "HDF5Reader.batch, PyTables file", lambda i: two_pt.batch(i)),
            Variant("packread", "HDF5Reader.batch, 1 thread", lambda i: one.batch(i)),
        ],
        rows=seed_files.data,
        n=SEED_ROWS,
        k=batch,
        compression=round(seed_files.data.nbytes / stored, 2),
    )
    h5.close()
    pt.close()


# --------------------------------------------------------------------------------------------
# images


def _images(rng: np.random.Generator, n: int) -> np.ndarray:
    """Smooth pictures with a little noise."""
    y, x = np.mgrid[0:256, 0:256]
    out = np.empty((n, *IMG), np.uint8)
    for i in range(n):
        fx, fy = rng.uniform(0.005, 0.05, 2).tolist()
        base = 127 + 100 * np.sin(fx * x + rng.uniform(0, 6.3)) * np.cos(fy * y)
        noise = rng.integers(-6, 7, size=IMG)
        out[i] = np.clip(base[None] + noise + np.arange(3)[:, None, None] * 20, 0, 255)
    return out


IMAGE_CODECS: dict[str, Callable[[], Any]] = {
    "zstd": lambda: hdf5plugin.Zstd(clevel=3),
    "bitshuffle+lz4": lambda: hdf5plugin.Bitshuffle(cname="lz4"),
    "blosc-zstd byte shuffle": lambda: hdf5plugin.Blosc(
        cname="zstd", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE
    ),
    "blosc2-lz4 byte shuffle": lambda: hdf5plugin.Blosc2(
        cname="lz4", clevel=5, filters=hdf5plugin.Blosc2.SHUFFLE
    ),
    "blosc2-zstd bit shuffle": lambda: hdf5plugin.Blosc2(
        cname="zstd", clevel=5, filters=hdf5plugin.Blosc2.BITSHUFFLE
    ),
}
PYTABLES_BLOSC = "PyTables default blosc"
PYTABLES_BLOSC2 = "PyTables blosc2"


@pytest.fixture(scope="session")
def images() -> np.ndarray:
    return _images(np.random.default_rng(2), N_IMG)


@pytest.fixture(scope="session")
def image_files(bench_dir: Path, images: np.ndarray) -> dict[str, Path]:
    files = {}
    for name, make in IMAGE_CODECS.items():
        p = bench_dir / f"codec_img_{name.replace(' ', '_').replace('+', '_')}.h5"
        with h5py.File(p, "w") as f:
            f.create_dataset("images", data=images, chunks=(1, *IMG), **make())
        files[name] = p
    # PyTables' default blosc and blosc2 (blosclz, shuffle), one image per chunk.
    for key, complib in ((PYTABLES_BLOSC, "blosc"), (PYTABLES_BLOSC2, "blosc2")):
        p = bench_dir / f"codec_img_pytables_{complib}.h5"
        with tables.open_file(str(p), "w") as f:
            f.create_carray(
                "/",
                "images",
                obj=images,
                chunkshape=(1, *IMG),
                filters=tables.Filters(5, complib),
            )
        files[key] = p
    warm_page_cache(files.values())
    return files


@pytest.mark.parametrize("codec", [*IMAGE_CODECS, PYTABLES_BLOSC, PYTABLES_BLOSC2])
def test_images(
    benchmark: Any, image_files: dict[str, Path], images: np.ndarray, codec: str
) -> None:
    batch = 64
    path = image_files[codec]
    outs = [np.empty((batch, *IMG), np.uint8) for _ in range(4)]
    h5 = h5py.File(path, "r")
    two = packread.HDF5Reader(path, "images")
    one = packread.HDF5Reader(path, "images", num_threads=1)
    variants = [
        Variant("baseline", "h5py + hdf5plugin loop", _h5py_loop(h5["images"], outs[0])),
        Variant("packread", "HDF5Reader.batch, 2 threads", lambda i: two.batch(i, out=outs[1])),
        Variant("packread", "HDF5Reader.batch, 1 thread", lambda i: one.batch(i, out=outs[2])),
    ]
    pt = None
    alone, how = None, ""
    if codec.startswith("PyTables"):
        pt = tables.open_file(str(path), "r")
        variants.append(
            Variant("variant", "PyTables loop", _pytables_loop(pt.root.images, outs[3]))
        )
    elif codec.startswith("blosc2"):
        # No Python decoder to compare with: python-blosc2 refuses the opaque dtype that
        # hdf5plugin's filter records in its frames. benches/hdf5_codecs.rs compares packread
        # with c-blosc2 on the bare chunk instead.
        pass
    elif codec.startswith("blosc"):
        alone, how = _codec_alone(h5["images"], outs[3]), "blosc2.decompress"
    elif codec.startswith("bitshuffle"):
        alone, how = _bitshuffle_alone(h5["images"], outs[3]), "bitshuffle.decompress_lz4"
    if alone is not None:
        variants.append(Variant("reference", f"codec alone ({how}), 1 thread", alone))
    dsid = h5["images"].id
    infos = [dsid.get_chunk_info(i) for i in range(N_IMG)]
    compare_rows(
        benchmark,
        group=f"hdf5-codec images {codec}",
        variants=variants,
        rows=images,
        n=N_IMG,
        k=batch,
        compression=round(images.nbytes / sum(c.size for c in infos), 2),
        note=f"{sum(1 for c in infos if c.filter_mask) / N_IMG:.0%} of chunks stored unfiltered",
    )
    h5.close()
    if pt is not None:
        pt.close()


# --------------------------------------------------------------------------------------------
# VLArray of 1-4 KB ragged rows


@pytest.fixture(scope="session")
def vlarray(bench_dir: Path) -> tuple[Path, list[np.ndarray]]:
    rng = np.random.default_rng(3)
    lengths = rng.integers(256, 1024, N_VL)  # float32: 1-4 KB
    flat = rng.normal(size=int(lengths.sum())).astype(np.float32)
    rows = np.split(flat, np.cumsum(lengths)[:-1])
    p = bench_dir / "codec_vlarray.h5"
    with tables.open_file(str(p), "w") as f:
        v = f.create_vlarray("/", "rows", tables.Float32Atom(), expectedrows=N_VL)
        for r in rows:
            v.append(r)
    warm_page_cache([p])
    return p, rows


def test_vlarray(benchmark: Any, vlarray: tuple[Path, list[np.ndarray]]) -> None:
    batch = 64
    path, rows = vlarray
    pt = tables.open_file(str(path), "r")
    node = pt.root.rows
    as_list = packread.HDF5Reader(path, "rows")
    flat = packread.HDF5Reader(path, "rows", ragged="flat")

    def check(idx: np.ndarray, got: Any) -> None:
        if isinstance(got, tuple):  # (values, offsets)
            values, offsets = got
            got = [values[a:b] for a, b in itertools.pairwise(offsets)]
        assert len(got) == len(idx)
        for g, i in zip(got, idx, strict=True):
            assert g.dtype == rows[i].dtype
            np.testing.assert_array_equal(g, rows[i])

    compare(
        benchmark,
        group="hdf5-codec vlarray 1-4KB rows",
        variants=[
            Variant("baseline", "PyTables VLArray loop", lambda idx: [node[i] for i in idx]),
            Variant("packread", "HDF5Reader.batch (list)", as_list.batch),
            Variant("packread", "HDF5Reader.batch, ragged='flat'", flat.batch),
        ],
        batches=fresh_batches(N_VL, batch),
        check=check,
        samples=batch,
        nbytes=int(np.mean([r.nbytes for r in rows])) * batch,
    )
    pt.close()
