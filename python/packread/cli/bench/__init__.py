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

The modules: :mod:`.timing` (how a configuration is timed, :func:`run_epoch`),
:mod:`.baselines` (the plain loop, :class:`LoopDataset`) and :mod:`.report` (:class:`Row`,
:class:`BenchResult`: the table, the chart, the JSON).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from inspect import signature
from typing import Any

import numpy as np

from ..._deprecated import unknown, warn
from ..._open import open as open_reader
from ..._open import resolve
from ..._options import ImageDecode
from .._format import human_rate
from .baselines import LOOPS, LoopDataset, loop_kind
from .report import BenchResult, Row
from .timing import Epoch, _batch_run, _epoch_run, run_epoch

__all__ = [
    "LOOPS",
    "BenchResult",
    "Epoch",
    "LoopDataset",
    "Row",
    "bench",
    "headspace_bench",
    "run_epoch",
]


def bench(
    source: str | os.PathLike[str],
    *,
    batch_sizes: Sequence[int] = (64,),
    workers: Sequence[int] = (0, 2),
    batches: int = 20,
    rounds: int = 3,
    num_threads: int | None = None,
    seed: int = 0,
    log: Callable[[str], None] | None = print,
    arrays: Any = None,
    members: Any = None,
    dtype: Any = None,
    shape: Sequence[int] | None = None,
    **deprecated: Any,
) -> BenchResult:
    """Measures packread and the plain loop on ``source`` (an HDF5, ZIP, NPY or NPZ file, or a
    folder of ``.npy`` or ``.npz`` files, as :func:`packread.open` takes it): ``batches`` random
    batches per configuration and round. ``arrays`` (HDF5 datasets, NPZ keys), ``members``,
    ``dtype`` and ``shape`` (ZIP members) and ``num_threads`` are the reader's options of
    those names (by default every HDF5 dataset but variable-length ones). DataLoader passes
    run for each of ``workers`` when torch is installed (none when ``workers`` is empty).
    ``datasets=``, the name of earlier releases for ``arrays``/``members``, still works with
    a ``DeprecationWarning``.

    >>> result = bench("train.h5", batch_sizes=[8], workers=[0], batches=2, rounds=1, log=None)
    >>> [row.config for row in result.rows]
    ['loop', 'packread batch', 'DataLoader(loop Dataset)', 'DataLoader(PackDataset)']
    """
    path = os.fspath(source)
    say = log or (lambda m: None)
    if batches < 1 or rounds < 1 or any(b < 1 for b in batch_sizes):
        raise ValueError("batches, rounds and batch sizes must be >= 1")
    kind = resolve(path, None, {}).name
    arrays, members = _datasets(kind, deprecated, arrays, members)
    options, notes = _options(path, kind, arrays, members, dtype, shape, num_threads)
    reader = open_reader(path, **options)
    kind = loop_kind(kind, reader)
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
    loader_rows = _loader_runs(path, loop, options, batch_sizes, workers, batches, seed, result)
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


def _options(
    path: str,
    kind: str,
    arrays: Any,
    members: Any,
    dtype: Any,
    shape: Sequence[int] | None,
    num_threads: int | None,
) -> tuple[dict[str, Any], list[str]]:
    """The reader options a benchmark of ``path`` (a ``kind`` of source) reads with, and
    notes on what they leave out or choose."""
    options: dict[str, Any] = {}
    if num_threads is not None:
        options["num_threads"] = num_threads
    if kind == "zip":
        options.update({k: v for k, v in (("dtype", dtype), ("shape", shape)) if v is not None})
    notes = []
    if kind == "hdf5" and arrays is None:
        # Variable-length data cannot be stacked by the loop or collated by torch's default.
        every = open_reader(path, **options)
        ragged = every.ragged_keys  # type: ignore[attr-defined]
        if ragged:
            arrays = [k for k in every.keys() if k not in ragged]  # type: ignore[attr-defined]
            if not arrays:
                raise ValueError(
                    f"{path}: every dataset holds variable-length data ({', '.join(ragged)}), "
                    "which neither loop can stack; encoded images in HDF5 are benchmarked "
                    "by benches/test_bench_images.py"
                )
            notes.append(f"variable-length datasets left out: {', '.join(ragged)}")
    if kind == "images":
        # Batches of whole images at their own sizes stack in neither loop: the eval geometry
        # of ImageNet-style models (Resize(224) + CenterCrop(224)).
        options["decode"] = ImageDecode(224)
        options["arrays"] = "images"
        notes.append("images decoded to 224x224 centre crops (ImageDecode(224))")
    options.update({k: v for k, v in (("arrays", arrays), ("members", members)) if v is not None})
    return options, notes


def headspace_bench(
    source: str | os.PathLike[str],
    step: Callable[[Any], Any],
    *,
    batch_sizes: Sequence[int] = (64,),
    workers: Sequence[int] = (0, 2),
    steps: int = 50,
    keep: int = 8,
    seed: int = 0,
    num_threads: int | None = None,
    arrays: Any = None,
    members: Any = None,
    dtype: Any = None,
    shape: Sequence[int] | None = None,
    log: Callable[[str], None] | None = print,
) -> list[dict[str, Any]]:
    """How much faster ``step(batch)`` would run over ``source`` if loading were free: for each
    batch size and worker count, :func:`packread.torch.headspace` times the step over
    ``DataLoader(PackDataset(source))`` and over its first ``keep`` batches replayed from
    memory. One dict per configuration: the times per step, the speedup, the verdict of the
    loader's statistics and the statistics themselves.

    >>> rows = headspace_bench("train.h5", lambda b: None, batch_sizes=[8], workers=[0],
    ...                        steps=2, keep=1, log=None)
    >>> rows[0]["speedup"] > 0
    True
    """
    from torch.utils.data import DataLoader

    from ...torch import PackDataset, headspace

    path = os.fspath(source)
    say = log or (lambda m: None)
    kind = resolve(path, None, {}).name
    options, _ = _options(path, kind, arrays, members, dtype, shape, num_threads)
    rows = []
    for b in batch_sizes:
        for w in workers:
            ds = PackDataset(path, b, seed=seed, **options)
            loader = DataLoader(ds, batch_size=None, num_workers=w, persistent_workers=w > 0)
            h = headspace(loader, step, steps=steps, keep=keep)
            say(f"batch {b}, {w} workers: {h}")
            rows.append(
                {
                    "batch_size": b,
                    "workers": w,
                    "loaded_s": h.loaded_s,
                    "replayed_s": h.replayed_s,
                    "speedup": h.speedup,
                    "verdict": h.stats.verdict(),
                    "stats": h.stats.to_dict(),
                }
            )
    return rows


def _datasets(kind: str, deprecated: dict[str, Any], arrays: Any, members: Any) -> tuple[Any, Any]:
    """``arrays`` and ``members`` with the ``datasets=`` of earlier releases folded in (the
    members of a ZIP, else the arrays), with a ``DeprecationWarning``."""
    params = signature(bench).parameters
    for name in deprecated:
        if name != "datasets":
            raise unknown("bench", name, [p for p in params if p != "source"])
    if "datasets" not in deprecated:
        return arrays, members
    new = "members" if kind == "zip" else "arrays"
    warn("bench(datasets=)", f"{new}=")
    if (members if kind == "zip" else arrays) is not None:
        raise TypeError(f"bench() got both datasets= and {new}=")
    if kind == "zip":
        return arrays, deprecated["datasets"]
    return deprecated["datasets"], members


def _loader_runs(
    path: str,
    loop: LoopDataset,
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

        from ...torch import PackDataset
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
