"""The arithmetic of :class:`packread.torch.MixDataset`, in numpy alone (importing it imports no
torch): which source each sample (or batch) of an epoch comes from, where in its own stream,
how long an epoch is under each stopping rule, and what a saved state holds.

The rules (the dataset's docstring states them for users):

1. **Units.** A rank's epoch is a sequence of *units*: samples (``mode="sample"``) or whole
   batches (``mode="batch"``). Batch ``j`` of a rank is units ``[j * B, (j + 1) * B)`` in
   sample mode, unit ``j`` in batch mode.
2. **Choices.** Unit ``u`` comes from the source whose event is the ``u``-th in time, source
   ``s`` having events at times ``(k + phase_s) / w_s`` (``k = 0, 1...``), ``w`` the
   normalised weights and the phases drawn uniformly in ``[0, 1)`` from the seed; equal
   times go to the lower source. This is a low-discrepancy sequence: among any first ``u``
   units source ``s`` has ``w_s * u`` choices within the number of sources, so the mix holds
   in every stretch of the epoch, not only on average. It is a pure function of
   ``(seed, weights)`` (the same every epoch, so an epoch's length is too; the epoch moves
   each source to new permutations), and every rank has the same one: rank ``r``'s batch ``j`` has
   the same sources as every other rank's batch ``j`` (in batch mode, every rank reads the
   same source at each step, which DDP models with a head per source need).
3. **Streams.** Each source is read as an endless stream: its own order for pass 0, then pass
   1, ... (the source's permutation of its samples with its own seed, for the source epoch
   :func:`source_epoch` ``(epoch, pass)``). Within step ``j`` (batch ``j`` of every rank) the
   ranks take a source's samples in rank order: rank ``r`` reads
   ``[W * C_s + r * c_s, W * C_s + (r + 1) * c_s)`` of source ``s``'s stream, ``C_s`` its
   choices before the step on one rank and ``c_s`` in it (times ``B`` in batch mode). So the
   ranks together read each stream in order, without gaps or repeats.
4. **Epoch length** (``stop``), over all ranks:

   - ``"first_exhausted"``: as many whole steps as no source needs a sample beyond its first
     pass (no sample is read twice; the source that runs out first has less than one step's
     share left unread).
   - ``"all_exhausted"``: the fewest whole steps after which every source of non-zero weight
     has been read wholly at least once; sources that run out first restart with their next
     pass (they are oversampled).
   - an ``int`` ``N``: ``N`` samples, ``ceil(N / W)`` a rank, the last batch shorter (or
     ``floor(N / (W * B)) * B`` a rank with ``drop_last``); sources restart as needed.

5. **Batches.** In sample mode a batch holds each source's samples together, in source order
   (the order of samples within a batch does not change a mean loss).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np
from numpy.typing import NDArray

from ._epoch import check_int
from .errors import InvalidArgumentError, PackreadTypeError

__all__ = [
    "MIX_MODES",
    "MIX_STATE_FORMAT",
    "STOP_RULES",
    "MixPlan",
    "Part",
    "check_stop",
    "check_weights",
    "source_epoch",
]

#: The values of ``mode``.
MIX_MODES = ("sample", "batch")
#: The named stopping rules (an ``int`` is a number of samples).
STOP_RULES = ("first_exhausted", "all_exhausted")
#: The ``format`` of a ``MixDataset.state_dict``.
MIX_STATE_FORMAT = "packread.MixDataset/1"

Weights = Union[Sequence[float], Mapping[str, float], Callable[[int], Any]]


def source_epoch(epoch: int, passes: int) -> int:
    """The epoch a source's order (and random crops) is drawn for in pass ``passes`` of its
    stream, in epoch ``epoch`` of the mixture: ``epoch * 2**32 + passes``. In the mixture's
    epoch 0 a source's passes are its own epochs 0, 1, 2..."""
    return (epoch << 32) + passes


def check_weights(weights: Any, names: Sequence[str]) -> tuple[float, ...]:
    """``weights`` (a sequence in the sources' order, or a mapping by source name) as floats
    summing to 1; an error that says why for a wrong count, a missing or unknown name, a
    negative, infinite or NaN weight, or weights that are all zero."""
    if isinstance(weights, Mapping):
        unknown = [k for k in weights if k not in names]
        missing = [k for k in names if k not in weights]
        if unknown or missing:
            raise InvalidArgumentError(
                f"weights name sources {sorted(map(str, weights))}, the mixture's are "
                f"{list(names)}"
                + (f": unknown {unknown}" if unknown else "")
                + (f": missing {missing}" if missing else "")
            )
        values = [weights[k] for k in names]
    elif isinstance(weights, (str, bytes)) or not isinstance(weights, (Sequence, np.ndarray)):
        raise PackreadTypeError(
            f"weights must be a sequence of numbers, a dict by source name or a function of "
            f"the epoch, not {type(weights).__name__}"
        )
    else:
        values = list(weights)
    if len(values) != len(names):
        raise InvalidArgumentError(f"{len(values)} weights for {len(names)} sources {list(names)}")
    out = []
    for name, v in zip(names, values, strict=True):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise PackreadTypeError(f"the weight of {name!r} must be a number, not {v!r}")
        v = float(v)
        if not math.isfinite(v) or v < 0:
            raise InvalidArgumentError(
                f"the weight of {name!r} is {v}: weights are finite and >= 0 (0 turns a source off)"
            )
        out.append(v)
    total = sum(out)
    if total <= 0:
        raise InvalidArgumentError(
            f"the weights {out} are all zero: at least one source must have a weight"
        )
    return tuple(v / total for v in out)


def check_stop(stop: Any) -> str | int:
    """``stop`` as a rule name or a positive number of samples."""
    if isinstance(stop, str):
        if stop not in STOP_RULES:
            raise InvalidArgumentError(
                f"stop must be one of {STOP_RULES} or a number of samples, not {stop!r}"
            )
        return stop
    return check_int("stop", stop, 1)


@dataclass(frozen=True)
class Part:
    """Samples one batch reads from one source: ``length`` samples from position ``start`` of
    the source's stream (all ranks' reads counted), written at ``row`` of the batch."""

    source: int
    start: int
    length: int
    row: int


@dataclass(frozen=True)
class MixPlan:
    """One rank's epoch of a mixture: the settings its choices and its length depend on.

    ``weights`` are normalised (:func:`check_weights`); ``lengths`` the sources' samples.
    """

    lengths: tuple[int, ...]
    weights: tuple[float, ...]
    batch_size: int
    seed: int = 0
    epoch: int = 0
    mode: str = "sample"
    stop: str | int = "first_exhausted"
    rank: int = 0
    world_size: int = 1
    drop_last: bool = False
    _phases: NDArray[np.float64] = field(init=False, repr=False, compare=False)
    _active: NDArray[np.int64] = field(init=False, repr=False, compare=False)
    _length: tuple[int, int] = field(init=False, repr=False, compare=False)
    #: The parts of the batches of the last block made (:meth:`parts`).
    _block: dict[int, list[list[Part]]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in MIX_MODES:
            raise InvalidArgumentError(f"mode must be one of {MIX_MODES}, not {self.mode!r}")
        check_int("batch_size", self.batch_size, 1)
        check_int("world_size", self.world_size, 1)
        if not 0 <= check_int("rank", self.rank, 0) < self.world_size:
            raise InvalidArgumentError(
                f"rank {self.rank} is not in range(world_size={self.world_size})"
            )
        if len(self.weights) != len(self.lengths):
            raise InvalidArgumentError(
                f"{len(self.weights)} weights for {len(self.lengths)} sources"
            )
        # The phases depend on the seed alone: an epoch's choices (and so its length) are the
        # same every epoch for the same weights.
        rng = np.random.Generator(np.random.PCG64([self.seed & (2**64 - 1), 0x6D6978]))
        object.__setattr__(self, "_phases", rng.random(len(self.weights)))
        w = np.asarray(self.weights, dtype=np.float64)
        object.__setattr__(self, "_active", np.nonzero(w > 0)[0])
        object.__setattr__(self, "_length", self._epoch_length())
        object.__setattr__(self, "_block", {})

    # -- the choices ----------------------------------------------------------------------

    @property
    def units_per_batch(self) -> int:
        """Units in a whole batch: ``B`` samples, or one batch."""
        return self.batch_size if self.mode == "sample" else 1

    @property
    def _per_unit(self) -> int:
        """Samples a unit takes from its source's stream on one rank."""
        return 1 if self.mode == "sample" else self.batch_size

    def _window(self, a: int, b: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(counts, choices)``: each source's choices among units ``[0, a)``, and the source
        of each unit of ``[a, b)`` (rule 2 of the module docstring).

        Only the events near the window are made: those of source ``s`` before time ``t0`` are
        counted, not listed (each is earlier than every event listed), and listing up to
        ``t1`` gives at least ``b`` events in all."""
        n = len(self.weights)
        counts = np.zeros(n, dtype=np.int64)
        active = self._active
        m = len(active)
        t0 = max(0.0, float(a - m - 2))
        t1 = float(b + m + 2)
        times, sources = [], []
        for s in active.tolist():
            w, phase = self.weights[s], float(self._phases[s])

            def at(k: int, w: float = w, phase: float = phase) -> float:
                return (k + phase) / w

            lo = max(0, math.floor(t0 * w - phase) - 1)
            while lo > 0 and at(lo - 1) >= t0:
                lo -= 1
            while at(lo) < t0:
                lo += 1
            hi = max(lo, math.ceil(t1 * w - phase) + 2)
            counts[s] = lo
            k = np.arange(lo, hi, dtype=np.float64)
            times.append((k + phase) / w)
            sources.append(np.full(hi - lo, s, dtype=np.int64))
        t = np.concatenate(times)
        src = np.concatenate(sources)
        order = np.lexsort((src, t))
        seq = src[order]
        before = int(counts.sum())
        head = seq[: a - before]
        counts += np.bincount(head, minlength=n)
        return counts, seq[a - before : b - before]

    def counts_before(self, unit: int) -> NDArray[np.int64]:
        """Each source's choices among this rank's units ``[0, unit)``."""
        return self._window(unit, unit)[0]

    def choices(self, a: int, b: int) -> NDArray[np.int64]:
        """The source of each of this rank's units ``[a, b)``."""
        return self._window(a, b)[1]

    # -- the length of an epoch -----------------------------------------------------------

    def _consumed_at_step(self, steps: int) -> NDArray[np.int64]:
        """Samples each source's stream gave all ranks in the first ``steps`` whole steps."""
        return self.counts_before(steps * self.units_per_batch) * self._per_unit * self.world_size

    def _epoch_length(self) -> tuple[int, int]:
        """``(batches, rows of the last batch)`` of each rank per epoch (rule 4)."""
        b, world = self.batch_size, self.world_size
        if isinstance(self.stop, int):
            per_rank = (self.stop // (world * b)) * b if self.drop_last else -(-self.stop // world)
            batches = -(-per_rank // b)
            return batches, per_rank - (batches - 1) * b if batches else 0
        lengths = np.asarray(self.lengths, dtype=np.int64)
        active = self._active
        share = world * self.units_per_batch * self._per_unit  # samples a step reads
        slack = len(active) + 2
        if self.stop == "first_exhausted":
            hi = min(
                int((lengths[s] / share + slack) / self.weights[s]) + 2 for s in active.tolist()
            )

            def fits(steps: int) -> bool:
                return bool(np.all(self._consumed_at_step(steps)[active] <= lengths[active]))

            lo = 0  # fits(lo) holds; find the largest
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if fits(mid):
                    lo = mid
                else:
                    hi = mid - 1
            return lo, b if lo else 0
        hi = max(int((lengths[s] / share + slack) / self.weights[s]) + 2 for s in active.tolist())

        def done(steps: int) -> bool:
            return bool(np.all(self._consumed_at_step(steps)[active] >= lengths[active]))

        lo = 0  # find the smallest with done()
        while lo < hi:
            mid = (lo + hi) // 2
            if done(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo, b if lo else 0

    @property
    def num_batches(self) -> int:
        """Batches each rank reads this epoch (``len(MixDataset)``)."""
        return self._length[0]

    def rows(self, j: int) -> int:
        """Samples in batch ``j`` (the last may be shorter with ``stop=N``)."""
        batches, last = self._length
        if not 0 <= j < batches:
            raise IndexError(f"batch {j} of an epoch of {batches}")
        return last if j == batches - 1 else self.batch_size

    # -- what each batch reads -----------------------------------------------------------

    #: Batches whose parts are made together (one window of choices for all of them).
    BLOCK = 64

    def parts(self, j: int) -> list[Part]:
        """What this rank's batch ``j`` reads, in source order (rule 3). The parts of
        :attr:`BLOCK` batches are made at once, from one window of choices."""
        self.rows(j)  # in range
        k = j // self.BLOCK
        block = self._block.get(k)
        if block is None:
            block = self._make_block(k)
            self._block.clear()
            self._block[k] = block
        return block[j - k * self.BLOCK]

    def _make_block(self, k: int) -> list[list[Part]]:
        first = k * self.BLOCK
        last = min(first + self.BLOCK, self.num_batches)
        rows = [self.rows(j) for j in range(first, last)]
        world, rank, b, n = self.world_size, self.rank, self.batch_size, len(self.weights)
        if self.mode == "batch":
            counts, choice = self._window(first, last)
            out = []
            for i, s in enumerate(choice.tolist()):
                out.append([Part(s, (world * int(counts[s]) + rank) * b, rows[i], 0)])
                counts[s] += 1
            return out
        a = first * b
        counts, choice = self._window(a, a + sum(rows))
        out, at = [], 0
        for r in rows:
            here = np.bincount(choice[at : at + r], minlength=n)
            parts, row = [], 0
            for s in np.nonzero(here)[0].tolist():
                c = int(here[s])
                parts.append(Part(s, world * int(counts[s]) + rank * c, c, row))
                row += c
            counts += here
            out.append(parts)
            at += r
        return out

    def batch_sources(self, j: int) -> NDArray[np.int64]:
        """The source of each sample of this rank's batch ``j``."""
        out = np.empty(self.rows(j), dtype=np.int64)
        for p in self.parts(j):
            out[p.row : p.row + p.length] = p.source
        return out

    def rank_read(self, batches: int) -> NDArray[np.int64]:
        """Samples this rank read from each source in its first ``batches`` batches."""
        total, last = self._length
        batches = min(batches, total)
        n = len(self.weights)
        if batches == 0:
            return np.zeros(n, dtype=np.int64)
        short = self.batch_size - last if batches == total else 0
        if self.mode == "sample":
            return self.counts_before(batches * self.batch_size - short)
        counts, choice = self._window(batches - 1, batches)
        counts = counts * self.batch_size
        counts[int(choice[0])] += self.batch_size - short
        return counts

    def read(self, batches: int) -> NDArray[np.int64]:
        """Samples all ranks read from each source in their first ``batches`` batches (every
        rank's batch ``j`` takes the same counts from the same sources)."""
        return self.rank_read(batches) * self.world_size

    # -- saved states ---------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """What the order of an epoch depends on, besides the seed, the epoch and the weights
        (which a state brings)."""
        return {
            "mode": self.mode,
            "stop": self.stop,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "drop_last": self.drop_last,
            "num_samples": list(self.lengths),
        }
