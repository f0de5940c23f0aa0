"""NPY benchmarks: packread beside the numpy (and seed-style torch Dataset) code it replaces.

One test per comparison: ``conftest.compare`` runs the baseline, the references, the physical
limit and packread interleaved round by round, each call on a fresh random batch, and checks
every variant's result (see conftest's docstring for the rules). Groups:

- ``npy-folder-img``: 2,048 files of 3x256x256 uint8 (403 MB); ``npy-folder-rows``: 1,024 files
  of 100,000 float32 (the seed's layout, 410 MB). A call reads 64 random samples. Baseline
  ``np.stack([np.load(p) for p in ...])``; reference: the seed users' Dataset
  (``torch.from_numpy(np.load(path))`` per item, ``torch.stack``); limit: numpy gather-copy of
  the same rows from RAM; packread ``NpyReader.batch(idx)`` and with ``out=``.
- ``npy-bytes`` / ``npy-file``: one array from ``bytes`` in memory or from a path (no batches:
  per-call cost), ``np.load`` against ``packread.load_npy``.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from conftest import BATCH, SEED, Variant, compare_calls, compare_rows, gather_limits
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
