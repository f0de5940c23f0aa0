"""The iterable dataset of :mod:`packread.torch`: :class:`PackDataset`, whole batches sharded
by rank and DataLoader worker, shuffled per epoch, prefetched and resumable. Its epoch
arithmetic is :mod:`packread._epoch`'s; the epoch each iteration reads, :mod:`._clock`'s."""

from __future__ import annotations

import functools
import inspect
import os
import secrets
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .._common import BatchReader
from .._deprecated import source_names
from .._epoch import (
    SHUFFLE_MODES,
    STATE_FORMAT,
    Cursor,
    EpochPlan,
    check_int,
    check_position,
    default_window,
)
from .._open import Source, legacy_datasets
from ..errors import InvalidArgumentError, PackreadTypeError
from ._buffers import Device, WorkerSlabs
from ._clock import _EpochClock
from ._measure import Measured
from ._reading import (
    Sink,
    Started,
    _ReaderSlot,
    begin_iteration,
    check_device,
    check_ranks,
    find_ranks,
    finish_batch,
    make_sink,
    run_batches,
    start_batch,
    worker_state,
)

#: Samples found not to decode in DataLoader workers, as their batches reached this process:
#: ``{dataset token: {index: why}}``.
_WORKER_ERRORS: dict[str, dict[int, str]] = {}


def _deliver(item: Any, token: str, errors: dict[int, str]) -> Any:
    """Unpickles a worker's batch in the main process, keeping the samples its reader found not
    to decode since its last batch (:attr:`PackDataset.errors`); the first are said once, in
    this process, as a reader says its own (a worker's warning goes to its stderr only)."""
    first = token not in _WORKER_ERRORS
    _WORKER_ERRORS.setdefault(token, {}).update(errors)
    if first and errors:
        k, why = next(iter(errors.items()))
        where = token.partition(":")[2] or "PackDataset"
        warnings.warn(
            f"{where}: samples did not decode in DataLoader workers and were replaced "
            f"(on_error='skip'), the first {k}: {why}; dataset.errors lists them all",
            RuntimeWarning,
            stacklevel=2,
        )
    return item


class _WithErrors:
    """A worker's batch with the samples found not to decode while reading it: pickled to the
    main process as the batch itself (:func:`_deliver`)."""

    __slots__ = ("errors", "item", "token")

    def __init__(self, item: Any, token: str, errors: dict[int, str]) -> None:
        self.item, self.token, self.errors = item, token, errors

    def __reduce__(self) -> tuple[Any, ...]:
        return (_deliver, (self.item, self.token, self.errors))


class PackDataset(Measured, IterableDataset):
    """An ``IterableDataset`` of whole batches, read by packread.

    ``source`` is a path (``.h5``/``.hdf5``, ``.zip``, a folder, glob or list of ``.npy`` or of
    ``.npz`` files) or a reader. Use it with ``DataLoader(ds, batch_size=None, ...)``: each item
    is a batch of ``batch_size`` samples, a tensor (or a dict of tensors for readers of several
    arrays) made with ``torch.from_numpy``, without a copy.

    - ``shuffle``/``seed``/``shuffle_mode``: one permutation per ``(seed, epoch)``, identical on
      every rank. ``"sample"`` is uniform; ``"chunk"`` shuffles whole chunks (HDF5 chunks
      holding several samples), then the samples within windows of ``chunk_window`` chunks
      (default: as many as the reader's chunk cache holds), so each chunk is decoded once per
      epoch (per worker process); ``"none"`` keeps file order. ``"shard"`` (a reader of
      several files) deals whole shards to ranks and then workers, so that each worker reads
      ``shard_window`` files at a time (see the module docstring).
    - ``set_epoch(e)`` picks the epoch; without it each new iteration is the next epoch.
    - ``rank``/``world_size``: taken from ``torch.distributed`` when it is initialised, else
      from these arguments, else one rank. See the module docstring for how an epoch is cut;
      ``len(ds)`` is the number of batches this rank yields per epoch.
    - ``prefetch``: batches being read ahead (with ``batch_async``, on packread's threads) in
      the process that iterates, the main process with ``num_workers=0`` or each worker. The
      oldest batch is read first, with all of packread's threads.
    - Batch memory is recycled: a batch is written into the buffer of one the consumer has
      dropped (pages already touched, about twice as fast to fill as new ones). A batch is
      never overwritten while anything (an array, a tensor, a view) still refers to it: keep
      batches as long as you like, they only cost new buffers. Memory is about
      ``prefetch + 2`` batches per process, plus the batches you hold.
    - With DataLoader workers, each worker reads into a few buffers in shared memory made once
      (``prefetch + 6`` at most), and the main process maps each once: a batch crosses as a
      small message, and its tensors are views of the worker's buffer, which returns to the
      worker when they are dropped.
    - ``pin_memory=True`` writes batches straight into page-locked memory (recycled too; with
      workers, their shared buffers are page-locked in the main process): leave the
      DataLoader's own ``pin_memory`` off, it would copy them again. ``device="cuda"`` yields
      batches on that device, copied on a side stream (with ``num_workers=0``, one batch
      ahead): the current stream waits for the copy on the GPU, the host does not.
    - ``transform(batch)`` is given each batch as tensors (a tensor or a dict of them), as a
      collate would give them, in the process that reads it: a torchvision v2 transform works
      on it as written.
    - ``state_dict()``/``load_state_dict()`` save and restore ``(seed, epoch, position)``; a new
      loader then yields exactly the batches of that epoch not yet seen. With worker processes
      and a plain ``DataLoader``, pass the number of batches your loop consumed this epoch:
      ``ds.state_dict(batches_seen=step)``; torchdata's ``StatefulDataLoader`` needs nothing.
    - ``**reader_options`` go to the reader, as :func:`packread.open` takes them (``arrays``,
      ``members``, ``decode``, ``augment_seed``, ``remote``, ``num_threads``...); an option the
      format does not take is a ``TypeError`` here. The reader opens here and again, lazily,
      in each worker process. A reader whose batches vary by epoch (random image crops) is
      given each epoch.
    - ``errors``: the samples found not to decode (images with ``on_error="skip"``), also
      those found in DataLoader workers, as their batches arrive.

    >>> ds = PackDataset("train.h5", batch_size=16, seed=0)
    >>> len(ds)
    4
    >>> batch = next(iter(DataLoader(ds, batch_size=None)))
    >>> batch["images"].shape
    torch.Size([16, 3, 32, 32])
    """

    @source_names("PackDataset")
    def __init__(
        self,
        source: Source,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        shuffle_mode: str = "sample",
        prefetch: int = 2,
        transform: Callable[[Any], Any] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        chunk_window: int | None = None,
        shard_window: int = 4,
        pin_memory: bool = False,
        device: str | None = None,
        trace: str | os.PathLike[str] | None = None,
        **reader_options: Any,
    ) -> None:
        super().__init__()
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.prefetch = check_int("prefetch", prefetch, 0)
        if shuffle_mode not in SHUFFLE_MODES:
            raise InvalidArgumentError(
                f"shuffle_mode must be one of {SHUFFLE_MODES}, not {shuffle_mode!r}"
            )
        if transform is not None and not callable(transform):
            raise PackreadTypeError("transform must be callable")
        explicit = check_ranks(rank, world_size)
        self.shuffle = bool(shuffle)
        self.seed = check_int("seed", seed, -(2**63)) & (2**64 - 1)
        self.drop_last = bool(drop_last)
        self.shuffle_mode = shuffle_mode if self.shuffle else "none"
        self.transform = transform
        self.pin_memory = bool(pin_memory)
        self.device = check_device(device)
        #: ``(pid, sink)``: where this process writes batches (made on first use).
        self._sink: tuple[int, Sink] | None = None
        self._explicit_rank = explicit
        datasets = reader_options.pop("datasets", None)
        if datasets is not None:
            legacy_datasets(source, datasets, reader_options, "PackDataset")
        own = inspect.signature(PackDataset.__init__).parameters
        self._slot = _ReaderSlot(source, reader_options, "PackDataset", own)
        #: Names this dataset's errors found in workers (see :func:`_deliver`).
        self._token = secrets.token_hex(8)
        self.trace = None if trace is None else os.fspath(trace)
        self._start_measuring()
        reader = self._slot.get()
        self.num_samples = len(reader)
        self.samples_per_chunk = max(int(getattr(reader, "samples_per_chunk", 1)), 1)
        self.chunk_window = (
            check_int("chunk_window", chunk_window, 1)
            if chunk_window is not None
            else default_window(reader, self.samples_per_chunk)
        )
        self.shard_window = check_int("shard_window", shard_window, 1)
        lengths = getattr(reader, "shard_lengths", None)
        self.shard_lengths: tuple[int, ...] | None = None if lengths is None else tuple(lengths)
        #: The workers a loaded state's epoch was dealt to (``"shard"`` mode checks them).
        self._saved_workers: int | None = None
        self._ranks: tuple[int, int] | None = None
        self._sharding()
        if self.shuffle_mode == "shard":
            self._plan().rank_indices(0)  # too few shards for the ranks: said now
        self._clock = _EpochClock()
        self._cursor: Cursor | None = None
        self._resume: dict[str, Any] | None = None
        self._warn_if_empty()

    def _warn_if_empty(self) -> None:
        """An epoch of no batches (``drop_last`` with a batch larger than this rank's share)
        is said once, not left to end the loop silently."""
        if len(self) == 0 and self.num_samples > 0 and not getattr(self, "_warned_empty", False):
            self._warned_empty = True
            rank, world = self._sharding()
            warnings.warn(
                f"PackDataset: rank {rank} of {world} reads no batch per epoch: "
                f"{self.num_samples} samples, batch_size={self.batch_size}, "
                f"drop_last={self.drop_last}; lower batch_size or set drop_last=False",
                RuntimeWarning,
                stacklevel=3,
            )

    @property
    def errors(self) -> dict[int, str]:
        """Every sample found not to decode so far (images read with ``on_error="skip"``), by
        index, with why: this process's reader's, and those DataLoader workers found, as
        their batches arrived."""
        found = dict(getattr(self._slot.get(), "errors", {}) or {})
        found.update(_WORKER_ERRORS.get(self._token, {}))
        return dict(sorted(found.items()))

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
        return find_ranks(self._explicit_rank)

    def _plan(self, workers: int = 1) -> EpochPlan:
        """This rank's epochs, as the settings are now (``"shard"`` mode deals each epoch to
        ``workers``)."""
        rank, world = self._sharding()
        return EpochPlan(
            num_samples=self.num_samples,
            batch_size=self.batch_size,
            seed=self.seed,
            shuffle_mode=self.shuffle_mode,
            samples_per_chunk=self.samples_per_chunk,
            chunk_window=self.chunk_window,
            rank=rank,
            world_size=world,
            drop_last=self.drop_last,
            shard_lengths=self.shard_lengths,
            shard_window=self.shard_window,
            workers=workers,
        )

    def __len__(self) -> int:
        """Batches this rank yields per epoch."""
        return self._plan().num_batches

    def order(self, epoch: int) -> np.ndarray:
        """The permutation of the samples for ``epoch`` (the same on every rank).

        >>> ds = PackDataset("train.h5", 16, seed=0)
        >>> sorted(ds.order(3).tolist()) == list(range(64))
        True
        """
        return self._plan().order(epoch)

    def rank_indices(self, epoch: int) -> np.ndarray:
        """The samples this rank reads in ``epoch``, in order (padded or cut as the module
        docstring says).

        >>> PackDataset("train.h5", 16, rank=1, world_size=2).rank_indices(0).shape
        (32,)
        """
        return self._plan().rank_indices(epoch)

    # -- epochs and state ---------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads (it orders the samples with the seed).

        >>> ds = PackDataset("train.h5", 16)
        >>> ds.set_epoch(5)
        >>> ds.state_dict()["epoch"]
        5
        """
        self._clock.set_pending(check_int("epoch", epoch, 0), 0)

    def _state(self, epoch: int, position: int, workers: int | None = None) -> dict[str, Any]:
        if workers is None:
            # The workers the last iteration was dealt to (the clock records them).
            gen = self._clock.peek().get("gen") if self.shuffle_mode == "shard" else None
            workers = int(gen["workers"]) if gen is not None else 1
        return self._plan(workers).state(epoch, position)

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
            state = self._state(cursor.epoch, cursor.next, cursor.step)
            state.update(worker=cursor.worker, num_workers=cursor.step, next_batch=cursor.next)
            return state
        record = self._clock.peek()
        gen, pending = record.get("gen"), record.get("pending")
        if batches_seen is not None:
            seen = check_position(batches_seen, len(self))
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
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise InvalidArgumentError("not a PackDataset state_dict")
        self.seed = int(state["seed"])
        differ = self._plan().mismatches(state)
        if differ:
            raise InvalidArgumentError(
                "the state was saved with other settings, so its order does not apply here: "
                + ", ".join(differ)
            )
        epoch, seen = int(state["epoch"]), int(state["batches_seen"])
        if state.get("shard_workers") is not None:
            self._saved_workers = int(state["shard_workers"])
        if worker_state(state, "PackDataset"):
            self._resume = state
            return
        self._clock.set_pending(epoch, seen)

    # -- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        self._warn_if_empty()
        resume, self._resume = self._resume, None
        gen, cursor = begin_iteration(self._clock, resume, len(self))
        self._cursor = cursor
        return self._iterate(cursor, int(gen["id"]), self._sink_here(get_worker_info()))

    def _sink_here(self, info: Any) -> Sink:
        """Where this process writes batches (made once per process)."""
        if self._sink is None or self._sink[0] != os.getpid():
            sink = make_sink(info, self.transform, self.prefetch, self.pin_memory, self.device)
            self._sink = (os.getpid(), sink)
        return self._sink[1]

    def _iterate(self, cursor: Cursor, gen_id: int, sink: Sink) -> Iterator[Any]:
        reader = self._slot.get()
        in_worker = get_worker_info() is not None
        seen: set[int] = set()
        plan = self._plan(cursor.step)
        saved, self._saved_workers = self._saved_workers, None
        if plan.shuffle_mode == "shard" and saved is not None and saved != cursor.step:
            raise InvalidArgumentError(
                f"the state was saved reading shard mode with {saved} worker(s), and this "
                f"loader has {cursor.step}: shard mode deals each epoch to the workers, so "
                "resume with the same num_workers (1 for num_workers=0)"
            )
        indices = plan.rank_indices(cursor.epoch)
        todo = (
            (j, functools.partial(start_batch, reader, idx, sink, cursor.epoch))
            for j, idx in plan.batches(indices, cursor.positions(plan.num_batches))
        )
        # A worker copies nothing to the device: the main process does, on receipt.
        device = Device(self.device) if self.device and not isinstance(sink, WorkerSlabs) else None

        def deliver(j: int, item: Any) -> Any:
            if cursor.advance(j):  # the first batch: the epoch is used
                self._clock.mark_used(gen_id)
            if in_worker:
                new = {k: v for k, v in getattr(reader, "errors", {}).items() if k not in seen}
                if new:
                    seen.update(new)
                    item = _WithErrors(item, self._token, new)
            return item

        def finish(started: Started) -> Any:
            return finish_batch(started, sink, self.transform)

        yield from run_batches(todo, finish, deliver, self.prefetch, device, self._meter())

    def __getstate__(self) -> dict[str, Any]:
        self._sharding()
        state = dict(self.__dict__)
        state["_cursor"] = None
        state["_sink"] = None
        state["_rec_at"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Pickles made before these settings existed load with their defaults.
        state.setdefault("pin_memory", False)
        state.setdefault("device", None)
        state.setdefault("_sink", None)
        state.setdefault("_token", secrets.token_hex(8))
        state.setdefault("trace", None)
        state.setdefault("_rec_at", None)
        self.__dict__.update(state)

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
