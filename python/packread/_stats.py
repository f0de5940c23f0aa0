"""Loader statistics: what a dataset's consumer waited for, and what its reads did.

Two sides are measured:

- **the consumer** (the training loop): how long each ``next()`` blocked, the time to the first
  batch of each iteration, and the share of the time between ``next()`` calls spent waiting;
- **the reads**, counted in packread's core per thread (:mod:`packread._packread`'s
  ``stats_counters``: time, calls and bytes per stage, and cache lookups), plus the Python
  around them: waiting on a batch's read, the transform, the hand-off from a worker.

A :class:`Recorder` per dataset and process collects both; DataLoader workers send theirs, in
total since they started, with the batches they send anyway, and :class:`LoaderStats` is the
snapshot ``ds.stats()`` returns, with :meth:`LoaderStats.verdict`. Nothing here imports torch.
"""

from __future__ import annotations

import os
import resource
import time
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from . import _packread

#: The core's counters, in order: ``<stage>_ns``, ``<stage>_calls``, ``<stage>_bytes`` per stage,
#: then counts of events (merged reads, cache lookups and hits, batches).
NAMES: tuple[str, ...] = tuple(_packread.stats_names())
_AT = {n: i for i, n in enumerate(NAMES)}
#: The stages, in order.
STAGES: tuple[str, ...] = tuple(n[: -len("_ns")] for n in NAMES if n.endswith("_ns"))
#: The stages that decode (one per codec).
DECODERS: tuple[str, ...] = tuple(
    s for s in STAGES if s not in ("plan", "read", "network", "geometry", "copy")
)
#: Below this share of the time between ``next()`` calls spent waiting, a loop is not data-bound.
DATA_BOUND = 0.05
#: Threads busy at least this share of the time are saturated.
BUSY = 0.8
#: Reading processes using at least this share of the machine's CPUs have reached its limit
#: (a process whose threads outnumber the CPUs loses some of its share to switching between
#: them: on 2 CPUs, 2 reading threads and the loop's own measure 80-90 % at saturation).
CPU_BOUND = 0.75
#: Fewest clock ticks of the machine's CPU time (``/proc/stat``, usually 100 a second per CPU)
#: for its share to be told: a shorter window is too coarse, and the process's own share
#: stands in.
MACHINE_TICKS = 100


def counters() -> np.ndarray:
    """This process's counters now (totals since it started), as int64."""
    return np.frombuffer(_packread.stats_counters(), dtype=np.uint64).astype(np.int64)


def cpu_seconds() -> float:
    """CPU seconds this process has used (all its threads), user and system."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


_CORES: tuple[int, int] | None = None


def cores() -> int:
    """The CPUs this process may run on (asked once per process)."""
    global _CORES
    if _CORES is None or _CORES[0] != os.getpid():
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
        _CORES = (os.getpid(), n)
    return _CORES[1]


def machine_cpu() -> tuple[float, float] | None:
    """``(busy, total)`` CPU time of the whole machine so far (``/proc/stat``, in clock
    ticks), ``None`` where it cannot be read. Its share over an interval says whether the
    machine's CPUs are all in use, by this process or by others."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu":
        return None
    ticks = [float(v) for v in fields[1:9]]
    total = sum(ticks)
    idle = ticks[3] + ticks[4]  # idle, iowait
    return total - idle, total


def reader_threads(reader: Any) -> int:
    """The threads ``reader``'s batches are read with (its own pool, else the shared one)."""
    kwargs = getattr(reader, "_kwargs", None)
    threads = kwargs.get("num_threads") if isinstance(kwargs, dict) else None
    return int(threads) if isinstance(threads, int) else int(_packread.get_num_threads())


#: Seconds of ``CLOCK_MONOTONIC``: the same clock in every process of the machine, and the
#: one trace spans are stamped with (``time.monotonic`` reads it on Linux).
now = time.monotonic


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


class Recorder:
    """What one dataset did in one process: its consumer's waits (where this process is the
    consumer) and its reads. One iterating thread records."""

    def __init__(self) -> None:
        #: Set while :func:`timed` measures the consumer, so the dataset's own loop does not.
        self.outer = False
        self.reset()

    def reset(self) -> None:
        #: Seconds each ``next()`` blocked, but the first of each iteration; and those.
        self.waits = array("d")
        self.firsts = array("d")
        #: Seconds from the first batch's arrival to the last's, over iterations, and the
        #: samples that arrived in them.
        self.span = 0.0
        self.steady_samples = 0
        self.batches = 0
        self.samples = 0
        self._call: float | None = None
        self._prev_got: float | None = None
        #: The core's counters while this dataset read, in this process.
        self.reads = np.zeros(len(NAMES), dtype=np.int64)
        self._mark: np.ndarray | None = None
        #: Batches and samples this process made, seconds it read (first to last batch of each
        #: iteration) and seconds its batches waited outside its loop (a worker's: to be taken).
        self.made = 0
        self.made_samples = 0
        self.active = 0.0
        self.outside = 0.0
        self._first_at: float | None = None
        self._last_at: float | None = None
        #: When this loop's last batch left it (the time outside it counts from there).
        self._left: float | None = None
        #: CPU seconds this process used while it read (every thread), and at the start.
        self.cpu = 0.0
        self._cpu0 = 0.0
        #: The machine's busy and total CPU time (``machine_cpu``) while the consumer iterated,
        #: and at the start of the current iteration (sampled once per iteration and
        #: snapshot: reading ``/proc/stat`` costs tens of microseconds).
        self.machine = (0.0, 0.0)
        self._machine0: tuple[float, float] | None = None
        #: Threads this dataset's reader reads with, in this process.
        self.threads = int(_packread.get_num_threads())
        #: Seconds spent waiting on reads, in transforms, receiving workers' batches.
        self.read_wait = 0.0
        self.transform = 0.0
        self.handoff = 0.0
        self.handoffs = 0
        #: Read-ahead batches already read when the next was taken: ``{depth: times}``.
        self.depth: dict[int, int] = {}
        #: DataLoader workers' totals as last sent, and as they were at the last reset.
        self.workers: dict[tuple[int, int], dict[str, Any]] = getattr(self, "workers", {})
        self.baselines = {k: dict(v) for k, v in self.workers.items()}

    # -- the reads ------------------------------------------------------------------------------

    def mark(self) -> None:
        """Reads counted from now on are this dataset's (an iteration starts or resumes)."""
        self._mark = counters()

    def settle(self) -> None:
        """Adds the reads counted since :meth:`mark` and marks again."""
        if self._mark is None:
            return
        current = counters()
        self.reads += current - self._mark
        self._mark = current

    def pause(self) -> None:
        """Adds the reads counted since :meth:`mark`; reads after it are not this dataset's."""
        self.settle()
        self._mark = None

    # -- the consumer ---------------------------------------------------------------------------

    def asked(self, first: bool) -> None:
        """The consumer asks for a batch (``first``: the first of an iteration)."""
        if first:
            self._prev_got = None
            self.consumer_end()
            self._machine0 = machine_cpu()
        self._call = now()

    def consumer_end(self) -> None:
        """The consumer's iteration ended: the machine's CPU time so far is kept."""
        self.machine = self.machine_now()
        self._machine0 = None

    def got(self, rows: int, first: bool) -> None:
        """The batch the consumer asked for is here, ``rows`` samples (-1: there was none,
        the iteration ended).

        The first batch of an iteration is the time to first batch (start-up: worker
        processes, opening files), reported apart. Every later batch adds its wait, and the
        time since the previous batch arrived (the step, then the wait), to the steady
        state the waiting fraction and the rates are of."""
        if self._call is None or rows < 0:
            self._call = None
            return
        t = now()
        self._consumed(t, t - self._call, rows, first)
        self._call = None

    def _consumed(self, t: float, wait: float, rows: int, first: bool) -> None:
        """The consumer got a batch of ``rows`` at ``t`` after waiting ``wait``."""
        self.batches += 1
        self.samples += rows
        if first or self._prev_got is None:
            self.firsts.append(wait)
        else:
            self.waits.append(wait)
            self.span += t - self._prev_got
            self.steady_samples += rows
        self._prev_got = t

    # -- the process that reads -----------------------------------------------------------------

    def took(
        self, asked: float, waited: float, started: Any, ready: int, first: bool, consumer: bool
    ) -> float:
        """A dataset's own loop handed out a batch (``started``: its rows and transform time):
        asked for at ``asked``, read (and transformed) by ``waited``, with ``ready`` batches
        read ahead; ``consumer``: this loop's caller is the training loop. What
        :meth:`made_one`, then :meth:`asked` and :meth:`got` record, in one call (this runs
        once per batch). Returns the time."""
        t = now()
        rows, transform = started.rows, started.transform
        self.read_wait += waited - asked - transform
        self.transform += transform
        self._made(t, rows, ready, 0.0 if self._left is None else asked - self._left)
        self._left = t
        if consumer:
            if first:
                self.consumer_end()
                self._machine0 = machine_cpu()
            self._consumed(t, t - asked, rows, first)
        return t

    def begin(self) -> None:
        """This process starts reading a dataset's batches (an iteration begins)."""
        self._first_at = self._last_at = now()
        self._left = None
        self._cpu0 = cpu_seconds()

    def made_one(self, rows: int, depth: int | None, outside: float) -> None:
        """This process made a batch of ``rows`` (``depth``: read-ahead batches already read
        when it was taken; ``outside``: seconds since the previous batch left its loop)."""
        self._made(now(), rows, depth, outside)

    def _made(self, t: float, rows: int, depth: int | None, outside: float) -> None:
        if self._first_at is None:
            self.begin()
        self._last_at = t
        self.made += 1
        self.made_samples += rows
        self.outside += outside
        if depth is not None:
            self.depth[depth] = self.depth.get(depth, 0) + 1

    def end_iteration(self) -> None:
        """An iteration of this process's loop ended (exhausted or left)."""
        self.active = self.active_now()
        self.cpu = self.cpu_now()
        self._first_at = self._last_at = None
        self.pause()

    def active_now(self) -> float:
        """Seconds this process has read: from each iteration's start to its last batch."""
        if self._first_at is None or self._last_at is None:
            return self.active
        return self.active + (self._last_at - self._first_at)

    def machine_now(self) -> tuple[float, float]:
        """The machine's busy and total CPU time while the consumer iterated."""
        if self._machine0 is None:
            return self.machine
        current = machine_cpu()
        if current is None:
            return self.machine
        return (
            self.machine[0] + current[0] - self._machine0[0],
            self.machine[1] + current[1] - self._machine0[1],
        )

    def cpu_now(self) -> float:
        """CPU seconds this process used while reading."""
        if self._first_at is None:
            return self.cpu
        return self.cpu + (cpu_seconds() - self._cpu0)

    # -- DataLoader workers ---------------------------------------------------------------------

    def payload(self, worker: int) -> dict[str, Any]:
        """This worker's totals since it started, sent with its batches."""
        self.settle()
        return {
            "worker": worker,
            "pid": os.getpid(),
            "batches": self.made,
            "samples": self.made_samples,
            "reads": self.reads.tobytes(),
            "read_wait": self.read_wait,
            "transform": self.transform,
            "handoff": self.handoff,
            "handoffs": self.handoffs,
            "blocked": self.outside,
            "active": self.active_now(),
            "cpu": self.cpu_now(),
            "cores": cores(),
            "threads": self.threads,
            "depth": dict(self.depth),
        }

    def arrived(self, payload: Mapping[str, Any], handoff: float) -> None:
        """A worker's batch arrived in this process with the worker's totals; ``handoff``:
        seconds this process took to receive it."""
        self.workers[(int(payload["worker"]), int(payload["pid"]))] = dict(payload)
        self.handoff += handoff
        self.handoffs += 1


#: A worker's totals that count up (and so are told since a reset by a difference).
KEPT_TOTALS = (
    "batches",
    "samples",
    "read_wait",
    "transform",
    "handoff",
    "handoffs",
    "blocked",
    "active",
    "cpu",
)


def _worker_totals(
    workers: Mapping[tuple[int, int], Mapping[str, Any]],
    baselines: Mapping[tuple[int, int], Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Each worker process's totals since the last reset."""
    out = []
    for key, p in sorted(workers.items()):
        base = baselines.get(key)
        reads = np.frombuffer(p["reads"], dtype=np.int64).copy()
        row = {k: p[k] for k in ("worker", "pid", "threads", "cores")}
        for k in KEPT_TOTALS:
            row[k] = p[k] - (base[k] if base else 0)
        if base:
            reads -= np.frombuffer(base["reads"], dtype=np.int64)
        row["reads"] = reads
        depth = dict(p["depth"])
        if base:
            for d, n in base["depth"].items():
                depth[d] = depth.get(d, 0) - n
        row["depth"] = {d: n for d, n in depth.items() if n > 0}
        out.append(row)
    return out


@dataclass
class StageStats:
    """One stage of reading: seconds of thread time, calls and bytes (decoded bytes for a
    codec, bytes read for ``read``).

    >>> ds = packread.torch.PackDataset("train.h5", batch_size=16, shuffle=False)
    >>> for batch in ds:
    ...     pass
    >>> ds.stats().stages["inflate"].calls  # one gzip chunk per sample
    64
    """

    seconds: float
    calls: int
    bytes: int


@dataclass
class WorkerStats:
    """One DataLoader worker process, since the last reset: sent with its batches.

    >>> ds = packread.torch.PackDataset("train.h5", batch_size=16)
    >>> for batch in ds.timed(DataLoader(ds, batch_size=None, num_workers=2)):
    ...     pass
    >>> sorted(w.batches for w in ds.stats().workers)
    [2, 2]
    """

    worker: int
    pid: int
    batches: int
    samples: int
    #: Batches per second while it read.
    batches_per_s: float
    #: Seconds its finished batches waited for the consumer to take them (the worker is ahead).
    blocked_s: float
    #: Seconds of packread's threads' time (all stages) in this worker.
    read_s: float


@dataclass
class LoaderStats:
    """A snapshot of a dataset's statistics (``ds.stats()``); :meth:`to_dict` for logging,
    :meth:`verdict` for the one-sentence answer, ``str()`` for a table (docs/stats.md).

    >>> ds = packread.torch.PackDataset("train.h5", batch_size=16)
    >>> for batch in ds:
    ...     pass
    >>> stats = ds.stats()
    >>> stats.batches, stats.samples, len(stats.first_batch_s)
    (4, 64, 1)
    """

    #: Batches and samples the consumer took.
    batches: int
    samples: int
    #: Whether the consumer side was measured: the loop iterated the dataset in this process
    #: (``num_workers=0``) or through ``ds.timed(loader)``.
    measured: bool
    #: Seconds blocked in ``next()``, every batch but the first of each iteration (which is
    #: ``first_batch_s``): total, median, 90th and 99th percentiles, most.
    blocked_s: float
    blocked_p50_s: float
    blocked_p90_s: float
    blocked_p99_s: float
    blocked_max_s: float
    #: Seconds to the first batch of each iteration (epoch).
    first_batch_s: list[float]
    #: Seconds blocked over the seconds between batches' arrivals (the step, then the wait),
    #: from each iteration's first batch on (``None``: not measured).
    waiting_fraction: float | None
    #: Seconds from each iteration's first batch to its last, summed (not measured: the
    #: longest a reading process read), and the batches and samples per second in them.
    seconds: float
    batches_per_s: float
    samples_per_s: float
    #: Per stage of reading, summed over this process and its DataLoader workers: thread time.
    stages: dict[str, StageStats]
    #: Object storage: requests, bytes received, seconds waiting for answers (summed over
    #: requests in flight at once); merged reads and the extents they served.
    network_requests: int
    network_bytes: int
    network_s: float
    merged_reads: int
    merged_extents: int
    #: Hit rates of the chunk cache and the data cache (``None``: no lookups).
    chunk_cache_hit_rate: float | None
    data_cache_hit_rate: float | None
    #: Threads per reading process, how many processes read, and the share of their
    #: threads' time spent in packread's stages.
    threads: int
    processes: int
    utilisation: float | None
    #: CPUs this process may use; the share of them the reading processes used while they
    #: read (Python included); the share of the machine's CPUs in use, by any process, while
    #: the consumer iterated (``None``: not measured, or under a second of CPU time).
    cores: int
    cpu_share: float | None
    machine_busy: float | None
    #: Read-ahead batches already read when the next was taken: ``{depth: times}``, and mean.
    queue_depth: dict[int, int]
    queue_depth_mean: float | None
    #: Python around the reads: seconds waiting on reads, in transforms, in hand-offs.
    read_wait_s: float
    transform_s: float
    handoff_s: float
    #: Batches read by packread's core (all datasets of the reading processes count).
    reads: int
    workers: list[WorkerStats] = field(default_factory=list)
    #: With ``stats(all_ranks=True)``: every rank's snapshot as a dict, and the slowest rank.
    ranks: list[dict[str, Any]] | None = None
    slowest_rank: int | None = None

    @property
    def read_s(self) -> float:
        """Thread time in every stage but the network (which overlaps the reads)."""
        return sum(s.seconds for k, s in self.stages.items() if k != "network")

    @property
    def decode_s(self) -> float:
        """Thread time decoding, every codec's."""
        return sum(self.stages[k].seconds for k in DECODERS if k in self.stages)

    def shares(self) -> dict[str, float]:
        """Each stage's share of the reads' thread time, decoders by codec, largest first.

        >>> ds = packread.torch.PackDataset("train.h5", batch_size=16)
        >>> for batch in ds:
        ...     pass
        >>> "inflate" in ds.stats().shares()
        True
        """
        total = self.read_s
        if total <= 0:
            return {}
        shares = {k: s.seconds / total for k, s in self.stages.items() if k != "network"}
        return dict(sorted(shares.items(), key=lambda kv: -kv[1]))

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as plain values (for JSON, a logger, TensorBoard).

        >>> ds = packread.torch.PackDataset("train.h5", batch_size=16)
        >>> ds.stats().to_dict()["batches"]
        0
        """
        return asdict(self)

    def verdict(self) -> str:
        """In one sentence: whether the loop waits on data, and if it does, which stage
        dominates and what to change, with the numbers that say so.

        >>> ds = packread.torch.PackDataset("train.h5", batch_size=16)
        >>> for batch in ds:
        ...     time.sleep(0.02)  # a step far longer than a batch's read
        >>> ds.stats().verdict()  # doctest: +ELLIPSIS
        'not data-bound: waiting ... % of the step (...); loading keeps up'
        """
        return _verdict(self)

    def __str__(self) -> str:
        lines = [f"{self.verdict()}"]
        if self.measured:
            lines.append(
                f"consumer: {self.batches} batches, {self.samples_per_s:,.0f} samples/s, "
                f"waiting {100 * (self.waiting_fraction or 0):.1f} %, blocked "
                f"p50 {1e3 * self.blocked_p50_s:.2f} ms, p99 {1e3 * self.blocked_p99_s:.2f} ms"
            )
        for k, share in self.shares().items():
            s = self.stages[k]
            if s.calls:
                lines.append(f"  {k:<10} {100 * share:5.1f} %  {s.seconds:8.3f} s  {s.calls} calls")
        return "\n".join(lines)


def _rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


def snapshot(rec: Recorder) -> LoaderStats:
    """The statistics ``rec`` holds now, with its workers'."""
    rec.settle()
    waits = np.frombuffer(rec.waits, dtype=np.float64) if len(rec.waits) else np.zeros(0)
    workers = _worker_totals(rec.workers, rec.baselines)
    reads = rec.reads.copy()
    for w in workers:
        reads += w["reads"]
    stages = {
        s: StageStats(
            float(reads[_AT[f"{s}_ns"]] / 1e9),
            int(reads[_AT[f"{s}_calls"]]),
            int(reads[_AT[f"{s}_bytes"]]),
        )
        for s in STAGES
    }
    thread_time = sum(v.seconds for k, v in stages.items() if k != "network")
    capacity = 0.0
    if workers:
        capacity = sum(w["threads"] * w["active"] for w in workers)
        cpu = sum(w["cpu"] for w in workers)
        reading = max((w["active"] for w in workers), default=0.0)
        threads = max(w["threads"] for w in workers)
    else:
        threads = rec.threads
        capacity = threads * rec.active_now()
        cpu, reading = rec.cpu_now(), rec.active_now()
    machine = rec.machine_now()
    ncores = cores()
    depth: dict[int, int] = {}
    for d in [rec.depth, *(w["depth"] for w in workers)]:
        for k, n in d.items():
            depth[int(k)] = depth.get(int(k), 0) + n
    taken = sum(depth.values())

    def hit_rate(looks: str, hits: str) -> float | None:
        n = reads[_AT[looks]]
        return float(reads[_AT[hits]] / n) if n else None

    span = rec.span
    measured = rec.batches > 0
    if measured:
        batches, samples = rec.batches, rec.samples
        steady = (len(waits), rec.steady_samples)
        wall = span
    else:
        if workers:
            batches = sum(w["batches"] for w in workers)
            samples = sum(w["samples"] for w in workers)
            wall = max(w["active"] for w in workers)
        else:
            batches, samples, wall = rec.made, rec.made_samples, rec.active_now()
        steady = (batches, samples)
    stats = LoaderStats(
        batches=batches,
        samples=samples,
        measured=measured,
        blocked_s=float(waits.sum()),
        blocked_p50_s=_percentile(waits, 50),
        blocked_p90_s=_percentile(waits, 90),
        blocked_p99_s=_percentile(waits, 99),
        blocked_max_s=float(waits.max()) if len(waits) else 0.0,
        first_batch_s=list(rec.firsts),
        waiting_fraction=float(waits.sum() / span) if measured and span > 0 else None,
        seconds=wall,
        batches_per_s=_rate(steady[0], wall),
        samples_per_s=_rate(steady[1], wall),
        stages=stages,
        network_requests=stages["network"].calls,
        network_bytes=stages["network"].bytes,
        network_s=float(stages["network"].seconds),
        merged_reads=int(reads[_AT["merged_reads"]]),
        merged_extents=int(reads[_AT["merged_extents"]]),
        chunk_cache_hit_rate=hit_rate("chunk_cache_lookups", "chunk_cache_hits"),
        data_cache_hit_rate=hit_rate("data_cache_lookups", "data_cache_hits"),
        threads=threads,
        processes=len({w["worker"] for w in workers}) or 1,
        utilisation=float(thread_time / capacity) if capacity > 0 else None,
        cores=ncores,
        cpu_share=float(cpu / (ncores * reading)) if reading > 0 else None,
        machine_busy=float(machine[0] / machine[1]) if machine[1] >= MACHINE_TICKS else None,
        queue_depth=dict(sorted(depth.items())),
        queue_depth_mean=(sum(d * n for d, n in depth.items()) / taken) if taken else None,
        read_wait_s=rec.read_wait + sum(w["read_wait"] for w in workers),
        transform_s=rec.transform + sum(w["transform"] for w in workers),
        handoff_s=rec.handoff + sum(w["handoff"] for w in workers),
        reads=int(reads[_AT["batches"]]),
        workers=[
            WorkerStats(
                worker=w["worker"],
                pid=w["pid"],
                batches=w["batches"],
                samples=w["samples"],
                batches_per_s=_rate(w["batches"], w["active"]),
                blocked_s=w["blocked"],
                read_s=float(
                    sum(w["reads"][_AT[f"{s}_ns"]] for s in STAGES if s != "network") / 1e9
                ),
            )
            for w in workers
        ],
    )
    return stats


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.3g} ms"


#: What makes a stage cheaper (decoders: see :func:`_advice`).
_ADVICE = {
    "plan": "use larger batches, or shuffle_mode='chunk' so a batch touches fewer chunks",
    "copy": "copies are memory-bound: read fewer bytes (a smaller dtype or crop)",
    "geometry": "resize less: decode smaller (ImageDecode(draft=True)) or crop before resizing",
    "fill": "read fewer unwritten chunks (they are filled, not read)",
}


def _advice(stage: str, stats: LoaderStats) -> str:
    busy = stats.utilisation
    threads = f"{stats.threads} thread{'s' if stats.threads != 1 else ''}"
    if stats.processes > 1:
        threads += f" x {stats.processes} workers"
    if stage in ("read", "network") and stats.network_requests:
        per = stats.network_s / stats.network_requests
        return (
            f"object storage answers in {_ms(per)} per request ({stats.network_requests} "
            "requests): raise prefetch so more requests are in flight, or cache_dir= to keep "
            "the bytes"
        )
    if stage == "read":
        mb = stats.stages["read"].bytes / max(stats.stages["read"].seconds, 1e-12) / 1e6
        return f"storage reads at {mb:,.0f} MB/s per thread: use faster storage or cache_dir="
    cheaper = _ADVICE.get(stage)
    if cheaper is None and stage in ("jpeg", "png", "webp"):
        cheaper = "decode smaller with ImageDecode(draft=True)"
    elif cheaper is None:
        cheaper = "store the data with a faster codec (lz4, blosc) or uncompressed"
    cpu = stats.machine_busy if stats.machine_busy is not None else stats.cpu_share
    if cpu is not None and cpu >= CPU_BOUND:
        cpus = f"{stats.cores} CPU{'s' if stats.cores != 1 else ''}"
        return (
            f"{cpus} busy {100 * cpu:.0f} %, the machine's limit (more threads or workers "
            f"will not help): {cheaper}"
        )
    if busy is not None and busy >= BUSY:
        return (
            f"{threads} busy {100 * busy:.0f} % and CPUs to spare: add threads "
            f"(num_threads=) or DataLoader workers, or {cheaper}"
        )
    if busy is not None:
        return (
            f"{threads} busy only {100 * busy:.0f} % and CPUs to spare: raise prefetch so "
            f"more batches are read at once, or add DataLoader workers; or {cheaper}"
        )
    return cheaper


def _verdict(stats: LoaderStats) -> str:
    if stats.batches == 0:
        return "no batches yet: iterate the dataset, then ask again"
    shares = stats.shares()
    top = next(iter(shares), None)
    where = "" if top is None else f"{top} is {100 * shares[top]:.0f} % of read time"
    if not stats.measured:
        head = "waiting not measured (DataLoader workers: iterate ds.timed(loader) to measure it)"
        return f"{head}; {where}: {_advice(top, stats)}" if top else head
    w = stats.waiting_fraction
    if w is None:  # one batch per iteration: only start-up was seen
        first = stats.first_batch_s
        return (
            f"only first batches seen ({_ms(sum(first) / len(first))} each): iterate longer "
            "to tell whether the loop waits"
        )
    steady = max(stats.batches - len(stats.first_batch_s), 1)
    per_batch = stats.seconds / steady
    waiting = (
        f"waiting {100 * w:.1f} % of the step ({_ms(stats.blocked_s / steady)} of "
        f"{_ms(per_batch)} per batch)"
    )
    if w < DATA_BOUND:
        return f"not data-bound: {waiting}; loading keeps up"
    taken = sum(stats.queue_depth.values())
    ready = sum(n for d, n in stats.queue_depth.items() if d > 0) / taken if taken else 0.0
    outside = stats.transform_s + stats.handoff_s
    if outside > stats.read_s and outside > 0:
        part = "the transform" if stats.transform_s >= stats.handoff_s else "the worker hand-off"
        took = max(stats.transform_s, stats.handoff_s) / max(stats.batches, 1)
        fix = (
            "move it to the GPU, or to DataLoader workers"
            if part == "the transform"
            else "send fewer, larger batches"
        )
        return (
            f"data-bound: {waiting}; {part} takes {_ms(took)} per batch, more than the reads: {fix}"
        )
    if ready >= 0.9 and stats.blocked_p50_s < 0.25 * per_batch:
        return (
            f"data-bound: {waiting}, though {100 * ready:.0f} % of batches were read ahead; "
            f"the wait is the cost of handing over each batch (median {_ms(stats.blocked_p50_s)}): "
            "use larger batches"
        )
    if top is None:
        return f"data-bound: {waiting}; packread's reads take no measurable time: look outside them"
    return f"data-bound: {waiting}; {where}: {_advice(top, stats)}"


def gather(stats: LoaderStats, gathered: list[dict[str, Any]]) -> LoaderStats:
    """``stats`` with every rank's snapshot (``gathered``, in rank order) and the slowest rank:
    the one that waited longest, else the one reading fewest samples per second."""
    stats.ranks = gathered
    if any(g["measured"] for g in gathered):
        stats.slowest_rank = max(range(len(gathered)), key=lambda r: gathered[r]["blocked_s"])
    else:
        stats.slowest_rank = min(range(len(gathered)), key=lambda r: gathered[r]["samples_per_s"])
    return stats


def timed(rec: Recorder, iterable: Any, rows: Any, trace: Any = None) -> Iterator[Any]:
    """``iterable``'s items, each ``next()`` timed into ``rec`` as the consumer's (``rows``:
    an item's number of samples; ``trace``: a tracer given a span per wait). The dataset's
    own loop, if it runs in this process, then leaves the consumer to this."""
    first = True
    rec.outer = True
    try:
        it = iter(iterable)
        while True:
            rec.asked(first)
            began = now()
            try:
                item = next(it)
            except StopIteration:
                rec.got(-1, first)
                return
            rec.got(rows(item), first)
            if trace is not None:
                trace.span("next (waiting on data)", began, now())
            first = False
            yield item
    finally:
        rec.outer = False
        rec.consumer_end()


def batch_rows(item: Any) -> int:
    """The samples in a batch as packread's datasets yield it (a tensor, a dict of them, a
    :class:`SourceBatch`, a ragged list)."""
    inner = getattr(item, "batch", item)
    if isinstance(inner, Mapping):
        inner = next(iter(inner.values()), None)
    if isinstance(inner, tuple) and inner and hasattr(inner[-1], "shape"):
        # ragged="flat": (values, offsets[, shapes]).
        return max(len(inner[1]) - 1, 0)
    try:
        return len(inner)
    except TypeError:
        return 1
