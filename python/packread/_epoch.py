"""The epoch arithmetic of :mod:`packread.torch`, in numpy alone: importing this module imports
no torch, so the order, the cut and the resume positions can be computed and tested anywhere.

:class:`packread.torch.PackDataset` reads every epoch through these functions, by the rules
its module docstring states:

1. One permutation of the ``N`` samples from ``(seed, epoch)`` (:func:`epoch_order`; the
   identity in shuffle mode ``"none"``), identical on every rank.
2. Ranks: with ``drop_last=False`` each of the ``W`` ranks gets ``ceil(N / W)`` samples, the
   permutation padded by repeating it from its start (as ``DistributedSampler`` pads); with
   ``drop_last=True`` each gets ``floor(N / (W * B)) * B``, the rest dropped. Rank ``r``
   takes the ``r``-th contiguous block (:meth:`EpochPlan.rank_indices`).
3. Batches: the rank's block cut into batches of ``B`` in order, the last one shorter unless
   ``drop_last`` (:meth:`EpochPlan.batch`); every rank has :attr:`EpochPlan.num_batches`.
4. Workers: an iteration that starts at batch ``s`` (0, or where a saved state stopped) with
   ``K`` DataLoader workers has worker ``k`` read batches ``s + k, s + k + K...``
   (:func:`worker_batches`); the DataLoader asks its workers in turn, so it yields batches
   ``s, s + 1, s + 2...``.
5. Resume: a state records ``(seed, epoch, batches seen)`` and the settings the order depends
   on (:meth:`EpochPlan.state`, :meth:`EpochPlan.mismatches`); a position at the end of an
   epoch resumes at the start of the next (:func:`resume_point`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from . import _packread
from ._common import BatchReader
from .errors import InvalidArgumentError, PackreadTypeError

__all__ = [
    "SHUFFLE_MODES",
    "STATE_FORMAT",
    "Cursor",
    "EpochPlan",
    "check_int",
    "check_position",
    "default_window",
    "epoch_order",
    "first_batch",
    "resume_point",
    "worker_batches",
]

#: The values of ``shuffle_mode``.
SHUFFLE_MODES = ("sample", "chunk", "shard", "none")
#: The ``format`` of a :meth:`EpochPlan.state` (``PackDataset.state_dict``).
STATE_FORMAT = "packread.PackDataset/1"
_U64 = 2**64 - 1


def check_int(name: str, value: Any, low: int) -> int:
    """``value`` as an ``int``; a ``PackreadTypeError`` unless it is an integer (a ``bool`` is
    not), an ``InvalidArgumentError`` if it is below ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise PackreadTypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < low:
        raise InvalidArgumentError(f"{name} must be >= {low}, not {value}")
    return int(value)


# --------------------------------------------------------------------------------------------
# The order and the cut


def epoch_order(
    num_samples: int,
    seed: int,
    epoch: int,
    shuffle_mode: str = "sample",
    samples_per_chunk: int = 1,
    chunk_window: int = 1,
) -> NDArray[np.int64]:
    """The permutation of ``range(num_samples)`` for ``(seed, epoch)``, the same on every rank.

    ``"sample"``: uniform. ``"chunk"``: whole chunks of ``samples_per_chunk`` samples shuffled,
    then the samples within each window of ``chunk_window`` chunks. ``"none"``: file order.
    ``seed`` is an unsigned 64-bit integer; ``epoch`` is taken modulo ``2**64``.
    """
    if shuffle_mode == "none":
        return np.arange(num_samples, dtype=np.int64)
    chunk = samples_per_chunk if shuffle_mode == "chunk" else 1
    return _packread.epoch_order(num_samples, seed, epoch & _U64, chunk, chunk_window)


@dataclass(frozen=True)
class EpochPlan:
    """How one rank reads every epoch: the settings its order and its cut depend on.

    ``seed`` is an unsigned 64-bit integer (``PackDataset`` maps a negative seed to one).
    """

    num_samples: int
    batch_size: int
    seed: int = 0
    shuffle_mode: str = "sample"
    samples_per_chunk: int = 1
    chunk_window: int = 1
    rank: int = 0
    world_size: int = 1
    drop_last: bool = False
    #: ``"shard"`` mode: samples in each shard, shards whose samples are shuffled together,
    #: and the workers of this rank (the epoch is dealt to them).
    shard_lengths: tuple[int, ...] | None = None
    shard_window: int = 1
    workers: int = 1

    def __post_init__(self) -> None:
        check_int("num_samples", self.num_samples, 0)
        check_int("batch_size", self.batch_size, 1)
        check_int("samples_per_chunk", self.samples_per_chunk, 1)
        check_int("chunk_window", self.chunk_window, 1)
        check_int("world_size", self.world_size, 1)
        if not 0 <= check_int("rank", self.rank, 0) < self.world_size:
            raise InvalidArgumentError(
                f"rank {self.rank} is not in range(world_size={self.world_size})"
            )
        if self.shuffle_mode not in SHUFFLE_MODES:
            raise InvalidArgumentError(
                f"shuffle_mode must be one of {SHUFFLE_MODES}, not {self.shuffle_mode!r}"
            )
        check_int("shard_window", self.shard_window, 1)
        check_int("workers", self.workers, 1)
        if self.shuffle_mode == "shard" and self.shard_lengths is None:
            raise InvalidArgumentError(
                "shuffle_mode='shard' needs a reader of several files: a list or glob of HDF5 "
                "files or ZIP archives"
            )

    @property
    def per_rank(self) -> int:
        """Samples each rank reads per epoch: ``ceil(N / W)``, or ``floor(N / (W * B)) * B``
        with ``drop_last``."""
        n, b, world = self.num_samples, self.batch_size, self.world_size
        return (n // (world * b)) * b if self.drop_last else -(-n // world)

    @property
    def num_batches(self) -> int:
        """Batches each rank reads per epoch (``len(PackDataset)``)."""
        per_rank, b = self.per_rank, self.batch_size
        return per_rank // b if self.drop_last else -(-per_rank // b)

    def order(self, epoch: int) -> NDArray[np.int64]:
        """The permutation of the samples for ``epoch`` (:func:`epoch_order`); in ``"shard"``
        mode, the shards' samples in the order of the shards' permutation, which ranks are
        cut from (the samples of each worker's block are then shuffled within windows)."""
        if self.shuffle_mode == "shard":
            lengths = np.asarray(self.shard_lengths, dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(lengths)])
            shards = epoch_order(len(lengths), self.seed, epoch)
            parts = [np.arange(starts[k], starts[k + 1], dtype=np.int64) for k in shards]
            return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        return epoch_order(
            self.num_samples,
            self.seed,
            epoch,
            self.shuffle_mode,
            self.samples_per_chunk,
            self.chunk_window,
        )

    def rank_indices(self, epoch: int) -> NDArray[np.int64]:
        """The samples this rank reads in ``epoch``, in order: its contiguous block of the
        permutation, padded by repeating the permutation from its start (or cut short with
        ``drop_last``) so that every rank reads :attr:`per_rank` samples."""
        if self.shuffle_mode == "shard":
            return _packread.shard_order(
                list(self.shard_lengths or ()),
                self.seed,
                epoch & _U64,
                self.batch_size,
                self.rank,
                self.world_size,
                self.workers,
                self.drop_last,
                self.shard_window,
            )
        per_rank = self.per_rank
        order = self.order(epoch)
        total = per_rank * self.world_size
        order = order[:total] if total <= len(order) else np.resize(order, total)
        return order[self.rank * per_rank : (self.rank + 1) * per_rank]

    def batch(self, indices: NDArray[np.int64], position: int) -> NDArray[np.int64]:
        """Batch ``position`` of a rank's ``indices`` (:meth:`rank_indices`)."""
        b = self.batch_size
        return indices[position * b : (position + 1) * b]

    def batches(
        self, indices: NDArray[np.int64], positions: Iterable[int]
    ) -> Iterator[tuple[int, NDArray[np.int64]]]:
        """``(position, batch)`` for each of ``positions``, lazily."""
        for j in positions:
            yield j, self.batch(indices, j)

    def worker_epoch(
        self, epoch: int, start: int = 0, worker: int = 0, num_workers: int = 1
    ) -> list[NDArray[np.int64]]:
        """The batches worker ``worker`` of ``num_workers`` reads in ``epoch`` when the
        iteration starts at batch ``start`` (:func:`worker_batches`)."""
        indices = self.rank_indices(epoch)
        positions = worker_batches(self.num_batches, start, worker, num_workers)
        return [batch for _, batch in self.batches(indices, positions)]

    # -- saved states -------------------------------------------------------------------------

    def state(self, epoch: int, position: int) -> dict[str, Any]:
        """A ``PackDataset.state_dict``: ``(seed, epoch, batches seen)`` and the settings the
        order depends on."""
        chunked = self.shuffle_mode == "chunk"
        sharded = self.shuffle_mode == "shard"
        return {
            "format": STATE_FORMAT,
            "seed": self.seed,
            "epoch": epoch,
            "batches_seen": position,
            "batch_size": self.batch_size,
            "num_samples": self.num_samples,
            "world_size": self.world_size,
            "drop_last": self.drop_last,
            "shuffle_mode": self.shuffle_mode,
            # Only chunk mode's order depends on the chunking.
            "samples_per_chunk": self.samples_per_chunk if chunked else None,
            "chunk_window": self.chunk_window if chunked else None,
            # Shard mode's order depends on the shards, the window and the workers.
            "shard_lengths": list(self.shard_lengths or ()) if sharded else None,
            "shard_window": self.shard_window if sharded else None,
            "shard_workers": self.workers if sharded else None,
        }

    def mismatches(self, state: dict[str, Any]) -> list[str]:
        """The settings ``state`` was saved with that differ from this plan's, as
        ``"name=saved (now current)"`` (empty when the saved order applies here). The seed,
        the epoch and the position are free: a state brings its own."""
        mine = self.state(0, 0)
        # The workers of shard mode are checked when the epoch is read (only then known).
        free = ("format", "seed", "epoch", "batches_seen", "shard_workers")
        differ = [k for k in mine if k not in free and state.get(k) != mine[k]]
        return [f"{k}={state.get(k)!r} (now {mine[k]!r})" for k in differ]


#: What one sample of a variable-length array takes in a decoded chunk: its HDF5 heap ID (a
#: u32 length, an 8-byte heap collection address, a u32 index); the sequence is read apart.
RAGGED_SAMPLE_BYTES = 16


def _chunk_bytes(shape: tuple[int | None, ...], dtype: np.dtype[Any]) -> int:
    """What one sample of an array takes in the reader's decoded chunks."""
    if None in shape:  # variable-length: the chunk holds heap IDs
        return RAGGED_SAMPLE_BYTES
    return math.prod(cast("tuple[int, ...]", shape)) * dtype.itemsize


def default_window(reader: BatchReader, samples_per_chunk: int) -> int:
    """Chunks per shuffle window in ``"chunk"`` mode: as many as the reader's chunk cache
    holds, so that each chunk stays decoded while its window is read."""
    if samples_per_chunk <= 1:
        return 1
    shapes, dtypes = reader.shape, reader.dtype
    if isinstance(dtypes, dict):
        sample = sum(_chunk_bytes(shapes[k], dtypes[k]) for k in dtypes)
    else:
        sample = _chunk_bytes(shapes, dtypes)
    budget = int(getattr(reader, "cache_bytes", 0))
    return max(1, budget // max(sample * samples_per_chunk, 1))


# --------------------------------------------------------------------------------------------
# Workers and positions


def first_batch(start: int, worker: int) -> int:
    """The first batch worker ``worker`` reads in an iteration that starts at batch ``start``."""
    return start + worker


def worker_batches(num_batches: int, start: int, worker: int = 0, num_workers: int = 1) -> range:
    """The batches (positions in the rank's epoch) worker ``worker`` of ``num_workers`` reads in
    an iteration that starts at batch ``start``: ``start + worker``, then every
    ``num_workers``-th. Taken in turn, one from each worker, they are ``start, start + 1...``."""
    return range(first_batch(start, worker), num_batches, num_workers)


def resume_point(epoch: int, position: int, num_batches: int) -> tuple[int, int]:
    """``(epoch, first batch)`` an iteration resumes at from a state saved at ``position`` of
    ``epoch``: that epoch's remaining batches, or the next epoch when none remain."""
    if position >= num_batches:
        return epoch + 1, 0
    return epoch, position


def check_position(batches_seen: Any, num_batches: int) -> int:
    """``batches_seen`` as a position in an epoch of ``num_batches`` batches (at most all)."""
    seen = check_int("batches_seen", batches_seen, 0)
    if seen > num_batches:
        raise InvalidArgumentError(
            f"batches_seen={seen} is more than the {num_batches} batches of an epoch"
        )
    return seen


class Cursor:
    """Where one iteration is: its epoch and the next batch it will yield (it yields every
    ``step``-th batch from there, ``step`` being the number of workers)."""

    __slots__ = ("epoch", "next", "step", "worker", "yielded")

    def __init__(self, epoch: int, first: int, step: int, worker: int) -> None:
        self.epoch, self.next, self.step, self.worker = epoch, first, step, worker
        self.yielded = 0

    def positions(self, num_batches: int) -> range:
        """The batches left to yield, from :attr:`next`."""
        return range(self.next, num_batches, self.step)

    def advance(self, position: int) -> bool:
        """Records that batch ``position`` was yielded: ``True`` for the iteration's first."""
        self.next = position + self.step
        self.yielded += 1
        return self.yielded == 1
