"""ZIP and NPZ benchmarks: packread beside the zipfile / numpy / SPDL code it replaces.

Groups (512 samples of 3x256x256 uint8 each, batches of 64 random indices, warm page cache):

- ``zip-raw-stored`` / ``zip-raw-deflated``: one ZIP of raw (``tobytes``) members, stored or
  ZIP_DEFLATED. Baseline: the seed's ``MultiWorkerZIPDataset`` read path with its one kept-open
  ``ZipFile`` handle, ``zf.open(name).read()`` + ``np.frombuffer(...).reshape`` per sample and
  ``np.stack``; variant: the same with ``zf.read(name)``; reference: that Dataset class itself
  (``torch.tensor`` copy per item, ``torch.stack`` as the DataLoader's collate does).
- ``zip-npy-members``: one ZIP of ``.npy`` members; baseline
  ``np.load(io.BytesIO(zf.read(name)))`` per sample + ``np.stack``.
- ``npz-files`` / ``npz-files-compressed``: 512 NPZ files (``np.savez`` /
  ``np.savez_compressed``) of ``image`` 3x256x256 uint8 and ``mask`` 256x256 bool. Baseline:
  ``np.load(path)`` per file, both keys read, ``np.stack`` per key; reference: SPDL's
  ``spdl.io.load_npz`` of the file's bytes (read from the page cache on every call, as SPDL's
  own benchmark does) + ``np.stack``.
- ``npz-bytes``: one NPZ already in memory: ``packread.load_npz(b)`` against
  ``dict(np.load(io.BytesIO(b)))`` and ``dict(spdl.io.load_npz(b))`` (``dict`` reads every
  array, so the lazy loaders do their work too).

Roles as in ``test_bench_npy.py``: one ``baseline`` per group, ``variant`` (another spelling of
the baseline), ``reference`` and ``packread``; ``benches/report.py`` pairs them. Every benchmark
checks the result of its last timed call against the arrays that were written (which is also
what the baseline returns), so a broken path cannot be timed silently.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import spdl.io
import torch
from conftest import IMAGE_SHAPE, measure
from torch.utils.data import Dataset, get_worker_info

import packread

if TYPE_CHECKING:
    from conftest import NpzBlob, NpzFolder, ZipSet

#: Batch benchmarks: a few untimed rounds first, and enough rounds for a stable median.
BATCHED = pytest.mark.benchmark(min_rounds=20, warmup=True, warmup_iterations=3)


def _zip_batches(
    benchmark: Any, group: str, zs: ZipSet, role: str, label: str, load: Callable, **extra: Any
) -> None:
    batches = zs.batch_cycle()
    n = len(zs.batches[0])

    def run() -> tuple[np.ndarray, Any]:
        idx = next(batches)
        return idx, load(idx)

    idx, got = measure(
        benchmark,
        group=group,
        role=role,
        label=label,
        samples=n,
        nbytes=n * zs.sample_bytes,
        fn=run,
        compression=zs.compression,
        **extra,
    )
    if isinstance(got, torch.Tensor):
        got = got.numpy()
    assert got.dtype == zs.data.dtype
    np.testing.assert_array_equal(got, zs.data[idx])


# --- one ZIP of raw members --------------------------------------------------------------------


def _raw_group(zs: ZipSet) -> str:
    return f"zip-raw-{zs.name}"


@BATCHED
def test_raw_zipfile_open_read(benchmark: Any, zip_raw: ZipSet) -> None:
    zf = zipfile.ZipFile(zip_raw.path)
    names = zip_raw.names

    def load(idx: np.ndarray) -> np.ndarray:
        return np.stack(
            [
                np.frombuffer(zf.open(names[i]).read(), dtype=np.uint8).reshape(IMAGE_SHAPE)
                for i in idx
            ]
        )

    label = "zf.open(name).read() + np.frombuffer.reshape loop + np.stack"
    _zip_batches(benchmark, _raw_group(zip_raw), zip_raw, "baseline", label, load)
    zf.close()


@BATCHED
def test_raw_zipfile_read(benchmark: Any, zip_raw: ZipSet) -> None:
    zf = zipfile.ZipFile(zip_raw.path)
    names = zip_raw.names

    def load(idx: np.ndarray) -> np.ndarray:
        return np.stack(
            [np.frombuffer(zf.read(names[i]), dtype=np.uint8).reshape(IMAGE_SHAPE) for i in idx]
        )

    label = "zf.read(name) + np.frombuffer.reshape loop + np.stack"
    _zip_batches(benchmark, _raw_group(zip_raw), zip_raw, "variant", label, load)
    zf.close()


class SeedZipDataset(Dataset):
    """The seed's ``MultiWorkerZIPDataset``, reduced to its image read (no labels, no transform).

    One ``ZipFile`` handle per DataLoader worker, opened on first use and kept open;
    ``__getitem__`` opens the member, reads it, views it with ``np.frombuffer(...).reshape`` and
    makes a writeable copy with ``torch.tensor``.
    """

    def __init__(self, path: str, names: list[str], shape: tuple[int, ...]) -> None:
        self.path = path
        self.img_names = names
        self.shape = shape
        worker = get_worker_info()
        worker = worker.id if worker else None
        self.zip_handle = {worker: zipfile.ZipFile(path)}

    def _get_file_handle(self, fname: str) -> Any:
        worker = get_worker_info()
        worker = worker.id if worker else None
        if worker not in self.zip_handle:
            self.zip_handle[worker] = zipfile.ZipFile(self.path)
        return self.zip_handle[worker].open(fname, "r")

    def __getitem__(self, index: int) -> torch.Tensor:
        img_f = self._get_file_handle(self.img_names[index])
        buffer = np.frombuffer(img_f.read(), dtype=np.uint8).reshape(self.shape)
        return torch.tensor(buffer)

    def __len__(self) -> int:
        return len(self.img_names)

    def close(self) -> None:
        for handle in self.zip_handle.values():
            handle.close()


@BATCHED
def test_raw_seed_dataset(benchmark: Any, zip_raw: ZipSet) -> None:
    ds = SeedZipDataset(zip_raw.path, zip_raw.names, IMAGE_SHAPE)

    def load(idx: np.ndarray) -> torch.Tensor:
        return torch.stack([ds[int(i)] for i in idx])

    label = "seed MultiWorkerZIPDataset: per item + torch.stack"
    _zip_batches(benchmark, _raw_group(zip_raw), zip_raw, "reference", label, load)
    ds.close()


@BATCHED
def test_raw_packread_names(benchmark: Any, zip_raw: ZipSet) -> None:
    reader = packread.ZipReader(zip_raw.path)
    names = zip_raw.names

    def load(idx: np.ndarray) -> np.ndarray:
        return reader.batch([names[i] for i in idx], dtype=np.uint8, shape=IMAGE_SHAPE)

    label = "ZipReader.batch(names, dtype, shape)"
    _zip_batches(benchmark, _raw_group(zip_raw), zip_raw, "packread", label, load)


@BATCHED
def test_raw_packread_names_out(benchmark: Any, zip_raw: ZipSet) -> None:
    reader = packread.ZipReader(zip_raw.path)
    names = zip_raw.names
    out = np.empty((len(zip_raw.batches[0]), *IMAGE_SHAPE), dtype=np.uint8)

    def load(idx: np.ndarray) -> np.ndarray:
        return reader.batch([names[i] for i in idx], dtype=np.uint8, shape=IMAGE_SHAPE, out=out)

    label = "ZipReader.batch(names, dtype, shape, out=buf)"
    _zip_batches(benchmark, _raw_group(zip_raw), zip_raw, "packread", label, load)


@BATCHED
def test_raw_packread_positions(benchmark: Any, zip_raw: ZipSet) -> None:
    reader = packread.ZipReader(zip_raw.path)

    def load(idx: np.ndarray) -> np.ndarray:
        return reader.batch(idx, dtype=np.uint8, shape=IMAGE_SHAPE)

    label = "ZipReader.batch(positions, dtype, shape)"
    _zip_batches(benchmark, _raw_group(zip_raw), zip_raw, "packread", label, load)


@BATCHED
def test_raw_packread_positions_no_crc(benchmark: Any, zip_raw: ZipSet) -> None:
    # Not a replacement for the baseline (zipfile checks every CRC-32): what the check costs.
    reader = packread.ZipReader(zip_raw.path, verify_crc=False)

    def load(idx: np.ndarray) -> np.ndarray:
        return reader.batch(idx, dtype=np.uint8, shape=IMAGE_SHAPE)

    label = "ZipReader(verify_crc=False).batch(positions, dtype, shape)"
    _zip_batches(
        benchmark,
        _raw_group(zip_raw),
        zip_raw,
        "packread",
        label,
        load,
        note="CRC-32 not checked (the baseline checks it)",
    )


# --- one ZIP of .npy members -------------------------------------------------------------------


@BATCHED
def test_npy_members_np_load(benchmark: Any, zip_npy: ZipSet) -> None:
    zf = zipfile.ZipFile(zip_npy.path)
    names = zip_npy.names

    def load(idx: np.ndarray) -> np.ndarray:
        return np.stack([np.load(io.BytesIO(zf.read(names[i]))) for i in idx])

    label = "np.load(io.BytesIO(zf.read(name))) loop + np.stack"
    _zip_batches(benchmark, "zip-npy-members", zip_npy, "baseline", label, load)
    zf.close()


@BATCHED
def test_npy_members_packread(benchmark: Any, zip_npy: ZipSet) -> None:
    reader = packread.ZipReader(zip_npy.path)
    names = zip_npy.names

    def load(idx: np.ndarray) -> np.ndarray:
        return reader.batch([names[i] for i in idx])

    label = "ZipReader.batch(names)"
    _zip_batches(benchmark, "zip-npy-members", zip_npy, "packread", label, load)


@BATCHED
def test_npy_members_packread_out(benchmark: Any, zip_npy: ZipSet) -> None:
    reader = packread.ZipReader(zip_npy.path)
    names = zip_npy.names
    out = np.empty((len(zip_npy.batches[0]), *IMAGE_SHAPE), dtype=np.uint8)

    def load(idx: np.ndarray) -> np.ndarray:
        return reader.batch([names[i] for i in idx], out=out)

    label = "ZipReader.batch(names, out=buf)"
    _zip_batches(benchmark, "zip-npy-members", zip_npy, "packread", label, load)


# --- many NPZ files, one sample each -----------------------------------------------------------


def _npz_group(folder: NpzFolder) -> str:
    return "npz-files" if folder.name == "stored" else f"npz-files-{folder.name}"


def _npz_batches(
    benchmark: Any, folder: NpzFolder, role: str, label: str, load: Callable, **extra: Any
) -> None:
    batches = folder.batch_cycle()
    n = len(folder.batches[0])

    def run() -> tuple[np.ndarray, Any]:
        idx = next(batches)
        return idx, load(idx)

    idx, got = measure(
        benchmark,
        group=_npz_group(folder),
        role=role,
        label=label,
        samples=n,
        nbytes=n * folder.sample_bytes,
        fn=run,
        compression=folder.compression,
        **extra,
    )
    assert sorted(got) == sorted(folder.arrays)
    for key, expected in folder.arrays.items():
        assert got[key].dtype == expected.dtype, key
        np.testing.assert_array_equal(got[key], expected[idx], err_msg=key)


@BATCHED
def test_npz_np_load(benchmark: Any, npz_folder: NpzFolder) -> None:
    paths = npz_folder.paths

    def load(idx: np.ndarray) -> dict[str, np.ndarray]:
        images, masks = [], []
        for i in idx:
            with np.load(paths[i]) as z:
                images.append(z["image"])
                masks.append(z["mask"])
        return {"image": np.stack(images), "mask": np.stack(masks)}

    label = "np.load(path)[key] loop (both keys, one open per file) + np.stack"
    _npz_batches(benchmark, npz_folder, "baseline", label, load)


@BATCHED
def test_npz_spdl(benchmark: Any, npz_folder: NpzFolder) -> None:
    paths = npz_folder.paths

    def load(idx: np.ndarray) -> dict[str, np.ndarray]:
        images, masks = [], []
        for i in idx:
            with open(paths[i], "rb") as f:
                z = spdl.io.load_npz(f.read())
            images.append(z["image"])
            masks.append(z["mask"])
        return {"image": np.stack(images), "mask": np.stack(masks)}

    label = "spdl.io.load_npz(open(path).read())[key] loop + np.stack"
    _npz_batches(benchmark, npz_folder, "reference", label, load)


@BATCHED
def test_npz_packread(benchmark: Any, npz_folder: NpzFolder) -> None:
    reader = packread.NpzReader(npz_folder.paths)
    _npz_batches(benchmark, npz_folder, "packread", "NpzReader.batch(idx)", reader.batch)


@BATCHED
def test_npz_packread_out(benchmark: Any, npz_folder: NpzFolder) -> None:
    reader = packread.NpzReader(npz_folder.paths)
    n = len(npz_folder.batches[0])
    keys = reader.keys()
    out = {k: np.empty((n, *reader.shape(k)), dtype=reader.dtype(k)) for k in keys}

    def load(idx: np.ndarray) -> dict[str, np.ndarray]:
        return reader.batch(idx, out=out)

    _npz_batches(benchmark, npz_folder, "packread", "NpzReader.batch(idx, out=bufs)", load)


# --- one NPZ from bytes in memory --------------------------------------------------------------


def _npz_bytes(
    benchmark: Any, blob: NpzBlob, role: str, label: str, fn: Callable[[], Any], **extra: Any
) -> None:
    got = measure(
        benchmark,
        group="npz-bytes",
        role=role,
        label=label,
        case=blob.case,
        samples=1,
        nbytes=sum(a.nbytes for a in blob.arrays.values()),
        fn=fn,
        **extra,
    )
    assert sorted(got) == sorted(blob.arrays)
    for key, expected in blob.arrays.items():
        assert got[key].dtype == expected.dtype, key
        np.testing.assert_array_equal(got[key], expected, err_msg=key)


def test_npz_bytes_np_load(benchmark: Any, npz_blob: NpzBlob) -> None:
    b = npz_blob.blob
    label = "dict(np.load(io.BytesIO(b)))"
    _npz_bytes(benchmark, npz_blob, "baseline", label, lambda: dict(np.load(io.BytesIO(b))))


def test_npz_bytes_spdl(benchmark: Any, npz_blob: NpzBlob) -> None:
    b = npz_blob.blob
    label = "dict(spdl.io.load_npz(b))"
    _npz_bytes(benchmark, npz_blob, "reference", label, lambda: dict(spdl.io.load_npz(b)))


def test_npz_bytes_packread(benchmark: Any, npz_blob: NpzBlob) -> None:
    b = npz_blob.blob
    label = "packread.load_npz(b)"
    _npz_bytes(benchmark, npz_blob, "packread", label, lambda: packread.load_npz(b))
