"""Every reader across fork, DataLoader workers (fork, spawn, forkserver), pickling and threads
(docs/BAD_INPUTS.md 28-32), one set of tests parametrized over the formats; then what only one
format has: libhdf5's lock held by a parent thread, h5py beside packread in one process, ZIP
member bytes and in-memory NPZ, and proof that a batch releases the GIL."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import pickle
import platform
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

import packread
from support.formats import (
    CASE_NAMES,
    LAYOUTS,
    RAGGED_NAMES,
    Case,
    N,
    same,
    write_all,
    write_layouts,
)
from support.helpers import assert_same, in_child, run_threads
from support.zipcraft import patch_both

#: A healthy child finishes in well under a second; a hung one costs this much of the run.
TIMEOUT_S = 60
HANG_TIMEOUT_S = 8

#: The shared format matrix (support/formats.py), images included, and the HDF5 layouts file;
#: not the variable-length cases: these tests read into ``out=`` and collate samples with
#: torch's default_collate, which need samples of one size (test_torch runs the ragged cases
#: through fork, spawn and forkserver workers).
CASES = [*(n for n in CASE_NAMES if n not in RAGGED_NAMES), "h5_layouts"]


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[str, Case]:
    root = str(tmp_path_factory.mktemp("formats"))
    out = write_all(root)
    out["h5_layouts"] = write_layouts(root)
    return out


@pytest.fixture(params=CASES)
def case(request, cases) -> Case:
    return cases[request.param]


def run_script(script: str, *args: object, hang: str) -> str:
    """Runs ``script`` in a fresh interpreter; its stdout. Exiting non-zero fails the test, and
    so does running past ``TIMEOUT_S`` (reported as ``hang``)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{hang}: {exc.stdout!r} {exc.stderr!r}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def rows_of(idx) -> list[int]:
    """The sample each index means (negative ones count from the end)."""
    return [int(i) % N for i in idx]


def check(got, case: Case, idx) -> None:
    want = case.reference(rows_of(idx))
    assert same(got, want), f"{case.name}: batch of {list(idx)} differs from the reference"


def empty_out(reader, rows: int):
    if isinstance(reader.dtype, dict):
        return {k: np.full((rows, *reader.shape[k]), 0x5A, reader.dtype[k]) for k in reader.dtype}
    return np.full((rows, *reader.shape), 0x5A, reader.dtype)


# --------------------------------------------------------------------------------------------
# fork (BAD_INPUTS 28-30)


def test_fork_child_reads_a_reader_the_parent_used(case, tmp_path):
    reader = case.open()
    idx = [N - 1, 0, 17, 17, -2, 5]
    check(reader.batch(idx), case, idx)  # the parent's pool, caches and indexes are warm
    timeout = TIMEOUT_S
    got = in_child(lambda: reader.batch(idx), tmp_path / "child.pkl", timeout)
    check(got, case, idx)
    check(reader.batch(idx), case, idx)  # the parent is unaffected


def test_fork_child_after_the_parent_used_a_larger_pool(case, tmp_path):
    # BAD_INPUTS 29: the parent's pool threads do not exist in the child, which then reads
    # many batches on a pool of its own.
    reader = case.open()
    backwards = list(range(N - 1, -1, -1))
    packread.set_num_threads(4)
    try:
        for _ in range(3):
            reader.batch(range(N))
        want = reader.batch(backwards)

        def work():
            for _ in range(20):
                assert same(reader.batch(backwards), want)
            return reader.batch(backwards)

        got = in_child(work, tmp_path / "child.pkl", TIMEOUT_S)
    finally:
        packread.set_num_threads(0)
    check(got, case, backwards)


def test_fork_child_reads_what_the_parent_never_indexed(case, tmp_path):
    # Opened in the parent, never read there: the child indexes lazily what it needs (ZIP local
    # headers, NPZ files after the first, HDF5 chunk indexes).
    reader = case.open()
    backwards = list(range(N - 1, -1, -1))
    timeout = TIMEOUT_S
    got = in_child(lambda: reader.batch(backwards), tmp_path / "child.pkl", timeout)
    check(got, case, backwards)
    check(reader.batch([5]), case, [5])


@pytest.mark.parametrize("child", ["parent-reader", "new-reader"])
def test_fork_while_a_parent_thread_reads(case, tmp_path, child, request):
    # BAD_INPUTS 30: a parent thread loops over batches when the parent forks; the child reads
    # with the parent's reader, or opens a reader of its own.
    if case.name == "h5_layouts":
        # Datasets libhdf5 reads itself (compact, external, ...): the fork handler sometimes
        # does not get libhdf5's lock from the looping thread within its 1 s, and the child
        # then refuses to read (found failing 2 runs in 6 before issue 17's changes too; see
        # the issue 17 note). Still run, not yet required to pass.
        request.applymarker(
            pytest.mark.xfail(reason="fork handler vs a thread looping in libhdf5", strict=False)
        )
    timeout = HANG_TIMEOUT_S
    reader = case.open()
    want = reader.batch(range(N))
    stop = threading.Event()
    started = threading.Event()
    errors = []

    def loop():
        try:
            while not stop.is_set():
                if not same(reader.batch(range(N)), want):
                    errors.append("wrong batch in the looping parent thread")
                started.set()
        except BaseException as exc:
            errors.append(repr(exc))
            started.set()

    def work():
        return (reader if child == "parent-reader" else case.open()).batch(range(N))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        assert started.wait(TIMEOUT_S)
        for k in range(4):
            got = in_child(work, tmp_path / f"child{k}.pkl", timeout)
            check(got, case, range(N))
    finally:
        stop.set()
        thread.join(TIMEOUT_S)
    assert not thread.is_alive()
    assert errors == []


def test_fork_child_reads_unread_rows_of_hdf5_image_shards(tmp_path):
    # The parent reads one image, the child two others of one shard through the same reader:
    # a small read runs inline, and its staged HDF5 rows were read by a parallel loop outside
    # packread's pool, on rayon's global pool, whose threads the parent started and the child
    # does not have (it waited forever). Every parallel loop now stays on packread's pool.
    from support.formats import write_image_cases

    case = write_image_cases(str(tmp_path))["img_h5_shards"]
    reader = case.open()
    check(reader.batch([0]), case, [0])
    got = in_child(lambda: reader.batch([5, 6]), tmp_path / "child.pkl", HANG_TIMEOUT_S)
    check(got, case, [5, 6])


# --------------------------------------------------------------------------------------------
# torch DataLoader workers (BAD_INPUTS 28, 32)


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_dataloader_workers(case, context):
    torch = pytest.importorskip("torch")
    from support.datasets import ReaderDataset, native

    reader = case.open()
    want = case.reference(list(range(N)))
    dtypes = [v.dtype for v in want.values()] if isinstance(want, dict) else [want.dtype]
    if not hasattr(torch, "uint16") and any(d.kind == "u" and d.itemsize > 1 for d in dtypes):
        pytest.skip("torch < 2.3 makes no uint16/uint32/uint64 tensors (default_collate fails)")
    check(reader.batch(range(N)), case, range(N))  # the parent uses the pool first
    loader = torch.utils.data.DataLoader(
        ReaderDataset(reader),
        batch_size=5,
        shuffle=False,
        num_workers=2,
        multiprocessing_context=context,
    )
    parts = list(loader)
    if isinstance(parts[0], dict):
        got = {k: np.concatenate([p[k].numpy() for p in parts]) for k in parts[0]}
    else:
        got = np.concatenate([p.numpy() for p in parts])
    want = {k: native(v) for k, v in want.items()} if isinstance(want, dict) else native(want)
    assert same(got, want)


# --------------------------------------------------------------------------------------------
# pickle (BAD_INPUTS 32): by path and options, never the data


def _data_bytes(case: Case) -> bytes:
    """64 bytes of sample data that must not be in a pickled reader."""
    first = case.reference([0])
    arr = first[sorted(first)[0]] if isinstance(first, dict) else first
    return np.ascontiguousarray(arr).tobytes()[:64]


def test_readers_pickle_by_path_without_their_data(case):
    if isinstance(case.source, (bytes, io.BytesIO)):
        pytest.skip("a reader of bytes or a file object pickles with them (docs/sources.md)")
    reader = case.open()
    idx = [7, 0, N - 1, 3, 3, -N]
    want = reader.batch(idx)
    paths = reader.paths if hasattr(reader, "paths") else [reader.path]
    # Options and paths, never data; an image reader's options (and a tar or ZIP reader's of
    # fields with a decode=) hold ImageDecode, Remote and Limits objects (some 600 bytes more at
    # protocol 0), a clip reader's also how clips are cut.
    budget = 800 + (900 if case.name.startswith("clip") else 600 if "decode" in case.options else 0)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        blob = pickle.dumps(reader, protocol=protocol)
        assert len(blob) < budget + sum(len(str(p)) + 16 for p in paths), len(blob)
        assert _data_bytes(case) not in blob
        copy = pickle.loads(blob)
        assert type(copy) is type(reader)
        assert len(copy) == len(reader)
        if hasattr(reader, "names"):  # (HDF5 samples have no names)
            assert copy.names() == reader.names()
        assert copy.dtype == reader.dtype
        assert copy.shape == reader.shape
        got = copy.batch(idx)
        assert same(got, want)
        check(got, case, idx)


def test_npy_reader_pickle_keeps_max_header_size(tmp_path):
    dtype = np.dtype([(f"field_{i:03d}", "<u1") for i in range(700)])
    path = tmp_path / "wide.npy"
    np.save(path, np.zeros(2, dtype=dtype))
    with pytest.raises(packread.LimitExceededError):
        packread.NpyReader([path])
    reader = packread.NpyReader([path], max_header_size=100_000)
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.dtype == reader.dtype
    assert_same(copy.batch([0]), reader.batch([0]))


def test_zip_reader_pickle_keeps_verify_crc_and_member_limit(tmp_path):
    path = tmp_path / "crc.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("big", bytes(10_000))
        zf.writestr("small", b"abc")
    # A wrong CRC-32 for "small", in the central directory and its local header.
    path.write_bytes(patch_both(path.read_bytes(), "small", crc=zlib.crc32(b"abc") ^ 1))
    with pytest.raises(packread.BadZipError):
        packread.ZipReader(path).read("small")
    z = packread.ZipReader(path, verify_crc=False, max_member_bytes=1000)
    copy = pickle.loads(pickle.dumps(z))
    assert copy.read("small") == b"abc"
    with pytest.raises(packread.LimitExceededError):
        copy.read("big")


def test_npz_reader_pickle_keeps_verify_crc(tmp_path):
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i}.npz")
        np.savez(paths[-1], img=np.arange(12.0).reshape(3, 4) + i)
    # The last file's img.npy has a wrong CRC-32.
    raw = paths[-1].read_bytes()
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        crc = zf.getinfo("img.npy").CRC
    paths[-1].write_bytes(patch_both(raw, "img.npy", crc=crc ^ 1))
    with pytest.raises(packread.BadZipError):
        pickle.loads(pickle.dumps(packread.NpzReader(paths))).batch([2])
    copy = pickle.loads(pickle.dumps(packread.NpzReader(paths, verify_crc=False)))
    assert_same(copy.batch([2])["img"][0], np.arange(12.0).reshape(3, 4) + 2)


@pytest.mark.parametrize("datasets", [None, "g/f32", ["lzf", "gz"]], ids=["none", "str", "list"])
def test_hdf5_reader_pickle_keeps_datasets_and_options(cases, datasets):
    case = cases["h5_layouts"]
    reader = packread.HDF5Reader(case.source, datasets, num_threads=2, cache_bytes=12345)
    idx = [7, 0, N - 1, 3, 3, -N]
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.keys() == reader.keys()
    names = ("num_threads", "chunk_cache_bytes", "in_memory", "ragged")
    kept = {k: copy._kwargs[k] for k in names}
    assert kept == {
        "num_threads": 2,
        "chunk_cache_bytes": 12345,
        "in_memory": False,
        "ragged": "list",
    }
    for k in reader.keys():
        assert copy[k].chunks == reader[k].chunks
        assert copy[k].filters == reader[k].filters
    want = case.reference(rows_of(idx))
    got = copy.batch(idx)
    if isinstance(datasets, str):
        assert_same(got, want[datasets])
    else:
        assert sorted(got) == sorted(datasets or LAYOUTS)
        for k in got:
            assert_same(got[k], want[k])
    # A dataset object pickles with its reader.
    name = reader.keys()[0]
    ds = pickle.loads(pickle.dumps(reader[name]))
    assert_same(ds.read([1, 0]), case.reference([1, 0])[name])


# --------------------------------------------------------------------------------------------
# threads (BAD_INPUTS 31)


@pytest.mark.parametrize(
    "options",
    [{}, {"cache_bytes": 0}, {"cache_bytes": 4096}],
    ids=["default", "no-chunk-cache", "tiny-chunk-cache"],
)
def test_threads_share_one_reader(case, options):
    if options and not case.name.startswith("h5"):
        pytest.skip("the chunk cache is HDF5's")
    reader = Case(case.name, case.source, dict(case.options, **options), case.datasets).open()
    want_all = case.reference(list(range(N)))
    failures = []
    done = []

    def work(seed):
        try:
            read_randomly(seed)
            done.append(seed)
        except BaseException as exc:
            failures.append((seed, repr(exc)))

    def read_randomly(seed):
        rng = np.random.default_rng(seed)
        for k in range(20):
            if k % 3 == 0:  # runs of neighbours, which share chunks
                start = int(rng.integers(0, N - 4))
                idx = np.arange(start, start + int(rng.integers(1, 5)))
            else:
                idx = rng.integers(-N, N, size=int(rng.integers(0, 24)))
            if k % 2:
                out = empty_out(reader, len(idx))
                got = reader.batch(idx, out=out)
                if isinstance(out, dict):
                    assert all(got[n] is out[n] for n in out)
                else:
                    assert got is out
            else:
                got = reader.batch(idx)
            rows = rows_of(idx)
            if isinstance(want_all, dict):
                want = {n: v[rows] for n, v in want_all.items()}
            else:
                want = want_all[rows]
            if not same(got, want):
                failures.append((seed, k, idx.tolist()))

    run_threads(work, timeout_s=TIMEOUT_S)
    assert failures == []
    assert sorted(done) == list(range(8))


def test_threads_race_on_the_first_reads_of_fresh_readers(case):
    # What a reader indexes on first use (ZIP local headers, NPZ files, HDF5 chunk indexes),
    # here by 8 threads at once, three times over.
    for _ in range(3):
        reader = case.open()
        barrier = threading.Barrier(8)
        results = []

        def work(reader=reader, barrier=barrier, results=results):
            barrier.wait()
            results.append(reader.batch(range(N)))

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT_S)
        assert len(results) == 8
        for got in results:
            check(got, case, range(N))


def test_threads_open_and_read_readers(case):
    # Opening reads headers and directories (HDF5: libhdf5 under its lock) while others read.
    failures = []

    def work(seed):
        try:
            for _ in range(10):
                idx = [seed % N, 3]
                check(case.open().batch(idx), case, idx)
        except BaseException as exc:
            failures.append(repr(exc))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    assert failures == []


# --------------------------------------------------------------------------------------------
# ZIP member bytes and in-memory NPZ


def test_member_bytes_and_in_memory_npz_in_threads_and_a_fork_child(cases, tmp_path):
    z = packread.ZipReader(cases["zip_npy"].source)
    members = {n: z.read(n) for n in z.names()}
    npz_paths = sorted(Path(cases["npz"].source).glob("*.npz"))
    raw_npz = [p.read_bytes() for p in npz_paths]

    def npz_ok(i: int) -> bool:
        got = packread.load_npz(raw_npz[i])
        with np.load(io.BytesIO(raw_npz[i])) as f:
            return sorted(got) == sorted(f.files) and all(same(got[k], f[k]) for k in f.files)

    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for k in range(25):
            if k % 2:
                name = z.names()[int(rng.integers(len(z)))]
                ok = z.read(name) == members[name]
            else:
                ok = npz_ok(int(rng.integers(N)))
            if not ok:
                failures.append((seed, k))

    run_threads(work, timeout_s=TIMEOUT_S)
    assert failures == []

    def child():
        return (
            [z.read(n) for n in z.names()],
            all(npz_ok(i) for i in range(N)),
            packread.load_npz(str(npz_paths[2])),
        )

    got_bytes, npz_all_ok, from_path = in_child(child, tmp_path / "child.pkl", TIMEOUT_S)
    with zipfile.ZipFile(cases["zip_npy"].source) as zf:
        assert got_bytes == [zf.read(n) for n in zf.namelist()]
    assert npz_all_ok
    with np.load(npz_paths[2]) as f:
        for key in f.files:
            assert_same(from_path[key], f[key])


# --------------------------------------------------------------------------------------------
# HDF5: a parent thread holds libhdf5's lock across fork


def _thread_in_open(main: int) -> bool:
    """Whether a thread other than ``main`` sits in an open() syscall (x86_64: 2, 257;
    aarch64: 56)."""
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == main:
            continue
        try:
            with open(f"/proc/self/task/{tid}/syscall") as f:
                fields = f.read().split()
        except OSError:
            continue
        if fields and fields[0] in ("2", "257", "56"):
            return True
    return False


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64") or not os.access("/proc/self/syscall", os.R_OK),
    reason="needs /proc/<tid>/syscall",
)
@pytest.mark.parametrize("child", ["chunked-parent-reader", "compact-parent-reader", "new-reader"])
def test_fork_while_a_thread_holds_libhdf5(tmp_path, child):
    # BAD_INPUTS 30, deterministically: a parent thread is inside a libhdf5 read (external
    # storage whose file is a FIFO: libhdf5 blocks opening it, holding its lock) for the whole
    # time the child runs. The child must not need that lock, or must not hang on it: reads
    # that need libhdf5 (compact data, opening a reader) fail with a clear HDF5Error instead.
    # Earlier tests' garbage freed now: a reader collected while the FIFO read holds libhdf5
    # goes to packread's reaper thread, which would then wait on that lock across the fork.
    gc.collect()
    case = write_layouts(str(tmp_path))
    path = case.source
    ext = tmp_path / "external.bin"
    a = np.arange(N * 4, dtype="<f4").reshape(N, 4)
    with h5py.File(path, "a") as f:
        f.create_dataset("external", data=a, external=[(str(ext), 0, h5py.h5f.UNLIMITED)])
    reader = packread.HDF5Reader(path)
    assert reader["external"].read_path.startswith("libhdf5")
    assert_same(reader["external"].read([3]), a[[3]])
    ext.unlink()
    os.mkfifo(ext)
    outcome = []

    def blocked():
        try:
            reader["external"].read([1])
            outcome.append("returned")
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=blocked, daemon=True)
    thread.start()

    def work():
        if child == "chunked-parent-reader":
            return {k: reader[k].read([5, 1]) for k in ("gz", "lzf", "raw", "contig", "g/f32")}
        try:
            if child == "compact-parent-reader":
                reader["compact"].read([5, 1])
            else:
                packread.HDF5Reader(path, ["gz", "compact"]).batch([5, 1])
        except packread.HDF5Error as exc:
            assert "forked" in str(exc), str(exc)  # noqa: PT017
            return {"refused": np.zeros(0)}
        raise AssertionError("libhdf5 was usable although a parent thread held its lock")

    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not _thread_in_open(threading.main_thread().native_id):
            assert time.monotonic() < deadline, "libhdf5 never reached open() of the FIFO"
            time.sleep(0.005)
        got = in_child(work, tmp_path / "child.pkl", HANG_TIMEOUT_S)
        assert thread.is_alive()  # still blocked in the parent all along
    finally:
        with contextlib.suppress(OSError):  # a writer lets the blocked open() return
            os.close(os.open(ext, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(TIMEOUT_S)
    assert not thread.is_alive()
    want = case.reference([5, 1])
    for k, v in got.items():
        if k != "refused":
            assert_same(v, want[k])
    assert ("refused" in got) == (child != "chunked-parent-reader")
    assert len(outcome) == 1
    assert isinstance(outcome[0], packread.PackreadError)  # the FIFO held no data


DROP_WHILE_BUSY_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading, time
    import h5py, numpy as np
    import packread

    tmp = sys.argv[1]
    path, ext, other = (os.path.join(tmp, n) for n in ("ext.h5", "external.bin", "other.h5"))
    data = np.arange(8 * 6, dtype="<f4").reshape(8, 6)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, external=[(ext, 0, h5py.h5f.UNLIMITED)])
    with h5py.File(other, "w") as f:
        f.create_dataset("y", data=data, chunks=(2, 6), compression="gzip")
    blocked = packread.HDF5Reader(path, "x", num_threads=1)
    doomed = packread.HDF5Reader(other)
    doomed.batch([1])
    os.unlink(ext)
    os.mkfifo(ext)
    # A pool thread opens the FIFO inside libhdf5, holding libhdf5's lock until a writer comes.
    pending = blocked.batch_async([0])

    def writer():
        time.sleep(0.5)  # the main thread is dropping `doomed` by now
        while True:
            try:
                os.close(os.open(ext, os.O_WRONLY | os.O_NONBLOCK))
                return
            except OSError:
                time.sleep(0.005)

    threading.Thread(target=writer).start()
    time.sleep(0.2)
    del doomed  # closes libhdf5 ids: waits for the lock, which needs the writer thread to run
    try:
        pending.result(timeout=30)
    except packread.HDF5Error:
        pass  # the FIFO held no data
    print("OK", flush=True)
    """
)


def test_dropping_a_reader_while_libhdf5_is_busy_lets_python_run(tmp_path):
    # The last reference to an HDF5 reader goes (here by del, as often in the garbage collector)
    # while a pool thread is inside libhdf5 waiting on something only Python can give it: the
    # drop waits for libhdf5's lock with the GIL released, or the process deadlocks.
    out = run_script(
        DROP_WHILE_BUSY_SCRIPT,
        tmp_path,
        hang="dropping a reader held the GIL while waiting for libhdf5",
    )
    assert "OK" in out


# --------------------------------------------------------------------------------------------
# HDF5: h5py and packread side by side in one process (each with its own libhdf5)


def test_h5py_and_packread_on_the_same_file(tmp_path):
    case = write_layouts(str(tmp_path))
    path = case.source
    wants = case.reference(list(range(N)))
    other = tmp_path / "b.h5"
    with h5py.File(path, "r") as f:
        reader = packread.HDF5Reader(path)  # opened while h5py holds the file open
        for s in range(0, N, 9):
            rows = list(range(s, min(s + 9, N)))
            got = reader.batch(rows)
            for k in reader.keys():
                assert_same(got[k], wants[k][rows])
                assert f[k][rows[0]].tobytes() == wants[k][rows[0]].tobytes()
            # h5py writes another file in between.
            with h5py.File(other, "a") as g:
                g.create_dataset(f"d{s}", data=np.arange(s + 1))
    # h5py closed its handle; packread's reader still works, and h5py reopens the file.
    check(reader.batch([1, 2]), case, [1, 2])
    with h5py.File(path, "r") as f:
        assert f["gz"][1].tobytes() == wants["gz"][1].tobytes()
    assert_same(packread.HDF5Reader(other, "d36").batch([0, 36]), np.array([0, 36]))


def test_h5py_and_packread_in_threads_at_once(tmp_path):
    case = write_layouts(str(tmp_path))
    wants = case.reference(list(range(N)))
    reader = packread.HDF5Reader(case.source)
    failures = []
    stop = threading.Event()

    def h5py_loop():
        try:
            with h5py.File(case.source, "r") as f:
                while not stop.is_set():
                    for k, want in wants.items():
                        if f[k][5:9].tobytes() != want[5:9].tobytes():
                            failures.append(f"h5py read wrong {k}")
        except BaseException as exc:
            failures.append(repr(exc))

    thread = threading.Thread(target=h5py_loop)
    thread.start()
    try:
        rng = np.random.default_rng(22)
        for _ in range(40):
            idx = rng.integers(0, N, size=20)
            got = reader.batch(idx)
            for k, want in wants.items():
                if got[k].tobytes() != want[idx].tobytes():
                    failures.append(f"packread read wrong {k}")
    finally:
        stop.set()
        thread.join(TIMEOUT_S)
    assert failures == []


def test_errors_do_not_leak_between_the_two_libraries(tmp_path):
    case = write_layouts(str(tmp_path))
    wants = case.reference(list(range(N)))
    reader = packread.HDF5Reader(case.source)
    with h5py.File(case.source, "r") as f:
        with pytest.raises(KeyError):
            f["nope"]
        check(reader.batch([4]), case, [4])
        with pytest.raises(packread.MissingKeyError):
            packread.HDF5Reader(case.source, "nope")
        assert f["gz"][4].tobytes() == wants["gz"][4].tobytes()
        with pytest.raises(packread.HDF5Error):
            packread.HDF5Reader(__file__)
        assert f["lzf"][4].tobytes() == wants["lzf"][4].tobytes()
    check(reader.batch([4]), case, [4])


IMPORT_ORDER_SCRIPT = textwrap.dedent(
    """
    import sys
    order = sys.argv[2]
    if order == "packread-first":
        import packread
        import h5py
    else:
        import h5py
        import packread
    import numpy as np

    path = sys.argv[1]
    data = np.arange(600, dtype="<f4").reshape(50, 12)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(16, 12), compression="gzip", shuffle=True)
        f.create_dataset("c", data=data)
    r = packread.HDF5Reader(path)
    with h5py.File(path, "r") as f:
        for name in ("x", "c"):
            assert r.batch([49, 0, 7])[name].tobytes() == f[name][[0, 7, 49]][[2, 0, 1]].tobytes()
    print("OK", packread.__name__, h5py.version.hdf5_version, flush=True)
    """
)


@pytest.mark.parametrize("order", ["packread-first", "h5py-first"])
def test_import_order_with_h5py(tmp_path, order):
    out = run_script(IMPORT_ORDER_SCRIPT, tmp_path / "a.h5", order, hang="import hung")
    assert "OK packread" in out


# --------------------------------------------------------------------------------------------
# the GIL is released inside batch

GIL_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    import numpy as np
    import packread

    folder = sys.argv[1]
    paths = [os.path.join(folder, f"{i}.npy") for i in range(64)]
    for i, p in enumerate(paths):
        np.save(p, np.full((1024, 1024), i, dtype=np.float32))  # 4 MiB each, 256 MiB in all
    reader = packread.NpyReader(paths, num_threads=1)

    # batch_async hands the read to the pool and returns with it in flight: Python code runs
    # on while packread reads (a read holding the GIL could not still be running here).
    pending = reader.batch_async(range(64))
    in_flight = not pending.done()
    steps = 0
    while not pending.done():
        steps += 1  # Python bytecode, run while the pool thread reads
    batch = pending.result()
    assert [int(batch[i, 0, 0]) for i in range(64)] == list(range(64))
    if in_flight and steps > 0:
        print("MAIN THREAD RAN WHILE BATCH WAS READ", flush=True)

    # batch() in another thread is batch_async + a wait that releases the GIL: this thread
    # keeps running Python code until that read ends.
    done = threading.Event()
    def read():
        reader.batch(range(64))
        done.set()
    t = threading.Thread(target=read)
    t.start()
    ticks = 0
    while not done.is_set():
        ticks += 1
    t.join()
    print("OK", ticks > 0, flush=True)
    """
)


def test_batch_releases_the_gil(tmp_path):
    out = run_script(GIL_SCRIPT, tmp_path, hang="batch held the GIL (deadlock)")
    assert "MAIN THREAD RAN WHILE BATCH WAS READ" in out
    assert "OK True" in out
