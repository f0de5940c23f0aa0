"""packread.torch over object storage (issue 17): ``PackDataset(url)`` read through DataLoader
workers of every start method (fork, spawn, forkserver) gives exactly the epochs of the same
dataset over the local files, with the endpoint from the environment or from
``storage_options``; HDF5, ZIP, NPY globs, images and S3 globs of shards; and a 2-rank gloo
group, two workers a rank, over an S3 glob of shards."""

from __future__ import annotations

import contextlib
import io
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import packread
from packread.torch import PackDataset
from support.objstore import MotoS3, nginx_http, s3_fixture  # noqa: F401  (`s3` fixture)
from support.shardranks import write_id_shards
from support.torchdata import rank_main, run_gloo_ranks, write_ids

#: Samples: divisible by none of the batch sizes, worker or rank counts used.
N = 53
BATCH = 8
SHARD_SIZES = (5, 0, 17, 9, 22)

#: DataLoader workers and their start method (0: read in the test's process).
LOADERS = [(0, None), (2, "fork"), (2, "spawn"), (2, "forkserver")]
LOADER_IDS = ["in-process", "fork", "spawn", "forkserver"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """``ids.h5`` (``id`` 0..N and ``x`` per id, gzip chunks of 4), a ZIP of the ``x``
    samples as deflated ``.npy`` members, the same as ``.npy`` files, and HDF5 shards of ids
    (one empty)."""
    root = tmp_path_factory.mktemp("torch-remote")
    write_ids(str(root / "ids.h5"), N, chunk=4)
    x = (np.arange(N * 6, dtype="<f4") * 0.5).reshape(N, 2, 3)
    (root / "npy").mkdir()
    with zipfile.ZipFile(root / "x.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(N):
            buf = io.BytesIO()
            np.save(buf, x[i])
            z.writestr(f"{i:03d}.npy", buf.getvalue())
            np.save(root / "npy" / f"{i:03d}.npy", x[i])
    write_id_shards(str(root / "shards"), SHARD_SIZES)
    return root


@pytest.fixture(scope="module")
def bucket(s3: MotoS3, root: Path) -> str:
    name = s3.bucket("torch")
    client = s3.client()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            client.put_object(
                Bucket=name, Key=path.relative_to(root).as_posix(), Body=path.read_bytes()
            )
    return name


@pytest.fixture(scope="module")
def http(root: Path):
    with nginx_http(root) as server:
        yield server


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("index-cache")


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, s3: MotoS3, cache_dir: Path) -> None:
    """The endpoint and credentials as AWS's tools read them, and the index cache, set before
    any loader starts (spawned and forkserver workers read their environment at start) and
    restored after the test."""
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PACKREAD_CACHE_DIR", str(cache_dir))


def read_epochs(ds: Any, workers: int, context: str | None, epochs: int = 1) -> list[list[Any]]:
    """Every batch of ``epochs`` epochs through a DataLoader, as numpy arrays (dicts kept)."""
    loader = DataLoader(
        ds,
        batch_size=None,
        num_workers=workers,
        multiprocessing_context=context if workers else None,
        timeout=120 if workers else 0,
    )
    return [[to_numpy(b) for b in loader] for _ in range(epochs)]


def to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    return value


def assert_same(got: Any, want: Any, where: str = "batch") -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        assert list(got) == list(want), (where, list(got), list(want))
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
        return
    assert isinstance(got, np.ndarray), (where, type(got))
    assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
    assert got.shape == want.shape, (where, got.shape, want.shape)
    assert got.tobytes() == want.tobytes(), where


def assert_same_epochs(got: list[list[Any]], want: list[list[Any]]) -> None:
    assert len(got) == len(want)
    for e, (g, w) in enumerate(zip(got, want, strict=True)):
        assert len(g) == len(w), (e, len(g), len(w))
        for k, (gb, wb) in enumerate(zip(g, w, strict=True)):
            assert_same(gb, wb, f"epoch {e} batch {k}")


def ids_of(epoch: list[Any]) -> list[int]:
    return [int(i) for b in epoch for i in (b["id"] if isinstance(b, dict) else b)]


# --------------------------------------------------------------------------------------------
# One HDF5 object, every start method


@pytest.mark.parametrize(("workers", "context"), LOADERS, ids=LOADER_IDS)
def test_hdf5_over_s3_equals_local(s3, bucket, root, workers, context):
    # The forkserver process is started once per session, with the environment of that
    # moment (an earlier test module may have started it before AWS_* were set here), and
    # its workers inherit that: the endpoint and keys travel in storage_options instead.
    options = {}
    if context == "forkserver":
        options["storage_options"] = {
            "endpoint_url": s3.endpoint,
            "key": s3.access_key_id,
            "secret": s3.secret_access_key,
            "region_name": s3.region,
        }
    remote = PackDataset(f"s3://{bucket}/ids.h5", BATCH, seed=3, **options)
    local = PackDataset(str(root / "ids.h5"), BATCH, seed=3)
    assert len(remote) == len(local) == -(-N // BATCH)
    got = read_epochs(remote, workers, context, epochs=2)
    want = read_epochs(local, 0, None, epochs=2)
    assert_same_epochs(got, want)
    assert sorted(ids_of(got[0])) == list(range(N))
    assert ids_of(got[0]) != ids_of(got[1])  # shuffled anew each epoch


@pytest.mark.parametrize(("workers", "context"), [(2, "fork"), (2, "spawn")], ids=["fork", "spawn"])
def test_hdf5_over_http_equals_local(http, root, workers, context):
    remote = PackDataset(http.url("ids.h5"), BATCH, datasets="x", seed=4, drop_last=True)
    local = PackDataset(str(root / "ids.h5"), BATCH, datasets="x", seed=4, drop_last=True)
    assert_same_epochs(read_epochs(remote, workers, context), read_epochs(local, 0, None))


def test_spawn_workers_take_the_endpoint_from_storage_options(s3, bucket, root, monkeypatch):
    """No AWS_* variables anywhere: the options travel with the pickled reader."""
    for k in s3.env:
        monkeypatch.delenv(k, raising=False)
    options = {
        "endpoint_url": s3.endpoint,
        "key": s3.access_key_id,
        "secret": s3.secret_access_key,
        "region_name": s3.region,
    }
    remote = PackDataset(f"s3://{bucket}/ids.h5", BATCH, seed=5, storage_options=options)
    local = PackDataset(str(root / "ids.h5"), BATCH, seed=5)
    assert_same_epochs(read_epochs(remote, 2, "spawn"), read_epochs(local, 0, None))


def test_spawn_workers_with_the_index_cache_off(bucket, root):
    remote = PackDataset(f"s3://{bucket}/ids.h5", BATCH, seed=6, index_cache=False)
    local = PackDataset(str(root / "ids.h5"), BATCH, seed=6)
    assert_same_epochs(read_epochs(remote, 2, "spawn"), read_epochs(local, 0, None))


# --------------------------------------------------------------------------------------------
# Other formats


@pytest.mark.parametrize(("workers", "context"), LOADERS[:3], ids=LOADER_IDS[:3])
def test_zip_and_npy_glob_over_s3_equal_local(bucket, root, workers, context):
    for remote_src, local_src in (
        (f"s3://{bucket}/x.zip", str(root / "x.zip")),
        (f"s3://{bucket}/npy/0[0-3]*.npy", str(root / "npy" / "0[0-3]*.npy")),
    ):
        remote = PackDataset(remote_src, 6, seed=7)
        local = PackDataset(local_src, 6, seed=7)
        assert len(remote) == len(local)
        assert_same_epochs(read_epochs(remote, workers, context), read_epochs(local, 0, None))


def test_images_over_s3_equal_local(s3, bucket, root, tmp_path):
    from support import images

    zpath = tmp_path / "imgs.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        for k, photo in enumerate(("chelsea.png", "coffee.png", "rocket.jpg")):
            im = images.photo(photo).resize((40, 30))
            for kind in ("q90.jpg", "rgb.png", "gray.jpg"):
                z.writestr(f"c{k}/{kind}", images.KINDS[kind](im))
    url = s3.put(bucket, "imgs.zip", zpath)
    remote = PackDataset(url, 4, size=16, seed=8)
    local = PackDataset(str(zpath), 4, size=16, seed=8)
    assert_same_epochs(read_epochs(remote, 2, "spawn"), read_epochs(local, 0, None))


# --------------------------------------------------------------------------------------------
# Shards: an S3 glob


def local_shards(root: Path) -> list[str]:
    return [str(root / "shards" / f"ids_{k:03d}.h5") for k in range(len(SHARD_SIZES))]


@pytest.mark.parametrize(
    ("mode", "workers", "context"),
    [("sample", 0, None), ("sample", 2, "fork"), ("shard", 0, None), ("shard", 2, "spawn")],
    ids=["sample-in-process", "sample-fork", "shard-in-process", "shard-spawn"],
)
def test_an_s3_glob_of_shards_equals_local(bucket, root, mode, workers, context):
    remote = PackDataset(f"s3://{bucket}/shards/ids_*.h5", 4, datasets="id", shuffle_mode=mode)
    assert isinstance(remote.reader, packread.ShardedReader)
    local = PackDataset(local_shards(root), 4, datasets="id", shuffle_mode=mode)
    assert remote.shard_lengths == local.shard_lengths == SHARD_SIZES
    # Shard mode deals shards to workers: the local side must be read by as many.
    got = read_epochs(remote, workers, context, epochs=2)
    want = read_epochs(local, workers, "fork" if workers else None, epochs=2)
    assert_same_epochs(got, want)
    assert sorted(ids_of(got[0])) == list(range(N))


def test_two_ranks_two_workers_over_an_s3_glob(bucket, root, tmp_path):
    """Two spawned ranks in a gloo group, two (forked) workers each, read an S3 glob of
    shards with the endpoint from the environment they were started with."""
    drop_last = False  # (both ways are checked over local files in test_torch.py)
    options = {"batch_size": 3, "seed": 9, "drop_last": drop_last, "epochs": 2}
    pattern = f"s3://{bucket}/shards/ids_*.h5"
    ranks = run_gloo_ranks(rank_main, 2, str(tmp_path), pattern, str(tmp_path), options)
    for rank, result in enumerate(ranks):
        local = PackDataset(
            local_shards(root),
            3,
            datasets="id",
            seed=9,
            drop_last=drop_last,
            rank=rank,
            world_size=2,
        )
        assert result["len"] == len(local)
        for epoch in range(2):
            idx = local.rank_indices(epoch).tolist()
            want = [idx[j * 3 : (j + 1) * 3] for j in range(len(local))]
            assert result["epochs"][epoch]["batches"] == want, (rank, epoch)
            assert result["epochs"][epoch]["all_counts"] == [len(local)] * 2
    seen = {i for r in ranks for b in r["epochs"][0]["batches"] for i in b}
    assert seen == set(range(N))


def _io_threads() -> int:
    """packread's I/O (tokio) threads in this process, by their name."""
    count = 0
    for comm in Path("/proc/self/task").glob("*/comm"):
        with contextlib.suppress(OSError):
            count += comm.read_text().strip() == "packread-io"
    return count


def _io_threads_after(seconds: float) -> int:
    """The count once stopped threads had ``seconds`` to exit."""
    deadline = time.monotonic() + seconds
    while _io_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    return _io_threads()


def test_a_process_that_only_made_a_dataset_has_no_io_threads(bucket):
    """Opening the reader starts packread's I/O runtime; the dataset stops it again, so a
    DataLoader forking its workers next forks a process with no I/O threads. Reading starts
    it again."""
    ds = PackDataset(f"s3://{bucket}/ids.h5", BATCH, seed=8)
    assert _io_threads_after(5.0) == 0
    first = next(iter(ds))
    assert len(ids_of([first])) == BATCH
    assert _io_threads() > 0
