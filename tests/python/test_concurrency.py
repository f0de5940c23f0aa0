"""Readers across fork, DataLoader workers (fork and spawn), pickling and threads
(docs/BAD_INPUTS.md 28-32), and proof that batch releases the GIL."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from _helpers import assert_same, in_child, run_threads, stack

import packread

CHILD_TIMEOUT_S = 60


# --------------------------------------------------------------------------------------------
# plain fork


def test_fork_child_reads_parent_reader(samples, tmp_path):
    reader = packread.NpyReader(samples)
    idx = [15, 0, 7, 7, -2]
    got = in_child(lambda: reader.batch(idx), tmp_path / "child.npy")
    assert_same(got, reader.batch(idx))
    assert_same(got, stack(samples, idx))


def test_fork_after_parent_used_pool(make_samples, tmp_path):
    # BAD_INPUTS 29: the parent's pool threads do not exist in the child.
    paths = make_samples(n=32, shape=(16, 64), dtype=">f4")
    big = make_samples(n=2, shape=(1100, 1000), dtype="<f4", subdir="big")  # split reads
    reader = packread.NpyReader(paths)
    big_reader = packread.NpyReader(big)
    packread.set_num_threads(4)
    try:
        for _ in range(5):
            reader.batch(range(32))
            big_reader.batch([1, 0])
        want = reader.batch(np.arange(32)[::-1])
        want_big = big_reader.batch([0, 1])

        def work():
            for _ in range(50):
                assert_same(reader.batch(np.arange(32)[::-1]), want)
            assert_same(big_reader.batch([0, 1]), want_big)
            return reader.batch(np.arange(32)[::-1])

        got = in_child(work, tmp_path / "child.npy")
    finally:
        packread.set_num_threads(0)
    assert_same(got, want)
    assert_same(got, stack(paths, list(range(31, -1, -1))))


def test_fork_while_another_thread_reads(make_samples, tmp_path):
    # BAD_INPUTS 30: a parent thread is looping over batches when the parent forks.
    paths = make_samples(n=48, shape=(64, 256), dtype="<f4")
    reader = packread.NpyReader(paths)
    want = reader.batch(range(48))
    stop = threading.Event()
    started = threading.Event()
    errors = []
    count = [0]

    def loop():
        try:
            while not stop.is_set():
                got = reader.batch(range(48))
                if got.tobytes() != want.tobytes():
                    errors.append("wrong batch in the looping parent thread")
                count[0] += 1
                started.set()
        except BaseException as exc:
            errors.append(repr(exc))
            started.set()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        assert started.wait(CHILD_TIMEOUT_S)
        for k in range(4):
            got = in_child(lambda: reader.batch(range(48)), tmp_path / f"child{k}.npy")
            assert_same(got, want)
    finally:
        stop.set()
        thread.join(CHILD_TIMEOUT_S)
    assert not thread.is_alive()
    assert errors == []
    assert count[0] > 0


# A read blocked inside batch used to be made by opening a FIFO, which blocked forever; packread
# now refuses non-regular files without blocking (tests/test_hardening.py), so the fork-while-
# reading case is the loop above (many forks while a thread is inside batch).


# --------------------------------------------------------------------------------------------
# torch DataLoader workers


def _loader_result(reader, context):
    torch = pytest.importorskip("torch")
    from _datasets import NpyDataset

    loader = torch.utils.data.DataLoader(
        NpyDataset(reader),
        batch_size=4,
        shuffle=False,
        num_workers=2,
        multiprocessing_context=context,
    )
    return np.concatenate([b.numpy() for b in loader])


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers(samples, context):
    pytest.importorskip("torch")
    reader = packread.NpyReader(samples)
    want = reader.batch(range(len(samples)))  # the parent uses the pool before forking
    got = _loader_result(reader, context)
    assert_same(got, want)
    assert_same(got, stack(samples, range(16)))


# --------------------------------------------------------------------------------------------
# pickle


def test_pickle_round_trip_by_path(make_samples):
    paths = make_samples(n=8, shape=(64, 256), dtype=">i4")
    reader = packread.NpyReader(paths, max_header_size=20_000)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        blob = pickle.dumps(reader, protocol=protocol)
        # Paths only: 8 samples of 64 KiB are not in it.
        assert len(blob) < 200 * len(paths) + 1000
        assert np.load(paths[0]).tobytes()[:64] not in blob
        copy = pickle.loads(blob)
        assert isinstance(copy, packread.NpyReader)
        assert copy.paths == reader.paths
        assert copy.shape == reader.shape
        assert copy.dtype == reader.dtype
        assert len(copy) == len(reader)
        idx = [7, 0, 3, 3]
        assert_same(copy.batch(idx), reader.batch(idx))


def test_pickle_keeps_max_header_size(tmp_path):
    dtype = np.dtype([(f"field_{i:03d}", "<u1") for i in range(700)])
    path = tmp_path / "wide.npy"
    np.save(path, np.zeros(2, dtype=dtype))
    with pytest.raises(packread.LimitExceededError):
        packread.NpyReader([path])
    reader = packread.NpyReader([path], max_header_size=100_000)
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.dtype == reader.dtype
    assert_same(copy.batch([0]), reader.batch([0]))


# --------------------------------------------------------------------------------------------
# threads


def test_threads_share_one_reader(make_samples):
    # BAD_INPUTS 31: 8 threads, 20 random batches each, every result checked.
    paths = make_samples(n=40, shape=(5, 32, 3), dtype="<f8")
    paths_f = make_samples(n=40, shape=(5, 32, 3), dtype="<f8", order="F", subdir="f", seed=1)
    readers = [packread.NpyReader(paths), packread.NpyReader(paths_f)]
    wants = [stack(paths, range(40)), stack(paths_f, range(40))]
    barrier = threading.Barrier(8)
    failures = []
    done = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            barrier.wait()
            for k in range(20):
                which = int(rng.integers(2))
                idx = rng.integers(-40, 40, size=int(rng.integers(0, 24)))
                if k % 2:
                    out = np.full((len(idx), 5, 32, 3), np.nan)
                    got = readers[which].batch(idx, out=out)
                    assert got is out
                else:
                    got = readers[which].batch(idx)
                want = wants[which][idx]
                if got.shape != want.shape or got.tobytes() != want.tobytes():
                    failures.append((seed, k, idx.tolist()))
            done.append(seed)
        except BaseException as exc:
            failures.append((seed, repr(exc)))

    run_threads(work, timeout_s=CHILD_TIMEOUT_S)
    assert failures == []
    assert sorted(done) == list(range(8))


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
    try:
        proc = subprocess.run(
            [sys.executable, "-c", GIL_SCRIPT, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"batch held the GIL (deadlock): {exc.stdout!r} {exc.stderr!r}")
    assert proc.returncode == 0, proc.stderr
    assert "MAIN THREAD RAN WHILE BATCH WAS READ" in proc.stdout
    assert "OK True" in proc.stdout
