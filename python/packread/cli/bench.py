"""``packread bench``: packread against the loop people write, on the user's own file.

Two kinds of configuration, for every batch size given:

* **batch reads**: ``reader.batch(idx)`` of random batches against the plain loop (h5py
  ``d[i]`` per sample and ``numpy.stack``; ``numpy.load`` per file; ``zipfile`` read and
  ``numpy.frombuffer`` per member);
* **DataLoader passes** (with torch installed), for every worker count given:
  ``DataLoader(PackDataset(...))`` against ``DataLoader`` over a map-style Dataset doing that
  same loop per sample (files opened lazily in each worker, as the seeds' Dataset classes
  do). Each pass is timed from its first batch on, so worker start-up is left out of both.

The configurations are interleaved over ``rounds`` and the median is reported, so a machine
busy with something else slows both sides alike.

>>> result = bench("train.h5", batch_sizes=[8], workers=[], batches=2, rounds=1, log=None)
>>> [row.config for row in result.rows]
['loop', 'packread batch']
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import statistics
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .._common import BatchReader
from .._open import open as open_reader
from .._open import resolve
from ._format import human_rate, human_ratio, path_name

#: How each format's plain loop reads one sample.
LOOPS = {
    "hdf5": "h5py d[i]",
    "npy": "numpy.load",
    "npz": "numpy.load(f)[key]",
    "zip": "zipfile read + frombuffer",
}


@dataclass
class Row:
    """One configuration's result.

    >>> row = Row("packread batch", "packread", 64, None, 12000.0, [11000.0, 12000.0, 13000.0])
    >>> row.label
    'packread batch, batch 64'
    """

    #: ``"loop"``, ``"packread batch"``, ``"DataLoader(loop Dataset)"`` or
    #: ``"DataLoader(PackDataset)"``.
    config: str
    #: ``"baseline"`` or ``"packread"``.
    side: str
    batch_size: int
    #: DataLoader workers (``None`` for batch reads).
    workers: int | None
    #: Median over the rounds.
    samples_per_s: float
    rates: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``"packread batch, batch 64"``, ``"DataLoader(PackDataset), batch 64, 2 workers"``.

        >>> Row("loop", "baseline", 64, None, 1.0).label
        'loop, batch 64'
        """
        plural = "" if self.workers == 1 else "s"
        workers = "" if self.workers is None else f", {self.workers} worker{plural}"
        return f"{self.config}, batch {self.batch_size}{workers}"


@dataclass
class BenchResult:
    """The rows of :func:`bench`, with a table and a chart of them.

    >>> result = bench("data/train/", batch_sizes=[4], workers=[], batches=2, rounds=1, log=None)
    >>> result.format, result.loop
    ('npy', 'numpy.load')
    """

    path: str
    format: str
    samples: int
    #: How the baseline reads (``LOOPS``).
    loop: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)

    def baseline_for(self, row: Row) -> Row | None:
        """The baseline row that ``row`` is compared with (same batch size and workers).

        >>> result = bench("train.h5", batch_sizes=[8], workers=[], batches=2, rounds=1, log=None)
        >>> result.baseline_for(result.rows[1]).config
        'loop'
        """
        kind = "loop" if row.workers is None else "DataLoader(loop Dataset)"
        for r in self.rows:
            if r.config == kind and r.batch_size == row.batch_size and r.workers == row.workers:
                return r
        return None

    def table(self) -> str:
        """The rows as an aligned text table, each with its speed-up over its baseline.

        >>> result = bench("train.h5", batch_sizes=[8], workers=[], batches=2, rounds=1, log=None)
        >>> print(result.table())  # doctest: +ELLIPSIS
        train.h5 (hdf5, 64 samples), baseline: h5py d[i]
        ...
        """
        head = ["configuration", "batch", "workers", "samples/s", "vs baseline"]
        body = []
        for r in self.rows:
            base = self.baseline_for(r)
            ratio = (
                human_ratio(r.samples_per_s / base.samples_per_s)
                if base and base.samples_per_s
                else ""
            )
            workers = "-" if r.workers is None else str(r.workers)
            body.append([r.config, str(r.batch_size), workers, human_rate(r.samples_per_s), ratio])
        widths = [max(len(x[c]) for x in [head, *body]) for c in range(5)]
        lines = [
            f"{path_name(self.path)} ({self.format}, "
            f"{self.samples:,} samples), baseline: {self.loop}"
        ]
        for x in [head, *body]:
            lines.append(
                "  ".join(
                    x[c].ljust(widths[c]) if c == 0 else x[c].rjust(widths[c]) for c in range(5)
                )
            )
        return "\n".join(lines)

    def chart(self, png: str | os.PathLike[str]) -> None:
        """Writes a horizontal bar chart of samples/s per configuration to ``png``
        (matplotlib: ``pip install 'packread[bench]'``).

        >>> result = bench("train.h5", batch_sizes=[8], workers=[], batches=2, rounds=1, log=None)
        >>> result.chart("bench.png")
        >>> open("bench.png", "rb").read(8) == b"\\x89PNG\\r\\n\\x1a\\n"
        True
        """
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError:
            raise ImportError("the chart needs matplotlib: pip install 'packread[bench]'") from None
        rows = list(reversed(self.rows))
        fig = Figure(figsize=(8, 1.2 + 0.35 * len(rows)), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        colors = ["#d95f02" if r.side == "packread" else "#7570b3" for r in rows]
        bars = ax.barh([r.label for r in rows], [r.samples_per_s for r in rows], color=colors)
        ax.bar_label(bars, labels=[human_rate(r.samples_per_s) for r in rows], padding=3)
        ax.set_xlabel("samples/s (median of rounds; higher is better)")
        ax.set_title(f"{path_name(self.path)}: packread (orange) vs {self.loop} (purple)")
        ax.margins(x=0.15)
        fig.savefig(os.fspath(png), dpi=100)

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain data (what ``--json`` prints).

        >>> result = bench("train.h5", batch_sizes=[8], workers=[], batches=2, rounds=1, log=None)
        >>> sorted(result.to_dict()["rows"][0])
        ['batch_size', 'config', 'rates', 'samples_per_s', 'side', 'workers']
        """
        return asdict(self)


def bench(
    path: str | os.PathLike[str],
    *,
    batch_sizes: Sequence[int] = (64,),
    workers: Sequence[int] = (0, 2),
    batches: int = 20,
    rounds: int = 3,
    num_threads: int | None = None,
    seed: int = 0,
    log: Callable[[str], None] | None = print,
    datasets: Any = None,
    dtype: Any = None,
    shape: Sequence[int] | None = None,
) -> BenchResult:
    """Measures packread and the plain loop on ``path`` (any source :func:`packread.open_reader`
    takes; ``datasets`` as there, ``dtype``/``shape`` for raw ZIP members): ``batches`` random
    batches per configuration and round. DataLoader passes run for each of ``workers`` when
    torch is installed (none when ``workers`` is empty).

    >>> result = bench("train.h5", batch_sizes=[8], workers=[0], batches=2, rounds=1, log=None)
    >>> [row.config for row in result.rows]
    ['loop', 'packread batch', 'DataLoader(loop Dataset)', 'DataLoader(PackDataset)']
    """
    path = os.fspath(path)
    say = log or (lambda m: None)
    if batches < 1 or rounds < 1 or any(b < 1 for b in batch_sizes):
        raise ValueError("batches, rounds and batch sizes must be >= 1")
    kind = resolve(path, None, {}).name
    options: dict[str, Any] = {}
    if num_threads is not None:
        options["num_threads"] = num_threads
    if kind == "zip":
        options.update({k: v for k, v in (("dtype", dtype), ("shape", shape)) if v is not None})
    notes = []
    if kind == "hdf5" and datasets is None:
        # Variable-length data cannot be stacked by the loop or collated by torch's default.
        every = open_reader(path, **options)
        ragged = every.ragged_keys  # type: ignore[attr-defined]
        if ragged:
            datasets = [k for k in every.keys() if k not in ragged]  # type: ignore[attr-defined]
            notes.append(f"variable-length datasets left out: {', '.join(ragged)}")
    if datasets is not None:
        options["members" if kind == "zip" else "arrays"] = datasets
    reader = open_reader(path, **options)
    loop = LoopDataset(path, kind, reader)
    n = len(reader)
    result = BenchResult(path, kind, n, LOOPS[kind], [], notes)
    rng = np.random.default_rng(seed)
    runs: list[tuple[Row, Callable[[], float]]] = []
    for b in batch_sizes:
        size = min(b, n)
        base = Row("loop", "baseline", b, None, 0.0)
        pack = Row("packread batch", "packread", b, None, 0.0)
        runs.append((base, _batch_run(loop.batch, n, size, batches, rng)))
        runs.append((pack, _batch_run(reader.batch, n, size, batches, rng)))
    loader_rows = _loader_runs(
        path, kind, loop, datasets, options, batch_sizes, workers, batches, seed, result
    )
    runs.extend(loader_rows)
    for r in range(rounds):
        for row, run in runs:
            rate = run()
            row.rates.append(rate)
            say(f"round {r + 1}/{rounds}: {row.label}: {human_rate(rate)} samples/s")
    for row, _ in runs:
        row.samples_per_s = statistics.median(row.rates)
        result.rows.append(row)
    return result


def _batch_run(
    read: Callable[[Any], Any], n: int, size: int, batches: int, rng: np.random.Generator
) -> Callable[[], float]:
    def run() -> float:
        read(rng.choice(n, size, replace=False))  # warm-up: first-touch costs out of the timing
        picks = [rng.choice(n, size, replace=False) for _ in range(batches)]
        start = time.perf_counter()
        for idx in picks:
            read(idx)
        return size * batches / (time.perf_counter() - start)

    return run


def _loader_runs(
    path: str,
    kind: str,
    loop: LoopDataset,
    datasets: Any,
    options: dict[str, Any],
    batch_sizes: Sequence[int],
    workers: Sequence[int],
    batches: int,
    seed: int,
    result: BenchResult,
) -> list[tuple[Row, Callable[[], float]]]:
    if not workers:
        return []
    try:
        from torch.utils.data import DataLoader

        from ..torch import PackDataset
    except ImportError:
        result.notes.append("DataLoader passes skipped: torch is not installed")
        return []
    runs: list[tuple[Row, Callable[[], float]]] = []
    for b in batch_sizes:
        for w in workers:

            def base_loader(b: int = b, w: int = w) -> Any:
                return DataLoader(loop, batch_size=b, shuffle=True, num_workers=w)

            def pack_loader(b: int = b, w: int = w) -> Any:
                ds = PackDataset(path, b, seed=seed, **options)
                return DataLoader(ds, batch_size=None, num_workers=w)

            base = Row("DataLoader(loop Dataset)", "baseline", b, w, 0.0)
            pack = Row("DataLoader(PackDataset)", "packread", b, w, 0.0)
            runs.append((base, _epoch_run(base_loader, batches)))
            runs.append((pack, _epoch_run(pack_loader, batches)))
    result.notes.append(
        "DataLoader passes are timed from their first batch on (worker start-up left out)"
    )
    return runs


def _epoch_run(make: Callable[[], Any], batches: int) -> Callable[[], float]:
    def run() -> float:
        epoch = run_epoch(make(), limit=batches + 1)
        return epoch.steady_rate

    return run


# --------------------------------------------------------------------------------------------
# The plain loop


class LoopDataset:
    """The loop people write, as a map-style Dataset: one sample per ``__getitem__``, read with
    h5py, ``numpy.load`` or ``zipfile``, files opened lazily in each process (a handle opened
    before ``fork`` is not shared with DataLoader workers). ``batch(idx)`` stacks a batch the
    same way, for the batch-read comparison.

    >>> loop = LoopDataset("train.h5", "hdf5", open_reader("train.h5"))
    >>> sorted(loop[0])
    ['images', 'labels']
    """

    def __init__(self, path: str, kind: str, reader: BatchReader) -> None:
        self.path = path
        self.kind = kind
        self._len = len(reader)
        self._pid = -1
        self._handle: Any = None
        if kind == "hdf5":
            self.keys = list(reader.keys())  # type: ignore[attr-defined]
            self._single = not isinstance(reader.shape, dict)
        elif kind == "zip":
            self.keys = list(reader.names())  # type: ignore[attr-defined]
            self._dtype, self._shape = reader.dtype, reader.shape
        elif kind == "npz":
            self.keys = list(reader.keys())  # type: ignore[attr-defined]
            self.files = list(reader.paths)  # type: ignore[attr-defined]
        else:
            self.files = list(reader.paths)  # type: ignore[attr-defined]
        if kind == "hdf5":
            _import_h5py()

    def __len__(self) -> int:
        return self._len

    def _open(self) -> Any:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            if self.kind == "hdf5":
                h5py = _import_h5py()
                f = h5py.File(self.path, "r")
                self._handle = {k: f[k] for k in self.keys}  # datasets looked up once
            elif self.kind == "zip":
                self._handle = zipfile.ZipFile(self.path)
        return self._handle

    def __getitem__(self, i: int) -> Any:
        handle = self._open()
        if self.kind == "hdf5":
            if self._single:
                return handle[self.keys[0]][i]
            return {k: handle[k][i] for k in self.keys}
        if self.kind == "zip":
            raw = handle.read(self.keys[i])
            if self.keys[i].endswith(".npy"):
                return np.load(io.BytesIO(raw))
            # A copy, as the seed's `torch.tensor(buffer)` makes (torch wants it writable).
            return np.frombuffer(raw, dtype=self._dtype).reshape(self._shape).copy()
        if self.kind == "npz":
            with np.load(self.files[i]) as f:
                return {k: f[k] for k in self.keys}
        return np.load(self.files[i])

    def batch(self, idx: Iterable[int]) -> Any:
        """Samples ``idx`` read one by one, then stacked (a dict of stacks for several arrays).

        >>> LoopDataset("train.h5", "hdf5", open_reader("train.h5")).batch([0, 1])["images"].shape
        (2, 3, 32, 32)
        """
        samples = [self[int(i)] for i in idx]
        if isinstance(samples[0], dict):
            return {k: np.stack([s[k] for s in samples]) for k in samples[0]}
        return np.stack(samples)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_handle"], state["_pid"] = None, -1
        return state


def _import_h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise ImportError("the HDF5 baseline reads with h5py: pip install h5py") from None
    with contextlib.suppress(ImportError):  # h5py then reads blosc, zstd, lz4... chunks
        import hdf5plugin  # noqa: F401
    return h5py


# --------------------------------------------------------------------------------------------
# One DataLoader pass


@dataclass
class Epoch:
    """One pass over a loader, as :func:`run_epoch` measures it.

    >>> epoch = run_epoch([np.zeros((8, 3))] * 4)
    >>> epoch.samples, epoch.first_samples
    (32, 8)
    """

    samples: int
    seconds: float
    #: CPU seconds of the main process (all its threads: packread's pool included).
    main_cpu: float
    #: CPU seconds of the thread that iterated (the training loop's own thread).
    loop_cpu: float
    #: Seconds the loop spent waiting in ``next()`` (with a simulated step)...
    waiting: float
    #: ... of which for the first batch (nothing can be read ahead of an epoch's start).
    first_wait: float
    #: Samples in the first batch.
    first_samples: int = 0

    @property
    def rate(self) -> float:
        """Samples per second over the whole pass.

        >>> Epoch(100, 2.0, 0, 0, 0, 0).rate
        50.0
        """
        return self.samples / self.seconds

    @property
    def steady_rate(self) -> float:
        """Samples per second after the first batch (worker start-up and the first read left
        out); the whole pass's rate when it had a single batch.

        >>> Epoch(100, 2.0, 0, 0, 0.5, 0.5, first_samples=10).steady_rate
        60.0
        """
        rest = self.seconds - self.first_wait
        if self.samples <= self.first_samples or rest <= 0:
            return self.rate
        return (self.samples - self.first_samples) / rest


def _batch_size(batch: Any) -> int:
    if isinstance(batch, (list, tuple)):
        batch = batch[0]
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    return len(batch)


def run_epoch(
    loader: Iterable[Any],
    step: float = 0.0,
    progress: Callable[[int], None] | None = None,
    on_batch: Callable[[Any], None] | None = None,
    limit: int | None = None,
) -> Epoch:
    """One pass over ``loader`` (at most ``limit`` batches); with ``step``, the loop sleeps
    that long per batch (a GPU's time: no CPU used) and the time spent waiting for batches is
    measured. ``on_batch`` sees every batch (to check what arrived).

    >>> run_epoch([np.zeros((4, 2))] * 3).samples
    12
    """
    samples = 0
    batches = 0
    waiting = 0.0
    first_wait: float | None = None
    first_samples = 0
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    thread0 = time.thread_time()
    start = time.perf_counter()
    it = iter(loader)
    while limit is None or batches < limit:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        waited = time.perf_counter() - t0
        waiting += waited
        size = _batch_size(batch)
        if first_wait is None:
            first_wait, first_samples = waited, size
        samples += size
        batches += 1
        if on_batch is not None:
            on_batch(batch)
        if progress is not None:
            progress(samples)
        if step:
            time.sleep(step)
    seconds = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    main_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    loop_cpu = time.thread_time() - thread0
    return Epoch(samples, seconds, main_cpu, loop_cpu, waiting, first_wait or 0.0, first_samples)
