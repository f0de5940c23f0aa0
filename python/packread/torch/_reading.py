"""Reading batches for the datasets of :mod:`packread.torch`: the reader each process opens,
batches started (into shared memory in DataLoader workers) and numpy arrays made tensors."""

from __future__ import annotations

import collections
import contextlib
import math
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Union

import numpy as np
import torch

from .. import _packread
from .._common import BatchReader
from .._epoch import Cursor, check_int, first_batch
from .._open import check_options, resolve
from .._reader import ArrayReader
from .._stats import now
from ..errors import InvalidArgumentError
from ._buffers import (
    Claim,
    Device,
    Recycled,
    Specs,
    WorkerSlabs,
    cuda_available,
    torch_ready,
    want_pinned,
)
from ._measure import Meter, WithStats


def open_here(
    source: Any, options: dict[str, Any], where: str, own: Iterable[str] = ()
) -> BatchReader:
    """The reader of ``source`` with ``options``, as :func:`packread.open` gives it; an option
    the format's reader does not take is blamed on ``where`` (the dataset, whose own
    parameters ``own`` are suggested with the reader's for a misspelt name). ``format=`` names
    the format, as for :func:`packread.open`."""
    if isinstance(source, BatchReader) and not isinstance(source, (str, os.PathLike)):
        if options:
            raise TypeError(
                f"{where}() got reader options {sorted(options)}, but source is a reader already"
            )
        return source
    options = dict(options)
    fmt = resolve(source, options.pop("format", None), options)
    check_options(fmt, options, where, own)
    return fmt.reader(source, **options)  # type: ignore[no-any-return]


class _ReaderSlot:
    """A reader opened on first use in each process: the one given (or opened) in the process
    that made the dataset, a fresh one (from the same arguments) in every other process."""

    def __init__(
        self, source: Any, options: dict[str, Any], where: str, own: Iterable[str] = ()
    ) -> None:
        reader = open_here(source, dict(options), where, own)
        # Opening an object in object storage started packread's I/O threads; the process
        # that made the dataset usually forks DataLoader workers next, and then keeps none.
        _packread.release_runtime()
        self._reader: BatchReader | None = reader
        self._pid = os.getpid()
        # Readers of packread pickle as their arguments; another reader travels as itself.
        self._recipe: Any = reader.__reduce__() if isinstance(reader, ArrayReader) else reader

    def get(self) -> BatchReader:
        if self._reader is None or self._pid != os.getpid():
            if isinstance(self._recipe, tuple):
                build, args = self._recipe[:2]
                self._reader = build(*args)
            else:
                self._reader = self._recipe
            self._pid = os.getpid()
        return self._reader

    def __getstate__(self) -> dict[str, Any]:
        return {"_reader": None, "_pid": -1, "_recipe": self._recipe}


def varies_by_epoch(reader: Any) -> bool:
    """Whether ``reader`` declares that its batches differ from epoch to epoch (random image
    crops): it is then given each epoch."""
    return bool(getattr(reader, "varies_by_epoch", False))


def _torch_ready(arr: np.ndarray) -> bool:
    """Whether ``torch.from_numpy`` takes ``arr`` as it is (a plain number type, native order)."""
    return torch_ready(arr.dtype)


def to_torch(value: Any) -> Any:
    """numpy arrays to tensors without a copy (``torch.from_numpy``), recursively through dicts,
    lists and tuples. Arrays of a non-native byte order are converted (one copy); arrays torch
    cannot hold (strings, records, datetimes) stay numpy arrays."""
    if isinstance(value, np.ndarray):
        if _torch_ready(value):
            return torch.from_numpy(value)
        if value.dtype.kind in "biufc" and value.dtype != np.longdouble:
            return torch.from_numpy(value.astype(value.dtype.newbyteorder("=")))
        return value
    if isinstance(value, dict):
        return {k: to_torch(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(to_torch(v) for v in value)
    return value


def _shared_output(rows: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
    """``(tensor, array)``: an empty batch in a new shared-memory block, the tensor and a numpy
    view of it, or ``None`` where torch cannot hold the dtype. A worker's batch read straight
    into shared memory reaches the main process without the copy the loader would make (the
    path when a worker's slabs are all held, and for readers that are not packread's)."""
    if not torch_ready(dtype):
        return None
    tdtype = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    nbytes = rows * math.prod(shape) * dtype.itemsize
    storage = torch.UntypedStorage._new_shared(nbytes)
    # torch's stubs want a stride too; without one the tensor is contiguous, as wanted.
    tensor = torch.empty(0, dtype=tdtype).set_(storage, 0, (rows, *shape))  # type: ignore[call-overload]
    return tensor, tensor.numpy()


class _Done:
    """A batch already read (for readers without ``batch_async``)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> Any:
        return self._value

    def done(self) -> bool:
        return True


#: Where batches are written: new arrays (``None``), recycled buffers in this process, a
#: worker's shared slabs, or (``"shared"``) a new shared-memory block per batch.
Sink = Union[None, Recycled, WorkerSlabs, str]


def _specs(reader: BatchReader, rows: int) -> tuple[Specs, list[str] | None] | None:
    """The arrays a batch of ``rows`` is read into, and their keys (``None``: one array), or
    ``None`` where they cannot be made ahead (sizes known only once read, dtypes torch cannot
    hold)."""
    shape: Any = reader.shape
    dtype: Any = reader.dtype
    if isinstance(dtype, dict):
        keys: list[str] | None = list(dtype)
        specs: Specs = [((rows, *shape[k]), np.dtype(dtype[k])) for k in keys]  # type: ignore[union-attr]
    else:
        keys = None
        specs = [((rows, *shape), np.dtype(dtype))]
    if any(None in s or not torch_ready(d) for s, d in specs):
        return None
    return specs, keys


class Started:
    """A batch being read: the read's handle and where it is being written."""

    __slots__ = ("claim", "handle", "keys", "out", "rows", "specs", "tensors", "transform")

    def __init__(self, handle: Any, rows: int = 0) -> None:
        self.handle = handle
        #: Samples in the batch.
        self.rows = rows
        #: Seconds the transform took once read.
        self.transform = 0.0
        self.claim: Claim | None = None
        #: The arrays the batch is read into (``None``: the reader makes them).
        self.out: Any = None
        self.specs: Specs = []
        self.keys: list[str] | None = None
        #: The batch as tensors, when it was read into a new shared block.
        self.tensors: Any = None

    def done(self) -> bool:
        return bool(self.handle.done())

    def abandon(self) -> None:
        """Waits for the read to end and gives its slab back (a batch never sent)."""
        if self.claim is None:
            return
        with contextlib.suppress(Exception):  # the batch is dropped either way
            self.handle.result()
        self.claim.slab.shared.unclaim()
        self.claim = None


def claim_out(reader: BatchReader, rows: int, sink: Sink) -> Started:
    """A batch of ``rows`` about to be read from ``reader`` (or from readers of the same
    arrays): where in ``sink``'s memory it goes (:attr:`Started.out`; ``None`` where it cannot
    be made ahead), not yet started."""
    made = _specs(reader, rows) if sink is not None else None
    started = Started(None, rows)
    if made is None:
        return started
    specs, keys = made
    arrays: list[np.ndarray] | None = None
    tensors: Any = None
    if isinstance(sink, WorkerSlabs):
        started.claim = sink.claim(specs)
        arrays = started.claim.arrays if started.claim is not None else None
        if started.claim is None:
            sink = "shared"
    elif isinstance(sink, Recycled):
        arrays = sink.arrays(specs)
    if sink == "shared":
        shared = [_shared_output(s[0], s[1:], d) for (s, d) in specs]
        tensors = [t for t, _ in shared]
        arrays = [a for _, a in shared]
    if arrays is not None:
        started.out = arrays[0] if keys is None else dict(zip(keys, arrays, strict=True))
        if tensors is not None:
            started.tensors = tensors[0] if keys is None else dict(zip(keys, tensors, strict=True))
    started.specs, started.keys = made
    return started


def begin(reader: BatchReader, idx: np.ndarray, out: Any = None, epoch: int = 0) -> Any:
    """Starts reading ``idx`` (in ``epoch``, for a reader whose batches vary by epoch) into
    ``out`` (or new arrays): a handle with ``done()`` and ``result()``."""
    kwargs: dict[str, Any] = {} if out is None else {"out": out}
    if varies_by_epoch(reader):
        kwargs["epoch"] = epoch
    start = getattr(reader, "batch_async", None)
    if start is not None:
        return start(idx, **kwargs)
    return _Done(reader.batch(idx, **kwargs))


def start_batch(reader: BatchReader, idx: np.ndarray, sink: Sink, epoch: int = 0) -> Started:
    """Starts reading ``idx`` (in ``epoch``, for a reader whose batches vary by epoch) into
    ``sink``'s memory."""
    started = claim_out(reader, len(idx), sink)
    started.handle = begin(reader, idx, started.out, epoch)
    return started


def finish_batch(started: Started, sink: Sink, transform: Callable[[Any], Any] | None) -> Any:
    """The item a started batch becomes once read: a worker's ticket for its slab, or tensors
    (given to ``transform`` first, as a collate would give them)."""
    try:
        batch = started.handle.result()
    except BaseException:
        if started.claim is not None:
            started.claim.slab.shared.unclaim()
            started.claim = None
        raise
    claim = started.claim
    if claim is not None and isinstance(sink, WorkerSlabs):
        started.claim = None
        return sink.ticket(claim, started.specs, started.keys, None)
    if started.tensors is not None:
        return started.tensors
    tensors = to_torch(batch)
    if transform is None:
        return tensors
    began = now()
    made = transform(tensors)
    started.transform = now() - began
    return made


#: Seconds between two sends of a DataLoader worker's totals with its batches (each costs the
#: worker tens of microseconds); its first and last batches of an iteration always carry them.
SEND_EVERY = 0.05


def run_batches(
    todo: Iterator[tuple[int, Callable[[], Started]]],
    finish: Callable[[Started], Any],
    deliver: Callable[[int, Any], Any],
    prefetch: int,
    device: Device | None,
    meter: Meter,
) -> Iterator[Any]:
    """The batches of ``todo`` (``(position, start)``: ``start()`` starts reading the batch),
    ``prefetch`` read ahead, each made an item by ``finish`` once read, copied to ``device``
    (the next batch's copy started before this one is yielded) and given to ``deliver``
    (``(position, item)``: the item yielded) as it is yielded. Batches read ahead and never
    yielded are abandoned (a worker's slabs go back to it).

    ``meter`` records what the loop did: in the main process, the consumer's waits (the time
    from being asked for a batch to yielding it); everywhere, each batch made, how many read
    ahead were ready, and the reads; in a worker, its totals go with each batch (see
    :class:`WithStats`)."""
    in_flight: collections.deque[tuple[int, Started]] = collections.deque()
    copying: set[int] = set()  # batches whose copy to the device has started
    rec, trace = meter.rec, meter.trace
    consumer = meter.worker is None

    def submit() -> None:
        for j, start in todo:
            in_flight.append((j, start()))
            return

    def copy_ahead() -> None:
        """Starts the next batch's copy to the device, if it has been read already."""
        assert device is not None
        if in_flight and in_flight[0][0] not in copying and in_flight[0][1].done():
            k, ahead = in_flight[0]
            device.start(finish(ahead))
            copying.add(k)

    on = meter.on
    if on:
        rec.mark()
        rec.begin()
    first = True
    sent = 0.0  # when a worker last sent its totals
    try:
        for _ in range(max(prefetch, 1)):
            submit()
        while in_flight:
            if on:
                asked = now()
                ready = sum(1 for _, s in in_flight if s.handle.done())
            j, started = in_flight.popleft()
            if j in copying:
                copying.discard(j)
                item = None
            else:
                item = finish(started)
            if on:
                waited = now()
                if trace is not None:
                    trace.span("wait for read", asked, waited, {"batch": j})
            if prefetch:
                submit()
            if device is not None:
                if item is not None:
                    device.start(item)
                copy_ahead()
                item = device.finish()
            item = deliver(j, item)
            if on:
                measure = consumer and not rec.outer
                t = rec.took(asked, waited, started, ready, first, measure)
                # A worker's totals go with its first batch, its last (nothing is read
                # ahead of it) and at most every SEND_EVERY seconds between.
                if meter.worker is not None and (
                    first or prefetch == 0 or not in_flight or t >= sent + SEND_EVERY
                ):
                    item = WithStats(item, meter.token, rec.payload(meter.worker))
                    sent = t
                if trace is not None:
                    trace.span("batch", asked, now(), {"batch": j, "rows": started.rows})
                    # The read-ahead queue over time: batches already read when one was taken.
                    trace.counter("read ahead", asked, ready)
                    trace.batch_done()
            first = False
            yield item
            del item
            if not prefetch:
                submit()
    finally:
        for _, started in in_flight:
            started.abandon()
        if on:
            rec.end_iteration()
            if consumer and not rec.outer:
                rec.consumer_end()
        if trace is not None:
            if consumer and not rec.outer:
                trace.merge()
            else:
                trace.flush()


def check_ranks(rank: int | None, world_size: int | None) -> tuple[int, int] | None:
    """``(rank, world_size)`` as given to a dataset (``None``: neither given), checked."""
    if (rank is None) != (world_size is None):
        raise InvalidArgumentError("give both rank and world_size, or neither")
    if world_size is None:
        return None
    check_int("world_size", world_size, 1)
    if not 0 <= check_int("rank", rank, 0) < world_size:
        raise InvalidArgumentError(f"rank {rank} is not in range(world_size={world_size})")
    return int(rank), int(world_size)  # type: ignore[arg-type]


def find_ranks(explicit: tuple[int, int] | None) -> tuple[int, int]:
    """``(rank, world_size)``: ``torch.distributed``'s when it is initialised (which must agree
    with ``explicit``, the dataset's arguments), else ``explicit``, else one rank."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        found = (dist.get_rank(), dist.get_world_size())
        if explicit is not None and explicit != found:
            raise InvalidArgumentError(
                f"rank/world_size {explicit} disagree with torch.distributed's {found}"
            )
        return found
    return explicit if explicit is not None else (0, 1)


def begin_iteration(
    clock: Any, resume: dict[str, Any] | None, batches: Any
) -> tuple[dict[str, Any], Cursor]:
    """The generation an iteration starts in this process (a DataLoader worker, or the main
    process) claims from the dataset's epoch ``clock`` (see ``_EpochClock.claim``), and its
    cursor: the first batch it yields, every ``num_workers``-th after. ``resume``: the worker
    state this copy of the dataset was given (``StatefulDataLoader``), if any."""
    info = torch.utils.data.get_worker_info()
    if info is None:
        worker, workers, token = 0, 1, None
    else:
        worker, workers, token = info.id, info.num_workers, info.seed - info.id
    saved = None if resume is None else int(resume["epoch"])
    gen = clock.claim(token, worker, workers, saved, batches)
    if resume is not None and "next_batch" in resume:
        first = int(resume["next_batch"])
    else:
        first = first_batch(int(gen["start"]), worker)
    return gen, Cursor(int(gen["epoch"]), first, workers, worker)


def make_sink(
    info: Any, transform: Any, prefetch: int, pin_memory: bool, device: str | None
) -> Sink:
    """Where a process writes a dataset's batches: a DataLoader worker's shared slabs (which
    the main process maps), or recycled buffers here (page-locked when asked), ``prefetch``
    being the batches read ahead."""
    pin = pin_memory or device is not None
    if info is not None and transform is None:
        return WorkerSlabs(prefetch + 6, info.num_workers, pin, device)
    return Recycled(prefetch + 2, pinned=info is None and want_pinned(pin))


def worker_state(state: dict[str, Any], where: str) -> bool:
    """Whether ``state`` is one DataLoader worker's (saved inside it, as ``StatefulDataLoader``
    does), which only that worker, of as many, may load; an error if it cannot be loaded
    here. ``where`` names the dataset."""
    if "worker" not in state:
        return False
    info = torch.utils.data.get_worker_info()
    if info is None:
        raise InvalidArgumentError(
            f"this {where} state belongs to one DataLoader worker (it was saved inside a "
            "worker, as StatefulDataLoader does); load it with the StatefulDataLoader's "
            "load_state_dict"
        )
    if (state["worker"], state["num_workers"]) != (info.id, info.num_workers):
        raise InvalidArgumentError(
            f"state of worker {state['worker']} of {state['num_workers']} loaded into "
            f"worker {info.id} of {info.num_workers}: resume with the same num_workers"
        )
    return True


def check_device(device: str | None) -> str | None:
    """``device`` (a CUDA device for batches to be copied to), checked."""
    if device is None:
        return None
    name = str(device)
    if not name.startswith("cuda"):
        raise InvalidArgumentError(f"device must be a CUDA device, not {device!r}")
    if not cuda_available():
        raise InvalidArgumentError(f"device={device!r}, but torch sees no CUDA device")
    return name
