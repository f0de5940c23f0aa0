"""NPY benchmarks: packread beside the numpy (and seed-style torch Dataset) code it replaces.

One test per comparison: ``conftest.compare`` runs the baseline, the references, the physical
limit and packread interleaved round by round, each call on a fresh random batch, and checks
every variant's result (see conftest's docstring for the rules). Groups:

- ``npy-folder-img``: 2,048 files of 3x256x256 uint8 (403 MB); ``npy-folder-rows``: 1,024 files
  of 100,000 float32 (the seed's layout, 410 MB). A call reads 64 random samples. Baseline
  ``np.stack([np.load(p) for p in ...])``; reference: the seed users' Dataset
  (``torch.from_numpy(np.load(path))`` per item, ``torch.stack``); limit: numpy gather-copy of
  the same rows from RAM; packread ``NpyReader.batch(idx)`` and with ``out=``.
- ``npy-rows-img``: the same 2,048 samples as the rows of one ``X.npy`` (403 MB), the layout
  ``np.load(path, mmap_mode="r")[idx]`` reads (the baseline: the memmap opened once, as a
  training loop keeps it); anchor: two threads of ``os.preadv`` of each row; limit: numpy
  gather-copy from RAM; packread ``NpyReader(path).batch(idx)`` and with ``out=``. The 4 GiB
  warm (first touch and steady) and cold comparison is ``benches/bench_npy_rows.py``.
- ``npy-bytes`` / ``npy-file``: one array from ``bytes`` in memory or from a path (no batches:
  per-call cost), ``np.load`` against ``packread.load_npy``.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from conftest import (
    BATCH,
    SEED,
    Variant,
    compare_calls,
    compare_rows,
    gather_limits,
    two_thread_pool,
    warm_page_cache,
)
from torch.utils.data import Dataset

import packread

if TYPE_CHECKING:
    from conftest import NpyBlob, NpyFolder


class SeedNpyDataset(Dataset):
    """The seed users' Dataset: one ``np.load`` per sample in ``__getitem__``."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(np.load(self.paths[i]))


def test_folder(benchmark: Any, npy_folder: NpyFolder) -> None:
    paths = npy_folder.paths
    seed_ds = SeedNpyDataset(paths)
    reader = packread.NpyReader(paths)
    out = np.empty((BATCH, *reader.shape), dtype=reader.dtype)
    variants = [
        Variant(
            "baseline",
            "np.load loop + np.stack",
            lambda idx: np.stack([np.load(paths[i]) for i in idx]),
        ),
        Variant(
            "reference",
            "seed Dataset: np.load per item + torch.stack",
            lambda idx: torch.stack([seed_ds[int(i)] for i in idx]),
        ),
        *gather_limits(npy_folder.data),
        Variant("packread", "NpyReader.batch(idx)", reader.batch),
        Variant("packread", "NpyReader.batch(idx, out=buf)", lambda i: reader.batch(i, out=out)),
    ]
    compare_rows(
        benchmark,
        group=f"npy-folder-{npy_folder.name}",
        variants=variants,
        rows=npy_folder.data,
        n=len(paths),
        seed=SEED + 100,
        seed_dataset=True,
    )


def test_rows(benchmark: Any, npy_img: NpyFolder, tmp_path: Path) -> None:
    npy_folder = npy_img  # the image samples, as the rows of one array
    data = npy_folder.data
    path = tmp_path / "X.npy"
    np.save(path, data)
    warm_page_cache([path])
    mm = np.load(path, mmap_mode="r")
    reader = packread.NpyReader(str(path))
    out = np.empty((BATCH, *reader.shape), dtype=reader.dtype)
    fd = os.open(path, os.O_RDONLY)
    row_bytes, offset = int(data[0].nbytes), mm.offset
    anchor_out = np.empty((BATCH, row_bytes), np.uint8)
    pool = two_thread_pool()

    def one(j: int, i: int) -> None:
        assert os.preadv(fd, [anchor_out[j]], offset + int(i) * row_bytes) == row_bytes

    def anchor(idx: np.ndarray) -> np.ndarray:
        list(pool.map(one, range(len(idx)), idx))
        return anchor_out.view(data.dtype).reshape((BATCH, *data.shape[1:]))

    variants = [
        Variant("baseline", "np.load(path, mmap_mode='r')[idx]", lambda idx: mm[idx]),
        Variant("anchor", "2 threads of os.preadv of each row into a preallocated array", anchor),
        *gather_limits(data),
        Variant("packread", "NpyReader(path).batch(idx)", reader.batch),
        Variant(
            "packread", "NpyReader(path).batch(idx, out=buf)", lambda i: reader.batch(i, out=out)
        ),
    ]
    try:
        compare_rows(
            benchmark,
            group="npy-rows-img",
            variants=variants,
            rows=data,
            n=len(data),
            seed=SEED + 300,
        )
    finally:
        os.close(fd)


def test_bytes(benchmark: Any, npy_blob: NpyBlob) -> None:
    b = npy_blob.blob
    compare_calls(
        benchmark,
        group="npy-bytes",
        case=npy_blob.case,
        variants=[
            Variant("baseline", "np.load(io.BytesIO(b))", lambda _: np.load(io.BytesIO(b))),
            Variant("packread", "packread.load_npy(b)", lambda _: packread.load_npy(b)),
        ],
        expected=npy_blob.array,
    )


def test_file(benchmark: Any, npy_blob: NpyBlob) -> None:
    p = npy_blob.path
    compare_calls(
        benchmark,
        group="npy-file",
        case=npy_blob.case,
        variants=[
            Variant("baseline", "np.load(path)", lambda _: np.load(p)),
            Variant("packread", "packread.load_npy(path)", lambda _: packread.load_npy(p)),
        ],
        expected=npy_blob.array,
    )
