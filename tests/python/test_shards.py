"""Many files as one dataset (:class:`packread.ShardedReader`): HDF5 files, ZIP archives of raw
or ``.npy`` members and ZIP archives of images read as the concatenation of their samples,
against h5py, zipfile + numpy and the single-file readers; lazily opened shards bounded by
``max_open_shards``, the ``shard_index`` file, pickling, and the errors for shards that do not
agree, changed, are missing or hold what shards cannot read yet."""

from __future__ import annotations

import gc
import glob
import io
import json
import os
import pickle
import re
import weakref
import zipfile

import h5py
import numpy as np
import pytest
from PIL import Image

import packread
from packread.errors import (
    InconsistentError,
    PackreadFileNotFoundError,
    PackreadOSError,
)
from support.helpers import assert_same

#: Shard lengths: unequal, a single-sample shard, and an empty one.
SIZES = (1, 7, 0, 500, 3)
N = sum(SIZES)
NAMES = ["x", "y", "id"]


# --------------------------------------------------------------------------------------------
# Fixtures


def write_h5_shard(path, start: int, n: int, *, x_dtype="<f4", x_shape=(4, 5), vlen=False):
    """One HDF5 shard of ``n`` samples: ``x`` gzip-compressed one sample per chunk, ``y``
    gzip-compressed (with the shuffle filter) 8 samples per chunk, ``id`` the global index of
    each sample, 16 per chunk. Written beside and moved into place, so that a shard a reader
    still holds open can be replaced."""
    rng = np.random.default_rng(1000 + start * 7 + n)
    tmp = f"{path}.tmp"
    with h5py.File(tmp, "w") as f:
        x = rng.standard_normal((n, *x_shape)).astype(x_dtype)
        f.create_dataset(
            "x",
            data=x,
            chunks=(1, *x_shape),
            maxshape=(None, *x_shape),
            compression="gzip",
        )
        y = rng.integers(-300, 300, (n, 3)).astype("<i2")
        f.create_dataset(
            "y", data=y, chunks=(8, 3), maxshape=(None, 3), compression="gzip", shuffle=True
        )
        ids = np.arange(start, start + n, dtype="<i8")
        f.create_dataset("id", data=ids, chunks=(16,), maxshape=(None,), compression="gzip")
        if vlen:
            v = f.create_dataset("v", (n,), dtype=h5py.vlen_dtype(np.dtype("u1")))
            for i in range(n):
                v[i] = np.arange(i % 5 + 1, dtype="u1")
    os.replace(tmp, path)
    return path


def write_h5_shards(folder, sizes=SIZES, prefix="train", **kw) -> list[str]:
    """``folder/<prefix>_<k>.h5`` for each of ``sizes``, written last first (so that the
    folder's own order is not the sorted order a glob gives); the paths in shard order."""
    os.makedirs(folder, exist_ok=True)
    starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    paths = [os.path.join(folder, f"{prefix}_{k:02d}.h5") for k in range(len(sizes))]
    for k in reversed(range(len(sizes))):
        write_h5_shard(paths[k], starts[k], sizes[k], **kw)
    return paths


def h5py_concat(paths, names=NAMES) -> dict[str, np.ndarray]:
    """The reference: each shard read whole by h5py, concatenated in the order given."""
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for p in paths:
        with h5py.File(p, "r") as f:
            for n in names:
                parts[n].append(f[n][()])
    return {n: np.concatenate(parts[n]) for n in names}


def starts_of(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def shards_touched(idx, lengths) -> set[int]:
    starts = starts_of(lengths)
    n = int(starts[-1])
    return set((np.searchsorted(starts, np.asarray(idx) % n, side="right") - 1).tolist())


def crossing_batches(lengths, seed: int, count: int = 20) -> list[np.ndarray]:
    """``count`` batches of indices (seeded) that each cross shard boundaries, with negative
    indices and duplicates, in no particular order."""
    starts = starts_of(lengths)
    n = int(starts[-1])
    # The last sample of a shard and the first of the next, for every boundary with samples.
    edges = sorted({int(s) + d for s in starts[1:-1] for d in (-1, 0) if 0 <= int(s) + d < n})
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        idx = rng.integers(-n, n, size=int(rng.integers(1, 30))).tolist()
        near = rng.choice(edges, size=3).tolist()
        idx += [near[0], near[1] - n, near[2]]  # one as a negative index
        idx += idx[:2]  # duplicates
        idx.append(-1)
        idx = np.asarray(rng.permutation(idx), dtype=np.int64)
        assert len(shards_touched(idx, lengths)) >= 2
        batches.append(idx)
    return batches


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def h5_shards(tmp_path_factory) -> list[str]:
    """The shards of ``SIZES`` (read only: tests that change shards make their own)."""
    return write_h5_shards(str(tmp_path_factory.mktemp("h5shards")))


@pytest.fixture(scope="module")
def h5_ref(h5_shards) -> dict[str, np.ndarray]:
    return h5py_concat(h5_shards)


# --------------------------------------------------------------------------------------------
# HDF5 shards against h5py


@pytest.mark.parametrize("form", ["list", "permuted_list", "glob"])
def test_hdf5_shards_read_as_h5py_concatenated(h5_shards, form):
    if form == "list":
        paths = list(h5_shards)
        source = paths
    elif form == "permuted_list":
        paths = [h5_shards[k] for k in (3, 0, 4, 2, 1)]  # the order given is kept
        source = paths
    else:
        paths = sorted(glob.glob(os.path.join(os.path.dirname(h5_shards[0]), "train_*.h5")))
        assert paths == h5_shards
        source = os.path.join(os.path.dirname(h5_shards[0]), "train_*.h5")
    ref = h5py_concat(paths)
    lengths = [len(h5py_concat([p], ["id"])["id"]) for p in paths]
    r = packread.HDF5Reader(source, NAMES)
    assert isinstance(r, packread.ShardedReader)
    assert len(r) == N
    assert r.shard_lengths == lengths
    assert r.keys() == NAMES
    assert r.shape == {"x": (4, 5), "y": (3,), "id": ()}
    assert r.dtype == {"x": np.dtype("<f4"), "y": np.dtype("<i2"), "id": np.dtype("<i8")}
    starts = starts_of(lengths).tolist()
    assert r.shards == [
        packread.Shard(p, range(starts[k], starts[k + 1])) for k, p in enumerate(paths)
    ]
    assert [s.path for s in r.shards] == paths
    assert sum(len(s.range) for s in r.shards) == N
    for idx in crossing_batches(lengths, seed=len(form)):
        got = r.batch(idx)
        assert list(got) == NAMES
        for name in NAMES:
            assert_same(got[name], ref[name][idx])
    # The whole of it, in order, and an empty batch.
    whole = r.batch(np.arange(N))
    for name in NAMES:
        assert_same(whole[name], ref[name])
    assert r.batch([])["x"].shape == (0, 4, 5)
    # One dataset: the batch is that array.
    single = packread.HDF5Reader(source, "x")
    idx = np.array([-1, 0, 1, 8, 7, 507, 508, -3, 8])
    assert_same(single.batch(idx), ref["x"][idx])


def test_out_and_batch_async(h5_shards, h5_ref):
    r = packread.HDF5Reader(h5_shards, NAMES)
    idx = np.array([0, 1, 7, 8, 507, 508, -1, 0])
    out = {
        "x": np.full((len(idx), 4, 5), np.nan, dtype="<f4"),
        "y": np.zeros((len(idx), 3), dtype="<i2"),
        "id": np.zeros(len(idx), dtype="<i8"),
    }
    got = r.batch(idx, out=out)
    for name in NAMES:
        assert got[name] is out[name]
        assert_same(out[name], h5_ref[name][idx])
    pending = r.batch_async(idx[::-1])
    assert isinstance(pending, packread.PendingBatch)
    result = pending.result()
    for name in NAMES:
        assert_same(result[name], h5_ref[name][idx[::-1]])
    # A single-array reader into out=, asynchronously.
    single = packread.HDF5Reader(h5_shards, "y")
    buf = np.zeros((len(idx), 3), dtype="<i2")
    assert single.batch_async(idx, out=buf).result() is buf
    assert_same(buf, h5_ref["y"][idx])
    with pytest.raises(packread.InvalidArgumentError):
        single.batch(idx, out=np.zeros((len(idx) + 1, 3), dtype="<i2"))


def test_out_of_range_indices_are_refused(h5_shards):
    r = packread.HDF5Reader(h5_shards, "id")
    assert r.batch([-N, N - 1]).tolist() == [0, N - 1]
    for bad in (N, -N - 1):
        with pytest.raises(packread.IndexOutOfRangeError):
            r.batch([0, bad])


def test_max_open_shards_bounds_the_open_files(h5_shards, h5_ref):
    r = packread.HDF5Reader(h5_shards, NAMES, max_open_shards=2)
    assert r.open_shards <= 2
    seen: set[int] = set()
    for idx in crossing_batches(SIZES, seed=7, count=60):
        got = r.batch(idx)
        for name in NAMES:
            assert_same(got[name], h5_ref[name][idx])
        assert r.open_shards <= 2
        seen |= shards_touched(idx, SIZES)
    assert seen == {0, 1, 3, 4}  # every shard holding samples was opened (and closed) again
    # A batch touching every shard at once still reads right, and leaves at most 2 open.
    idx = np.array([0, 1, 8, 508, 2, 9, 509])
    assert r.batch(idx)["id"].tolist() == [0, 1, 8, 508, 2, 9, 509]
    assert r.open_shards <= 2
    with pytest.raises(packread.InvalidArgumentError):
        packread.HDF5Reader(h5_shards, "x", max_open_shards=0)


def test_descriptors_stay_bounded_reading_30_shards(tmp_path):
    sizes = [4] * 30
    paths = write_h5_shards(str(tmp_path / "many"), sizes)
    ref = h5py_concat(paths)
    base = fd_count()
    r = packread.HDF5Reader(str(tmp_path / "many" / "train_*.h5"), NAMES, max_open_shards=3)
    assert r.open_shards <= 3
    most = fd_count() - base
    seen: set[int] = set()
    rng = np.random.default_rng(3)
    for _ in range(80):
        idx = rng.integers(-120, 120, size=int(rng.integers(1, 9)))
        got = r.batch(idx)
        for name in NAMES:
            assert_same(got[name], ref[name][idx])
        assert r.open_shards <= 3
        most = max(most, fd_count() - base)
        seen |= shards_touched(idx, sizes)
    assert len(seen) == 30  # every shard was read
    # 3 open shards (a couple of descriptors each), never one per shard read.
    assert most <= 3 * 3, most


# --------------------------------------------------------------------------------------------
# The index file, pickling


def test_shard_index_is_written_then_reused(tmp_path):
    paths = write_h5_shards(str(tmp_path / "s"))
    ref = h5py_concat(paths)
    index = tmp_path / "index.json"
    first = packread.HDF5Reader(paths, NAMES, shard_index=index)
    assert index.exists()
    saved = json.loads(index.read_text())
    assert saved["state"]["lengths"] == list(SIZES)
    again = packread.HDF5Reader(paths, NAMES, shard_index=str(index))
    assert again.open_shards == 0  # nothing opened: the lengths came from the index
    assert again.shard_lengths == list(SIZES) == first.shard_lengths
    assert again.shards == first.shards
    assert again.dtype == first.dtype
    assert again.shape == first.shape
    idx = np.array([508, 0, -1, 7, 8, 8, 1])
    got = again.batch(idx)
    for name in NAMES:
        assert_same(got[name], ref[name][idx])
    assert again.open_shards == 4  # opened by the batch, as it touched them
    # An index written for other options is not taken for this reader's.
    other = packread.HDF5Reader(paths, "y", shard_index=index)
    assert other.keys() == ["y"]
    assert_same(other.batch(idx), ref["y"][idx])


def test_stale_shard_index_is_rebuilt(tmp_path):
    paths = write_h5_shards(str(tmp_path / "s"))
    index = tmp_path / "index.json"
    packread.HDF5Reader(paths, NAMES, shard_index=index)
    assert json.loads(index.read_text())["state"]["lengths"] == list(SIZES)
    write_h5_shard(paths[1], 1, 11)  # shard 1 now holds 11 samples, not 7
    ref = h5py_concat(paths)
    rebuilt = packread.HDF5Reader(paths, NAMES, shard_index=index)
    assert rebuilt.open_shards > 0  # counted again
    assert rebuilt.shard_lengths == [1, 11, 0, 500, 3]
    assert len(rebuilt) == N + 4
    assert json.loads(index.read_text())["state"]["lengths"] == [1, 11, 0, 500, 3]
    idx = np.array([0, 1, 11, 12, -1, 5])
    got = rebuilt.batch(idx)
    for name in NAMES:
        assert_same(got[name], ref[name][idx])
    # ... and reused from then on.
    assert packread.HDF5Reader(paths, NAMES, shard_index=index).open_shards == 0


# BAD_INPUTS 53, 67
@pytest.mark.parametrize("damage", ["nested", "bad-json", "hand-edited", "huge-label"])
def test_a_damaged_shard_index_is_rebuilt(tmp_path, damage):
    paths = write_h5_shards(str(tmp_path / "s"))
    ref = h5py_concat(paths)
    index = tmp_path / "index.json"
    packread.HDF5Reader(paths, NAMES, shard_index=index)
    saved = json.loads(index.read_text())
    if damage == "nested":  # json.load raised RecursionError
        index.write_text("[" * 100_000 + "]" * 100_000)
    elif damage == "bad-json":
        index.write_text(index.read_text()[:-7])
    elif damage == "hand-edited":  # the key still matches: its state was trusted (TypeError)
        saved["state"]["lengths"] = [str(n) for n in saved["state"]["lengths"]]
        index.write_text(json.dumps(saved))
    else:
        saved["state"]["arrays"][0][1] = {"no": "dtype"}
        index.write_text(json.dumps(saved))
    rebuilt = packread.HDF5Reader(paths, NAMES, shard_index=index)
    assert rebuilt.open_shards > 0  # counted again
    idx = np.array([508, 0, -1, 7, 8])
    got = rebuilt.batch(idx)
    for name in NAMES:
        assert_same(got[name], ref[name][idx])
    assert json.loads(index.read_text())["state"]["lengths"] == list(SIZES)


# BAD_INPUTS 67
def test_a_shard_index_path_that_cannot_hold_one_is_refused_naming_it(tmp_path):
    paths = write_h5_shards(str(tmp_path / "s"))
    folder = tmp_path / "index.json"
    folder.mkdir()
    with pytest.raises(packread.errors.PackreadIsADirectoryError, match=re.escape(str(folder))):
        packread.HDF5Reader(paths, NAMES, shard_index=folder)
    missing = tmp_path / "no_such_folder" / "index.json"
    with pytest.raises(PackreadFileNotFoundError, match=r"no_such_folder.*does not exist"):
        packread.HDF5Reader(paths, NAMES, shard_index=missing)
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o500)
    try:
        if not os.access(readonly, os.W_OK):  # root may write anyway
            with pytest.raises(packread.errors.PackreadPermissionError, match="cannot write"):
                packread.HDF5Reader(paths, NAMES, shard_index=readonly / "index.json")
    finally:
        readonly.chmod(0o700)


# BAD_INPUTS 38
def test_a_shard_index_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    import subprocess
    import sys
    import textwrap

    paths = write_h5_shards(str(tmp_path / "s"))
    fifo = tmp_path / "index.fifo"
    os.mkfifo(fifo)
    code = textwrap.dedent(
        f"""
        import packread
        try:
            packread.HDF5Reader({paths!r}, "x", shard_index={str(fifo)!r})
        except packread.errors.PackreadOSError as e:
            assert "not a regular file (a FIFO)" in str(e), e
            print("refused")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "refused", out.stderr


def test_a_batch_never_holds_more_shards_open_than_max_open_shards(tmp_path):
    # BAD_INPUTS 55: one batch of 100 samples in 100 shards kept all 100 open (EMFILE under
    # `ulimit -n 128`, whatever max_open_shards said). Run in a child, whose limit is lowered.
    import subprocess
    import sys
    import textwrap

    folder = tmp_path / "tiny"
    paths = write_h5_shards(str(folder), [1] * 300, prefix="t")
    code = textwrap.dedent(
        f"""
        import resource, numpy as np, h5py, packread
        paths = {paths!r}
        want = np.concatenate([h5py.File(p)["id"][()] for p in paths])
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
        r = packread.HDF5Reader(paths, "id")
        idx = list(range(0, 300, 3))
        got = r.batch(idx)
        assert r.open_shards <= r._max_open == 16, r.open_shards
        assert (got == want[idx]).all()
        print("read", len(idx))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.stdout.strip() == "read 100", out.stderr[-2000:]


@pytest.mark.parametrize("max_open", [1, 2, 3])
def test_batches_over_more_shards_than_may_be_open_read_right(h5_shards, h5_ref, max_open):
    r = packread.HDF5Reader(h5_shards, NAMES, max_open_shards=max_open)
    rng = np.random.default_rng(max_open)
    for _ in range(10):
        idx = rng.integers(-N, N, size=40)
        got = r.batch(idx)
        for name in NAMES:
            assert_same(got[name], h5_ref[name][idx])
        assert r.open_shards <= max_open


def test_pickle_carries_the_lengths(h5_shards, h5_ref):
    r = packread.HDF5Reader(h5_shards, NAMES, max_open_shards=3)
    copy = pickle.loads(pickle.dumps(r))
    assert isinstance(copy, packread.ShardedReader)
    assert copy.open_shards == 0
    assert len(copy) == N
    assert copy.shard_lengths == list(SIZES)
    assert copy.shards == r.shards
    assert copy.keys() == NAMES
    for idx in crossing_batches(SIZES, seed=11, count=5):
        got = copy.batch(idx)
        for name in NAMES:
            assert_same(got[name], h5_ref[name][idx])
        assert 0 < copy.open_shards <= 3  # the bound travelled too


# --------------------------------------------------------------------------------------------
# Shards that do not agree, changed, are missing, or cannot be read as shards


@pytest.mark.parametrize("difference", ["dtype", "shape", "names"])
def test_a_shard_holding_other_arrays_is_named(tmp_path, difference):
    paths = write_h5_shards(str(tmp_path / "s"))
    bad = paths[3]
    if difference == "dtype":
        write_h5_shard(bad, 8, 500, x_dtype="<f8")
        datasets, said = NAMES, "float64"
    elif difference == "shape":
        write_h5_shard(bad, 8, 500, x_shape=(5, 4))
        datasets, said = NAMES, "(5, 4)"
    else:
        with h5py.File(bad, "a") as f:
            f["z"] = np.zeros(500, dtype="<i4")
        datasets, said = None, "'z'"
    with pytest.raises(InconsistentError, match=re.escape(bad)) as err:
        packread.HDF5Reader(paths, datasets)
    assert said in str(err.value)
    # The others alone are fine.
    assert len(packread.HDF5Reader(paths[:3] + paths[4:], datasets)) == N - 500


def test_a_shard_changed_after_an_index_was_written_is_checked_when_opened(tmp_path):
    paths = write_h5_shards(str(tmp_path / "s"))
    index = tmp_path / "index.json"
    packread.HDF5Reader(paths, NAMES, shard_index=index)
    reopened = packread.HDF5Reader(paths, NAMES, shard_index=index)
    assert reopened.open_shards == 0
    write_h5_shard(paths[1], 1, 7, x_dtype="<f8")  # same length, other dtype
    assert reopened.batch([0, 8])["id"].tolist() == [0, 8]
    with pytest.raises(InconsistentError, match=re.escape(paths[1])):
        reopened.batch([0, 2])


@pytest.mark.parametrize("how", ["closed_by_the_lru", "pickled", "index_reopened"])
def test_a_shard_whose_length_changed_raises_when_a_batch_opens_it(tmp_path, how):
    paths = write_h5_shards(str(tmp_path / "s"))
    index = tmp_path / "index.json"
    if how == "closed_by_the_lru":
        reader = packread.HDF5Reader(paths, NAMES, max_open_shards=1)
        reader.batch([1])  # shard 1 read once ...
        reader.batch([8])  # ... and closed: shard 3 took its place
        assert reader.open_shards == 1
    elif how == "pickled":
        blob = pickle.dumps(packread.HDF5Reader(paths, NAMES))
    else:
        packread.HDF5Reader(paths, NAMES, shard_index=index)
        reader = packread.HDF5Reader(paths, NAMES, shard_index=index)
        assert reader.open_shards == 0
    write_h5_shard(paths[1], 1, 9)  # 9 samples where 7 were counted
    if how == "pickled":
        reader = pickle.loads(blob)
        assert reader.open_shards == 0
    assert reader.batch([0, 508])["id"].tolist() == [0, 508]  # other shards still read
    with pytest.raises(PackreadOSError, match=re.escape(paths[1])) as err:
        reader.batch([0, 3])
    assert "9" in str(err.value)
    assert "7" in str(err.value)


def test_variable_length_datasets_read_over_shards_as_h5py_reads_them(tmp_path):
    # Issue 29: vlen datasets were refused over shards; each sample now comes from its shard.
    paths = write_h5_shards(str(tmp_path / "s"), sizes=(3, 0, 5), vlen=True)
    want = []
    for p in paths:
        with h5py.File(p, "r") as f:
            want += [np.asarray(v) for v in f["v"][()]]
    r = packread.HDF5Reader(paths, ["x", "v"])
    assert r.ragged_keys == ["v"]
    idx = [0, -1, 3, 2, 3]
    got = r.batch(idx)
    assert len(got["v"]) == len(idx)
    for g, k in zip(got["v"], idx, strict=True):
        assert_same(g, want[k])
    ref = h5py_concat(paths, ["x"])
    assert_same(got["x"], ref["x"][idx])
    assert packread.HDF5Reader(paths, "id").batch([0, -1, 3]).tolist() == [0, 7, 3]


def test_a_missing_shard_is_named(tmp_path):
    paths = write_h5_shards(str(tmp_path / "s"), sizes=(3, 5, 2))
    missing = str(tmp_path / "s" / "train_99.h5")
    with pytest.raises(PackreadFileNotFoundError, match=re.escape(missing)):
        packread.HDF5Reader([*paths, missing], "id")
    pattern = str(tmp_path / "s" / "nothing_*.h5")
    with pytest.raises(PackreadFileNotFoundError, match=re.escape(pattern)):
        packread.HDF5Reader(pattern, "id")
    # Removed after the reader was made, before a batch opened it again.
    r = packread.HDF5Reader(paths, "id", max_open_shards=1)
    assert r.batch([0, 3]).tolist() == [0, 3]
    assert r.batch([8]).tolist() == [8]  # shard 2 open, shard 1 closed
    os.remove(paths[1])
    assert r.batch([9, 0]).tolist() == [9, 0]
    with pytest.raises(PackreadFileNotFoundError, match=re.escape(paths[1])):
        r.batch([4])


def test_a_missing_shard_with_an_index_file_raises_packreads_error(tmp_path):
    paths = write_h5_shards(str(tmp_path / "s"), sizes=(3, 5, 2))
    index = tmp_path / "index.json"
    packread.HDF5Reader(paths, "id", shard_index=index)
    os.remove(paths[1])
    with pytest.raises(PackreadFileNotFoundError, match=re.escape(paths[1])):
        packread.HDF5Reader(paths, "id", shard_index=index)


def test_close_releases_the_shards_files(tmp_path):
    paths = write_h5_shards(str(tmp_path / "s"), sizes=(3, 5, 2, 4))
    gc.collect()  # earlier tests' garbage closes its files now, not during the count
    base = fd_count()
    r = packread.HDF5Reader(paths, "id")
    assert r.open_shards == 4
    assert fd_count() > base
    r.close()
    assert r.closed
    gc.collect()
    assert fd_count() == base


def test_a_dropped_reader_is_freed_with_its_files(tmp_path):
    paths = write_h5_shards(str(tmp_path / "s"), sizes=(3, 5, 2, 4))
    gc.collect()  # earlier tests' garbage closes its files now, not during the count
    base = fd_count()
    r = packread.HDF5Reader(paths, "id")
    alive = weakref.ref(r)
    del r
    gc.collect()
    assert alive() is None
    assert fd_count() == base


# --------------------------------------------------------------------------------------------
# ZIP shards: raw members and .npy members


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


@pytest.fixture(scope="module")
def zip_shards(tmp_path_factory):
    """Raw archives ``raw_<k>.zip`` (every member a sample, stored or deflated; one archive
    empty) and ``.npy`` archives ``npy_<k>.zip`` (beside a member that is not a sample)."""
    folder = tmp_path_factory.mktemp("zipshards")
    rng = np.random.default_rng(5)
    raw_paths, npy_paths = [], []
    for k, n in enumerate((2, 0, 9, 1, 4)):
        raw = folder / f"raw_{k}.zip"
        with zipfile.ZipFile(raw, "w") as z:
            for i in range(n):
                a = rng.integers(-3000, 3000, (3, 4)).astype("<i2")
                method = zipfile.ZIP_DEFLATED if i % 2 else zipfile.ZIP_STORED
                z.writestr(f"s{i:03d}.raw", a.tobytes(), compress_type=method)
        raw_paths.append(str(raw))
    for k, n in enumerate((3, 6, 1)):
        npy = folder / f"npy_{k}.zip"
        with zipfile.ZipFile(npy, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("README.txt", "not a sample")
            for i in range(n):
                z.writestr(f"img/{i:03d}.npy", _npy(rng.standard_normal((2, 3)).astype("<f8")))
        npy_paths.append(str(npy))
    return str(folder), raw_paths, npy_paths


def zipfile_samples(paths, pattern, load) -> np.ndarray:
    """The reference: each archive's members matching ``pattern`` (in archive order) read by
    zipfile and turned into arrays by ``load``, concatenated."""
    out = []
    for p in paths:
        with zipfile.ZipFile(p) as z:
            for info in z.infolist():
                if re.fullmatch(pattern, info.filename):
                    out.append(load(z.read(info)))
    return np.stack(out)


def test_zip_shards_of_raw_members(zip_shards):
    folder, paths, _ = zip_shards
    ref = zipfile_samples(
        paths, r"s\d+\.raw", lambda b: np.frombuffer(b, dtype="<i2").reshape(3, 4)
    )
    r = packread.ZipReader(os.path.join(folder, "raw_*.zip"), shape=(3, 4), dtype="<i2")
    assert isinstance(r, packread.ShardedReader)
    assert r.shard_lengths == [2, 0, 9, 1, 4]
    assert len(r) == len(ref) == 16
    assert r.shape == (3, 4)
    assert r.dtype == np.dtype("<i2")
    for idx in crossing_batches(r.shard_lengths, seed=2):
        assert_same(r.batch(idx), ref[idx])
    out = np.zeros((4, 3, 4), dtype="<i2")
    idx = [1, 2, -5, 0]
    assert r.batch(idx, out=out) is out
    assert_same(out, ref[idx])
    assert_same(r.batch_async([11, 12, 11]).result(), ref[[11, 12, 11]])


def test_zip_shards_of_npy_members(zip_shards):
    _, _, paths = zip_shards
    ref = zipfile_samples(paths, r"img/\d+\.npy", lambda b: np.load(io.BytesIO(b)))
    r = packread.ZipReader(paths, members="img/*.npy", max_open_shards=1)
    assert r.shard_lengths == [3, 6, 1]
    assert r.shape == (2, 3)
    assert r.dtype == np.dtype("<f8")
    for idx in crossing_batches(r.shard_lengths, seed=4):
        assert_same(r.batch(idx), ref[idx])
        assert r.open_shards <= 1
    copy = pickle.loads(pickle.dumps(r))
    assert copy.open_shards == 0
    assert_same(copy.batch([-1, 0, 3]), ref[[-1, 0, 3]])


def test_zip_shards_of_other_dtypes_are_named(tmp_path, zip_shards):
    _, _, paths = zip_shards
    bad = str(tmp_path / "bad.zip")
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("img/000.npy", _npy(np.zeros((2, 3), dtype="<f4")))
    with pytest.raises(InconsistentError, match=re.escape(bad)):
        packread.ZipReader([paths[0], bad], members="img/*.npy")


# --------------------------------------------------------------------------------------------
# Image shards


def _image(rng, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(buf, fmt)
    return buf.getvalue()


def write_image_folder_zip(path, classes, per_class: int, seed: int) -> str:
    """A ZIP holding an ``ImageFolder`` tree ``root/<class>/<file>``: PNGs and JPEGs."""
    rng = np.random.default_rng(seed)
    with zipfile.ZipFile(path, "w") as z:
        for c in classes:
            for i in range(per_class):
                fmt = "PNG" if i % 2 else "JPEG"
                z.writestr(f"root/{c}/{i:02d}.{fmt.lower()}", _image(rng, fmt))
    return str(path)


@pytest.fixture(scope="module")
def image_zips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("imageshards")
    a = write_image_folder_zip(folder / "part_a.zip", ["cat", "dog"], 2, seed=1)
    b = write_image_folder_zip(folder / "part_b.zip", ["cat", "dog"], 3, seed=2)
    other = write_image_folder_zip(folder / "other.zip", ["cat", "eel"], 1, seed=3)
    return str(folder), a, b, other


def test_image_shards_equal_each_archive_read_alone(image_zips):
    folder, a, b, _ = image_zips
    alone = [packread.ImageReader(p, size=8) for p in (a, b)]
    want = np.concatenate([x.batch(np.arange(len(x)))["images"] for x in alone])
    labels = np.concatenate([x.labels for x in alone])
    assert alone[0].classes == alone[1].classes == ["cat", "dog"]
    for source in ([a, b], os.path.join(folder, "part_*.zip")):
        r = packread.ImageReader(source, size=8)
        assert type(r) is packread.ImageReader  # issue 29: a reader keeps its class
        assert r.shard_lengths == [4, 6]
        assert r.classes == ["cat", "dog"]
        assert r.labels.tolist() == labels.tolist() == [0, 0, 1, 1, 0, 0, 0, 1, 1, 1]
        assert r.shape == {"images": (8, 8, 3), "labels": ()}
        got = r.batch(np.arange(len(r)))
        assert_same(got["images"], want)
        assert got["labels"].tolist() == labels.tolist()
        for idx in crossing_batches(r.shard_lengths, seed=8, count=5):
            assert_same(r.batch(idx)["images"], want[idx])
    # Random crops: an epoch repeats its crops, another epoch draws others.
    r = packread.ImageReader([a, b], size=6, crop="random", seed=3, arrays="images")
    idx = [0, 4, 9]
    assert_same(r.batch(idx, epoch=2), r.batch(idx, epoch=2))
    assert not np.array_equal(r.batch(np.arange(10), epoch=0), r.batch(np.arange(10), epoch=1))


# BAD_INPUTS 46
def test_images_skipped_over_shards_are_reported_as_from_one_archive(tmp_path, image_zips):
    # The sharded reader had no `errors` and gave no warning: images replaced silently.
    _, a, b, _ = image_zips
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(b) as zin, zipfile.ZipFile(broken, "w") as zout:
        for k, info in enumerate(sorted(zin.infolist(), key=lambda i: i.filename)):
            data = zin.read(info)
            zout.writestr(info.filename, data[: len(data) // 3] if k == 1 else data)
    whole = packread.ImageReader([a, str(broken)], size=16, on_error="skip", arrays="images")
    alone = packread.ImageReader(str(broken), size=16, on_error="skip", arrays="images")
    first = len(packread.ImageReader(a, size=16))
    with pytest.warns(RuntimeWarning, match="did not decode") as caught:
        got = whole.batch(range(len(whole)))
    assert len(caught) == 1
    with pytest.warns(RuntimeWarning):
        own = alone.batch(range(len(alone)))
    assert list(alone.errors) == [1]
    assert list(whole.errors) == [first + 1]
    assert str(broken) in whole.errors[first + 1]
    assert alone.errors[1] in whole.errors[first + 1]
    assert_same(got[first:], own)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per reader
        whole.batch([first + 1])
    hdf5 = packread.HDF5Reader(write_h5_shards(str(tmp_path / "h"), [2, 3]), "x")
    assert hdf5.errors == {}


def test_image_shards_with_other_classes_are_refused(image_zips):
    _, a, _, other = image_zips
    with pytest.raises(InconsistentError, match=re.escape(other)) as err:
        packread.ImageReader([a, other], size=8)
    assert "eel" in str(err.value)


@pytest.mark.parametrize("size", [None, "default"])
def test_image_shards_at_their_own_sizes_read_as_each_archive_alone(image_zips, size):
    # They were refused; each image now comes at its own size from its shard (issue 29).
    _, a, b, _ = image_zips
    kw = {} if size == "default" else {"size": size}
    alone = [packread.ImageReader(p, **kw) for p in (a, b)]
    want = [img for x in alone for img in x.batch(np.arange(len(x)))["images"]]
    r = packread.ImageReader([a, b], **kw)
    assert r.ragged_keys == ["images"]
    idx = [9, 0, 4, 5, 3]
    got = r.batch(idx)
    assert got["labels"].tolist() == r.labels[idx].tolist()
    for g, k in zip(got["images"], idx, strict=True):
        assert_same(g, want[k])


# --------------------------------------------------------------------------------------------
# open_reader


def test_open_opens_lists_and_globs_as_shards_of_their_format(h5_shards, h5_ref, zip_shards):
    r = packread.open(h5_shards, arrays="x")
    assert type(r) is packread.HDF5Reader
    assert len(r) == N
    assert_same(r.batch([-1, 0, 8]), h5_ref["x"][[-1, 0, 8]])
    folder, _, npy_paths = zip_shards
    z = packread.open(os.path.join(folder, "npy_*.zip"), members="img/*.npy")
    assert type(z) is packread.ZipReader
    assert [s.path for s in z.shards] == npy_paths
    assert len(z) == 10
    raw = packread.open(os.path.join(folder, "raw_*.zip"), shape=(3, 4), dtype="<i2")
    assert raw.shard_lengths == [2, 0, 9, 1, 4]
    # One file is the same class.
    assert type(packread.open(h5_shards[0], arrays="x")) is packread.HDF5Reader
    assert type(packread.open(npy_paths[0], members="img/*.npy")) is packread.ZipReader
    # The deprecated name still opens, with a warning.
    with pytest.warns(DeprecationWarning, match="open_reader"):
        old = packread.open_reader(h5_shards, "x")
    assert_same(old.batch([-1, 0]), h5_ref["x"][[-1, 0]])
