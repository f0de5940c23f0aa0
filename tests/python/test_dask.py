"""packread.dask.from_reader: a Dask array of a reader's array, chunks on the storage's chunk
boundaries, no lock; reductions equal numpy's on Dask's threaded scheduler and on a local
distributed cluster of 2 worker processes (bound to 127.0.0.1)."""

from __future__ import annotations

import itertools

import dask
import dask.array as da
import h5py
import numpy as np
import pytest
from distributed import Client, LocalCluster

import packread
import packread.dask
from packread.errors import InvalidArgumentError, MissingKeyError, PackreadTypeError

N = 523  # a prime: no chunking divides it


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask")
    rng = np.random.default_rng(5)
    x = rng.integers(0, 255, (N, 3, 16, 16), dtype=np.uint8)
    y = rng.standard_normal((N, 8)).astype(">f4")
    path = str(root / "data.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(9, 3, 16, 16), compression="gzip")
        f.create_dataset("y", data=y, chunks=(50, 8), compression="lzf")
        f.create_dataset(
            "v", data=[np.arange(i % 4) for i in range(N)], dtype=h5py.vlen_dtype("i4")
        )
    shards = []
    for k, (a, b) in enumerate([(0, 100), (100, 101), (101, 400), (400, N)]):
        p = str(root / f"part{k}.h5")
        with h5py.File(p, "w") as f:
            f.create_dataset(
                "x", data=x[a:b], chunks=(min(9, b - a), 3, 16, 16), compression="gzip"
            )
        shards.append(p)
    return path, shards, x, y


def test_reductions_equal_numpy_on_the_threaded_scheduler(data):
    path, _, x, y = data
    reader = packread.HDF5Reader(path)
    ax = packread.dask.from_reader(reader, "x", chunk_bytes=9 * 768 * 5)
    ay = packread.dask.from_reader(reader, "y")
    with dask.config.set(scheduler="threads"):
        assert ax.shape == x.shape
        assert ax.dtype == x.dtype
        assert np.array_equal(ax.compute(), x)
        assert float(ax.mean().compute()) == pytest.approx(float(x.mean()), rel=1e-12)
        assert np.array_equal(ax.sum(axis=(1, 2, 3)).compute(), x.sum(axis=(1, 2, 3)))
        assert np.array_equal(ax.max(axis=0).compute(), x.max(axis=0))
        assert np.array_equal(ax[17:300:7, 1, 3:9].compute(), x[17:300:7, 1, 3:9])
        assert np.array_equal(ax[-1].compute(), x[-1])
        assert ay.dtype == y.dtype  # the stored byte order, as h5py and the reader give it
        assert np.array_equal(ay.compute(), y)
        assert np.allclose(ay.std(axis=0).compute(), y.astype("f8").std(axis=0), rtol=1e-5)


def test_chunks_fall_on_storage_chunks_and_shards_with_no_lock(data):
    path, shards, x, _ = data
    ax = packread.dask.from_reader(packread.HDF5Reader(path, "x"), chunk_bytes=9 * 768 * 4)
    rows = ax.chunks[0]
    assert sum(rows) == N
    assert all(r % 9 == 0 for r in rows[:-1])
    assert set(rows[:-1]) == {36}
    assert ax.chunks[1:] == ((3,), (16,), (16,))
    # No lock in the graph (h5py's from_array needs one).
    graph = dict(ax.__dask_graph__())
    assert not any("lock" in repr(v).lower() for v in graph.values())
    sx = packread.dask.from_reader(packread.HDF5Reader(shards, "x"), chunk_bytes=9 * 768 * 4)
    starts = np.cumsum([0, *sx.chunks[0]])
    shard_starts = [0, 100, 101, 400]
    for a, b in itertools.pairwise(starts):
        s = max(t for t in shard_starts if t <= a)
        assert (a - s) % 9 == 0 or a in shard_starts
        # A chunk spans shards only at shard starts, and never splits a stored chunk.
        inner = [t for t in shard_starts if a < t < b]
        assert all(b - t >= 0 for t in inner)
    assert np.array_equal(sx.compute(scheduler="threads"), x)
    # The same reader and array make the same graph names (Dask's caching keys).
    again = packread.dask.from_reader(packread.HDF5Reader(path, "x"), chunk_bytes=9 * 768 * 4)
    assert again.name == ax.name


def test_reductions_on_a_distributed_cluster_of_two_workers(data):
    path, shards, x, _ = data
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        assert all(a.startswith("tcp://127.0.0.1:") for a in client.scheduler_info()["workers"])
        ax = packread.dask.from_reader(packread.HDF5Reader(path, "x"), chunk_bytes=100_000)
        assert float(ax.mean().compute()) == pytest.approx(float(x.mean()), rel=1e-12)
        assert np.array_equal(ax.sum(axis=0).compute(), x.sum(axis=0, dtype=np.uint64))
        sx = packread.dask.from_reader(packread.HDF5Reader(shards, "x"), chunk_bytes=100_000)
        assert np.array_equal(sx[::5].compute(), x[::5])


def test_what_a_dask_array_cannot_hold_is_refused(data):
    path, *_ = data
    reader = packread.HDF5Reader(path)
    with pytest.raises(InvalidArgumentError, match="name one"):
        packread.dask.from_reader(reader)
    with pytest.raises(MissingKeyError):
        packread.dask.from_reader(reader, "nope")
    with pytest.raises(InvalidArgumentError, match="different sizes"):
        packread.dask.from_reader(reader, "v")
    with pytest.raises(PackreadTypeError):
        packread.dask.from_reader(path, "x")  # type: ignore[arg-type]
    assert isinstance(packread.dask.from_reader(packread.HDF5Reader(path, "x")), da.Array)


def test_an_open_file_computes_on_the_threaded_scheduler(data):
    path, _, x, _ = data
    with open(path, "rb") as f:
        ax = packread.dask.from_reader(packread.HDF5Reader(f, "x"))
        assert np.array_equal(ax[::3].compute(scheduler="threads"), x[::3])
