"""The main job in miniature: write a small dataset in each format, then load random batches
through packread beside the numpy/h5py baseline and print samples/s for both.

Run with `make demo`. Data goes to a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import packread

SAMPLE_SHAPE = (3, 256, 256)  # one 196 KB uint8 image, as in DESIGN.md
N_SAMPLES = 512
BATCH = 64
SECONDS_PER_CASE = 1.5


@dataclass
class Case:
    fmt: str
    name: str
    baseline: Callable[[np.ndarray], np.ndarray]
    packread: Callable[[np.ndarray], np.ndarray]


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


def main() -> None:
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, N_SAMPLES, BATCH) for _ in range(8)]
    print(
        f"packread {packread.__version__}: {N_SAMPLES} samples of {SAMPLE_SHAPE} uint8, "
        f"batches of {BATCH} random indices, {packread.get_num_threads()} threads, warm cache\n"
    )
    with tempfile.TemporaryDirectory(prefix="packread-demo-") as root:
        cases = [npy_case(root, rng)]
        print(f"{'format':<14} {'baseline':<28} {'baseline/s':>12} {'packread/s':>12} {'ratio':>7}")
        for case in cases:
            # Same bytes both ways, or the numbers mean nothing.
            assert np.array_equal(case.baseline(batches[0]), case.packread(batches[0]))
            base = samples_per_second(case.baseline, batches)
            fast = samples_per_second(case.packread, batches)
            print(
                f"{case.fmt:<14} {case.name:<28} {base:>12,.0f} {fast:>12,.0f} {fast / base:>6.1f}x"
            )


if __name__ == "__main__":
    main()
