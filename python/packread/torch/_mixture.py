"""The mixture of :mod:`packread.torch`: :class:`MixDataset`, several sources read as one
``IterableDataset`` by weight. Its arithmetic (which source, where in its stream, how long an
epoch is) is :mod:`packread._mix`'s; the reading is :class:`PackDataset`'s."""

from __future__ import annotations

import collections
import os
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .._common import BatchReader
from .._epoch import Cursor, EpochPlan, check_int, check_position
from .._mix import (
    MIX_MODES,
    MIX_STATE_FORMAT,
    MixPlan,
    Part,
    check_stop,
    check_weights,
    source_epoch,
)
from .._reader import read_together
from ..errors import InvalidArgumentError, PackreadError, PackreadTypeError
from ._buffers import Device, WorkerSlabs
from ._clock import _EpochClock
from ._iterable import _WORKER_ERRORS, PackDataset, _WithErrors
from ._measure import Measured
from ._reading import (
    Sink,
    Started,
    _ReaderSlot,
    begin,
    begin_iteration,
    check_device,
    check_ranks,
    claim_out,
    find_ranks,
    finish_batch,
    make_sink,
    run_batches,
    to_torch,
    varies_by_epoch,
    worker_state,
)

_U64 = 2**64 - 1
#: Passes of one source's order kept per process (a batch spans at most two, unless the
#: source is smaller than a batch).
_ORDERS_KEPT = 4


class SourceBatch(NamedTuple):
    """A batch of ``MixDataset(mode="batch")``: which source it came from (its position and
    its name) and the batch itself.

    >>> a = PackDataset("train.h5", batch_size=16, arrays="images")
    >>> b = PackDataset("train.zip", batch_size=16, dtype="uint8", shape=(3, 32, 32))
    >>> item = next(iter(MixDataset({"h5": a, "zip": b}, [0, 1], mode="batch")))
    >>> item.source, item.name, item.batch.shape
    (1, 'zip', torch.Size([16, 3, 32, 32]))
    """

    source: int
    name: str
    batch: Any


@dataclass(frozen=True)
class SourceRead:
    """What one source of a mixture gave so far this epoch (:meth:`MixDataset.realised`).

    >>> ds = MixDataset([PackDataset("train.h5", 16)] * 2, [3, 1], stop=64)
    >>> read = ds.realised(batches_seen=2)["1"]
    >>> read.weight, read.samples, read.fraction, read.passes
    (0.25, 8, 0.25, 0.125)
    """

    #: The source's name.
    name: str
    #: Its weight this epoch (normalised).
    weight: float
    #: Samples read from it this epoch, all ranks together.
    samples: int
    #: Its share of all samples read this epoch (``nan`` before the first batch).
    fraction: float
    #: Samples this rank read from it.
    rank_samples: int
    #: Its samples, and how many times over they were read (``samples / num_samples``).
    num_samples: int
    passes: float


#: Batches of each dataset's epoch that reached this process from DataLoader workers:
#: ``{dataset token: (epoch, batches)}``.
_ARRIVED: dict[str, tuple[int, int]] = {}


def _arrive(item: Any, token: str, epoch: int) -> Any:
    """A worker's batch unpickled in the main process: counted for :meth:`MixDataset.realised`."""
    seen_epoch, count = _ARRIVED.get(token, (epoch, 0))
    _ARRIVED[token] = (epoch, count + 1 if seen_epoch == epoch else 1)
    return item


class _Counted:
    """A worker's batch, counted as it reaches the main process (:func:`_arrive`)."""

    __slots__ = ("epoch", "item", "token")

    def __init__(self, item: Any, token: str, epoch: int) -> None:
        self.item, self.token, self.epoch = item, token, epoch

    def __reduce__(self) -> tuple[Any, ...]:
        return (_arrive, (self.item, self.token, self.epoch))


class _Source:
    """One source of a mixture: its reader (opened in each process), transform and order."""

    def __init__(self, name: str, source: Any, index: int, mix_seed: int, shuffle: bool) -> None:
        self.name = name
        if isinstance(source, PackDataset):
            self.slot = source._slot
            self.transform = source.transform
            self.seed = source.seed
            self.shuffle_mode = source.shuffle_mode
            self.samples_per_chunk = source.samples_per_chunk
            self.chunk_window = source.chunk_window
            self.shard_lengths = source.shard_lengths
            self.shard_window = source.shard_window
            self.batch_size: int | None = source.batch_size
        elif isinstance(source, (IterableDataset, torch.utils.data.Dataset)):
            raise PackreadTypeError(
                f"source {name!r} is a {type(source).__name__}: MixDataset reads PackDatasets, "
                "packread readers (or any BatchReader) and what packread.open takes"
            )
        else:
            self.slot = _ReaderSlot(source, {}, "MixDataset")
            self.transform = None
            # Each source its own permutation: the mixture's seed and the source's position.
            self.seed = (mix_seed + 0x9E3779B97F4A7C15 * (index + 1)) & _U64
            self.shuffle_mode = "sample" if shuffle else "none"
            self.samples_per_chunk, self.chunk_window = 1, 1
            self.shard_lengths, self.shard_window = None, 1
            self.batch_size = None
        self.num_samples = len(self.slot.get())
        self._plan = EpochPlan(
            num_samples=self.num_samples,
            batch_size=1,
            seed=self.seed,
            shuffle_mode=self.shuffle_mode,
            samples_per_chunk=self.samples_per_chunk,
            chunk_window=self.chunk_window,
            shard_lengths=self.shard_lengths,
            shard_window=self.shard_window,
        )

    def order(self, epoch: int) -> np.ndarray:
        """The source's permutation of its samples for its own ``epoch`` (a pass): what one
        rank of one worker reads of a PackDataset of these settings (in ``"shard"`` mode, the
        shards' permutation, samples shuffled within windows of shards)."""
        return self._plan.rank_indices(epoch & _U64)

    def settings(self) -> dict[str, Any]:
        """What this source's order depends on (a saved state must match)."""
        return {
            "name": self.name,
            "num_samples": self.num_samples,
            "seed": self.seed,
            "shuffle_mode": self.shuffle_mode,
            "samples_per_chunk": self.samples_per_chunk if self.shuffle_mode == "chunk" else None,
            "chunk_window": self.chunk_window if self.shuffle_mode == "chunk" else None,
            "shard_lengths": list(self.shard_lengths or ())
            if self.shuffle_mode == "shard"
            else None,
            "shard_window": self.shard_window if self.shuffle_mode == "shard" else None,
        }

    def schema(self) -> Any:
        """``(keys, per-sample shapes, dtypes)`` of the source's batches, after its transform
        (read from two samples when it has one)."""
        reader = self.slot.get()
        if self.transform is None:
            shape: Any = reader.shape
            dtype: Any = reader.dtype
            if isinstance(dtype, dict):
                return {k: (tuple(shape[k]), np.dtype(dtype[k]).name) for k in dtype}
            return (tuple(shape), np.dtype(dtype).name)
        idx = np.arange(min(2, self.num_samples), dtype=np.int64)
        return _describe(self.transform(to_torch(reader.batch(idx))))


def _declared(reader: BatchReader) -> Any:
    """A reader's per-sample shapes and exact dtypes (byte order included)."""
    shape: Any = reader.shape
    dtype: Any = reader.dtype
    if isinstance(dtype, dict):
        return {k: (tuple(shape[k]), np.dtype(dtype[k]).str) for k in dtype}
    return (tuple(shape), np.dtype(dtype).str)


def _describe(batch: Any) -> Any:
    """The per-sample shapes and dtypes of a batch (tensors, arrays, a dict of them)."""
    if isinstance(batch, dict):
        return {k: _describe(v) for k, v in batch.items()}
    if isinstance(batch, torch.Tensor):
        return (tuple(batch.shape[1:]), str(batch.dtype).removeprefix("torch."))
    if isinstance(batch, np.ndarray):
        return (tuple(batch.shape[1:]), batch.dtype.name)
    return type(batch).__name__


def _concat(parts: list[Any]) -> Any:
    """Batches of one structure, one after another along the first axis."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    if isinstance(first, dict):
        return {k: _concat([p[k] for p in parts]) for k in first}
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    if isinstance(first, np.ndarray):
        return np.concatenate(parts)
    if isinstance(first, list):
        return [x for p in parts for x in p]
    if isinstance(first, tuple) and len(first) == 2:
        # ragged="flat": (values end to end, the len + 1 offsets where each sample starts).
        values = _concat([p[0] for p in parts])
        shifted, base = [first[1]], first[1][-1]
        for p in parts[1:]:
            shifted.append(p[1][1:] + base)
            base = base + p[1][-1]
        return values, _concat(shifted)
    raise PackreadTypeError(f"cannot put batches of {type(first).__name__} together")


class _Together:
    """The reads of one batch's pieces as one handle; ``result()`` is ``combine`` of their
    results."""

    __slots__ = ("combine", "handles")

    def __init__(self, handles: list[Any], combine: Callable[[list[Any]], Any]) -> None:
        self.handles, self.combine = handles, combine

    def done(self) -> bool:
        return all(h.done() for h in self.handles)

    def result(self, timeout: float | None = None) -> Any:
        return self.combine([h.result() for h in self.handles])


#: One read of a batch: ``(source, source epoch, indices, first row)``.
_Piece = tuple[int, int, np.ndarray, int]


class MixDataset(Measured, IterableDataset):
    """Several sources read as one ``IterableDataset``, by weight: deterministic, resumable and
    exact per rank.

    ``sources`` is a list (named ``"0"``, ``"1"``...) or a dict by name of
    :class:`PackDataset` s (each with its own reader options, ``transform``, ``seed`` and
    ``shuffle_mode``) or of what :func:`packread.open` takes (a path, a reader: shuffled by
    sample from the mixture's ``seed``). ``weights``: one number per source (or a dict by
    name), normalised; 0 turns a source off. A function of the epoch giving them makes a
    curriculum; :meth:`set_weights` changes them from the next epoch on.

    - ``mode="sample"``: each batch mixes the sources' samples, each source's together, in
      source order; the sources must give the same keys, shapes and dtypes (after their
      transforms). ``mode="batch"``: each batch comes from one source, as a
      :class:`SourceBatch` ``(source, name, batch)``; the sources may differ.
    - Which source each sample (or batch) comes from is a low-discrepancy sequence of the
      weights, the same on every rank and the same every epoch: among any first ``n``
      choices, a source has its share ``w * n`` within the number of sources, on every rank.
      Each source is read as a stream of its own passes (its own permutation per pass), the
      ranks taking its samples in turn, so no two ranks read the same sample in a pass.
    - ``stop`` says what an epoch is: ``"first_exhausted"`` (default) ends it before any
      source would repeat a sample; ``"all_exhausted"`` ends it once every source has been
      read wholly, the others restarting with their next pass (oversampled); ``stop=N`` reads
      ``N`` samples (over all ranks), restarting sources as needed. Every rank reads the same
      number of batches, ``len(ds)``. Each epoch starts every source at the start of a new
      pass: its pass ``p`` in epoch ``e`` is its own epoch ``e * 2**32 + p``.
    - ``batch_size``: default, the PackDatasets' own (which must agree). The mixture's
      ``prefetch``, ranks, ``pin_memory``, ``device`` and ``transform`` (given each whole
      batch, after the sources' own) apply; the sources' are not used.
    - ``state_dict()``/``load_state_dict()``: the epoch, the weights, the position and each
      source's place in its stream; the rest of the epoch is then exactly what an
      uninterrupted run reads, with any number of workers. With worker processes and a plain
      ``DataLoader``, pass ``batches_seen=step``; torchdata's ``StatefulDataLoader`` needs
      nothing (and resumes with the same ``num_workers``).
    - :meth:`realised`: per source, the samples read so far this epoch and their share.

    >>> a = PackDataset("train.h5", batch_size=16, arrays="images")
    >>> b = PackDataset("train.zip", batch_size=16, dtype="uint8", shape=(3, 32, 32))
    >>> ds = MixDataset({"h5": a, "zip": b}, [0.75, 0.25], stop=128)
    >>> len(ds), next(iter(ds)).shape
    (8, torch.Size([16, 3, 32, 32]))
    """

    def __init__(
        self,
        sources: Sequence[Any] | Mapping[str, Any],
        weights: Sequence[float] | Mapping[str, float] | Callable[[int], Any],
        *,
        batch_size: int | None = None,
        mode: str = "sample",
        stop: str | int = "first_exhausted",
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        prefetch: int = 2,
        transform: Callable[[Any], Any] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        pin_memory: bool = False,
        device: str | None = None,
        trace: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__()
        if mode not in MIX_MODES:
            raise InvalidArgumentError(f"mode must be one of {MIX_MODES}, not {mode!r}")
        self.mode = mode
        self.stop = check_stop(stop)
        self.seed = check_int("seed", seed, -(2**63)) & _U64
        self.drop_last = bool(drop_last)
        self.prefetch = check_int("prefetch", prefetch, 0)
        if transform is not None and not callable(transform):
            raise PackreadTypeError("transform must be callable")
        self.transform = transform
        self._explicit_rank = check_ranks(rank, world_size)
        self.pin_memory = bool(pin_memory)
        self.device = check_device(device)
        if isinstance(sources, Mapping):
            named = [(str(k), v) for k, v in sources.items()]
        elif isinstance(sources, (str, bytes, os.PathLike)) or not isinstance(sources, Sequence):
            raise PackreadTypeError(
                "sources must be a list or a dict by name of PackDatasets or readers, not "
                f"{type(sources).__name__}"
            )
        else:
            named = [(str(i), v) for i, v in enumerate(sources)]
        if not named:
            raise InvalidArgumentError("a mixture needs at least one source")
        self._sources = [
            _Source(name, src, i, self.seed, bool(shuffle)) for i, (name, src) in enumerate(named)
        ]
        self.names = [s.name for s in self._sources]
        self.batch_size = self._check_batch_size(batch_size)
        self._weights_fn = weights if callable(weights) else None
        self._weights = None if callable(weights) else check_weights(weights, self.names)
        self._check_sources(self._weights_at(0, None))
        if self.mode == "sample":
            self._check_schemas()
        #: Whether every source's batches are the same arrays as read (no transform; shapes
        #: and dtypes, byte order too, alike): a mixed batch is then read straight into one
        #: batch's memory, each source's samples into their rows.
        self._same_arrays = all(s.transform is None for s in self._sources) and (
            len({repr(_declared(s.slot.get())) for s in self._sources}) == 1
        )
        self._ranks: tuple[int, int] | None = None
        self._sharding()
        self._clock = _EpochClock()
        self._cursor: Cursor | None = None
        self._cursor_plan: MixPlan | None = None
        self._resume: dict[str, Any] | None = None
        self._sink: tuple[int, Sink] | None = None
        self._orders: dict[int, collections.OrderedDict[int, np.ndarray]] = {}
        #: Names this dataset's batches arriving from workers (see :func:`_arrive`).
        self._token = secrets.token_hex(8)
        self.trace = None if trace is None else os.fspath(trace)
        self._start_measuring()

    # -- checks -------------------------------------------------------------------------------

    def _check_batch_size(self, batch_size: int | None) -> int:
        if batch_size is not None:
            return check_int("batch_size", batch_size, 1)
        own = {s.name: s.batch_size for s in self._sources if s.batch_size is not None}
        if len(own) < len(self._sources):
            raise InvalidArgumentError(
                "give batch_size: only PackDataset sources bring their own "
                f"(sources {[s.name for s in self._sources if s.batch_size is None]} are not)"
            )
        if len(set(own.values())) > 1:
            raise InvalidArgumentError(
                f"the sources' batch sizes differ ({own}): give the mixture's batch_size"
            )
        return next(iter(own.values()))

    def _check_sources(self, weights: tuple[float, ...]) -> None:
        for s, w in zip(self._sources, weights, strict=True):
            if w > 0 and s.num_samples == 0:
                raise InvalidArgumentError(
                    f"source {s.name!r} has no samples but a weight of {w:g}: give it 0"
                )

    def _check_schemas(self) -> None:
        """In sample mode a batch holds every source's samples: they must agree."""
        first = self._sources[0]
        want = first.schema()
        for s in self._sources[1:]:
            got = s.schema()
            if got != want:
                raise InvalidArgumentError(
                    f"mode='sample' puts every source's samples in one batch, so they must "
                    f"have the same keys, shapes and dtypes: source {s.name!r} gives "
                    f"{_show(got)} where {first.name!r} gives {_show(want)}; give a transform "
                    "that makes them agree, or use mode='batch'"
                )

    # -- weights and epochs -------------------------------------------------------------------

    def _weights_at(self, epoch: int, settings: Any) -> tuple[float, ...]:
        """The weights of ``epoch``: those :meth:`set_weights` (or a loaded state) recorded,
        else the constructor's (or its function's for ``epoch``)."""
        if settings is not None and settings.get("epoch") in (None, epoch):
            return tuple(float(w) for w in settings["weights"])
        if self._weights_fn is not None:
            weights = check_weights(self._weights_fn(epoch), self.names)
            self._check_sources(weights)
            return weights
        assert self._weights is not None
        return self._weights

    def _weights_of(self, epoch: int) -> tuple[float, ...]:
        """The weights ``epoch`` is (or will be) read with: the running iteration's if it reads
        that epoch, else those the next iteration would take."""
        record = self._clock.peek()
        gen = record.get("gen")
        if record.get("pending") is None and gen is not None and gen["epoch"] == epoch:
            return self._weights_at(epoch, gen.get("settings"))
        return self._weights_at(epoch, record.get("settings"))

    def set_weights(self, weights: Sequence[float] | Mapping[str, float]) -> None:
        """The weights of the next epoch and the ones after (a curriculum step), in this
        process and its DataLoader workers; the epoch being read keeps its own.

        >>> ds = MixDataset([PackDataset("train.h5", 16)] * 2, [1, 1], stop=64)
        >>> ds.set_weights([3, 1])
        >>> ds.realised()["0"].weight
        0.75
        """
        w = check_weights(weights, self.names)
        self._check_sources(w)
        self._clock.set_settings({"weights": list(w), "epoch": None})

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads.

        >>> ds = MixDataset([PackDataset("train.h5", 16)] * 2, [1, 1], stop=64)
        >>> ds.set_epoch(3)
        >>> ds.state_dict()["epoch"]
        3
        """
        self._clock.set_pending(check_int("epoch", epoch, 0), 0)

    def _sharding(self) -> tuple[int, int]:
        dist = torch.distributed
        initialised = dist.is_available() and dist.is_initialized()
        if self._ranks is None or initialised or get_worker_info() is None:
            self._ranks = find_ranks(self._explicit_rank)
        return self._ranks

    def plan(self, epoch: int, weights: Sequence[float] | None = None) -> MixPlan:
        """This rank's ``epoch`` (with ``weights``, default that epoch's): its choices, length
        and the samples each batch reads (:class:`packread._mix.MixPlan`).

        >>> ds = MixDataset([PackDataset("train.h5", 16)] * 2, [3, 1], stop=64)
        >>> ds.plan(0).batch_sources(0).tolist()
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
        """
        if weights is None:
            weights = self._weights_of(epoch)
        rank, world = self._sharding()
        return MixPlan(
            lengths=tuple(s.num_samples for s in self._sources),
            weights=tuple(weights),
            batch_size=self.batch_size,
            seed=self.seed,
            epoch=epoch,
            mode=self.mode,
            stop=self.stop,
            rank=rank,
            world_size=world,
            drop_last=self.drop_last,
        )

    def _count(self, epoch: int, settings: Any) -> int:
        return self.plan(epoch, self._weights_at(epoch, settings)).num_batches

    def _now(self) -> tuple[int, tuple[float, ...], dict[str, Any]]:
        """The epoch the last (or next) iteration reads, its weights, and the clock's record."""
        record = self._clock.peek()
        gen, pending = record.get("gen"), record.get("pending")
        if pending is not None:
            return (
                pending["epoch"],
                self._weights_at(pending["epoch"], record.get("settings")),
                record,
            )
        if gen is not None:
            return gen["epoch"], self._weights_at(gen["epoch"], gen.get("settings")), record
        return 0, self._weights_at(0, record.get("settings")), record

    def __len__(self) -> int:
        """Batches this rank reads in the current epoch (the one being read, or set)."""
        epoch, weights, _ = self._now()
        return self.plan(epoch, weights).num_batches

    # -- state ----------------------------------------------------------------------------

    def _state(self, epoch: int, position: int, weights: tuple[float, ...]) -> dict[str, Any]:
        plan = self.plan(epoch, weights)
        read = plan.read(position)
        return {
            "format": MIX_STATE_FORMAT,
            "seed": self.seed,
            "epoch": epoch,
            "batches_seen": position,
            "weights": list(weights),
            **plan.settings(),
            "sources": [
                {**s.settings(), "samples_read": int(n), "passes": int(n) // max(s.num_samples, 1)}
                for s, n in zip(self._sources, read, strict=True)
            ],
        }

    def _position(self, batches_seen: int | None) -> tuple[int, int, tuple[float, ...]]:
        """``(epoch, batches consumed, weights)`` in the main process (see :meth:`state_dict`)."""
        epoch, weights, record = self._now()
        gen, pending = record.get("gen"), record.get("pending")
        if batches_seen is not None:
            return (
                epoch,
                check_position(batches_seen, self.plan(epoch, weights).num_batches),
                weights,
            )
        if pending is not None:
            return epoch, int(pending["start"]), weights
        if gen is None:
            return 0, 0, weights
        cursor = self._cursor
        if gen["pids"] == [os.getpid()] and cursor is not None and cursor.epoch == gen["epoch"]:
            return epoch, cursor.next, weights
        raise InvalidArgumentError(
            "this epoch was read by DataLoader worker processes, which this process cannot "
            "see: pass the number of batches your loop consumed this epoch, "
            "batches_seen=step (torchdata's StatefulDataLoader does it for you)"
        )

    def _errors_token(self, s: int) -> str:
        """Names source ``s``'s samples found not to decode in workers (see ``_deliver``)."""
        return f"{self._token}:MixDataset source {self.names[s]!r}"

    @property
    def errors(self) -> dict[str, dict[int, str]]:
        """Per source (by name), every sample found not to decode so far (images read with
        ``on_error="skip"``), by index, with why: this process's readers', and those DataLoader
        workers found, as their batches arrived.

        >>> MixDataset([PackDataset("train.h5", 16)] * 2, [1, 1], stop=64).errors
        {}
        """
        out = {}
        for s, source in enumerate(self._sources):
            found = dict(getattr(source.slot.get(), "errors", None) or {})
            found.update(_WORKER_ERRORS.get(self._errors_token(s), {}))
            if found:
                out[source.name] = dict(sorted(found.items()))
        return out

    def _read_by_workers(self) -> bool:
        """Whether DataLoader worker processes read the current epoch."""
        record = self._clock.peek()
        gen = record.get("gen")
        return record.get("pending") is None and gen is not None and gen["pids"] != [os.getpid()]

    def state_dict(self, batches_seen: int | None = None) -> dict[str, Any]:
        """The epoch, its weights, the batches consumed and each source's place in its stream
        (``samples_read``, ``passes``), with the settings the order depends on.

        In the main process the position is counted here when the epoch is read in this
        process (``num_workers=0``), else ``batches_seen`` (your loop's step in the epoch). In
        a DataLoader worker (as ``StatefulDataLoader`` asks), the worker's own position.

        >>> ds = MixDataset([PackDataset("train.h5", 16)] * 2, [1, 1], stop=64)
        >>> it = iter(ds)
        >>> _ = next(it)
        >>> [s["samples_read"] for s in ds.state_dict()["sources"]]
        [8, 8]
        """
        info = get_worker_info()
        cursor, plan = self._cursor, self._cursor_plan
        if info is not None:
            if cursor is None or plan is None:
                epoch, weights, _ = self._now()
                state = self._state(epoch, 0, weights)
                return {**state, "worker": info.id, "num_workers": info.num_workers}
            state = self._state(cursor.epoch, cursor.next, plan.weights)
            state.update(worker=cursor.worker, num_workers=cursor.step, next_batch=cursor.next)
            return state
        epoch, seen, weights = self._position(batches_seen)
        return self._state(epoch, seen, weights)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`: the next iteration reads the rest of that epoch with
        its weights (or the next epoch if it was complete). A state of another mixture (other
        sources, lengths, seeds, mode, stopping rule, batch size or world size) is refused,
        with the differences named.

        >>> ds = MixDataset([PackDataset("train.h5", 16)] * 2, [1, 1], stop=64)
        >>> ds.load_state_dict(ds.state_dict(batches_seen=3))
        >>> len(list(ds))  # the one batch of epoch 0 not yet read
        1
        """
        if not isinstance(state, dict) or state.get("format") != MIX_STATE_FORMAT:
            raise InvalidArgumentError("not a MixDataset state_dict")
        try:
            self._load(state)
        except PackreadError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"the MixDataset state_dict is incomplete or damaged ({type(e).__name__}: {e})"
            ) from e

    def _load(self, state: dict[str, Any]) -> None:
        epoch = check_int("epoch", state.get("epoch"), 0)
        weights = check_weights(state.get("weights"), self.names)
        saved_seed = int(state["seed"])
        mine = self.plan(epoch, weights).settings()
        differ = [f"{k}={state.get(k)!r} (now {v!r})" for k, v in mine.items() if state.get(k) != v]
        theirs = [
            {k: v for k, v in s.items() if k not in ("samples_read", "passes")}
            for s in state.get("sources", [])
        ]
        ours = [s.settings() for s in self._sources]
        if theirs != ours:
            differ.append(f"sources={theirs!r} (now {ours!r})")
        if saved_seed != self.seed:
            differ.append(f"seed={saved_seed} (now {self.seed})")
        if differ:
            raise InvalidArgumentError(
                "the state was saved from another mixture, so its order does not apply here: "
                + ", ".join(differ)
            )
        plan = self.plan(epoch, weights)
        seen = check_position(state.get("batches_seen"), plan.num_batches)
        read = [int(s["samples_read"]) for s in state["sources"]]
        if read != plan.read(seen).tolist():
            raise InvalidArgumentError(
                f"the state's samples read per source {read} are not what {seen} batches of "
                f"epoch {epoch} read ({plan.read(seen).tolist()}): it was changed, or saved by "
                "another version"
            )
        self._check_sources(weights)
        if worker_state(state, "MixDataset"):
            self._resume = state
            return
        # A function of the epoch decides the epochs after; fixed weights are the state's.
        only = epoch if self._weights_fn is not None else None
        self._clock.set_settings({"weights": list(weights), "epoch": only})
        self._clock.set_pending(epoch, seen)

    def realised(self, batches_seen: int | None = None) -> dict[str, SourceRead]:
        """Per source, what was read so far this epoch, all ranks together and this rank: up to
        ``batches_seen`` batches if given; else, when DataLoader workers read the epoch, the
        batches that reached this process (the loader reads a few ahead of your loop), and the
        batches yielded when this process reads it.

        >>> ds = MixDataset([PackDataset("train.h5", 16)] * 2, [3, 1], stop=64)
        >>> for _ in ds: pass
        >>> {name: r.samples for name, r in ds.realised().items()}
        {'0': 48, '1': 16}
        """
        if get_worker_info() is not None and self._cursor is not None:
            epoch, seen = self._cursor.epoch, self._cursor.next
            weights = self._cursor_plan.weights if self._cursor_plan else self._now()[1]
        elif batches_seen is None and self._read_by_workers():
            epoch, weights, _ = self._now()
            arrived_epoch, seen = _ARRIVED.get(self._token, (epoch, 0))
            seen = seen if arrived_epoch == epoch else 0
        else:
            epoch, seen, weights = self._position(batches_seen)
        plan = self.plan(epoch, weights)
        read, mine = plan.read(seen), plan.rank_read(seen)
        total = int(read.sum())
        return {
            s.name: SourceRead(
                name=s.name,
                weight=w,
                samples=int(n),
                fraction=int(n) / total if total else float("nan"),
                rank_samples=int(r),
                num_samples=s.num_samples,
                passes=int(n) / s.num_samples if s.num_samples else 0.0,
            )
            for s, w, n, r in zip(self._sources, weights, read, mine, strict=True)
        }

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        gen, cursor = begin_iteration(self._clock, resume, self._count)
        if resume is not None:
            weights = tuple(float(w) for w in resume["weights"])
        else:
            weights = self._weights_at(cursor.epoch, gen.get("settings"))
        plan = self.plan(cursor.epoch, weights)
        self._cursor, self._cursor_plan = cursor, plan
        return self._iterate(plan, cursor, int(gen["id"]), self._sink_here(get_worker_info()))

    def _sink_here(self, info: Any) -> Sink:
        """Where this process writes batches (made once per process)."""
        if self._sink is None or self._sink[0] != os.getpid():
            sink = make_sink(info, self.transform, self.prefetch, self.pin_memory, self.device)
            self._sink = (os.getpid(), sink)
        return self._sink[1]

    def _order(self, s: int, epoch: int) -> np.ndarray:
        """Source ``s``'s order for its own ``epoch``, kept for the next batches."""
        kept = self._orders.setdefault(s, collections.OrderedDict())
        order = kept.get(epoch)
        if order is None:
            order = kept[epoch] = self._sources[s].order(epoch)
            while len(kept) > _ORDERS_KEPT:
                kept.popitem(last=False)
        return order

    def _pieces(self, epoch: int, part: Part) -> list[_Piece]:
        """The reads of ``part`` of a batch: one per pass of the source's stream it spans."""
        n = self._sources[part.source].num_samples
        pieces, pos, end, row = [], part.start, part.start + part.length, part.row
        while pos < end:
            p = pos // n
            lo, hi = pos - p * n, min(end, (p + 1) * n) - p * n
            e = source_epoch(epoch, p)
            pieces.append((part.source, e, self._order(part.source, e)[lo:hi], row))
            row += hi - lo
            pos += hi - lo
        return pieces

    def _start(self, plan: MixPlan, j: int, sink: Sink) -> Started:
        """Starts reading batch ``j``: straight into one batch's memory, each piece into its
        rows, where no source transforms its samples; else each source's samples apart, put
        together once its transform has seen them."""
        pieces = [x for part in plan.parts(j) for x in self._pieces(plan.epoch, part)]
        sources = sorted({s for s, *_ in pieces})
        rows = plan.rows(j)
        readers = {s: self._sources[s].slot.get() for s in sources}
        alone = len(sources) == 1 and self._sources[sources[0]].transform is None
        if alone or self._same_arrays:
            started = claim_out(readers[sources[0]], rows, sink)
            if started.out is not None:
                out = started.out
                outs: list[Any] = []
                for _, _, idx, row in pieces:
                    if isinstance(out, dict):
                        outs.append({k: v[row : row + len(idx)] for k, v in out.items()})
                    else:
                        outs.append(out[row : row + len(idx)])
                # packread's readers: every piece in one job on the pool.
                together = []
                for (s, e, idx, _), part_out in zip(pieces, outs, strict=True):
                    prepare = getattr(readers[s], "_read_into_args", None)
                    args = None
                    if prepare is not None:
                        args = prepare(idx, part_out, e if varies_by_epoch(readers[s]) else 0)
                    if args is None:
                        break
                    together.append((readers[s], args))
                if len(together) == len(pieces):
                    started.handle = read_together(together, out)
                    return started
                handles = [
                    begin(readers[s], idx, part_out, e)
                    for (s, e, idx, _), part_out in zip(pieces, outs, strict=True)
                ]
                started.handle = _Together(handles, lambda _results: out)
                return started
        handles = [begin(readers[s], idx, None, e) for s, e, idx, _ in pieces]
        owners = [s for s, *_ in pieces]

        def combine(results: list[Any]) -> Any:
            grouped: dict[int, list[Any]] = {}
            for s, batch in zip(owners, results, strict=True):
                grouped.setdefault(s, []).append(to_torch(batch))
            made = []
            for s, parts in grouped.items():
                batch = _concat(parts)
                transform = self._sources[s].transform
                made.append(transform(batch) if transform is not None else batch)
            try:
                return _concat(made)
            except (RuntimeError, KeyError, TypeError) as e:
                raise InvalidArgumentError(
                    f"the sources' batches of batch {j} do not fit together (mode='sample' "
                    f"needs the same keys, shapes and dtypes after each source's transform): {e}"
                ) from e

        return Started(_Together(handles, combine), rows)

    def _iterate(self, plan: MixPlan, cursor: Cursor, gen_id: int, sink: Sink) -> Iterator[Any]:
        todo = (
            (j, lambda j=j: self._start(plan, j, sink)) for j in cursor.positions(plan.num_batches)
        )
        device = Device(self.device) if self.device and not isinstance(sink, WorkerSlabs) else None
        in_worker = get_worker_info() is not None

        def finish(started: Started) -> Any:
            return finish_batch(started, sink, self.transform)

        seen: dict[int, set[int]] = {}

        def deliver(j: int, item: Any) -> Any:
            if cursor.advance(j):  # the first batch: the epoch is used
                self._clock.mark_used(gen_id)
            if in_worker:
                # Samples found not to decode (on_error="skip"), sent with the batch.
                for s in {p.source for p in plan.parts(j)}:
                    found = getattr(self._sources[s].slot.get(), "errors", None) or {}
                    done = seen.setdefault(s, set())
                    new = {k: v for k, v in found.items() if k not in done}
                    if new:
                        done.update(new)
                        item = _WithErrors(item, self._errors_token(s), new)
            if self.mode == "batch":
                s = plan.parts(j)[0].source
                item = SourceBatch(s, self.names[s], item)
            return _Counted(item, self._token, plan.epoch) if in_worker else item

        yield from run_batches(todo, finish, deliver, self.prefetch, device, self._meter())

    def __getstate__(self) -> dict[str, Any]:
        self._sharding()
        state = dict(self.__dict__)
        state.update(_cursor=None, _cursor_plan=None, _sink=None, _orders={}, _rec_at=None)
        return state

    def _slots(self) -> list[Any]:
        return [s.slot for s in self._sources]

    def source(self, name: str | int) -> BatchReader:
        """The reader of a source (by name or position), opened in this process.

        >>> ds = MixDataset({"a": PackDataset("train.h5", 16)}, [1], stop=64)
        >>> len(ds.source("a"))
        64
        """
        if isinstance(name, str):
            if name not in self.names:
                raise InvalidArgumentError(f"no source {name!r}: the sources are {self.names}")
            return self._sources[self.names.index(name)].slot.get()
        if not 0 <= int(name) < len(self._sources):
            raise InvalidArgumentError(f"no source {name}: there are {len(self._sources)}")
        return self._sources[int(name)].slot.get()

    def __repr__(self) -> str:
        _, weights, _ = self._now()
        mix = ", ".join(f"{n}={w:.3g}" for n, w in zip(self.names, weights, strict=True))
        return (
            f"MixDataset({mix}; mode={self.mode!r}, stop={self.stop!r}, "
            f"batch_size={self.batch_size}, {len(self)} batches per epoch on rank "
            f"{self._sharding()[0]}/{self._sharding()[1]})"
        )


def _show(schema: Any) -> str:
    if isinstance(schema, dict):
        return "{" + ", ".join(f"{k!r}: {_show(v)}" for k, v in schema.items()) + "}"
    if isinstance(schema, tuple) and len(schema) == 2:
        return f"{schema[1]} samples of shape {schema[0]}"
    return str(schema)
