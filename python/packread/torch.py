"""PyTorch datasets over packread readers.

:class:`PackDataset` is an ``IterableDataset`` yielding whole batches: sharded by ``DataLoader``
worker and distributed rank, shuffled deterministically per epoch, prefetched on packread's
thread pool, and resumable mid-epoch. :class:`PackMapDataset` is the map-style counterpart, for
code that owns its sampling (``__getitems__`` reads a whole batch at once).

Both read through the :class:`packread.BatchReader` protocol (length, per-sample shape and
dtype, ``batch(idx, out=)``), so any reader works, packread's or not.

How an epoch is cut (the rule every rank and worker follows):

1. One permutation of the ``N`` samples from ``(seed, epoch)`` (identity with
   ``shuffle=False`` or ``shuffle_mode="none"``), identical on every rank.
2. Ranks: with ``drop_last=False`` each of the ``W`` ranks gets ``ceil(N / W)`` samples, the
   permutation padded by repeating it from its start (as ``DistributedSampler`` pads); with
   ``drop_last=True`` each gets ``floor(N / (W * B)) * B``, the rest of the permutation
   dropped. Rank ``r`` takes the ``r``-th contiguous block.
3. Batches: the rank's block cut into batches of ``B`` in order (the last one shorter unless
   ``drop_last``). Every rank has the same number of batches, ``len(dataset)``, so DDP never
   waits on a rank that has run out.
4. Workers: with ``K`` DataLoader workers, worker ``k`` reads batches ``k, k + K, k + 2K...``.
   The DataLoader hands them out in that same round-robin order, so the loader yields batches
   ``0, 1, 2...`` of the rank's epoch whatever ``K`` is; a resumed epoch starts at any batch.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import math
import os
import tempfile
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from . import _packread
from ._common import BatchReader
from ._hdf5 import HDF5Reader
from ._npy import NpyReader
from ._open import Source, open_reader
from ._zip import NpzReader, ZipReader
from .errors import InvalidArgumentError, PackreadTypeError

__all__ = ["PackDataset", "PackMapDataset", "open_reader"]

SHUFFLE_MODES = ("sample", "chunk", "none")
_STATE_FORMAT = "packread.PackDataset/1"


class _ReaderSlot:
    """A reader opened on first use in each process: the one given (or opened) in the process
    that made the dataset, a fresh one (from the same arguments) in every other process."""

    def __init__(self, source: Source, datasets: Any, options: dict[str, Any]) -> None:
        reader = open_reader(source, datasets, **dict(options))
        self._reader: BatchReader | None = reader
        self._pid = os.getpid()
        # Readers of packread pickle as their arguments; another reader travels as itself.
        self._recipe: Any = reader.__reduce__() if _is_packread(reader) else reader

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


def _is_packread(reader: Any) -> bool:
    return isinstance(reader, (HDF5Reader, NpyReader, NpzReader, ZipReader))


def _torch_ready(arr: np.ndarray) -> bool:
    """Whether ``torch.from_numpy`` takes ``arr`` as it is (a plain number type, native order)."""
    return arr.dtype.kind in "biufc" and arr.dtype.isnative and arr.dtype != np.longdouble


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
    """``(tensor, array)``: an empty batch in shared memory, the tensor and a numpy view of it,
    or ``None`` where torch cannot hold the dtype. In a DataLoader worker, a batch read straight
    into shared memory reaches the main process without the copy the loader would make."""
    probe = np.empty(0, dtype=dtype)
    if not _torch_ready(probe):
        return None
    tdtype = torch.from_numpy(probe).dtype
    nbytes = rows * math.prod(shape) * dtype.itemsize
    storage = torch.UntypedStorage._new_shared(nbytes)
    tensor = torch.empty(0, dtype=tdtype).set_(storage, 0, (rows, *shape))
    return tensor, tensor.numpy()


class _Done:
    """A batch already read (for readers without ``batch_async``)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> Any:
        return self._value


def _start_batch(reader: BatchReader, idx: np.ndarray, to_shared: bool) -> tuple[Any, Any]:
    """Starts reading ``idx``; returns ``(handle, tensors)``, where ``tensors`` replaces the
    result when the batch was read into shared memory (``None`` otherwise)."""
    out: Any = None
    tensors: Any = None
    if to_shared:
        shape, dtype = reader.shape, reader.dtype
        if isinstance(dtype, dict):
            made = {k: _shared_output(len(idx), shape[k], dtype[k]) for k in dtype}  # type: ignore[index]
            if all(m is not None for m in made.values()):
                out = {k: m[1] for k, m in made.items()}  # type: ignore[index]
                tensors = {k: m[0] for k, m in made.items()}  # type: ignore[index]
        else:
            made = _shared_output(len(idx), shape, dtype)  # type: ignore[arg-type]
            if made is not None:
                tensors, out = made
    start = getattr(reader, "batch_async", None)
    if start is not None:
        handle: Any = start(idx, out=out) if out is not None else start(idx)
    else:
        handle = _Done(reader.batch(idx, out=out) if out is not None else reader.batch(idx))
    return handle, tensors


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise PackreadTypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < low:
        raise InvalidArgumentError(f"{name} must be >= {low}, not {value}")
    return int(value)


# --------------------------------------------------------------------------------------------
# The epoch clock


def _clock_dir() -> str:
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return tempfile.gettempdir()


def _remove_clock(path: str, owner: int) -> None:
    # Copies of the dataset in forked workers share this finalizer; only the owner removes.
    if os.getpid() == owner:
        with contextlib.suppress(OSError):
            os.unlink(path)


class _EpochClock:
    """Which epoch each iteration of a dataset is, agreed between the process that made the
    dataset and its DataLoader workers (which hold copies, and are new processes each epoch
    unless ``persistent_workers``): a small record in a file, updated under ``flock``.

    Each iteration starts a *generation*; the first of the K workers of a DataLoader iteration
    to start decides its epoch (a pending ``set_epoch``/``load_state_dict``, else the previous
    generation's epoch + 1), the others join it. Workers of one DataLoader iteration share the
    loader's base seed; a worker id seen twice means a new iteration.
    """

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="packread-epochs-", dir=_clock_dir())
        os.write(fd, b"{}")
        os.close(fd)
        weakref.finalize(self, _remove_clock, self.path, os.getpid())

    @classmethod
    def _attach(cls, path: str) -> _EpochClock:
        clock = cls.__new__(cls)
        clock.path = path
        return clock

    def __reduce__(self) -> tuple[Any, ...]:
        return (_EpochClock._attach, (self.path,))

    def _update(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 1 << 20, 0)
            record = json.loads(raw) if raw else {}
            result = change(record)
            data = json.dumps(record).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            return result
        finally:
            os.close(fd)

    def peek(self) -> dict[str, Any]:
        return self._update(lambda record: json.loads(json.dumps(record)))

    def set_pending(self, epoch: int, start: int) -> None:
        def change(record: dict[str, Any]) -> None:
            record["pending"] = {"epoch": epoch, "start": start}

        self._update(change)

    def claim(
        self,
        token: int | None,
        worker: int,
        workers: int,
        resume_epoch: int | None,
        batches: int,
    ) -> tuple[int, int, int]:
        """``(epoch, first batch, generation id)`` of the iteration this worker starts.

        ``resume_epoch``: this worker's copy was given a worker state (StatefulDataLoader).
        ``batches``: batches per epoch (a pending position at the end means the next epoch).
        """
        pid = os.getpid()

        def change(record: dict[str, Any]) -> tuple[int, int, int]:
            gen = record.get("gen")
            pending = record.pop("pending", None)
            if (
                gen is not None
                and pending is None
                and token is not None
                and gen["token"] == token
                and gen["workers"] == workers
                and worker not in gen["claimed"]
            ):
                gen["claimed"].append(worker)
                gen["pids"].append(pid)
                if resume_epoch is not None:
                    gen["used"] = True
                return gen["epoch"], gen["start"], gen["id"]
            used = False
            if resume_epoch is not None:
                epoch, start, used = resume_epoch, 0, True
            elif pending is not None:
                epoch, start = pending["epoch"], pending["start"]
                if start >= batches:  # saved at the end of an epoch: the next one
                    epoch, start = epoch + 1, 0
            elif gen is not None and not gen["used"]:
                # The last iteration never yielded a batch: it did not use up its epoch.
                epoch, start = gen["epoch"], gen["start"]
            elif gen is not None:
                epoch, start = gen["epoch"] + 1, 0
            else:
                epoch, start = 0, 0
            record["gen"] = {
                "id": (gen["id"] + 1) if gen is not None else 0,
                "epoch": epoch,
                "start": start,
                "token": token,
                "workers": workers,
                "claimed": [worker],
                "pids": [pid],
                "used": used,
            }
            return epoch, start, record["gen"]["id"]

        return self._update(change)

    def mark_used(self, gen_id: int) -> None:
        """Records that iteration ``gen_id`` yielded a batch (so the next one is a new epoch)."""

        def change(record: dict[str, Any]) -> None:
            gen = record.get("gen")
            if gen is not None and gen["id"] == gen_id:
                gen["used"] = True

        self._update(change)


# --------------------------------------------------------------------------------------------
# PackDataset


class _Cursor:
    """Where one iteration is: its epoch and the next batch it will yield (it yields every
    ``step``-th batch from there)."""

    __slots__ = ("epoch", "next", "step", "worker")

    def __init__(self, epoch: int, first: int, step: int, worker: int) -> None:
        self.epoch, self.next, self.step, self.worker = epoch, first, step, worker


class PackDataset(IterableDataset):
    """An ``IterableDataset`` of whole batches, read by packread.

    ``source`` is a path (``.h5``/``.hdf5``, ``.zip``, a folder, glob or list of ``.npy`` or of
    ``.npz`` files) or a reader. Use it with ``DataLoader(ds, batch_size=None, ...)``: each item
    is a batch of ``batch_size`` samples, a tensor (or a dict of tensors for readers of several
    arrays) made with ``torch.from_numpy``, without a copy.

    - ``shuffle``/``seed``/``shuffle_mode``: one permutation per ``(seed, epoch)``, identical on
      every rank. ``"sample"`` is uniform; ``"chunk"`` shuffles whole chunks (HDF5 chunks
      holding several samples), then the samples within windows of ``chunk_window`` chunks
      (default: as many as the reader's chunk cache holds), so each chunk is decoded once per
      epoch (per worker process); ``"none"`` keeps file order.
    - ``set_epoch(e)`` picks the epoch; without it each new iteration is the next epoch.
    - ``rank``/``world_size``: taken from ``torch.distributed`` when it is initialised, else
      from these arguments, else one rank. See the module docstring for how an epoch is cut;
      ``len(ds)`` is the number of batches this rank yields per epoch.
    - ``prefetch``: batches being read ahead (with ``batch_async``, on packread's threads) in
      the process that iterates, the main process with ``num_workers=0`` or each worker. Each
      batch is a new array, never overwritten: memory is about ``prefetch + 2`` batches per
      process.
    - ``transform(batch)`` is applied to each numpy batch (array or dict) in the process that
      reads it, before the conversion to tensors.
    - ``state_dict()``/``load_state_dict()`` save and restore ``(seed, epoch, position)``; a new
      loader then yields exactly the batches of that epoch not yet seen. With worker processes
      and a plain ``DataLoader``, pass the number of batches your loop consumed this epoch:
      ``ds.state_dict(batches_seen=step)``; torchdata's ``StatefulDataLoader`` needs nothing.
    - ``**reader_options`` go to the reader (``num_threads``, ``cache_bytes``, ``dtype``,
      ``shape``...). The reader opens here and again, lazily, in each worker process.

    >>> ds = PackDataset("train.h5", batch_size=16, seed=0)
    >>> len(ds)
    4
    >>> batch = next(iter(DataLoader(ds, batch_size=None)))
    >>> batch["images"].shape
    torch.Size([16, 3, 32, 32])
    """

    def __init__(
        self,
        source: Source,
        batch_size: int,
        *,
        datasets: Any = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        shuffle_mode: str = "sample",
        prefetch: int = 2,
        transform: Callable[[Any], Any] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        chunk_window: int | None = None,
        **reader_options: Any,
    ) -> None:
        super().__init__()
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.prefetch = _check_int("prefetch", prefetch, 0)
        if shuffle_mode not in SHUFFLE_MODES:
            raise InvalidArgumentError(
                f"shuffle_mode must be one of {SHUFFLE_MODES}, not {shuffle_mode!r}"
            )
        if transform is not None and not callable(transform):
            raise PackreadTypeError("transform must be callable")
        if (rank is None) != (world_size is None):
            raise InvalidArgumentError("give both rank and world_size, or neither")
        if world_size is not None:
            _check_int("world_size", world_size, 1)
            if not 0 <= _check_int("rank", rank, 0) < world_size:
                raise InvalidArgumentError(f"rank {rank} is not in range(world_size={world_size})")
        self.shuffle = bool(shuffle)
        self.seed = _check_int("seed", seed, -(2**63)) & (2**64 - 1)
        self.drop_last = bool(drop_last)
        self.shuffle_mode = shuffle_mode if self.shuffle else "none"
        self.transform = transform
        self._explicit_rank = None if rank is None else (int(rank), int(world_size))  # type: ignore[arg-type]
        self._slot = _ReaderSlot(source, datasets, reader_options)
        reader = self._slot.get()
        self.num_samples = len(reader)
        self.samples_per_chunk = max(int(getattr(reader, "samples_per_chunk", 1)), 1)
        self.chunk_window = (
            _check_int("chunk_window", chunk_window, 1)
            if chunk_window is not None
            else _default_window(reader, self.samples_per_chunk)
        )
        self._ranks: tuple[int, int] | None = None
        self._sharding()
        self._clock = _EpochClock()
        self._cursor: _Cursor | None = None
        self._resume: dict[str, Any] | None = None

    # -- sharding and the epoch's batches ----------------------------------------------------

    def _sharding(self) -> tuple[int, int]:
        """``(rank, world_size)``: looked up in the main process (and in a forked worker, which
        inherits the process group); a spawned worker keeps what the main process found."""
        dist = torch.distributed
        initialised = dist.is_available() and dist.is_initialized()
        if self._ranks is None or initialised or get_worker_info() is None:
            self._ranks = self._find_ranks()
        return self._ranks

    def _find_ranks(self) -> tuple[int, int]:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            found = (dist.get_rank(), dist.get_world_size())
            if self._explicit_rank is not None and self._explicit_rank != found:
                raise InvalidArgumentError(
                    f"rank/world_size {self._explicit_rank} disagree with torch.distributed's "
                    f"{found}"
                )
            return found
        if self._explicit_rank is not None:
            return self._explicit_rank
        return (0, 1)

    def _per_rank(self) -> int:
        _, world = self._sharding()
        n, b = self.num_samples, self.batch_size
        return (n // (world * b)) * b if self.drop_last else -(-n // world)

    def __len__(self) -> int:
        """Batches this rank yields per epoch."""
        per_rank = self._per_rank()
        return per_rank // self.batch_size if self.drop_last else -(-per_rank // self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """The permutation of the samples for ``epoch`` (the same on every rank).

        >>> ds = PackDataset("train.h5", 16, seed=0)
        >>> sorted(ds.order(3).tolist()) == list(range(64))
        True
        """
        n = self.num_samples
        if self.shuffle_mode == "none":
            return np.arange(n, dtype=np.int64)
        chunk = self.samples_per_chunk if self.shuffle_mode == "chunk" else 1
        return _packread.epoch_order(n, self.seed, epoch & (2**64 - 1), chunk, self.chunk_window)

    def rank_indices(self, epoch: int) -> np.ndarray:
        """The samples this rank reads in ``epoch``, in order (padded or cut as the module
        docstring says).

        >>> PackDataset("train.h5", 16, rank=1, world_size=2).rank_indices(0).shape
        (32,)
        """
        rank, world = self._sharding()
        per_rank = self._per_rank()
        order = self.order(epoch)
        total = per_rank * world
        order = order[:total] if total <= len(order) else np.resize(order, total)
        return order[rank * per_rank : (rank + 1) * per_rank]

    def _batches(self, indices: np.ndarray, positions: range) -> Iterator[tuple[int, np.ndarray]]:
        b = self.batch_size
        for j in positions:
            yield j, indices[j * b : (j + 1) * b]

    # -- epochs and state ---------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads (it orders the samples with the seed).

        >>> ds = PackDataset("train.h5", 16)
        >>> ds.set_epoch(5)
        >>> ds.state_dict()["epoch"]
        5
        """
        self._clock.set_pending(_check_int("epoch", epoch, 0), 0)

    def _state(self, epoch: int, position: int) -> dict[str, Any]:
        chunked = self.shuffle_mode == "chunk"
        return {
            "format": _STATE_FORMAT,
            "seed": self.seed,
            "epoch": epoch,
            "batches_seen": position,
            "batch_size": self.batch_size,
            "num_samples": self.num_samples,
            "world_size": self._sharding()[1],
            "drop_last": self.drop_last,
            "shuffle_mode": self.shuffle_mode,
            # Only chunk mode's order depends on the chunking.
            "samples_per_chunk": self.samples_per_chunk if chunked else None,
            "chunk_window": self.chunk_window if chunked else None,
        }

    def state_dict(self, batches_seen: int | None = None) -> dict[str, Any]:
        """``(seed, epoch, position)`` and the settings the order depends on.

        In the main process the position is the number of batches of the current epoch already
        consumed: counted here when the epoch is read in this process (``num_workers=0``), else
        ``batches_seen`` (your loop's step within the epoch). In a DataLoader worker (as
        torchdata's ``StatefulDataLoader`` asks), the worker's own position.

        >>> ds = PackDataset("train.h5", 16, seed=7)
        >>> it = iter(ds)
        >>> _ = next(it)
        >>> state = ds.state_dict()
        >>> state["seed"], state["epoch"], state["batches_seen"]
        (7, 0, 1)
        """
        info = get_worker_info()
        cursor = self._cursor
        if info is not None:
            if cursor is None:
                epoch = self._resume["epoch"] if self._resume else 0
                return {**self._state(epoch, 0), "worker": info.id, "num_workers": info.num_workers}
            state = self._state(cursor.epoch, cursor.next)
            state.update(worker=cursor.worker, num_workers=cursor.step, next_batch=cursor.next)
            return state
        record = self._clock.peek()
        gen, pending = record.get("gen"), record.get("pending")
        if batches_seen is not None:
            seen = _check_int("batches_seen", batches_seen, 0)
            if seen > len(self):
                raise InvalidArgumentError(
                    f"batches_seen={seen} is more than the {len(self)} batches of an epoch"
                )
            epoch = gen["epoch"] if gen is not None else (pending or {"epoch": 0})["epoch"]
            return self._state(epoch, seen)
        if pending is not None:
            return self._state(pending["epoch"], pending["start"])
        if gen is None:
            return self._state(0, 0)
        if gen["pids"] == [os.getpid()] and cursor is not None and cursor.epoch == gen["epoch"]:
            return self._state(cursor.epoch, cursor.next)
        raise InvalidArgumentError(
            "this epoch was read by DataLoader worker processes, which this process cannot "
            "see: pass the number of batches your loop consumed this epoch, "
            "ds.state_dict(batches_seen=step) (torchdata's StatefulDataLoader does it for you)"
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`: the next iteration continues that epoch where it
        stopped (or starts the next epoch if it was complete).

        >>> ds = PackDataset("train.h5", 16, seed=7)
        >>> ds.load_state_dict(PackDataset("train.h5", 16, seed=7).state_dict(batches_seen=3))
        >>> len(list(ds))  # the one batch of epoch 0 not yet seen
        1
        """
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise InvalidArgumentError("not a PackDataset state_dict")
        self.seed = int(state["seed"])
        mine = self._state(0, 0)
        free = ("format", "seed", "epoch", "batches_seen")
        differ = [k for k in mine if k not in free and state.get(k) != mine[k]]
        if differ:
            raise InvalidArgumentError(
                "the state was saved with other settings, so its order does not apply here: "
                + ", ".join(f"{k}={state.get(k)!r} (now {mine[k]!r})" for k in differ)
            )
        epoch, seen = int(state["epoch"]), int(state["batches_seen"])
        info = get_worker_info()
        if "worker" in state:
            if info is None:
                raise InvalidArgumentError(
                    "this state belongs to one DataLoader worker (it was saved inside a worker, "
                    "as StatefulDataLoader does); load it with the StatefulDataLoader's "
                    "load_state_dict"
                )
            if (state["worker"], state["num_workers"]) != (info.id, info.num_workers):
                raise InvalidArgumentError(
                    f"state of worker {state['worker']} of {state['num_workers']} loaded into "
                    f"worker {info.id} of {info.num_workers}"
                )
            self._resume = state
            return
        self._clock.set_pending(epoch, seen)

    # -- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        if info is None:
            worker, workers, token = 0, 1, None
        else:
            worker, workers, token = info.id, info.num_workers, info.seed - info.id
        resume, self._resume = self._resume, None
        epoch, start, gen_id = self._clock.claim(
            token, worker, workers, None if resume is None else int(resume["epoch"]), len(self)
        )
        if resume is not None and "next_batch" in resume:
            first = int(resume["next_batch"])
        else:
            first = start + worker
        cursor = _Cursor(epoch, first, workers, worker)
        self._cursor = cursor
        return self._iterate(cursor, gen_id, to_shared=info is not None and self.transform is None)

    def _iterate(self, cursor: _Cursor, gen_id: int, to_shared: bool) -> Iterator[Any]:
        reader = self._slot.get()
        indices = self.rank_indices(cursor.epoch)
        todo = self._batches(indices, range(cursor.next, len(self), cursor.step))
        in_flight: collections.deque[tuple[int, Any, Any]] = collections.deque()

        def submit() -> None:
            for j, idx in todo:
                in_flight.append((j, *_start_batch(reader, idx, to_shared)))
                return

        for _ in range(max(self.prefetch, 1)):
            submit()
        first = True
        while in_flight:
            j, handle, tensors = in_flight.popleft()
            batch = handle.result()
            if self.prefetch:
                submit()
            if tensors is not None:
                item = tensors
            else:
                item = to_torch(batch if self.transform is None else self.transform(batch))
            cursor.next = j + cursor.step
            if first:
                self._clock.mark_used(gen_id)
                first = False
            yield item
            if not self.prefetch:
                submit()

    def __getstate__(self) -> dict[str, Any]:
        self._sharding()
        state = dict(self.__dict__)
        state["_cursor"] = None
        return state

    @property
    def reader(self) -> BatchReader:
        """The reader, opened in this process."""
        return self._slot.get()

    def __repr__(self) -> str:
        rank, world = self._sharding()
        return (
            f"PackDataset({self.num_samples} samples, batch_size={self.batch_size}, "
            f"{len(self)} batches per epoch on rank {rank}/{world}, "
            f"shuffle_mode={self.shuffle_mode!r}, prefetch={self.prefetch})"
        )


def _default_window(reader: BatchReader, samples_per_chunk: int) -> int:
    """Chunks per shuffle window in ``"chunk"`` mode: as many as the reader's chunk cache
    holds, so that each chunk stays decoded while its window is read."""
    if samples_per_chunk <= 1:
        return 1
    shapes, dtypes = reader.shape, reader.dtype
    if isinstance(dtypes, dict):
        sample = sum(math.prod(shapes[k]) * dtypes[k].itemsize for k in dtypes)  # type: ignore[index]
    else:
        sample = math.prod(shapes) * dtypes.itemsize  # type: ignore[arg-type]
    budget = int(getattr(reader, "cache_bytes", 0))
    return max(1, budget // max(sample * samples_per_chunk, 1))


# --------------------------------------------------------------------------------------------
# PackMapDataset


class _Rows(list):
    """A batch as the list of its samples (row views, no copies), which is what torch's
    ``default_collate`` expects, carrying the whole batch for ``PackMapDataset.collate_fn``."""

    __slots__ = ("whole",)


def _rows(batch: Any) -> _Rows:
    def split(v: Any) -> list[Any]:
        return list(v.unbind(0)) if isinstance(v, torch.Tensor) else list(v)

    if isinstance(batch, dict):
        columns = {k: split(v) for k, v in batch.items()}
        n = len(next(iter(columns.values()))) if columns else 0
        rows = _Rows({k: col[i] for k, col in columns.items()} for i in range(n))
    else:
        rows = _Rows(split(batch))
    rows.whole = batch
    return rows


class PackMapDataset(Dataset):
    """A map-style ``Dataset`` over a packread reader, for code that owns its sampling.

    ``DataLoader`` calls ``__getitems__`` with a batch's indices, so a batch is one
    ``reader.batch`` call, with any sampler (the default, ``BatchSampler``,
    ``DistributedSampler``, your own). Pass ``collate_fn=PackMapDataset.collate_fn`` and the
    batch goes through as it was read: ``DataLoader(ds, batch_size=64, shuffle=True,
    collate_fn=ds.collate_fn)``; with torch's default collate it still works, at the cost of
    stacking the samples again. ``ds[i]`` is one sample. ``transform(batch)`` is applied to each
    numpy batch (a batch of one for ``ds[i]``) before the conversion to tensors.

    >>> ds = PackMapDataset("train.h5", datasets="images")
    >>> len(ds), ds[3].shape
    (64, torch.Size([3, 32, 32]))
    """

    def __init__(
        self,
        source: Source,
        *,
        datasets: Any = None,
        transform: Callable[[Any], Any] | None = None,
        **reader_options: Any,
    ) -> None:
        super().__init__()
        if transform is not None and not callable(transform):
            raise PackreadTypeError("transform must be callable")
        self.transform = transform
        self._slot = _ReaderSlot(source, datasets, reader_options)
        self._len = len(self._slot.get())

    def __len__(self) -> int:
        return self._len

    def _read(self, indices: Any) -> Any:
        reader = self._slot.get()
        idx = np.asarray(indices, dtype=np.int64)
        to_shared = get_worker_info() is not None and self.transform is None
        handle, tensors = _start_batch(reader, idx, to_shared)
        batch = handle.result()
        if tensors is not None:
            return tensors
        return to_torch(batch if self.transform is None else self.transform(batch))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """The samples ``indices``, read as one batch (see :meth:`collate_fn`)."""
        return _rows(self._read(list(indices)))

    def __getitem__(self, i: int) -> Any:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise PackreadTypeError(f"an index is an int, not {type(i).__name__}")
        batch = self._read([int(i)])
        if isinstance(batch, dict):
            return {k: v[0] for k, v in batch.items()}
        return batch[0]

    @staticmethod
    def collate_fn(batch: Any) -> Any:
        """The batch ``__getitems__`` read, as it is (a tensor or a dict of tensors); any other
        list of samples is collated by torch's ``default_collate``.

        >>> ds = PackMapDataset("train.h5")
        >>> loader = DataLoader(ds, batch_size=8, shuffle=True, collate_fn=ds.collate_fn)
        >>> next(iter(loader))["labels"].shape
        torch.Size([8])
        """
        if isinstance(batch, _Rows):
            return batch.whole
        if isinstance(batch, list):
            return torch.utils.data.default_collate(batch)
        return batch

    @property
    def reader(self) -> BatchReader:
        """The reader, opened in this process."""
        return self._slot.get()

    def __repr__(self) -> str:
        return f"PackMapDataset({self._len} samples, reader={self.reader!r})"
