"""Fixtures and helpers for the NPY, ZIP and NPZ benchmarks.

Every data set is written once per session into a temporary directory, flushed to disk and read
once before any timing, so all numbers are warm-page-cache numbers. Random batches come from a
fixed seed; every variant of a group walks the same sequence of batches from the start.
"""

from __future__ import annotations

import ctypes
import io
import os
import resource
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

BATCH = 64
#: Distinct random batches cycled through by each benchmark (the same sequence on every side).
N_BATCHES = 32
SEED = 20_240_601


def measure(
    benchmark: Any,
    *,
    group: str,
    role: str,
    label: str,
    samples: int,
    nbytes: int,
    fn: Callable[[], Any],
    case: str = "",
    **extra: Any,
) -> Any:
    """Times ``fn`` under ``benchmark`` and records what ``benches/report.py`` pairs and prints.

    ``role`` is ``baseline`` (the code packread replaces), ``variant`` (another spelling of the
    baseline), ``reference`` (the seed users' own loader) or ``packread``. ``extra`` goes into
    ``extra_info`` as it is (compression ratio, notes). Returns the last call's result.
    """
    benchmark.group = group
    benchmark.extra_info.update(
        role=role,
        label=label,
        case=case,
        samples_per_call=samples,
        bytes_per_call=nbytes,
        **extra,
    )
    calls = 0

    def counted() -> Any:
        nonlocal calls
        calls += 1
        return fn()

    # Minor page faults per call (warm-up and calibration calls included): a variant that
    # allocates fresh memory every call shows it here.
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    result = benchmark(counted)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    benchmark.extra_info["minor_faults_per_call"] = round(faults / max(calls, 1), 1)
    return result


def _random_batches(n: int) -> list[np.ndarray]:
    """The fixed-seed batches of ``BATCH`` distinct random indices in ``range(n)``."""
    rng = np.random.default_rng(SEED)
    return [rng.choice(n, BATCH, replace=False) for _ in range(N_BATCHES)]


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
    return NpyFolder(name=name, paths=paths, data=data, batches=_random_batches(len(paths)))


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


# --- ZIP and NPZ ------------------------------------------------------------------------------

#: Samples in every ZIP / NPZ data set (3x256x256 uint8 each, 196 KB).
N_SAMPLES = 512
IMAGE_SHAPE = (3, 256, 256)


def smooth_images(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` images of 3x256x256 uint8 that DEFLATE compresses ~3x (zlib level 6).

    Each row is a random walk (steps -1, 0, +1, wrapping mod 256) from a random start: smooth
    like natural images, unlike uniform noise (which does not compress at all).
    """
    steps = rng.integers(-1, 2, size=(n, *IMAGE_SHAPE), dtype=np.int8).view(np.uint8)
    steps[..., 0] = rng.integers(0, 256, size=(n, *IMAGE_SHAPE[:-1]), dtype=np.uint8)
    return np.cumsum(steps, axis=-1, dtype=np.uint8)


@dataclass(frozen=True)
class ZipSet:
    """One ZIP archive of one member per sample, and the arrays written into it."""

    name: str
    path: str
    #: Member names in archive order: member ``names[i]`` holds ``data[i]``.
    names: list[str]
    data: np.ndarray = field(repr=False)
    batches: list[np.ndarray] = field(repr=False)
    #: Sum of the members' sizes over the sum of their stored sizes.
    compression: float

    @property
    def sample_bytes(self) -> int:
        return int(self.data[0].nbytes)

    def batch_cycle(self) -> Iterator[np.ndarray]:
        """A fresh walk over the batches, from the first one."""
        while True:
            yield from self.batches


@dataclass(frozen=True)
class NpzFolder:
    """Many NPZ files, one sample each, with arrays ``image`` and ``mask``."""

    name: str
    paths: list[str]
    arrays: dict[str, np.ndarray] = field(repr=False)
    batches: list[np.ndarray] = field(repr=False)
    #: Bytes of the arrays over bytes of the files (headers included).
    compression: float

    @property
    def sample_bytes(self) -> int:
        return sum(int(a[0].nbytes) for a in self.arrays.values())

    def batch_cycle(self) -> Iterator[np.ndarray]:
        while True:
            yield from self.batches


@dataclass(frozen=True)
class NpzBlob:
    """One NPZ archive in memory, and the arrays in it."""

    case: str
    arrays: dict[str, np.ndarray] = field(repr=False)
    blob: bytes = field(repr=False)


@pytest.fixture(scope="session")
def zip_images() -> np.ndarray:
    """The 512 samples every ZIP / NPZ data set holds."""
    return smooth_images(np.random.default_rng(SEED + 10), N_SAMPLES)


def _write_zip(path: Path, name: str, data: np.ndarray, method: int, npy: bool) -> ZipSet:
    names = [f"img/{i:05d}.{'npy' if npy else 'raw'}" for i in range(len(data))]
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        for member, sample in zip(names, data, strict=True):
            if npy:
                with zf.open(member, "w") as f:
                    np.save(f, sample)
            else:
                zf.writestr(member, sample.tobytes())
        infos = zf.infolist()
    _sync_and_warm([str(path)])
    ratio = sum(i.file_size for i in infos) / sum(i.compress_size for i in infos)
    return ZipSet(
        name=name,
        path=str(path),
        names=names,
        data=data,
        batches=_random_batches(len(names)),
        compression=round(ratio, 2),
    )


@pytest.fixture(scope="session")
def zip_raw_stored(bench_dir: Path, zip_images: np.ndarray) -> ZipSet:
    """One ZIP of 512 raw (``tobytes``) 3x256x256 uint8 members, stored."""
    return _write_zip(bench_dir / "raw_stored.zip", "stored", zip_images, zipfile.ZIP_STORED, False)


@pytest.fixture(scope="session")
def zip_raw_deflated(bench_dir: Path, zip_images: np.ndarray) -> ZipSet:
    """The same members, ZIP_DEFLATED (zlib's default level)."""
    return _write_zip(
        bench_dir / "raw_deflated.zip", "deflated", zip_images, zipfile.ZIP_DEFLATED, False
    )


@pytest.fixture(params=["stored", "deflated"])
def zip_raw(request: pytest.FixtureRequest) -> ZipSet:
    """Each raw-member archive in turn (its benchmark group is ``zip-raw-<name>``)."""
    return request.getfixturevalue(f"zip_raw_{request.param}")


@pytest.fixture(scope="session")
def zip_npy(bench_dir: Path, zip_images: np.ndarray) -> ZipSet:
    """One ZIP of 512 ``.npy`` members (``np.save`` into ``ZipFile.open(name, 'w')``), stored."""
    return _write_zip(bench_dir / "npy_members.zip", "npy", zip_images, zipfile.ZIP_STORED, True)


def _write_npz_folder(root: Path, name: str, images: np.ndarray, compressed: bool) -> NpzFolder:
    root.mkdir()
    # A segmentation-like mask derived from the image: long runs of True and False.
    arrays = {"image": images, "mask": images[:, 0] > 127}
    save = np.savez_compressed if compressed else np.savez
    paths = []
    for i in range(len(images)):
        path = str(root / f"{i:05d}.npz")
        save(path, image=arrays["image"][i], mask=arrays["mask"][i])
        paths.append(path)
    _sync_and_warm(paths)
    ratio = sum(a.nbytes for a in arrays.values()) / sum(os.path.getsize(p) for p in paths)
    return NpzFolder(
        name=name,
        paths=paths,
        arrays=arrays,
        batches=_random_batches(len(paths)),
        compression=round(ratio, 2),
    )


@pytest.fixture(scope="session")
def npz_stored(bench_dir: Path, zip_images: np.ndarray) -> NpzFolder:
    """512 files written by ``np.savez``: ``image`` 3x256x256 uint8, ``mask`` 256x256 bool."""
    return _write_npz_folder(bench_dir / "npz", "stored", zip_images, compressed=False)


@pytest.fixture(scope="session")
def npz_compressed(bench_dir: Path, zip_images: np.ndarray) -> NpzFolder:
    """The same 512 samples written by ``np.savez_compressed``."""
    return _write_npz_folder(bench_dir / "npz_z", "compressed", zip_images, compressed=True)


@pytest.fixture(params=["stored", "compressed"])
def npz_folder(request: pytest.FixtureRequest) -> NpzFolder:
    """Each NPZ folder in turn (groups ``npz-files`` and ``npz-files-compressed``)."""
    return request.getfixturevalue(f"npz_{request.param}")


def _npz_blob_arrays(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case.startswith("2x16 f4"):
        return {
            "x": rng.standard_normal(16, dtype=np.float32),
            "y": rng.standard_normal(16, dtype=np.float32),
        }
    image = smooth_images(rng, 1)[0]
    return {"image": image, "mask": image[0] > 127}


_NPZ_BLOBS = ["image+mask, stored", "image+mask, deflated", "2x16 f4, stored"]


@pytest.fixture(scope="session")
def npz_blobs() -> dict[str, NpzBlob]:
    rng = np.random.default_rng(SEED + 11)
    out = {}
    for case in _NPZ_BLOBS:
        arrays = _npz_blob_arrays(rng, case)
        buf = io.BytesIO()
        (np.savez_compressed if case.endswith("deflated") else np.savez)(buf, **arrays)
        out[case] = NpzBlob(case=case, arrays=arrays, blob=buf.getvalue())
    return out


@pytest.fixture(params=_NPZ_BLOBS)
def npz_blob(request: pytest.FixtureRequest, npz_blobs: dict[str, NpzBlob]) -> NpzBlob:
    return npz_blobs[request.param]


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
