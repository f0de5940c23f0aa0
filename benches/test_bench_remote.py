"""Object-storage benchmarks (issue 17): the HDF5 gzip file of the epoch benchmarks (one
196 KB image a chunk) and the ZIP of stored ``.raw`` members, served by nginx on loopback
behind a TCP proxy that adds 20 ms to every response (tests/python/support/objstore.py).

Groups:

- ``remote-batch-hdf5`` / ``remote-batch-zip``: one call reads a fresh batch of 64 random
  samples. Baselines: h5py over ``fsspec.open(url)`` (the usual recipe), one sample at a time
  as the seeds' Dataset reads; ``zipfile`` over an fsspec file. packread: ``HDF5Reader(url)``,
  ``ZipReader(url)``. The report's extra info has packread's requests per batch and bytes
  fetched per byte used.
- ``remote-epoch``: one call is one shuffled epoch at batch 64. Baseline: the seed-style
  Dataset over fsspec in a ``DataLoader`` with 2 workers; packread: ``PackDataset(url, 64)``
  in the main process and with 2 workers; also with no latency added (nginx directly).
- ``remote-open``: opening a 100,000-chunk HDF5 file, cold (empty index cache) and from the
  index cache, and a file written with paged aggregation; times and requests in extra info.
"""

from __future__ import annotations

import os
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import fsspec
import h5py
import numpy as np
import pytest
import torch
from conftest import BATCH, Variant, compare, compare_rows, torch_threads
from torch.utils.data import DataLoader
from workloads import IMAGE_SHAPE, SeedH5Dataset, write_workloads

import packread
from packread.torch import PackDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from support.objstore import FaultProxy, nginx_http

N = int(os.environ.get("PACKREAD_BENCH_REMOTE_N", "512"))
LATENCY = 0.020
OPEN_CHUNKS = 100_000


def _object(reader: Any) -> Any:
    """The opened object a reader of one URL reads (what it pickles as): its requests and
    bytes received are counted there."""
    return reader._source


def _fetched(reader_src: Any) -> tuple[int, int]:
    return tuple(reader_src.fetched())  # type: ignore[return-value]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("remote")
    ws = write_workloads(str(root), N, ["hdf5-gzip", "zip-raw"], log=lambda m: None)
    h5_path, zip_path = ws["hdf5-gzip"].path, ws["zip-raw"].path
    with h5py.File(h5_path, "r") as f:
        arrays = {"images": f["images"][:], "labels": f["labels"][:]}
    cache = root / "index-cache"
    with nginx_http(os.path.dirname(h5_path)) as http, FaultProxy(http.host, http.port) as proxy:
        proxy.delay = LATENCY
        yield {
            "arrays": arrays,
            "direct": lambda name: http.url(name),
            "slow": lambda name: f"{proxy.address}/{name}",
            "h5": os.path.basename(h5_path),
            "zip": os.path.basename(zip_path),
            "cache": cache,
            "root": root,
        }


def test_remote_batch_hdf5(benchmark: Any, served: dict[str, Any]) -> None:
    url = served["slow"](served["h5"])
    h5 = h5py.File(fsspec.open(url).open(), "r")
    reader = packread.HDF5Reader(url, remote=packread.Remote(index_cache=served["cache"]))
    src = _object(reader)

    def h5py_load(idx: np.ndarray) -> dict[str, np.ndarray]:
        images = np.stack([h5["images"][int(i)] for i in idx])
        labels = np.array([h5["labels"][int(i)] for i in idx])
        return {"images": images, "labels": labels}

    before = _fetched(src)
    calls = 0

    def pack_load(idx: np.ndarray) -> Any:
        nonlocal calls
        calls += 1
        return reader.batch(idx)

    variants = [
        Variant("baseline", "h5py over fsspec.open(url), one sample at a time", h5py_load, 3),
        Variant("packread", "packread HDF5Reader(url)", pack_load),
    ]
    with torch_threads(1):
        compare_rows(
            benchmark,
            group="remote-batch-hdf5",
            case=f"{N} samples 3x256x256 uint8 gzip, 1 a chunk, nginx + {LATENCY * 1e3:.0f} ms",
            variants=variants,
            rows=served["arrays"],
            n=N,
            min_rounds=5,
            max_time=4.0,
        )
    requests, received = (a - b for a, b in zip(_fetched(src), before, strict=True))
    stored = _stored_bytes_per_sample(served)
    benchmark.extra_info["requests_per_batch"] = round(requests / calls, 2)
    benchmark.extra_info["bytes_fetched_per_byte_used"] = round(
        received / (calls * BATCH * stored), 3
    )


def _stored_bytes_per_sample(served: dict[str, Any]) -> float:
    """Stored (compressed) bytes of one sample's chunks in the HDF5 file."""
    path = served["root"]
    files = list(Path(path).rglob(served["h5"]))
    with h5py.File(files[0], "r") as f:
        ds = f["images"]
        return ds.id.get_storage_size() / len(ds) + f["labels"].dtype.itemsize


def test_remote_batch_zip(benchmark: Any, served: dict[str, Any]) -> None:
    url = served["slow"](served["zip"])
    zf = zipfile.ZipFile(fsspec.open(url).open())
    names = sorted(n for n in zf.namelist() if n.endswith(".raw"))
    remote = packread.Remote(index_cache=served["cache"])
    reader = packread.ZipReader(
        url, members="img/*.raw", dtype=np.uint8, shape=IMAGE_SHAPE, remote=remote
    )
    src = _object(reader)

    def zipfile_load(idx: np.ndarray) -> np.ndarray:
        return np.stack(
            [np.frombuffer(zf.read(names[int(i)]), np.uint8).reshape(IMAGE_SHAPE) for i in idx]
        )

    before = _fetched(src)
    calls = 0

    def pack_load(idx: np.ndarray) -> np.ndarray:
        nonlocal calls
        calls += 1
        return reader.batch(idx)

    images = served["arrays"]["images"]
    with torch_threads(1):
        compare_rows(
            benchmark,
            group="remote-batch-zip",
            case=f"{N} stored 196 KB members, nginx + {LATENCY * 1e3:.0f} ms",
            variants=[
                Variant("baseline", "zipfile over fsspec.open(url)", zipfile_load, 3),
                Variant("packread", "packread ZipReader(url)", pack_load),
            ],
            rows=images,
            n=N,
            min_rounds=5,
            max_time=4.0,
        )
    requests, received = (a - b for a, b in zip(_fetched(src), before, strict=True))
    benchmark.extra_info["requests_per_batch"] = round(requests / calls, 2)
    benchmark.extra_info["bytes_fetched_per_byte_used"] = round(
        received / (calls * BATCH * images[0].nbytes), 3
    )


class FsspecH5Dataset(SeedH5Dataset):
    """The seed Dataset with its file opened through fsspec (the usual remote recipe)."""

    def __init__(self, url: str, n: int) -> None:
        self.path = url
        self.file = None
        self.n = n

    def __getitem__(self, i: int):
        if self.file is None:
            self.file = h5py.File(fsspec.open(self.path).open(), "r")
        return torch.from_numpy(self.file["images"][i]), int(self.file["labels"][i])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "file": None}


def _epoch_check(idx: Any, got: Any) -> None:
    assert sorted(got) == list(range(N)), "every sample once"


def _labels_of_epoch(loader: Any, key: Any) -> list[int]:
    labels: list[int] = []
    for batch in loader:
        labels.extend(int(x) for x in key(batch))
    return labels


def test_remote_epoch(benchmark: Any, served: dict[str, Any]) -> None:
    slow, direct = served["slow"](served["h5"]), served["direct"](served["h5"])
    # labels are i % 1000 and N <= 1000: each label is its sample's index.
    assert N <= 1000
    seed = DataLoader(
        FsspecH5Dataset(slow, N),
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
    )
    opts = {"remote": packread.Remote(index_cache=served["cache"])}
    pack_main = PackDataset(slow, BATCH, **opts)
    pack_workers = DataLoader(
        PackDataset(slow, BATCH, **opts),
        batch_size=None,
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context="forkserver",
    )
    pack_direct = PackDataset(direct, BATCH, **opts)
    epochs = iter(range(10**9))

    def pack_epoch(ds: Any) -> Any:
        def run(_: Any) -> list[int]:
            ds.set_epoch(next(epochs))
            return _labels_of_epoch(ds, lambda b: b["labels"])

        return run

    def workers_epoch(_: Any) -> list[int]:
        pack_workers.dataset.set_epoch(next(epochs))
        return _labels_of_epoch(pack_workers, lambda b: b["labels"])

    compare(
        benchmark,
        group="remote-epoch",
        case=f"{N} samples gzip HDF5, batch 64, nginx + {LATENCY * 1e3:.0f} ms",
        variants=[
            Variant(
                "baseline",
                "seed-style Dataset over fsspec, DataLoader 2 workers",
                lambda _: _labels_of_epoch(seed, lambda b: b[1]),
                3,
            ),
            Variant("packread", "PackDataset(url, 64), main process", pack_epoch(pack_main)),
            Variant("packread", "PackDataset(url, 64), DataLoader 2 workers", workers_epoch),
            Variant(
                "variant",
                "PackDataset(url, 64), main process, no latency added",
                pack_epoch(pack_direct),
            ),
        ],
        batches=iter(lambda: None, 1),
        check=_epoch_check,
        samples=N,
        nbytes=N * int(served["arrays"]["images"][0].nbytes),
        min_rounds=3,
        max_time=4.0,
        warmup_rounds=1,
    )


def _write_many_chunks(path: Path, paged: bool) -> None:
    extra = {"fs_strategy": "page", "fs_page_size": 1 << 20} if paged else {}
    rng = np.random.default_rng(7)
    with h5py.File(path, "w", **extra) as f:
        f.create_dataset(
            "x",
            data=rng.integers(0, 255, (OPEN_CHUNKS, 64), dtype=np.uint8),
            chunks=(1, 64),
            compression="gzip",
        )


def test_remote_open(benchmark: Any, served: dict[str, Any], tmp_path: Path) -> None:
    """Opening a 100,000-chunk file: cold, from the index cache, and written with paged
    aggregation; over nginx directly and with the latency added."""
    root = served["root"]
    serve_dir = Path(next(Path(root).rglob(served["h5"]))).parent
    for name, paged in (("many.h5", False), ("many-paged.h5", True)):
        if not (serve_dir / name).exists():
            _write_many_chunks(serve_dir / name, paged)
    results: dict[str, Any] = {}

    def open_once(url: str, cache: Path) -> tuple[float, int, int, bool]:
        t0 = time.perf_counter()
        r = packread.HDF5Reader(url, "x", remote=packread.Remote(index_cache=cache))
        dt = time.perf_counter() - t0
        assert len(r) == OPEN_CHUNKS
        requests, received = _object(r).fetched()
        return dt, requests, received, _object(r).index_hit

    def run() -> None:
        for where in ("direct", "slow"):
            for name in ("many.h5", "many-paged.h5"):
                url = served[where](name)
                cache = tmp_path / f"cache-{where}-{name}"
                cold = open_once(url, cache)
                warm = open_once(url, cache)
                results[f"{where} {name}"] = {
                    "cold_s": round(cold[0], 3),
                    "cold_requests": cold[1],
                    "cold_bytes": cold[2],
                    "cached_s": round(warm[0], 4),
                    "cached_requests": warm[1],
                    "cached_index_hit": warm[3],
                }

    benchmark.group = "remote-open"
    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info["opens"] = results
    for key, r in results.items():
        print(f"\n{key}: {r}")
