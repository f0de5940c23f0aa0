"""HDF5Reader across fork, DataLoader workers (fork and spawn), pickling and threads
(docs/BAD_INPUTS.md 28-32), and side by side with h5py in one process (each with its own
libhdf5)."""

from __future__ import annotations

import contextlib
import os
import pickle
import platform
import subprocess
import sys
import textwrap
import threading
import time

import h5py
import numpy as np
import pytest
from _h5files import all_rows, sample_data
from _helpers import assert_same, in_child, run_threads

import packread

CHILD_TIMEOUT_S = 60
NAMES = ["gz", "lzf", "raw", "contig", "compact", "g/f32"]


def _in_child(work, timeout=CHILD_TIMEOUT_S):
    return in_child(work, timeout_s=timeout)


def _write(path, n=64, *, libver="earliest", compact=True):
    """A file of several layouts and pipelines, ``n`` samples each; returns h5py's rows."""
    rng = np.random.default_rng(20)
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset(
            "gz",
            data=sample_data(rng, (n, 3, 8, 8), "<f4"),
            chunks=(16, 3, 8, 8),
            compression="gzip",
            shuffle=True,
        )
        f.create_dataset(
            "lzf", data=sample_data(rng, (n, 10), "<i8"), chunks=(5, 4), compression="lzf"
        )
        f.create_dataset("raw", data=sample_data(rng, (n, 6), "<u2"), chunks=(1, 6))
        f.create_dataset("contig", data=sample_data(rng, (n, 2, 2), "<f8"))
        f.create_dataset(
            "g/f32", data=sample_data(rng, (n, 5), "<i4"), chunks=(7, 5), fletcher32=True
        )
        if compact:
            arr = sample_data(rng, (n, 4), "<i2")
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            tid = h5py.h5t.py_create(arr.dtype)
            space = h5py.h5s.create_simple(arr.shape)
            dsid = h5py.h5d.create(f.id, b"compact", tid, space, dcpl=dcpl)
            dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, arr)
    with h5py.File(path, "r") as f:
        names = [k for k in NAMES if k in f]
    return {k: all_rows(path, k) for k in names}


def _check(got, wants, rows):
    assert sorted(got) == sorted(wants)
    for k, want in wants.items():
        assert_same(got[k], want[rows])


# --------------------------------------------------------------------------------------------
# plain fork (BAD_INPUTS 28, 29, 30)


def test_fork_child_reads_parent_reader(tmp_path):
    path = tmp_path / "a.h5"
    wants = _write(path)
    reader = packread.HDF5Reader(path)
    idx = [63, 0, 17, 17, -2, 33]
    rows = [i % 64 for i in idx]
    _check(reader.batch(idx), wants, rows)  # the parent's cache holds chunks now
    got = _in_child(lambda: reader.batch(idx))
    _check(got, wants, rows)
    _check(reader.batch(idx), wants, rows)  # the parent is unaffected


def test_fork_after_parent_used_pool(tmp_path):
    # BAD_INPUTS 29: the parent's pool threads do not exist in the child, which then decodes
    # many chunks (one sample per chunk: 2000 chunks a batch).
    path = tmp_path / "a.h5"
    rng = np.random.default_rng(21)
    big = sample_data(rng, (2000, 64), "<f4")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=big, chunks=(1, 64), compression="gzip")
        f.create_dataset("y", data=big[:, :8], chunks=(1, 8), compression="lzf", shuffle=True)
    own = packread.HDF5Reader(path, num_threads=3)
    shared = packread.HDF5Reader(path)
    packread.set_num_threads(4)
    try:
        for _ in range(3):
            own.batch(range(2000))
            shared.batch(np.arange(2000)[::-1])
        want = own.batch(np.arange(2000)[::-1])
        assert_same(want["x"], np.ascontiguousarray(big[::-1]))

        def work():
            for _ in range(5):
                for r in (own, shared):
                    got = r.batch(np.arange(2000)[::-1])
                    assert_same(got["x"], want["x"])
                    assert_same(got["y"], want["y"])
            return shared.batch(range(2000))

        got = _in_child(work)
    finally:
        packread.set_num_threads(0)
    assert_same(got["x"], big)


# A healthy child finishes in well under a second; a hung one costs this much of the run.
HANG_TIMEOUT_S = 8


@pytest.mark.parametrize("child", ["parent-reader", "new-reader"])
def test_fork_while_another_thread_reads(tmp_path, child):
    # BAD_INPUTS 30: a parent thread loops over batches (decoded by packread) when the parent
    # forks; the child reads with the parent's reader, or opens a reader of its own.
    path = tmp_path / "a.h5"
    wants = _write(path)
    names = ["gz", "lzf", "raw", "contig"]
    reader = packread.HDF5Reader(path, names)
    stop = threading.Event()
    started = threading.Event()
    errors = []

    def loop():
        try:
            while not stop.is_set():
                got = reader.batch(range(64))
                for k in names:
                    if got[k].tobytes() != wants[k].tobytes():
                        errors.append(f"wrong {k} in the looping parent thread")
                started.set()
        except BaseException as exc:
            errors.append(repr(exc))
            started.set()

    def in_child():
        if child == "parent-reader":
            return reader.batch(range(64))
        return packread.HDF5Reader(path, names).batch(range(64))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        assert started.wait(CHILD_TIMEOUT_S)
        for _ in range(6):
            got = _in_child(in_child, timeout=HANG_TIMEOUT_S)
            _check(got, {k: wants[k] for k in names}, list(range(64)))
    finally:
        stop.set()
        thread.join(CHILD_TIMEOUT_S)
    assert not thread.is_alive()
    assert errors == []


def _thread_in_open(main: int) -> bool:
    """Whether a thread other than ``main`` sits in an openat() syscall (x86_64: 257)."""
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
    path = tmp_path / "a.h5"
    ext = tmp_path / "external.bin"
    wants = _write(path)
    a = np.arange(64 * 4, dtype="<f4").reshape(64, 4)
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

    def in_child():
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
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while not _thread_in_open(threading.main_thread().native_id):
            assert time.monotonic() < deadline, "libhdf5 never reached open() of the FIFO"
            time.sleep(0.005)
        got = _in_child(in_child, timeout=HANG_TIMEOUT_S)
        assert thread.is_alive()  # still blocked in the parent all along
    finally:
        with contextlib.suppress(OSError):  # a writer lets the blocked open() return
            os.close(os.open(ext, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(CHILD_TIMEOUT_S)
    assert not thread.is_alive()
    for k, v in got.items():
        if k != "refused":
            assert_same(v, wants[k][[5, 1]])
    assert ("refused" in got) == (child != "chunked-parent-reader")
    assert len(outcome) == 1
    assert isinstance(outcome[0], packread.PackreadError)  # the FIFO held no data


# --------------------------------------------------------------------------------------------
# torch DataLoader workers (BAD_INPUTS 28, 32)


def _loader_result(reader, context):
    torch = pytest.importorskip("torch")
    from _datasets import HDF5SampleDataset

    loader = torch.utils.data.DataLoader(
        HDF5SampleDataset(reader),
        batch_size=5,
        shuffle=False,
        num_workers=2,
        multiprocessing_context=context,
    )
    parts = list(loader)
    if isinstance(parts[0], dict):
        return {k: np.concatenate([p[k].numpy() for p in parts]) for k in parts[0]}
    return np.concatenate([p.numpy() for p in parts])


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_dataloader_workers(tmp_path, context):
    pytest.importorskip("torch")
    path = tmp_path / "a.h5"
    wants = _write(path, n=30)
    reader = packread.HDF5Reader(path, cache_bytes=1 << 16)
    single = packread.HDF5Reader(path, "gz")
    _check(reader.batch(range(30)), wants, list(range(30)))  # the parent uses the pool first
    got = _loader_result(reader, context)
    _check(got, wants, list(range(30)))
    if context == "fork":  # (one start of spawn or forkserver workers is time enough)
        assert_same(_loader_result(single, context), wants["gz"])


# --------------------------------------------------------------------------------------------
# pickle


@pytest.mark.parametrize("datasets", [None, "g/f32", ["lzf", "gz"]], ids=["none", "str", "list"])
def test_pickle_round_trip_by_path(tmp_path, datasets):
    path = tmp_path / "a.h5"
    wants = _write(path)
    reader = packread.HDF5Reader(path, datasets, num_threads=2, cache_bytes=12345)
    idx = [7, 0, 63, 3, 3, -64]
    rows = [i % 64 for i in idx]
    want = reader.batch(idx)
    raw_bytes = wants["gz"][:4].tobytes()[:64]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        blob = pickle.dumps(reader, protocol=protocol)
        assert len(blob) < 600 + len(str(path)), len(blob)
        assert raw_bytes not in blob
        copy = pickle.loads(blob)
        assert isinstance(copy, packread.HDF5Reader)
        assert copy.path == reader.path
        assert copy.keys() == reader.keys()
        assert len(copy) == len(reader)
        assert copy._options == {
            "num_threads": 2,
            "cache_bytes": 12345,
            "in_memory": False,
            "ragged": "list",
        }
        for k in reader.keys():
            assert copy[k].dtype == reader[k].dtype
            assert copy[k].shape == reader[k].shape
            assert copy[k].chunks == reader[k].chunks
            assert copy[k].filters == reader[k].filters
        got = copy.batch(idx)
        if isinstance(datasets, str):
            assert_same(got, want)
            assert_same(got, wants[datasets][rows])
        else:
            assert sorted(got) == sorted(want)
            for k in got:
                assert_same(got[k], want[k])
                assert_same(got[k], wants[k][rows])
    # A dataset object pickles with its reader.
    name = reader.keys()[0]
    ds = pickle.loads(pickle.dumps(reader[name]))
    assert_same(ds.read([1, 0]), wants[name][[1, 0]])


# --------------------------------------------------------------------------------------------
# threads (BAD_INPUTS 31)


@pytest.mark.parametrize("cache_bytes", [0, 4096, 32 << 20])
def test_threads_share_one_reader(tmp_path, cache_bytes):
    path = tmp_path / "a.h5"
    wants = _write(path)
    reader = packread.HDF5Reader(path, cache_bytes=cache_bytes)
    names = reader.keys()
    barrier = threading.Barrier(8)
    failures = []
    done = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            barrier.wait()
            for k in range(25):
                if k % 3 == 0:  # sequential runs, which the cache serves
                    start = int(rng.integers(0, 60))
                    idx = np.arange(start, start + int(rng.integers(1, 5)))
                else:
                    idx = rng.integers(-64, 64, size=int(rng.integers(0, 40)))
                if k % 2:
                    out = {
                        n: np.full((len(idx), *reader[n].shape[1:]), 0x5A, reader[n].dtype)
                        for n in names
                    }
                    got = reader.batch(idx, out=out)
                    assert all(got[n] is out[n] for n in names)
                else:
                    got = reader.batch(idx)
                for n in names:
                    want = wants[n][idx]
                    if got[n].shape != want.shape or got[n].tobytes() != want.tobytes():
                        failures.append((seed, k, n, idx.tolist()))
            done.append(seed)
        except BaseException as exc:
            failures.append((seed, repr(exc)))

    run_threads(work, timeout_s=CHILD_TIMEOUT_S)
    assert failures == []
    assert sorted(done) == list(range(8))


def test_threads_open_and_read_readers(tmp_path):
    # Opening runs libhdf5 under its lock; many threads opening and reading at once.
    path = tmp_path / "a.h5"
    wants = _write(path, n=20)
    failures = []

    def work(seed):
        try:
            for _ in range(10):
                r = packread.HDF5Reader(path)
                _check(r.batch([seed % 20, 3]), wants, [seed % 20, 3])
        except BaseException as exc:
            failures.append(repr(exc))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CHILD_TIMEOUT_S)
    assert failures == []


# --------------------------------------------------------------------------------------------
# h5py side by side


def test_h5py_and_packread_on_the_same_file(tmp_path):
    path = tmp_path / "a.h5"
    wants = _write(path)
    other = tmp_path / "b.h5"
    with h5py.File(path, "r") as f:
        reader = packread.HDF5Reader(path)  # opened while h5py holds the file open
        for s in range(0, 64, 9):
            rows = list(range(s, min(s + 9, 64)))
            got = reader.batch(rows)
            for k in reader.keys():
                assert_same(got[k], wants[k][rows])
                assert f[k][rows[0]].tobytes() == wants[k][rows[0]].tobytes()
            # h5py writes another file in between.
            with h5py.File(other, "a") as g:
                g.create_dataset(f"d{s}", data=np.arange(s + 1))
    # h5py closed its handle; packread's reader still works, and h5py reopens the file.
    _check(reader.batch([1, 2]), wants, [1, 2])
    with h5py.File(path, "r") as f:
        assert f["gz"][1].tobytes() == wants["gz"][1].tobytes()
    assert_same(packread.HDF5Reader(other, "d63").batch([0, 63]), np.array([0, 63]))


def test_h5py_and_packread_in_threads_at_once(tmp_path):
    path = tmp_path / "a.h5"
    wants = _write(path)
    reader = packread.HDF5Reader(path)
    failures = []
    stop = threading.Event()

    def h5py_loop():
        try:
            with h5py.File(path, "r") as f:
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
            idx = rng.integers(0, 64, size=20)
            got = reader.batch(idx)
            for k, want in wants.items():
                if got[k].tobytes() != want[idx].tobytes():
                    failures.append(f"packread read wrong {k}")
    finally:
        stop.set()
        thread.join(CHILD_TIMEOUT_S)
    assert failures == []


def test_errors_do_not_leak_between_the_two_libraries(tmp_path):
    path = tmp_path / "a.h5"
    wants = _write(path)
    reader = packread.HDF5Reader(path)
    with h5py.File(path, "r") as f:
        with pytest.raises(KeyError):
            f["nope"]
        _check(reader.batch([4]), wants, [4])
        with pytest.raises(packread.MissingKeyError):
            packread.HDF5Reader(path, "nope")
        assert f["gz"][4].tobytes() == wants["gz"][4].tobytes()
        with pytest.raises(packread.HDF5Error):
            packread.HDF5Reader(__file__)
        assert f["lzf"][4].tobytes() == wants["lzf"][4].tobytes()
    _check(reader.batch([4]), wants, [4])


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
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ORDER_SCRIPT, str(tmp_path / "a.h5"), order],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert "OK packread" in proc.stdout
