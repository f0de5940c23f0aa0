"""How much faster training could go if loading were free: :func:`replay` serves a loader's
first batches again from memory, so a loop over it times the training step alone, and
:func:`headspace` times the same step over the loader and over the replay."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .._epoch import check_int
from .._stats import LoaderStats, Recorder, batch_rows, snapshot, timed
from ..errors import InvalidArgumentError
from ._measure import Measured


def _held(batch: Any) -> Any:
    """``batch`` copied into memory of its own (a worker's shared slab, a recycled buffer
    would otherwise be written again)."""
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, dict):
        return {k: _held(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)) and not hasattr(batch, "_fields"):
        return type(batch)(_held(v) for v in batch)
    return batch


def replay(loader: Iterable[Any], batches: int = 16, steps: int | None = None) -> Iterator[Any]:
    """The first ``batches`` batches of ``loader``, read once and held in memory, then given
    out in turn ``steps`` times (default: ``len(loader)``, else ``batches``): a loop over it
    runs at the speed of its step alone, as if loading were free.

    >>> ds = PackDataset("train.h5", batch_size=16)
    >>> len(list(replay(DataLoader(ds, batch_size=None), batches=2, steps=5)))
    5
    """
    check_int("batches", batches, 1)
    if steps is None:
        try:
            steps = len(loader)  # type: ignore[arg-type]
        except TypeError:
            steps = batches
    check_int("steps", steps, 0)
    kept = [_held(b) for b in itertools.islice(iter(loader), batches)]
    if not kept:
        raise InvalidArgumentError("the loader gave no batches to replay")
    for k in range(steps):
        yield kept[k % len(kept)]


@dataclass
class Headspace:
    """One step timed over a loader and over its first batches replayed from memory (see
    :func:`headspace`).

    >>> ds = PackDataset("train.h5", batch_size=16)
    >>> h = headspace(DataLoader(ds, batch_size=None), lambda b: None, steps=3, keep=2)
    >>> h.steps
    3
    """

    #: Steps timed each way.
    steps: int
    #: Seconds per step reading from the loader, and replaying from memory.
    loaded_s: float
    replayed_s: float
    #: How much faster the loop would run if loading were free (``loaded_s / replayed_s``).
    speedup: float
    #: The loaded loop's statistics (its verdict, waits, stages).
    stats: LoaderStats

    def to_dict(self) -> dict[str, Any]:
        """The timings and the statistics as plain values.

        >>> ds = PackDataset("train.h5", batch_size=16)
        >>> h = headspace(DataLoader(ds, batch_size=None), lambda b: None, steps=3, keep=2)
        >>> sorted(h.to_dict())
        ['loaded_s', 'replayed_s', 'speedup', 'stats', 'steps']
        """
        return asdict(self)

    def __str__(self) -> str:
        return (
            f"step with loading {1e3 * self.loaded_s:.3g} ms, from memory "
            f"{1e3 * self.replayed_s:.3g} ms: training could run {self.speedup:.2f}x faster if "
            f"loading were free; {self.stats.verdict()}"
        )


def headspace(
    loader: Iterable[Any],
    step: Callable[[Any], Any],
    *,
    steps: int = 50,
    keep: int = 8,
    sync: Callable[[], Any] | None = None,
) -> Headspace:
    """Times ``step(batch)`` over ``steps`` batches of ``loader`` (after one warm-up batch),
    then over ``keep`` of its batches replayed from memory (:func:`replay`) for as many steps.
    ``sync`` runs after each timed loop (``torch.cuda.synchronize`` for a step that only
    queues GPU work).

    >>> ds = PackDataset("train.h5", batch_size=16)
    >>> step = lambda batch: batch["images"].float().mean()
    >>> h = headspace(DataLoader(ds, batch_size=None), step, steps=3, keep=2)
    >>> h.speedup > 0
    True
    """
    check_int("steps", steps, 1)
    check_int("keep", keep, 1)
    # A loader over one of packread's datasets: its statistics, reads included.
    dataset = getattr(loader, "dataset", loader)
    measured = dataset if isinstance(dataset, Measured) else None
    rec = Recorder() if measured is None else measured._recorder()
    if measured is not None:
        measured.reset_stats()
    batches = timed(rec, _cycle(loader), batch_rows)
    step(next(batches))  # the first batch: start-up, left out of both
    began = time.perf_counter()
    for batch in itertools.islice(batches, steps):
        step(batch)
    if sync is not None:
        sync()
    loaded = (time.perf_counter() - began) / steps
    batches.close()
    # The loaded loop's statistics, before the replay reads through the same dataset.
    stats = snapshot(rec) if measured is None else measured.stats()
    memory = replay(_cycle(loader), batches=keep, steps=steps + 1)
    step(next(memory))
    began = time.perf_counter()
    for batch in memory:
        step(batch)
    if sync is not None:
        sync()
    replayed = (time.perf_counter() - began) / steps
    return Headspace(steps, loaded, replayed, loaded / max(replayed, 1e-12), stats)


def _cycle(loader: Iterable[Any]) -> Iterator[Any]:
    """``loader``'s batches, epoch after epoch (a short dataset is read again)."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise InvalidArgumentError("the loader gave no batches")
