"""The encoded-image workload of issue 15 and every loader the image benchmarks compare
(benches/test_bench_images.py).

**Workload.** ``write_image_workload`` makes ImageNet-like JPEGs (about 500x375, some
portrait, sizes varying by a few percent, PIL quality 90) by cutting and rescaling random crops
of the real photographs scikit-image ships, one photograph per class (10 classes), and stores
the same files twice: one stored (uncompressed) ZIP with a ``dataset.json`` member
``{"labels": {name: label}}`` (the SURF "Packed Data Formats" tutorial's layout) and an
ImageFolder tree ``root/<class>/<file>.JPEG``. For checking what the loaders deliver it keeps,
per image, its mean colour over the whole image, over the box ``Resize(256)+CenterCrop(224)``
keeps, and the mean and variance of the mean colour of a ``RandomResizedCrop`` (estimated by
sampling crops on an integral image). ``Delivered.check`` compares each epoch's per-label mean
colours with them: a loader that pairs images with the wrong labels, swaps channels or returns
garbage fails, besides one that drops or repeats samples (the label multiset must be the data
set's).

**Loaders.** Each is a callable returning an iterable over one epoch of ``(images, labels)``
batches (of 64, the last one shorter):

- ``MultiWorkerZIPDataset`` (our re-implementation of the tutorial's class with
  ``load_encoded=True``) and ``torchvision.datasets.ImageFolder``, with torchvision's PIL
  transforms, under ``DataLoader(batch_size=64, shuffle=True, num_workers=2,
  persistent_workers=True)``;
- ``FastJPEGDataset``: the fastest Python path a user can assemble: the same ZIP, decoded by
  simplejpeg (optionally at a reduced DCT scale that keeps the crop at least 224 pixels) or
  PyTurboJPEG, cropped and resized by OpenCV, same DataLoader;
- FFCV (``RGBImageField`` in a .beton, ``RandomResizedCropRGBImageDecoder``), DALI's CPU
  pipeline (``fn.readers.file`` + ``fn.decoders.image_random_crop`` + ``fn.resize`` +
  ``fn.flip``), when installed (``make bench-peers``);
- packread: ``ImageReader.batch_async`` in the main process, two batches in flight.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import sys
import warnings
import zipfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from workloads import MultiWorkerZIPDataset as RawZIPDataset

import packread

BATCH = 64
SIZE = 224
RESIZE = 256
WORKERS = 2
QUALITY = 90
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)

#: Default number of images (``PACKREAD_BENCH_IMAGES`` overrides it, e.g. 200 for a smoke run).
N_IMAGES = 2000

#: One photograph per class (scikit-image's data folder; the real pictures it ships, in colour,
#: plus the grey cameraman stored as RGB, as ImageNet holds a few grey pictures).
PHOTOS = [
    "astronaut.png",
    "chelsea.png",
    "coffee.png",
    "hubble_deep_field.jpg",
    "ihc.png",
    "motorcycle_left.png",
    "motorcycle_right.png",
    "retina.jpg",
    "rocket.jpg",
    "camera.png",
]
N_CLASSES = len(PHOTOS)

#: Image sizes (width, height) and how often each is drawn; each side then varies by +-5 %.
SHAPES = [((500, 375), 0.7), ((500, 333), 0.1), ((375, 500), 0.2)]

#: Stride of the subsample of each delivered image whose mean colour is checked.
STRIDE = 4


def n_images() -> int:
    return int(os.environ.get("PACKREAD_BENCH_IMAGES", N_IMAGES))


def class_name(k: int) -> str:
    return f"n{k:08d}"


@dataclass
class ImageWorkload:
    """The JPEGs, where each copy of them is, and what every image should look like."""

    zip_path: str
    tree: str
    #: Sample i: ZIP member ``members[i]`` == file ``files[i]`` (both in sorted order).
    members: list[str]
    files: list[str]
    labels: np.ndarray
    sizes: np.ndarray  # (n, 2): height, width
    #: Mean colour (float64, RGB) of each whole image, of its eval box, and of its random crops
    #: (expected value and variance of one crop's mean).
    full_mean: np.ndarray = field(repr=False)
    center_mean: np.ndarray = field(repr=False)
    crop_mean: np.ndarray = field(repr=False)
    crop_var: np.ndarray = field(repr=False)
    nbytes: int = 0

    @property
    def n(self) -> int:
        return len(self.labels)

    def encoded(self) -> list[bytes]:
        """Every JPEG's bytes, in sample order, read from the ZIP."""
        with zipfile.ZipFile(self.zip_path) as z:
            return [z.read(m) for m in self.members]

    def describe(self) -> str:
        h, w = self.sizes.mean(axis=0)
        portrait = int((self.sizes[:, 0] > self.sizes[:, 1]).sum())
        return (
            f"{self.n} JPEGs q{QUALITY}, mean {w:.0f}x{h:.0f} ({portrait} portrait), "
            f"{self.nbytes / self.n / 1e3:.0f} KB each, {N_CLASSES} classes; batch {BATCH}"
        )


def _photo(name: str) -> np.ndarray:
    import skimage

    path = os.path.join(os.path.dirname(skimage.__file__), "data", name)
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _random_crop_stats(
    rgb: np.ndarray, rng: np.random.Generator, k: int = 64, down: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of the mean colour of torchvision's ``RandomResizedCrop(scale,
    ratio)`` boxes on ``rgb``, from ``k`` sampled boxes summed on an integral image of ``rgb``
    reduced ``down`` times."""
    height, width = rgb.shape[:2]
    hd, wd = height // down, width // down
    small = rgb[: hd * down, : wd * down].reshape(hd, down, wd, down, 3).mean(axis=(1, 3))
    ii = np.zeros((hd + 1, wd + 1, 3))
    ii[1:, 1:] = small.cumsum(0).cumsum(1)
    means = []
    area = height * width
    log_r = np.log(RATIO)
    while len(means) < k:
        # torchvision's get_params: up to 10 tries, then the whole image clamped to the ratios.
        box = None
        for _ in range(10):
            a = area * rng.uniform(*SCALE)
            r = math.exp(rng.uniform(*log_r))
            w = round(math.sqrt(a * r))
            h = round(math.sqrt(a / r))
            if 0 < w <= width and 0 < h <= height:
                box = (
                    int(rng.integers(0, height - h + 1)),
                    int(rng.integers(0, width - w + 1)),
                    h,
                    w,
                )
                break
        if box is None:
            box = (0, 0, height, width)
        top, left, h, w = box
        y0, x0 = top // down, left // down
        y1 = max(y0 + 1, min(hd, (top + h) // down))
        x1 = max(x0 + 1, min(wd, (left + w) // down))
        s = ii[y1, x1] - ii[y0, x1] - ii[y1, x0] + ii[y0, x0]
        means.append(s / ((y1 - y0) * (x1 - x0)))
    m = np.asarray(means)
    return m.mean(axis=0), m.var(axis=0)


def _center_box(height: int, width: int) -> tuple[int, int, int, int]:
    """The box of the original image that ``Resize(256)`` + ``CenterCrop(224)`` keeps."""
    s = SIZE / RESIZE * min(height, width)
    top, left = (height - s) / 2, (width - s) / 2
    return round(top), round(left), round(s), round(s)


def photo_crop(src: Any, rng: np.random.Generator) -> Any:
    """One training photo from the PIL image ``src``: a target size drawn from :data:`SHAPES`
    (within 5 %), the largest box of its aspect in the photograph scaled 0.6-1 (but not below
    the target's size where the photograph is large enough: upscaling blurs), anywhere,
    resized with LANCZOS, flipped half the time."""
    shapes = [s for s, _ in SHAPES]
    weights = np.array([p for _, p in SHAPES])
    w0, h0 = shapes[rng.choice(len(shapes), p=weights / weights.sum())]
    w = round(w0 * rng.uniform(0.95, 1.05))
    h = round(h0 * rng.uniform(0.95, 1.05))
    sw, sh = src.size
    most = min(sw / w, sh / h)
    fit = max(most * rng.uniform(0.6, 1.0), min(most, 1.0))
    bw, bh = w * fit, h * fit
    x0, y0 = rng.uniform(0, sw - bw), rng.uniform(0, sh - bh)
    im = src.resize((w, h), Image.Resampling.LANCZOS, box=(x0, y0, x0 + bw, y0 + bh))
    if rng.random() < 0.5:
        im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return im


def write_image_workload(root: str, n: int, seed: int = 15, log: Callable[[str], None] = print):
    """Writes ``n`` JPEGs under ``root`` as ``images.zip`` and the tree ``train/``."""
    rng = np.random.default_rng(seed)
    photos = [_photo(p) for p in PHOTOS]
    labels = np.arange(n) % N_CLASSES
    rng.shuffle(labels)
    names = [
        f"{class_name(int(k))}/{class_name(int(k))}_{i:05d}.JPEG" for i, k in enumerate(labels)
    ]
    order = np.argsort(names, kind="stable")  # sample order: sorted names (ImageFolder's)
    tree = os.path.join(root, "train")
    os.makedirs(root, exist_ok=True)
    zip_path = os.path.join(root, "images.zip")
    sizes = np.empty((n, 2), dtype=np.int64)
    full = np.empty((n, 3))
    center = np.empty((n, 3))
    crop = np.empty((n, 3))
    var = np.empty((n, 3))
    log(f"writing {n} JPEGs ...")
    total = 0
    with zipfile.ZipFile(zip_path + ".tmp", "w", zipfile.ZIP_STORED) as z:
        # dataset.json first; its labels for every member name (sorted order as below).
        z.writestr(
            "dataset.json",
            json.dumps({"labels": {f"train/{names[j]}": int(labels[j]) for j in order}}),
        )
        for pos, j in enumerate(order):
            k = int(labels[j])
            im = photo_crop(Image.fromarray(photos[k]), rng)
            h, w = im.height, im.width
            buf = io.BytesIO()
            im.save(buf, "JPEG", quality=QUALITY)
            raw = buf.getvalue()
            total += len(raw)
            rgb = np.asarray(im, dtype=np.float64)
            sizes[pos] = (h, w)
            full[pos] = rgb.mean(axis=(0, 1))
            t, left, ch, cw = _center_box(h, w)
            center[pos] = rgb[t : t + ch, left : left + cw].mean(axis=(0, 1))
            crop[pos], var[pos] = _random_crop_stats(rgb, rng)
            path = os.path.join(tree, names[j])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(raw)
            z.writestr(f"train/{names[j]}", raw)
    os.replace(zip_path + ".tmp", zip_path)
    members = [f"train/{names[j]}" for j in order]
    return ImageWorkload(
        zip_path=zip_path,
        tree=tree,
        members=members,
        files=[os.path.join(tree, names[j]) for j in order],
        labels=labels[order].astype(np.int64),
        sizes=sizes,
        full_mean=full,
        center_mean=center,
        crop_mean=crop,
        crop_var=var,
        nbytes=total,
    )


# --------------------------------------------------------------------------------------------
# What an epoch delivered, and the check


def _nhwc(images: Any) -> np.ndarray:
    a = images.numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
    if a.ndim == 4 and a.shape[1] in (1, 3) and a.shape[3] not in (1, 3):
        a = a.transpose(0, 2, 3, 1)
    return a


class Delivered:
    """Collects an epoch's batches: shapes, dtypes, labels and each image's mean colour (over a
    strided subsample, so that collecting costs next to nothing)."""

    def __init__(self, stride: int = STRIDE) -> None:
        self.stride = stride
        self.shapes: list[tuple[int, ...]] = []
        self.dtypes: set[str] = set()
        self.labels: list[np.ndarray] = []
        self.means: list[np.ndarray] = []

    def add(self, batch: Any) -> None:
        images, labels = batch
        self.shapes.append(tuple(images.shape))
        self.dtypes.add(str(images.dtype).replace("torch.", ""))
        a = _nhwc(images)[:, :: self.stride, :: self.stride]
        self.means.append(a.mean(axis=(1, 2), dtype=np.float64))
        lab = labels.numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
        self.labels.append(lab.reshape(-1).astype(np.int64))

    def add_images(self, images: Iterable[np.ndarray], labels: np.ndarray) -> None:
        """Single full-size images (the per-core group): one 'batch' of ragged images."""
        means = [
            im[:: self.stride, :: self.stride].mean(axis=(0, 1), dtype=np.float64) for im in images
        ]
        self.shapes.append((len(means),))
        self.dtypes.add("uint8")
        self.means.append(np.asarray(means).reshape(-1, 3))
        self.labels.append(np.asarray(labels, dtype=np.int64))

    @property
    def samples(self) -> int:
        return sum(len(x) for x in self.labels)


@dataclass(frozen=True)
class Expect:
    """What an epoch must deliver: shapes ``(64, 224, 224, 3)`` or ``(64, 3, 224, 224)`` uint8
    (the last batch shorter), every label as often as the data set holds it, and per label a
    mean colour within the tolerance of the workload's."""

    labels: np.ndarray
    #: Per image: expected mean colour, and variance of it (random crops) or None.
    mean: np.ndarray
    var: np.ndarray | None
    #: Absolute tolerance in levels (added to 5 standard deviations of the label's mean).
    tol: float
    image_shape: tuple[int, ...] | None = (SIZE, SIZE, 3)

    def __call__(self, _idx: Any, got: Delivered) -> None:
        assert got.samples == len(self.labels), (
            f"{got.samples} samples, expected {len(self.labels)}"
        )
        assert got.dtypes == {"uint8"}, f"dtypes {got.dtypes}"
        if self.image_shape is not None:
            hwc = self.image_shape
            chw = (hwc[2], hwc[0], hwc[1])
            for s in got.shapes:
                assert s[1:] in (hwc, chw), f"batch shape {s}"
            sizes = [s[0] for s in got.shapes]
            assert all(b == BATCH for b in sizes[:-1]), sizes
            assert 0 < sizes[-1] <= BATCH, sizes
        labels = np.concatenate(got.labels)
        means = np.concatenate(got.means)
        want = np.bincount(self.labels, minlength=N_CLASSES)
        have = np.bincount(labels, minlength=N_CLASSES)
        assert np.array_equal(have, want), (
            f"labels per class {have.tolist()}, expected {want.tolist()}"
        )
        for k in range(N_CLASSES):
            sel = self.labels == k
            if not sel.any():
                continue
            ref = self.mean[sel].mean(axis=0)
            sd = np.sqrt(self.var[sel].sum(axis=0)) / sel.sum() if self.var is not None else 0
            obs = means[labels == k].mean(axis=0)
            bound = 5 * sd + self.tol
            assert np.all(np.abs(obs - ref) <= bound), (
                f"class {k}: mean colour {np.round(obs, 1).tolist()}, expected "
                f"{np.round(ref, 1).tolist()} +- {np.round(bound, 1).tolist()} (images paired "
                "with the wrong labels, channels swapped, or wrong pixels)"
            )


def expect_train(w: ImageWorkload) -> Expect:
    return Expect(w.labels, w.crop_mean, w.crop_var, tol=3.0)


def expect_eval(w: ImageWorkload) -> Expect:
    return Expect(w.labels, w.center_mean, None, tol=2.0)


def expect_full(w: ImageWorkload) -> Expect:
    return Expect(w.labels, w.full_mean, None, tol=1.5, image_shape=None)


# --------------------------------------------------------------------------------------------
# CPU accounting: the main process (every thread) and its child processes (DataLoader workers)


def children_cpu() -> dict[int, float]:
    """CPU seconds used so far by each live child process of this one (``/proc``)."""
    me = os.getpid()
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()
        if int(rest[1]) == me:
            out[int(entry.name)] = (int(rest[11]) + int(rest[12])) / tick
    return out


def worker_pids(loader: Any) -> list[int]:
    """The worker processes of a ``DataLoader`` with persistent workers (none for loaders that
    use threads in this process)."""
    it = getattr(loader, "_iterator", None)
    return [p.pid for p in getattr(it, "_workers", []) if p.pid is not None]


def timed_epoch(
    loader: Iterable[Any], on_batch: Callable[[Any], None], workers_of: Any = None
) -> dict[str, float]:
    """One epoch of ``loader`` (``on_batch`` sees every batch) and its figures, as
    :func:`epoch_stats` reads them: time, rate, the main process's and the loop thread's CPU
    seconds, and the CPU seconds of the worker processes of ``workers_of`` (a ``DataLoader``;
    default ``loader``) in this epoch."""
    from packread.cli.bench import run_epoch

    before = children_cpu()
    e = run_epoch(loader, on_batch=on_batch)
    after = children_cpu()
    # This loader's own workers only (started during its first epoch: from 0).
    pids = worker_pids(loader if workers_of is None else workers_of)
    workers = sum(after.get(p, 0.0) - before.get(p, 0.0) for p in pids)
    return {
        "seconds": e.seconds,
        "rate": e.rate,
        "main_cpu": e.main_cpu,
        "loop_cpu": e.loop_cpu,
        "workers_cpu": workers,
        "samples": e.samples,
    }


# --------------------------------------------------------------------------------------------
# Baselines: the tutorial's ZIP Dataset and torchvision's ImageFolder, with PIL transforms


def train_transform():
    from torchvision import transforms

    return transforms.Compose(
        [
            transforms.RandomResizedCrop(SIZE, scale=SCALE, ratio=RATIO),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ]
    )


def eval_transform():
    from torchvision import transforms

    return transforms.Compose(
        [transforms.Resize(RESIZE), transforms.CenterCrop(SIZE), transforms.PILToTensor()]
    )


class MultiWorkerZIPDataset(RawZIPDataset):
    """Our re-implementation of the SURF "Packed Data Formats" tutorial's
    ``MultiWorkerZIPDataset`` with ``load_encoded=True`` (the raw-bytes one of
    ``benches/workloads.py``, whose per-worker ``ZipFile`` and labels it keeps): the members
    with an image extension PIL knows are the samples, each decoded by
    ``PIL.Image.open(...).convert("RGB")``, then ``transform``."""

    def __init__(self, path: str, transform: Callable[[Image.Image], Any] | None = None) -> None:
        Image.init()
        self.extensions = tuple(Image.EXTENSION.keys())
        super().__init__(path)
        self.transform = transform

    def _is_sample(self, name: str) -> bool:
        return name.lower().endswith(self.extensions)

    def _get_image(self, fname: str) -> Image.Image:
        with self._get_file_handle(fname) as f:
            raw = f.read()
        return Image.open(io.BytesIO(raw)).convert("RGB")

    def __getitem__(self, index: int):
        name = self.img_names[index]
        image = self._get_image(name)
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[name]


def dataloader(dataset: Dataset) -> DataLoader:
    """The seeds' configuration: batch 64, shuffled, 2 persistent workers."""
    return DataLoader(
        dataset, batch_size=BATCH, shuffle=True, num_workers=WORKERS, persistent_workers=True
    )


def zip_baseline(w: ImageWorkload, train: bool) -> DataLoader:
    return dataloader(
        MultiWorkerZIPDataset(w.zip_path, train_transform() if train else eval_transform())
    )


def imagefolder(w: ImageWorkload, train: bool) -> DataLoader:
    from torchvision.datasets import ImageFolder

    return dataloader(
        ImageFolder(w.tree, transform=train_transform() if train else eval_transform())
    )


# --------------------------------------------------------------------------------------------
# The fastest Python path: simplejpeg / PyTurboJPEG + OpenCV


class FastJPEGDataset(MultiWorkerZIPDataset):
    """The same ZIP; JPEG bytes decoded by simplejpeg (``decoder="simplejpeg"``; with
    ``scaled=True`` at the smallest DCT scale (M/8, M <= 6) that keeps the crop at least
    ``SIZE`` pixels, the trick libjpeg-turbo offers) or PyTurboJPEG (``decoder="turbojpeg"``),
    then cropped, resized (``INTER_AREA`` shrinking, ``INTER_LINEAR`` otherwise) and flipped
    with OpenCV; crops drawn by torchvision's ``RandomResizedCrop.get_params``. Returns HWC
    uint8 tensors."""

    def __init__(self, path: str, train: bool, decoder: str = "simplejpeg", scaled: bool = False):
        super().__init__(path)
        self.train = train
        self.decoder = decoder
        self.scaled = scaled
        self._turbo = None
        self._cv_threads_set = False

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_turbo"] = None
        return state

    def _setup(self) -> None:
        import cv2

        if not self._cv_threads_set:
            cv2.setNumThreads(1)  # one core per worker, as the DataLoader's workers have
            self._cv_threads_set = True
        if self.decoder == "turbojpeg" and self._turbo is None:
            from turbojpeg import TJPF_RGB, TurboJPEG

            self._turbo = (TurboJPEG(), TJPF_RGB)

    def _box(self, height: int, width: int) -> tuple[int, int, int, int]:
        from torchvision import transforms

        if not self.train:
            return _center_box(height, width)
        like = torch.empty((1, 1, 1), dtype=torch.uint8).expand(3, height, width)
        return transforms.RandomResizedCrop.get_params(like, list(SCALE), list(RATIO))

    def _decode(self, raw: bytes) -> tuple[np.ndarray, tuple[int, int, int, int]]:
        import simplejpeg

        if self.decoder == "turbojpeg":
            turbo, fmt = self._turbo
            rgb = turbo.decode(raw, pixel_format=fmt)
            return rgb, self._box(*rgb.shape[:2])
        height, width, _, _ = simplejpeg.decode_jpeg_header(raw)
        top, left, h, w = self._box(height, width)
        # libjpeg-turbo decodes at M/8 scale; 7/8 is slower than full size (measured), so only
        # scales of 6/8 or less are worth it.
        if not self.scaled or max(SIZE / h, SIZE / w) > 0.75:
            return simplejpeg.decode_jpeg(raw, colorspace="RGB"), (top, left, h, w)
        # Decode at the smallest scale where the box still has SIZE pixels each way.
        rgb = simplejpeg.decode_jpeg(
            raw,
            colorspace="RGB",
            min_height=math.ceil(height * SIZE / h),
            min_width=math.ceil(width * SIZE / w),
        )
        fy, fx = rgb.shape[0] / height, rgb.shape[1] / width
        top, left = int(top * fy), int(left * fx)
        h = max(1, min(rgb.shape[0] - top, round(h * fy)))
        w = max(1, min(rgb.shape[1] - left, round(w * fx)))
        return rgb, (top, left, h, w)

    def _get_image(self, fname: str) -> np.ndarray:
        import cv2

        self._setup()
        with self._get_file_handle(fname) as f:
            raw = f.read()
        # Eval: the box Resize(256) + CenterCrop(224) keeps, resized to SIZE (the same pixels).
        rgb, (top, left, h, w) = self._decode(raw)
        region = rgb[top : top + h, left : left + w]
        shrink = h >= SIZE and w >= SIZE
        out = cv2.resize(
            region, (SIZE, SIZE), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
        )
        if self.train and torch.rand(1).item() < 0.5:
            out = cv2.flip(out, 1)
        return torch.from_numpy(out)


def fast_jpeg(w: ImageWorkload, train: bool, decoder: str = "simplejpeg", scaled: bool = False):
    return dataloader(FastJPEGDataset(w.zip_path, train, decoder, scaled))


# --------------------------------------------------------------------------------------------
# FFCV and DALI


def write_beton(w: ImageWorkload, path: str) -> str:
    """The JPEGs as an FFCV .beton: ``RGBImageField(write_mode="jpg", jpeg_quality=90)`` with no
    ``max_resolution`` (no resizing). FFCV takes decoded pixels and encodes them itself (OpenCV,
    quality 90): it has no pass-through of JPEG bytes."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    class Decoded:
        def __len__(self) -> int:
            return w.n

        def __getitem__(self, i: int):
            with Image.open(w.files[i]) as im:
                return im.convert("RGB"), int(w.labels[i])

    fields = {
        "image": RGBImageField(write_mode="jpg", max_resolution=None, jpeg_quality=QUALITY),
        "label": IntField(),
    }
    DatasetWriter(path, fields, num_workers=WORKERS).from_indexed_dataset(Decoded())
    return path


def ffcv_shuffled(path: str, image: list[Any], seed: int) -> Any:
    """FFCV's ``Loader`` over the .beton ``path``: batches of 64, its own ``WORKERS`` threads,
    ``OrderOption.RANDOM`` (from ``seed``), the file memory-mapped (``os_cache=True``: the page
    cache), the last batch kept; ``image`` the pipeline of field ``image``, labels as tensors."""
    from ffcv.fields.basics import IntDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import Squeeze, ToTensor

    return Loader(
        path,
        batch_size=BATCH,
        num_workers=WORKERS,
        order=OrderOption.RANDOM,
        drop_last=False,
        os_cache=True,
        seed=seed,
        pipelines={"image": image, "label": [IntDecoder(), ToTensor(), Squeeze()]},
    )


def ffcv_loader(beton: str) -> Any:
    """FFCV's train pipeline: ``RandomResizedCropRGBImageDecoder`` + ``RandomHorizontalFlip``."""
    from ffcv.fields.rgb_image import RandomResizedCropRGBImageDecoder
    from ffcv.transforms import RandomHorizontalFlip, ToTensor

    crop = RandomResizedCropRGBImageDecoder((SIZE, SIZE), scale=SCALE, ratio=RATIO)
    return ffcv_shuffled(beton, [crop, RandomHorizontalFlip(), ToTensor()], seed=0)


class DaliPipelineEpochs:
    """A DALI pipeline whose outputs are ``(images, labels)`` and whose reader is named
    ``"reader"``, built; iterating it gives one epoch (``DALIGenericIterator``, the last batch
    partial) of ``(images, labels)`` tensors."""

    def __init__(self, pipe: Any) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        self.pipe = pipe
        self.pipe.build()
        self.it: Any = DALIGenericIterator(
            [self.pipe],
            ["images", "labels"],
            reader_name="reader",
            last_batch_policy=LastBatchPolicy.PARTIAL,
            auto_reset=True,
        )

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for out in self.it:
            yield out[0]["images"], out[0]["labels"]

    def close(self) -> None:
        """Lets the pipeline's threads go."""
        self.it = None
        self.pipe = None


class DaliEpochs(DaliPipelineEpochs):
    """DALI's CPU pipeline over the ImageFolder tree (classes from the sorted folder names, as
    ImageFolder's): ``fn.readers.file(random_shuffle=True)``,
    ``fn.decoders.image_random_crop(device="cpu")``, ``fn.resize`` to 224x224,
    ``fn.flip(horizontal=coin_flip)``; batch 64, ``num_threads=2``, ``device_id=None``. Iterating
    it gives one epoch (DALIGenericIterator, the last batch partial)."""

    def __init__(self, w: ImageWorkload) -> None:
        from nvidia.dali import fn, pipeline_def, types

        @pipeline_def(batch_size=BATCH, num_threads=WORKERS, device_id=None, seed=0)
        def pipe():
            jpegs, labels = fn.readers.file(
                file_root=w.tree, random_shuffle=True, pad_last_batch=True, name="reader"
            )
            images = fn.decoders.image_random_crop(
                jpegs,
                device="cpu",
                output_type=types.RGB,
                random_area=list(SCALE),
                random_aspect_ratio=list(RATIO),
            )
            images = fn.resize(images, resize_x=SIZE, resize_y=SIZE)
            images = fn.flip(images, horizontal=fn.random.coin_flip())
            return images, labels

        super().__init__(pipe())


# --------------------------------------------------------------------------------------------
# packread


class PackEpochs:
    """One shuffled epoch per ``iter()``: ``ImageReader.batch_async`` on a permutation cut into
    batches of 64, ``depth`` batches in flight, each handed over as ``torch.from_numpy`` (the
    batch's images and labels)."""

    def __init__(self, reader: packread.ImageReader, depth: int = 2, seed: int = 0) -> None:
        self.reader = reader
        self.depth = depth
        self.seed = seed
        self.epoch = 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        r = self.reader
        epoch = self.epoch
        self.epoch += 1
        perm = np.random.default_rng((self.seed, epoch)).permutation(len(r))
        batches = iter([perm[i : i + BATCH] for i in range(0, len(perm), BATCH)])
        pending = deque(
            (idx, r.batch_async(idx, epoch=epoch)) for idx in itertools.islice(batches, self.depth)
        )
        while pending:
            _, p = pending.popleft()
            batch = p.result()
            nxt = next(batches, None)
            if nxt is not None:
                pending.append((nxt, r.batch_async(nxt, epoch=epoch)))
            yield torch.from_numpy(batch["images"]), torch.from_numpy(batch["labels"])


def pack_reader(source: str, train: bool, **options: Any) -> packread.ImageReader:
    if train:
        decode = packread.ImageDecode(SIZE, crop="random", flip=True)
        return packread.ImageReader(source, decode=decode, augment_seed=0, **options)
    decode = packread.ImageDecode(SIZE, crop="center", resize=RESIZE)
    return packread.ImageReader(source, decode=decode, **options)


# --------------------------------------------------------------------------------------------
# Which peers are installed


def skip_peer(skipped: dict[str, str], bench: str, label: str, reason: str) -> None:
    """Records variant ``label`` of the ``bench`` benchmark as left out for ``reason`` (in
    ``skipped``, for ``extra_info["skipped"]``), and says so on stderr and as a warning."""
    skipped[label] = reason
    msg = f"{bench} benchmark: `{label}` left out: {reason}"
    print(msg, file=sys.stderr)
    warnings.warn(msg, stacklevel=2)


def missing(module: str) -> str | None:
    """Why a peer cannot run here (``None``: it can)."""
    try:
        __import__(module)
    except Exception as e:  # ImportError, or a library that fails to load
        return f"{module} not importable ({type(e).__name__}: {e}); `make bench-peers` installs it"
    if module == "turbojpeg":
        try:
            from turbojpeg import TurboJPEG

            TurboJPEG()
        except Exception as e:
            return f"PyTurboJPEG cannot load libturbojpeg ({e}); `make bench-peers` installs it"
    return None


def run_group(
    benchmark: Any, runs: Mapping[str, tuple[str, str, Any]], skipped: dict[str, str], **kw: Any
) -> None:
    """One comparison of whole-epoch loaders (``conftest.compare_epochs``, ``kw`` its
    arguments): ``runs`` maps each variant's label to its role, note and epoch runner (a
    ``load`` keeping its epochs' figures in ``.epochs``). Records their :func:`epoch_stats` in
    ``extra_info["epochs"]`` and the peers left out in ``extra_info["skipped"]``."""
    from conftest import Variant, compare_epochs  # benches/conftest.py: under pytest only

    variants = [Variant(role, label, run, note=note) for label, (role, note, run) in runs.items()]
    compare_epochs(benchmark, variants=variants, **kw)
    benchmark.extra_info["epochs"] = epoch_stats({v.label: v.load for v in variants})
    benchmark.extra_info["skipped"] = skipped


def epoch_stats(runs: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per loader (each with ``.epochs``, the figures of its epochs), medians over the timed
    epochs (the first, a warm-up, left out): samples/s, CPU of the main process, of the loop's
    thread and of DataLoader worker processes, and all CPU per image."""
    out = {}
    for label, run in runs.items():
        if not run.epochs:
            continue
        timed = run.epochs[-max(1, len(run.epochs) - 1) :]  # leave out the warm-up epoch

        def med(key: str, timed: list[dict[str, float]] = timed) -> float:
            return float(np.median([e[key] for e in timed]))

        n = timed[0]["samples"]
        total = med("main_cpu") + med("workers_cpu")
        out[label] = {
            "samples_per_s": med("rate"),
            "main_cpu_s": med("main_cpu"),
            "loop_cpu_s": med("loop_cpu"),
            "workers_cpu_s": med("workers_cpu"),
            "cpu_ms_per_image": 1e3 * total / n,
        }
    return out
