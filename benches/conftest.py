"""Shared fixtures and helpers for every benchmark in ``benches/``.

The rules every benchmark here follows, and the helper that implements each:

- **What a user sees.** Each call reads a *fresh* random batch (:func:`fresh_batches`: an endless
  stream, never cycling a few fixed batches) from a data set of a few hundred MB, far larger than
  this machine's 32 MiB L3, so the bytes come from memory as they do in training. The allocator is
  left as the user has it (no ``mallopt``; ``machine_info["malloc"]`` records any ``MALLOC_*`` or
  ``GLIBC_TUNABLES`` setting found in the environment).
- **Warm page cache.** Files are written, flushed and read once before timing
  (:func:`warm_page_cache`).
- **Side by side.** :func:`compare` runs all :class:`Variant` s of one comparison in one test,
  interleaved round by round (the order rotates every round), so drift on a shared machine hits
  every side alike. It records each variant's per-call times in the benchmark's ``extra_info``;
  ``benches/report.py`` turns them into tables of medians and ratios. pytest-benchmark's own
  statistics for such a test time the whole interleaved run and are not the result.
- **Against the physical limit.** Uncompressed paths carry ``role="limit"`` variants from
  :func:`gather_limits`: a numpy gather-copy of the same rows from arrays already in RAM into
  preallocated buffers, on one and on two threads.
- **A benchmark that cannot lose is a defect.** :func:`compare` checks every variant's first
  result before any timing and its last result after timing (:func:`expect_rows`,
  :func:`expect_arrays`), on fresh batches, so a broken or stale path fails the run.
- **torch as in the seed's workers.** Comparisons holding a seed Dataset class run inside
  :func:`torch_threads` ``(1)``, as DataLoader workers do (``compare_rows(seed_dataset=True)``);
  otherwise torch's spinning OpenMP threads slow down whichever variant runs next.
- Ratios only, never timing assertions: ``make test`` does not collect ``benches/``.

To add a comparison (a new bench file needs nothing else): build the ``Variant`` list, then call
``compare(benchmark, group=..., variants=..., batches=fresh_batches(n), check=expect_rows(data),
samples=..., nbytes=...)``; for work that takes no batch pass ``batches=itertools.repeat(None)``
and ``check=expect_arrays(...)`` (``SMALL_CALLS`` for microsecond-sized calls).
:func:`compare_rows` (``rows=data, n=n``) and :func:`compare_calls` (``expected=...``) make
those two calls, :func:`compare_epochs` the one for whole epochs. ``compare`` stores
``extra_info["variants"]`` (per variant: role, label, note, per-call ``times`` in seconds,
``minor_faults_per_call``), ``samples_per_call``, ``bytes_per_call``, ``case`` and the load
average before and after (``loadavg``: 1, 5, 15 min, twice), which is what ``report.py`` reads.

Roles (a row's place in the report): ``baseline`` the code packread replaces, one per
comparison at most (the peer-loader groups of ``test_bench_loaders.py`` have none);
``variant`` another spelling of the baseline; ``reference`` another loader to beat (the seed
users' own Dataset class, SPDL, the peer loaders); ``anchor`` plain I/O of the same bytes (two
threads of ``preadv``); ``limit`` the numpy gather-copy; ``packread``.

With ``--benchmark-disable`` each variant runs once and is checked (a quick correctness pass).
"""

from __future__ import annotations

import io
import itertools
import os
import resource
import shutil
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

BATCH = 64
SEED = 20_240_601

ROLES = ("baseline", "variant", "reference", "anchor", "limit", "packread")

#: Rounds and seconds of interleaved timing per comparison (a round calls every variant once).
MIN_ROUNDS = 20
MAX_TIME = 8.0
#: ``compare`` settings for microsecond-sized calls (one array from bytes or a small file).
SMALL_CALLS: dict[str, Any] = {"iterations": 10, "min_rounds": 50, "max_time": 2.0}


#: ``check(idx, result)`` raises ``AssertionError`` when ``result`` is not what batch ``idx`` holds.
Check = Callable[[Any, Any], None]


@dataclass(frozen=True)
class Variant:
    """One side of a comparison: ``load(idx)`` returns what the user gets for batch ``idx``."""

    role: str
    label: str
    load: Callable[[Any], Any]
    #: Timed rounds at most (for very slow references such as h5py's fancy indexing).
    max_rounds: int | None = None
    note: str = ""
    #: This variant's own check, where its result differs in form (rows in sorted order).
    check: Check | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role {self.role!r} is not one of {ROLES}")


def fresh_batches(n: int, k: int = BATCH, seed: int = SEED) -> Iterator[np.ndarray]:
    """An endless stream of batches of ``k`` distinct random indices in ``range(n)``.

    Every ``next`` draws a new batch, as a shuffling sampler does; the stream is reproducible
    from ``seed``.
    """
    rng = np.random.default_rng(seed)
    while True:
        yield rng.choice(n, k, replace=False)


def warm_page_cache(paths: Iterable[str | Path]) -> None:
    """Flushes the writes (so writeback does not compete with timing), then reads every file
    once so that the timed runs find it in the page cache."""
    os.sync()
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def _as_numpy(got: Any) -> np.ndarray:
    # Seed-style Dataset classes return torch tensors.
    return got.numpy() if hasattr(got, "numpy") else got


def expect_rows(expected: np.ndarray | Mapping[str, np.ndarray], *, sort: bool = False) -> Check:
    """A ``check`` for :func:`compare`: the result is ``expected[idx]`` (dtype and values; per key
    when ``expected`` is a mapping). ``sort``: the rows come in sorted index order."""

    def check(idx: np.ndarray, got: Any) -> None:
        want = np.sort(idx) if sort else idx
        if isinstance(expected, Mapping):
            assert sorted(got) == sorted(expected)
            for key, a in expected.items():
                g = _as_numpy(got[key])
                assert g.dtype == a.dtype, key
                np.testing.assert_array_equal(g, a[want], err_msg=key)
        else:
            g = _as_numpy(got)
            assert g.dtype == expected.dtype
            np.testing.assert_array_equal(g, expected[want])

    return check


def expect_arrays(expected: np.ndarray | Mapping[str, np.ndarray]) -> Check:
    """A ``check`` for loads that ignore ``idx`` (one array or archive from bytes or a path)."""

    def check(_idx: Any, got: Any) -> None:
        if isinstance(expected, Mapping):
            assert sorted(got) == sorted(expected)
            for key, a in expected.items():
                assert got[key].dtype == a.dtype, key
                np.testing.assert_array_equal(got[key], a, err_msg=key)
        else:
            assert got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)

    return check


_POOL: list[ThreadPoolExecutor] = []


def two_thread_pool() -> ThreadPoolExecutor:
    """The session's pool of two Python threads, shared by every two-thread limit and anchor."""
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(2, thread_name_prefix="bench"))
    return _POOL[0]


def gather_limits(arrays: np.ndarray | Mapping[str, np.ndarray], k: int = BATCH) -> list[Variant]:
    """The physical limit of a raw path: the same rows gathered by numpy from RAM.

    ``np.take(a, idx, axis=0, out=buf, mode="clip")`` into preallocated buffers (``mode="clip"``:
    the default ``"raise"`` stages the result through a temporary when ``out`` is given), on one
    thread and split over two (numpy releases the GIL while it copies). Returns both variants;
    the report takes the faster as the limit. ``arrays`` is what the reader returns: one array,
    or a mapping of arrays for readers that return a dict.
    """
    named = dict(arrays) if isinstance(arrays, Mapping) else {"": arrays}
    pool = two_thread_pool()

    def buffers() -> dict[str, np.ndarray]:
        return {key: np.empty((k, *a.shape[1:]), a.dtype) for key, a in named.items()}

    def result(outs: dict[str, np.ndarray]) -> Any:
        return outs.get("", outs)

    one_outs, two_outs = buffers(), buffers()

    def take(idx: np.ndarray, outs: dict[str, np.ndarray]) -> None:
        for key, a in named.items():
            np.take(a, idx, axis=0, out=outs[key], mode="clip")

    def one_thread(idx: np.ndarray) -> Any:
        take(idx, one_outs)
        return result(one_outs)

    def two_threads(idx: np.ndarray) -> Any:
        h = len(idx) // 2
        halves = [
            (idx[:h], {key: o[:h] for key, o in two_outs.items()}),
            (idx[h:], {key: o[h:] for key, o in two_outs.items()}),
        ]
        list(pool.map(lambda half: take(*half), halves))
        return result(two_outs)

    return [
        Variant("limit", "numpy gather from RAM: np.take(a, idx, out=buf), 1 thread", one_thread),
        Variant("limit", "numpy gather from RAM: np.take(a, idx, out=buf), 2 threads", two_threads),
    ]


#: The note for comparisons run under ``torch_threads(1)``.
TORCH_NOTE = "torch.set_num_threads(1) during the comparison (as in a DataLoader worker)"


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Runs the block with ``torch.set_num_threads(n)``, then restores torch's setting.

    The seed users' Dataset classes run in DataLoader workers, where torch sets one thread.
    With torch's default (one OpenMP thread per core), the threads spin-wait after every
    ``torch.stack`` and take a core from whichever variant ``compare`` runs next: on this
    2-core VM that slowed packread 2x and the seed Dataset itself up to 20x.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def compare(
    benchmark: Any,
    *,
    group: str,
    variants: list[Variant],
    batches: Iterator[Any],
    check: Check,
    samples: int,
    nbytes: int,
    case: str = "",
    min_rounds: int = MIN_ROUNDS,
    max_time: float = MAX_TIME,
    warmup_rounds: int = 2,
    iterations: int = 1,
    **extra: Any,
) -> None:
    """Times ``variants`` side by side and records them for ``benches/report.py``.

    Each round calls every variant once, on its own fresh batch from ``batches`` (so no call finds
    the previous call's bytes in the CPU caches), in an order that rotates every round. Rounds go
    on until ``min_rounds`` timed rounds and ``max_time`` seconds have passed. One timed call is
    ``iterations`` calls of ``load`` on the same batch (for microsecond-sized work), recorded as
    their mean. Every variant's result is checked with ``check(idx, result)`` on its first
    (untimed) call and on its last timed call.

    ``samples`` and ``nbytes``: samples and array bytes one call returns. ``extra`` goes into
    ``extra_info`` as it is (``compression``, ``note``).
    """
    roles = [v.role for v in variants]
    assert roles.count("baseline") <= 1, f"{group}: one baseline at most, got {roles}"
    benchmark.group = group
    timed_rounds = 0 if benchmark.disabled else None
    times: list[list[float]] = [[] for _ in variants]
    faults = [0] * len(variants)
    last: list[tuple[Any, Any] | None] = [None] * len(variants)

    def call(j: int) -> None:
        v = variants[j]
        idx = next(batches)
        f0 = _minor_faults()
        t0 = time.perf_counter_ns()
        for _ in range(iterations):
            got = v.load(idx)
        t1 = time.perf_counter_ns()
        faults[j] += _minor_faults() - f0
        times[j].append((t1 - t0) * 1e-9 / iterations)
        last[j] = (idx, got)

    def run() -> None:
        # Untimed warm-up rounds (thread pools, first-touch of output buffers; variants with a
        # round cap warm up once); the first result of every variant is checked before anything
        # is timed.
        for r in range(max(1, warmup_rounds) if timed_rounds is None else 1):
            for j in range(len(variants)):
                if r == 0 or variants[j].max_rounds is None:
                    call(j)
                if r == 0:
                    _checked(variants[j], check, *last[j])
        for j in range(len(variants)):
            times[j].clear()
            faults[j] = 0
        start = time.perf_counter()
        for r in itertools.count():
            if timed_rounds is not None and r >= timed_rounds:
                break
            if r >= min_rounds and time.perf_counter() - start >= max_time:
                break
            for s in range(len(variants)):
                j = (s + r) % len(variants)
                cap = variants[j].max_rounds
                if cap is None or len(times[j]) < cap:
                    call(j)
        for v, got in zip(variants, last, strict=True):
            _checked(v, check, *got)

    load_before = os.getloadavg()
    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(
        case=case,
        samples_per_call=samples,
        bytes_per_call=nbytes,
        iterations=iterations,
        loadavg=[round(x, 2) for x in (*load_before, *os.getloadavg())],
        variants=[
            {
                "role": v.role,
                "label": v.label,
                "note": v.note,
                "times": t,
                "minor_faults_per_call": round(f / max(len(t), 1) / iterations, 1),
            }
            for v, t, f in zip(variants, times, faults, strict=True)
        ],
        **extra,
    )


def _checked(v: Variant, check: Check, idx: Any, got: Any) -> None:
    try:
        (v.check or check)(idx, got)
    except AssertionError as e:
        raise AssertionError(f"{v.role} `{v.label}` returned wrong data: {e}") from e


def _arrays(a: np.ndarray | Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return list(a.values()) if isinstance(a, Mapping) else [a]


def row_bytes(rows: np.ndarray | Mapping[str, np.ndarray]) -> int:
    """Bytes of one sample of ``rows``: its first row (summed over the arrays of a mapping)."""
    return sum(int(a[0].nbytes) for a in _arrays(rows))


def compare_rows(
    benchmark: Any,
    *,
    rows: np.ndarray | Mapping[str, np.ndarray],
    n: int,
    seed: int = SEED,
    k: int = BATCH,
    seed_dataset: bool = False,
    **kw: Any,
) -> None:
    """:func:`compare` for batch reads: every call reads its own fresh batch of ``k`` random
    indices in ``range(n)`` (``fresh_batches(n, k, seed)``) and is checked against
    ``rows[idx]`` (:func:`expect_rows`); a call returns ``k`` samples of :func:`row_bytes`
    each. ``seed_dataset``: a variant is a seed users' Dataset class, so the comparison runs
    inside :func:`torch_threads` ``(1)`` as in the DataLoader workers it runs in, and its note
    says so (``TORCH_NOTE``). ``kw``: the rest of :func:`compare`'s arguments."""
    if seed_dataset:
        kw["note"] = TORCH_NOTE
    with torch_threads(1) if seed_dataset else nullcontext():
        compare(
            benchmark,
            batches=fresh_batches(n, k, seed),
            check=expect_rows(rows),
            samples=k,
            nbytes=k * row_bytes(rows),
            **kw,
        )


def compare_calls(
    benchmark: Any, *, expected: np.ndarray | Mapping[str, np.ndarray], **kw: Any
) -> None:
    """:func:`compare` for microsecond-sized calls that take no batch (one array or archive
    from bytes or a path): ``SMALL_CALLS`` timing, each result checked against ``expected``
    (:func:`expect_arrays`), one sample of ``expected``'s bytes per call. ``kw``: the rest of
    :func:`compare`'s arguments."""
    compare(
        benchmark,
        batches=itertools.repeat(None),
        check=expect_arrays(expected),
        samples=1,
        nbytes=sum(a.nbytes for a in _arrays(expected)),
        **SMALL_CALLS,
        **kw,
    )


def compare_epochs(benchmark: Any, *, variants: list[Variant], **kw: Any) -> None:
    """:func:`compare` for variants whose every call is one whole epoch (``load(None)``; no
    batches): inside :func:`torch_threads` ``(1)`` as in a DataLoader worker, one untimed
    warm-up epoch each; afterwards, whatever happened, ``close()`` of every variant's ``load``
    that has one (lets its workers and threads go). ``kw``: the rest of :func:`compare`'s
    arguments."""
    try:
        with torch_threads(1):
            compare(
                benchmark,
                variants=variants,
                batches=itertools.repeat(None),
                warmup_rounds=1,
                **kw,
            )
    finally:
        for v in variants:
            close = getattr(v.load, "close", None)
            if callable(close):
                close()


# --- data sets ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where the session's files go (a few GB); removed at the end of the session."""
    root = tmp_path_factory.mktemp("packread-bench")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def smooth_images(
    rng: np.random.Generator, n: int, shape: tuple[int, ...] = (3, 256, 256), max_step: int = 1
) -> np.ndarray:
    """``n`` uint8 images whose rows are random walks (steps ``-max_step..max_step`` mod 256
    from a random start): smooth like natural images, so codecs have something to do (DEFLATE
    ~3x for ``max_step=1``, ~1.4x for 3), unlike uniform noise."""
    out = np.empty((n, *shape), dtype=np.uint8)
    for lo in range(0, n, 256):  # in blocks: bounded temporaries for large n
        hi = min(n, lo + 256)
        steps = rng.integers(-max_step, max_step + 1, (hi - lo, *shape), dtype=np.int8)
        steps = steps.view(np.uint8)
        steps[..., 0] = rng.integers(0, 256, (hi - lo, *shape[:-1]), dtype=np.uint8)
        np.cumsum(steps, axis=-1, dtype=np.uint8, out=out[lo:hi])
    return out


@dataclass(frozen=True)
class NpyFolder:
    """A folder of ``.npy`` files, one sample each, and the arrays written into it."""

    name: str
    paths: list[str]
    data: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class NpyBlob:
    """One array and its ``.npy`` serialisation, in memory and in a file."""

    case: str
    array: np.ndarray = field(repr=False)
    blob: bytes = field(repr=False)
    path: str


def _write_folder(root: Path, name: str, data: np.ndarray) -> NpyFolder:
    root.mkdir()
    paths = []
    for i, sample in enumerate(data):
        path = str(root / f"{i:05d}.npy")
        np.save(path, sample)
        paths.append(path)
    warm_page_cache(paths)
    return NpyFolder(name=name, paths=paths, data=data)


@pytest.fixture(scope="session")
def npy_img(bench_dir: Path) -> NpyFolder:
    """2,048 files of 3x256x256 uint8 (196 KB each, 403 MB): an image folder."""
    rng = np.random.default_rng(SEED + 1)
    data = rng.integers(0, 256, size=(2048, 3, 256, 256), dtype=np.uint8)
    return _write_folder(bench_dir / "img", "img", data)


@pytest.fixture(scope="session")
def npy_rows(bench_dir: Path) -> NpyFolder:
    """1,024 files of 100,000 float32 (400 KB each, 410 MB): the seed's 'long float rows'."""
    rng = np.random.default_rng(SEED + 2)
    data = rng.standard_normal(size=(1024, 100_000), dtype=np.float32)
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
    warm_page_cache([b.path for b in out.values()])
    return out


@pytest.fixture(params=list(_BLOBS))
def npy_blob(request: pytest.FixtureRequest, npy_blobs: dict[str, NpyBlob]) -> NpyBlob:
    return npy_blobs[request.param]


# --- ZIP and NPZ ------------------------------------------------------------------------------

#: Samples in every ZIP data set (3x256x256 uint8 each, 196 KB: 403 MB).
N_SAMPLES = 2048
#: Samples in every NPZ folder (image + mask, 262 KB each: 403 MB).
N_NPZ = 1536
IMAGE_SHAPE = (3, 256, 256)


@dataclass(frozen=True)
class ZipSet:
    """One ZIP archive of one member per sample, and the arrays written into it."""

    name: str
    path: str
    #: Member names in archive order: member ``names[i]`` holds ``data[i]``.
    names: list[str]
    data: np.ndarray = field(repr=False)
    #: Sum of the members' sizes over the sum of their stored sizes.
    compression: float


@dataclass(frozen=True)
class NpzFolder:
    """Many NPZ files, one sample each, with arrays ``image`` and ``mask``."""

    name: str
    paths: list[str]
    arrays: dict[str, np.ndarray] = field(repr=False)
    #: Bytes of the arrays over bytes of the files (headers included).
    compression: float


@dataclass(frozen=True)
class NpzBlob:
    """One NPZ archive in memory, and the arrays in it."""

    case: str
    arrays: dict[str, np.ndarray] = field(repr=False)
    blob: bytes = field(repr=False)


@pytest.fixture(scope="session")
def zip_images() -> np.ndarray:
    """The samples every ZIP / NPZ data set holds (DEFLATE compresses them ~2.3-3x)."""
    return smooth_images(np.random.default_rng(SEED + 10), N_SAMPLES, IMAGE_SHAPE)


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
    warm_page_cache([path])
    ratio = sum(i.file_size for i in infos) / sum(i.compress_size for i in infos)
    return ZipSet(name=name, path=str(path), names=names, data=data, compression=round(ratio, 2))


@pytest.fixture(scope="session")
def zip_raw_stored(bench_dir: Path, zip_images: np.ndarray) -> ZipSet:
    """One ZIP of 2,048 raw (``tobytes``) 3x256x256 uint8 members, stored."""
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
    """One ZIP of 2,048 ``.npy`` members (``np.save`` into ``ZipFile.open(name, 'w')``),
    stored."""
    return _write_zip(bench_dir / "npy_members.zip", "npy", zip_images, zipfile.ZIP_STORED, True)


def _write_npz_folder(root: Path, name: str, images: np.ndarray, compressed: bool) -> NpzFolder:
    root.mkdir()
    # A segmentation-like mask derived from the image: long runs of True and False.
    arrays = {"image": images, "mask": images[:, 0] > 127}
    save = np.savez_compressed if compressed else np.savez
    paths = [str(root / f"{i:05d}.npz") for i in range(len(images))]

    def write(i: int) -> None:
        save(paths[i], image=arrays["image"][i], mask=arrays["mask"][i])

    # Two threads: zlib releases the GIL while it compresses.
    list(two_thread_pool().map(write, range(len(paths))))
    warm_page_cache(paths)
    ratio = sum(a.nbytes for a in arrays.values()) / sum(os.path.getsize(p) for p in paths)
    return NpzFolder(name=name, paths=paths, arrays=arrays, compression=round(ratio, 2))


@pytest.fixture(scope="session")
def npz_stored(bench_dir: Path, zip_images: np.ndarray) -> NpzFolder:
    """1,536 files written by ``np.savez``: ``image`` 3x256x256 uint8, ``mask`` 256x256 bool."""
    return _write_npz_folder(bench_dir / "npz", "stored", zip_images[:N_NPZ], compressed=False)


@pytest.fixture(scope="session")
def npz_compressed(bench_dir: Path, zip_images: np.ndarray) -> NpzFolder:
    """The same 1,536 samples written by ``np.savez_compressed``."""
    return _write_npz_folder(bench_dir / "npz_z", "compressed", zip_images[:N_NPZ], True)


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


# --- pytest hooks ------------------------------------------------------------------------------


def _malloc_settings() -> str:
    """The allocator as the user has it: glibc's defaults unless the environment says more."""
    env = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"}
    if not env:
        return "glibc defaults (untuned)"
    return ", ".join(f"{k}={v}" for k, v in sorted(env.items()))


def _l3_cache() -> str:
    try:
        return Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
    except OSError:
        return "?"


def pytest_configure(config: pytest.Config) -> None:
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
    machine_info["l3_cache"] = _l3_cache()
    machine_info["mem_total_gib"] = round(
        os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1
    )
    machine_info["numpy_version"] = np.__version__
    machine_info["packread_version"] = packread.__version__
    machine_info["packread_threads"] = packread.get_num_threads()
    machine_info["malloc"] = _malloc_settings()
    try:
        import torch

        machine_info["torch_version"] = torch.__version__
        machine_info["torch_threads"] = torch.get_num_threads()
    except ImportError:  # pragma: no cover - torch is in requirements/dev.in
        pass
