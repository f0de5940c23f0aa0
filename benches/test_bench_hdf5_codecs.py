"""HDF5 plugin codecs and ragged data: packread against h5py + hdf5plugin and PyTables.

Method (what a user sees):
- every file is a few hundred MB of raw data, written once per session and read once before
  any timing (warm page cache);
- every round draws fresh random indices, and runs every variant of the group on them, in an
  order rotated from round to round (baseline and packread alternated in the same run);
- the medians and ratios are printed and stored in the pytest-benchmark record
  (``extra_info``) of the group's packread variant, which pytest-benchmark also times;
- "codec alone": the same chunk bytes (read with h5py's ``read_direct_chunk``) decoded one
  after another on one thread by the codec's own Python binding (``blosc2.decompress``, which
  reads blosc 1 buffers; ``hdf5plugin`` exposes no decoder) against packread on one thread.

Run: ``.venv/bin/python -m pytest benches/test_bench_hdf5_codecs.py -q --benchmark-only -s``.
"""

from __future__ import annotations

import os
import statistics
import time
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

import packread

ROUNDS = int(os.environ.get("PACKREAD_BENCH_ROUNDS", "15"))
SEED = 20_261_122


@pytest.fixture(scope="session")
def codec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hdf5-codecs")


def _warm(path: Path) -> None:
    """Flushes the file and reads it once, so every timing is a warm-page-cache one."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        while f.read(64 << 20):
            pass


def interleaved(
    variants: dict[str, Callable[[np.ndarray], Any]],
    n: int,
    batch: int,
    rounds: int = ROUNDS,
) -> dict[str, float]:
    """Median seconds per call of each variant: fresh random indices every round, every
    variant on the same indices, the order rotated each round."""
    rng = np.random.default_rng(SEED)
    names = list(variants)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds + 1):
        idx = rng.choice(n, batch, replace=False)
        order = names[r % len(names) :] + names[: r % len(names)]
        for k in order:
            t = time.perf_counter()
            variants[k](idx)
            if r:  # the first round warms up
                times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def report(
    benchmark: Any,
    group: str,
    medians: dict[str, float],
    baseline: str,
    nbytes: int,
    batch: int,
    packread_fn: Callable[[], Any],
) -> None:
    lines = [f"\n[{group}] batch {batch}, {nbytes / batch / 1e3:.0f} KB per sample"]
    for k, t in medians.items():
        lines.append(
            f"  {k:<44} {t * 1e3:9.2f} ms  {batch / t:10.0f} samples/s  "
            f"{nbytes / t / 1e9:6.2f} GB/s  {medians[baseline] / t:6.2f}x"
        )
    print("\n".join(lines))
    benchmark.group = group
    benchmark.extra_info.update(
        {f"median_s[{k}]": t for k, t in medians.items()},
        **{f"ratio_vs_baseline[{k}]": medians[baseline] / t for k, t in medians.items()},
    )
    benchmark.pedantic(packread_fn, rounds=5, iterations=1)


def _h5py_loop(ds: h5py.Dataset, out: np.ndarray) -> Callable[[np.ndarray], Any]:
    def run(idx: np.ndarray) -> np.ndarray:
        for k, i in enumerate(idx):
            out[k] = ds[i]
        return out

    return run


def _pytables_loop(node: Any, out: np.ndarray) -> Callable[[np.ndarray], Any]:
    def run(idx: np.ndarray) -> np.ndarray:
        for k, i in enumerate(idx):
            out[k] = node[i]
        return out

    return run


def _check(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


# --------------------------------------------------------------------------------------------
# the seed layout: float64 rows of 100k values, blosc:lz4hc level 9, no shuffle, 1 row/chunk

ROW = 100_000
SEED_ROWS = int(os.environ.get("PACKREAD_BENCH_SEED_ROWS", "320"))  # 256 MB raw


def _signals(rng: np.random.Generator, n: int, length: int) -> np.ndarray:
    """Time series a sensor would give: a quantized random walk holding each value a few
    samples (compresses ~4-6x with LZ4, like the seed's 6.9 GB -> 1.2 GB)."""
    steps = rng.integers(-3, 4, size=(n, length // 4)).astype(np.float64) / 100
    return np.repeat(np.cumsum(steps, axis=1), 4, axis=1)[:, :length]


@dataclass(frozen=True)
class SeedFiles:
    h5py_path: Path
    pytables_path: Path
    data: np.ndarray


@pytest.fixture(scope="session")
def seed_files(codec_dir: Path) -> SeedFiles:
    rng = np.random.default_rng(1)
    data = _signals(rng, SEED_ROWS, ROW)
    a, b = codec_dir / "seed_h5py.h5", codec_dir / "seed_pytables.h5"
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
    for p in (a, b):
        _warm(p)
    return SeedFiles(a, b, data)


def test_seed_blosc_lz4hc(benchmark: Any, seed_files: SeedFiles) -> None:
    batch = 8
    out = np.empty((batch, ROW), np.float64)
    h5 = h5py.File(seed_files.h5py_path, "r")
    pt = tables.open_file(str(seed_files.pytables_path), "r")
    reader = packread.HDF5Reader(seed_files.h5py_path, "data")
    reader_pt = packread.HDF5Reader(seed_files.pytables_path, "data")
    one = packread.HDF5Reader(seed_files.h5py_path, "data", num_threads=1)
    variants = {
        "h5py + hdf5plugin loop (baseline)": _h5py_loop(h5["data"], out),
        "PyTables loop": _pytables_loop(pt.root.data, out),
        "packread 2 threads": lambda idx: reader.batch(idx, out=out),
        "packread 2 threads (PyTables file)": lambda idx: reader_pt.batch(idx, out=out),
        "packread 1 thread": lambda idx: one.batch(idx, out=out),
    }
    idx = np.array([3, 0, SEED_ROWS - 1])
    _check(reader.batch(idx), seed_files.data[idx])
    _check(reader_pt.batch(idx), seed_files.data[idx])
    med = interleaved(variants, SEED_ROWS, batch)

    # The codec alone, on the same chunk bytes, one thread.
    blosc2.set_nthreads(1)
    dsid = h5["data"].id
    chunks = [dsid.read_direct_chunk((i, 0))[1] for i in range(SEED_ROWS)]
    ratio = sum(len(c) for c in chunks) / seed_files.data.nbytes

    def codec_alone(idx: np.ndarray) -> None:
        for i in idx:
            blosc2.decompress(chunks[i], dst=out[0])

    med["blosc2.decompress loop, 1 thread (codec alone)"] = interleaved(
        {"c": codec_alone}, SEED_ROWS, batch
    )["c"]
    codec = med["blosc2.decompress loop, 1 thread (codec alone)"]
    print(
        f"\n  compressed/raw = {ratio:.3f}; packread 1 thread at "
        f"{codec / med['packread 1 thread']:.0%} of the codec alone"
    )
    report(
        benchmark,
        "hdf5-codec seed lz4hc9 rows",
        med,
        "h5py + hdf5plugin loop (baseline)",
        batch * ROW * 8,
        batch,
        lambda: reader.batch(np.random.default_rng().choice(SEED_ROWS, batch), out=out),
    )
    h5.close()
    pt.close()


# --------------------------------------------------------------------------------------------
# 3x256x256 uint8 images, one per chunk, several codecs

IMG = (3, 256, 256)
N_IMG = int(os.environ.get("PACKREAD_BENCH_IMAGES", "1024"))  # 200 MB raw


def _images(rng: np.random.Generator, n: int) -> np.ndarray:
    """Smooth pictures with noise (compress ~2-4x)."""
    y, x = np.mgrid[0:256, 0:256]
    out = np.empty((n, *IMG), np.uint8)
    for i in range(n):
        fx, fy, ph = [*rng.uniform(0.005, 0.05, 2).tolist(), rng.uniform(0, 6.3)]
        base = 127 + 100 * np.sin(fx * x + ph) * np.cos(fy * y)
        noise = rng.integers(-6, 7, size=IMG)
        out[i] = np.clip(base[None] + noise + np.arange(3)[:, None, None] * 20, 0, 255)
    return out


IMAGE_CODECS: dict[str, Callable[[], dict[str, Any]]] = {
    "zstd": lambda: dict(hdf5plugin.Zstd(clevel=3)),
    "bitshuffle+lz4": lambda: dict(hdf5plugin.Bitshuffle(cname="lz4")),
    "blosc-zstd byte shuffle": lambda: dict(
        hdf5plugin.Blosc(cname="zstd", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)
    ),
}


@pytest.fixture(scope="session")
def images() -> np.ndarray:
    return _images(np.random.default_rng(2), N_IMG)


@pytest.fixture(scope="session")
def image_files(codec_dir: Path, images: np.ndarray) -> dict[str, Path]:
    files = {}
    for name, make in IMAGE_CODECS.items():
        p = codec_dir / f"img_{name.replace(' ', '_').replace('+', '_')}.h5"
        with h5py.File(p, "w") as f:
            f.create_dataset("images", data=images, chunks=(1, *IMG), **make())
        files[name] = p
    p = codec_dir / "img_pytables_blosc.h5"
    with tables.open_file(str(p), "w") as f:  # PyTables' default blosc: blosclz, shuffle
        f.create_carray(
            "/", "images", obj=images, chunkshape=(1, *IMG), filters=tables.Filters(5, "blosc")
        )
    files["PyTables default blosc"] = p
    for p in files.values():
        _warm(p)
    return files


@pytest.mark.parametrize("codec", [*IMAGE_CODECS, "PyTables default blosc"])
def test_images(
    benchmark: Any, image_files: dict[str, Path], images: np.ndarray, codec: str
) -> None:
    batch = 64
    path = image_files[codec]
    out = np.empty((batch, *IMG), np.uint8)
    h5 = h5py.File(path, "r")
    reader = packread.HDF5Reader(path, "images")
    one = packread.HDF5Reader(path, "images", num_threads=1)
    variants: dict[str, Callable[[np.ndarray], Any]] = {
        "h5py + hdf5plugin loop (baseline)": _h5py_loop(h5["images"], out),
    }
    pt = None
    if codec == "PyTables default blosc":
        pt = tables.open_file(str(path), "r")
        variants["PyTables loop"] = _pytables_loop(pt.root.images, out)
    variants["packread 2 threads"] = lambda idx: reader.batch(idx, out=out)
    variants["packread 1 thread"] = lambda idx: one.batch(idx, out=out)
    idx = np.array([5, 0, N_IMG - 1])
    _check(reader.batch(idx), images[idx])
    med = interleaved(variants, N_IMG, batch)
    if codec.startswith("blosc") or codec.startswith("PyTables"):
        blosc2.set_nthreads(1)
        dsid = h5["images"].id
        masks = [dsid.get_chunk_info(i).filter_mask for i in range(N_IMG)]
        print(f"\n  {sum(1 for m in masks if m) / N_IMG:.0%} of chunks stored unfiltered")
        filtered = np.array([i for i in range(N_IMG) if not masks[i]])
        if len(filtered) >= batch:
            chunks = {int(i): dsid.read_direct_chunk((int(i), 0, 0, 0))[1] for i in filtered}

            def codec_alone(idx: np.ndarray) -> None:
                for i in filtered[idx]:
                    blosc2.decompress(chunks[int(i)], dst=out[0])

            def packread_one(idx: np.ndarray) -> None:
                one.batch(filtered[idx], out=out)

            pair = interleaved(
                {"codec": codec_alone, "packread": packread_one}, len(filtered), batch
            )
            med["blosc2.decompress loop, 1 thread (codec alone)"] = pair["codec"]
            print(
                f"  packread 1 thread at {pair['codec'] / pair['packread']:.0%} "
                "of the codec alone (blosc chunks only)"
            )
    report(
        benchmark,
        f"hdf5-codec images {codec}",
        med,
        "h5py + hdf5plugin loop (baseline)",
        batch * images[0].nbytes,
        batch,
        lambda: reader.batch(np.random.default_rng().choice(N_IMG, batch), out=out),
    )
    h5.close()
    if pt is not None:
        pt.close()


# --------------------------------------------------------------------------------------------
# VLArray of 1-4 KB ragged rows

N_VL = int(os.environ.get("PACKREAD_BENCH_VLROWS", "60000"))  # ~150 MB


@pytest.fixture(scope="session")
def vlarray(codec_dir: Path) -> tuple[Path, list[np.ndarray]]:
    rng = np.random.default_rng(3)
    lengths = rng.integers(256, 1024, N_VL)  # float32: 1-4 KB
    flat = rng.normal(size=int(lengths.sum())).astype(np.float32)
    rows = np.split(flat, np.cumsum(lengths)[:-1])
    p = codec_dir / "vlarray.h5"
    with tables.open_file(str(p), "w") as f:
        v = f.create_vlarray("/", "rows", tables.Float32Atom(), expectedrows=N_VL)
        for r in rows:
            v.append(r)
    _warm(p)
    return p, rows


def test_vlarray(benchmark: Any, vlarray: tuple[Path, list[np.ndarray]]) -> None:
    batch = 64
    path, rows = vlarray
    pt = tables.open_file(str(path), "r")
    node = pt.root.rows
    reader = packread.HDF5Reader(path, "rows")
    flat = packread.HDF5Reader(path, "rows", ragged="flat")
    variants = {
        "PyTables VLArray loop (baseline)": lambda idx: [node[i] for i in idx],
        "packread list": lambda idx: reader.batch(idx),
        "packread flat (values, offsets)": lambda idx: flat.batch(idx),
    }
    for g, i in zip(reader.batch([7, 0, N_VL - 1]), [7, 0, N_VL - 1], strict=False):
        _check(g, rows[i])
    med = interleaved(variants, N_VL, batch)
    nbytes = int(np.mean([r.nbytes for r in rows[:1000]])) * batch
    report(
        benchmark,
        "hdf5-codec vlarray 1-4KB rows",
        med,
        "PyTables VLArray loop (baseline)",
        nbytes,
        batch,
        lambda: reader.batch(np.random.default_rng().choice(N_VL, batch)),
    )
    pt.close()
