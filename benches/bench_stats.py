"""What loader statistics cost: ``PackDataset`` read with statistics on (the default) against
the same reads with them off (``packread.set_stats(False)``), alternated round by round in one
run, warm page cache.

The goal (issue "Is my training waiting on data?"): at most 1 % on the fastest path
(uncompressed HDF5, batch 64, 0 workers) and no measurable cost elsewhere. The overhead is
measured here, not asserted in tests.

**Data** (written at bench time into a temporary folder, removed afterwards, or into
``--data DIR``, kept and reused while its ``.done`` markers say it is complete; ``--quick``
writes fewer samples), read once before timing, each larger than the CPU's caches:

- ``h5``: HDF5 by h5py, ``images`` uint8 3x256x256 (196 KB a sample; 3,000 samples, 590 MB)
  contiguous (not chunked), uncompressed, and ``labels`` int64;
- ``h5 gzip``: the same samples, one sample a chunk, gzip level 4 (``compression="gzip"``);
  the samples are seeded random bytes whose rows after the first keep their 4 high bits (as
  ``bench_mix.py``'s), so that the codec has work to do (about 1.7:1);
- ``jpeg``: a stored ZIP of 1,000 JPEGs (PIL, quality 90) of 256x256 photo-like images (random
  colour fields upsampled bicubically, plus grain), read with
  ``decode=packread.ImageDecode(224, crop="random")``;
- ``tiny``: HDF5 ``images`` uint8 3x32x32 (3 KB a sample; 40,000 samples, 123 MB) contiguous,
  uncompressed, and ``labels`` int64: where packread's per-batch Python costs the most.

**Configurations**: ``PackDataset(path, 64, seed=...)`` of each, iterated directly (0 workers,
packread's threads: all cores) and through ``DataLoader(ds, batch_size=None, num_workers=2,
persistent_workers=True)`` (packread on 1 thread a worker, as ``bench_mix.py``). Statistics
are a process's setting, read when an iteration starts: with 0 workers ``packread.set_stats``
goes before each iterator is made; with workers, two persistent loaders of the one dataset are
kept, one whose workers count (``worker_init_fn`` calls ``set_stats(True)``) and one whose
workers do not (``set_stats(False)``; ``PACKREAD_STATS`` is set to match as well, and the main
process's setting too, before each epoch).

**Rounds.** Per configuration: one warm-up epoch with statistics on and one off, then
``--rounds`` rounds, each some epochs with statistics on and the same epochs off, which first
alternating round by round. A round's half reads as many epochs as take ``--seconds`` (0.5 s;
counted from the warm-up), so that short epochs are not timed alone. With 0 workers the epochs
are set (``ds.set_epoch``), the same for both halves of a round (the same shuffles), new each
round; with workers each loader's iteration is its next epoch (the same for both loaders). An
epoch is timed from its first batch's arrival (that batch is the warm-up: start-up is left out)
to its end. Reported per configuration: the median samples/s on and off, the median of the
rounds' paired ratios on / off with their interquartile range (1.000: no cost; below:
statistics cost), and per batch the wall time and the CPU time of every process (this one's
``time.process_time``, the workers' threads' ``/proc/<pid>/task/*/schedstat``): on a busy
machine the CPU time shows a cost the wall time may hide. For the fastest path also the
median paired difference per batch, and what ``ds.stats().verdict()`` says after one epoch on
(untimed).

    python benches/bench_stats.py --rounds 15 --json .bench/stats.json   # make bench-stats
    python benches/bench_stats.py --quick            # fewer samples, 2 rounds: a check, no numbers
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import packread

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import announce, print_results, require, write_json

#: Bumped whenever the files written change, so that old files in ``--data`` are not reused.
LAYOUT = 1
BATCH, WORKERS, SEED, DATA_SEED = 64, 2, 0, 41
BIG, SMALL = (3, 256, 256), (3, 32, 32)
CROP = 224
#: Samples of each fixture: the full run's, and ``--quick``'s.
FULL = {"h5": 3000, "h5 gzip": 3000, "jpeg": 1000, "tiny": 40000}
QUICK = {"h5": 400, "h5 gzip": 400, "jpeg": 200, "tiny": 4000}
#: The fastest path, where the goal is at most 1 %.
FASTEST = ("h5", 0)
GOAL = 0.99

#: The packages whose versions the results give.
PACKAGES = [
    ("packread", "packread"),
    ("torch", "torch"),
    ("numpy", "numpy"),
    ("h5py", "h5py"),
    ("Pillow", "PIL"),
]


# -- data ------------------------------------------------------------------------------------


def images(start: int, n: int, shape: tuple[int, ...]) -> np.ndarray:
    """Samples ``start .. start + n``: seeded random bytes, the rows after the first keeping
    their 4 high bits (a codec has work to do)."""
    out = np.empty((n, *shape), np.uint8)
    for i in range(n):
        img = np.random.default_rng([DATA_SEED, start + i]).integers(0, 256, shape, np.uint8)
        img[:, 1:, :] &= 0xF0
        out[i] = img
    return out


def labels(n: int) -> np.ndarray:
    return np.random.default_rng([DATA_SEED, 1]).integers(0, 1000, n, dtype=np.int64)


def _write_h5(path: Path, n: int, shape: tuple[int, ...], gzip: bool) -> None:
    import h5py

    codec: dict[str, Any] = (
        {"chunks": (1, *shape), "compression": "gzip", "compression_opts": 4} if gzip else {}
    )
    block = max(1, (64 << 20) // int(np.prod(shape)))
    with h5py.File(path, "w") as f:
        d = f.create_dataset("images", (n, *shape), np.uint8, **codec)
        for s in range(0, n, block):
            d[s : s + block] = images(s, min(block, n - s), shape)
        f.create_dataset("labels", data=labels(n))


def photo(i: int, side: int = 256) -> bytes:
    """A photo-like JPEG: a coarse random colour field upsampled bicubically, with grain."""
    from PIL import Image

    rng = np.random.default_rng([DATA_SEED, 2, i])
    coarse = rng.integers(0, 256, (int(rng.integers(4, 17)),) * 2 + (3,), np.uint8)
    big = np.asarray(Image.fromarray(coarse).resize((side, side), Image.BICUBIC), np.int16)
    grain = rng.normal(0, 6, big.shape)
    img = Image.fromarray(np.clip(big + grain, 0, 255).astype(np.uint8))
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90)
    return out.getvalue()


def _write_jpeg_zip(path: Path, n: int) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for i in range(n):
            z.writestr(f"{i:06d}.jpg", photo(i))


@dataclass
class Fixture:
    """One data set: how it is written, and the ``PackDataset`` options that read it."""

    file: str
    write: Callable[[Path, int], None]
    options: dict[str, Any]
    said: str


def fixtures() -> dict[str, Fixture]:
    decode = packread.ImageDecode(CROP, crop="random")
    return {
        "h5": Fixture(
            "h5.h5",
            lambda p, n: _write_h5(p, n, BIG, gzip=False),
            {},
            "HDF5 uint8 3x256x256 contiguous, uncompressed, + int64 labels",
        ),
        "h5 gzip": Fixture(
            "h5-gzip.h5",
            lambda p, n: _write_h5(p, n, BIG, gzip=True),
            {},
            "HDF5 uint8 3x256x256 one sample a chunk, gzip-4, + int64 labels",
        ),
        "jpeg": Fixture(
            "jpeg.zip",
            _write_jpeg_zip,
            {"members": "*.jpg", "decode": decode},
            f"stored ZIP of 256x256 JPEGs (q90), ImageDecode({CROP}, crop='random')",
        ),
        "tiny": Fixture(
            "tiny.h5",
            lambda p, n: _write_h5(p, n, SMALL, gzip=False),
            {},
            "HDF5 uint8 3x32x32 contiguous, uncompressed, + int64 labels",
        ),
    }


def made(root: Path, name: str, fx: Fixture, n: int) -> Path:
    """The fixture's file under ``root``, written (aside, then renamed) unless its ``.done``
    marker says an earlier run wrote it with this layout and size."""
    path = root / fx.file
    done = path.with_name(path.name + ".done")
    mark = json.dumps({"layout": LAYOUT, "samples": n}) + "\n"
    if path.exists() and done.exists() and done.read_text() == mark:
        return path
    print(f"writing {name} ({n:,} samples) ...", flush=True)
    t0 = time.perf_counter()
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fx.write(tmp, n)
    os.replace(tmp, path)
    done.write_text(mark)
    print(f"  {path.stat().st_size / 1e6:,.0f} MB in {time.perf_counter() - t0:.1f} s")
    return path


def warm(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 22):
            pass


# -- loaders ---------------------------------------------------------------------------------


def set_stats(on: bool) -> None:
    """Statistics on or off in this process, and in the processes it starts from now on."""
    os.environ["PACKREAD_STATS"] = "1" if on else "0"
    packread.set_stats(on)


def worker_init(on: bool, _worker: int) -> None:
    """``worker_init_fn``: packread on 1 thread in each worker, statistics ``on`` or off."""
    packread.set_num_threads(1)
    set_stats(on)


def rows(batch: Any) -> int:
    x = batch["images"] if isinstance(batch, dict) else batch
    return len(x)


class Epochs:
    """One configuration's epochs, with statistics on or off (``run``)."""

    def __init__(self, ds: Any, workers: int) -> None:
        self.ds, self.workers = ds, workers
        self.loaders: dict[bool, Any] = {}
        if workers:
            from torch.utils.data import DataLoader

            for on in (True, False):
                set_stats(on)
                self.loaders[on] = DataLoader(
                    ds,
                    batch_size=None,
                    num_workers=workers,
                    persistent_workers=True,
                    worker_init_fn=functools.partial(worker_init, on),
                )

    def batches(self, on: bool, epoch: int) -> Iterator[Any]:
        set_stats(on)
        if self.workers:
            return iter(self.loaders[on])
        self.ds.set_epoch(epoch)
        return iter(self.ds)

    def epoch(self, on: bool, epoch: int) -> tuple[float, int, int]:
        """One epoch: seconds from its first batch's arrival to its end, and the samples and
        batches after the first."""
        it = self.batches(on, epoch)
        first = next(it)
        assert rows(first) == BATCH, rows(first)
        del first
        n = k = 0
        t0 = time.perf_counter()
        for b in it:
            n += rows(b)
            k += 1
        return time.perf_counter() - t0, n, k

    def workers_cpu(self, on: bool) -> float | None:
        """CPU seconds the loader's worker processes used so far (every thread's, from
        ``/proc/<pid>/task/*/schedstat``), 0 without workers, ``None`` where unknown."""
        if not self.workers:
            return 0.0
        it = getattr(self.loaders[on], "_iterator", None)
        try:
            pids = [w.pid for w in it._workers]  # type: ignore[union-attr]
            ns = 0
            for pid in pids:
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                        ns += int(f.read().split()[0])
        except (AttributeError, OSError, ValueError):
            return None
        return ns / 1e9

    def run(self, on: bool, epochs: range) -> tuple[float, int, int, float | None]:
        """``epochs``: their times, samples and batches (after each one's first) summed, and
        the CPU seconds used by every process (this one's threads and the workers') per batch
        read (all of them)."""
        t = n = k = 0
        c0, w0 = time.process_time(), self.workers_cpu(on)
        for e in epochs:
            dt, dn, dk = self.epoch(on, e)
            t, n, k = t + dt, n + dn, k + dk
        c1, w1 = time.process_time(), self.workers_cpu(on)
        cpu = None if w0 is None or w1 is None else (c1 - c0 + w1 - w0) / (k + len(epochs))
        return t, n, k, cpu

    def close(self) -> None:
        for loader in self.loaders.values():
            it = getattr(loader, "_iterator", None)
            if it is not None:
                it._shutdown_workers()
        self.loaders.clear()


@dataclass
class Result:
    fixture: str
    workers: int
    #: Epochs a round's half reads.
    epochs: int
    #: Per round: ``(seconds, samples, batches, CPU seconds a batch)`` on and off.
    on: list[tuple[float, int, int, float | None]]
    off: list[tuple[float, int, int, float | None]]

    def rates(self, on: bool) -> list[float]:
        return [r[1] / r[0] for r in (self.on if on else self.off)]

    def cpu_us(self, on: bool) -> float | None:
        """Median CPU µs a batch, every process."""
        cpu = [r[3] for r in (self.on if on else self.off)]
        return None if None in cpu else 1e6 * statistics.median(cpu)  # type: ignore[type-var]

    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.rates(True), self.rates(False), strict=True)]

    def per_batch_us(self, on: bool) -> list[float]:
        return [1e6 * r[0] / r[2] for r in (self.on if on else self.off)]

    def summary(self) -> dict[str, Any]:
        r = self.ratios()
        q = np.percentile(r, [25, 75]) if len(r) > 1 else [r[0], r[0]]
        on_us, off_us = self.per_batch_us(True), self.per_batch_us(False)
        return {
            "fixture": self.fixture,
            "workers": self.workers,
            "on": statistics.median(self.rates(True)),
            "off": statistics.median(self.rates(False)),
            "ratio": statistics.median(r),
            "ratio_q1": float(q[0]),
            "ratio_q3": float(q[1]),
            "ratios": r,
            "per_batch_on_us": statistics.median(on_us),
            "per_batch_off_us": statistics.median(off_us),
            "per_batch_diff_us": statistics.median(
                a - b for a, b in zip(on_us, off_us, strict=True)
            ),
            "cpu_on_us": self.cpu_us(True),
            "cpu_off_us": self.cpu_us(False),
            "epochs": self.epochs,
            "batches": self.on[0][2],
        }


def measure(ds: Any, name: str, workers: int, rounds: int, seconds: float) -> Result:
    """Warm-up (an epoch on, an epoch off), then ``rounds`` paired rounds, which setting first
    alternating; a round's halves are each as many epochs as make ``seconds`` (from the
    warm-up's times), the same epochs for both."""
    epochs = Epochs(ds, workers)
    try:
        took = min(epochs.epoch(on, 0)[0] for on in (True, False))
        k = max(1, math.ceil(seconds / max(took, 1e-6)))
        res = Result(name, workers, k, [], [])
        for r in range(rounds):
            order = (True, False) if r % 2 == 0 else (False, True)
            for on in order:
                (res.on if on else res.off).append(
                    epochs.run(on, range(1 + r * k, 1 + (r + 1) * k))
                )
        return res
    finally:
        epochs.close()
        set_stats(True)


def verdict(ds: Any) -> tuple[str, dict[str, Any]]:
    """What ``ds.stats()`` says after one epoch with statistics on, 0 workers (untimed)."""
    set_stats(True)
    ds.reset_stats()
    ds.set_epoch(10_000)
    for _ in ds:
        pass
    s = ds.stats()
    facts = {
        "batches": s.batches,
        "samples": s.samples,
        "waiting_fraction": s.waiting_fraction,
        "blocked_p50_ms": 1e3 * s.blocked_p50_s,
        "read_s": s.read_s,
        "shares": {k: round(v, 3) for k, v in s.shares().items() if v >= 0.005},
        "utilisation": s.utilisation,
        "queue_depth": s.queue_depth,
    }
    return s.verdict(), facts


# -- report ----------------------------------------------------------------------------------


def cpu(row: dict[str, Any]) -> str:
    """``on / off`` CPU µs a batch (``-``: unknown)."""
    if row["cpu_on_us"] is None or row["cpu_off_us"] is None:
        return "-"
    return f"{row['cpu_on_us']:,.0f} / {row['cpu_off_us']:,.0f}"


def markdown(
    rows: list[dict[str, Any]],
    said: dict[str, str],
    sizes: dict[str, int],
    stored: dict[str, float],
    fastest: dict[str, Any] | None,
    told: tuple[str, dict[str, Any]] | None,
    facts: dict[str, Any],
    rounds: int,
    seconds: float,
    command: str,
    quick: bool,
) -> str:
    lines = [
        f"## Loader statistics overhead: {facts['date']}",
        "",
        f"`{command}`, {facts['cpu']}, {facts['usable_cpus']} usable cores, L3 "
        f"{facts['l3_cache']}, {facts['mem_gib']} GiB, load average {facts['loadavg'][0]} "
        f"before and {facts['loadavg_after'][0]} after. "
        + ("**--quick: a check of the script, not numbers.** " if quick else "")
        + f"`PackDataset(path, 64)`, statistics on (default) against `packread.set_stats(False)`"
        f", alternated: per configuration a warm-up epoch each, then {rounds} rounds of "
        "epochs on and the same epochs off (which first alternating; as many epochs as take "
        f"{seconds} s), each epoch timed from its first batch's arrival to its end. "
        "0 workers: packread's "
        f"{facts['packread_threads']} threads, `ds.set_epoch(round)`; 2 workers: "
        "`DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)`, 1 thread a "
        "worker, one persistent loader with statistics on in its workers and one off. "
        "Ratio: the median of the rounds' samples/s on / off, and its interquartile range. "
        "Per batch: wall time, and CPU time of every process (this one's threads and the "
        "workers', all batches read), medians of the rounds.",
        "",
    ]
    lines += [
        f"- `{k}`: {said[k]}; {sizes[k]:,} samples, {stored[k]:,.0f} MB stored." for k in said
    ]
    lines += [
        "",
        "| data | workers | epochs x batches timed | on samples/s | off samples/s | on / off | "
        "IQR | wall per batch on / off (µs) | CPU per batch on / off (µs) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        goal = (r["fixture"], r["workers"]) == FASTEST
        ratio = f"**{r['ratio']:.3f}**" if goal else f"{r['ratio']:.3f}"
        lines.append(
            f"| {r['fixture']} | {r['workers']} | {r['epochs']} x {r['batches'] // r['epochs']} | "
            f"{r['on']:,.0f} | "
            f"{r['off']:,.0f} | {ratio} | {r['ratio_q1']:.3f}-{r['ratio_q3']:.3f} | "
            f"{r['per_batch_on_us']:,.0f} / {r['per_batch_off_us']:,.0f} | {cpu(r)} |"
        )
    lines.append("")
    if fastest is not None:
        ok = "met" if fastest["ratio"] >= GOAL else "NOT met"
        lines.append(
            f"**Fastest path** (`{FASTEST[0]}`, batch 64, 0 workers): on / off "
            f"{fastest['ratio']:.3f} (IQR {fastest['ratio_q1']:.3f}-{fastest['ratio_q3']:.3f}; "
            f"goal at least {GOAL}: {ok}); per batch {fastest['per_batch_on_us']:,.1f} µs on, "
            f"{fastest['per_batch_off_us']:,.1f} µs off, median paired difference "
            f"{fastest['per_batch_diff_us']:+,.1f} µs a batch; CPU per batch (on / off) "
            f"{cpu(fastest)} µs."
        )
        lines.append("")
    if told is not None:
        text, f = told
        shares = ", ".join(f"{k} {100 * v:.0f} %" for k, v in f["shares"].items())
        lines.append(
            f"`ds.stats()` after one epoch on (`{FASTEST[0]}`, 0 workers): {f['batches']} "
            f"batches, {f['samples']:,} samples, read time by stage {shares}; "
            f'`verdict()`: "{text}"'
        )
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


def account(paths: dict[str, Path], fx: dict[str, Fixture], rounds: int) -> list[str]:
    """What statistics cost per batch, piece by piece, apart from the epochs' noise: the core's
    counters (``reader.batch`` into one array, on and off alternated in rounds of 200 random
    batches: the median of the paired ratios), and the Python a dataset's loop runs per batch
    (``Recorder.took``) and a worker per send (``payload`` and its pickle), by ``timeit``."""
    import pickle
    import timeit

    from packread._stats import Recorder, now

    lines = []
    rng = np.random.default_rng(SEED)
    for k in ("h5", "tiny"):
        if k not in paths:
            continue
        reader = packread.open(str(paths[k]), **{**fx[k].options, "arrays": "images"})
        n = len(reader)
        picks = [np.sort(rng.choice(n, BATCH, replace=False)) for _ in range(200)]
        out = np.empty((BATCH, *reader.shape), reader.dtype)
        times: dict[bool, list[float]] = {True: [], False: []}
        for r in range(rounds * 2):
            for on in (True, False) if r % 2 else (False, True):
                set_stats(on)
                t = time.perf_counter()
                for idx in picks:
                    reader.batch(idx, out=out)
                times[on].append((time.perf_counter() - t) / len(picks))
        set_stats(True)
        ratios = [off / on for on, off in zip(times[True], times[False], strict=True)]
        q = statistics.quantiles(ratios, n=4)
        lines.append(
            f"- core counters, `{k}` `reader.batch` of {BATCH}: "
            f"{1e6 * statistics.median(times[True]):.1f} µs on, "
            f"{1e6 * statistics.median(times[False]):.1f} µs off a batch; off / on time "
            f"{statistics.median(ratios):.3f} (IQR {q[0]:.3f}-{q[2]:.3f})"
        )

    class Started:
        rows, transform = BATCH, 0.0

    rec = Recorder()
    rec.begin()
    t0 = now()
    calls = 100_000
    took = timeit.timeit(lambda: rec.took(t0, t0, Started, 2, False, True), number=calls)
    payload = rec.payload(0)
    sends = 10_000
    made = timeit.timeit(lambda: rec.payload(0), number=sends)
    pickled = timeit.timeit(lambda: pickle.dumps(payload), number=sends)
    lines.append(
        f"- a dataset loop's Python per batch (`Recorder.took`, two clock reads): "
        f"{1e6 * took / calls + 0.1:.2f} µs; a worker's totals (`payload` + pickle, "
        f"{len(pickle.dumps(payload))} bytes, at most every 50 ms and with its first and last "
        f"batches): {1e6 * (made + pickled) / sends:.1f} µs a send"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=None, help="paired rounds (15; 2 with --quick)")
    p.add_argument(
        "--quick", action="store_true", help="fewer samples and 2 rounds: a check, not numbers"
    )
    p.add_argument("--data", help="write the data here and keep it (default: a temporary folder)")
    p.add_argument(
        "--fixtures", nargs="+", choices=list(FULL), default=list(FULL), help="data sets to run"
    )
    p.add_argument("--workers", type=int, nargs="+", default=[0, WORKERS])
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="a round's half reads as many epochs as take this long (0.5; 0.1 with --quick)",
    )
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    require(p, ("torch", "h5py", "PIL"))
    import torch

    from packread.torch import PackDataset

    torch.set_num_threads(1)
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 15)
    if args.seconds is None:
        args.seconds = 0.1 if args.quick else 0.5
    sizes = {k: (QUICK if args.quick else FULL)[k] for k in args.fixtures}
    command = " ".join(["python benches/bench_stats.py", *(argv or sys.argv[1:])])
    facts, vers = announce(PACKAGES)
    tmp = None if args.data else tempfile.mkdtemp(prefix="packread-bench-stats-")
    root = Path(args.data or tmp)
    root.mkdir(parents=True, exist_ok=True)
    try:
        fx = fixtures()
        paths = {k: made(root, k, fx[k], n) for k, n in sizes.items()}
        stored = {k: v.stat().st_size / 1e6 for k, v in paths.items()}
        results: list[dict[str, Any]] = []
        told = None
        for k, path in paths.items():
            warm(path)
            for w in args.workers:
                ds = PackDataset(str(path), BATCH, seed=SEED, **fx[k].options)
                t0 = time.perf_counter()
                row = measure(ds, k, w, rounds, args.seconds).summary()
                results.append(row)
                print(
                    f"  {k}, {w} workers: on {row['on']:,.0f} off {row['off']:,.0f} samples/s, "
                    f"on / off {row['ratio']:.3f} ({row['ratio_q1']:.3f}-{row['ratio_q3']:.3f})"
                    f" [{time.perf_counter() - t0:.1f} s]",
                    flush=True,
                )
                if (k, w) == FASTEST:
                    told = verdict(ds)
                del ds
        accounted = account(paths, fx, rounds)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    facts["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    fastest = next((r for r in results if (r["fixture"], r["workers"]) == FASTEST), None)
    said = {k: fx[k].said for k in sizes}
    text = markdown(
        results,
        said,
        sizes,
        stored,
        fastest,
        told,
        facts,
        rounds,
        args.seconds,
        command,
        args.quick,
    )
    text += "\n\n**Piece by piece** (the cost apart from the epochs' noise):\n\n"
    text += "\n".join(accounted)
    print_results(text)
    if args.json:
        out = {
            "versions": vers,
            "machine": facts,
            "quick": args.quick,
            "rounds": rounds,
            "seconds": args.seconds,
            "samples": sizes,
            "stored_mb": stored,
            "rows": results,
            "accounted": accounted,
            "fastest": fastest,
            "goal": GOAL,
            "verdict": None if told is None else {"text": told[0], **told[1]},
            "command": command,
        }
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
