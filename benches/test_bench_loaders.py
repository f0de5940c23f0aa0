"""packread's PyTorch loader side by side with the fastest peer loaders, on the same samples.

**Data** (``write_loader_data``): 2,000 samples (``PACKREAD_BENCH_LOADERS_N`` overrides it, e.g.
256 for a smoke run), each a 3x256x256 uint8 image (196 KB: seeded random bytes, 4 random
bits a byte after the first row, so that zstd compresses it about 2:1) and an int64 label,
written once per format into ``.bench/loaders/`` (kept between runs; ``LAYOUT_VERSION``
renews them) and read once before timing (warm page cache):

- packread: HDF5 written by h5py, ``images`` one sample a chunk, and ``labels``; uncompressed
  and with ``hdf5plugin.Zstd()``; and uncompressed with ``images`` contiguous (no chunks),
  packread's fastest uncompressed layout for this data (faster than one sample a chunk in a
  quick check; the peers' formats hold each sample apart, as the chunked file does);
- FFCV: a ``.beton`` (``NDArrayField`` + ``IntField``);
- litdata: ``litdata.optimize`` chunks, uncompressed and ``compression="zstd"`` (each sample
  compressed alone, ``compression_level="sample"``);
- mosaicml-streaming: ``MDSWriter`` shards (``ndarray:uint8:3,256,256`` + ``int64``),
  uncompressed and ``compression="zstd"``;
- webdataset: tar shards of 100 samples (``ShardWriter``: ``.npy`` + ``.cls``);
- DALI: one ``.npy`` per image and one per label, for ``fn.readers.numpy``.

**One call** of a variant is one shuffled epoch, batch 64 (the last batch may be short, and
with webdataset each worker's last one), and every loader's batches are used the same way: the
images tensor and the labels are taken and an 8-byte fingerprint of each image computed
(``fingerprints``, as in test_bench_torch.py).
Every epoch is checked before and after timing: the multiset of (fingerprint, label) it
delivered equals the data set's, so a loader that drops, repeats or garbles a sample or pairs
an image with another's label fails the run.

**Groups** (``compare``: all variants alternated round by round; roles ``packread``,
``reference`` for the peers and ``limit`` for the numpy gather-copy; there is no baseline):

- ``loaders-raw-1proc``: uncompressed, in one process: ``PackDataset`` (both HDF5 layouts)
  under ``DataLoader(batch_size=None, num_workers=0)``; FFCV's ``Loader`` (its own 2 threads, its
  best configuration); litdata's ``StreamingDataLoader(num_workers=0)``; the numpy gather-copy
  (``np.take(images, idx, axis=0, out=buf)`` from RAM into a preallocated, touched buffer) over
  the same kind of shuffled epoch.
- ``loaders-raw-2workers``: uncompressed, 2 DataLoader workers (persistent, DataLoader's
  default prefetch) or 2 threads: packread, litdata, mosaicml-streaming, webdataset, DALI's CPU
  ``fn.readers.numpy`` pipeline, FFCV; the gather-copy on 1 and 2 threads.
- ``loaders-zstd``: zstd, in one process and with 2 workers: packread, litdata, mosaic.

Each variant's note says how it shuffles and, for the zstd group, what it decompresses when.
Peers that are not installed (``make bench-peers`` installs them) or whose files could not be
written are left out with a warning saying why, and recorded in ``extra_info["skipped"]``.
``extra_info["epochs"]`` records per loader the main process's CPU seconds (all its threads:
packread's, FFCV's and DALI's included), the iterating thread's, and the DataLoader worker
processes'.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numpy as np
import pytest
import torch
from conftest import (
    BATCH,
    SEED,
    TORCH_NOTE,
    two_thread_pool,
    warm_page_cache,
)
from torch.utils.data import DataLoader, default_collate

sys.path.insert(0, os.path.dirname(__file__))

from image_workloads import (
    DaliPipelineEpochs,
    ffcv_shuffled,
    missing,
    run_group,
    skip_peer,
    timed_epoch,
)

from packread.torch import PackDataset

#: Samples in the data set (``PACKREAD_BENCH_LOADERS_N`` overrides it).
N_SAMPLES = 2000
SHAPE = (3, 256, 256)
N_CLASSES = 1000
WORKERS = 2
#: Bumped whenever the files written change, so that a cache of old files is not used.
LAYOUT_VERSION = 2
#: litdata chunks and mosaic shards: at most this many bytes each (6-7 of them).
CHUNK_BYTES = 64 << 20
#: webdataset: samples per tar shard (20 shards, 10 per worker), and its shuffle buffer.
SHARD_SAMPLES = 100
WDS_BUFFER = 1000
#: litdata's ``StreamingDataset(batch_decode=...)`` (the "batch_decode=0" of the issue's
#: note): how many items it deserialises together once a chunk is local; ``0``: each item
#: alone, the fastest here. The default, ``"auto"``, picks windows of 85 rows for 196 KB
#: arrays, which its 256-sample shuffle blocks straddle, so windows are decoded again and
#: again (an epoch took many times longer in a quick check).
LITDATA_BATCH_DECODE = 0
#: litdata's ``optimize(compression="zstd", compression_level=...)``: ``"sample"`` compresses
#: each sample alone, as the HDF5 file holds one sample a zstd chunk, and was its fastest
#: here. The default, ``"batch"``, compresses frames of 256 samples and inflates a whole frame
#: to read one of its samples (about 2x slower in one process and 5x with 2 workers, whose
#: share of a chunk does not start on a frame, in a quick check); ``"chunk"`` decompresses
#: whole chunk files into a cache on disk (slowest with 2 workers).
LITDATA_ZSTD_LEVEL = "sample"


def n_samples() -> int:
    return int(os.environ.get("PACKREAD_BENCH_LOADERS_N", N_SAMPLES))


def sample_image(i: int) -> np.ndarray:
    """Sample ``i``'s image, the same in any process: seeded random bytes whose rows after the
    first keep only their 4 high bits, so that zstd has something to do (about 2:1, as raw
    photographs; the first row stays whole random bytes for the fingerprints)."""
    img = np.random.default_rng([SEED, i]).integers(0, 256, SHAPE, dtype=np.uint8)
    img[:, 1:, :] &= 0xF0
    return img


def fingerprints(images: np.ndarray | torch.Tensor) -> np.ndarray:
    """8 bytes of each image (the start of its first row: random, so practically unique); the
    rule of test_bench_torch.py."""
    arr = images.numpy() if isinstance(images, torch.Tensor) else images
    return np.ascontiguousarray(arr[:, 0, 0, :8]).view("<u8").ravel()


def pairs(fps: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The multiset of (fingerprint, label): rows ``(fp, label)`` as uint64, sorted."""
    out = np.empty((len(fps), 2), dtype=np.uint64)
    out[:, 0] = fps
    out[:, 1] = labels.astype(np.int64).view(np.uint64)
    return out[np.lexsort((out[:, 1], out[:, 0]))]


# --------------------------------------------------------------------------------------------
# The data set in every format


@dataclass
class LoaderData:
    """The samples in RAM, where each format of them is, and the formats left out."""

    images: np.ndarray = field(repr=False)
    labels: np.ndarray = field(repr=False)
    #: Format name -> file or folder.
    paths: dict[str, str]
    #: Format name -> why it is missing (its peer not installed, or its writer failed).
    skipped: dict[str, str]
    #: Array bytes over stored bytes, per format.
    ratios: dict[str, float]

    @property
    def n(self) -> int:
        return len(self.labels)

    def expected(self) -> np.ndarray:
        return pairs(fingerprints(self.images), self.labels)

    def describe(self) -> str:
        return (
            f"{self.n} samples of 3x256x256 uint8 (random 4-bit bytes) + int64 label, "
            f"{self.images.nbytes / 1e6:.0f} MB, batch {BATCH}, warm page cache"
        )


def _write_h5(path: str, data: LoaderData, chunked: bool = True, **filters: Any) -> None:
    """``images`` one sample a chunk (or contiguous), and ``labels``."""
    with h5py.File(path, "w") as f:
        chunks = (1, *SHAPE) if chunked else None
        f.create_dataset("images", data=data.images, chunks=chunks, **filters)
        f.create_dataset("labels", data=data.labels)


def _write_beton(path: str, data: LoaderData) -> None:
    from ffcv.fields import IntField, NDArrayField
    from ffcv.writer import DatasetWriter

    class Samples:
        def __len__(self) -> int:
            return data.n

        def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
            return data.images[i], int(data.labels[i])

    fields = {"image": NDArrayField(np.dtype(np.uint8), SHAPE), "label": IntField()}
    DatasetWriter(path, fields, num_workers=WORKERS).from_indexed_dataset(Samples())


def _litdata_sample(item: tuple[int, int]) -> dict[str, Any]:
    """``litdata.optimize``'s function: (index, label) -> the sample (made again in the
    writer's worker process)."""
    i, label = item
    return {"image": sample_image(i), "label": label}


def _write_litdata(path: str, data: LoaderData, compression: str | None = None) -> None:
    from litdata import optimize

    optimize(
        fn=_litdata_sample,
        inputs=[(i, int(k)) for i, k in enumerate(data.labels)],
        output_dir=path,
        chunk_bytes=CHUNK_BYTES,
        compression=compression,
        compression_level=LITDATA_ZSTD_LEVEL if compression else None,
        num_workers=WORKERS,
        start_method="fork",
        verbose=False,
    )


def _write_mds(path: str, data: LoaderData, compression: str | None = None) -> None:
    from streaming import MDSWriter

    columns = {"image": "ndarray:uint8:" + ",".join(map(str, SHAPE)), "label": "int64"}
    with MDSWriter(
        out=path, columns=columns, compression=compression, size_limit=CHUNK_BYTES
    ) as out:
        for image, label in zip(data.images, data.labels, strict=True):
            out.write({"image": image, "label": label})


def _write_wds(path: str, data: LoaderData) -> None:
    import webdataset as wds

    os.makedirs(path)
    pattern = os.path.join(path, "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=SHARD_SAMPLES, verbose=0) as out:
        for i, (image, label) in enumerate(zip(data.images, data.labels, strict=True)):
            out.write({"__key__": f"{i:06d}", "npy": image, "cls": int(label)})


def _write_npy(path: str, data: LoaderData) -> None:
    for sub in ("images", "labels"):
        os.makedirs(os.path.join(path, sub))
    for i, (image, label) in enumerate(zip(data.images, data.labels, strict=True)):
        np.save(os.path.join(path, "images", f"{i:06d}.npy"), image)
        np.save(os.path.join(path, "labels", f"{i:06d}.npy"), label.reshape(1))


#: Format -> (file or folder name, peer module it needs or None for packread's own, writer).
FORMATS: dict[str, tuple[str, str | None, Callable[[str, LoaderData], None]]] = {
    "hdf5": ("raw.h5", None, _write_h5),
    "hdf5-contiguous": ("contiguous.h5", None, partial(_write_h5, chunked=False)),
    "hdf5-zstd": ("zstd.h5", None, lambda p, d: _write_h5(p, d, **hdf5plugin.Zstd())),
    "beton": ("raw.beton", "ffcv", _write_beton),
    "litdata": ("litdata", "litdata", _write_litdata),
    "litdata-zstd": ("litdata-zstd", "litdata", lambda p, d: _write_litdata(p, d, "zstd")),
    "mds": ("mds", "streaming", _write_mds),
    "mds-zstd": ("mds-zstd", "streaming", lambda p, d: _write_mds(p, d, "zstd")),
    "wds": ("wds", "webdataset", _write_wds),
    "npy": ("npy", "nvidia.dali", _write_npy),
}


def _files(path: str) -> list[str]:
    if not os.path.isdir(path):
        return [path]
    return sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names)


def write_loader_data(root: str, n: int, log: Callable[[str], None] = print) -> LoaderData:
    """The samples, and every format whose peer is installed, under ``root`` (written once;
    a format whose files are there from an earlier run is reused)."""
    root = os.path.join(root, f"v{LAYOUT_VERSION}-n{n}")
    os.makedirs(root, exist_ok=True)
    images = np.empty((n, *SHAPE), dtype=np.uint8)
    for i in range(n):
        images[i] = sample_image(i)
    labels = np.random.default_rng(SEED).integers(0, N_CLASSES, n, dtype=np.int64)
    data = LoaderData(images, labels, paths={}, skipped={}, ratios={})
    for fmt, (name, peer, write) in FORMATS.items():
        why = missing(peer) if peer else None
        if why:
            data.skipped[fmt] = why
            continue
        path = os.path.join(root, name)
        done = path + ".done"
        if not os.path.exists(done):
            log(f"loaders benchmark: writing {fmt} ({n} samples) ...")
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
            try:
                write(path, data)
            except Exception as e:
                if peer is None:
                    raise
                data.skipped[fmt] = f"writing its files failed ({type(e).__name__}: {e})"
                continue
            Path(done).write_text("ok\n")
        data.paths[fmt] = path
        stored = sum(os.path.getsize(f) for f in _files(path))
        data.ratios[fmt] = round((images.nbytes + labels.nbytes) / stored, 3)
    return data


@pytest.fixture(scope="session")
def loader_data() -> LoaderData:
    root = Path(__file__).resolve().parent.parent / ".bench" / "loaders"
    data = write_loader_data(str(root), n_samples())
    warm_page_cache([f for p in data.paths.values() for f in _files(p)])
    if "mds" in data.paths or "mds-zstd" in data.paths:
        # Shared memory that a killed earlier run of mosaic left behind.
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
    return data


# --------------------------------------------------------------------------------------------
# One epoch of a loader, used and checked the same way for all


#: ``unpack(batch) -> (images, labels)`` for one loader's batches.
Unpack = Callable[[Any], tuple[Any, Any]]


def _by_key(images: str, labels: str) -> Unpack:
    return lambda batch: (batch[images], batch[labels])


def _by_position(batch: Any) -> tuple[Any, Any]:
    return batch[0], batch[1]


def _int64(labels: Any) -> np.ndarray:
    """A copy of a batch's labels as int64 (FFCV's and DALI's buffers are reused)."""
    arr = labels.numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    return arr.astype(np.int64).reshape(-1)


def _torch_loader(loader: Any) -> Any:
    """The ``DataLoader`` of a loader: webdataset's ``WebLoader`` wraps one in its pipeline."""
    for stage in getattr(loader, "pipeline", None) or []:
        if isinstance(stage, DataLoader):
            return stage
    return loader


class EpochRun:
    """``load(None)`` runs one epoch of the loader (made on the first call, so that DataLoader
    workers fork before FFCV's and DALI's threads start) and returns the (fingerprint, label)
    multiset it delivered; the epoch's time and CPU figures are kept."""

    def __init__(self, make_loader: Callable[[], Any], unpack: Unpack) -> None:
        self.make_loader = make_loader
        self.unpack = unpack
        self.loader: Any = None
        self.epochs: list[dict[str, float]] = []

    def __call__(self, _: Any) -> np.ndarray:
        threads = torch.get_num_threads()
        if self.loader is None:
            self.loader = self.make_loader()
        fps: list[np.ndarray] = []
        labs: list[np.ndarray] = []

        def use(batch: Any) -> None:
            images, labels = self.unpack(batch)
            fps.append(fingerprints(images))
            labs.append(_int64(labels))

        self.epochs.append(timed_epoch(self.loader, use, _torch_loader(self.loader)))
        if torch.get_num_threads() != threads:
            # A loader that changes torch's threads for the process slows the others down
            # (FfcvEpochs says how); put it back, and say so.
            warnings.warn(
                f"a loader set torch.set_num_threads({torch.get_num_threads()}); set back to "
                f"{threads}",
                stacklevel=2,
            )
            torch.set_num_threads(threads)
        return pairs(np.concatenate(fps), np.concatenate(labs))

    def close(self) -> None:
        """Lets the loader's worker processes and threads go."""
        loader, self.loader = self.loader, None
        it = getattr(_torch_loader(loader), "_iterator", None)
        shutdown = getattr(it, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        close = getattr(loader, "close", None)
        if callable(close):
            close()


def _epoch_check(expected: np.ndarray) -> Callable[[Any, Any], None]:
    def check(_: Any, got: np.ndarray) -> None:
        assert got.shape == expected.shape, f"{len(got)} samples, expected {len(expected)}"
        assert np.array_equal(got[:, 0], expected[:, 0]), (
            "the epoch's images differ from the data set's (dropped, repeated or garbled)"
        )
        assert np.array_equal(got, expected), "images paired with the wrong labels"

    return check


# --------------------------------------------------------------------------------------------
# The loaders


def _dataloader(dataset: Any, workers: int, batch_size: int | None = BATCH) -> DataLoader:
    return DataLoader(
        dataset, batch_size=batch_size, num_workers=workers, persistent_workers=workers > 0
    )


def pack_loader(path: str, workers: int) -> DataLoader:
    """``PackDataset`` (batches of 64, uniform sample shuffle per epoch) under a DataLoader."""
    return _dataloader(PackDataset(path, BATCH, seed=SEED), workers, batch_size=None)


class FfcvEpochs:
    """FFCV's ``Loader``: its own ``WORKERS`` threads, ``OrderOption.RANDOM``, the file
    memory-mapped (``os_cache=True``: the page cache), 3 batches ahead (its default); one
    epoch per ``iter()``.

    FFCV's ``Loader`` calls ``torch.set_num_threads(num_workers)`` in the calling thread when it
    is made and at every ``iter()``; the caller's setting is put back right after, so that the
    loaders alternated with it keep the comparison's one torch thread (with two, litdata's
    ``torch.stack`` in the main process spun OpenMP threads and took seconds an epoch). FFCV's
    own work runs on its threads, which keep FFCV's setting."""

    def __init__(self, path: str) -> None:
        from ffcv.fields.ndarray import NDArrayDecoder
        from ffcv.transforms import ToTensor

        before = torch.get_num_threads()
        self.loader: Any = ffcv_shuffled(path, [NDArrayDecoder(), ToTensor()], seed=SEED)
        torch.set_num_threads(before)

    def __iter__(self) -> Iterator[Any]:
        before = torch.get_num_threads()
        it = iter(self.loader)
        torch.set_num_threads(before)
        yield from it

    def close(self) -> None:
        self.loader = None


def litdata_loader(path: str, workers: int) -> Any:
    from litdata import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(path, shuffle=True, seed=SEED, batch_decode=LITDATA_BATCH_DECODE)
    return StreamingDataLoader(
        dataset, batch_size=BATCH, num_workers=workers, persistent_workers=workers > 0
    )


def mosaic_loader(workers: int, local: str, remote: str | None = None) -> DataLoader:
    """mosaicml-streaming's ``StreamingDataset`` (its default shuffle, ``py1e``) under a
    DataLoader; with ``remote``, shards are copied from there into ``local`` (and
    decompressed) on first use."""
    from streaming import StreamingDataset

    dataset = StreamingDataset(
        local=local, remote=remote, shuffle=True, shuffle_seed=SEED, batch_size=BATCH
    )
    return _dataloader(dataset, workers)


def wds_loader(path: str, workers: int) -> Any:
    """webdataset's recommended pipeline: shards dealt to workers and shuffled (a new order
    every epoch, ``detshuffle``), samples through a shuffle buffer, decoded, batched (into
    tensors, in the worker) and handed over by its ``WebLoader``."""
    import webdataset as wds

    urls = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".tar"))
    dataset = (
        wds.WebDataset(urls, shardshuffle=len(urls), detshuffle=True, seed=SEED)
        .shuffle(WDS_BUFFER)
        .decode()
        .to_tuple("npy", "cls")
        .batched(BATCH, collation_fn=default_collate, partial=True)
    )
    return wds.WebLoader(
        dataset, batch_size=None, num_workers=workers, persistent_workers=workers > 0
    )


class DaliNumpyEpochs(DaliPipelineEpochs):
    """DALI's CPU pipeline: two ``fn.readers.numpy`` (images and labels, one ``.npy`` file per
    sample each) with one global shuffle seed, so that both read the same permutation;
    ``num_threads=2``, ``device_id=None``. Iterating it gives one epoch
    (``DALIGenericIterator``, the last batch partial)."""

    def __init__(self, path: str, n: int) -> None:
        from nvidia.dali import fn, pipeline_def

        names = [f"{i:06d}.npy" for i in range(n)]

        def reader(sub: str, name: str | None = None) -> Any:
            return fn.readers.numpy(
                file_root=os.path.join(path, sub),
                files=names,
                shuffle_after_epoch=True,
                shuffle_after_epoch_seed=SEED % 2**31,
                pad_last_batch=True,
                name=name,
            )

        # device_id=None: CPU only (DALI's stubs type it int).
        @pipeline_def(  # type: ignore[call-overload]
            batch_size=BATCH, num_threads=WORKERS, device_id=None, seed=SEED % 2**31
        )
        def pipe() -> Any:
            return reader("images", "reader"), reader("labels")

        super().__init__(pipe())


class GatherEpochs:
    """The limit: each batch of a shuffled epoch gathered by numpy from the arrays in RAM
    (``np.take(a, idx, axis=0, out=buf, mode="clip")``) into preallocated, touched buffers, on
    one thread or split over two (numpy releases the GIL while it copies), handed over as
    tensors (``torch.from_numpy``)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, threads: int) -> None:
        self.images = images
        self.labels = labels
        self.threads = threads
        self.buf = np.ones((BATCH, *images.shape[1:]), dtype=images.dtype)
        self.lbuf = np.ones(BATCH, dtype=labels.dtype)
        self.epoch = 0

    def _take(self, idx: np.ndarray, out: np.ndarray) -> None:
        if self.threads == 1:
            np.take(self.images, idx, axis=0, out=out, mode="clip")
            return
        h = len(idx) // 2
        halves = [(idx[:h], out[:h]), (idx[h:], out[h:])]
        list(
            two_thread_pool().map(
                lambda p: np.take(self.images, p[0], axis=0, out=p[1], mode="clip"), halves
            )
        )

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.labels)
        perm = np.random.default_rng((SEED, self.epoch)).permutation(n)
        self.epoch += 1
        for lo in range(0, n, BATCH):
            idx = perm[lo : lo + BATCH]
            out, lout = self.buf[: len(idx)], self.lbuf[: len(idx)]
            self._take(idx, out)
            np.take(self.labels, idx, out=lout, mode="clip")
            yield torch.from_numpy(out), torch.from_numpy(lout)


# --------------------------------------------------------------------------------------------
# What each variant is, and the notes that say how it shuffles and what it caches

SHUFFLE = {
    "packread": "uniform shuffle of the samples, a new permutation every epoch",
    "ffcv": "OrderOption.RANDOM: a uniform permutation of the samples every epoch",
    "litdata": (
        "shuffles the order of its chunks, and within a chunk blocks of 256 samples, then the "
        "samples inside each block (its defaults); chunks of <= 64 MB"
    ),
    "mosaic": (
        "its own shuffle, py1e (the default): the shards' order shuffled, each shard's samples "
        "placed at random within a range of shuffle_block_size samples around it (the default, "
        "262,144, spans this whole data set), a new order every epoch; shards of <= 64 MB"
    ),
    "wds": (
        f"shards ({SHARD_SAMPLES} samples each) dealt to the workers, each worker's shards "
        f"shuffled (a new order every epoch), then a shuffle buffer of {WDS_BUFFER} samples "
        "per worker"
    ),
    "dali": "shuffle_after_epoch: a uniform permutation of the files every epoch",
    "limit": "a uniform permutation of the samples every epoch",
}

#: Variant label -> (role, note, epoch runner).
Runs = dict[str, tuple[str, str, EpochRun]]


def _reference(
    runs: Runs,
    data: LoaderData,
    skipped: dict[str, str],
    fmt: str,
    label: str,
    note: str,
    make: Callable[[str], Any],
    unpack: Unpack,
) -> None:
    """Adds peer loader ``label``: ``make(path)`` over the files of format ``fmt``, its batches
    taken apart by ``unpack``; or, when its peer is not installed or its files could not be
    written, records it as left out (with a warning)."""
    if fmt not in data.paths:
        skip_peer(skipped, "loaders", label, data.skipped.get(fmt, f"no {fmt} files"))
        return
    runs[label] = ("reference", note, EpochRun(partial(make, data.paths[fmt]), unpack))


def _run_group(
    benchmark: Any,
    group: str,
    data: LoaderData,
    runs: Runs,
    skipped: dict[str, str],
    note: str,
    **extra: Any,
) -> None:
    run_group(
        benchmark,
        runs,
        skipped,
        group=group,
        check=_epoch_check(data.expected()),
        samples=data.n,
        nbytes=data.images.nbytes,
        case=data.describe(),
        min_rounds=3,
        max_time=40.0,
        note=f"{note} {TORCH_NOTE}.",
        **extra,
    )


def _limits(data: LoaderData, threads: list[int]) -> Runs:
    return {
        f"numpy gather from RAM: np.take(images, idx, out=buf), {t} thread{'s' * (t > 1)}": (
            "limit",
            SHUFFLE["limit"],
            EpochRun(partial(GatherEpochs, data.images, data.labels, t), _by_position),
        )
        for t in threads
    }


def _ffcv(data: LoaderData, runs: Runs, skipped: dict[str, str]) -> None:
    note = (
        f"{SHUFFLE['ffcv']}; os_cache=True (memory-mapped, page cache), batches_ahead=3; "
        "each batch is a tensor view of FFCV's reused buffers"
    )
    label = f"FFCV Loader (.beton, NDArrayField), {WORKERS} threads"
    _reference(runs, data, skipped, "beton", label, note, FfcvEpochs, _by_position)


def _litdata_note(extra: str = "") -> str:
    return (
        f"{SHUFFLE['litdata']}; batch_decode={LITDATA_BATCH_DECODE} (each sample deserialised "
        f"alone; the default 'auto' decodes windows of rows); reads the chunks in place "
        f"(memory-mapped){extra}"
    )


def _pack_raw(data: LoaderData, workers: int, note: str) -> Runs:
    """packread's variants of an uncompressed group: one sample a chunk (the layout the peers'
    formats mirror), and contiguous."""
    how = f"{workers} workers" if workers else "num_workers=0"
    return {
        f"PackDataset (HDF5, {layout}), {how}": (
            "packread",
            note,
            EpochRun(partial(pack_loader, data.paths[fmt], workers), _by_key("images", "labels")),
        )
        for fmt, layout in [("hdf5", "1 sample a chunk"), ("hdf5-contiguous", "contiguous")]
    }


def test_raw_1proc(benchmark: Any, loader_data: LoaderData) -> None:
    data = loader_data
    skipped: dict[str, str] = {}
    runs = _pack_raw(
        data, 0, f"{SHUFFLE['packread']}; packread's own threads read and prefetch 2 batches"
    )
    _reference(
        runs,
        data,
        skipped,
        "litdata",
        "litdata StreamingDataLoader, num_workers=0",
        _litdata_note(),
        partial(litdata_loader, workers=0),
        _by_key("image", "label"),
    )
    _ffcv(data, runs, skipped)
    runs.update(_limits(data, [1]))
    _run_group(
        benchmark,
        "loaders-raw-1proc",
        data,
        runs,
        skipped,
        "Uncompressed, one process: one shuffled epoch per call, batch 64; each batch's images "
        "fingerprinted. FFCV uses its own 2 threads (its best configuration).",
    )


def test_raw_2workers(benchmark: Any, loader_data: LoaderData) -> None:
    data = loader_data
    skipped: dict[str, str] = {}
    # DataLoaders with worker processes first: their workers fork before FFCV's and DALI's
    # threads start.
    runs = _pack_raw(
        data, WORKERS, f"{SHUFFLE['packread']}; each worker reads its batches on packread's threads"
    )
    peers = [
        (
            "litdata",
            f"litdata StreamingDataLoader, {WORKERS} workers",
            _litdata_note(),
            partial(litdata_loader, workers=WORKERS),
            _by_key("image", "label"),
        ),
        (
            "mds",
            f"mosaicml-streaming StreamingDataset (MDS), {WORKERS} workers",
            f"{SHUFFLE['mosaic']}; reads its shards in place (local=, no remote)",
            partial(mosaic_loader, WORKERS),
            _by_key("image", "label"),
        ),
        (
            "wds",
            f"webdataset WebLoader (tar shards, .npy + .cls), {WORKERS} workers",
            f"{SHUFFLE['wds']}; batches collated into tensors in the workers",
            partial(wds_loader, workers=WORKERS),
            _by_position,
        ),
        (
            "npy",
            f"DALI CPU pipeline (fn.readers.numpy, .npy per sample), {WORKERS} threads",
            f"{SHUFFLE['dali']}; labels from a second numpy reader with the same shuffle seed",
            partial(DaliNumpyEpochs, n=data.n),
            _by_position,
        ),
    ]
    for peer in peers:
        _reference(runs, data, skipped, *peer)
    _ffcv(data, runs, skipped)
    runs.update(_limits(data, [1, 2]))
    _run_group(
        benchmark,
        "loaders-raw-2workers",
        data,
        runs,
        skipped,
        f"Uncompressed, {WORKERS} DataLoader workers (persistent, default prefetch) or "
        f"{WORKERS} threads: one shuffled epoch per call, batch 64; each batch's images "
        "fingerprinted.",
    )


def test_zstd(benchmark: Any, loader_data: LoaderData, bench_dir: Path) -> None:
    data = loader_data
    skipped: dict[str, str] = {}
    runs: Runs = {}
    for workers in (WORKERS, 0):
        how = f"{workers} workers" if workers else "num_workers=0"
        runs[f"PackDataset (HDF5 zstd, 1 sample a chunk), {how}"] = (
            "packread",
            f"{SHUFFLE['packread']}; decodes every chunk it reads, every epoch (no cache of "
            "decompressed data)",
            EpochRun(
                partial(pack_loader, data.paths["hdf5-zstd"], workers),
                _by_key("images", "labels"),
            ),
        )
        _reference(
            runs,
            data,
            skipped,
            "litdata-zstd",
            f"litdata StreamingDataLoader (zstd), {how}",
            _litdata_note(
                f"; compression_level='{LITDATA_ZSTD_LEVEL}' (each sample zstd-compressed "
                "alone, its fastest here; the default 'batch' inflates 256-sample frames): "
                "decompresses every sample it reads, every epoch, in memory; no cache of "
                "decompressed data"
            ),
            partial(litdata_loader, workers=workers),
            _by_key("image", "label"),
        )
        _reference(
            runs,
            data,
            skipped,
            "mds-zstd",
            f"mosaicml-streaming StreamingDataset (MDS zstd), {how}",
            f"{SHUFFLE['mosaic']}; CACHES: on first use (the untimed warm-up epoch) it "
            "copies each zstd shard from remote= into its local= cache and decompresses "
            "it there once; every timed epoch then reads the decompressed shards and "
            "decodes nothing",
            # The zstd shards are the remote; make(path) passes them as remote=.
            partial(mosaic_loader, workers, str(bench_dir / f"mds-zstd-cache-{workers}")),
            _by_key("image", "label"),
        )
    _run_group(
        benchmark,
        "loaders-zstd",
        data,
        runs,
        skipped,
        "zstd (images of 4 random bits a byte: about 2:1), in one process and "
        f"with {WORKERS} DataLoader workers: one shuffled epoch per call, batch 64.",
        compression=data.ratios.get("hdf5-zstd"),
    )
