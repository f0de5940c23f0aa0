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
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Variant, compare, warm_page_cache
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
    expect_eval,
    expect_full,
    expect_train,
    fast_jpeg,
    ffcv_loader,
    imagefolder,
    missing,
    n_images,
    pack_reader,
    run_group,
    skip_peer,
    timed_epoch,
    write_beton,
    write_image_workload,
    zip_baseline,
)


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
        self.epochs.append(timed_epoch(self.loader, got.add))
        return got

    def close(self) -> None:
        close = getattr(self.loader, "close", None)
        if callable(close):
            close()
        self.loader = None


#: Variant label -> (role, note, epoch runner).
Runs = dict[str, tuple[str, str, EpochRun]]


def _run_group(
    benchmark: Any,
    group: str,
    images: ImageWorkload,
    runs: Runs,
    check: Expect,
    skipped: dict[str, str],
    note: str,
) -> None:
    run_group(
        benchmark,
        runs,
        skipped,
        group=group,
        check=check,
        samples=images.n,
        nbytes=images.n * SIZE * SIZE * 3,
        case=images.describe(),
        min_rounds=3,
        max_time=60.0,
        note=note,
        unit="images",
    )


def _baselines(w: ImageWorkload, train: bool) -> Runs:
    """The tutorial's ZIP Dataset (the baseline) and torchvision's ImageFolder, both with
    torchvision's PIL transforms under a DataLoader with 2 workers."""
    return {
        "MultiWorkerZIPDataset (PIL + torchvision), 2 workers": (
            "baseline",
            "",
            EpochRun(partial(zip_baseline, w, train=train)),
        ),
        "torchvision ImageFolder (PIL + torchvision), 2 workers": (
            "variant",
            "",
            EpochRun(partial(imagefolder, w, train=train)),
        ),
    }


def _reference(
    runs: Runs, skipped: dict[str, str], label: str, why: str | None, make: Callable[[], Any]
) -> None:
    """Adds peer ``label`` (one epoch of ``make()``'s loader per call), or records it left out
    for ``why``."""
    if why:
        skip_peer(skipped, "images", label, why)
    else:
        runs[label] = ("reference", "", EpochRun(make))


def _fast(
    runs: Runs,
    skipped: dict[str, str],
    w: ImageWorkload,
    train: bool,
    fast: dict[str, tuple[str, dict[str, Any]]],
) -> None:
    """The fastest Python paths: ``fast`` maps a label to the decoder module it needs and
    ``fast_jpeg``'s options."""
    for label, (module, kw) in fast.items():
        why = missing(module) or missing("cv2")
        _reference(runs, skipped, label, why, partial(fast_jpeg, w, train, **kw))


def _packread(w: ImageWorkload, train: bool) -> Runs:
    """packread's ``ImageReader`` on the ZIP and on the tree, in the main process."""
    return {
        f"packread ImageReader on the {where}, main process": (
            "packread",
            "",
            EpochRun(lambda source=source: PackEpochs(pack_reader(source, train=train))),
        )
        for where, source in (("ZIP", w.zip_path), ("ImageFolder tree", w.tree))
    }


def test_train(benchmark: Any, images: ImageWorkload, beton: str | None) -> None:
    w = images
    skipped: dict[str, str] = {}
    runs = _baselines(w, train=True)
    fast = {
        "simplejpeg + cv2 crop/resize, 2 workers": ("simplejpeg", {}),
        "simplejpeg at reduced DCT scale + cv2, 2 workers": ("simplejpeg", {"scaled": True}),
        "PyTurboJPEG + cv2 crop/resize, 2 workers": ("turbojpeg", {"decoder": "turbojpeg"}),
    }
    _fast(runs, skipped, w, True, fast)
    _reference(
        runs,
        skipped,
        "FFCV RandomResizedCropRGBImageDecoder, 2 workers",
        (missing("ffcv") or "no .beton") if beton is None else None,
        partial(ffcv_loader, beton),
    )
    _reference(
        runs,
        skipped,
        "DALI CPU pipeline (readers.file, image_random_crop), 2 threads",
        missing("nvidia.dali"),
        partial(DaliEpochs, w),
    )
    runs.update(_packread(w, train=True))
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
    runs = _baselines(w, train=False)
    fast = {
        "simplejpeg + cv2 resize/crop, 2 workers": ("simplejpeg", {}),
        "simplejpeg at reduced DCT scale + cv2, 2 workers": ("simplejpeg", {"scaled": True}),
    }
    _fast(runs, skipped, w, False, fast)
    runs.update(_packread(w, train=False))
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
        skip_peer(skipped, "images", label, why)
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
