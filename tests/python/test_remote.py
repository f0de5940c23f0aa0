"""Reading from object storage (issue 17): every reader over S3 (moto) and HTTP (nginx) gives,
bit for bit, what the local reader gives for the same file; globs over S3 listings; the
errors (404, 403, unknown options, bad URLs); the on-disk index cache (counted requests) and
objects replaced under an open reader; faults between reader and server (dropped and cut
connections, a server down or hung) through ``FaultProxy``; Ctrl-C during a slow read.

The torch side (DataLoader workers of every start method, a gloo group) is in
``test_torch_remote.py``."""

from __future__ import annotations

import _thread
import io
import os
import pickle
import re
import signal
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numpy as np
import pytest
from PIL import Image

import packread
from packread.errors import (
    InvalidArgumentError,
    PackreadFileNotFoundError,
    PackreadOSError,
    PackreadPermissionError,
    PackreadTypeError,
    UnsupportedError,
)
from support import formats, images
from support.h5files import sample_data
from support.objstore import (
    FaultProxy,
    MotoS3,
    NginxHttp,
    nginx_http,
    s3_fixture,  # noqa: F401  (the module's `s3` fixture)
    versioned_http,
)

BACKENDS = ["s3", "http"]

#: Storage options that make a server that is down or hung fail fast: few retries, short
#: timeouts (object_store durations are humantime strings).
FAST_FAIL = {"max_retries": "2", "retry_timeout": "3", "connect_timeout": "1s", "timeout": "2s"}

#: Longest a read against a server that is down or hung may take with ``FAST_FAIL``.
BOUNDED_S = 30.0


# --------------------------------------------------------------------------------------------
# Comparing batches


def assert_same(got: Any, want: Any, where: str = "batch") -> None:
    """Bit-for-bit equality of arrays (dtype with byte order, shape, bytes), recursively
    through dicts (same keys, same order), lists and tuples (vlen batches); anything else ==."""
    if isinstance(want, dict):
        assert isinstance(got, dict), (where, type(got))
        assert list(got) == list(want), (where, list(got), list(want))
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want), (where, type(got), type(want))
        assert len(got) == len(want), (where, len(got), len(want))
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), (where, type(got))
        assert got.dtype.str == want.dtype.str, (where, got.dtype, want.dtype)
        assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
        assert got.shape == want.shape, (where, got.shape, want.shape)
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), where
    else:
        assert got == want, (where, got, want)


def index_lists(n: int, seed: int = 0) -> list[list[int]]:
    """Random index lists (with duplicates and negatives), a permutation, the ends, all."""
    rng = np.random.default_rng(seed)
    return [
        [0],
        [n - 1, 0, -1],
        rng.integers(-n, n, size=2 * n + 3).tolist(),
        rng.permutation(n)[: max(1, n // 3)].tolist(),
        list(range(n)),
    ]


def assert_reads_alike(remote: Any, local: Any, seed: int = 0) -> None:
    """``remote`` has ``local``'s length, shape and dtype, and every batch of random indices
    equals ``local``'s."""
    assert len(remote) == len(local)
    assert remote.shape == local.shape
    assert remote.dtype == local.dtype
    for idx in index_lists(len(local), seed):
        assert_same(remote.batch(idx), local.batch(idx), f"batch({idx[:6]}...)")
    idx = index_lists(len(local), seed + 1)[2]
    assert_same(remote.batch_async(idx).result(timeout=60), local.batch(idx), "batch_async")


# --------------------------------------------------------------------------------------------
# Data: one folder served by nginx and copied into one S3 bucket


@dataclass
class Case:
    """A file (``rel`` under the data root) and how a reader opens it (a path or a URL)."""

    rel: str
    open: Callable[..., Any]
    #: Only over S3 (a glob needs a listing).
    s3_only: bool = False
    #: Local paths to open instead of ``root/rel`` (a glob's matches).
    local: Callable[[Path], Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _h5(datasets: Any = None, **kw: Any) -> Callable[..., Any]:
    return lambda src, **o: packread.HDF5Reader(src, datasets, **kw, **o)


def _zip(**kw: Any) -> Callable[..., Any]:
    return lambda src, **o: packread.ZipReader(src, **kw, **o)


def _npy(src: Any, **o: Any) -> Any:
    return packread.NpyReader(src, **o)


def _npz(src: Any, **o: Any) -> Any:
    return packread.NpzReader(src, **o)


def _images(**kw: Any) -> Callable[..., Any]:
    return lambda src, **o: packread.ImageReader(src, **kw, **o)


def _tar(**kw: Any) -> Callable[..., Any]:
    return lambda src, **o: packread.TarReader(src, **kw, **o)


def _clips(**kw: Any) -> Callable[..., Any]:
    return lambda src, **o: packread.ClipReader(src, 3, **kw, **o)


H5_N = 41
H5_SHAPE = (6, 10)


def write_h5_codecs(folder: Path) -> dict[str, Case]:
    """One HDF5 file per pipeline (h5py, hdf5plugin): gzip, shuffle + gzip, LZ4, Zstd, Blosc,
    Bitshuffle, uncompressed contiguous, chunks of several samples (several datasets), and
    variable-length sequences and strings."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(17)
    x = sample_data(rng, (H5_N, *H5_SHAPE), "<f4")
    codecs = {
        "gzip": ((1, *H5_SHAPE), {"compression": "gzip", "compression_opts": 4}),
        "shuffle_gzip": ((2, *H5_SHAPE), {"compression": "gzip", "shuffle": True}),
        "lz4": ((4, *H5_SHAPE), dict(hdf5plugin.LZ4())),
        "zstd": ((3, *H5_SHAPE), dict(hdf5plugin.Zstd(clevel=5))),
        "blosc": ((5, *H5_SHAPE), dict(hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=1))),
        "bitshuffle": ((8, *H5_SHAPE), dict(hdf5plugin.Bitshuffle(cname="lz4"))),
    }
    cases = {}
    for name, (chunks, opts) in codecs.items():
        with h5py.File(folder / f"{name}.h5", "w") as f:
            f.create_dataset("x", data=x, chunks=chunks, **opts)
        cases[f"h5_{name}"] = Case(f"h5/{name}.h5", _h5("x"))
    with h5py.File(folder / "contig.h5", "w") as f:
        f.create_dataset("x", data=x)
        f.create_dataset("label", data=np.arange(H5_N, dtype=">i8") * 7)
    cases["h5_contig"] = Case("h5/contig.h5", _h5(["x", "label"]))
    with h5py.File(folder / "multi.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(8, *H5_SHAPE), compression="gzip", shuffle=True)
        f.create_dataset("y", data=rng.integers(0, 1 << 40, H5_N), chunks=(16,), compression="lzf")
        f.create_dataset("z", data=sample_data(rng, (H5_N, 3), "|u1"))
    cases["h5_multi"] = Case("h5/multi.h5", _h5())
    with h5py.File(folder / "vlen.h5", "w") as f:
        seq = f.create_dataset("seq", (H5_N,), dtype=h5py.vlen_dtype(np.dtype("<i4")), chunks=(4,))
        for i in range(H5_N):
            seq[i] = np.arange(i % 7, dtype="<i4") * (i + 1)
        names = [f"sample-{i}-{'x' * (i % 5)}" for i in range(H5_N)]
        f.create_dataset("name", data=names, dtype=h5py.string_dtype())
        f.create_dataset("x", data=x)
    cases["h5_vlen"] = Case("h5/vlen.h5", _h5(["seq", "name", "x"]))
    cases["h5_vlen_flat"] = Case("h5/vlen.h5", _h5("seq", ragged="flat"))
    return cases


def write_zips(folder: Path) -> dict[str, Case]:
    """A ZIP of deflated raw members (16-bit, big-endian) beside a stored one."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    data = sample_data(rng, (33, 4, 9), ">u2")
    with zipfile.ZipFile(folder / "deflated.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("README.txt", "not a sample")
        for i in range(len(data)):
            z.writestr(f"raw/{i:03d}.bin", data[i].tobytes())
    return {
        "zip_deflated_raw": Case(
            "zip/deflated.zip", _zip(members="raw/*.bin", dtype=">u2", shape=(4, 9))
        )
    }


def write_images(folder: Path) -> dict[str, Case]:
    """JPEG and PNG files (PIL) from scikit-image's photographs, small: a ZIP of class
    folders, and an HDF5 file of the encoded bytes (vlen uint8) with a labels dataset."""
    folder.mkdir(parents=True, exist_ok=True)
    kinds = [k for k in images.KINDS if k.endswith((".jpg", ".png"))]
    blobs: list[tuple[str, bytes]] = []
    for cls, photo in (("cat", "chelsea.png"), ("rocket", "rocket.jpg"), ("coffee", "coffee.png")):
        im = images.photo(photo).resize((72, 56), Image.Resampling.BILINEAR)
        for kind in kinds:
            blobs.append((f"{cls}/{photo.split('.')[0]}.{kind}", images.KINDS[kind](im)))
    with zipfile.ZipFile(folder / "photos.zip", "w", zipfile.ZIP_STORED) as z:
        for name, raw in blobs:
            z.writestr(name, raw)
    classes = sorted({n.split("/")[0] for n, _ in blobs})
    with h5py.File(folder / "photos.h5", "w") as f:
        ds = f.create_dataset("jpegs", (len(blobs),), dtype=h5py.vlen_dtype(np.uint8), chunks=(4,))
        for i, (_, raw) in enumerate(blobs):
            ds[i] = np.frombuffer(raw, dtype=np.uint8)
        f.create_dataset("labels", data=[classes.index(n.split("/")[0]) for n, _ in blobs])
    return {
        "images_zip": Case("img/photos.zip", _images(size=(32, 40))),
        "images_zip_ragged": Case("img/photos.zip", _images(size=None, mode="RGB")),
        "images_h5": Case("img/photos.h5", _images(dataset="jpegs", labels="labels", size=24)),
    }


def write_all(root: Path) -> dict[str, Case]:
    fmt = formats.write_all(str(root / "fmt"))
    formats.write_layouts(str(root / "fmt"))
    rng = np.random.default_rng(9)  # an archive of rows (np.savez), read by its rows
    np.savez(root / "fmt" / "rows.npz", a=rng.random((40, 3, 5)), b=np.arange(40, dtype="<i2"))
    cases: dict[str, Case] = {
        "h5_formats": Case("fmt/data.h5", _h5()),
        "h5_lzf_chunks": Case("fmt/lzf.h5", _h5("x")),
        "h5_layouts": Case("fmt/layouts.h5", _h5()),
        "zip_stored_raw": Case("fmt/raw.zip", _zip(**fmt["zip_raw"].options)),
        "zip_deflated_npy": Case("fmt/npy.zip", _zip()),
        "npy_single": Case("fmt/npy/s005.npy", _npy),  # rows of one array
        "npy_rows": Case("fmt/X.npy", _npy),
        "npz_rows": Case("fmt/rows.npz", _npz),
        # Frame folders in a ZIP (random clips: the epoch's draw is the same remotely), and
        # HDF5 sequences with labels.
        "clips_zip": Case("fmt/clips.zip", _clips(frame_step=2, augment_seed=3)),
        "clips_h5": Case("fmt/clips.h5", _clips(sampling="windows", labels="labels")),
        # WebDataset tar shards: one shard (fixed-size images and labels; every field whole),
        # a glob of three, and a ZIP of the same members read by key.
        "tar_one": Case("fmt/one.tar", _tar(**fmt["tar_one"].options)),
        "tar_whole": Case("fmt/one.tar", _tar()),
        "tar_glob": Case(
            "fmt/tarpart-*.tar",
            _tar(**fmt["tar_shards"].options),
            s3_only=True,
            local=lambda root: sorted(str(p) for p in (root / "fmt").glob("tarpart-*.tar")),
        ),
        "zip_fields": Case(
            "fmt/fields.zip", _zip(**fmt["zip_fields"].options), extra={"keyed": True}
        ),
        "npy_glob": Case(
            "fmt/npy/s0[0-2]*.npy",
            _npy,
            s3_only=True,
            local=lambda root: sorted(str(p) for p in (root / "fmt/npy").glob("s0[0-2]*.npy")),
        ),
    }
    cases.update(write_h5_codecs(root / "h5"))
    cases.update(write_zips(root / "zip"))
    cases.update(write_images(root / "img"))
    return cases


@dataclass
class Data:
    root: Path
    cases: dict[str, Case]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    root = tmp_path_factory.mktemp("remote-data")
    return Data(root, write_all(root))


@pytest.fixture(scope="module", autouse=True)
def environment(s3: MotoS3, tmp_path_factory):
    """The S3 server's endpoint and credentials as AWS's tools read them, and an index cache of
    this module's own, for the whole module (then restored)."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in s3.env.items():
            mp.setenv(k, v)
        mp.setenv("PACKREAD_CACHE_DIR", str(tmp_path_factory.mktemp("index-cache")))
        yield


@pytest.fixture(scope="module")
def http(data: Data):
    with nginx_http(data.root) as server:
        yield server


@pytest.fixture(scope="module")
def bucket(s3: MotoS3, data: Data) -> str:
    """A bucket holding every file of the data root, at the same relative keys."""
    name = s3.bucket("data")
    client = s3.client()
    for path in sorted(data.root.rglob("*")):
        if path.is_file():
            client.put_object(
                Bucket=name, Key=path.relative_to(data.root).as_posix(), Body=path.read_bytes()
            )
    return name


class Store:
    """One backend: URLs of the data root's files, and objects put (or replaced) there."""

    def __init__(self, kind: str, s3: MotoS3, bucket: str, http: NginxHttp, root: Path):
        self.kind, self.s3, self.bucket, self.http, self.root = kind, s3, bucket, http, root

    def url(self, rel: str) -> str:
        return f"s3://{self.bucket}/{rel}" if self.kind == "s3" else self.http.url(rel)

    def put(self, rel: str, raw: bytes) -> str:
        """``raw`` as the object ``rel`` (replacing it): over HTTP, a file nginx serves, moved
        into place with a new mtime (nginx's ETag is mtime-size: a replacement of the same size
        within the same second would keep the ETag)."""
        if self.kind == "s3":
            return self.s3.put(self.bucket, rel, raw)
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        before = path.stat().st_mtime if path.exists() else time.time()
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(raw)
        os.utime(tmp, (before + 10, before + 10))
        os.replace(tmp, path)
        return self.http.url(rel)


@pytest.fixture(params=BACKENDS)
def store(request, s3, bucket, http, data) -> Store:
    return Store(request.param, s3, bucket, http, data.root)


@pytest.fixture(scope="module")
def s3_store(s3, bucket, http, data) -> Store:
    return Store("s3", s3, bucket, http, data.root)


@pytest.fixture(scope="module")
def http_store(s3, bucket, http, data) -> Store:
    return Store("http", s3, bucket, http, data.root)


def remote_object(reader: Any) -> Any:
    """The ``RemoteObject`` a single-file reader opened."""
    obj = reader._source  # the object the reader opened, kept for its pickles
    assert isinstance(obj, packread._packread.RemoteObject), type(obj)
    return obj


# --------------------------------------------------------------------------------------------
# 1. Every reader, over S3 and HTTP, equals the local reader

CASE_NAMES = [
    "h5_formats",
    "h5_lzf_chunks",
    "h5_layouts",
    "h5_gzip",
    "h5_shuffle_gzip",
    "h5_lz4",
    "h5_zstd",
    "h5_blosc",
    "h5_bitshuffle",
    "h5_contig",
    "h5_multi",
    "h5_vlen",
    "h5_vlen_flat",
    "zip_stored_raw",
    "zip_deflated_raw",
    "zip_deflated_npy",
    "npy_single",
    "npy_rows",
    "npz_rows",
    "npy_glob",
    "images_zip",
    "images_zip_ragged",
    "images_h5",
    "clips_zip",
    "clips_h5",
    "tar_one",
    "tar_whole",
    "tar_glob",
    "zip_fields",
]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_remote_reader_equals_local(name, store, data):
    case = data.cases[name]
    if case.s3_only and store.kind != "s3":
        pytest.skip("a glob needs a listing (S3)")
    local_src = case.local(data.root) if case.local else str(data.root / case.rel)
    local = case.open(local_src)
    remote = case.open(store.url(case.rel))
    assert_reads_alike(remote, local)
    if isinstance(local, packread.HDF5Reader):
        assert remote.keys() == local.keys()
        assert remote.samples_per_chunk == local.samples_per_chunk
        assert remote.path == store.url(case.rel)
    if isinstance(local, (packread.ZipReader, packread.TarReader)):
        assert remote.names() == local.names()
        assert remote.keys() == local.keys()
    if isinstance(local, packread.ZipReader) and not case.extra.get("keyed"):
        assert remote.info(0) == local.info(0)
        assert remote.read(-1) == local.read(-1)
    if isinstance(local, (packread.ImageReader, packread.ClipReader)):
        assert remote.classes == local.classes
        assert_same(remote.labels, local.labels, "labels")
    if isinstance(local, packread.ClipReader):
        idx = list(range(len(local)))[::3]
        assert_same(remote.batch(idx, epoch=5), local.batch(idx, epoch=5), "epoch 5")


def test_hdf5_equals_h5py(store, data):
    """The remote reader against h5py itself, not only packread's local reader."""
    names = sorted(formats.LAYOUTS)
    remote = packread.HDF5Reader(store.url("fmt/layouts.h5"), names)
    with h5py.File(data.root / "fmt/layouts.h5", "r") as f:
        whole = {k: f[k][()] for k in names}
    for idx in index_lists(formats.N, 3)[1:]:
        rows = [i % formats.N for i in idx]
        assert formats.same(remote.batch(idx), {k: whole[k][rows] for k in names})


def test_one_dataset_read_by_name(store, data):
    remote = packread.HDF5Reader(store.url("h5/multi.h5"))
    local = packread.HDF5Reader(str(data.root / "h5/multi.h5"))
    assert_same(remote["y"].read([3, 1, 40]), local["y"].read([3, 1, 40]))
    assert_same(remote["x"].read(7), local["x"].read(7))
    assert remote["x"].filters == local["x"].filters
    assert remote["x"].chunks == local["x"].chunks


def test_npy_list_of_urls(store, data):
    names = [f"fmt/npy/s{i:03d}.npy" for i in (30, 2, 17, 2, 36)]
    remote = packread.NpyReader([store.url(n) for n in names])
    local = packread.NpyReader([str(data.root / n) for n in names])
    assert remote.paths == [store.url(n) for n in names]
    assert_reads_alike(remote, local)
    assert_same(remote[1], np.load(data.root / names[1]))


@pytest.mark.parametrize(
    ("rel", "datasets", "kind"),
    [
        ("h5/multi.h5", None, packread.HDF5Reader),
        ("h5/contig.h5", "x", packread.HDF5Reader),
        ("fmt/npy.zip", None, packread.ZipReader),
        ("fmt/npy/s001.npy", None, packread.NpyReader),
    ],
)
def test_open_reader_takes_urls(store, data, rel, datasets, kind):
    remote = packread.open_reader(store.url(rel), datasets)
    assert isinstance(remote, kind)
    local = packread.open_reader(str(data.root / rel), datasets)
    assert_reads_alike(remote, local)


def test_open_reader_images_by_url(store, data):
    remote = packread.open_reader(store.url("img/photos.zip"), size=16)
    assert isinstance(remote, packread.ImageReader)
    local = packread.ImageReader(str(data.root / "img/photos.zip"), size=16)
    assert_reads_alike(remote, local)


def test_an_npz_object_of_one_sample_has_no_rows(store):
    # One .npz object is the rows of its arrays; this one holds a 0-d label: refused, saying so.
    with pytest.raises(InvalidArgumentError, match="0-d array has no rows"):
        packread.open(store.url("fmt/npz/s000.npz"))


def test_s3_by_storage_options_alone(s3, bucket, data, monkeypatch):
    """No AWS_* variables: endpoint and keys as s3fs names them, or as object_store does."""
    for k in s3.env:
        monkeypatch.delenv(k, raising=False)
    url = f"s3://{bucket}/h5/zstd.h5"
    local = packread.HDF5Reader(str(data.root / "h5/zstd.h5"), "x")
    s3fs_style = {
        "endpoint_url": s3.endpoint,
        "key": s3.access_key_id,
        "secret": s3.secret_access_key,
        "region_name": s3.region,
    }
    object_store_style = {
        "aws_endpoint": s3.endpoint,
        "aws_access_key_id": s3.access_key_id,
        "aws_secret_access_key": s3.secret_access_key,
        "aws_region": s3.region,
        "allow_http": True,
    }
    for options in (s3fs_style, object_store_style):
        assert_reads_alike(packread.HDF5Reader(url, "x", storage_options=options), local)
    zipped = packread.ZipReader(f"s3://{bucket}/fmt/npy.zip", storage_options=s3fs_style)
    assert_reads_alike(zipped, packread.ZipReader(str(data.root / "fmt/npy.zip")))


def test_http_client_options_are_taken(http_store, data):
    local = packread.ZipReader(str(data.root / "fmt/npy.zip"))
    opts = {"timeout": "5s", "connect_timeout": "500ms", "max_retries": 3, "retry_timeout": 2.5}
    remote = packread.ZipReader(http_store.url("fmt/npy.zip"), storage_options=opts)
    assert_reads_alike(remote, local)


# --------------------------------------------------------------------------------------------
# 2. Globs over an S3 listing


@pytest.fixture(scope="module")
def shard_bucket(s3: MotoS3, data: Data) -> str:
    """formats' HDF5 shards (one empty) as ``shards/part_<k>.h5`` and its ZIP parts as
    ``zips/part<k>.zip``, with decoys the globs must not match; ``train_<k>.h5`` at the root."""
    name = s3.bucket("shards")
    client = s3.client()
    for k in range(len(formats.SHARD_SIZES)):
        raw = (data.root / f"fmt/shard_{k}.h5").read_bytes()
        client.put_object(Bucket=name, Key=f"shards/part_{k}.h5", Body=raw)
        client.put_object(Bucket=name, Key=f"train_{k}.h5", Body=raw)
    for k in range(3):
        client.put_object(
            Bucket=name, Key=f"zips/part{k}.zip", Body=(data.root / f"fmt/part{k}.zip").read_bytes()
        )
    client.put_object(Bucket=name, Key="shards/part_9.h5.bak", Body=b"not a shard")
    client.put_object(Bucket=name, Key="shards/sub/part_0.h5", Body=b"not matched by *")
    client.put_object(Bucket=name, Key="zips/README", Body=b"nothing")
    return name


def local_shards(data: Data) -> list[str]:
    return [str(data.root / f"fmt/shard_{k}.h5") for k in range(len(formats.SHARD_SIZES))]


def test_hdf5_glob_is_the_concatenation(shard_bucket, data):
    pattern = f"s3://{shard_bucket}/shards/part_*.h5"
    remote = packread.HDF5Reader(pattern, None)
    assert isinstance(remote, packread.ShardedReader)
    assert remote.paths == [
        f"s3://{shard_bucket}/shards/part_{k}.h5" for k in range(len(formats.SHARD_SIZES))
    ]
    assert remote.shard_lengths == list(formats.SHARD_SIZES)
    local = packread.HDF5Reader(local_shards(data), None)
    assert_reads_alike(remote, local)
    # And against h5py, the shards concatenated.
    case_ref = _shards_reference(data)
    for idx in index_lists(formats.N, 4)[1:]:
        assert formats.same(remote.batch(idx), case_ref([i % formats.N for i in idx]))


def _shards_reference(data: Data) -> Callable[[list[int]], dict[str, np.ndarray]]:
    parts: dict[str, list[np.ndarray]] = {"images": [], "labels": []}
    for p in local_shards(data):
        with h5py.File(p, "r") as f:
            for k in parts:
                parts[k].append(f[k][()])
    whole = {k: np.concatenate(v) for k, v in parts.items()}
    return lambda rows: {k: v[rows] for k, v in whole.items()}


def test_glob_at_the_bucket_root(shard_bucket, data):
    """``s3://bucket/train_*.h5``: a pattern in the first part of the key."""
    remote = packread.HDF5Reader(f"s3://{shard_bucket}/train_*.h5", "images")
    assert len(remote.paths) == len(formats.SHARD_SIZES)
    assert_reads_alike(remote, packread.HDF5Reader(local_shards(data), "images"))


def test_zip_glob_and_list_of_urls(shard_bucket, data):
    opts = {"dtype": "<f4", "shape": formats.SHAPE}
    local = packread.ZipReader(str(data.root / "fmt/part*.zip"), **opts)
    by_glob = packread.ZipReader(f"s3://{shard_bucket}/zips/part*.zip", **opts)
    assert isinstance(by_glob, packread.ShardedReader)
    assert by_glob.shard_lengths == [20, 0, 17]
    assert_reads_alike(by_glob, local)
    urls = [f"s3://{shard_bucket}/zips/part{k}.zip" for k in (2, 0)]
    by_list = packread.ZipReader(urls, **opts)
    assert by_list.paths == urls
    assert_reads_alike(by_list, packread.ZipReader([local.paths[2], local.paths[0]], **opts))


@pytest.mark.parametrize(
    ("pattern", "keys"),
    [
        ("shards/part_*.h5", [f"shards/part_{k}.h5" for k in range(5)]),
        ("shards/part_?.h5", [f"shards/part_{k}.h5" for k in range(5)]),
        ("shards/part_[13].h5", ["shards/part_1.h5", "shards/part_3.h5"]),
        ("shards/part_[!0-3].h5", ["shards/part_4.h5"]),
        # `**` is any run of characters, `/` included (so `/**/` needs a folder between).
        ("shards/**/part_0.h5", ["shards/sub/part_0.h5"]),
        ("shards/**.h5", [*(f"shards/part_{k}.h5" for k in range(5)), "shards/sub/part_0.h5"]),
        ("**/part_0.h5", ["shards/part_0.h5", "shards/sub/part_0.h5"]),
        ("train_*.h5", [f"train_{k}.h5" for k in range(5)]),
        ("*/part_0.h5", ["shards/part_0.h5"]),
        ("z*/part?.zip", [f"zips/part{k}.zip" for k in range(3)]),
    ],
)
def test_glob_patterns_match_as_the_shell_does(shard_bucket, pattern, keys):
    """``*`` and ``?`` within one part of the key, ``**`` across parts, sets; a pattern in
    the first part of the key (``s3://bucket/train_*.h5``) included."""
    got = packread._remote.remote_glob(f"s3://{shard_bucket}/{pattern}", None)
    assert got == [f"s3://{shard_bucket}/{k}" for k in keys]


def test_open_reader_takes_a_glob_url(shard_bucket, data):
    remote = packread.open_reader(f"s3://{shard_bucket}/shards/part_[0-4].h5", "labels")
    assert isinstance(remote, packread.ShardedReader)
    assert_reads_alike(remote, packread.HDF5Reader(local_shards(data), "labels"))


def test_hdf5_list_of_http_urls(http_store, data):
    urls = [http_store.url(f"fmt/shard_{k}.h5") for k in range(len(formats.SHARD_SIZES))]
    remote = packread.HDF5Reader(urls, None)
    assert isinstance(remote, packread.ShardedReader)
    assert_reads_alike(remote, packread.HDF5Reader(local_shards(data), None))


def test_sharded_remote_reader_pickles(shard_bucket, data):
    remote = packread.HDF5Reader(f"s3://{shard_bucket}/shards/part_*.h5", None)
    again = pickle.loads(pickle.dumps(remote))
    assert again.paths == remote.paths
    assert_reads_alike(again, packread.HDF5Reader(local_shards(data), None))


@pytest.mark.parametrize(
    ("open_", "suffix"),
    [
        (lambda p: packread.HDF5Reader(p, "x"), ".h5"),
        (lambda p: packread.ZipReader(p), ".zip"),
        (lambda p: packread.NpyReader(p), ".npy"),
        (lambda p: packread.open_reader(p), ".h5"),
    ],
    ids=["hdf5", "zip", "npy", "open_reader"],
)
def test_a_glob_matching_nothing_is_file_not_found(shard_bucket, open_, suffix):
    for pattern in (
        f"s3://{shard_bucket}/shards/nothing_*{suffix}",
        f"s3://{shard_bucket}/no/such/folder/*{suffix}",
    ):
        with pytest.raises(FileNotFoundError) as info:
            open_(pattern)
        assert isinstance(info.value, PackreadFileNotFoundError)
        assert pattern in str(info.value)


def test_a_glob_in_a_missing_bucket_is_file_not_found(s3):
    missing = s3.bucket("missing", create=False)
    with pytest.raises(FileNotFoundError, match=missing):
        packread.HDF5Reader(f"s3://{missing}/part_*.h5", "x")


@pytest.mark.parametrize(
    "open_",
    [
        lambda p: packread.HDF5Reader(p, "x"),
        lambda p: packread.ZipReader(p),
        lambda p: packread.NpyReader(p),
    ],
    ids=["hdf5", "zip", "npy"],
)
def test_a_glob_over_http_is_unsupported(http_store, open_):
    pattern = http_store.url("fmt/shard_*.h5")
    with pytest.raises(UnsupportedError, match="list the URLs") as info:
        open_(pattern)
    assert pattern in str(info.value)


def test_an_http_glob_reads_the_folders_index_page(http, data, tmp_path):
    """``NpyReader("https://host/data/*.npy")``: over HTTP a glob matches the file names the
    folder's index page links to (nginx's autoindex here), as fsspec lists HTTP folders."""
    folder = Path(http.root) / "listed" / "npy"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(31)
    arrays = [rng.standard_normal((3, 4)).astype("<f4") for _ in range(5)]
    for i, a in enumerate(arrays):
        np.save(folder / f"s{i:02d}.npy", a)
    np.save(folder / "other.npy", arrays[0])
    (folder / "s99.txt").write_bytes(b"not a sample")
    reader = packread.NpyReader(http.url("listed/npy/s*.npy"))
    assert reader.paths == [http.url(f"listed/npy/s{i:02d}.npy") for i in range(5)]
    assert_same(reader.batch([4, 0, 2]), np.stack([arrays[4], arrays[0], arrays[2]]))
    # A folder without an index page, or a glob over folders: said so.
    with pytest.raises(UnsupportedError, match="list the URLs"):
        packread.NpyReader(http.url("fmt/s*.npy"))
    with pytest.raises(UnsupportedError, match="file names only"):
        packread.NpyReader(http.url("listed/*/s00.npy"))
    with pytest.raises(FileNotFoundError):
        packread.NpyReader(http.url("listed/nothing-here/*.npy"))


def test_an_http_url_with_a_query_string_is_refused_not_globbed(http_store):
    """Signed URLs (``?X-Amz-Signature=...``) and versioned ones carry a query: ``?`` there is
    no glob character, and since object_store addresses objects by path (the query would be
    dropped and the request sent unsigned), such a URL is refused with a reason, not read
    from the wrong place or taken for a glob."""
    url = http_store.url("h5/gzip.h5") + "?version=3&sig=abc"
    for open_ in (
        lambda: packread.HDF5Reader(url, "x"),
        lambda: packread.NpyReader(url.replace("h5/gzip.h5", "npy/s000.npy")),
    ):
        with pytest.raises(packread.UnsupportedError, match="query string"):
            open_()


# --------------------------------------------------------------------------------------------
# 3. Errors


OPENERS = {
    "hdf5": lambda u, **o: packread.HDF5Reader(u + ".h5", "x", **o),
    "zip": lambda u, **o: packread.ZipReader(u + ".zip", **o),
    "npy": lambda u, **o: packread.NpyReader(u + ".npy", **o),
    "npy_list": lambda u, **o: packread.NpyReader([u + ".npy"], **o),
    "images": lambda u, **o: packread.ImageReader(u + ".zip", size=8, **o),
    "images_h5": lambda u, **o: packread.ImageReader(u + ".h5", dataset="jpegs", size=8, **o),
}


@pytest.mark.parametrize("kind", list(OPENERS))
def test_a_missing_object_is_file_not_found(store, kind):
    base = store.url("no/such/object")
    with pytest.raises(FileNotFoundError) as info:
        OPENERS[kind](base)
    assert isinstance(info.value, PackreadFileNotFoundError)
    msg = str(info.value)
    assert base in msg, msg
    assert "HTTP 404" in msg, msg


def test_a_missing_bucket_is_file_not_found(s3):
    missing = s3.bucket("gone", create=False)
    with pytest.raises(PackreadFileNotFoundError, match="HTTP 404") as info:
        packread.HDF5Reader(f"s3://{missing}/x.h5", "x")
    assert f"s3://{missing}/x.h5" in str(info.value)


@pytest.mark.parametrize("kind", ["hdf5", "zip", "npy", "images"])
def test_wrong_credentials_are_permission_denied(s3, bucket, data, kind):
    rel = {"hdf5": "h5/gzip", "zip": "fmt/raw", "npy": "fmt/npy/s000", "images": "img/photos"}
    base = f"s3://{bucket}/{rel[kind]}"
    wrong = {"key": "AKIAIOSFODNN7EXAMPLE", "secret": "not-the-secret"}
    with s3.require_auth() as (key_id, secret):
        with pytest.raises(PermissionError) as info:
            OPENERS[kind](base, storage_options=wrong)
        assert isinstance(info.value, PackreadPermissionError)
        msg = str(info.value)
        assert base in msg, msg
        assert "HTTP 403" in msg, msg
        # The right keys read the same object.
        right = {"key": key_id, "secret": secret}
        reader = OPENERS[kind](base, storage_options=right)
        assert len(reader) > 0


def test_wrong_credentials_on_a_listing_are_permission_denied(s3, shard_bucket):
    pattern = f"s3://{shard_bucket}/shards/part_*.h5"
    with s3.require_auth(), pytest.raises(PackreadPermissionError, match="HTTP 403"):
        packread.HDF5Reader(pattern, "images", storage_options={"key": "AKIAX", "secret": "y"})


def test_credentials_revoked_after_opening_fail_the_batch(s3, bucket):
    """A reader opened with keys that then stop working: the batch is PermissionError."""
    with s3.require_auth() as (key_id, secret):
        opts = {"key": key_id, "secret": secret, "max_retries": 0}
        reader = packread.HDF5Reader(f"s3://{bucket}/h5/lz4.h5", "x", storage_options=opts)
        s3._iam().delete_access_key(UserName=_user_of(s3, key_id), AccessKeyId=key_id)
        with pytest.raises(PackreadPermissionError, match="HTTP 403"):
            reader.batch([0, 5])


def _user_of(s3: MotoS3, key_id: str) -> str:
    iam = s3._iam()
    for user in iam.list_users()["Users"]:
        keys = iam.list_access_keys(UserName=user["UserName"])["AccessKeyMetadata"]
        if any(k["AccessKeyId"] == key_id for k in keys):
            return user["UserName"]
    raise AssertionError(f"no IAM user holds {key_id}")


@pytest.mark.parametrize("kind", ["hdf5", "zip", "npy", "images"])
def test_an_unknown_storage_option_is_refused(store, kind):
    rel = {"hdf5": "h5/gzip", "zip": "fmt/raw", "npy": "fmt/npy/s000", "images": "img/photos"}
    base = store.url(rel[kind])
    with pytest.raises(InvalidArgumentError, match="no_such_option"):
        OPENERS[kind](base, storage_options={"no_such_option": "1"})


def test_s3_options_are_refused_over_http(http_store):
    with pytest.raises(InvalidArgumentError, match="aws_access_key_id"):
        packread.HDF5Reader(
            http_store.url("h5/gzip.h5"), "x", storage_options={"aws_access_key_id": "k"}
        )


@pytest.mark.parametrize(
    "options",
    [{"max_retries": "many"}, {"retry_timeout": "soon"}, {"retry_timeout": -1}],
    ids=["max_retries", "retry_timeout", "negative"],
)
def test_a_bad_retry_option_is_refused(store, options):
    with pytest.raises(InvalidArgumentError, match=next(iter(options))):
        packread.HDF5Reader(store.url("h5/gzip.h5"), "x", storage_options=options)


@pytest.mark.parametrize(("key", "value"), [("timeout", "two"), ("connect_timeout", "soon")])
def test_a_duration_that_does_not_parse_is_an_invalid_argument(store, key, value):
    """Durations are humantime strings ("2s", "500ms") or plain seconds: anything else is the
    caller's mistake, said so (not a request that 'failed after its retries')."""
    with pytest.raises(InvalidArgumentError) as info:
        packread.HDF5Reader(store.url("h5/gzip.h5"), "x", storage_options={key: value})
    assert value in str(info.value)


@pytest.mark.parametrize("value", ["2", 2, 2.5, "2s", "2500ms"])
def test_durations_are_seconds_or_humantime(store, data, value):
    """``{"timeout": 2}`` is two seconds, as s3fs and fsspec users write it."""
    remote = packread.HDF5Reader(
        store.url("h5/gzip.h5"), "x", storage_options={"timeout": value, "connect_timeout": value}
    )
    assert_reads_alike(remote, packread.HDF5Reader(str(data.root / "h5/gzip.h5"), "x"))


def test_storage_options_must_be_a_dict(store):
    with pytest.raises(PackreadTypeError, match="dict"):
        packread.HDF5Reader(store.url("h5/gzip.h5"), "x", storage_options=[("timeout", "1s")])
    with pytest.raises(PackreadTypeError):
        packread.ZipReader(store.url("fmt/raw.zip"), storage_options={1: "x"})


@pytest.mark.parametrize(
    "url",
    ["s3:///key.h5", "http://[::1/x.h5", "https://127.0.0.1:99999/x.h5"],
    ids=["no-bucket", "bad-ipv6", "bad-port"],
)
def test_a_malformed_url_is_an_invalid_argument(url):
    with pytest.raises(InvalidArgumentError, match="URL"):
        packread.HDF5Reader(url, "x")


def test_a_url_naming_no_object_is_refused(bucket):
    """``s3://bucket`` names a bucket, not an object: said so, not read as one."""
    for url in (f"s3://{bucket}", f"s3://{bucket}/"):
        with pytest.raises((InvalidArgumentError, IsADirectoryError)) as info:
            packread.HDF5Reader(url, "x")
        assert bucket in str(info.value)


def test_a_url_that_is_not_an_object_is_read_as_a_path():
    """Schemes packread does not read (``ftp://``) and URLs with nothing after the scheme are
    local paths, which do not exist."""
    for url in ("ftp://host/x.h5", "s3://"):
        with pytest.raises(FileNotFoundError):
            packread.HDF5Reader(url, "x")


def test_a_list_mixing_urls_and_paths_is_refused(store, data):
    with pytest.raises(InvalidArgumentError, match="either URLs or local paths"):
        packread.open_reader([store.url("fmt/shard_0.h5"), str(data.root / "fmt/shard_1.h5")])


def test_the_wrong_format_names_the_url(store):
    url = store.url("h5/gzip.h5")
    with pytest.raises(packread.BadZipError, match=url):
        packread.ZipReader(url)
    with pytest.raises(packread.NpyFormatError, match=url):
        packread.NpyReader(url)
    with pytest.raises(InvalidArgumentError, match="in_memory"):
        packread.HDF5Reader(url, "x", in_memory=True)


# --------------------------------------------------------------------------------------------
# 4. The index cache, pickling, and objects replaced under a reader


def big_meta_h5(seed: int, n: int = 300) -> tuple[bytes, np.ndarray]:
    """An HDF5 file whose metadata lies beyond the first 256 KiB an open fetches: a padding
    dataset first, then ``x`` (one uncompressed chunk per sample: a chunk index of its own;
    files of the same ``n`` have the same size)."""
    rng = np.random.default_rng(seed)
    x = sample_data(rng, (n, 16), "<f4")
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.create_dataset("pad", data=rng.integers(0, 255, 400_000, dtype=np.uint8))
        f.create_dataset("x", data=x, chunks=(1, 16))
    return buf.getvalue(), x


def big_dir_zip(seed: int, n: int = 1500) -> tuple[bytes, np.ndarray]:
    """A ZIP archive whose central directory (about 100 KB) is larger than the 64 KiB tail an
    open fetches."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 1 << 16, (n, 8), dtype="<u2")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for i in range(n):
            z.writestr(f"members/sample_{i:06d}.bin", x[i].tobytes())
    return buf.getvalue(), x


def open_big(kind: str, url: str, **kw: Any) -> Any:
    if kind == "hdf5":
        return packread.HDF5Reader(url, "x", **kw)
    return packread.ZipReader(url, dtype="<u2", shape=(8,), **kw)


BIG = {"hdf5": (big_meta_h5, "h5"), "zip": (big_dir_zip, "zip")}


def put_big(store: Store, kind: str, name: str, seed: int) -> tuple[str, np.ndarray]:
    make, suffix = BIG[kind]
    raw, x = make(seed)
    return store.put(f"fresh/{name}.{suffix}", raw), x


@pytest.mark.parametrize("kind", ["hdf5", "zip"])
def test_a_second_open_reads_its_metadata_from_the_index_cache(store, kind, tmp_path, request):
    url, x = put_big(store, kind, f"cache-{kind}-{request.node.callspec.id}", seed=1)
    cache = tmp_path / "cache"
    idx = [5, 0, 299, 17, 17, -1]
    first = open_big(kind, url, index_cache=cache)
    obj = remote_object(first)
    opened_with = obj.fetched()[0]
    assert opened_with >= 2, "the metadata must lie beyond the first request for this test"
    assert not obj.index_hit
    assert Path(obj.cache_dir) == cache
    assert list((cache / "index").glob("*.pridx")), "nothing was written to the index cache"
    assert_same(first.batch(idx), x[idx])

    second = open_big(kind, url, index_cache=str(cache))
    obj2 = remote_object(second)
    assert obj2.fetched()[0] == 1, "an open with its index cached makes one request"
    assert obj2.index_hit
    assert obj2.etag == obj.etag
    assert obj2.size == obj.size
    assert_same(second.batch(idx), x[idx])

    # Without the cache, every open reads the metadata again.
    uncached = open_big(kind, url, index_cache=False)
    assert remote_object(uncached).fetched()[0] == opened_with
    assert not remote_object(uncached).index_hit
    assert remote_object(uncached).cache_dir is None
    assert_same(uncached.batch(idx), x[idx])


def test_a_tar_walk_is_kept_in_the_index_cache(store, tmp_path, request):
    """A tar object's header walk (one streamed pass in large requests) is kept in the index
    cache under its URL and ETag: a reopen makes only its first request and walks nothing,
    and reads the same samples."""
    members = []
    for i in range(300):
        members.append((f"k{i:04d}.bin", bytes([i % 251]) * (3000 + i)))
        members.append((f"k{i:04d}.cls", str(i).encode()))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, raw in members:
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            t.addfile(info, io.BytesIO(raw))
    url = store.put(f"fresh/walk-{request.node.callspec.id}.tar", buf.getvalue())
    cache = tmp_path / "cache"
    idx = [299, 0, 150, 150]
    first = packread.TarReader(url, remote=packread.Remote(index_cache=cache))
    obj = remote_object(first)
    assert obj.fetched()[0] >= 2, "the walk must take requests of its own for this test"
    assert first.names()[:2] == ["k0000", "k0001"]
    want = first.batch(idx)
    assert want["cls"].tolist() == idx
    assert want["bin"][0] == bytes([299 % 251]) * 3299
    second = packread.TarReader(url, remote=packread.Remote(index_cache=cache))
    assert remote_object(second).fetched()[0] == 1, "a reopen walked the headers again"
    assert second.names() == first.names()
    assert_same(second.batch(idx), want)


def test_index_cache_true_uses_packread_cache_dir(s3_store, tmp_path, monkeypatch):
    monkeypatch.setenv("PACKREAD_CACHE_DIR", str(tmp_path / "default"))
    url, _ = put_big(s3_store, "zip", "default-cache", seed=2)
    packread.ZipReader(url)
    assert list((tmp_path / "default" / "index").glob("*.pridx"))
    again = packread.ZipReader(url)
    assert again._source.index_hit
    assert again._source.fetched()[0] == 1


def test_npy_objects_are_cached_too(store, data, tmp_path):
    urls = [store.url(f"fmt/npy/s{i:03d}.npy") for i in range(6)]
    cache = tmp_path / "cache"
    first = packread.NpyReader(urls, index_cache=cache)
    assert len(list((cache / "index").glob("*.pridx"))) == len(urls)
    second = packread.NpyReader(urls, index_cache=cache)
    local = packread.NpyReader([str(data.root / f"fmt/npy/s{i:03d}.npy") for i in range(6)])
    assert_reads_alike(first, local)
    assert_reads_alike(second, local)


@pytest.mark.parametrize("kind", ["hdf5", "zip"])
def test_an_unpickled_reader_makes_no_request_until_it_reads(store, kind, tmp_path, request):
    url, x = put_big(store, kind, f"pickle-{kind}-{request.node.callspec.id}", seed=3)
    reader = open_big(kind, url, index_cache=tmp_path / "cache")
    again = pickle.loads(pickle.dumps(reader))
    obj = remote_object(again)
    assert obj.fetched() == (0, 0), "unpickling (and reading the metadata) made requests"
    assert obj.url == url
    assert obj.etag == remote_object(reader).etag
    assert obj.size == remote_object(reader).size
    assert obj.index_hit
    idx = [3, 250, 3, 0]
    assert_same(again.batch(idx), x[idx])
    assert obj.fetched()[0] >= 1


def test_an_unpickled_npy_reader_reads_alike(store, data, tmp_path):
    urls = [store.url(f"fmt/npy/s{i:03d}.npy") for i in (4, 9, 1)]
    reader = packread.NpyReader(urls, index_cache=tmp_path / "cache")
    again = pickle.loads(pickle.dumps(reader))
    assert again.paths == urls
    local = packread.NpyReader([str(data.root / f"fmt/npy/s{i:03d}.npy") for i in (4, 9, 1)])
    assert_reads_alike(again, local)


def test_an_unpickled_image_reader_reads_alike(store, data):
    reader = packread.ImageReader(store.url("img/photos.zip"), size=20)
    again = pickle.loads(pickle.dumps(reader))
    assert_reads_alike(again, packread.ImageReader(str(data.root / "img/photos.zip"), size=20))


def test_a_damaged_index_cache_entry_is_ignored(store, tmp_path, request):
    url, x = put_big(store, "hdf5", f"damaged-{request.node.callspec.id}", seed=4)
    cache = tmp_path / "cache"
    open_big("hdf5", url, index_cache=cache)
    (entry,) = (cache / "index").glob("*.pridx")
    raw = entry.read_bytes()
    for damaged in (raw[: len(raw) // 2], raw[:-1] + bytes([raw[-1] ^ 0xFF]), b""):
        entry.write_bytes(damaged)
        reader = open_big("hdf5", url, index_cache=cache)
        assert_same(reader.batch([0, 299, 150]), x[[0, 299, 150]])


def test_an_index_cache_that_cannot_be_written_is_no_error(store, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a folder")
    url = store.url("h5/lz4.h5")
    for cache in (blocker, blocker / "below"):
        reader = packread.HDF5Reader(url, "x", index_cache=cache)
        assert not remote_object(reader).index_hit
        assert reader.batch([0, 40]).shape == (2, *H5_SHAPE)


def test_a_reader_opened_before_a_fork_reads_in_the_child(store, data):
    from support.helpers import in_child

    remote = packread.HDF5Reader(store.url("h5/multi.h5"))
    local = packread.HDF5Reader(str(data.root / "h5/multi.h5"))
    idx = [40, 0, 13, 13]
    remote.batch(idx)  # the parent's client and I/O threads exist before the fork
    got = in_child(lambda: remote.batch(idx))
    assert_same(got, local.batch(idx))
    assert_same(remote.batch(idx), local.batch(idx))  # and the parent still reads


def _changed(info: pytest.ExceptionInfo, url: str) -> None:
    assert isinstance(info.value, PackreadOSError), type(info.value)
    msg = str(info.value)
    assert "changed" in msg, msg
    assert url in msg, msg


@pytest.mark.parametrize("same_size", [True, False], ids=["same-size", "new-size"])
@pytest.mark.parametrize("kind", ["hdf5", "zip"])
def test_a_replaced_object_is_detected(store, kind, same_size, tmp_path, request):
    name = f"replaced-{request.node.callspec.id}"
    url, x1 = put_big(store, kind, name, seed=10)
    cache = tmp_path / "cache"
    reader = open_big(kind, url, index_cache=cache)
    idx = [7, 1, 200]
    assert_same(reader.batch(idx), x1[idx])
    make, suffix = BIG[kind]
    raw2, x2 = make(11) if same_size else make(11, 290 if kind == "hdf5" else 1490)
    if same_size:
        assert len(raw2) == remote_object(reader).size
    store.put(f"fresh/{name}.{suffix}", raw2)
    # The open reader never mixes old and new bytes: its next batch fails, saying why.
    with pytest.raises(PackreadOSError) as info:
        reader.batch(idx)
    _changed(info, url)
    with pytest.raises(PackreadOSError) as info:
        reader.batch([0])
    _changed(info, url)
    # A fresh open reads the new object, not the stale cache entry of the old one.
    fresh = open_big(kind, url, index_cache=cache)
    assert not remote_object(fresh).index_hit
    assert remote_object(fresh).etag != remote_object(reader).etag
    assert_same(fresh.batch(idx), x2[idx])
    every = list(range(0, len(x2), 7))
    assert_same(fresh.batch(every), x2[every])
    # ... and caches it in turn.
    third = open_big(kind, url, index_cache=cache)
    assert remote_object(third).index_hit
    assert_same(third.batch(idx), x2[idx])


def _cache_options(cache: str, folder: Path) -> dict[str, Any]:
    if cache == "index":
        return {"index_cache": folder}
    return {"index_cache": False, "cache_dir": folder}


def _twins(kind: str) -> tuple[tuple[bytes, np.ndarray], tuple[bytes, np.ndarray]]:
    make, _ = BIG[kind]
    one, two = make(30), make(31)
    assert len(one[0]) == len(two[0])  # a replacement that the size does not tell
    return one, two


# BAD_INPUTS 69
@pytest.mark.parametrize("cache", ["index", "data"])
@pytest.mark.parametrize("kind", ["hdf5", "zip"])
def test_without_etags_a_replaced_object_is_told_by_its_last_modified_time(kind, cache, tmp_path):
    (raw1, x1), (raw2, x2) = _twins(kind)
    options = _cache_options(cache, tmp_path / "cache")
    idx, every = [7, 1, 200], list(range(0, len(x1), 7))
    with versioned_http(etag="none", last_modified=True) as http:
        url = http.put(f"a.{BIG[kind][1]}", raw1)
        first = open_big(kind, url, **options)
        assert remote_object(first).etag is None
        assert remote_object(first).modified is not None
        assert_same(first.batch(idx), x1[idx])
        http.put(f"a.{BIG[kind][1]}", raw2)
        # A fresh open reads the new object: the caches were keyed on the time too (they
        # were keyed on URL and size alone, and served the old object's metadata or data).
        fresh = open_big(kind, url, **options)
        assert_same(fresh.batch(every), x2[every])
        # The open reader: its requests say If-Unmodified-Since, so the server refuses them,
        # and it never reads the new bytes against the old metadata. Data it has cached on
        # disk may still serve it, the old object's own.
        try:
            got = first.batch(every)
        except PackreadOSError as e:
            _changed_error(e, url)
        else:
            assert cache == "data"
            assert_same(got, x1[every])
        sent = [r for r in http.requests if r["If-Unmodified-Since"]]
        assert sent
        assert not any(r["If-Match"] for r in http.requests)


# BAD_INPUTS 69
@pytest.mark.parametrize("kind", ["hdf5", "zip"])
def test_weak_etags_are_not_sent_as_if_match_and_still_tell_a_replacement(kind, tmp_path):
    # A server that applies If-Match strictly refuses a weak ETag in it (RFC 9110 13.1.1):
    # every read failed with "object changed" although nothing had changed.
    (raw1, x1), (raw2, x2) = _twins(kind)
    idx = [7, 1, 200]
    with versioned_http(etag="weak", last_modified=True, strict=True) as http:
        url = http.put(f"w.{BIG[kind][1]}", raw1)
        reader = open_big(kind, url, index_cache=tmp_path / "cache")
        assert remote_object(reader).etag.startswith("W/")
        assert_same(reader.batch(idx), x1[idx])
        assert_same(reader.batch(range(len(x1))), x1)
        assert not any(r["If-Match"] for r in http.requests)
        http.put(f"w.{BIG[kind][1]}", raw2)
        with pytest.raises(PackreadOSError) as info:
            reader.batch([0, 299])
        _changed(info, url)
        assert_same(open_big(kind, url, index_cache=tmp_path / "cache").batch(idx), x2[idx])


# BAD_INPUTS 69
@pytest.mark.parametrize("kind", ["hdf5", "zip"])
def test_an_object_without_any_validator_is_never_cached(kind, tmp_path):
    # Neither an ETag nor a Last-Modified time: a replacement of the same size cannot be told
    # apart (docs/remote.md says so), so nothing of such an object is kept on disk, and a new
    # reader always reads what is there now.
    (raw1, x1), (raw2, x2) = _twins(kind)
    cache = tmp_path / "cache"
    with versioned_http(etag="none", last_modified=False) as http:
        url = http.put(f"n.{BIG[kind][1]}", raw1)
        reader = open_big(kind, url, index_cache=cache, cache_dir=tmp_path / "data")
        assert remote_object(reader).modified is None
        assert_same(reader.batch(range(len(x1))), x1)
        kept = [p for p in tmp_path.rglob("*") if p.is_file()]
        assert kept == [], kept
        http.put(f"n.{BIG[kind][1]}", raw2)
        fresh = open_big(kind, url, index_cache=cache, cache_dir=tmp_path / "data")
        assert_same(fresh.batch(range(len(x2))), x2)


def test_strong_etags_are_sent_as_if_match(tmp_path):
    (raw1, x1), _ = _twins("hdf5")
    with versioned_http(etag="strong", last_modified=True) as http:
        url = http.put("s.h5", raw1)
        reader = open_big("hdf5", url, index_cache=False)
        assert_same(reader.batch([3, 9]), x1[[3, 9]])
        later = http.requests[1:]  # after the open's first request
        assert later
        assert all(r["If-Match"] and not r["If-Unmodified-Since"] for r in later)


@pytest.mark.parametrize("kind", ["hdf5", "zip"])
def test_a_pickled_reader_of_a_replaced_object_fails(store, kind, tmp_path, request):
    name = f"pickled-replaced-{request.node.callspec.id}"
    url, _ = put_big(store, kind, name, seed=20)
    for cache in (tmp_path / "cache", False):
        reader = open_big(kind, url, index_cache=cache)
        blob = pickle.dumps(reader)
        store.put(f"fresh/{name}.{BIG[kind][1]}", BIG[kind][0](21 + bool(cache))[0])
        # Unpickling may read the metadata (no cache) and fail there, or at the first batch.
        with pytest.raises(PackreadOSError) as info:
            _unpickle_and_read(blob)
        _changed(info, url)


def _unpickle_and_read(blob: bytes) -> Any:
    return pickle.loads(blob).batch([0, 1])


def _read_unpickled(blob: bytes, idx: list[int]) -> tuple[Any, Any]:
    """``(reader, batch)`` of the reader pickled as ``blob``, or ``(None, error)`` when
    unpickling or the batch raised ``PackreadOSError``."""
    try:
        again = pickle.loads(blob)
        return again, again.batch(idx)
    except PackreadOSError as e:
        return None, e


def _changed_error(err: BaseException, url: str) -> None:
    assert isinstance(err, PackreadOSError), type(err)
    assert "changed" in str(err), str(err)
    assert url in str(err), str(err)


def test_a_pickled_image_reader_of_a_replaced_archive_fails(store, data):
    """As every reader of one object: unpickled (a DataLoader worker), it reads the object it
    was opened on, or says it changed; never another archive under the same name."""
    rel = f"fresh/images-{store.kind}.zip"
    url = store.put(rel, (data.root / "img/photos.zip").read_bytes())
    reader = packread.ImageReader(url, size=16)
    blob = pickle.dumps(reader)
    with zipfile.ZipFile(data.root / "img/photos.zip") as z:
        kept = [n for n in z.namelist() if not n.startswith("rocket/")]
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as out:
            for n in kept:
                out.writestr(n, z.read(n))
    store.put(rel, buf.getvalue())
    again, got = _read_unpickled(blob, [0, 1])
    if again is not None:
        pytest.fail(
            f"the unpickled reader read the replaced archive: {len(again)} images, classes "
            f"{again.classes} (the reader pickled had {len(reader)}, {reader.classes})"
        )
    _changed_error(got, url)


def test_a_pickled_sharded_reader_of_a_replaced_shard_fails(store, data):
    rels = [f"fresh/shards-{store.kind}/part_{k}.h5" for k in range(2)]
    urls = [
        store.put(rel, (data.root / f"fmt/shard_{k + 3}.h5").read_bytes())
        for k, rel in enumerate(rels)
    ]
    reader = packread.HDF5Reader(urls, "images")
    before = reader.batch([0, 27])
    blob = pickle.dumps(reader)
    # Shard 1 replaced by another file of as many samples (zeros).
    other = io.BytesIO()
    with h5py.File(other, "w") as f:
        zeros = np.zeros((3, *formats.SHAPE), "<f4")
        f.create_dataset("images", data=zeros, chunks=(1, *formats.SHAPE), compression="gzip")
        f.create_dataset("labels", data=np.zeros(3, "<i4"))
    store.put(rels[1], other.getvalue())
    again, got = _read_unpickled(blob, [0, 27])
    if again is not None:
        mixed = np.array_equal(got[0], before[0]) and not np.array_equal(got[1], before[1])
        pytest.fail(
            "the unpickled reader read the replaced shard"
            + (" (one batch mixing the old shard 0 and the new shard 1)" if mixed else "")
        )
    _changed_error(got, urls[1])


def test_a_replaced_npy_object_is_detected(store):
    a = np.arange(24, dtype="<f8").reshape(2, 3, 4)
    rels = [f"fresh/npy-{store.kind}-{k}.npy" for k in range(2)]
    urls = [store.put(rel, formats_npy(a * (k + 2))) for k, rel in enumerate(rels)]
    reader = packread.NpyReader(urls)
    assert_same(reader.batch([1, 0]), np.stack([a * 3, a * 2]))
    store.put(rels[1], formats_npy(a + 1))  # same size, new bytes
    with pytest.raises(PackreadOSError) as info:
        reader.batch([0, 1])
    _changed(info, urls[1])
    assert_same(packread.NpyReader(urls).batch([1, 0]), np.stack([a + 1, a * 2]))


def formats_npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def small_members_zip(kind: str, n: int) -> tuple[bytes, np.ndarray]:
    """``n`` stored members of 16 bytes (``raw``) or small ``.npy`` files, back to back."""
    x = np.arange(n * 4, dtype="<f4").reshape(n, 4)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for i in range(n):
            if kind == "raw":
                z.writestr(f"m/{i:05d}.bin", x[i].tobytes())
            else:
                z.writestr(f"m/{i:05d}.npy", formats_npy(x[i]))
    return buf.getvalue(), x


@pytest.mark.parametrize("kind", ["raw", "npy"])
def test_a_first_batch_of_many_small_members_takes_few_requests(store, kind):
    """Members lying back to back are fetched by a few merged requests (``COALESCE``), their
    local headers too: not by one round trip (or two) per member, which over a real network
    makes the first epoch of a remote archive of small samples crawl."""
    n = 300
    raw, x = small_members_zip(kind, n)
    url = store.put(f"fresh/small-{kind}-{store.kind}.zip", raw)
    opts = {"dtype": "<f4", "shape": (4,)} if kind == "raw" else {}
    reader = packread.ZipReader(url, index_cache=False, **opts)
    assert reader.shape == (4,)
    obj = remote_object(reader)
    before = obj.fetched()[0]
    assert_same(reader.batch(list(range(n))), x)
    first = obj.fetched()[0] - before
    assert_same(reader.batch(list(range(n))), x)
    again = obj.fetched()[0] - before - first
    assert again <= 2
    assert first <= 8, f"{first} requests for a first batch of {n} adjacent members"


def test_a_deleted_object_is_file_not_found_at_the_next_batch(s3_store):
    url = s3_store.put("fresh/deleted.zip", big_dir_zip(30, 50)[0])
    reader = packread.ZipReader(url, dtype="<u2", shape=(8,))
    reader.batch([0])
    s3_store.s3.client().delete_object(Bucket=s3_store.bucket, Key="fresh/deleted.zip")
    with pytest.raises(PackreadFileNotFoundError, match="HTTP 404"):
        reader.batch([1])


# --------------------------------------------------------------------------------------------
# 5. Faults between reader and server


@pytest.fixture(scope="module")
def fault_data(data: Data) -> dict[str, np.ndarray]:
    """A 4 MiB HDF5 file of one 64 KiB chunk per sample (nginx only: moto would reread it per
    request), so that samples far apart are fetched by requests of their own."""
    folder = data.root / "faults"
    folder.mkdir(exist_ok=True)
    x = sample_data(np.random.default_rng(40), (64, 128, 128), "<f4", compressible=False)
    with h5py.File(folder / "big.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(1, 128, 128))
    with zipfile.ZipFile(folder / "big.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(len(x)):
            z.writestr(f"{i:03d}.npy", formats_npy(x[i]))
    return {"x": x}


@pytest.fixture
def proxy(http):
    with FaultProxy(http.host, http.port) as p:
        yield p


#: Samples 8 apart: 512 KiB gaps, wider than requests merge over, so one request each.
SPREAD = [*range(0, 64, 8), 63, 1]


def test_dropped_connections_are_retried(proxy, fault_data, data):
    x = fault_data["x"]
    proxy.drop_every = 3
    h5 = packread.HDF5Reader(proxy.address + "/faults/big.h5", "x")
    zipped = packread.ZipReader(proxy.address + "/faults/big.zip")
    npys = packread.NpyReader([f"{proxy.address}/fmt/npy/s00{i}.npy" for i in range(8)])
    for _ in range(3):
        assert_same(h5.batch(SPREAD), x[SPREAD])
        assert_same(zipped.batch(SPREAD[::-1]), x[SPREAD[::-1]])
    local = packread.NpyReader([str(data.root / f"fmt/npy/s00{i}.npy") for i in range(8)])
    assert_same(npys.batch([7, 0, 3, 3]), local.batch([7, 0, 3, 3]))
    assert proxy.dropped >= 1, "no connection was dropped: the test tested nothing"


def test_connections_cut_mid_body_are_retried(proxy, fault_data):
    x = fault_data["x"]
    h5 = packread.HDF5Reader(proxy.address + "/faults/big.h5", "x")
    zipped = packread.ZipReader(proxy.address + "/faults/big.zip")
    # Each connection carries 100 kB of answers and is cut: a 64 KiB chunk fits once, the
    # second answer on a kept-alive connection is cut half-way.
    proxy.cut_after_bytes = 100_000
    for _ in range(2):
        assert_same(h5.batch(SPREAD), x[SPREAD])
        assert_same(zipped.batch(SPREAD), x[SPREAD])
    assert proxy.cut >= 1, "no connection was cut: the test tested nothing"


def test_connections_reset_are_retried(proxy, fault_data):
    x = fault_data["x"]
    h5 = packread.HDF5Reader(proxy.address + "/faults/big.h5", "x")
    proxy.reset = True
    proxy.drop_every = 2
    for _ in range(2):
        assert_same(h5.batch(SPREAD), x[SPREAD])
    assert proxy.dropped >= 1


def test_latency_does_not_change_the_batch(proxy, fault_data):
    x = fault_data["x"]
    h5 = packread.HDF5Reader(proxy.address + "/faults/big.h5", "x")
    proxy.delay = 0.2
    t = time.monotonic()
    assert_same(h5.batch(SPREAD), x[SPREAD])
    # 10 requests in flight together: about one delay, not ten.
    assert time.monotonic() - t < 1.5


def sever(proxy: FaultProxy) -> None:
    """Closes every connection through the proxy now, as a server going away does (the
    client's pooled connections would otherwise still reach it)."""
    with proxy._lock:
        links = list(proxy._links)
    for link in links:
        link.close()


def _fails_in_bounded_time(call: Callable[[], Any], url: str) -> BaseException:
    t = time.monotonic()
    with pytest.raises(OSError, match=re.escape(url)) as info:
        call()
    elapsed = time.monotonic() - t
    assert elapsed < BOUNDED_S, f"took {elapsed:.1f} s"
    assert isinstance(info.value, PackreadOSError), type(info.value)
    assert url in str(info.value), str(info.value)
    return info.value


@pytest.mark.parametrize("kind", ["hdf5", "zip", "npy"])
def test_a_server_that_stays_down_fails_in_bounded_time(proxy, fault_data, kind):
    rel = {"hdf5": "/faults/big.h5", "zip": "/faults/big.zip", "npy": "/fmt/npy/s000.npy"}[kind]
    url = proxy.address + rel
    open_ = {
        "hdf5": lambda: packread.HDF5Reader(url, "x", storage_options=FAST_FAIL),
        "zip": lambda: packread.ZipReader(url, storage_options=FAST_FAIL),
        "npy": lambda: packread.NpyReader([url], storage_options=FAST_FAIL),
    }[kind]
    reader = open_()
    proxy.down = True
    sever(proxy)
    err = _fails_in_bounded_time(lambda: reader.batch([0, -1]), url)
    assert not isinstance(err, (FileNotFoundError, PermissionError))
    # An open while it is down fails the same way.
    _fails_in_bounded_time(open_, url)
    assert proxy.dropped >= 2
    # Once it is back, the same reader reads again.
    proxy.down = False
    got = reader.batch([0])
    assert got.shape[0] == 1


def test_a_hung_server_times_out(proxy, fault_data):
    url = proxy.address + "/faults/big.h5"
    reader = packread.HDF5Reader(url, "x", storage_options=FAST_FAIL)
    proxy.blackhole = True
    sever(proxy)
    err = _fails_in_bounded_time(lambda: reader.batch([0, 32]), url)
    assert isinstance(err, TimeoutError) or "timed out" in str(err), repr(err)
    err = _fails_in_bounded_time(
        lambda: packread.ZipReader(proxy.address + "/faults/big.zip", storage_options=FAST_FAIL),
        proxy.address + "/faults/big.zip",
    )
    assert isinstance(err, TimeoutError) or "timed out" in str(err), repr(err)


def test_a_slow_answer_within_the_timeout_is_waited_for(proxy, fault_data):
    x = fault_data["x"]
    reader = packread.HDF5Reader(proxy.address + "/faults/big.h5", "x", storage_options=FAST_FAIL)
    proxy.delay = 1.0  # under the 2 s timeout
    assert_same(reader.batch([5, 50]), x[[5, 50]])


# --------------------------------------------------------------------------------------------
# 6. Ctrl-C


def _interrupt_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.daemon = True
    timer.start()
    return timer


def _time_to_interrupt(call: Callable[[], Any]) -> float | None:
    """Seconds from the start of ``call()`` until KeyboardInterrupt reached it (``None`` if
    it returned or raised otherwise and no interrupt followed)."""
    # A process started in the background by a non-interactive shell ignores SIGINT, and then
    # interrupt_main does nothing: Python's own handler, for this call only.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    t = time.monotonic()
    timer = _interrupt_after(0.5)
    try:
        try:
            call()
        finally:
            timer.join()
        time.sleep(0.2)  # an interrupt left pending arrives here
    except KeyboardInterrupt:
        return time.monotonic() - t
    finally:
        signal.signal(signal.SIGINT, old)
    return None


#: A batch of one 64 KiB sample (small enough to be read on the calling thread) and one of
#: ten spread over the file.
BATCHES = {"one-sample": [3], "two-samples": [3, 30], "ten-samples": SPREAD}


@pytest.mark.parametrize("size", list(BATCHES))
def test_ctrl_c_interrupts_a_slow_batch(proxy, fault_data, size):
    idx = BATCHES[size]
    reader = packread.HDF5Reader(proxy.address + "/faults/big.h5", "x")
    proxy.delay = 5.0
    took = _time_to_interrupt(lambda: reader.batch(idx))
    proxy.clear()
    assert took is not None, "the batch was not interrupted"
    assert took < 2.0, f"KeyboardInterrupt came {took:.1f} s after the start (Ctrl-C at 0.5 s)"
    # The reader still works once the interrupted requests are done with.
    assert_same(reader.batch(idx), fault_data["x"][idx])


@pytest.mark.parametrize("size", list(BATCHES))
def test_batch_async_of_a_remote_batch_returns_at_once(proxy, fault_data, size):
    """``batch_async`` starts the requests and returns: what ``PackDataset``'s prefetch and a
    training step overlapping the next batch's download rely on."""
    idx = BATCHES[size]
    reader = packread.HDF5Reader(proxy.address + "/faults/big.h5", "x")
    proxy.delay = 1.5
    t = time.monotonic()
    pending = reader.batch_async(idx)
    returned = time.monotonic() - t
    assert_same(pending.result(timeout=30), fault_data["x"][idx])
    assert returned < 0.5, f"batch_async took {returned:.1f} s to return (1.5 s per request)"


def test_ctrl_c_interrupts_a_slow_open(proxy, fault_data):
    proxy.delay = 5.0
    url = proxy.address + "/faults/big.zip"
    took = _time_to_interrupt(lambda: packread.ZipReader(url, index_cache=False))
    proxy.clear()
    assert took is not None, "the open was not interrupted"
    assert took < 2.0, f"KeyboardInterrupt came {took:.1f} s after the start (Ctrl-C at 0.5 s)"


# --------------------------------------------------------------------------------------------
# Odds and ends


def test_remote_objects_report_what_they_fetched(store, data):
    reader = packread.ZipReader(store.url("fmt/raw.zip"), members="img/*.raw", index_cache=False)
    obj = remote_object(reader)
    size = (data.root / "fmt/raw.zip").stat().st_size
    assert obj.size == size
    assert obj.etag
    requests, received = obj.fetched()
    assert requests == 1
    assert received == size  # the archive is smaller than the tail an open fetches
    reader.batch([0, 1])
    assert obj.fetched()[0] >= requests + 1
    assert "fmt/raw.zip" in repr(reader)


def test_a_closed_remote_reader_refuses_batches(store):
    reader = packread.HDF5Reader(store.url("h5/zstd.h5"), "x")
    reader.close()
    with pytest.raises(packread.ReaderClosedError):
        reader.batch([0])


def test_many_threads_share_one_remote_reader(store, data):
    remote = packread.HDF5Reader(store.url("h5/blosc.h5"), "x")
    local = packread.HDF5Reader(str(data.root / "h5/blosc.h5"), "x")
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for idx in index_lists(H5_N, seed)[1:4]:
                assert_same(remote.batch(idx), local.batch(idx))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert not any(t.is_alive() for t in threads)


# --------------------------------------------------------------------------------------------
# The data cache (cache_dir=): repeated epochs on one node read fetched blocks from disk.


def _cache_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")]


@pytest.mark.parametrize("kind", ["hdf5", "zip"])
def test_a_second_epoch_reads_the_data_cache(store, kind, tmp_path, request):
    name = f"datacache-{request.node.callspec.id}"
    url, x = put_big(store, kind, name, seed=20)
    cache = tmp_path / "blocks"
    reader = open_big(kind, url, index_cache=False, cache_dir=cache)
    every = list(range(len(x)))
    assert_same(reader.batch(every), x)
    after_first = remote_object(reader).fetched()
    assert after_first[0] > 0
    assert _cache_files(cache), "blocks were written"
    # Every byte of the epoch is now on disk: no request at all, and the same rows.
    back = every[::-1]
    assert_same(reader.batch(back), x[back])
    assert remote_object(reader).fetched() == after_first
    # A worker's copy (pickled with its size and ETag) reads the same blocks.
    worker = pickle.loads(pickle.dumps(reader))
    assert_same(worker.batch(every), x)
    assert remote_object(worker).fetched() == (0, 0)


def test_the_data_cache_never_serves_a_replaced_object(store, tmp_path, request):
    name = f"datacache-replaced-{request.node.callspec.id}"
    url, x1 = put_big(store, "hdf5", name, seed=21)
    cache = tmp_path / "blocks"
    every = list(range(len(x1)))
    assert_same(open_big("hdf5", url, cache_dir=cache).batch(every), x1)
    raw2, x2 = big_meta_h5(22)
    store.put(f"fresh/{name}.h5", raw2)
    # Same URL, same folder: the new object has another ETag, so other blocks.
    assert_same(open_big("hdf5", url, cache_dir=cache).batch(every), x2)


def test_the_data_cache_stays_within_its_bound(store, tmp_path, request):
    """A 6 MB archive read whole through a 2 MiB cache: the folder never holds more."""
    rng = np.random.default_rng(24)
    x = rng.integers(0, 255, (60, 100_000), dtype=np.uint8)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for i, row in enumerate(x):
            z.writestr(f"m{i:03d}.raw", row.tobytes())
    url = store.put(f"fresh/datacache-bound-{request.node.callspec.id}.zip", buf.getvalue())
    cache = tmp_path / "blocks"
    bound = 2 << 20
    reader = packread.ZipReader(
        url, shape=(100_000,), index_cache=False, cache_dir=cache, cache_dir_bytes=bound
    )
    for start in range(0, len(x), 7):
        rows = list(range(start, min(start + 7, len(x))))
        assert_same(reader.batch(rows), x[rows])
    held = sum(p.stat().st_size for p in _cache_files(cache))
    assert 0 < held <= bound


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, InvalidArgumentError), (-5, InvalidArgumentError), ("big", PackreadTypeError)],
)
def test_a_bad_cache_bound_is_refused(store, tmp_path, value, error):
    with pytest.raises(error):
        open_big("hdf5", store.url("h5/gzip.h5"), cache_dir=tmp_path, cache_dir_bytes=value)
