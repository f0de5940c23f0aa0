"""Fixtures for the NPY benchmarks.

Every data set is written once per session into a temporary directory, flushed to disk and read
once before any timing, so all numbers are warm-page-cache numbers. Random batches come from a
fixed seed; every variant of a group walks the same sequence of batches from the start.
"""

from __future__ import annotations

import ctypes
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

BATCH = 64
#: Distinct random batches cycled through by each benchmark (the same sequence on every side).
N_BATCHES = 32
SEED = 20_240_601


@dataclass(frozen=True)
class NpyFolder:
    """A folder of ``.npy`` files, one sample each, and the arrays written into it."""

    name: str
    paths: list[str]
    data: np.ndarray = field(repr=False)
    batches: list[np.ndarray] = field(repr=False)

    @property
    def sample_bytes(self) -> int:
        return int(self.data[0].nbytes)

    def batch_cycle(self) -> Iterator[np.ndarray]:
        """A fresh walk over the batches, from the first one."""
        while True:
            yield from self.batches


@dataclass(frozen=True)
class NpyBlob:
    """One array and its ``.npy`` serialisation, in memory and in a file."""

    case: str
    array: np.ndarray = field(repr=False)
    blob: bytes = field(repr=False)
    path: str


def _sync_and_warm(paths: list[str]) -> None:
    # Flush the writes so that writeback does not compete with the timed runs, then read every
    # file once so that they are all in the page cache.
    os.sync()
    for p in paths:
        with open(p, "rb") as f:
            f.read()


def _write_folder(root: Path, name: str, data: np.ndarray) -> NpyFolder:
    root.mkdir()
    paths = []
    for i, sample in enumerate(data):
        path = str(root / f"{i:05d}.npy")
        np.save(path, sample)
        paths.append(path)
    _sync_and_warm(paths)
    rng = np.random.default_rng(SEED)
    batches = [rng.choice(len(paths), BATCH, replace=False) for _ in range(N_BATCHES)]
    return NpyFolder(name=name, paths=paths, data=data, batches=batches)


@pytest.fixture(scope="session")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("packread-bench")


@pytest.fixture(scope="session")
def npy_img(bench_dir: Path) -> NpyFolder:
    """512 files of 3x256x256 uint8 (196 KB each): an image folder."""
    rng = np.random.default_rng(SEED + 1)
    data = rng.integers(0, 256, size=(512, 3, 256, 256), dtype=np.uint8)
    return _write_folder(bench_dir / "img", "img", data)


@pytest.fixture(scope="session")
def npy_rows(bench_dir: Path) -> NpyFolder:
    """256 files of 100,000 float32 (400 KB each): the seed's 'long float rows' layout."""
    rng = np.random.default_rng(SEED + 2)
    data = rng.standard_normal(size=(256, 100_000), dtype=np.float32)
    return _write_folder(bench_dir / "rows", "rows", data)


@pytest.fixture(params=["img", "rows"])
def npy_folder(request: pytest.FixtureRequest) -> NpyFolder:
    """Each folder layout in turn (its benchmark group is ``npy-folder-<name>``)."""
    return request.getfixturevalue(f"npy_{request.param}")


_BLOBS = {
    "3x256x256 u8": lambda rng: rng.integers(0, 256, size=(3, 256, 256), dtype=np.uint8),
    "16 f4": lambda rng: rng.standard_normal(16, dtype=np.float32),
}


@pytest.fixture(scope="session")
def npy_blobs(bench_dir: Path) -> dict[str, NpyBlob]:
    rng = np.random.default_rng(SEED + 3)
    out = {}
    root = bench_dir / "single"
    root.mkdir()
    for i, (case, make) in enumerate(_BLOBS.items()):
        array = make(rng)
        buf = io.BytesIO()
        np.save(buf, array)
        path = str(root / f"{i}.npy")
        Path(path).write_bytes(buf.getvalue())
        out[case] = NpyBlob(case=case, array=array, blob=buf.getvalue(), path=path)
    _sync_and_warm([b.path for b in out.values()])
    return out


@pytest.fixture(params=list(_BLOBS))
def npy_blob(request: pytest.FixtureRequest, npy_blobs: dict[str, NpyBlob]) -> NpyBlob:
    return npy_blobs[request.param]


#: How the C allocator is set up for the run (recorded in the JSON's machine_info).
MALLOC_CONFIG = "glibc defaults"


def _pin_malloc() -> str:
    """Keeps glibc from handing freed heap memory back to the kernel between benchmark calls.

    With glibc's defaults, whether the 12-25 MB that one ``np.load`` + ``np.stack`` batch
    allocates is trimmed away on free (and page-faulted back in, ~3,800 faults and +9 ms per
    batch here) depends on the heap's layout when the test starts: the baselines came out 2x
    slower in some runs than in others, for the same code. Fixed thresholds put every variant
    in its fast, fault-free steady state, which is the conservative state for the ratios.
    ``PACKREAD_BENCH_DEFAULT_MALLOC=1`` keeps glibc's defaults.
    """
    if os.environ.get("PACKREAD_BENCH_DEFAULT_MALLOC"):
        return "glibc defaults (PACKREAD_BENCH_DEFAULT_MALLOC set)"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "platform defaults (no mallopt)"
    m_trim_threshold, m_mmap_threshold = -1, -3
    if mallopt(m_trim_threshold, 1 << 30) == 1 and mallopt(m_mmap_threshold, 32 << 20) == 1:
        return "mallopt(M_TRIM_THRESHOLD=1 GiB, M_MMAP_THRESHOLD=32 MiB)"
    return "glibc defaults (mallopt refused)"


def pytest_configure(config: pytest.Config) -> None:
    global MALLOC_CONFIG
    MALLOC_CONFIG = _pin_malloc()
    # pytest-benchmark writes --benchmark-json at the end of the run and does not create the
    # folder it goes into (`make bench` writes .bench/latest.json).
    target = config.getoption("benchmark_json", None)
    if target is not None:
        Path(target).parent.mkdir(parents=True, exist_ok=True)


def pytest_benchmark_update_machine_info(
    config: pytest.Config, machine_info: dict[str, Any]
) -> None:
    import packread

    machine_info["cpu_count"] = os.cpu_count()
    machine_info["cpu_affinity"] = len(os.sched_getaffinity(0))
    machine_info["numpy_version"] = np.__version__
    machine_info["packread_version"] = packread.__version__
    machine_info["packread_threads"] = packread.get_num_threads()
    machine_info["malloc"] = MALLOC_CONFIG
    try:
        import torch

        machine_info["torch_version"] = torch.__version__
        machine_info["torch_threads"] = torch.get_num_threads()
    except ImportError:  # pragma: no cover - torch is in requirements/dev.in
        pass
