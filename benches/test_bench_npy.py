"""NPY benchmarks: packread beside the numpy (and seed-style torch Dataset) code it replaces.

Every group holds one ``role='baseline'`` entry, optionally a ``role='reference'`` entry (the
seed users' own Dataset loop) and the ``role='packread'`` entries; ``benches/report.py`` pairs
them by ``group`` and ``extra_info['case']``. Every benchmark checks the result of its last
timed call against the arrays that were written, so a broken path cannot be timed silently.
With ``--benchmark-disable`` each one runs once, as a quick correctness pass.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import torch
from conftest import measure
from torch.utils.data import Dataset

import packread

if TYPE_CHECKING:
    from conftest import NpyBlob, NpyFolder

#: Folder benchmarks: a few untimed rounds first, and enough rounds for a stable median.
FOLDER = pytest.mark.benchmark(min_rounds=20, warmup=True, warmup_iterations=3)


def _folder(benchmark: Any, folder: NpyFolder, role: str, label: str, load: Callable) -> None:
    batches = folder.batch_cycle()
    n = len(folder.batches[0])

    def run() -> tuple[np.ndarray, Any]:
        idx = next(batches)
        return idx, load(idx)

    idx, got = measure(
        benchmark,
        group=f"npy-folder-{folder.name}",
        role=role,
        label=label,
        samples=n,
        nbytes=n * folder.sample_bytes,
        fn=run,
    )
    if isinstance(got, torch.Tensor):
        got = got.numpy()
    assert got.dtype == folder.data.dtype
    np.testing.assert_array_equal(got, folder.data[idx])


# --- folders of .npy files, one sample per file, batches of 64 random indices --------------


@FOLDER
def test_folder_np_load_stack(benchmark: Any, npy_folder: NpyFolder) -> None:
    paths = npy_folder.paths

    def load(idx: np.ndarray) -> np.ndarray:
        return np.stack([np.load(paths[i]) for i in idx])

    _folder(benchmark, npy_folder, "baseline", "np.load loop + np.stack", load)


class SeedNpyDataset(Dataset):
    """The seed users' Dataset: one ``np.load`` per sample in ``__getitem__``."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(np.load(self.paths[i]))


@FOLDER
def test_folder_seed_dataset(benchmark: Any, npy_folder: NpyFolder) -> None:
    ds = SeedNpyDataset(npy_folder.paths)

    def load(idx: np.ndarray) -> torch.Tensor:
        return torch.stack([ds[int(i)] for i in idx])

    _folder(
        benchmark, npy_folder, "reference", "seed Dataset: np.load per item + torch.stack", load
    )


@FOLDER
def test_folder_packread_batch(benchmark: Any, npy_folder: NpyFolder) -> None:
    reader = packread.NpyReader(npy_folder.paths)
    _folder(benchmark, npy_folder, "packread", "NpyReader.batch(idx)", reader.batch)


@FOLDER
def test_folder_packread_batch_out(benchmark: Any, npy_folder: NpyFolder) -> None:
    reader = packread.NpyReader(npy_folder.paths)
    out = np.empty((len(npy_folder.batches[0]), *reader.shape), dtype=reader.dtype)

    def load(idx: np.ndarray) -> np.ndarray:
        return reader.batch(idx, out=out)

    _folder(benchmark, npy_folder, "packread", "NpyReader.batch(idx, out=buf)", load)


# --- one array from bytes in memory ---------------------------------------------------------


def _single(
    benchmark: Any, group: str, blob: NpyBlob, role: str, label: str, fn: Callable[[], Any]
) -> None:
    got = measure(
        benchmark,
        group=group,
        role=role,
        label=label,
        case=blob.case,
        samples=1,
        nbytes=blob.array.nbytes,
        fn=fn,
    )
    assert got.dtype == blob.array.dtype
    np.testing.assert_array_equal(got, blob.array)


def test_bytes_np_load(benchmark: Any, npy_blob: NpyBlob) -> None:
    b = npy_blob.blob
    _single(
        benchmark,
        "npy-bytes",
        npy_blob,
        "baseline",
        "np.load(io.BytesIO(b))",
        lambda: np.load(io.BytesIO(b)),
    )


def test_bytes_packread(benchmark: Any, npy_blob: NpyBlob) -> None:
    b = npy_blob.blob
    _single(
        benchmark,
        "npy-bytes",
        npy_blob,
        "packread",
        "packread.load_npy(b)",
        lambda: packread.load_npy(b),
    )


# --- one array from a file (not in the brief's list, but the same API from a path) ----------


def test_file_np_load(benchmark: Any, npy_blob: NpyBlob) -> None:
    p = npy_blob.path
    _single(benchmark, "npy-file", npy_blob, "baseline", "np.load(path)", lambda: np.load(p))


def test_file_packread(benchmark: Any, npy_blob: NpyBlob) -> None:
    p = npy_blob.path
    _single(
        benchmark,
        "npy-file",
        npy_blob,
        "packread",
        "packread.load_npy(path)",
        lambda: packread.load_npy(p),
    )
