"""Encoded images (issue 15): packread's ImageReader against the loaders people use for
ImageNet-style JPEGs, on the same files (benches/image_workloads.py: 2,000 JPEGs of about
500x375, quality 90, re-encoded crops of real photographs; ``PACKREAD_BENCH_IMAGES=200`` for a
smoke run), warm page cache. One call of a variant is one whole shuffled epoch, batch 64.

- ``images-train``: ``RandomResizedCrop(224)`` + ``RandomHorizontalFlip``. Baseline: the SURF
  tutorial's ``MultiWorkerZIPDataset(load_encoded=True)`` (our re-implementation) with
  torchvision's transforms under ``DataLoader(batch_size=64, shuffle=True, num_workers=2,
  persistent_workers=True)``; ``torchvision.datasets.ImageFolder`` the same way; the fastest
  Python path (simplejpeg or PyTurboJPEG + OpenCV, same DataLoader); FFCV (.beton,
  ``RandomResizedCropRGBImageDecoder``, 2 workers); DALI's CPU pipeline (2 threads); packread's
  ``ImageReader`` on the ZIP and on the tree, ``batch_async`` in the main process with two
  batches in flight.
- ``images-eval``: ``Resize(256)`` + ``CenterCrop(224)``: packread against the two baselines
  and the simplejpeg path.
- ``images-per-core``: one thread each: ``simplejpeg.decode_jpeg`` of every file (decode only,
  full size; PyTurboJPEG's and PIL's decode beside it) against packread with ``num_threads=1``
  decoding and cropping the same files; the report gives packread's images/s over
  simplejpeg's.

Peers that are not installed (``make bench-peers`` installs them) are left out with a warning
naming why, and recorded in ``extra_info["skipped"]``. Every epoch is checked before and after
timing (``image_workloads.Expect``): batch shapes and dtype, every label as often as the data
set has it, and each label's mean colour, so a broken path fails the run.
``extra_info["epochs"]`` records per loader the main process's CPU seconds (all its threads:
packread's, FFCV's and DALI's included), the iterating thread's, and the DataLoader worker
processes'.
"""

from __future__ import annotations

import io
import itertools
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Variant, compare, torch_threads, warm_page_cache
from PIL import Image

sys.path.insert(0, os.path.dirname(__file__))

from image_workloads import (
    BATCH,
    SIZE,
    WORKERS,
    DaliEpochs,
    Delivered,
    Expect,
    ImageWorkload,
    PackEpochs,
    children_cpu,
    epoch_stats,
    expect_eval,
    expect_full,
    expect_train,
    fast_jpeg,
    ffcv_loader,
    imagefolder,
    missing,
    n_images,
    pack_reader,
    worker_pids,
    write_beton,
    write_image_workload,
    zip_baseline,
)

from packread.cli.bench import run_epoch


@pytest.fixture(scope="session")
def images(bench_dir: Path) -> ImageWorkload:
    w = write_image_workload(str(bench_dir / "images"), n_images())
    warm_page_cache([w.zip_path, *w.files])
    return w


@pytest.fixture(scope="session")
def beton(images: ImageWorkload, bench_dir: Path) -> str | None:
    """The same JPEGs as an FFCV .beton (``None`` without FFCV)."""
    if missing("ffcv"):
        return None
    path = write_beton(images, str(bench_dir / "images.beton"))
    warm_page_cache([path])
    return path


class EpochRun:
    """``load(None)`` runs one epoch of the loader (made on the first call, so that DataLoader
    workers fork before FFCV's and DALI's threads start) and returns what it delivered; the
    epoch's time and CPU figures are kept."""

    def __init__(self, make_loader: Callable[[], Any]) -> None:
        self.make_loader = make_loader
        self.loader: Any = None
        self.epochs: list[dict[str, float]] = []

    def __call__(self, _: Any) -> Delivered:
        if self.loader is None:
            self.loader = self.make_loader()
        got = Delivered()
        before = children_cpu()
        e = run_epoch(self.loader, on_batch=got.add)
        after = children_cpu()
        # This loader's own workers only (started during its first epoch: from 0).
        workers = sum(after.get(p, 0.0) - before.get(p, 0.0) for p in worker_pids(self.loader))
        self.epochs.append(
            {
                "seconds": e.seconds,
                "rate": e.rate,
                "main_cpu": e.main_cpu,
                "loop_cpu": e.loop_cpu,
                "workers_cpu": workers,
                "samples": e.samples,
            }
        )
        return got

    def close(self) -> None:
        close = getattr(self.loader, "close", None)
        if callable(close):
            close()
        self.loader = None


def _skip(skipped: dict[str, str], label: str, reason: str) -> None:
    skipped[label] = reason
    msg = f"images benchmark: `{label}` left out: {reason}"
    print(msg, file=sys.stderr)
    warnings.warn(msg, stacklevel=2)


def _run_group(
    benchmark: Any,
    group: str,
    images: ImageWorkload,
    runs: dict[str, tuple[str, EpochRun]],
    check: Expect,
    skipped: dict[str, str],
    note: str,
) -> None:
    variants = [Variant(role, label, run) for label, (role, run) in runs.items()]
    try:
        with torch_threads(1):
            compare(
                benchmark,
                group=group,
                variants=variants,
                batches=itertools.repeat(None),
                check=check,
                samples=images.n,
                nbytes=images.n * SIZE * SIZE * 3,
                case=images.describe(),
                min_rounds=3,
                max_time=60.0,
                warmup_rounds=1,
                note=note,
                unit="images",
            )
    finally:
        for _, run in runs.values():
            run.close()
    benchmark.extra_info["epochs"] = epoch_stats({label: run for label, (_, run) in runs.items()})
    benchmark.extra_info["skipped"] = skipped


def test_train(benchmark: Any, images: ImageWorkload, beton: str | None) -> None:
    w = images
    skipped: dict[str, str] = {}
    runs: dict[str, tuple[str, EpochRun]] = {
        "MultiWorkerZIPDataset (PIL + torchvision), 2 workers": (
            "baseline",
            EpochRun(lambda: zip_baseline(w, train=True)),
        ),
        "torchvision ImageFolder (PIL + torchvision), 2 workers": (
            "variant",
            EpochRun(lambda: imagefolder(w, train=True)),
        ),
    }
    fast = {
        "simplejpeg + cv2 crop/resize, 2 workers": ("simplejpeg", {}),
        "simplejpeg at reduced DCT scale + cv2, 2 workers": ("simplejpeg", {"scaled": True}),
        "PyTurboJPEG + cv2 crop/resize, 2 workers": ("turbojpeg", {"decoder": "turbojpeg"}),
    }
    for label, (module, kw) in fast.items():
        why = missing(module) or missing("cv2")
        if why:
            _skip(skipped, label, why)
        else:
            runs[label] = ("reference", EpochRun(lambda kw=kw: fast_jpeg(w, True, **kw)))
    label = "FFCV RandomResizedCropRGBImageDecoder, 2 workers"
    if beton is None:
        _skip(skipped, label, missing("ffcv") or "no .beton")
    else:
        runs[label] = ("reference", EpochRun(lambda: ffcv_loader(beton)))
    label = "DALI CPU pipeline (readers.file, image_random_crop), 2 threads"
    why = missing("nvidia.dali")
    if why:
        _skip(skipped, label, why)
    else:
        runs[label] = ("reference", EpochRun(lambda: DaliEpochs(w)))
    runs["packread ImageReader on the ZIP, main process"] = (
        "packread",
        EpochRun(lambda: PackEpochs(pack_reader(w.zip_path, train=True))),
    )
    runs["packread ImageReader on the ImageFolder tree, main process"] = (
        "packread",
        EpochRun(lambda: PackEpochs(pack_reader(w.tree, train=True))),
    )
    _run_group(
        benchmark,
        "images-train",
        w,
        runs,
        expect_train(w),
        skipped,
        f"RandomResizedCrop({SIZE}) + RandomHorizontalFlip, one shuffled epoch per call, batch "
        f"{BATCH}; DataLoaders with {WORKERS} persistent workers, FFCV/DALI {WORKERS} threads, "
        f"packread its default pool ({_threads()} threads) with 2 batches in flight. FFCV "
        "re-encodes the JPEGs when writing its .beton (OpenCV, quality 90).",
    )


def test_eval(benchmark: Any, images: ImageWorkload) -> None:
    w = images
    skipped: dict[str, str] = {}
    runs: dict[str, tuple[str, EpochRun]] = {
        "MultiWorkerZIPDataset (PIL + torchvision), 2 workers": (
            "baseline",
            EpochRun(lambda: zip_baseline(w, train=False)),
        ),
        "torchvision ImageFolder (PIL + torchvision), 2 workers": (
            "variant",
            EpochRun(lambda: imagefolder(w, train=False)),
        ),
    }
    fast = {
        "simplejpeg + cv2 resize/crop, 2 workers": {},
        "simplejpeg at reduced DCT scale + cv2, 2 workers": {"scaled": True},
    }
    for label, kw in fast.items():
        why = missing("simplejpeg") or missing("cv2")
        if why:
            _skip(skipped, label, why)
        else:
            runs[label] = ("reference", EpochRun(lambda kw=kw: fast_jpeg(w, False, **kw)))
    runs["packread ImageReader on the ZIP, main process"] = (
        "packread",
        EpochRun(lambda: PackEpochs(pack_reader(w.zip_path, train=False))),
    )
    runs["packread ImageReader on the ImageFolder tree, main process"] = (
        "packread",
        EpochRun(lambda: PackEpochs(pack_reader(w.tree, train=False))),
    )
    _run_group(
        benchmark,
        "images-eval",
        w,
        runs,
        expect_eval(w),
        skipped,
        f"Resize(256) + CenterCrop({SIZE}), one shuffled epoch per call, batch {BATCH}.",
    )


def _threads() -> int:
    import packread

    return packread.get_num_threads()


def test_per_core(benchmark: Any, images: ImageWorkload) -> None:
    """One thread each over every file: a decoder's own speed against packread's whole job."""
    w = images
    blobs = w.encoded()
    skipped: dict[str, str] = {}
    variants: list[Variant] = []

    def pass_of(decode: Callable[[bytes], np.ndarray]) -> Callable[[Any], Delivered]:
        def run(_: Any) -> Delivered:
            got = Delivered(stride=8)
            got.add_images((decode(b) for b in blobs), w.labels)
            return got

        return run

    why = missing("simplejpeg")
    if why:
        # The baseline itself is missing: nothing to compare.
        pytest.skip(f"images-per-core needs simplejpeg: {why}")
    import simplejpeg

    variants.append(
        Variant(
            "baseline",
            "simplejpeg.decode_jpeg, full size, 1 thread (decode only)",
            pass_of(lambda b: simplejpeg.decode_jpeg(b, colorspace="RGB")),
            check=expect_full(w),
        )
    )
    label = "PyTurboJPEG decode, full size, 1 thread (decode only)"
    why = missing("turbojpeg")
    if why:
        _skip(skipped, label, why)
    else:
        from turbojpeg import TJPF_RGB, TurboJPEG

        turbo = TurboJPEG()
        variants.append(
            Variant(
                "variant",
                label,
                pass_of(lambda b: turbo.decode(b, pixel_format=TJPF_RGB)),
                check=expect_full(w),
            )
        )

    def pil_decode(b: bytes) -> np.ndarray:
        with Image.open(io.BytesIO(b)) as im:
            return np.asarray(im.convert("RGB"))

    variants.append(
        Variant(
            "reference",
            "PIL Image.open(...).convert('RGB'), full size, 1 thread (decode only)",
            pass_of(pil_decode),
            check=expect_full(w),
        )
    )

    def pack_pass(train: bool) -> Callable[[Any], Delivered]:
        reader = pack_reader(w.zip_path, train=train, num_threads=1)
        epochs = itertools.count()

        def run(_: Any) -> Delivered:
            epoch = next(epochs)
            perm = np.random.default_rng(epoch).permutation(w.n)
            got = Delivered()
            for lo in range(0, w.n, BATCH):
                idx = perm[lo : lo + BATCH]
                got.add((reader.batch(idx, epoch=epoch), reader.labels[idx]))
            return got

        return run

    variants.append(
        Variant(
            "packread",
            "packread num_threads=1: decode + RandomResizedCrop(224) + flip",
            pack_pass(True),
            check=expect_train(w),
        )
    )
    variants.append(
        Variant(
            "packread",
            "packread num_threads=1: decode + Resize(256) + CenterCrop(224)",
            pack_pass(False),
            check=expect_eval(w),
        )
    )
    compare(
        benchmark,
        group="images-per-core",
        variants=variants,
        batches=itertools.repeat(None),
        check=expect_full(w),
        samples=w.n,
        nbytes=0,
        case=w.describe(),
        min_rounds=3,
        max_time=30.0,
        warmup_rounds=1,
        note=(
            "One thread each, every file once per call. The decoders get the JPEG bytes from "
            "memory and only decode (full size); packread reads them from the ZIP (page cache) "
            "and decodes, crops and resizes into a (64, 224, 224, 3) batch."
        ),
        per_core=True,
        unit="images",
    )
    benchmark.extra_info["skipped"] = skipped
