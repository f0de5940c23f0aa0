"""The main job in miniature: write a small dataset in each format, then load random batches
through packread beside the numpy/h5py baseline and print samples/s for both.

Run with `make demo`. Data goes to a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import os
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import h5py
import numpy as np
import tables

import packread

SAMPLE_SHAPE = (3, 256, 256)  # one 196 KB uint8 image, as in DESIGN.md
N_SAMPLES = 512
BATCH = 64
SECONDS_PER_CASE = 1.5


@dataclass
class Case:
    fmt: str
    name: str
    baseline: Callable[[np.ndarray], object]
    packread: Callable[[np.ndarray], object]


def samples_per_second(
    load: Callable[[np.ndarray], np.ndarray], batches: list[np.ndarray]
) -> float:
    load(batches[0])  # warm up (page cache, thread pool)
    done = 0
    start = time.perf_counter()
    while True:
        for idx in batches:
            load(idx)
            done += len(idx)
        elapsed = time.perf_counter() - start
        if elapsed >= SECONDS_PER_CASE:
            return done / elapsed


def npy_case(root: str, rng: np.random.Generator) -> Case:
    folder = os.path.join(root, "npy")
    os.makedirs(folder)
    for i in range(N_SAMPLES):
        sample = rng.integers(0, 256, SAMPLE_SHAPE, dtype=np.uint8)
        np.save(os.path.join(folder, f"sample_{i:05d}.npy"), sample)
    reader = packread.NpyReader(folder)
    paths = reader.paths

    def baseline(idx: np.ndarray) -> np.ndarray:
        return np.stack([np.load(paths[i]) for i in idx])

    return Case("NPY folder", "np.load loop + np.stack", baseline, reader.batch)


def zip_case(root: str, rng: np.random.Generator) -> Case:
    path = os.path.join(root, "samples.zip")
    names = [f"sample_{i:05d}.raw" for i in range(N_SAMPLES)]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for name in names:
            zf.writestr(name, rng.integers(0, 256, SAMPLE_SHAPE, dtype=np.uint8).tobytes())
    reader = packread.ZipReader(path)
    handle = zipfile.ZipFile(path)  # one handle per worker, as the Packed Data Formats seed does

    def baseline(idx: np.ndarray) -> np.ndarray:
        return np.stack(
            [np.frombuffer(handle.read(names[i]), np.uint8).reshape(SAMPLE_SHAPE) for i in idx]
        )

    def fast(idx: np.ndarray) -> np.ndarray:
        return reader.batch(idx, dtype=np.uint8, shape=SAMPLE_SHAPE)

    return Case("ZIP (stored)", "zipfile.read + frombuffer", baseline, fast)


def npz_case(root: str, rng: np.random.Generator) -> Case:
    folder = os.path.join(root, "npz")
    os.makedirs(folder)
    for i in range(N_SAMPLES):
        np.savez(
            os.path.join(folder, f"sample_{i:05d}.npz"),
            image=rng.integers(0, 256, SAMPLE_SHAPE, dtype=np.uint8),
            mask=rng.integers(0, 2, SAMPLE_SHAPE[1:], dtype=np.uint8),
        )
    reader = packread.NpzReader(folder)
    paths = reader.paths

    def baseline(idx: np.ndarray) -> object:
        loaded = [np.load(paths[i]) for i in idx]
        return np.stack([f["image"] for f in loaded]), np.stack([f["mask"] for f in loaded])

    def fast(idx: np.ndarray) -> object:
        out = reader.batch(idx)
        return out["image"], out["mask"]

    return Case("NPZ files", "np.load(f)[k] + np.stack", baseline, fast)


def hdf5_cases(root: str, rng: np.random.Generator) -> list[Case]:
    # Smooth images compress like real ones (uniform noise would not compress at all).
    steps = rng.integers(-3, 4, (N_SAMPLES, *SAMPLE_SHAPE), dtype=np.int16)
    images = (np.cumsum(steps, axis=-1) % 256).astype(np.uint8)
    labels = rng.integers(0, 1000, N_SAMPLES).astype(np.int64)
    cases = []
    for title, options in [
        ("HDF5 raw", {}),
        ("HDF5 gzip+shuf", {"compression": "gzip", "shuffle": True}),
        ("HDF5 lzf", {"compression": "lzf"}),
    ]:
        path = os.path.join(root, f"{title.split()[1].replace('+', '_')}.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("images", data=images, chunks=(1, *SAMPLE_SHAPE), **options)
            f.create_dataset("labels", data=labels)
        reader = packread.HDF5Reader(path)
        handle = h5py.File(path, "r")  # opened once per worker, as the seeds recommend
        ds_images, ds_labels = handle["images"], handle["labels"]

        def baseline(idx: np.ndarray, ds_images=ds_images, ds_labels=ds_labels) -> object:
            return np.stack([ds_images[i] for i in idx]), np.stack([ds_labels[i] for i in idx])

        def fast(idx: np.ndarray, reader=reader) -> object:
            out = reader.batch(idx)
            return out["images"], out["labels"]

        cases.append(Case(title, "h5py d[i] loop + np.stack", baseline, fast))
    cases.append(pytables_blosc_case(root, images))
    return cases


def pytables_blosc_case(root: str, images: np.ndarray) -> Case:
    """A PyTables CArray with PyTables' default blosc (blosclz + shuffle): packread decodes it
    natively, with no plugin installed."""
    path = os.path.join(root, "pytables_blosc.h5")
    with tables.open_file(path, "w") as f:
        f.create_carray(
            "/",
            "images",
            obj=images,
            chunkshape=(1, *SAMPLE_SHAPE),
            filters=tables.Filters(complevel=5, complib="blosc"),
        )
    reader = packread.HDF5Reader(path, "images")
    node = tables.open_file(path, "r").root.images

    def baseline(idx: np.ndarray) -> object:
        return np.stack([node[i] for i in idx])

    return Case("PyTables blosc", "PyTables node[i] loop", baseline, reader.batch)


def same(a: object, b: object) -> bool:
    if isinstance(a, tuple):
        return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    return np.array_equal(a, b)  # type: ignore[arg-type]


def main() -> None:
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, N_SAMPLES, BATCH) for _ in range(8)]
    print(
        f"packread {packread.__version__}: {N_SAMPLES} samples of {SAMPLE_SHAPE} uint8, "
        f"batches of {BATCH} random indices, {packread.get_num_threads()} threads, warm cache\n"
    )
    with tempfile.TemporaryDirectory(prefix="packread-demo-") as root:
        cases = [npy_case(root, rng), zip_case(root, rng), npz_case(root, rng)]
        cases += hdf5_cases(root, rng)
        print(f"{'format':<14} {'baseline':<28} {'baseline/s':>12} {'packread/s':>12} {'ratio':>7}")
        for case in cases:
            # Same bytes both ways, or the numbers mean nothing.
            assert same(case.baseline(batches[0]), case.packread(batches[0]))
            base = samples_per_second(case.baseline, batches)
            fast = samples_per_second(case.packread, batches)
            print(
                f"{case.fmt:<14} {case.name:<28} {base:>12,.0f} {fast:>12,.0f} {fast / base:>6.1f}x"
            )


if __name__ == "__main__":
    main()
