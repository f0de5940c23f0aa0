"""Mixing sources by weight: packread's ``MixDataset`` against the same samples read from each
source alone, and against the peers' weighted mixtures, warm page cache, side by side in one run.

**Data** (``write_data``: written once into ``--dir``, default ``/tmp/packread-bench-mix``, and
reused while its ``.done`` markers say it is complete; ``LAYOUT`` renews it): three sources of
uint8 3x256x256 samples (196 KB), as many samples in each as its weight asks of an epoch, so
that an epoch reads every sample once (``FULL``: 2,000 / 1,200 / 800, 4,000 an epoch, 786 MB of
arrays; ``--quick``: 400 in all; about 2.6 GB on disk in all for ``FULL``):

- ``h5`` (weight 0.5): HDF5 written by h5py, one sample a chunk, gzip level 4 (about 1.7:1);
  ``PackDataset(path, 64, arrays="images")``. The same samples uncompressed (one sample a
  chunk) make packread's like-for-like mixture with the peers, whose files are uncompressed;
- ``zip`` (0.3): a ZIP of raw members, stored (``zipfile.ZIP_STORED``);
  ``PackDataset(path, 64, members="*.raw", shape=(3, 256, 256))``;
- ``npy`` (0.2): a folder of ``.npy`` files, one sample each (``np.save``), which
  ``packread.open`` reads as one ``NpyReader``; ``PackDataset(folder, 64)``.

Each sample is seeded random bytes whose rows after the first keep their 4 high bits (as
``test_bench_loaders.py``'s, so that the codec has work to do); the first 4 bytes of the first
row name the sample: its source (0, 1, 2) and its index in the source (3 bytes, little-endian).
Every loader's batches are counted and checked by those bytes, the same bytes in every format,
with no field added to any loader's samples.

**Contenders**, each with ``num_workers=0`` and ``2`` (``persistent_workers=True``; with workers,
packread reads with 1 thread a worker, ``set_num_threads(1)`` in ``worker_init_fn``; without, on
its 2 threads), batch 64; packread's with the ``h5`` source gzip and uncompressed (``--h5``):

- ``packread MixDataset``: ``MixDataset({"h5": ..., "zip": ..., "npy": ...}, [0.5, 0.3, 0.2],
  stop=4000)`` under ``DataLoader(batch_size=None)``; every batch mixes the three sources (32 /
  19 / 13 samples, give or take one).
- ``packread sources alone``: the baseline of the overhead goal (MixDataset at most 5 %
  slower): the three ``PackDataset`` s above, each under its own ``DataLoader(batch_size=None)``,
  one epoch of each, one after the other: the same 0.5 / 0.3 / 0.2 of 4,000 samples, unmixed.
  Their times apart are each source's rate alone, the natural limit of a mixture of them. They
  start three pipelines an epoch, MixDataset one (a loader's first batch is read with nothing
  to overlap it): about two batches' reads an epoch in MixDataset's favour, 2-3 % here.
- litdata 0.2.76: ``litdata.optimize`` folders (one per source, 64 MB chunks, uncompressed),
  ``CombinedStreamingDataset([StreamingDataset(d, shuffle=True, batch_decode=0) ...],
  weights=[0.5, 0.3, 0.2], iterate_over_all=False)`` under ``StreamingDataLoader(batch_size=64)``.
  Weights need ``iterate_over_all=False``: each sample's source is drawn at random
  (``random.Random(seed).choices``), and the epoch ends when a source runs out, so an epoch is a
  little shorter than 4,000 samples (rates are samples delivered over time).
- mosaicml-streaming 0.13.0: ``MDSWriter`` shards (one folder per source, 64 MB,
  uncompressed), ``StreamingDataset(streams=[Stream(local=d, proportion=w) ...], shuffle=True,
  batch_size=64)`` under ``DataLoader(batch_size=64)``; local only, no remote.
- Hugging Face ``datasets.interleave_datasets`` is left out (``HF_NOTE`` says why).

``torch.set_num_threads(1)`` for the run (as in a DataLoader worker: litdata's ``torch.stack``
in the main process otherwise spins OpenMP threads).

**Rounds.** Every contender runs one warm-up epoch (checked against ``realised()`` for
MixDataset), then one epoch a round, in an order reversed every other round; every epoch is a
fresh shuffle drawn by the loader itself (the next epoch of its persistent iterator). Every
epoch's samples are checked: valid names, each sample's first 12 and last 8 bytes its own,
each batch ``(n, 3, 256, 256)`` uint8, no sample repeated within a pass of its source, every
sample exactly once where the loader promises it (the sources alone, mosaic), 4,000 samples for
MixDataset. The median round is reported:
samples/s, MixDataset over the sources alone (goal: at least 0.95), MixDataset over the fastest
peer (goal: at least 2x), and per contender the realised shares of the epoch and the spread of
each source's samples per batch. For context, a limit: gzip inflate (CPython's
``zlib.decompress`` of the HDF5 file's chunks, held in memory) and memcpy (``np.take`` of 64
samples into a batch), on 2 threads.

**Resume** (``resume_checks``, untimed): each loader's state saved a third of the way into an
epoch read with 2 workers, a new loader restored from it, and the epoch so read compared with
the same epoch read uninterrupted.

    python benches/bench_mix.py --rounds 15 --json .bench/mix.json   # make bench-mix
    python benches/bench_mix.py --quick              # 400 samples, 1 round: a check, no numbers
    python benches/bench_mix.py --quick --peers --h5 uncompressed --workers 0   # quicker
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import threading
import time
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import packread

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import announce, missing, print_results, write_json

#: Bumped whenever the files written change, so that old files are not reused.
LAYOUT = 1
SHAPE = (3, 256, 256)
SAMPLE_BYTES = math.prod(SHAPE)
WEIGHTS = {"h5": 0.5, "zip": 0.3, "npy": 0.2}
NAMES = list(WEIGHTS)
BATCH, WORKERS, SEED, DATA_SEED = 64, 2, 0, 38
#: Samples an epoch (all sources; each source holds its weight's share).
FULL, QUICK = 4000, 400
#: litdata chunks and mosaic shards: at most this many bytes each.
CHUNK_BYTES = 64 << 20

HF_NOTE = (
    "not installed: `pip install datasets -c requirements/lock.txt` "
    "resolves to datasets 5.2.0, which needs huggingface_hub>=1.31 (it would move the "
    "huggingface_hub==0.36.2 that requirements/bench-peers.txt pins for transformers 4.57.6, "
    "which mosaicml-streaming imports; transformers asks for huggingface_hub<1.0). With "
    "bench-peers.txt as constraints too, every datasets from 2.15 to 5.1 caps fsspec below "
    "lock.txt's 2026.9.0 or needs huggingface_hub>=1.31, so pip falls back to datasets 2.14.4 "
    "(2023), which does not import with pyarrow 26 (pa.PyExtensionType is gone) and, with "
    "pyarrow 20, fails on numpy 2 (np.array(copy=False))."
)


def sizes(total: int) -> dict[str, int]:
    """Samples in each source: its weight's share of an epoch of ``total``."""
    out = {k: round(total * w) for k, w in WEIGHTS.items()}
    assert sum(out.values()) == total, out
    return out


#: The packages whose versions the results give.
PACKAGES = [
    ("packread", "packread"),
    ("torch", "torch"),
    ("numpy", "numpy"),
    ("h5py", "h5py"),
    ("litdata", "litdata"),
    ("mosaicml-streaming", "streaming"),
    ("datasets", "datasets"),
]


# -- data ------------------------------------------------------------------------------------


def sample(source: int, i: int) -> np.ndarray:
    """Sample ``i`` of source ``source``, the same in any process: seeded random bytes, the
    rows after the first keeping their 4 high bits; bytes 0-3 of the first row are the source
    and ``i`` (little-endian)."""
    img = np.random.default_rng([DATA_SEED, source, i]).integers(0, 256, SHAPE, dtype=np.uint8)
    img[:, 1:, :] &= 0xF0
    img[0, 0, :4] = (source, i & 0xFF, (i >> 8) & 0xFF, (i >> 16) & 0xFF)
    return img


def samples(source: int, n: int) -> np.ndarray:
    out = np.empty((n, *SHAPE), np.uint8)
    for i in range(n):
        out[i] = sample(source, i)
    return out


def _write_h5(path: Path, images: np.ndarray, gzip: bool = True) -> None:
    import h5py

    codec: dict[str, Any] = {"compression": "gzip", "compression_opts": 4} if gzip else {}
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images, chunks=(1, *SHAPE), **codec)


def _write_h5_raw(path: Path, images: np.ndarray) -> None:
    _write_h5(path, images, gzip=False)


def _write_zip(path: Path, images: np.ndarray) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for i, img in enumerate(images):
            z.writestr(f"{i:06d}.raw", img.tobytes())


def _write_npy(path: Path, images: np.ndarray) -> None:
    path.mkdir()
    for i, img in enumerate(images):
        np.save(path / f"{i:06d}.npy", img)


def _litdata_sample(item: tuple[int, int]) -> dict[str, Any]:
    """``litdata.optimize``'s function (run in its worker processes): the sample, made again."""
    return {"image": sample(*item)}


def _write_litdata(path: Path, source: int, n: int) -> None:
    from litdata import optimize

    optimize(
        fn=_litdata_sample,
        inputs=[(source, i) for i in range(n)],
        output_dir=str(path),
        chunk_bytes=CHUNK_BYTES,
        num_workers=WORKERS,
        start_method="fork",
        verbose=False,
    )


def _write_mds(path: Path, images: np.ndarray) -> None:
    from streaming import MDSWriter

    columns = {"image": "ndarray:uint8:" + ",".join(map(str, SHAPE))}
    with MDSWriter(out=str(path), columns=columns, size_limit=CHUNK_BYTES) as out:
        for img in images:
            out.write({"image": img})


#: packread's files: (source, file or folder name, writer). ``h5raw`` is the ``h5`` source
#: again, uncompressed (the peers' files are): packread's like-for-like mixture.
OWN: dict[str, tuple[str, str, Callable[[Path, np.ndarray], None]]] = {
    "h5": ("h5", "h5.h5", _write_h5),
    "h5raw": ("h5", "h5-uncompressed.h5", _write_h5_raw),
    "zip": ("zip", "zip.zip", _write_zip),
    "npy": ("npy", "npy", _write_npy),
}
#: The ``h5`` source's two files: the HDF5 codec named in the contenders.
H5 = {"gzip": "h5", "uncompressed": "h5raw"}


def _files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    return sorted(Path(d) / f for d, _, names in os.walk(path) for f in names)


def _stored(paths: Iterable[Path]) -> int:
    return sum(f.stat().st_size for p in paths for f in _files(p))


@dataclass
class Data:
    root: Path
    n: dict[str, int]
    own: dict[str, Path]
    peers: dict[str, dict[str, Path]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    #: ``all_marks``: what each sample's ``marks`` must be.
    marks: list[np.ndarray] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.n.values())


def _made(path: Path, write: Callable[[Path], None], log: str) -> Path:
    """``path``, written by ``write`` (aside, then renamed) unless its ``.done`` marker is
    there from an earlier run."""
    done = path.with_name(path.name + ".done")
    if done.exists() and path.exists():
        return path
    print(f"writing {log} ...", flush=True)
    tmp = path.with_name(path.name + ".tmp")
    for p in (tmp, path):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    write(tmp)
    os.replace(tmp, path)
    done.write_text(json.dumps({"layout": LAYOUT}) + "\n")
    return path


def write_data(base: Path, total: int, peers: list[str]) -> Data:
    """Every source in packread's format and in each installed peer's, under
    ``base/v{LAYOUT}-n{total}`` (kept between runs)."""
    n = sizes(total)
    root = base / f"v{LAYOUT}-n{total}"
    root.mkdir(parents=True, exist_ok=True)
    data = Data(root, n, own={})
    wanted = {"litdata": "litdata", "mosaic": "streaming"}
    for peer in list(wanted):
        why = missing(wanted[peer]) if peer in peers else "not asked for (--peers)"
        if why:
            data.skipped[peer] = why
            del wanted[peer]
        else:
            data.peers[peer] = {}
    for s, name in enumerate(NAMES):
        images: np.ndarray | None = None

        def made(write: Callable[[Path, np.ndarray], None], s: int = s) -> Any:
            def go(path: Path) -> None:
                nonlocal images
                if images is None:
                    images = samples(s, n[NAMES[s]])
                write(path, images)

            return go

        for key, (source, fname, write) in OWN.items():
            if source == name:
                data.own[key] = _made(root / fname, made(write), f"{key} ({n[name]} samples)")
        if "litdata" in wanted:
            data.peers["litdata"][name] = _made(
                root / f"litdata-{name}",
                lambda p, s=s, name=name: _write_litdata(p, s, n[name]),
                f"litdata {name}",
            )
        if "mosaic" in wanted:
            data.peers["mosaic"][name] = _made(
                root / f"mds-{name}", made(_write_mds), f"mosaic MDS {name}"
            )
        del images
    data.marks = all_marks(data)
    data.skipped["Hugging Face datasets"] = (
        HF_NOTE if missing("datasets") else "installed, but no contender here (see HF_NOTE)"
    )
    return data


def warm(paths: Iterable[Path]) -> None:
    for p in paths:
        for f in _files(p):
            with open(f, "rb") as fh:
                while fh.read(1 << 22):
                    pass


# -- loaders (module level: DataLoader workers use them) -------------------------------------


def one_thread(_worker: int) -> None:
    """``worker_init_fn``: packread reads with 1 thread in each DataLoader worker."""
    packread.set_num_threads(1)


def pack_sources(data: Data, h5: str = "gzip", seed: int = SEED) -> dict[str, Any]:
    """The three ``PackDataset`` s, shuffled, each with its own seed; the ``h5`` source's file
    of codec ``h5`` (a key of ``H5``)."""
    from packread.torch import PackDataset

    return {
        "h5": PackDataset(str(data.own[H5[h5]]), BATCH, arrays="images", seed=seed + 1),
        "zip": PackDataset(
            str(data.own["zip"]), BATCH, members="*.raw", shape=SHAPE, seed=seed + 2
        ),
        "npy": PackDataset(str(data.own["npy"]), BATCH, seed=seed + 3),
    }


def mix_dataset(data: Data, h5: str = "gzip") -> Any:
    from packread.torch import MixDataset

    weights = list(WEIGHTS.values())
    return MixDataset(pack_sources(data, h5), weights, stop=data.total, seed=SEED)


def torch_loader(ds: Any, workers: int, **kw: Any) -> Any:
    from torch.utils.data import DataLoader

    if workers:
        kw.update(persistent_workers=True, worker_init_fn=one_thread)
    return DataLoader(ds, batch_size=None, num_workers=workers, **kw)


def litdata_loader(data: Data, workers: int, persistent: bool = True) -> Any:
    from litdata import CombinedStreamingDataset, StreamingDataLoader, StreamingDataset

    parts = [
        StreamingDataset(str(data.peers["litdata"][k]), shuffle=True, seed=SEED, batch_decode=0)
        for k in NAMES
    ]
    ds = CombinedStreamingDataset(
        parts, seed=SEED, weights=list(WEIGHTS.values()), iterate_over_all=False
    )
    return StreamingDataLoader(
        ds, batch_size=BATCH, num_workers=workers, persistent_workers=persistent and workers > 0
    )


def mosaic_dataset(data: Data) -> Any:
    from streaming import Stream, StreamingDataset

    streams = [Stream(local=str(data.peers["mosaic"][k]), proportion=WEIGHTS[k]) for k in NAMES]
    return StreamingDataset(streams=streams, shuffle=True, shuffle_seed=SEED, batch_size=BATCH)


def mosaic_loader(ds: Any, workers: int, persistent: bool = True) -> Any:
    from torch.utils.data import DataLoader

    return DataLoader(
        ds, batch_size=BATCH, num_workers=workers, persistent_workers=persistent and workers > 0
    )


# -- epochs ----------------------------------------------------------------------------------


@dataclass
class Epoch:
    """What one epoch delivered: each batch's sample names (``(rows, 4)`` bytes), and for the
    sources read alone, each source's seconds."""

    ids: list[np.ndarray]
    parts: dict[str, float] | None = None

    def names(self) -> tuple[np.ndarray, np.ndarray]:
        """``(source, index)`` of every sample, in order."""
        a = np.concatenate(self.ids).astype(np.int64)
        return a[:, 0], a[:, 1] | a[:, 2] << 8 | a[:, 3] << 16


def ids_of(batch: Any) -> np.ndarray:
    """A batch's (a tensor, or a dict holding ``image``) samples' names and fingerprints
    (``marks``), copied: a training loop keeps no view of a batch (a view kept would stop
    packread from reusing its memory)."""
    import torch

    x = batch["image"] if isinstance(batch, dict) else batch
    assert isinstance(x, torch.Tensor), type(x)
    assert x.dtype == torch.uint8, x.dtype
    assert tuple(x.shape[1:]) == SHAPE, x.shape
    return marks(x.numpy())


def marks(x: np.ndarray) -> np.ndarray:
    """Per sample of ``x``, ``(n, 3, 256, 256)``: its first 12 bytes (its name, then 8 random
    bytes) and its last 8, copied."""
    return np.concatenate([x[:, 0, 0, :12], x[:, -1, -1, -8:]], axis=1)


def all_marks(data: Data) -> list[np.ndarray]:
    """``marks`` of every sample of each source, made again from the seeds."""
    return [
        np.stack([marks(sample(s, i)[None])[0] for i in range(data.n[k])])
        for s, k in enumerate(NAMES)
    ]


def epochs(loader: Any) -> Callable[[], Epoch]:
    def run() -> Epoch:
        return Epoch([ids_of(b) for b in loader])

    return run


def alone_epochs(loaders: dict[str, Any]) -> Callable[[], Epoch]:
    """One epoch of each source's loader, one after the other, each timed."""

    def run() -> Epoch:
        ids, parts = [], {}
        for name, loader in loaders.items():
            t0 = time.perf_counter()
            ids += [ids_of(b) for b in loader]
            parts[name] = time.perf_counter() - t0
        return Epoch(ids, parts)

    return run


@dataclass
class Contender:
    run: Callable[[], Epoch]
    #: ``"mix"``: ``total`` samples, none repeated within a pass; ``"once"``: every sample
    #: exactly once; ``"until"``: at most ``total``, none repeated.
    promise: str
    workers: int
    #: ``"mix"`` (MixDataset), ``"alone"`` (the sources one after the other) or ``"peer"``.
    kind: str
    #: packread's: the ``h5`` source's codec (a key of ``H5``).
    h5: str | None = None
    after_warmup: Callable[[Epoch], None] | None = None


def check(name: str, epoch: Epoch, data: Data, promise: str) -> None:
    src, idx = epoch.names()
    n = np.array([data.n[k] for k in NAMES])
    assert np.all(src < len(NAMES)), f"{name}: a sample of source {src.max()}"
    assert np.all(idx < n[src]), f"{name}: a sample past its source's end"
    got_marks = np.concatenate(epoch.ids)
    for s in range(len(NAMES)):
        here = src == s
        bad = np.any(got_marks[here] != data.marks[s][idx[here]], axis=1)
        assert not bad.any(), f"{name}: {int(bad.sum())} {NAMES[s]} samples garbled"
    for s, k in enumerate(NAMES):
        got = np.bincount(idx[src == s], minlength=n[s])
        count = int(got.sum())
        passes = max(1, -(-count // n[s]))
        assert got.max(initial=0) <= passes, f"{name}: a {k} sample read {got.max()} times"
        if promise == "once":
            said = f"{name}: {k} read {count} times, not each sample once"
            assert count == n[s], said
            assert got.min() == 1, said
    if promise == "mix":
        assert len(src) == data.total, f"{name}: {len(src)} samples, not {data.total}"
    elif promise == "until":
        assert 0 < len(src) <= data.total, f"{name}: {len(src)} samples"


def measure(
    contenders: dict[str, Contender], rounds: int, data: Data
) -> dict[str, list[tuple[float, Epoch]]]:
    """Each contender's rounds as ``(seconds, epoch)``: one warm-up epoch each (checked), then
    ``rounds`` rounds of one epoch each in an order reversed every other round."""
    for name, c in contenders.items():
        t0 = time.perf_counter()
        first = c.run()
        check(name, first, data, c.promise)
        if c.after_warmup is not None:
            c.after_warmup(first)
        print(f"  warm-up {name}: {time.perf_counter() - t0:.2f} s", flush=True)
    out: dict[str, list[tuple[float, Epoch]]] = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            epoch = contenders[name].run()
            out[name].append((time.perf_counter() - t0, epoch))
            check(name, epoch, data, contenders[name].promise)
        print(f"  round {r + 1}/{rounds} done", flush=True)
    return out


# -- the limit -------------------------------------------------------------------------------


def limits(data: Data, threads: int) -> dict[str, float]:
    """Samples/s of the work a mixed epoch cannot avoid, from memory, best of 3 passes on
    ``threads`` threads: ``zlib.decompress`` of the HDF5 file's gzip chunks (it releases the
    GIL), and ``np.take`` of 64 random samples into a batch (the stored sources' copy)."""
    import h5py

    with h5py.File(data.own["h5"], "r") as f:
        d = f["images"]
        chunks = [d.id.read_direct_chunk((i, 0, 0, 0))[1] for i in range(d.shape[0])]
    assert zlib.decompress(chunks[0])[:4] == bytes(sample(0, 0)[0, 0, :4])
    n = min(data.n["zip"], 1024)
    src = samples(1, n)
    jobs = 8 * threads
    idx = np.random.default_rng(7).integers(0, n, (jobs, BATCH))
    mine = threading.local()

    def copy(k: int) -> None:
        out = getattr(mine, "out", None)
        if out is None:
            out = mine.out = np.ones((BATCH, *SHAPE), np.uint8)  # pages touched
        np.take(src, idx[k], axis=0, out=out)

    def best(fn: Callable[[int], Any], jobs: int) -> float:
        t = float("inf")
        with ThreadPoolExecutor(threads) as pool:
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in pool.map(fn, range(jobs)):
                    pass
                t = min(t, time.perf_counter() - t0)
        return t

    inflate = len(chunks) / best(lambda k: zlib.decompress(chunks[k]), len(chunks))
    memcpy = jobs * BATCH / best(copy, jobs)
    w = WEIGHTS
    mixed = 1 / (w["h5"] / inflate + (w["zip"] + w["npy"]) / memcpy)
    return {"inflate": inflate, "memcpy": memcpy, "mixed": mixed}


# -- resume ----------------------------------------------------------------------------------


def _names(batches: list[np.ndarray]) -> list[tuple[int, int]]:
    src, idx = Epoch(batches).names()
    return list(zip(src.tolist(), idx.tolist(), strict=True))


def _shares(batches: list[np.ndarray]) -> str:
    src, _ = Epoch(batches).names()
    c = np.bincount(src, minlength=len(NAMES))
    return "/".join(str(int(x)) for x in c)


def resume_checks(data: Data) -> dict[str, str]:
    """Per loader, a sentence on its resume: its state saved a third of the way into an epoch
    read with 2 workers, a new loader (or dataset) restored from it reads the rest, which is
    compared with the same epoch read uninterrupted by another new loader."""
    out = {}

    def head(loader: Any, k: int) -> list[np.ndarray]:
        got = []
        for b in loader:
            got.append(ids_of(b))
            if len(got) == k:
                break
        return got

    def verdict(got: list[np.ndarray], whole: list[np.ndarray]) -> str:
        a, b = _names(got), _names(whole)
        repeats = len(a) - len(set(a))
        if a == b:
            how = "exactly the uninterrupted epoch, sample for sample"
        elif sorted(a) == sorted(b):
            how = "the uninterrupted epoch's samples in another order"
        else:
            how = f"NOT the uninterrupted epoch ({len(a)} samples, {repeats} repeated)"
        return f"{how}; h5/zip/npy {_shares(got)}, uninterrupted {_shares(whole)}"

    # packread: MixDataset.state_dict(batches_seen=k) -> a new MixDataset.load_state_dict.
    try:
        whole = [
            ids_of(b) for b in torch_loader(mix_dataset(data), WORKERS, persistent_workers=False)
        ]
        k = max(1, len(whole) // 3)
        ds = mix_dataset(data)
        first = head(torch_loader(ds, WORKERS, persistent_workers=False), k)
        state = ds.state_dict(batches_seen=k)
        again = mix_dataset(data)
        again.load_state_dict(state)
        rest = [ids_of(b) for b in torch_loader(again, WORKERS, persistent_workers=False)]
        read = [s["samples_read"] for s in state["sources"]]
        out["packread MixDataset"] = (
            f"`ds.state_dict(batches_seen={k})` (samples read per source {read}), "
            f"`load_state_dict` into a new MixDataset: {verdict(first + rest, whole)}"
        )
    except Exception as e:
        out["packread MixDataset"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0]}"

    if "litdata" in data.peers:
        try:
            whole = [ids_of(b) for b in litdata_loader(data, WORKERS, persistent=False)]
            k = max(1, len(whole) // 3)
            loader = litdata_loader(data, WORKERS, persistent=False)
            first = head(loader, k)
            state = loader.state_dict()
            again = litdata_loader(data, WORKERS, persistent=False)
            again.load_state_dict(state)
            rest = [ids_of(b) for b in again]
            out["litdata"] = (
                f"`StreamingDataLoader.state_dict()` after {k} batches (each dataset's samples "
                "yielded, per worker; the combined draw replayed from its seed), "
                f"`load_state_dict` into a new loader: {verdict(first + rest, whole)}"
            )
        except Exception as e:
            out["litdata"] = f"failed: {type(e).__name__}: {_last_line(e)}"

    if "mosaic" in data.peers:
        try:
            whole = [ids_of(b) for b in mosaic_loader(mosaic_dataset(data), WORKERS, False)]
            k = max(1, len(whole) // 3)
            ds = mosaic_dataset(data)
            first = head(mosaic_loader(ds, WORKERS, False), k)
            state = ds.state_dict(num_samples=k * BATCH, from_beginning=True)
            again = mosaic_dataset(data)
            again.load_state_dict(state)
            rest = [ids_of(b) for b in mosaic_loader(again, WORKERS, False)]
            out["mosaic"] = (
                f"`StreamingDataset.state_dict(num_samples={k * BATCH}, from_beginning=True)`, "
                f"`load_state_dict` into a new StreamingDataset: {verdict(first + rest, whole)}"
            )
        except Exception as e:
            out["mosaic"] = f"failed: {type(e).__name__}: {_last_line(e)}"
    return out


def _last_line(e: BaseException) -> str:
    """An exception's message, its last non-empty line (a worker's traceback ends with it)."""
    lines = [x for x in str(e).splitlines() if x.strip()]
    return lines[-1] if lines else ""


# -- report ----------------------------------------------------------------------------------


def spread(epoch: Epoch) -> str:
    """Each source's samples in a full batch, min-max over the epoch's full batches."""
    full = [b for b in epoch.ids if len(b) == BATCH]
    if not full:
        return "-"
    counts = np.array([np.bincount(b[:, 0], minlength=len(NAMES)) for b in full])
    return " / ".join(f"{counts[:, s].min()}-{counts[:, s].max()}" for s in range(len(NAMES)))


def shares(epoch: Epoch) -> str:
    src, _ = epoch.names()
    c = np.bincount(src, minlength=len(NAMES)) / len(src)
    return " / ".join(f"{x:.3f}" for x in c)


def summarise(times: dict[str, list[tuple[float, Epoch]]]) -> dict[str, dict[str, Any]]:
    rows = {}
    for name, runs in times.items():
        rates = [len(np.concatenate(e.ids)) / t for t, e in runs]
        med = statistics.median(rates)
        k = min(range(len(runs)), key=lambda i: abs(rates[i] - med))
        row: dict[str, Any] = {
            "rate": med,
            "rates": rates,
            "samples": len(np.concatenate(runs[k][1].ids)),
            "shares": shares(runs[k][1]),
            "spread": spread(runs[k][1]),
        }
        if runs[k][1].parts is not None:
            row["parts"] = {
                s: statistics.median(e.parts[s] for _, e in runs if e.parts) for s in NAMES
            }
        rows[name] = row
    return rows


def markdown(
    rows: dict[str, dict[str, Any]],
    contenders: dict[str, Contender],
    data: Data,
    lim: dict[str, float],
    resume: dict[str, str],
    facts: dict[str, Any],
    rounds: int,
    command: str,
    quick: bool,
) -> tuple[str, dict[str, Any]]:
    """The section for benches/RESULTS.md, and the goals as a dict."""
    n = data.n
    mb = {k: _stored([p]) / 1e6 for k, p in data.own.items()}
    ratio = n["h5"] * SAMPLE_BYTES / 1e6 / mb["h5"]
    peer_mb = {k: _stored(v.values()) / 1e6 for k, v in data.peers.items()}
    peers_said = ", ".join(f"{k} {v:,.0f} MB" for k, v in peer_mb.items())
    lines = [
        f"## Mixing sources (MixDataset): {facts['date']}",
        "",
        f"`{command}`, {facts['cpu']}, {facts['usable_cpus']} usable cores, L3 "
        f"{facts['l3_cache']}, {facts['mem_gib']} GiB, load average {facts['loadavg'][0]} "
        f"before and {facts['loadavg_after'][0]} after. "
        + ("**--quick: a check of the script, not numbers.** " if quick else "")
        + f"Median of {rounds} rounds; every contender runs one warm-up epoch, then one "
        "shuffled epoch a round, the order reversed every other round; every epoch checked "
        "(no sample repeated within its source's pass; each sample's first 12 and last 8 "
        "bytes its own).",
        "",
        f"Three sources of uint8 3x256x256 samples (196 KB; random 4-bit bytes), "
        f"{data.total:,} an epoch in the weights' proportions: `h5` (0.5) {n['h5']:,} "
        f"samples, HDF5 by h5py, one sample a chunk, gzip-4 ({mb['h5']:.0f} MB, "
        f"{ratio:.2f}:1) or uncompressed ({mb['h5raw']:.0f} MB); `zip` (0.3) {n['zip']:,} "
        f"raw members stored ({mb['zip']:.0f} MB); `npy` (0.2) a folder of {n['npy']:,} "
        f"`.npy` files ({mb['npy']:.0f} MB). `MixDataset({{'h5': ..., 'zip': ..., 'npy': "
        f"...}}, [0.5, 0.3, 0.2], stop={data.total})` of three `PackDataset` s against the "
        "same three `PackDataset` s read one after the other, one epoch each under its own "
        "`DataLoader` (the same samples, unmixed; three pipelines started an epoch against "
        "MixDataset's one, about two batches' reads in MixDataset's favour), and the peers on "
        "the same samples in their "
        f"formats, one data set per source, uncompressed ({peers_said}). Batch 64; with "
        "workers, `persistent_workers=True` and packread on 1 thread a worker; 0 workers: "
        "packread's 2 threads. `torch.set_num_threads(1)`. The source id is in each sample's "
        "bytes (its first 4 bytes), the same in every format.",
        "",
    ]
    workers = sorted({c.workers for c in contenders.values()})
    for w in workers:
        here = [k for k, c in contenders.items() if c.workers == w]
        lines += [
            f"**{w} workers**",
            "",
            "| loader | samples/s | realised shares h5 / zip / npy | per full batch (min-max; "
            "32 / 19 / 13 by weight) |",
            "|---|---|---|---|",
        ]
        for k in here:
            r = rows[k]
            lines.append(f"| {k} | {r['rate']:,.0f} | {r['shares']} | {r['spread']} |")
        alone = [k for k in here if contenders[k].kind == "alone" and "parts" in rows[k]]
        if alone:
            lines.append("")
            for k in alone:
                parts = rows[k]["parts"]
                each = ", ".join(f"{s} {n[s] / parts[s]:,.0f}" for s in NAMES)
                lines.append(
                    f"Each source alone, h5 {contenders[k].h5} (samples/s, the same rounds): "
                    f"{each}."
                )
        lines.append("")
    goals: dict[str, Any] = {}
    lines += [
        "**Goals**: MixDataset at most 5 % slower than the sources alone (MixDataset / alone "
        "at least 0.95); at least 2x the fastest peer (whose files are uncompressed: the "
        "like-for-like row is h5 uncompressed)",
        "",
        "| workers | h5 | MixDataset samples/s | sources alone | MixDataset / alone | fastest "
        "peer | MixDataset x fastest peer |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in workers:
        here = {k: c for k, c in contenders.items() if c.workers == w}
        peers = [k for k, c in here.items() if c.kind == "peer"]
        fastest = max(peers, key=lambda k: rows[k]["rate"]) if peers else None
        f = rows[fastest]["rate"] if fastest else float("nan")
        for h5 in H5:
            mix = next((k for k, c in here.items() if c.kind == "mix" and c.h5 == h5), None)
            base = next((k for k, c in here.items() if c.kind == "alone" and c.h5 == h5), None)
            if mix is None:
                continue
            m = rows[mix]["rate"]
            a = rows[base]["rate"] if base else float("nan")
            goals[f"{w} workers, h5 {h5}"] = {
                "mix": m,
                "alone": a,
                "mix_over_alone": m / a,
                "fastest_peer": fastest,
                "x_fastest_peer": m / f,
            }
            peer = f"{fastest.split(',')[0]} {f:,.0f}" if fastest else "-"
            lines.append(
                f"| {w} | {h5} | {m:,.0f} | {a:,.0f} | **{m / a:.3f}** | {peer} | "
                f"**{m / f:.2f}x** |"
            )
    lines += [
        "",
        "Limit, from memory on 2 threads: gzip inflate with CPython's zlib (`zlib.decompress` "
        f"of the h5 file's chunks; packread inflates with libdeflate, faster) "
        f"{lim['inflate']:,.0f} samples/s, memcpy (`np.take` of 64 samples into a batch) "
        f"{lim['memcpy']:,.0f} samples/s; an epoch of 0.5 inflated and 0.5 copied: "
        f"{lim['mixed']:,.0f} samples/s. Each source read alone by packread (above) is the "
        "nearer limit of a mixture of them.",
        "",
        "Resume (state saved a third of the way into an epoch read with 2 workers, a new "
        "loader restored from it, the whole compared with the epoch read uninterrupted):",
        "",
    ]
    lines += [f"- {k}: {v}." for k, v in resume.items()]
    lines += ["", "Left out:", ""]
    lines += [f"- {k}: {v}" for k, v in data.skipped.items()]
    return "\n".join(lines), goals


def make_contenders(data: Data, workers: list[int], codecs: list[str]) -> dict[str, Contender]:
    """Per number of workers: MixDataset and the sources alone for each codec of the ``h5``
    source, then the peers."""
    out: dict[str, Contender] = {}
    for w in workers:
        how = f"{w} workers (1 thread each)" if w else "0 workers (2 threads)"
        for h5 in codecs:
            ds = mix_dataset(data, h5)

            def after(epoch: Epoch, ds: Any = ds, w: int = w) -> None:
                real = ds.realised(batches_seen=len(epoch.ids) if w else None)
                src, _ = epoch.names()
                got = np.bincount(src, minlength=len(NAMES)).tolist()
                want = [real[k].samples for k in NAMES]
                assert got == want, f"MixDataset delivered {got} per source, realised(): {want}"

            out[f"packread MixDataset (h5 {h5}), {how}"] = Contender(
                epochs(torch_loader(ds, w)), "mix", w, "mix", h5, after
            )
            loaders = {k: torch_loader(v, w) for k, v in pack_sources(data, h5).items()}
            out[f"packread sources alone (h5 {h5}), {how}"] = Contender(
                alone_epochs(loaders), "once", w, "alone", h5
            )
        if "litdata" in data.peers:
            out[f"litdata CombinedStreamingDataset, {w} workers"] = Contender(
                epochs(litdata_loader(data, w)), "until", w, "peer"
            )
        if "mosaic" in data.peers:
            out[f"mosaic StreamingDataset(streams), {w} workers"] = Contender(
                epochs(mosaic_loader(mosaic_dataset(data), w)), "once", w, "peer"
            )
    return out


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--dir", default="/tmp/packread-bench-mix", help="where the data is written and kept"
    )
    p.add_argument("--rounds", type=int, default=None, help="timed epochs (5; 1 with --quick)")
    p.add_argument(
        "--quick", action="store_true", help="400 samples and 1 round: a check, not numbers"
    )
    p.add_argument("--workers", type=int, nargs="+", default=[0, WORKERS])
    p.add_argument("--peers", nargs="*", default=["litdata", "mosaic"])
    p.add_argument(
        "--h5",
        nargs="+",
        choices=list(H5),
        default=list(H5),
        help="the h5 source's codecs packread runs with (the peers' files are uncompressed)",
    )
    p.add_argument("--no-resume", action="store_true", help="skip the resume checks")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    # mosaic's collate makes tensors of its read-only sample arrays (they are not written to).
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 5)
    total = QUICK if args.quick else FULL
    command = " ".join(["python benches/bench_mix.py", *(argv or sys.argv[1:])])
    facts, vers = announce(PACKAGES)
    data = write_data(Path(args.dir), total, args.peers)
    warm([*data.own.values(), *(p for d in data.peers.values() for p in d.values())])
    if "mosaic" in data.peers:
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()

    contenders = make_contenders(data, args.workers, args.h5)
    print(f"{data.total} samples an epoch ({data.n}); {rounds} rounds of {len(contenders)}")
    times = measure(contenders, rounds, data)
    rows = summarise(times)
    print("limits ...", flush=True)
    lim = limits(data, WORKERS)
    resume = {} if args.no_resume else resume_checks(data)
    facts["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    text, goals = markdown(rows, contenders, data, lim, resume, facts, rounds, command, args.quick)
    print_results(text)
    if args.json:
        out = {
            "versions": vers,
            "machine": facts,
            "quick": args.quick,
            "rounds": rounds,
            "samples": data.n,
            "rows": rows,
            "goals": goals,
            "limits": lim,
            "resume": resume,
            "skipped": data.skipped,
            "command": command,
        }
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
