"""HDF5 benchmarks: packread's ``HDF5Reader`` beside the h5py code it replaces.

One test per comparison (``conftest.compare``: variants interleaved round by round, a fresh
random batch every call, every result checked; see conftest's docstring). Groups:

- ``hdf5-raw`` / ``hdf5-gzip-shuffle`` / ``hdf5-lzf``: one file of 2,048 samples, ``images``
  3x256x256 uint8 (one sample per chunk, 403 MB) and ``labels`` int64, stored uncompressed, with
  gzip level 4 + shuffle, or with LZF (the labels with the same filter, h5py's automatic chunks).
  A call reads a batch of 64 random indices, images and labels. Baseline: the h5py loop
  ``np.stack([d[i] for i in idx])`` per dataset; variant: ``read_direct`` per index into
  preallocated arrays; reference: the seed users' Dataset, ``h5py.File`` opened in
  ``__getitem__`` (as the seed advises for DataLoader workers) and ``default_collate``.
  ``hdf5-raw`` only: variant h5py fancy indexing ``d[np.sort(idx)]`` (very slow, so three
  timed rounds); anchor: two threads of plain ``os.preadv`` of the same chunk bytes (offsets
  from ``get_chunk_info_by_coord`` at setup) into preallocated arrays; limit: numpy
  gather-copy of the same rows from RAM. packread: ``HDF5Reader(path).batch(idx)``, and the
  same with ``out=``.
- ``hdf5-spatiotemporal``: the layout of the "spatiotemporal data in HDF5" seed, float32
  samples of (100, 184, 184) scaled down to (20, 184, 184) (2.7 MB a sample), 128 samples a
  file (347 MB), 10 random samples a batch, LZF (the seed's fastest codec). Two files, each its
  own ``case``: chunks of exactly one sample, and h5py's automatic chunks (``chunks=True``, the
  layout the seed found 78x slower). Each read by the h5py loop and by packread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from conftest import (
    BATCH,
    SEED,
    Variant,
    compare_rows,
    expect_rows,
    gather_limits,
    smooth_images,
    two_thread_pool,
    warm_page_cache,
)
from torch.utils.data import Dataset, default_collate

import packread

N_SAMPLES = 2048
IMAGE_SHAPE = (3, 256, 256)

#: The seed's (100, 184, 184) float32 samples, with 20 frames instead of 100 (2.7 MB, not
#: 13.5 MB a sample): 128 samples make a 347 MB file, two of them fit the page cache easily.
SPATIO_SHAPE = (20, 184, 184)
SPATIO_SAMPLES = 128
SPATIO_BATCH = 10

Loaded = dict[str, np.ndarray]


@dataclass(frozen=True)
class H5Set:
    """One HDF5 file of ``images`` and ``labels``, and the arrays written into it."""

    name: str
    path: str
    arrays: dict[str, np.ndarray] = field(repr=False)
    #: Bytes of the arrays over bytes stored for them.
    compression: float


_FILTERS: dict[str, dict[str, Any]] = {
    "raw": {},
    "gzip-shuffle": {"compression": "gzip", "compression_opts": 4, "shuffle": True},
    "lzf": {"compression": "lzf"},
}


@pytest.fixture(scope="session")
def h5_arrays() -> dict[str, np.ndarray]:
    """The 2,048 samples every ``hdf5-*`` file holds; gzip compresses the images ~1.4x."""
    rng = np.random.default_rng(SEED + 20)
    return {
        "images": smooth_images(rng, N_SAMPLES, IMAGE_SHAPE, max_step=3),
        "labels": rng.integers(0, 1000, N_SAMPLES, dtype=np.int64),
    }


def _write_h5(path: Path, name: str, arrays: dict[str, np.ndarray]) -> H5Set:
    filters = _FILTERS[name]
    with h5py.File(path, "w") as f:
        images = f.create_dataset(
            "images", data=arrays["images"], chunks=(1, *IMAGE_SHAPE), **filters
        )
        # Labels as users write them: the same filter, h5py's automatic chunks (a compressed
        # dataset must be chunked); uncompressed, contiguous.
        labels = f.create_dataset("labels", data=arrays["labels"], **filters)
        stored = images.id.get_storage_size() + labels.id.get_storage_size()
    warm_page_cache([path])
    ratio = sum(a.nbytes for a in arrays.values()) / stored
    return H5Set(name=name, path=str(path), arrays=arrays, compression=round(ratio, 2))


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


class SeedH5Dataset(Dataset):
    """The seed users' Dataset: ``h5py.File`` opened inside ``__getitem__``, one sample of each
    dataset read, as tensors (the seed's advice for DataLoader workers)."""

    def __init__(self, path: str, keys: list[str]) -> None:
        self.path = path
        self.keys = keys

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        with h5py.File(self.path, "r") as f:
            return {k: torch.from_numpy(np.asarray(f[k][i])) for k in self.keys}


def _outs(hs: H5Set) -> Loaded:
    return {k: np.empty((BATCH, *a.shape[1:]), a.dtype) for k, a in hs.arrays.items()}


def _pread_anchor(hs: H5Set, fd: int) -> Variant:
    """Two threads of plain ``os.preadv`` of each image chunk and label into preallocated
    arrays: the same bytes as packread reads, without HDF5 or decoding."""
    with h5py.File(hs.path, "r") as f:
        images, labels = f["images"], f["labels"]
        assert images.compression is None
        assert labels.chunks is None
        addr = [
            images.id.get_chunk_info_by_coord((i, 0, 0, 0)).byte_offset for i in range(N_SAMPLES)
        ]
        labels_at = labels.id.get_offset()
    image_bytes = hs.arrays["images"][0].nbytes
    outs = _outs(hs)
    img_rows = outs["images"].reshape(BATCH, -1)
    lab_rows = outs["labels"].reshape(BATCH, 1)
    pool = two_thread_pool()

    def one(j: int, i: int) -> None:
        got = os.preadv(fd, [img_rows[j]], addr[i])
        got += os.preadv(fd, [lab_rows[j]], labels_at + 8 * int(i))
        assert got == image_bytes + 8

    def load(idx: np.ndarray) -> Loaded:
        list(pool.map(one, range(len(idx)), idx))
        return outs

    label = "2 threads of os.preadv of each chunk (+ label) into preallocated arrays"
    return Variant("anchor", label, load)


def test_h5(benchmark: Any, h5_set: H5Set) -> None:
    raw = h5_set.name == "raw"
    reader = packread.HDF5Reader(h5_set.path)
    assert sorted(reader.keys()) == sorted(h5_set.arrays)
    packread_outs, direct_outs = _outs(h5_set), _outs(h5_set)
    fd = os.open(h5_set.path, os.O_RDONLY)
    f = h5py.File(h5_set.path, "r")
    ds = {k: f[k] for k in h5_set.arrays}

    def read_direct(idx: np.ndarray) -> Loaded:
        for k, d in ds.items():
            out = direct_outs[k]
            for j, i in enumerate(idx):
                d.read_direct(out, np.s_[i], np.s_[j])
        return direct_outs

    seed_ds = SeedH5Dataset(h5_set.path, list(h5_set.arrays))
    variants = [
        Variant(
            "baseline",
            "h5py loop: np.stack([d[i] for i in idx]) per dataset",
            lambda idx: {k: np.stack([d[i] for i in idx]) for k, d in ds.items()},
        ),
        Variant(
            "reference",
            "seed Dataset: h5py.File opened per item + default_collate",
            lambda idx: default_collate([seed_ds[int(i)] for i in idx]),
        ),
        Variant(
            "variant", "h5py read_direct(out, s_[i], s_[j]) per index, preallocated", read_direct
        ),
    ]
    if raw:
        variants += [
            Variant(
                "variant",
                "h5py fancy indexing d[np.sort(idx)] per dataset",
                lambda idx: {k: d[np.sort(idx)] for k, d in ds.items()},
                max_rounds=3,
                note="returns the samples in sorted order (checked as such); 3 timed rounds",
                check=expect_rows(h5_set.arrays, sort=True),
            ),
            _pread_anchor(h5_set, fd),
            *gather_limits(h5_set.arrays),
        ]
    variants += [
        Variant("packread", "HDF5Reader(path).batch(idx)", reader.batch),
        Variant(
            "packread",
            "HDF5Reader(path).batch(idx, out=preallocated)",
            lambda idx: reader.batch(idx, out=packread_outs),
        ),
    ]
    try:
        compare_rows(
            benchmark,
            group=f"hdf5-{h5_set.name}",
            variants=variants,
            rows=h5_set.arrays,
            n=N_SAMPLES,
            seed=SEED + 300,
            seed_dataset=True,
            compression=h5_set.compression,
            # Fancy indexing's three rounds take ~5 s of the time budget.
            max_time=14.0 if raw else 8.0,
        )
    finally:
        f.close()
        os.close(fd)


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
    front = (10.0 + 6.0 * np.arange(t_len, dtype=np.float32))[:, None, None]
    out = np.empty((n, *SPATIO_SHAPE), dtype=np.float32)
    for s in range(n):
        cy, cx = rng.uniform(40, 144, 2)
        k = rng.uniform(0.3, 0.6)
        r = np.hypot(yy - cy, xx - cx)
        amp = np.exp(-np.float32(0.02) * r) * (r < front)
        out[s] = amp * np.sin(k * (r - front))
    return out


@pytest.fixture(scope="session")
def spatio_data() -> np.ndarray:
    return wave_sequences(SPATIO_SAMPLES)


def _write_spatio(path: Path, case: str, data: np.ndarray, chunks: Any) -> SpatioFile:
    with h5py.File(path, "w") as f:
        d = f.create_dataset("data", data=data, chunks=chunks, compression="lzf")
        got_chunks = d.chunks
        stored = d.id.get_storage_size()
    warm_page_cache([path])
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


def test_spatio(benchmark: Any, spatio: SpatioFile) -> None:
    reader = packread.HDF5Reader(spatio.path, "data")
    with h5py.File(spatio.path, "r") as f:
        d = f["data"]
        compare_rows(
            benchmark,
            group="hdf5-spatiotemporal",
            case=spatio.case,
            variants=[
                Variant(
                    "baseline",
                    "h5py loop: np.stack([d[i] for i in idx])",
                    lambda idx: np.stack([d[i] for i in idx]),
                ),
                Variant("packread", "HDF5Reader(path, 'data').batch(idx)", reader.batch),
            ],
            rows=spatio.data,
            n=SPATIO_SAMPLES,
            seed=SEED + 310,
            k=SPATIO_BATCH,
            min_rounds=5,
            warmup_rounds=1,
            compression=spatio.compression,
            note=(
                f"LZF, chunks {spatio.chunks}; samples {SPATIO_SHAPE} float32 (the seed's 100 "
                f"frames scaled down to {SPATIO_SHAPE[0]}), {SPATIO_SAMPLES} samples, "
                f"{SPATIO_BATCH} a batch"
            ),
        )
