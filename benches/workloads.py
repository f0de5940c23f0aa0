"""The main job: one dataset per format as the seed users store theirs, the seeds' own Dataset
classes that read them, and one timed DataLoader epoch. Shared by ``make demo``
(examples/demo.py) and the epoch benchmarks (benches/test_bench_torch.py).

The seed classes follow the seed users' own Dataset code (docs/DESIGN.md, "The problem"):
h5py opened in ``__getitem__`` (once per worker, as the h5py-vs-npy write-up recommends for
DataLoader workers), the SURF tutorial's
``MultiWorkerZIPDataset`` (one ``ZipFile`` per worker, ``torch.tensor`` copy of each image), a
folder of ``.npy`` read with ``np.load``, and NPZ files read with ``np.load(f)[key]`` (SPDL's
baseline). They run under ``DataLoader(batch_size=64, shuffle=True, num_workers=2,
persistent_workers=True)``, the configuration the seeds use.
"""

from __future__ import annotations

import json
import os
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import h5py
import hdf5plugin  # noqa: F401  (h5py reads the PyTables blosc file through its filter)
import numpy as np
import tables
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from packread.cli.bench import Epoch, run_epoch
from packread.torch import PackDataset

IMAGE_SHAPE = (3, 256, 256)  # one 196 KB uint8 image, as in DESIGN.md
BATCH = 64
#: Samples per chunk in the LZF file ("several samples per chunk", as h5py's auto-chunking
#: tends to make them).
LZF_ROWS = 8
#: Bumped whenever the files written change, so that a cache of old files is not used.
LAYOUT_VERSION = 1

FORMATS = ["hdf5-gzip", "hdf5-lzf", "hdf5-blosc", "zip-raw", "npy-folder", "npz-folder"]


def smooth_images(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` images whose rows are random walks (steps -3..3, mod 256): smooth like natural
    images, so gzip and LZF compress them (about 1.5x), unlike uniform noise."""
    out = np.empty((n, *IMAGE_SHAPE), dtype=np.uint8)
    for lo in range(0, n, 64):
        hi = min(n, lo + 64)
        steps = rng.integers(-3, 4, (hi - lo, *IMAGE_SHAPE), dtype=np.int16)
        steps[..., 0] = rng.integers(0, 256, (hi - lo, *IMAGE_SHAPE[:-1]), dtype=np.int16)
        out[lo:hi] = np.cumsum(steps, axis=-1, dtype=np.int16) % 256
    return out


@dataclass
class Workload:
    """One format's dataset on disk, and how each side opens it."""

    fmt: str
    path: str
    n: int
    nbytes: int
    #: The seed users' Dataset over it.
    seed_dataset: Callable[[], Dataset]
    #: ``PackDataset(source, batch_size, **options)`` reads it.
    options: dict[str, Any]

    def pack(self, **overrides: Any) -> PackDataset:
        return PackDataset(self.path, BATCH, **{**self.options, **overrides})


def write_workloads(
    root: str, n: int, formats: Iterable[str] = FORMATS, log=print
) -> dict[str, Workload]:
    """Writes (or finds, from an earlier run) ``n`` samples in each format under ``root``."""
    root = os.path.join(root, f"v{LAYOUT_VERSION}-n{n}")
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(20_240_601)
    images: np.ndarray | None = None
    labels = np.arange(n, dtype=np.int64) % 1000
    out = {}
    for fmt in formats:
        done = os.path.join(root, f"{fmt}.done")
        path = os.path.join(root, _NAMES[fmt])
        if not os.path.exists(done):
            if images is None:
                images = smooth_images(rng, n)
            log(f"writing {fmt} ({n} samples) ...")
            _WRITERS[fmt](path, images, labels)
            with open(done, "w") as f:
                f.write("ok\n")
        out[fmt] = _workload(fmt, path, n)
    return out


_NAMES = {
    "hdf5-gzip": "gzip.h5",
    "hdf5-lzf": "lzf.h5",
    "hdf5-blosc": "pytables_blosc.h5",
    "zip-raw": "images.zip",
    "npy-folder": "npy",
    "npz-folder": "npz",
}


def _write_h5(path: str, images: np.ndarray, labels: np.ndarray, **filters: Any) -> None:
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.create_dataset("images", data=images, **filters)
        f.create_dataset("labels", data=labels)
    os.replace(tmp, path)


def _write_pytables_blosc(path: str, images: np.ndarray, labels: np.ndarray) -> None:
    """A PyTables file with PyTables' default blosc (blosclz, shuffle), one image per chunk.
    The seed's Dataset reads it through h5py with hdf5plugin's blosc (the seed's own trick was
    ``import tables``); packread decodes blosc itself."""
    tmp = path + ".tmp"
    with tables.open_file(tmp, "w") as f:
        f.create_carray(
            "/",
            "images",
            obj=images,
            chunkshape=(1, *IMAGE_SHAPE),
            filters=tables.Filters(complevel=5, complib="blosc"),
        )
        f.create_array("/", "labels", obj=labels)
    os.replace(tmp, path)


def _write_zip(path: str, images: np.ndarray, labels: np.ndarray) -> None:
    tmp = path + ".tmp"
    names = [f"img/{i:06d}.raw" for i in range(len(images))]
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        z.writestr(
            "dataset.json", json.dumps({"labels": dict(zip(names, labels.tolist(), strict=True))})
        )
        for name, image in zip(names, images, strict=True):
            z.writestr(name, image.tobytes())
    os.replace(tmp, path)


def _write_npy(path: str, images: np.ndarray, labels: np.ndarray) -> None:
    os.makedirs(path, exist_ok=True)
    for i, image in enumerate(images):
        np.save(os.path.join(path, f"{i:06d}.npy"), image)


def _write_npz(path: str, images: np.ndarray, labels: np.ndarray) -> None:
    os.makedirs(path, exist_ok=True)
    for i, image in enumerate(images):
        # Uncompressed, as the SPDL seed recommends.
        np.savez(os.path.join(path, f"{i:06d}.npz"), image=image, label=labels[i])


_WRITERS: dict[str, Callable[[str, np.ndarray, np.ndarray], None]] = {
    "hdf5-gzip": lambda p, x, y: _write_h5(p, x, y, chunks=(1, *IMAGE_SHAPE), compression="gzip"),
    "hdf5-lzf": lambda p, x, y: _write_h5(
        p, x, y, chunks=(LZF_ROWS, *IMAGE_SHAPE), compression="lzf"
    ),
    "hdf5-blosc": _write_pytables_blosc,
    "zip-raw": _write_zip,
    "npy-folder": _write_npy,
    "npz-folder": _write_npz,
}


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def _workload(fmt: str, path: str, n: int) -> Workload:
    if fmt.startswith("hdf5"):
        return Workload(fmt, path, n, _size(path), lambda: SeedH5Dataset(path), {})
    if fmt == "zip-raw":
        opts = {"members": "img/*.raw", "dtype": np.uint8, "shape": IMAGE_SHAPE}
        return Workload(fmt, path, n, _size(path), lambda: MultiWorkerZIPDataset(path), opts)
    if fmt == "npy-folder":
        return Workload(fmt, path, n, _size(path), lambda: SeedNpyDataset(path), {})
    return Workload(fmt, path, n, _size(path), lambda: SeedNpzDataset(path), {})


def warm(path: str) -> None:
    """Reads every byte once, so that timings are warm-page-cache timings."""
    files = (
        [os.path.join(path, f) for f in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
    )
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


# --------------------------------------------------------------------------------------------
# The seeds' Dataset classes


class SeedH5Dataset(Dataset):
    """h5py opened inside ``__getitem__`` (once per worker), one sample per call, as the
    h5py-vs-npy and spatiotemporal seeds do."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file: h5py.File | None = None
        with h5py.File(path, "r") as f:
            self.n = len(f["images"])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.file is None:
            self.file = h5py.File(self.path, "r")
        return torch.from_numpy(self.file["images"][i]), int(self.file["labels"][i])


class MultiWorkerZIPDataset(Dataset):
    """The SURF "Packed Data Formats" tutorial's class: a ZipFile per worker, raw bytes copied
    into a tensor, labels from ``dataset.json``."""

    def __init__(self, path: str) -> None:
        self.path = path
        worker = get_worker_info()
        worker = worker.id if worker else None
        self.zip_handle = {worker: zipfile.ZipFile(path)}
        members = sorted(self.zip_handle[worker].namelist())
        self.img_names = [m for m in members if self._is_sample(m)]
        with self.zip_handle[worker].open("dataset.json", "r") as f:
            self.labels = json.load(f)["labels"]

    def _is_sample(self, name: str) -> bool:
        return name.endswith(".raw")

    def _get_file_handle(self, fname: str):
        worker = get_worker_info()
        worker = worker.id if worker else None
        if worker not in self.zip_handle:
            self.zip_handle[worker] = zipfile.ZipFile(self.path)
        return self.zip_handle[worker].open(fname, "r")

    def __getitem__(self, index: int):
        name = self.img_names[index]
        with self._get_file_handle(name) as f:
            buffer = np.frombuffer(f.read(), dtype=np.uint8).reshape(IMAGE_SHAPE)
        return torch.tensor(buffer), self.labels[name]

    def __len__(self) -> int:
        return len(self.img_names)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["zip_handle"] = {}
        return state


class SeedNpyDataset(Dataset):
    """A folder of ``.npy`` files read with ``np.load`` (the h5py-vs-npy seed's other side)."""

    def __init__(self, folder: str) -> None:
        self.paths = [os.path.join(folder, f) for f in sorted(os.listdir(folder))]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(np.load(self.paths[i]))


class SeedNpzDataset(Dataset):
    """NPZ files read with ``np.load(f)[key]`` (SPDL's baseline)."""

    def __init__(self, folder: str) -> None:
        self.paths = [os.path.join(folder, f) for f in sorted(os.listdir(folder))]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        with np.load(self.paths[i]) as f:
            return {"image": torch.from_numpy(f["image"]), "label": torch.from_numpy(f["label"])}


def seed_loader(w: Workload, workers: int = 2) -> DataLoader:
    return DataLoader(
        w.seed_dataset(),
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
    )


def pack_loader(w: Workload, workers: int, **overrides: Any) -> DataLoader:
    return DataLoader(
        w.pack(**overrides),
        batch_size=None,
        num_workers=workers,
        persistent_workers=workers > 0,
    )


# --------------------------------------------------------------------------------------------
# One epoch: Epoch and run_epoch live in the package (packread.cli.bench), where
# `packread bench` uses them too.


def one_batch_seconds(w: Workload, repeats: int = 20) -> float:
    """The median time packread takes to read one random batch in this process."""
    reader = w.pack().reader
    rng = np.random.default_rng(1)
    times = []
    for _ in range(repeats):
        idx = rng.choice(w.n, BATCH, replace=False)
        t0 = time.perf_counter()
        reader.batch(idx)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


__all__ = [
    "BATCH",
    "FORMATS",
    "Epoch",
    "Workload",
    "one_batch_seconds",
    "pack_loader",
    "run_epoch",
    "seed_loader",
    "warm",
    "write_workloads",
]
