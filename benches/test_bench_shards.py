"""Shard benchmarks (issue 16): the same samples in 200 HDF5 files and in one.

2,048 samples of ``images`` 3x256x256 uint8 (smooth random walks, gzip level 4 + shuffle, one
sample per chunk: ~1.4x) and ``labels`` int64 (each sample's index), written once as one file
and once as 200 shards of 10 or 11 samples (``np.array_split``), as many writer processes
would. Groups:

- ``shards-batch``: one call reads a fresh batch of 64 random indices (crossing shards).
  Baseline: the seed-style Dataset over the shards (``h5py.File`` opened in ``__getitem__``,
  the file found by bisecting the cumulative lengths) and ``default_collate``, inside
  ``torch_threads(1)`` as in a DataLoader worker; packread on the one file; packread on the
  shards (``HDF5Reader("shard_*.h5")``).
- ``shards-epoch``: one call is one shuffled epoch of ``PackDataset(..., 64)`` in the main
  process (2 batches prefetched): the one file in ``sample`` mode, the shards in ``sample``
  mode and in ``shard`` mode (``shard_window=4``). Every epoch is checked: each label once.
- ``shards-cold``: the same epochs from a cold page cache: before each call the page cache
  is dropped (``echo 3 > /proc/sys/vm/drop_caches``, as root) or, where that is refused, a
  file larger than RAM is read; the report's note says which. Rounds alternate the variants.
"""

from __future__ import annotations

import bisect
import glob
import os
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from conftest import (
    SEED,
    Variant,
    compare,
    compare_rows,
    row_bytes,
    smooth_images,
    torch_threads,
    warm_page_cache,
)
from torch.utils.data import default_collate

import packread
from packread.torch import PackDataset

N_SAMPLES = 2048
N_SHARDS = 200
IMAGE_SHAPE = (3, 256, 256)
FILTERS = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
EPOCH_BATCH = 64


class SeedShardDataset(torch.utils.data.Dataset):
    """The seed users' Dataset over many files: the file holding sample ``i`` found by
    bisecting the cumulative lengths, opened in ``__getitem__``, one sample of each dataset
    read as tensors."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.starts = [0]
        for p in paths:
            with h5py.File(p, "r") as f:
                self.starts.append(self.starts[-1] + len(f["labels"]))

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        k = bisect.bisect_right(self.starts, i) - 1
        with h5py.File(self.paths[k], "r") as f:
            j = i - self.starts[k]
            return {n: torch.from_numpy(np.asarray(f[n][j])) for n in ("images", "labels")}


def _write(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images, chunks=(1, *IMAGE_SHAPE), **FILTERS)
        f.create_dataset("labels", data=labels, **FILTERS)


@pytest.fixture(scope="session")
def shard_set(bench_dir: Path) -> dict[str, Any]:
    rng = np.random.default_rng(SEED + 16)
    images = smooth_images(rng, N_SAMPLES, IMAGE_SHAPE, max_step=3)
    labels = np.arange(N_SAMPLES, dtype=np.int64)
    one = bench_dir / "one.h5"
    _write(one, images, labels)
    folder = bench_dir / "shards"
    folder.mkdir()
    bounds = np.cumsum([0] + [len(a) for a in np.array_split(labels, N_SHARDS)])
    for k in range(N_SHARDS):
        lo, hi = bounds[k], bounds[k + 1]
        _write(folder / f"shard_{k:03d}.h5", images[lo:hi], labels[lo:hi])
    paths = sorted(glob.glob(str(folder / "shard_*.h5")))
    warm_page_cache([one, *paths])
    return {
        "one": str(one),
        "pattern": str(folder / "shard_*.h5"),
        "paths": paths,
        "arrays": {"images": images, "labels": labels},
    }


def test_shards_batch(benchmark: Any, shard_set: dict[str, Any]) -> None:
    arrays = shard_set["arrays"]
    one = packread.HDF5Reader(shard_set["one"])
    shards = packread.HDF5Reader(shard_set["pattern"])
    assert len(shards.shards) == N_SHARDS
    assert len(shards) == N_SAMPLES
    seed_ds = SeedShardDataset(shard_set["paths"])

    def seed_load(idx: np.ndarray) -> dict[str, np.ndarray]:
        batch = default_collate([seed_ds[int(i)] for i in idx])
        return {k: v.numpy() for k, v in batch.items()}

    variants = [
        Variant(
            "baseline",
            "seed-style Dataset over the 200 shards (bisect, h5py.File per __getitem__)",
            seed_load,
        ),
        Variant("packread", "packread HDF5Reader, the one file", one.batch),
        Variant("packread", "packread HDF5Reader, the 200 shards", shards.batch),
    ]
    with torch_threads(1):
        compare_rows(
            benchmark,
            group="shards-batch",
            case=f"{N_SAMPLES} samples 3x256x256 uint8 gzip-4+shuffle, 200 shards; batch 64",
            variants=variants,
            rows=arrays,
            n=N_SAMPLES,
        )


def _epoch_variants(shard_set: dict[str, Any]) -> list[Variant]:
    def epoch(ds: PackDataset) -> Any:
        labels = [b["labels"].numpy() for b in ds]
        return np.concatenate(labels)

    one = PackDataset(shard_set["one"], EPOCH_BATCH, seed=SEED)
    sample = PackDataset(shard_set["pattern"], EPOCH_BATCH, seed=SEED)
    shard = PackDataset(shard_set["pattern"], EPOCH_BATCH, seed=SEED, shuffle_mode="shard")
    return [
        Variant("baseline", "PackDataset, the one file, sample mode", lambda _: epoch(one)),
        Variant("packread", "PackDataset, 200 shards, sample mode", lambda _: epoch(sample)),
        Variant(
            "packread",
            "PackDataset, 200 shards, shard mode (shard_window=4)",
            lambda _: epoch(shard),
        ),
    ]


def _every_label_once(_idx: Any, got: np.ndarray) -> None:
    assert sorted(got.tolist()) == list(range(N_SAMPLES))


def test_shards_epoch(benchmark: Any, shard_set: dict[str, Any]) -> None:
    import itertools

    compare(
        benchmark,
        group="shards-epoch",
        case=f"one shuffled epoch of {N_SAMPLES} samples, batch {EPOCH_BATCH}, warm page cache",
        variants=_epoch_variants(shard_set),
        batches=itertools.repeat(None),
        check=_every_label_once,
        samples=N_SAMPLES,
        nbytes=N_SAMPLES * row_bytes(shard_set["arrays"]),
        min_rounds=5,
        max_time=10.0,
    )


def _drop_page_cache() -> str:
    """Empties the page cache: ``drop_caches`` where permitted, else reads a file larger
    than RAM. Returns how."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "echo 3 > /proc/sys/vm/drop_caches"
    except OSError:
        pass
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    path = Path(os.environ.get("TMPDIR", "/tmp")) / "packread-evict.bin"
    if not path.exists() or path.stat().st_size < ram * 1.1:
        with open(path, "wb") as f:
            block = os.urandom(1 << 24)
            for _ in range(int(ram * 1.1) // len(block) + 1):
                f.write(block)
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass
    return f"read a {path.stat().st_size >> 30} GiB file (drop_caches refused)"


def test_shards_cold_epoch(benchmark: Any, shard_set: dict[str, Any]) -> None:
    variants = _epoch_variants(shard_set)
    rounds = 3
    times: list[list[float]] = [[] for _ in variants]
    how: list[str] = []

    def run() -> None:
        for r in range(rounds):
            for s in range(len(variants)):
                j = (s + r) % len(variants)
                how.append(_drop_page_cache())
                t0 = time.perf_counter()
                got = variants[j].load(None)
                times[j].append(time.perf_counter() - t0)
                _every_label_once(None, got)

    benchmark.group = "shards-cold"
    load_before = os.getloadavg()
    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(
        case=f"one epoch from a cold page cache ({how[0]} before each call)",
        samples_per_call=N_SAMPLES,
        bytes_per_call=N_SAMPLES * row_bytes(shard_set["arrays"]),
        iterations=1,
        loadavg=[round(x, 2) for x in (*load_before, *os.getloadavg())],
        variants=[
            {
                "role": v.role,
                "label": v.label,
                "note": "",
                "times": t,
                "minor_faults_per_call": 0.0,
            }
            for v, t in zip(variants, times, strict=True)
        ],
    )
