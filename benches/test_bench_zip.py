"""ZIP and NPZ benchmarks: packread beside the zipfile / numpy / SPDL code it replaces.

One test per comparison (``conftest.compare``: variants interleaved round by round, a fresh
random batch of 64 every call, every result checked; see conftest's docstring). Samples are
3x256x256 uint8 (196 KB) "smooth" images (rows of random walks, so DEFLATE has work to do):

- ``zip-raw-stored`` / ``zip-raw-deflated``: one ZIP of 2,048 raw (``tobytes``) members (403
  MB), stored or ZIP_DEFLATED. Baseline: the seed's ``MultiWorkerZIPDataset`` read path with its
  one kept-open ``ZipFile``, ``zf.open(name).read()`` + ``np.frombuffer(...).reshape`` per sample
  and ``np.stack``; variant: the same with ``zf.read(name)``; reference: that Dataset class itself
  (``torch.tensor`` copy per item, ``torch.stack`` as the DataLoader's collate does); limit
  (stored only): numpy gather-copy of the same rows from RAM. packread by name, with ``out=``,
  by position, and (for information: zipfile checks every CRC-32) with ``verify_crc=False``.
- ``zip-npy-members``: one ZIP of 2,048 ``.npy`` members, stored; baseline
  ``np.load(io.BytesIO(zf.read(name)))`` per sample + ``np.stack``; limit as above.
- ``npz-files`` / ``npz-files-compressed``: 1,536 NPZ files (``np.savez`` /
  ``np.savez_compressed``) of ``image`` 3x256x256 uint8 and ``mask`` 256x256 bool (403 MB).
  Baseline: ``np.load(path)`` per file, both keys read, ``np.stack`` per key; reference: SPDL's
  ``spdl.io.load_npz`` of the file's bytes (read from the page cache on every call, as SPDL's
  own benchmark does) + ``np.stack``; limit (stored only) as above.
- ``npz-bytes``: one NPZ already in memory: ``packread.load_npz(b)`` against
  ``dict(np.load(io.BytesIO(b)))`` and ``dict(spdl.io.load_npz(b))`` (``dict`` reads every
  array, so the lazy loaders do their work too).
"""

from __future__ import annotations

import io
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np
import spdl.io
import torch
from conftest import BATCH, IMAGE_SHAPE, SEED, Variant, compare_calls, compare_rows, gather_limits
from torch.utils.data import Dataset, get_worker_info

import packread

if TYPE_CHECKING:
    from conftest import NpzBlob, NpzFolder, ZipSet


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


def _zip_compare(
    benchmark: Any, group: str, zs: ZipSet, variants: list[Variant], **extra: Any
) -> None:
    compare_rows(
        benchmark,
        group=group,
        variants=variants,
        rows=zs.data,
        n=len(zs.names),
        seed=SEED + 200,
        compression=zs.compression,
        **extra,
    )


# --- one ZIP of raw members --------------------------------------------------------------------


def test_raw(benchmark: Any, zip_raw: ZipSet) -> None:
    names = zip_raw.names
    raw = {"dtype": np.uint8, "shape": IMAGE_SHAPE}  # the members' layout, given once
    reader = packread.ZipReader(zip_raw.path, **raw)
    reader_no_crc = packread.ZipReader(zip_raw.path, verify_crc=False, **raw)
    out = np.empty((BATCH, *IMAGE_SHAPE), dtype=np.uint8)
    seed_ds = SeedZipDataset(zip_raw.path, names, IMAGE_SHAPE)

    def frombuffer(b: bytes) -> np.ndarray:
        return np.frombuffer(b, dtype=np.uint8).reshape(IMAGE_SHAPE)

    def by_name(idx: np.ndarray, **kw: Any) -> np.ndarray:
        return reader.batch([names[i] for i in idx], **kw)

    with zipfile.ZipFile(zip_raw.path) as zf:
        variants = [
            Variant(
                "baseline",
                "zf.open(name).read() + np.frombuffer.reshape loop + np.stack",
                lambda idx: np.stack([frombuffer(zf.open(names[i]).read()) for i in idx]),
            ),
            Variant(
                "variant",
                "zf.read(name) + np.frombuffer.reshape loop + np.stack",
                lambda idx: np.stack([frombuffer(zf.read(names[i])) for i in idx]),
            ),
            Variant(
                "reference",
                "seed MultiWorkerZIPDataset: per item + torch.stack",
                lambda idx: torch.stack([seed_ds[int(i)] for i in idx]),
            ),
            *(gather_limits(zip_raw.data) if zip_raw.name == "stored" else []),
            Variant("packread", "ZipReader(dtype, shape).batch(names)", by_name),
            Variant(
                "packread",
                "ZipReader(dtype, shape).batch(names, out=buf)",
                lambda idx: by_name(idx, out=out),
            ),
            Variant(
                "packread",
                "ZipReader(dtype, shape).batch(positions)",
                reader.batch,
            ),
            Variant(
                "packread",
                "ZipReader(dtype, shape, verify_crc=False).batch(positions)",
                reader_no_crc.batch,
                note="CRC-32 not checked (the baseline checks it)",
            ),
        ]
        _zip_compare(benchmark, f"zip-raw-{zip_raw.name}", zip_raw, variants, seed_dataset=True)
    seed_ds.close()


# --- one ZIP of .npy members -------------------------------------------------------------------


def test_npy_members(benchmark: Any, zip_npy: ZipSet) -> None:
    names = zip_npy.names
    reader = packread.ZipReader(zip_npy.path)
    out = np.empty((BATCH, *IMAGE_SHAPE), dtype=np.uint8)
    with zipfile.ZipFile(zip_npy.path) as zf:
        variants = [
            Variant(
                "baseline",
                "np.load(io.BytesIO(zf.read(name))) loop + np.stack",
                lambda idx: np.stack([np.load(io.BytesIO(zf.read(names[i]))) for i in idx]),
            ),
            *gather_limits(zip_npy.data),
            Variant(
                "packread",
                "ZipReader.batch(names)",
                lambda idx: reader.batch([names[i] for i in idx]),
            ),
            Variant(
                "packread",
                "ZipReader.batch(names, out=buf)",
                lambda idx: reader.batch([names[i] for i in idx], out=out),
            ),
        ]
        _zip_compare(benchmark, "zip-npy-members", zip_npy, variants)


# --- many NPZ files, one sample each -----------------------------------------------------------


def test_npz_files(benchmark: Any, npz_folder: NpzFolder) -> None:
    paths = npz_folder.paths
    reader = packread.NpzReader(paths)
    keys = reader.keys()
    outs = {k: np.empty((BATCH, *reader.shape[k]), dtype=reader.dtype[k]) for k in keys}

    def np_load(idx: np.ndarray) -> dict[str, np.ndarray]:
        images, masks = [], []
        for i in idx:
            with np.load(paths[i]) as z:
                images.append(z["image"])
                masks.append(z["mask"])
        return {"image": np.stack(images), "mask": np.stack(masks)}

    def spdl_load(idx: np.ndarray) -> dict[str, np.ndarray]:
        images, masks = [], []
        for i in idx:
            with open(paths[i], "rb") as f:
                z = spdl.io.load_npz(f.read())
            images.append(z["image"])
            masks.append(z["mask"])
        return {"image": np.stack(images), "mask": np.stack(masks)}

    stored = npz_folder.name == "stored"
    compare_rows(
        benchmark,
        group="npz-files" if stored else f"npz-files-{npz_folder.name}",
        variants=[
            Variant(
                "baseline",
                "np.load(path)[key] loop (both keys, one open per file) + np.stack",
                np_load,
            ),
            Variant(
                "reference", "spdl.io.load_npz(open(path).read())[key] loop + np.stack", spdl_load
            ),
            *(gather_limits(npz_folder.arrays) if stored else []),
            Variant("packread", "NpzReader.batch(idx)", reader.batch),
            Variant(
                "packread",
                "NpzReader.batch(idx, out=bufs)",
                lambda idx: reader.batch(idx, out=outs),
            ),
        ],
        rows=npz_folder.arrays,
        n=len(paths),
        seed=SEED + 210,
        compression=npz_folder.compression,
    )


# --- one NPZ from bytes in memory --------------------------------------------------------------


def test_npz_bytes(benchmark: Any, npz_blob: NpzBlob) -> None:
    b = npz_blob.blob
    compare_calls(
        benchmark,
        group="npz-bytes",
        case=npz_blob.case,
        variants=[
            Variant(
                "baseline", "dict(np.load(io.BytesIO(b)))", lambda _: dict(np.load(io.BytesIO(b)))
            ),
            Variant("reference", "dict(spdl.io.load_npz(b))", lambda _: dict(spdl.io.load_npz(b))),
            Variant("packread", "packread.load_npz(b)", lambda _: packread.load_npz(b)),
        ],
        expected=npz_blob.arrays,
    )
