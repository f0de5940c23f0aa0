"""Rows of one large ``.npy``: packread's ``NpyReader(path).batch(idx)`` against what users
write today, ``np.load(path, mmap_mode="r")[idx]`` and a memmap gather row by row (a map-style
``Dataset.__getitem__`` per sample, stacked), on random batches from a file larger than the
CPU caches (4 GiB by default), warm (the file in the page cache) and cold (the page cache
dropped before each round, every reader opened afresh).

Each round draws fresh random indices and runs every contender on them, in an order that
alternates from round to round; the median round is reported. The physical limit beside
them: the same rows gathered from an array in memory (``arr[idx]``, no file at all), and,
cold, one thread reading the rows with ``os.pread``.

    python benches/bench_npy_rows.py --mode warm
    python benches/bench_npy_rows.py --mode cold   # root: writes /proc/sys/vm/drop_caches
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import packread

ROOT = Path(__file__).resolve().parents[1]


def write_file(path: Path, size: int, row_shape: tuple[int, ...], dtype: str) -> int:
    """Writes ``path`` (random bytes) unless it exists with that size; returns its rows."""
    row_bytes = int(np.prod(row_shape)) * np.dtype(dtype).itemsize
    rows = size // row_bytes
    if path.exists():
        head = np.load(path, mmap_mode="r")
        if head.shape == (rows, *row_shape) and head.dtype == np.dtype(dtype):
            return rows
    path.parent.mkdir(parents=True, exist_ok=True)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(rows, *row_shape))
    rng = np.random.default_rng(0)
    step = max(1, (64 << 20) // row_bytes)
    for at in range(0, rows, step):
        n = min(step, rows - at)
        out[at : at + n] = rng.integers(0, 256, (n, *row_shape), dtype=np.uint8).view(dtype)
    out.flush()
    del out
    return rows


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def warm_up(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def pread_rows(path: Path, offset: int, row_bytes: int) -> Callable[[np.ndarray], np.ndarray]:
    """One thread, one ``os.pread`` a row: the plain system-call read of the same rows."""
    fd = os.open(path, os.O_RDONLY)

    def read(idx: np.ndarray) -> np.ndarray:
        out = np.empty(len(idx) * row_bytes, np.uint8)
        view = memoryview(out)
        for k, i in enumerate(idx.tolist()):
            got = os.preadv(fd, [view[k * row_bytes : (k + 1) * row_bytes]], offset + i * row_bytes)
            assert got == row_bytes
        return out

    return read


def contenders(path: Path, mode: str) -> dict[str, Callable[[], Callable[[np.ndarray], object]]]:
    """Each contender as a function opening it (per round when cold) and returning its read."""

    def numpy_mmap() -> Callable[[np.ndarray], object]:
        mm = np.load(path, mmap_mode="r")
        return lambda idx: mm[idx]

    def memmap_gather() -> Callable[[np.ndarray], object]:
        mm = np.load(path, mmap_mode="r")

        def read(idx: np.ndarray) -> object:
            out = np.empty((len(idx), *mm.shape[1:]), mm.dtype)
            for k, i in enumerate(idx.tolist()):
                out[k] = mm[i]
            return out

        return read

    def packread_rows() -> Callable[[np.ndarray], object]:
        return packread.NpyReader(str(path)).batch

    return {
        "packread NpyReader.batch": packread_rows,
        "np.load(mmap_mode='r')[idx]": numpy_mmap,
        "memmap gather (row by row)": memmap_gather,
    }


def run(args: argparse.Namespace) -> dict[str, object]:
    path = Path(args.file)
    row_shape = tuple(args.row_shape)
    rows = write_file(path, int(args.size_gib * (1 << 30)), row_shape, args.dtype)
    row_bytes = int(np.prod(row_shape)) * np.dtype(args.dtype).itemsize
    header = np.load(path, mmap_mode="r")
    offset = header.offset
    del header
    makers = contenders(path, args.mode)
    # Warm contenders are opened once (as a training loop would), cold ones every round.
    opened = {name: make() for name, make in makers.items()} if args.mode == "warm" else {}
    limit_name = "limit: arr[idx] in memory" if args.mode == "warm" else "limit: os.pread a row"
    if args.mode == "warm":
        warm_up(path)
        in_memory = np.fromfile(path, dtype=np.uint8, offset=offset).view(args.dtype)
        in_memory = in_memory.reshape(rows, *row_shape)
        limit: Callable[[np.ndarray], object] = lambda idx: in_memory[idx]  # noqa: E731
    rng = np.random.default_rng(args.seed)
    # Every contender reads the same first batch once before timing (opens, first faults).
    first = rng.integers(0, rows, args.batch)
    for read in opened.values():
        read(first)
    names = [*makers, limit_name]
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        batches = [rng.integers(0, rows, args.batch) for _ in range(args.batches)]
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            if args.mode == "cold":
                # The previous contender's memmap must be gone first: the kernel does not
                # drop pages a live mapping maps, and the next contender would find them.
                read = None
                gc.collect()
                drop_caches()
                opener = makers.get(name, lambda: pread_rows(path, offset, row_bytes))
                read = opener()
            else:
                read = limit if name == limit_name else opened[name]
            start = time.perf_counter()
            for idx in batches:
                read(idx)
            times[name].append(time.perf_counter() - start)
    per_batch = {n: statistics.median(t) / args.batches for n, t in times.items()}
    baseline = "np.load(mmap_mode='r')[idx]"
    base = per_batch[baseline]
    return {
        "mode": args.mode,
        "file": f"{rows} rows of {row_shape} {args.dtype} ({rows * row_bytes / 2**30:.2f} GiB)",
        "batch": args.batch,
        "batches_per_round": args.batches,
        "rounds": args.rounds,
        "threads": packread.get_num_threads(),
        "ms_per_batch": {n: round(t * 1e3, 3) for n, t in per_batch.items()},
        "GB_per_s": {n: round(args.batch * row_bytes / t / 1e9, 2) for n, t in per_batch.items()},
        "x_numpy_mmap": {n: round(base / t, 2) for n, t in per_batch.items()},
        "wins_of_rounds": {
            n: sum(a < b for a, b in zip(times[n], times[baseline], strict=True)) for n in names
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("warm", "cold"), default="warm")
    p.add_argument("--file", default=str(ROOT / ".bench" / "rows_4g.npy"))
    p.add_argument("--size-gib", type=float, default=4.0)
    p.add_argument("--row-shape", type=int, nargs="+", default=[3, 64, 64])
    p.add_argument("--dtype", default="uint8")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--batches", type=int, default=200, help="batches per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.mode == "cold" and args.batches == 200:
        args.batches = 20
    print(json.dumps(run(args), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
