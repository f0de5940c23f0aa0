"""What every reader shares: the BatchReader protocol (len, per-sample shape/dtype, keys(),
batch(idx, out=)), keyword-only options with ``num_threads``, packread's own exceptions, and
``batch_async`` (checked at once, read on the pool, safe to drop)."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

import packread
from packread.errors import (
    IndexOutOfRangeError,
    InternalError,
    InvalidArgumentError,
    MissingKeyError,
    PackreadTypeError,
)
from support.formats import CASE_NAMES, RAGGED_NAMES, Case, same
from support.helpers import in_child

#: Every case of the shared format matrix (support/formats.py), images included.
CASES = CASE_NAMES


@pytest.fixture(params=CASES)
def case(request, cases) -> Case:
    return cases[request.param]


def _empty_like(reader, rows: int):
    """``out=`` for a batch of ``rows``: every array but the variable-length ones, which no
    ``out=`` can hold."""
    if isinstance(reader.dtype, dict):
        fixed = [k for k in reader.dtype if k not in reader.ragged_keys]
        return {k: np.empty((rows, *reader.shape[k]), reader.dtype[k]) for k in fixed}
    return np.empty((rows, *reader.shape), reader.dtype)


def _rows_fit(batch, shape, dtype) -> bool:
    """Whether a batch's rows have the reader's per-sample ``shape`` and ``dtype``: an array's
    rows exactly; a variable-length array's samples (a list of arrays, or ``(values,
    offsets)``) with any size where ``shape`` says ``None``."""
    if isinstance(batch, np.ndarray):
        return (batch.shape[1:], batch.dtype) == (shape, dtype)
    samples = batch if isinstance(batch, list) else [batch[0]]  # flat: the values end to end
    return all(
        s.dtype == dtype
        and s.ndim == len(shape)
        and all(want in (None, got) for got, want in zip(s.shape, shape, strict=True))
        for s in samples
    )


def test_protocol(case):
    r = case.open()
    assert isinstance(r, packread.BatchReader)
    assert len(r) == 37
    multi = isinstance(case.reference([0]), dict)
    assert isinstance(r.shape, dict) is multi
    assert isinstance(r.dtype, dict) is multi
    if multi:
        assert list(r.shape) == list(r.dtype) == r.keys()
        assert all(isinstance(s, tuple) for s in r.shape.values())
        assert all(isinstance(d, np.dtype) for d in r.dtype.values())
    else:
        assert isinstance(r.shape, tuple)
        assert isinstance(r.dtype, np.dtype)
    # NpyReader/ZipReader name their samples with names() (keys() is deprecated there); rows
    # of an array have no names, and keys() names their arrays.
    rows = getattr(r, "rows", False)
    named = isinstance(r, (packread.NpyReader, packread.ZipReader)) and not rows
    assert isinstance(r.names() if named else r.keys(), list)
    if rows:
        assert r.names() is None
    assert r.samples_per_chunk == case.samples_per_chunk
    idx = [5, 0, 36, 5, -1]
    want = case.reference([i % 37 for i in idx])
    got = r.batch(idx)
    assert same(got, want)
    # Per-sample shape and dtype are exactly those of a batch's rows (with None where
    # variable-length samples differ: those arrays, and only those, are ragged_keys).
    assert r.ragged_keys == (["seqs"] if case.name in RAGGED_NAMES else [])
    if multi:
        assert list(got) == r.keys()
        assert all(_rows_fit(got[k], r.shape[k], r.dtype[k]) for k in r.keys())
        assert [k for k in r.keys() if None in r.shape[k]] == r.ragged_keys
    else:
        assert _rows_fit(got, r.shape, r.dtype)


def test_out_is_keyword_only_and_filled(case):
    r = case.open()
    out = _empty_like(r, 3)
    with pytest.raises(TypeError):
        r.batch([1, 2, 3], out)
    got = r.batch([1, 2, 3], out=out)
    assert got is out or (isinstance(out, dict) and all(got[k] is out[k] for k in out))
    assert same(got, case.reference([1, 2, 3]))
    # A variable-length array has no out= (its fixed-size neighbours do, as above).
    for k in r.ragged_keys:
        with pytest.raises(InvalidArgumentError, match="variable-length"):
            r.batch([1, 2, 3], out={**out, k: np.empty((3, 11), r.dtype[k])})


def test_options_are_keyword_only_with_num_threads(case):
    src = case.source
    if case.name.startswith("h5"):
        with pytest.raises(TypeError):
            packread.HDF5Reader(src, case.datasets, 2)
    else:
        reader = case.open()
        cls = type(reader)
        # A clip reader's clip_len is its one positional option.
        required = (reader.clip_len,) if isinstance(reader, packread.ClipReader) else ()
        with pytest.raises(TypeError):
            cls(src, *required, 2)
    opts = dict(case.options, num_threads=1)
    own = Case(case.name, src, opts, case.datasets, case.reference).open()
    assert same(own.batch(range(37)), case.reference(list(range(37))))
    for bad, exc in [(0, InvalidArgumentError), (-2, InvalidArgumentError), (1.5, TypeError)]:
        with pytest.raises(exc):
            Case(case.name, src, dict(case.options, num_threads=bad), case.datasets).open()


def test_errors_are_packread_errors(case):
    r = case.open()
    with pytest.raises(IndexOutOfRangeError):
        r.batch([37])
    with pytest.raises(PackreadTypeError):
        r.batch(3)
    with pytest.raises(PackreadTypeError):
        r.batch([1.5])
    with pytest.raises(InvalidArgumentError):
        r.batch([[1, 2]])
    bad_out = {k: np.empty(1) for k in r.keys()} if isinstance(r.dtype, dict) else np.empty(1)
    with pytest.raises(InvalidArgumentError):
        r.batch([0, 1], out=bad_out)


def test_missing_names_raise_missing_key_error(cases, tmp_path):
    with pytest.raises(MissingKeyError):
        packread.HDF5Reader(cases["h5"].source)["nope"]
    z = packread.ZipReader(cases["zip_raw"].source)
    with pytest.raises(MissingKeyError):
        z.read("nope")
    with pytest.raises(MissingKeyError):
        z.batch(["nope"])
    with pytest.raises(MissingKeyError):
        packread.ZipReader(cases["zip_raw"].source, members="*.none")
    with pytest.raises(MissingKeyError):
        packread.ZipReader(cases["zip_raw"].source, members=["img/000.raw", "nope"])
    n = packread.NpzReader(cases["npz"].source)
    with pytest.raises(MissingKeyError):
        n.batch([0], keys=["nope"])
    with pytest.raises(MissingKeyError):
        packread.NpzReader(cases["npz"].source, keys=["image", "nope"])
    # ... and KeyError still catches them, as with h5py, zipfile and numpy.
    with pytest.raises(KeyError):
        n.shape["nope"]


def test_zip_member_selection(cases):
    src = cases["zip_raw"].source
    every = packread.ZipReader(src)
    assert every.names()[0] == "dataset.json"
    assert len(every) == 38
    sel = packread.ZipReader(src, members="img/*.raw", dtype="<f4", shape=(2, 5, 7))
    assert len(sel) == 37
    assert sel.names() == [f"img/{i:03d}.raw" for i in range(37)]
    assert "dataset.json" not in sel
    assert "img/004.raw" in sel
    assert sel.shape == (2, 5, 7)
    assert sel.dtype == np.dtype("<f4")
    assert same(sel.batch(["img/004.raw", "img/001.raw"]), cases["zip_raw"].reference([4, 1]))
    assert sel.read(-1) == every.read("img/036.raw")
    assert sel.info(0) == every.info(1)
    listed = packread.ZipReader(src, members=["img/010.raw", "img/002.raw"], dtype="<f4")
    assert listed.names() == ["img/010.raw", "img/002.raw"]
    assert listed.shape == (70,)
    with pytest.raises(InvalidArgumentError):
        packread.ZipReader(src, members=["img/010.raw", "img/010.raw"])
    # A per-call dtype/shape overrides the reader's.
    got = sel.batch([3], dtype="u1", shape=(280,))
    assert got.dtype == np.uint8
    assert got.shape == (1, 280)


@pytest.mark.parametrize("name", ["npy", "zip_raw"])
def test_keys_of_sample_named_readers_warn_and_still_name_samples(cases, name):
    # NpyReader/ZipReader.keys() named the samples; names() does now, and keys() keeps doing
    # so for one release with a DeprecationWarning (CHANGELOG.md).
    r = cases[name].open()
    with pytest.warns(DeprecationWarning, match=r"use names\(\)"):
        keys = r.keys()
    assert keys == r.names()
    assert len(keys) == len(r) > 0


def test_npz_key_selection(cases):
    n = packread.NpzReader(cases["npz"].source, keys=["label"])
    assert n.keys() == ["label"]
    assert list(n.shape) == ["label"]
    got = n.batch([3, 1])
    assert list(got) == ["label"]
    assert same(got["label"], cases["npz"].reference([3, 1])["label"])
    with pytest.raises(InvalidArgumentError):
        packread.NpzReader(cases["npz"].source).batch([0], out={"nope": np.empty(1)})
    with pytest.raises(InvalidArgumentError):
        packread.NpzReader(cases["npz"].source, keys=["label", "label"])


def test_readers_pickle_with_their_options(case):
    import pickle

    r = Case(case.name, case.source, dict(case.options, num_threads=1), case.datasets).open()
    copy = pickle.loads(pickle.dumps(r))
    assert type(copy) is type(r)
    assert len(copy) == len(r)
    names = "names" if isinstance(r, (packread.NpyReader, packread.ZipReader)) else "keys"
    assert getattr(copy, names)() == getattr(r, names)()
    assert copy._kwargs["num_threads"] == 1
    assert same(copy.batch([2, 7]), case.reference([2, 7]))


# --------------------------------------------------------------------------------------------
# batch_async


def test_batch_async_equals_reference(case):
    r = case.open()
    rng = np.random.default_rng(0)
    handles = [(idx, r.batch_async(idx)) for idx in (rng.integers(0, 37, 9) for _ in range(6))]
    for idx, h in handles:
        assert isinstance(h, packread.PendingBatch)
        got = h.result(timeout=60)
        assert h.done()
        assert same(got, case.reference([int(i) for i in idx]))
        assert h.result() is got  # the same batch every time


def test_batch_async_checks_arguments_at_once(case):
    r = case.open()
    with pytest.raises(IndexOutOfRangeError):
        r.batch_async([0, 99])
    with pytest.raises(PackreadTypeError):
        r.batch_async("abc")
    bad_out = {k: np.empty(1) for k in r.keys()} if isinstance(r.dtype, dict) else np.empty(1)
    with pytest.raises(InvalidArgumentError):
        r.batch_async([0, 1], out=bad_out)
    out = _empty_like(r, 2)
    got = r.batch_async([4, 5], out=out).result()
    assert same(got, case.reference([4, 5]))


@pytest.fixture
def blocked(tmp_path):
    """An HDF5Reader (one pool thread) whose dataset is stored externally in a file replaced by
    a FIFO after the reader opened it. packread opens nothing but regular files (a FIFO given to
    it is refused at once), but an external data file is opened by libhdf5 itself, which blocks
    in open() until ``release()`` opens the FIFO for writing: a read stuck inside a batch,
    deterministically. The read then fails (the FIFO held no data), and ``release`` puts the
    real file back, so later reads succeed. Samples are 4x6 f4 rows of ``data``."""
    import h5py

    path = tmp_path / "ext.h5"
    ext = tmp_path / "external.bin"
    data = np.arange(8 * 4 * 6, dtype="<f4").reshape(8, 4, 6)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, external=[(str(ext), 0, h5py.h5f.UNLIMITED)])
        f["native"] = data
    reader = packread.HDF5Reader(path, "x", num_threads=1)
    assert reader["x"].read_path.startswith("libhdf5")
    saved = ext.read_bytes()
    ext.unlink()
    os.mkfifo(ext)

    def release():
        deadline = time.monotonic() + 30
        while True:
            try:
                os.close(os.open(ext, os.O_WRONLY | os.O_NONBLOCK))
                break
            except OSError:  # no reader has opened it yet
                assert time.monotonic() < deadline, "the read never reached open()"
                time.sleep(0.005)
        tmp = tmp_path / "external.tmp"
        tmp.write_bytes(saved)
        os.replace(tmp, ext)

    return reader, data, release


def wait_until_blocked() -> None:
    """Waits until one of packread's pool threads is blocked opening a FIFO (Linux: the thread's
    kernel wait channel says so), so that a read is known to be running, not queued."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/self/task/{task}/wchan") as f:
                    wchan = f.read().strip()
            except OSError:
                continue
            if name.startswith("packread") and ("fifo" in wchan or "partner" in wchan):
                return
        time.sleep(0.005)
    raise AssertionError("no packread thread blocked in open()")


def test_batch_async_runs_in_the_background(blocked):
    reader, _data, release = blocked
    t0 = time.monotonic()
    h = reader.batch_async([0, 3])
    assert time.monotonic() - t0 < 5  # returned while the read is stuck
    assert not h.done()
    with pytest.raises(TimeoutError):
        h.result(timeout=0.05)
    assert not h.done()
    release()
    with pytest.raises(packread.HDF5Error, match=r"ext\.h5:/?x"):
        h.result(timeout=30)
    assert h.done()
    with pytest.raises(packread.HDF5Error):  # the same error again
        h.result()


def test_result_wait_lets_signals_through(blocked):
    reader, _, release = blocked

    class Alarm(Exception):
        pass

    def on_alarm(signum, frame):
        raise Alarm

    old = signal.signal(signal.SIGALRM, on_alarm)
    h = reader.batch_async([3])
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(Alarm):
            h.result()  # no timeout: only the signal can end this wait
        assert time.monotonic() - t0 < 10
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        release()
    with pytest.raises(packread.HDF5Error):
        h.result(timeout=30)


def test_dropping_unfinished_handles_is_safe(blocked):
    reader, data, release = blocked
    out = np.full((2, 4, 6), -7.0, dtype="<f4")
    base = sys.getrefcount(out)
    h = reader.batch_async([3, 0], out=out)
    assert sys.getrefcount(out) > base  # the running read holds the array
    wait_until_blocked()
    fresh = reader.batch_async([3, 1])  # packread's own output array, held only by the read
    # The one-thread pool is busy with the first read, so this one has not started: dropped,
    # it is skipped, and leaves its out= array alone.
    queued_out = np.full((1, 4, 6), -9.0, dtype="<f4")
    queued = reader.batch_async([1], out=queued_out)
    del h, fresh, queued
    gc.collect()
    release()
    # Jobs run in order on the one-thread pool: once this one is done, the others have ended.
    good = reader.batch_async([0, 1, 2]).result(timeout=30)
    assert same(good, data[:3])
    assert (queued_out == -9.0).all()
    deadline = time.monotonic() + 10
    while sys.getrefcount(out) > base:  # released once the read ended (on the next GIL use)
        assert time.monotonic() < deadline, "the finished read still holds out="
        time.sleep(0.01)


def test_a_reader_collected_while_libhdf5_is_blocked_does_not_wait(blocked, tmp_path):
    # A reader freed by the garbage collector closes its libhdf5 file under libhdf5's lock;
    # while another read holds that lock (blocked on a FIFO whose writer is this thread), the
    # collecting thread waited forever. It hands the reader to packread's reaper instead.
    import h5py

    reader, _, release = blocked
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["y"] = np.arange(4.0)
    other = packread.HDF5Reader(tmp_path / "other.h5")
    other.cycle = other  # freed only by the collector
    del other
    pending = reader.batch_async([1])
    wait_until_blocked()
    collector = threading.Thread(target=gc.collect, daemon=True)
    collector.start()
    collector.join(10)
    assert not collector.is_alive(), "collecting a reader waited on libhdf5's lock"
    release()
    with pytest.raises(packread.HDF5Error):
        pending.result(timeout=30)


def test_many_threads_wait_on_one_handle(make_samples):
    paths = make_samples(n=20, shape=(64, 64), dtype="<f8")
    reader = packread.NpyReader(paths)
    h = reader.batch_async(range(20))
    results, errors = [], []

    def wait():
        try:
            results.append(h.result(timeout=60))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=wait) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(results) == 8
    assert all(r is results[0] for r in results)
    assert same(results[0], np.stack([np.load(p) for p in paths]))


def test_handle_inherited_by_a_fork_fails_fast(blocked, tmp_path, make_samples):
    reader, _data, release = blocked
    paths = make_samples(n=4, shape=(4, 6), dtype="<f4")
    other = packread.NpyReader(paths)  # read by pread and decode, no libhdf5 lock
    h = reader.batch_async([3])
    try:
        wait_until_blocked()

        def child():
            t0 = time.monotonic()
            assert h.done()  # it can never finish here
            with pytest.raises(InternalError, match="another process"):
                h.result()
            # A batch started in the child itself works.
            got = other.batch([0, 1])
            return np.array([time.monotonic() - t0]), got

        took, got = in_child(child, tmp_path / "child.pickle")
        assert took[0] < 10
        assert same(got, np.stack([np.load(p) for p in paths[:2]]))
    finally:
        release()
    with pytest.raises(packread.HDF5Error):
        h.result(timeout=30)
