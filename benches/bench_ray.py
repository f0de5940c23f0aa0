"""packread in Ray Data and Dask: ``packread.ray.read`` against Ray Data's own image reader and
an h5py ``Datasource``, and ``packread.dask.from_reader`` against ``da.from_array`` of an h5py
dataset, warm page cache, side by side in one run, on one machine.

**Data** (``write_*``: written once into ``--dir``, default ``/tmp/packread-bench-ray``, under
``v{LAYOUT}``, and reused while each file's ``.done`` marker says it is complete; ``LAYOUT``
renews them; ``--quick`` writes smaller ones beside the full ones):

- ``jpeg``: 2,000 ImageNet-sized JPEGs (``--quick``: 200) by ``image_workloads.py``'s
  ``write_image_workload`` (about 500x375, q90, 10 classes): a stored ``images.zip`` (labels
  in its ``dataset.json``) and the same files as an ImageFolder tree ``train/<class>/``; the
  workload's per-image mean colour of a ``RandomResizedCrop`` (its expected value and
  variance) is kept in ``workload.npz`` beside them for the checks;
- ``hdf5``: 2,000 samples (``--quick``: 200) uint8 3x256x256 (196 KB) written by h5py, one
  sample a chunk (``chunks=(1, 3, 256, 256)``), gzip level 4, and an int64 ``labels``
  dataset (``label(i)``). Each sample is seeded random bytes whose rows after the first keep
  their 4 high bits (so that the codec has work to do), its index in its first 4 bytes
  (uint32, little-endian);
- ``dask``: one uint8 dataset ``images`` of shape (20,000, 3, 256, 256), 3.9 GB (``--quick``:
  1,024 samples, 201 MB), chunks (16, 3, 256, 256), gzip level 1, the same kind of bytes,
  written in slabs of 512 samples; its exact mean (the integer sum over the count, computed
  while writing) and the time the writing took are kept in ``<file>.json`` beside it.

**Contenders**, each a baseline and packread; JPEG and HDF5 on one local Ray cluster (started
here, ``address="local"``: never another process's cluster; ``num_cpus=2``, node address
127.0.0.1, no dashboard, ``_temp_dir=/tmp/prb``, object spilling to a temporary folder),
consumed on the driver by ``ds.iter_batches(batch_size=256, batch_format="numpy")``; each
dataset is made once and executed once an epoch (a round), as a training loop would:

- JPEG, baseline: ``ray.data.read_images(train/, mode="RGB", include_paths=True)
  .map_batches(crop_batch)``: per image a CHW ``torch.from_numpy`` view through torchvision's
  ``v2.RandomResizedCrop(224, antialias=True)`` (on tensors: about twice as fast as on PIL
  images here), stacked HWC uint8, the label from the path's class folder; ``torch`` on 1
  thread in the task (Ray's one CPU a task). packread: ``packread.ray.read(images.zip,
  decode=packread.ImageDecode(224, crop="random"))`` (columns ``images`` NHWC uint8 and
  ``labels``). Goal: at least 2x the baseline's rows/s.
- HDF5, baseline: ``H5pyDatasource`` below, the custom ``ray.data.Datasource`` that
  ray-project/ray#65759 describes users writing (no ``read_hdf5`` in Ray 2.60): the rows cut
  into as many chunk-aligned contiguous segments as Ray asks for (``parallelism``), one read
  task each, each opening the file with h5py and yielding blocks of ``f["images"][a:b]`` and
  ``f["labels"][a:b]`` of at most 64 MB decoded (``BlockAccessor.batch_to_block``: tensor
  columns), read through ``ray.data.read_datasource``. packread: ``packread.ray.read(path)``.
  Goal: at least 2x.
- Dask: ``x.mean().compute(scheduler="threads")`` (2 threads), the file opened, the array
  made and the mean computed in the timed round. Baseline: ``da.from_array(h5py.File(path)
  ["images"], chunks=<packread's row chunks>, lock=True)``; packread:
  ``packread.dask.from_reader(packread.HDF5Reader(path, "images"), "images")`` (chunks on
  storage chunk boundaries of about Dask's ``array.chunk-size``, ``lock=False``). Goal: at
  least 1.5x the baseline's GB/s.

Read tasks, by default as each read makes them: Ray's own readers (and the h5py source, which
does as Ray asks) take Ray's default parallelism (``DataContext.read_op_min_num_blocks``, 200,
or fewer where the data is small), read tasks of about 10 rows here, whose scheduling costs
Ray about as much as the decoding; ``packread.ray.read`` asks for 2 tasks per CPU of the
cluster (``packread.ray.TASKS_PER_CPU``; more where blocks would exceed Ray's target size).
``--blocks N`` gives both reads ``override_num_blocks=N``: the like-for-like comparison, the
same tasks on each side (``--blocks 4`` is packread's default here).

**Rounds.** Per benchmark every contender runs one warm-up epoch (checked; it also starts Ray's
workers), then ``--rounds`` rounds of one epoch each, baseline first in even rounds and
packread first in odd ones. Every epoch is checked: each batch's shape and dtype, 256 rows
but the last, exactly as many rows as the data set holds; JPEG: the labels' multiset the
data set's and per class the delivered crops' mean colour within 5 standard deviations (+3
levels) of the workload's (pixels paired with the wrong labels, channels swapped or garbage
fail); HDF5: every sample exactly once by the index in its first 4 bytes, its first 12 and
last 8 bytes its own, its label its own; Dask: the mean equal to the exact mean. Reported:
the median round of each side (rows/s; GB/s of decoded data for Dask), their ratio (packread
over baseline) and whether the goal is met; every round goes to ``--json``.

**Limits** (for context, from memory): CPython's ``zlib.decompress`` of raw stored chunks
(``id.read_direct_chunk``: all of the ``hdf5`` file's, up to 64 of the ``dask`` file's) on one
thread, best of 3, times the 2 cores: what an inflate with zlib could give on this machine
(packread inflates with libdeflate, faster).

    python benches/bench_ray.py --rounds 5 --json .bench/ray.json
    python benches/bench_ray.py --quick --rounds 1          # small data: a check, no numbers
    python benches/bench_ray.py --only hdf5 --only dask     # some of the benchmarks
    python benches/bench_ray.py --blocks 8     # both Ray reads with override_num_blocks=8
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import announce, print_results, require, write_json

# Ray reads this when it is imported (every import of ray here is later, in functions).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

#: Bumped whenever the files written change, so that old files are not reused.
LAYOUT = 1
BENCHES = ("jpeg", "hdf5", "dask")
BATCH, CPUS, DATA_SEED = 256, 2, 43
CROP = 224
SHAPE = (3, 256, 256)
SAMPLE_BYTES = math.prod(SHAPE)
#: Samples of each data set: the full run's, and ``--quick``'s.
FULL = {"jpeg": 2000, "hdf5": 2000, "dask": 20000}
QUICK = {"jpeg": 200, "hdf5": 200, "dask": 1024}
#: The ``dask`` file's rows a chunk, and the rows written at a time.
DASK_CHUNK_ROWS, SLAB = 16, 512
#: The h5py datasource's largest block (decoded).
BLOCK_BYTES = 64 << 20
#: packread over baseline, at least.
GOALS = {"jpeg": 2.0, "hdf5": 2.0, "dask": 1.5}
#: Ray's session folder: short (its sockets' paths are limited), apart from other clusters'.
RAY_TMP = "/tmp/prb"

#: The packages whose versions the results give.
PACKAGES = [
    ("packread", "packread"),
    ("ray", "ray"),
    ("dask", "dask"),
    ("pyarrow", "pyarrow"),
    ("numpy", "numpy"),
    ("h5py", "h5py"),
    ("torch", "torch"),
    ("torchvision", "torchvision"),
    ("Pillow", "PIL"),
]


# -- data ------------------------------------------------------------------------------------


def sample(i: int) -> np.ndarray:
    """Sample ``i`` of the ``hdf5`` file: seeded random bytes, the rows after the first keeping
    their 4 high bits; bytes 0-3 of the first row are ``i`` (uint32, little-endian)."""
    img = np.random.default_rng([DATA_SEED, 1, i]).integers(0, 256, SHAPE, dtype=np.uint8)
    img[:, 1:, :] &= 0xF0
    img[0, 0, :4] = np.array([i], "<u4").view(np.uint8)
    return img


def label(i: np.ndarray | int) -> Any:
    """The label of sample ``i`` of the ``hdf5`` file."""
    return (np.asarray(i, np.int64) * 7919 + 13) % 1000


def marks(x: np.ndarray) -> np.ndarray:
    """Per sample of ``x``, ``(n, 3, 256, 256)``: its first 12 bytes (its index, then 8 random
    bytes) and its last 8, copied."""
    return np.concatenate([x[:, 0, 0, :12], x[:, -1, -1, -8:]], axis=1)


def all_marks(n: int) -> np.ndarray:
    """``marks`` of every sample of the ``hdf5`` file, made again from the seeds."""
    return np.stack([marks(sample(i)[None])[0] for i in range(n)])


def made(path: Path, n: int, write: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """``path`` (a file or folder), written by ``write`` (aside, then renamed) unless its
    ``.done`` marker says an earlier run wrote it with this layout and size; the facts
    ``write`` returned (and the seconds it took) are kept in ``<path>.json`` and returned."""
    done = path.with_name(path.name + ".done")
    facts_path = path.with_name(path.name + ".json")
    mark = json.dumps({"layout": LAYOUT, "samples": n}) + "\n"
    if path.exists() and facts_path.exists() and done.exists() and done.read_text() == mark:
        return json.loads(facts_path.read_text())
    print(f"writing {path.name} ({n:,} samples) ...", flush=True)
    tmp = path.with_name(path.name + ".tmp")
    for p in (tmp, path, done):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    t0 = time.perf_counter()
    facts = write(tmp)
    facts["write_s"] = time.perf_counter() - t0
    os.replace(tmp, path)
    facts["stored_bytes"] = sum(f.stat().st_size for f in _files(path))
    facts_path.write_text(json.dumps(facts) + "\n")
    done.write_text(mark)
    print(f"  {facts['stored_bytes'] / 1e6:,.0f} MB in {facts['write_s']:.1f} s", flush=True)
    return facts


def _files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    return sorted(Path(d) / f for d, _, names in os.walk(path) for f in names)


def warm(path: Path) -> None:
    """Reads ``path`` (every file under it) once: the page cache holds it."""
    for f in _files(path):
        with open(f, "rb") as fh:
            while fh.read(1 << 22):
                pass


def write_jpeg(n: int) -> Callable[[Path], dict[str, Any]]:
    def go(tmp: Path) -> dict[str, Any]:
        from image_workloads import write_image_workload

        w = write_image_workload(str(tmp), n, log=lambda s: None)
        np.savez(tmp / "workload.npz", labels=w.labels, crop_mean=w.crop_mean, crop_var=w.crop_var)
        said = w.describe().rsplit("; batch", 1)[0]  # its batch is the image benchmarks'
        return {"images": w.n, "jpeg_bytes": w.nbytes, "described": said}

    return go


def write_hdf5(n: int) -> Callable[[Path], dict[str, Any]]:
    def go(tmp: Path) -> dict[str, Any]:
        import h5py

        with h5py.File(tmp, "w") as f:
            d = f.create_dataset(
                "images",
                (n, *SHAPE),
                np.uint8,
                chunks=(1, *SHAPE),
                compression="gzip",
                compression_opts=4,
            )
            for s in range(0, n, SLAB):
                d[s : s + SLAB] = np.stack([sample(i) for i in range(s, min(n, s + SLAB))])
            f.create_dataset("labels", data=label(np.arange(n)))
        return {"samples": n}

    return go


def write_dask(n: int) -> Callable[[Path], dict[str, Any]]:
    def go(tmp: Path) -> dict[str, Any]:
        import h5py

        total = 0
        with h5py.File(tmp, "w") as f:
            d = f.create_dataset(
                "images",
                (n, *SHAPE),
                np.uint8,
                chunks=(DASK_CHUNK_ROWS, *SHAPE),
                compression="gzip",
                compression_opts=1,
            )
            for s in range(0, n, SLAB):
                m = min(SLAB, n - s)
                rng = np.random.default_rng([DATA_SEED, 2, s])
                slab = rng.integers(0, 256, (m, *SHAPE), dtype=np.uint8)
                slab[:, :, 1:, :] &= 0xF0
                total += int(slab.sum(dtype=np.int64))
                d[s : s + m] = slab
                if s // SLAB % 8 == 7:
                    print(f"  {s + m:,} / {n:,} samples", flush=True)
        count = n * SAMPLE_BYTES
        return {"samples": n, "sum": total, "count": count, "mean": total / count}

    return go


@dataclass
class Data:
    root: Path
    n: dict[str, int]
    paths: dict[str, Path] = field(default_factory=dict)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)


def write_data(base: Path, sizes: dict[str, int]) -> Data:
    root = base / f"v{LAYOUT}"
    root.mkdir(parents=True, exist_ok=True)
    data = Data(root, dict(sizes))
    writers = {"jpeg": write_jpeg, "hdf5": write_hdf5, "dask": write_dask}
    names = {"jpeg": "jpeg-n{}", "hdf5": "hdf5-n{}.h5", "dask": "dask-n{}.h5"}
    for k, n in sizes.items():
        path = root / names[k].format(n)
        data.facts[k] = made(path, n, writers[k](n))
        data.paths[k] = path
    return data


# -- Ray -------------------------------------------------------------------------------------


def start_ray(spill: str) -> None:
    """A local Ray cluster of ``CPUS`` CPUs of its own (``address="local"``: never another
    process's cluster), quiet."""
    import ray
    import ray.data

    ray.init(
        address="local",
        num_cpus=CPUS,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        _temp_dir=RAY_TMP,
        logging_level=logging.WARNING,
        # Ray 2.60's stable form of ``_system_config={"object_spilling_config": ...}`` (which
        # warns that it is an unstable API).
        object_spilling_directory=spill,
    )
    assert ray.util.get_node_ip_address() == "127.0.0.1", ray.util.get_node_ip_address()
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.enable_operator_progress_bars = False
    ctx.print_on_execution_start = False
    ctx.enable_auto_log_stats = False
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.WARNING)


def worker_facts() -> dict[str, Any]:
    """What a Ray task sees: packread's threads and torch's, and the CPUs it may use."""
    import ray

    @ray.remote(num_cpus=1)
    def facts() -> dict[str, Any]:
        import torch

        import packread

        return {
            "packread_threads": packread.get_num_threads(),
            "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "usable_cpus": len(os.sched_getaffinity(0)),
        }

    return ray.get(facts.remote())


def crop_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The JPEG baseline's ``map_batches`` function: torchvision's ``v2.RandomResizedCrop(224,
    antialias=True)`` of each decoded HWC image (as a CHW tensor view), stacked HWC uint8; the
    label from the path's class folder (``n0000000k`` is class ``k``)."""
    import torch
    from torchvision.transforms import v2

    torch.set_num_threads(1)
    crop = v2.RandomResizedCrop(CROP, antialias=True)
    images = batch["image"]
    out = np.empty((len(images), CROP, CROP, 3), np.uint8)
    with warnings.catch_warnings():
        # Ray's batches are read-only; the crop only reads them.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for k, img in enumerate(images):
            out[k] = crop(torch.from_numpy(img).permute(2, 0, 1)).permute(1, 2, 0).numpy()
    labels = np.array([int(os.path.basename(os.path.dirname(p))[1:]) for p in batch["path"]])
    return {"images": out, "labels": labels.astype(np.int64)}


def h5py_datasource(path: str) -> Any:
    """The HDF5 baseline: an h5py ``ray.data.Datasource`` as ray-project/ray#65759 describes
    (made here, so that ``ray.data`` is imported after Ray's environment is set)."""
    from ray.data.block import BlockAccessor, BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class H5pyDatasource(Datasource):
        """Rows ``images[i]``, ``labels[i]`` of an HDF5 file: as many read tasks as Ray asks
        for, each a chunk-aligned contiguous run of rows, read with h5py in blocks of at most
        ``BLOCK_BYTES`` decoded."""

        def __init__(self, path: str, images: str = "images", labels: str = "labels") -> None:
            import h5py

            super().__init__()
            self.path, self.images, self.labels = path, images, labels
            with h5py.File(path, "r") as f:
                d, lab = f[images], f[labels]
                self.n = d.shape[0]
                self.chunk_rows = d.chunks[0] if d.chunks else 1
                self.row_bytes = (
                    math.prod(d.shape[1:]) * d.dtype.itemsize
                    + math.prod(lab.shape[1:]) * lab.dtype.itemsize
                )

        def get_name(self) -> str:
            return "H5py"

        def estimate_inmemory_data_size(self) -> int:
            return self.n * self.row_bytes

        def get_read_tasks(
            self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
        ) -> list[Any]:
            chunks = -(-self.n // self.chunk_rows)
            tasks = max(1, min(int(parallelism), chunks))
            bounds = [min(self.n, (k * chunks // tasks) * self.chunk_rows) for k in range(tasks)]
            bounds.append(self.n)
            per_block = max(1, BLOCK_BYTES // self.row_bytes // self.chunk_rows) * self.chunk_rows
            out = []
            for a, b in itertools.pairwise(bounds):
                if b <= a:
                    continue

                def read_fn(
                    a: int = a,
                    b: int = b,
                    path: str = self.path,
                    names: tuple[str, str] = (self.images, self.labels),
                ) -> Iterator[Any]:
                    import h5py

                    with h5py.File(path, "r") as f:
                        d, lab = f[names[0]], f[names[1]]
                        for s in range(a, b, per_block):
                            e = min(b, s + per_block)
                            yield BlockAccessor.batch_to_block(
                                {"images": d[s:e], "labels": lab[s:e]}
                            )

                meta = BlockMetadata(
                    num_rows=b - a,
                    size_bytes=(b - a) * self.row_bytes,
                    input_files=[self.path],
                    exec_stats=None,
                )
                out.append(ReadTask(read_fn, meta, per_task_row_limit=per_task_row_limit))
            return out

    return H5pyDatasource(path)


# -- epochs ----------------------------------------------------------------------------------


@dataclass
class Epoch:
    """What one epoch delivered: its rows, each batch's size, and what its check needs."""

    rows: int = 0
    sizes: list[int] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)
    #: JPEG: each image's mean colour (a strided subsample); HDF5: each sample's ``marks``.
    seen: list[np.ndarray] = field(default_factory=list)
    #: Dask: the mean computed.
    value: float | None = None
    #: Rows in a unit of the rate (Dask: the bytes of a GB).
    nbytes: int = 0


def consume(ds: Any, each: Callable[[dict[str, np.ndarray], Epoch], None]) -> Epoch:
    """One execution of ``ds``, batches of 256 as numpy, ``each`` seeing every batch."""
    e = Epoch()
    for b in ds.iter_batches(batch_size=BATCH, batch_format="numpy"):
        n = len(b["labels"])
        e.rows += n
        e.sizes.append(n)
        e.labels.append(np.asarray(b["labels"]).astype(np.int64, copy=True))
        each(b, e)
    return e


def jpeg_batch(b: dict[str, np.ndarray], e: Epoch) -> None:
    x = b["images"]
    assert x.dtype == np.uint8, x.dtype
    assert x.shape == (len(b["labels"]), CROP, CROP, 3), x.shape
    e.seen.append(x[:, ::4, ::4].mean(axis=(1, 2), dtype=np.float64))


def hdf5_batch(b: dict[str, np.ndarray], e: Epoch) -> None:
    x = b["images"]
    assert x.dtype == np.uint8, x.dtype
    assert x.shape == (len(b["labels"]), *SHAPE), x.shape
    e.seen.append(marks(x))


def check_rows(name: str, e: Epoch, n: int) -> None:
    assert e.rows == n, f"{name}: {e.rows} rows, not {n}"
    assert all(s == BATCH for s in e.sizes[:-1]), f"{name}: batches of {sorted(set(e.sizes))}"
    assert 0 < e.sizes[-1] <= BATCH, f"{name}: last batch {e.sizes[-1]}"


def check_jpeg(name: str, e: Epoch, n: int, want: dict[str, np.ndarray]) -> None:
    check_rows(name, e, n)
    labels, means = np.concatenate(e.labels), np.concatenate(e.seen)
    k = int(want["labels"].max()) + 1
    have, expect = np.bincount(labels, minlength=k), np.bincount(want["labels"], minlength=k)
    assert np.array_equal(have, expect), f"{name}: labels {have.tolist()}, not {expect.tolist()}"
    for c in range(k):
        sel = want["labels"] == c
        ref = want["crop_mean"][sel].mean(axis=0)
        bound = 5 * np.sqrt(want["crop_var"][sel].sum(axis=0)) / sel.sum() + 3.0
        obs = means[labels == c].mean(axis=0)
        assert np.all(np.abs(obs - ref) <= bound), (
            f"{name}: class {c} mean colour {np.round(obs, 1).tolist()}, expected "
            f"{np.round(ref, 1).tolist()} +- {np.round(bound, 1).tolist()}"
        )


def check_hdf5(name: str, e: Epoch, n: int, want: np.ndarray) -> None:
    check_rows(name, e, n)
    got, labels = np.concatenate(e.seen), np.concatenate(e.labels)
    ids = np.ascontiguousarray(got[:, :4]).view("<u4")[:, 0].astype(np.int64)
    assert np.all(ids < n), f"{name}: a sample index past the end ({ids.max()})"
    counts = np.bincount(ids, minlength=n)
    assert counts.min() == 1 == counts.max(), f"{name}: samples not each read once"
    bad = np.any(got != want[ids], axis=1)
    assert not bad.any(), f"{name}: {int(bad.sum())} samples garbled"
    assert np.array_equal(labels, label(ids)), f"{name}: labels not their samples'"


@dataclass
class Bench:
    """One benchmark: its two contenders (baseline first), each an epoch's runner, and the
    check of an epoch."""

    name: str
    said: str
    runs: dict[str, Callable[[], Epoch]]
    check: Callable[[str, Epoch], None]
    unit: str = "rows/s"

    def rate(self, seconds: float, e: Epoch) -> float:
        return (e.nbytes / 1e9 if self.unit == "GB/s" else e.rows) / seconds


def measure(b: Bench, rounds: int) -> dict[str, list[float]]:
    """Each contender's warm-up epoch (checked), then ``rounds`` rounds of one epoch each,
    the baseline first in even rounds; each epoch's rate (checked after its timing)."""
    for name, run in b.runs.items():
        t0 = time.perf_counter()
        b.check(name, run())
        print(f"  warm-up {b.name} {name}: {time.perf_counter() - t0:.2f} s", flush=True)
    out: dict[str, list[float]] = {k: [] for k in b.runs}
    names = list(b.runs)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            e = b.runs[name]()
            t = time.perf_counter() - t0
            b.check(name, e)
            out[name].append(b.rate(t, e))
        said = ", ".join(f"{k} {v[-1]:,.2f}" for k, v in out.items())
        print(f"  {b.name} round {r + 1}/{rounds}: {said} {b.unit}", flush=True)
    return out


def jpeg_bench(data: Data, blocks: int | None = None) -> Bench:
    import ray.data

    import packread.ray

    root = data.paths["jpeg"]
    n = data.n["jpeg"]
    want = dict(np.load(root / "workload.npz"))
    base = ray.data.read_images(
        str(root / "train"), mode="RGB", include_paths=True, override_num_blocks=blocks
    ).map_batches(crop_batch)
    ours = packread.ray.read(
        str(root / "images.zip"),
        decode=packread.ImageDecode(CROP, crop="random"),
        override_num_blocks=blocks,
    )
    return Bench(
        "jpeg",
        data.facts["jpeg"]["described"],
        {
            "ray read_images + torchvision": lambda: consume(base, jpeg_batch),
            "packread.ray.read": lambda: consume(ours, jpeg_batch),
        },
        lambda name, e: check_jpeg(name, e, n, want),
    )


def hdf5_bench(data: Data, blocks: int | None = None) -> Bench:
    import ray.data

    import packread.ray

    path = str(data.paths["hdf5"])
    n = data.n["hdf5"]
    want = all_marks(n)
    base = ray.data.read_datasource(h5py_datasource(path), override_num_blocks=blocks)
    ours = packread.ray.read(path, override_num_blocks=blocks)
    mb = data.facts["hdf5"]["stored_bytes"] / 1e6
    return Bench(
        "hdf5",
        f"{n:,} samples uint8 3x256x256, one a chunk, gzip-4 ({mb:,.0f} MB, "
        f"{n * SAMPLE_BYTES / 1e6 / mb:.2f}:1), + int64 labels",
        {
            "h5py Datasource": lambda: consume(base, hdf5_batch),
            "packread.ray.read": lambda: consume(ours, hdf5_batch),
        },
        lambda name, e: check_hdf5(name, e, n, want),
    )


def dask_bench(data: Data) -> Bench:
    import dask.array as da
    import h5py

    import packread.dask

    path = str(data.paths["dask"])
    n = data.n["dask"]
    exact = data.facts["dask"]["mean"]
    rows = packread.dask.from_reader(packread.HDF5Reader(path, "images"), "images").chunks[0]

    def base() -> Epoch:
        with h5py.File(path, "r") as f:
            d = f["images"]
            x = da.from_array(d, chunks=(rows, *((s,) for s in SHAPE)), lock=True)
            value = float(x.mean().compute(scheduler="threads"))
        return Epoch(rows=n, value=value, nbytes=n * SAMPLE_BYTES)

    def ours() -> Epoch:
        x = packread.dask.from_reader(packread.HDF5Reader(path, "images"), "images")
        value = float(x.mean().compute(scheduler="threads"))
        return Epoch(rows=n, value=value, nbytes=n * SAMPLE_BYTES)

    def check(name: str, e: Epoch) -> None:
        assert e.value == exact, f"{name}: mean {e.value!r}, exact {exact!r}"

    mb = data.facts["dask"]["stored_bytes"] / 1e6
    return Bench(
        "dask",
        f"{n:,} x 3x256x256 uint8 ({n * SAMPLE_BYTES / 1e9:.2f} GB), chunks of "
        f"{DASK_CHUNK_ROWS} rows, gzip-1 ({mb:,.0f} MB, {n * SAMPLE_BYTES / 1e6 / mb:.2f}:1); "
        f"Dask chunks of {rows[0]} rows ({len(rows)} chunks); mean {exact:.6f}",
        {"da.from_array(h5py, lock=True)": base, "packread.dask.from_reader": ours},
        check,
        unit="GB/s",
    )


# -- the limit -------------------------------------------------------------------------------


def inflate_limit(path: Path, most: int) -> dict[str, float]:
    """CPython's ``zlib.decompress`` of up to ``most`` raw stored chunks of ``images`` (evenly
    spread, read with ``id.read_direct_chunk``), one thread, best of 3: decoded GB/s and
    samples/s on one core, and both times ``CPUS`` cores."""
    import h5py

    with h5py.File(path, "r") as f:
        d = f["images"]
        rows = d.chunks[0]
        nchunks = -(-d.shape[0] // rows)
        picks = np.unique(np.linspace(0, nchunks - 1, min(most, nchunks)).astype(np.int64))
        raw = [d.id.read_direct_chunk((int(k) * rows, 0, 0, 0))[1] for k in picks]
    out_bytes = len(zlib.decompress(raw[0]))
    assert out_bytes == rows * SAMPLE_BYTES, out_bytes
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for c in raw:
            zlib.decompress(c)
        best = min(best, time.perf_counter() - t0)
    samples = len(raw) * rows / best
    return {
        "chunks": len(raw),
        "one_core_gb_s": samples * SAMPLE_BYTES / 1e9,
        "one_core_samples_s": samples,
        "gb_s": CPUS * samples * SAMPLE_BYTES / 1e9,
        "samples_s": CPUS * samples,
    }


def decode_limit(zip_path: Path, n: int) -> dict[str, float]:
    """packread's decode and crop alone, in this process with no Ray: ``ImageReader.batch`` of
    every image, ``RandomResizedCrop(224)`` as in the benchmark, on packread's 2 threads (the
    machine's cores), best of 3 epochs: what decoding on this machine allows, any loader's
    ceiling."""
    import packread

    reader = packread.ImageReader(str(zip_path), decode=packread.ImageDecode(CROP, crop="random"))
    best = float("inf")
    for epoch in range(3):
        t0 = time.perf_counter()
        for a in range(0, n, BATCH):
            reader.batch(range(a, min(n, a + BATCH)), epoch=epoch)
        best = min(best, time.perf_counter() - t0)
    reader.close()
    return {"samples_s": n / best}


# -- report ----------------------------------------------------------------------------------


def summarise(b: Bench, rates: dict[str, list[float]]) -> dict[str, Any]:
    (base, base_rates), (ours, our_rates) = rates.items()
    med_base, med_ours = statistics.median(base_rates), statistics.median(our_rates)
    ratio = med_ours / med_base
    return {
        "data": b.said,
        "unit": b.unit,
        "baseline": base,
        "packread": ours,
        "baseline_rate": med_base,
        "packread_rate": med_ours,
        "baseline_rounds": base_rates,
        "packread_rounds": our_rates,
        "paired_ratios": [a / c for a, c in zip(our_rates, base_rates, strict=True)],
        "ratio": ratio,
        "goal": GOALS[b.name],
        "met": ratio >= GOALS[b.name],
    }


def said_rate(x: float, unit: str) -> str:
    return f"{x:.2f} {unit}" if unit == "GB/s" else f"{x:,.0f} {unit}"


def markdown(
    rows: dict[str, dict[str, Any]],
    limits: dict[str, dict[str, float]],
    data: Data,
    facts: dict[str, Any],
    rounds: int,
    command: str,
    quick: bool,
    blocks: int | None = None,
) -> str:
    import packread.ray

    lines = [
        f"## packread in Ray Data and Dask: {facts['date']}",
        "",
        f"`{command}`, {facts['cpu']}, {facts['usable_cpus']} usable cores, L3 "
        f"{facts['l3_cache']}, {facts['mem_gib']} GiB, load average {facts['loadavg'][0]} "
        f"before and {facts['loadavg_after'][0]} after. "
        + ("**--quick: a check of the script, not numbers.** " if quick else "")
        + f"Median of {rounds} rounds (one epoch each, after a warm-up epoch, the order "
        "reversed every other round; every epoch checked). Ray: one local cluster, "
        f"`num_cpus={CPUS}`, "
        + (
            f"`override_num_blocks={blocks}` for both reads"
            if blocks
            else "read tasks by each read's default (Ray's parallelism for the baselines, "
            f"{packread.ray.TASKS_PER_CPU} per CPU for packread)"
        )
        + f", consumed by `iter_batches(batch_size={BATCH}, batch_format='numpy')`"
        + (
            f"; in a Ray task packread has {facts['ray_task']['packread_threads']} threads, "
            f"torch {facts['ray_task']['torch_threads']}"
            if "ray_task" in facts
            else ""
        )
        + f". Dask: threaded scheduler, {CPUS} threads.",
        "",
        "| benchmark | data | baseline | packread | baseline | packread | packread / baseline "
        "| goal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, r in rows.items():
        met = "met" if r["met"] else "NOT met"
        lines.append(
            f"| {k} | {r['data']} | {r['baseline']} | {r['packread']} | "
            f"{said_rate(r['baseline_rate'], r['unit'])} | "
            f"{said_rate(r['packread_rate'], r['unit'])} | **{r['ratio']:.2f}x** | "
            f"{r['goal']}x: {met} |"
        )
    lines.append("")
    for k, lim in limits.items():
        r = rows.get(k)
        if k == "jpeg":
            said = ""
            if r is not None:
                said = (
                    f": baseline at {r['baseline_rate'] / lim['samples_s']:.0%} of it, packread "
                    f"at {r['packread_rate'] / lim['samples_s']:.0%}"
                )
            lines.append(
                f"- Limit, `jpeg`: packread's decode and `RandomResizedCrop({CROP})` alone, no "
                f"Ray (`ImageReader.batch` of {BATCH}, its {CPUS} threads, best of 3 epochs): "
                f"{lim['samples_s']:,.0f} images/s{said}."
            )
            continue
        cap = lim["gb_s"] if k == "dask" else lim["samples_s"]
        text = f"{lim['gb_s']:.2f} GB/s decoded, {lim['samples_s']:,.0f} samples/s"
        said = ""
        if r is not None:
            said = (
                f": baseline at {r['baseline_rate'] / cap:.0%} of it, packread at "
                f"{r['packread_rate'] / cap:.0%}"
            )
        lines.append(
            f"- Limit, `{k}`: zlib inflate (CPython's `zlib.decompress` of {lim['chunks']} raw "
            f"chunks, one thread, best of 3) x {CPUS} cores: {text}{said}."
        )
    if "write_s" in data.facts.get("dask", {}):
        f = data.facts["dask"]
        lines.append(
            f"- Writing the `dask` file ({f['stored_bytes'] / 1e9:.2f} GB stored) took "
            f"{f['write_s']:.0f} s (h5py, gzip-1, slabs of {SLAB} samples)."
        )
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--dir", default="/tmp/packread-bench-ray", help="where the data is written and kept"
    )
    p.add_argument("--rounds", type=int, default=5, help="timed epochs per contender (5)")
    p.add_argument("--quick", action="store_true", help="small data sets: a check, not numbers")
    p.add_argument(
        "--only",
        action="append",
        choices=BENCHES,
        help="run this benchmark (repeatable; default: all)",
    )
    p.add_argument(
        "--blocks",
        type=int,
        default=None,
        help="override_num_blocks of both Ray reads (default: each read's own default tasks)",
    )
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    require(p, ("ray", "dask", "h5py", "torch", "torchvision", "PIL"))
    benches = [b for b in BENCHES if b in (args.only or BENCHES)]
    sizes = {k: (QUICK if args.quick else FULL)[k] for k in benches}
    command = " ".join(["python benches/bench_ray.py", *(argv or sys.argv[1:])])
    facts, vers = announce(PACKAGES)
    data = write_data(Path(args.dir), sizes)
    for path in data.paths.values():
        warm(path)

    rows: dict[str, dict[str, Any]] = {}
    rates: dict[str, dict[str, list[float]]] = {}
    ray_benches = [k for k in benches if k in ("jpeg", "hdf5")]
    if ray_benches:
        import ray

        spill = tempfile.mkdtemp(prefix="prb-spill-")
        try:
            start_ray(spill)
            facts["ray_task"] = worker_facts()
            for k in ray_benches:
                b = {"jpeg": jpeg_bench, "hdf5": hdf5_bench}[k](data, args.blocks)
                print(f"{k}: {b.said}; {args.rounds} rounds", flush=True)
                rates[k] = measure(b, args.rounds)
                rows[k] = summarise(b, rates[k])
        finally:
            ray.shutdown()
            shutil.rmtree(spill, ignore_errors=True)
    if "dask" in benches:
        b = dask_bench(data)
        print(f"dask: {b.said}; {args.rounds} rounds", flush=True)
        rates["dask"] = measure(b, args.rounds)
        rows["dask"] = summarise(b, rates["dask"])

    print("limits ...", flush=True)
    limits = {}
    if "jpeg" in benches:
        limits["jpeg"] = decode_limit(data.paths["jpeg"] / "images.zip", data.n["jpeg"])
    if "hdf5" in benches:
        limits["hdf5"] = inflate_limit(data.paths["hdf5"], data.n["hdf5"])
    if "dask" in benches:
        limits["dask"] = inflate_limit(data.paths["dask"], 64)
    facts["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    text = markdown(rows, limits, data, facts, args.rounds, command, args.quick, args.blocks)
    print_results(text)
    if args.json:
        out = {
            "versions": vers,
            "machine": facts,
            "quick": args.quick,
            "rounds": args.rounds,
            "blocks": args.blocks,
            "samples": data.n,
            "data": data.facts,
            "rows": rows,
            "limits": limits,
            "command": command,
        }
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
