"""HDF5 benchmarks: packread's ``HDF5Reader`` beside the h5py code it replaces.

Groups (warm page cache; every variant of a group walks the same fixed-seed batches):

- ``hdf5-raw`` / ``hdf5-gzip-shuffle`` / ``hdf5-lzf``: one file of 512 samples, ``images``
  3x256x256 uint8 (one sample per chunk) and ``labels`` int64, stored uncompressed, with gzip
  level 4 + shuffle, or with LZF (the labels with the same filter, h5py's automatic chunks).
  A call reads a batch of 64 random indices, images and labels. Baseline: the h5py loop
  ``np.stack([d[i] for i in idx])`` per dataset; variant: ``read_direct`` per index into
  preallocated arrays; references (``hdf5-raw`` only): h5py fancy indexing ``d[np.sort(idx)]``
  (very slow, so only a few rounds) and the physical anchor, two threads of plain ``os.preadv``
  of the same chunk bytes (offsets from ``get_chunk_info_by_coord`` at setup) into
  preallocated arrays. packread: ``HDF5Reader(path).batch(idx)``, and the same with ``out=``.
- ``hdf5-spatiotemporal``: the layout of the "spatiotemporal data in HDF5" seed, float32
  samples of (100, 184, 184) scaled down to (20, 184, 184) (2.7 MB a sample), 64 samples a
  file, 10 random samples a batch, LZF (the seed's fastest codec). Two files, each its own
  ``case``: chunks of exactly one sample, and h5py's automatic chunks (``chunks=True``, the
  layout the seed found 78x slower). Each read by the h5py loop and by packread.

Roles as in ``test_bench_zip.py``: one ``baseline`` per group and case, ``variant`` (another
spelling of the baseline), ``reference`` and ``packread``; ``benches/report.py`` pairs them.
Every benchmark checks the result of its last timed call against the arrays that were written
(which is also what the baseline returns), so a broken path cannot be timed silently. With
``--benchmark-disable`` each runs once, as a quick correctness pass.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from conftest import SEED, measure

import packread

#: Batch benchmarks: a few untimed rounds first, and enough rounds for a stable median.
BATCHED = pytest.mark.benchmark(min_rounds=20, warmup=True, warmup_iterations=3)
#: h5py's fancy indexing takes about half a second a batch: three rounds, no warm-up.
SLOW = pytest.mark.benchmark(min_rounds=3, max_time=0.5, warmup=False)
#: Spatiotemporal batches (27 MB each, up to a few hundred ms with automatic chunks).
SPATIO = pytest.mark.benchmark(min_rounds=5, max_time=2.0, warmup=True, warmup_iterations=1)

N_SAMPLES = 512
IMAGE_SHAPE = (3, 256, 256)
BATCH = 64
N_BATCHES = 32

#: The seed's (100, 184, 184) float32 samples, with 20 frames instead of 100 (2.7 MB, not
#: 13.5 MB a sample) so that two 64-sample files fit this machine's page cache comfortably.
SPATIO_SHAPE = (20, 184, 184)
SPATIO_SAMPLES = 64
SPATIO_BATCH = 10

Loaded = dict[str, np.ndarray]


@dataclass(frozen=True)
class H5Set:
    """One HDF5 file of ``images`` and ``labels``, and the arrays written into it."""

    name: str
    path: str
    arrays: dict[str, np.ndarray] = field(repr=False)
    batches: list[np.ndarray] = field(repr=False)
    #: Bytes of the arrays over bytes stored for them.
    compression: float

    @property
    def sample_bytes(self) -> int:
        return sum(int(a[0].nbytes) for a in self.arrays.values())

    def batch_cycle(self) -> Iterator[np.ndarray]:
        """A fresh walk over the batches, from the first one."""
        while True:
            yield from self.batches


def _sync_and_warm(path: str) -> None:
    # Flush the writes so that writeback does not compete with the timed runs, then read the
    # file once so that it is in the page cache.
    os.sync()
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def _batches(n: int, k: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.choice(n, k, replace=False) for _ in range(N_BATCHES)]


def smooth_images(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` images of 3x256x256 uint8 whose rows are random walks (steps -3..3, mod 256).

    Smooth like natural images: gzip compresses them about 1.5x, unlike uniform noise.
    """
    out = np.empty((n, *IMAGE_SHAPE), dtype=np.uint8)
    for lo in range(0, n, 64):
        hi = min(n, lo + 64)
        steps = rng.integers(-3, 4, (hi - lo, *IMAGE_SHAPE), dtype=np.int16)
        steps[..., 0] = rng.integers(0, 256, (hi - lo, *IMAGE_SHAPE[:-1]), dtype=np.int16)
        out[lo:hi] = np.cumsum(steps, axis=-1, dtype=np.int16) % 256
    return out


_FILTERS: dict[str, dict[str, Any]] = {
    "raw": {},
    "gzip-shuffle": {"compression": "gzip", "compression_opts": 4, "shuffle": True},
    "lzf": {"compression": "lzf"},
}


@pytest.fixture(scope="session")
def h5_arrays() -> dict[str, np.ndarray]:
    """The 512 samples every ``hdf5-*`` file holds."""
    rng = np.random.default_rng(SEED + 20)
    return {
        "images": smooth_images(rng, N_SAMPLES),
        "labels": rng.integers(0, 1000, N_SAMPLES, dtype=np.int64),
    }


def _write_h5(path: Path, name: str, arrays: dict[str, np.ndarray]) -> H5Set:
    filters = _FILTERS[name]
    stored = 0
    with h5py.File(path, "w") as f:
        images = f.create_dataset(
            "images", data=arrays["images"], chunks=(1, *IMAGE_SHAPE), **filters
        )
        # Labels as users write them: the same filter, h5py's automatic chunks (a compressed
        # dataset must be chunked); uncompressed, contiguous.
        labels = f.create_dataset("labels", data=arrays["labels"], **filters)
        stored = images.id.get_storage_size() + labels.id.get_storage_size()
    _sync_and_warm(str(path))
    ratio = sum(a.nbytes for a in arrays.values()) / stored
    return H5Set(
        name=name,
        path=str(path),
        arrays=arrays,
        batches=_batches(N_SAMPLES, BATCH, SEED + 21),
        compression=round(ratio, 2),
    )


@pytest.fixture(scope="session")
def h5_raw(bench_dir: Path, h5_arrays: dict[str, np.ndarray]) -> H5Set:
    return _write_h5(bench_dir / "raw.h5", "raw", h5_arrays)


@pytest.fixture(scope="session")
def h5_gzip_shuffle(bench_dir: Path, h5_arrays: dict[str, np.ndarray]) -> H5Set:
    return _write_h5(bench_dir / "gzip_shuffle.h5", "gzip-shuffle", h5_arrays)


@pytest.fixture(scope="session")
def h5_lzf(bench_dir: Path, h5_arrays: dict[str, np.ndarray]) -> H5Set:
    return _write_h5(bench_dir / "lzf.h5", "lzf", h5_arrays)


@pytest.fixture(params=["raw", "gzip-shuffle", "lzf"])
def h5_set(request: pytest.FixtureRequest) -> H5Set:
    """Each file in turn (its benchmark group is ``hdf5-<name>``)."""
    return request.getfixturevalue(f"h5_{request.param.replace('-', '_')}")


def _h5_batches(
    benchmark: Any,
    hs: H5Set,
    role: str,
    label: str,
    load: Callable[[np.ndarray], Loaded],
    *,
    sort: bool = False,
    **extra: Any,
) -> None:
    """Times ``load`` over the batches of ``hs`` and checks its last result.

    ``sort``: ``load`` returns the samples in sorted index order (h5py's fancy indexing).
    """
    batches = hs.batch_cycle()

    def run() -> tuple[np.ndarray, Loaded]:
        idx = next(batches)
        return idx, load(idx)

    idx, got = measure(
        benchmark,
        group=f"hdf5-{hs.name}",
        role=role,
        label=label,
        samples=BATCH,
        nbytes=BATCH * hs.sample_bytes,
        fn=run,
        compression=hs.compression,
        **extra,
    )
    want = np.sort(idx) if sort else idx
    assert set(got) == set(hs.arrays)
    for k, a in hs.arrays.items():
        assert got[k].dtype == a.dtype, k
        np.testing.assert_array_equal(got[k], a[want], err_msg=k)


def _outs(hs: H5Set) -> Loaded:
    return {k: np.empty((BATCH, *a.shape[1:]), a.dtype) for k, a in hs.arrays.items()}


@BATCHED
def test_h5py_loop(benchmark: Any, h5_set: H5Set) -> None:
    f = h5py.File(h5_set.path, "r")
    ds = {k: f[k] for k in h5_set.arrays}

    def load(idx: np.ndarray) -> Loaded:
        return {k: np.stack([d[i] for i in idx]) for k, d in ds.items()}

    label = "h5py loop: np.stack([d[i] for i in idx]) per dataset"
    _h5_batches(benchmark, h5_set, "baseline", label, load)
    f.close()


@BATCHED
def test_h5py_read_direct(benchmark: Any, h5_set: H5Set) -> None:
    f = h5py.File(h5_set.path, "r")
    ds = {k: f[k] for k in h5_set.arrays}
    outs = _outs(h5_set)

    def load(idx: np.ndarray) -> Loaded:
        for k, d in ds.items():
            out = outs[k]
            for j, i in enumerate(idx):
                d.read_direct(out, np.s_[i], np.s_[j])
        return outs

    label = "h5py read_direct(out, s_[i], s_[j]) per index, preallocated"
    _h5_batches(benchmark, h5_set, "variant", label, load)
    f.close()


@SLOW
def test_h5py_fancy(benchmark: Any, h5_raw: H5Set) -> None:
    f = h5py.File(h5_raw.path, "r")
    ds = {k: f[k] for k in h5_raw.arrays}

    def load(idx: np.ndarray) -> Loaded:
        order = np.sort(idx)
        return {k: d[order] for k, d in ds.items()}

    label = "h5py fancy indexing d[np.sort(idx)] per dataset"
    _h5_batches(benchmark, h5_raw, "reference", label, load, sort=True)
    f.close()


@BATCHED
def test_pread_2_threads(benchmark: Any, h5_raw: H5Set) -> None:
    """The physical anchor: the same chunk bytes, read by plain ``preadv`` on two threads."""
    with h5py.File(h5_raw.path, "r") as f:
        images, labels = f["images"], f["labels"]
        assert images.compression is None
        assert labels.chunks is None
        addr = [
            images.id.get_chunk_info_by_coord((i, 0, 0, 0)).byte_offset for i in range(N_SAMPLES)
        ]
        labels_at = labels.id.get_offset()
    image_bytes = h5_raw.arrays["images"][0].nbytes
    outs = _outs(h5_raw)
    img_rows = outs["images"].reshape(BATCH, -1)
    lab_rows = outs["labels"].reshape(BATCH, 1)
    fd = os.open(h5_raw.path, os.O_RDONLY)
    pool = ThreadPoolExecutor(2)

    def one(j: int, i: int) -> None:
        got = os.preadv(fd, [img_rows[j]], addr[i])
        got += os.preadv(fd, [lab_rows[j]], labels_at + 8 * int(i))
        assert got == image_bytes + 8

    def load(idx: np.ndarray) -> Loaded:
        list(pool.map(one, range(len(idx)), idx))
        return outs

    label = "2 threads of os.preadv of each chunk (+ label) into preallocated arrays"
    _h5_batches(benchmark, h5_raw, "reference", label, load)
    pool.shutdown()
    os.close(fd)


@BATCHED
def test_packread(benchmark: Any, h5_set: H5Set) -> None:
    reader = packread.HDF5Reader(h5_set.path)
    assert sorted(reader.keys()) == sorted(h5_set.arrays)

    label = "HDF5Reader(path).batch(idx)"
    _h5_batches(benchmark, h5_set, "packread", label, reader.batch)


@BATCHED
def test_packread_out(benchmark: Any, h5_set: H5Set) -> None:
    reader = packread.HDF5Reader(h5_set.path)
    outs = _outs(h5_set)

    def load(idx: np.ndarray) -> Loaded:
        return reader.batch(idx, out=outs)

    label = "HDF5Reader(path).batch(idx, out=preallocated)"
    _h5_batches(benchmark, h5_set, "packread", label, load)


# --- the spatiotemporal seed's layout ----------------------------------------------------------


@dataclass(frozen=True)
class SpatioFile:
    case: str
    path: str
    data: np.ndarray = field(repr=False)
    chunks: tuple[int, ...]
    compression: float


def wave_sequences(n: int) -> np.ndarray:
    """``n`` sequences of circular waves spreading from a random point (float32, zero ahead
    of the wave front and in the corners: constant regions as in the seed's simulations)."""
    rng = np.random.default_rng(SEED + 30)
    t_len, h, w = SPATIO_SHAPE
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    out = np.empty((n, *SPATIO_SHAPE), dtype=np.float32)
    for s in range(n):
        cy, cx = rng.uniform(40, 144, 2)
        k = rng.uniform(0.3, 0.6)
        r = np.hypot(yy - cy, xx - cx)
        for t in range(t_len):
            front = 10.0 + 6.0 * t
            amp = np.exp(-np.float32(0.02) * r) * (r < front)
            out[s, t] = (amp * np.sin(k * (r - front))).astype(np.float32)
    return out


@pytest.fixture(scope="session")
def spatio_data() -> np.ndarray:
    return wave_sequences(SPATIO_SAMPLES)


def _write_spatio(path: Path, case: str, data: np.ndarray, chunks: Any) -> SpatioFile:
    with h5py.File(path, "w") as f:
        d = f.create_dataset("data", data=data, chunks=chunks, compression="lzf")
        got_chunks = d.chunks
        stored = d.id.get_storage_size()
    _sync_and_warm(str(path))
    return SpatioFile(
        case=case,
        path=str(path),
        data=data,
        chunks=got_chunks,
        compression=round(data.nbytes / stored, 2),
    )


@pytest.fixture(scope="session")
def spatio_files(bench_dir: Path, spatio_data: np.ndarray) -> dict[str, SpatioFile]:
    one = (1, *SPATIO_SHAPE)
    return {
        "chunks=1 sample": _write_spatio(
            bench_dir / "st_manual.h5", "chunks=1 sample", spatio_data, one
        ),
        "chunks=auto": _write_spatio(bench_dir / "st_auto.h5", "chunks=auto", spatio_data, True),
    }


@pytest.fixture(params=["chunks=1 sample", "chunks=auto"])
def spatio(request: pytest.FixtureRequest, spatio_files: dict[str, SpatioFile]) -> SpatioFile:
    return spatio_files[request.param]


def _spatio(
    benchmark: Any, sf: SpatioFile, role: str, label: str, load: Callable[[np.ndarray], Any]
) -> None:
    batches = itertools.cycle(_batches(SPATIO_SAMPLES, SPATIO_BATCH, SEED + 31))

    def run() -> tuple[np.ndarray, np.ndarray]:
        idx = next(batches)
        return idx, load(idx)

    extra = {}
    if role == "baseline":
        extra["note"] = (
            f"LZF, chunks {sf.chunks}; samples {SPATIO_SHAPE} float32 (the seed's 100 frames "
            f"scaled down to {SPATIO_SHAPE[0]}), {SPATIO_SAMPLES} samples, {SPATIO_BATCH} a batch"
        )
    idx, got = measure(
        benchmark,
        group="hdf5-spatiotemporal",
        role=role,
        label=label,
        case=sf.case,
        samples=SPATIO_BATCH,
        nbytes=SPATIO_BATCH * sf.data[0].nbytes,
        fn=run,
        compression=sf.compression,
        **extra,
    )
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, sf.data[idx])


@SPATIO
def test_spatio_h5py_loop(benchmark: Any, spatio: SpatioFile) -> None:
    f = h5py.File(spatio.path, "r")
    d = f["data"]

    def load(idx: np.ndarray) -> np.ndarray:
        return np.stack([d[i] for i in idx])

    _spatio(benchmark, spatio, "baseline", "h5py loop: np.stack([d[i] for i in idx])", load)
    f.close()


@SPATIO
def test_spatio_packread(benchmark: Any, spatio: SpatioFile) -> None:
    reader = packread.HDF5Reader(spatio.path, "data")
    _spatio(benchmark, spatio, "packread", "HDF5Reader(path, 'data').batch(idx)", reader.batch)
