"""How a configuration is timed: random batches read back to back, and
DataLoader passes (:func:`run_epoch`, which the benchmarks and ``make demo`` use too)."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._stats import Recorder, timed


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


def _epoch_run(make: Callable[[], Any], batches: int) -> Callable[[], float]:
    def run() -> float:
        epoch = run_epoch(make(), limit=batches + 1)
        return epoch.steady_rate

    return run


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
    # Timed as a dataset's consumer is (packread._stats): ds.stats() and this agree.
    rec = Recorder()
    samples = 0
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    thread0 = time.thread_time()
    start = time.perf_counter()
    it = timed(rec, loader, _batch_size)
    for batches, batch in enumerate(it, 1):
        samples += _batch_size(batch)
        if on_batch is not None:
            on_batch(batch)
        if progress is not None:
            progress(samples)
        if step:
            time.sleep(step)
        if limit is not None and batches >= limit:
            it.close()
            break
    first_wait = rec.firsts[0] if rec.firsts else 0.0
    first_samples = rec.samples - rec.steady_samples
    waiting = first_wait + sum(rec.waits)
    seconds = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    main_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    loop_cpu = time.thread_time() - thread0
    return Epoch(samples, seconds, main_cpu, loop_cpu, waiting, first_wait, first_samples)
