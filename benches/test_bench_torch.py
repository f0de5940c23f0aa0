"""DataLoader epochs: PackDataset against the seed users' own Dataset classes.

For each format of ``benches/workloads.py`` (1,500 samples of 3x256x256 uint8, ~295 MB raw per
format, warm page cache), one call is one whole shuffled epoch, batch 64:

- baseline: the seed's Dataset class under ``DataLoader(batch_size=64, shuffle=True,
  num_workers=2, persistent_workers=True)``;
- packread: ``DataLoader(PackDataset(...), batch_size=None)`` with ``num_workers=0`` (packread's
  threads in the main process) and with 2 persistent workers; for the LZF file (8 samples per
  chunk) also ``shuffle_mode="chunk"``.

Every epoch is checked: the multiset of samples it delivered (an 8-byte fingerprint of each
image) equals the data set's, so an epoch that drops, repeats or garbles a sample fails the run.
Besides epoch times, ``extra_info["epochs"]`` records per variant the main process's CPU seconds
(all its threads, packread's pool included) and the iterating thread's own.

The overlap group simulates a training step with ``time.sleep(step)`` (a GPU's time: no CPU)
for step = 1x and 2x packread's time to read one batch, and records the share of the epoch the
loop spent waiting in ``next()``. The first-batch group times epochs of 16 batches
(data sets of 1,024 samples) from a fresh iterator with a step of 1.5x that read: the wait
for the first batch against one
read, and the share of the run spent waiting, first batch included.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import Variant, compare_epochs

sys.path.insert(0, os.path.dirname(__file__))

from workloads import (
    BATCH,
    FORMATS,
    Epoch,
    Workload,
    one_batch_seconds,
    pack_loader,
    run_epoch,
    seed_loader,
    warm,
    write_workloads,
)

N_SAMPLES = 1500


@pytest.fixture(scope="session")
def workloads() -> dict[str, Workload]:
    # Kept between runs in .bench/ (writing them takes a minute); LAYOUT_VERSION renews them.
    root = Path(__file__).resolve().parent.parent / ".bench" / "data"
    found = write_workloads(str(root), N_SAMPLES)
    for w in found.values():
        warm(w.path)
    return found


#: Samples of the first-batch group's data sets: an epoch of exactly 16 batches, so that a run
#: ends with nothing left in flight to slow the next variant.
N_FIRST = 16 * BATCH


@pytest.fixture(scope="session")
def short_workloads() -> dict[str, Workload]:
    root = Path(__file__).resolve().parent.parent / ".bench" / "data"
    found = write_workloads(str(root), N_FIRST, formats=FIRST_FORMATS)
    for w in found.values():
        warm(w.path)
    return found


FIRST_FORMATS = ["hdf5-gzip", "npy-folder", "zip-raw"]


def _images(batch: Any) -> torch.Tensor:
    """The images of a batch, whichever loader made it."""
    if isinstance(batch, (list, tuple)):  # seed classes: (images, labels)
        batch = batch[0]
    if isinstance(batch, dict):
        batch = batch["images"] if "images" in batch else batch["image"]
    return batch


def fingerprints(images: np.ndarray | torch.Tensor) -> np.ndarray:
    """8 bytes of each image (the start of its first row: random, so practically unique)."""
    arr = images.numpy() if isinstance(images, torch.Tensor) else images
    return np.ascontiguousarray(arr[:, 0, 0, :8]).view("<u8").ravel()


def _expected(w: Workload) -> np.ndarray:
    reader = w.pack(shuffle=False).reader
    parts = []
    for lo in range(0, w.n, 256):
        got = reader.batch(range(lo, min(lo + 256, w.n)))
        parts.append(fingerprints(_images(got)))
    return np.sort(np.concatenate(parts))


class EpochRun:
    """``load(None)`` runs one epoch of ``loader`` and returns its fingerprints; the Epoch
    figures of every call are kept."""

    def __init__(
        self, make_loader: Callable[[], Any], step: float = 0.0, limit: int | None = None
    ) -> None:
        self.loader = make_loader()
        self.step = step
        self.limit = limit
        self.epochs: list[Epoch] = []

    def __call__(self, _: Any) -> np.ndarray:
        seen: list[np.ndarray] = []

        def keep(batch: Any) -> None:
            seen.append(fingerprints(_images(batch)))

        self.epochs.append(run_epoch(self.loader, step=self.step, on_batch=keep, limit=self.limit))
        return np.sort(np.concatenate(seen))


def _epoch_check(expected: np.ndarray) -> Callable[[Any, Any], None]:
    def check(_: Any, got: np.ndarray) -> None:
        assert got.shape == expected.shape, f"{got.size} samples, expected {expected.size}"
        assert np.array_equal(got, expected), "the epoch's samples differ from the data set's"

    return check


def _stats(runs: dict[str, EpochRun]) -> dict[str, dict[str, float]]:
    out = {}
    for label, run in runs.items():
        timed = run.epochs[-max(1, len(run.epochs) - 2) :]  # leave out the warm-up epochs
        out[label] = {
            "samples_per_s": float(np.median([e.rate for e in timed])),
            "main_cpu_s": float(np.median([e.main_cpu for e in timed])),
            "loop_cpu_s": float(np.median([e.loop_cpu for e in timed])),
            "waiting_share": float(np.median([e.waiting / e.seconds for e in timed])),
            "waiting_share_after_first": float(
                np.median([(e.waiting - e.first_wait) / e.seconds for e in timed])
            ),
            "first_wait_s": float(np.median([e.first_wait for e in timed])),
        }
    return out


def _compare_runs(
    benchmark: Any,
    w: Workload,
    runs: dict[str, EpochRun],
    *,
    group: str,
    case: str,
    seed_rounds: int | None = None,
    **timing: Any,
) -> None:
    """The seed Dataset (the baseline; at most ``seed_rounds`` timed rounds) against packread's
    ``runs``, one epoch of ``w`` per call, each checked; the epochs' figures kept."""
    variants = [
        Variant(
            "baseline" if label.startswith("seed") else "packread",
            label,
            run,
            max_rounds=seed_rounds if label.startswith("seed") else None,
        )
        for label, run in runs.items()
    ]
    compare_epochs(
        benchmark,
        group=group,
        variants=variants,
        check=_epoch_check(_expected(w)),
        samples=w.n,
        nbytes=w.n * int(np.prod((3, 256, 256))),
        case=case,
        **timing,
    )
    benchmark.extra_info["epochs"] = _stats(runs)


@pytest.mark.parametrize("fmt", FORMATS)
def test_epoch(benchmark: Any, workloads: dict[str, Workload], fmt: str) -> None:
    w = workloads[fmt]
    runs: dict[str, EpochRun] = {
        "seed Dataset, 2 workers": EpochRun(lambda: seed_loader(w, 2)),
        "PackDataset, num_workers=0": EpochRun(lambda: pack_loader(w, 0)),
        "PackDataset, 2 workers": EpochRun(lambda: pack_loader(w, 2)),
    }
    if fmt == "hdf5-lzf":
        runs["PackDataset, chunk shuffle, num_workers=0"] = EpochRun(
            lambda: pack_loader(w, 0, shuffle_mode="chunk")
        )
    _compare_runs(
        benchmark,
        w,
        runs,
        group=f"epoch-{fmt}",
        case=f"{w.n} samples, batch {BATCH}, {w.nbytes / 1e6:.0f} MB on disk",
        # The seed's h5py reads of the LZF file decode a whole 8-sample chunk per sample
        # (h5py's 1 MiB chunk cache holds none of them): ~20 s an epoch, so fewer rounds of it.
        seed_rounds=3 if fmt == "hdf5-lzf" else None,
        min_rounds=3,
        max_time=30.0,
    )


def _stepped(
    benchmark: Any, w: Workload, step: float, group: str, case: str, **timing: Any
) -> None:
    """The seed Dataset (2 workers) against ``PackDataset`` (``num_workers=0``), one epoch of
    ``w`` per call with a simulated step of ``step`` seconds per batch."""
    runs = {
        "seed Dataset, 2 workers": EpochRun(lambda: seed_loader(w, 2), step=step),
        "PackDataset, num_workers=0": EpochRun(lambda: pack_loader(w, 0), step=step),
    }
    _compare_runs(benchmark, w, runs, group=group, case=case, max_time=20.0, **timing)
    benchmark.extra_info["step_s"] = step


@pytest.mark.parametrize("fmt", FIRST_FORMATS)
def test_first_batch(benchmark: Any, short_workloads: dict[str, Workload], fmt: str) -> None:
    """The first batch after about one batch's read, and no stalls: each call is one epoch of
    16 batches from a fresh iterator, with a simulated step of 1.5x packread's time to read
    one batch (``time.sleep``: a GPU's time, no CPU)."""
    w = short_workloads[fmt]
    one = one_batch_seconds(w)
    _stepped(
        benchmark,
        w,
        1.5 * one,
        f"first-batch-{fmt}",
        f"16 batches, step = 1.5 x {one * 1e3:.1f} ms (packread's read of one batch)",
        min_rounds=5,
    )
    benchmark.extra_info["one_read_s"] = one


@pytest.mark.parametrize("fmt", ["hdf5-gzip", "npz-folder"])
@pytest.mark.parametrize("factor", [1, 2])
def test_overlap(benchmark: Any, workloads: dict[str, Workload], fmt: str, factor: int) -> None:
    w = workloads[fmt]
    step = factor * one_batch_seconds(w)
    _stepped(
        benchmark,
        w,
        step,
        f"overlap-{fmt}-step{factor}x",
        f"step = {factor} x {step * 1e3:.1f} ms (packread's time for one batch)",
        min_rounds=3,
    )
