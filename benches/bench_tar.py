"""Tar shards (issue 32): packread's ``TarReader`` (WebDataset shards read at random) against
webdataset's loaders and DALI on the same shards, warm page cache, side by side in one run.

Workloads (``--workloads``):

- ``images``: 2,000 ImageNet-like photos (about 500x375, some portrait, sizes varying by a
  few percent, PIL quality 90; cut and rescaled from scikit-image's photographs, one photograph
  a class, 10 classes, as ``image_workloads.py`` makes them) with ``.cls`` labels, in 8 shards
  written by ``webdataset.ShardWriter``. Train pipeline: ``RandomResizedCrop(224)`` +
  horizontal flip, batch 64, one shuffled epoch a round. Against:

  - webdataset: ``WebDataset(urls, shardshuffle=8, detshuffle=True).shuffle(1000)
    .decode("pil").to_tuple("jpg", "cls").map_tuple(torchvision transforms, identity)`` under
    ``WebLoader(batch_size=64, num_workers=2)`` (``shardshuffle=True`` is what 1.0.2 turns
    into 100 with a warning; ``detshuffle`` gives every epoch a new shard order);
  - wids (webdataset's indexed dataset, the ``wids`` package: webdataset 1.0.2 does not ship
    it): ``ShardListDataset`` of a shard-list JSON (``wids-shard-index-v1``), wids' PIL
    decoder and the same transforms, ``DataLoader(batch_size=64, shuffle=True,
    num_workers=2)``;
  - DALI on the CPU: ``fn.readers.webdataset(paths, index_paths, ext=["jpg", "cls"],
    random_shuffle=True)`` (indexes by its ``wds2idx``), ``fn.decoders.image_random_crop``,
    ``fn.resize`` to 224x224, ``fn.flip``; 2 threads, ``device_id=None``.

  packread: ``PackDataset(glob, 64, fields=["jpg", "cls"], decode=ImageDecode(224,
  crop="random", flip=True), shuffle=True)`` iterated in the main process (its own 2 threads),
  and under ``DataLoader(batch_size=None, num_workers=2)`` with 1 thread a worker. The limit:
  simplejpeg (libjpeg-turbo) decoding the same JPEG bytes, held in memory, on 2 threads (a
  ``ThreadPoolExecutor``; it releases the GIL): full decodes, and decodes at the DCT scale a
  random crop allows (``min_height``/``min_width``, as ``FastJPEGDataset(scaled=True)``).
- ``raw``: 10,000 float32 3x64x64 arrays as ``.npy`` with ``.cls`` labels, 20 shards of 500
  (``ShardWriter``), batch 64, one shuffled epoch: webdataset's loader (``.decode()``: its
  default ``.npy`` handling; ``WebLoader(batch_size=64, num_workers=2)``) and wids
  (``DataLoader``, 2 workers) against ``PackDataset(fields=["npy", "cls"])`` as above.
- ``index``: opening 100 small shards (100 samples each): ``TarReader(glob)`` with no index
  (every shard's headers walked), the same writing ``shard_index=`` and a reopen reading it;
  for reference, what the others need before reading at random: wids' per-shard index
  (``IndexedTarSamples``, built when a worker first touches a shard) and DALI's ``wds2idx``.

Each contender runs one warm-up epoch first (DataLoader workers are persistent), then one
full epoch a round, the order alternating from round to round; every epoch is a fresh shuffle
drawn by the loader itself. Every epoch's labels are checked to be the data set's (none
dropped or repeated) and its batches' shapes checked. The median round is reported: images/s,
the ratio of each packread path to each baseline and to the limit. Peers that are not
installed (``make bench-peers``; ``pip install wids``) are left out, named.

    python benches/bench_tar.py --rounds 5 --json .bench/tar.json
    python benches/bench_tar.py --quick              # small data, 1 round: a check, no numbers
    python benches/bench_tar.py --only-baselines     # without packread's TarReader
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import math
import os
import shutil
import statistics
import sys
import tarfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import packread

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benches"))

from environment import missing, versions  # noqa: E402
from image_workloads import PHOTOS, QUALITY, RATIO, SCALE, photo_crop  # noqa: E402

BATCH, SIZE, WORKERS, BUFFER = 64, 224, 2, 1000
N_CLASSES = len(PHOTOS)
RAW_SHAPE, RAW_CLASSES = (3, 64, 64), 1000


@dataclass(frozen=True)
class Sizes:
    images: int
    image_shards: int
    raw: int
    raw_per_shard: int
    index_shards: int
    index_per_shard: int


FULL = Sizes(2000, 8, 10000, 500, 100, 100)
QUICK = Sizes(512, 8, 2000, 500, 20, 100)


def tar_missing() -> str | None:
    """Why packread's TarReader cannot run here (``None``: it can)."""
    try:
        packread.TarReader  # noqa: B018
    except AttributeError as e:
        return f"packread {getattr(packread, '__version__', '?')} has no TarReader ({e})"
    return None


def warm(paths: list[str]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 22):
                pass


#: The packages whose versions the results give.
PACKAGES = [
    ("packread", "packread"),
    ("webdataset", "webdataset"),
    ("wids", "wids"),
    ("DALI", "nvidia.dali"),
    ("torch", "torch"),
    ("torchvision", "torchvision"),
    ("simplejpeg", "simplejpeg"),
    ("Pillow", "PIL"),
]


# -- data --------------------------------------------------------------------------------


def write_shards(folder: Path, samples: Any, per_shard: int) -> list[str]:
    """``samples`` (dicts for ``ShardWriter.write``) as ``folder/shard-NNNNNN.tar``, written
    aside and renamed, so that a run stopped halfway leaves nothing to reuse."""
    import webdataset as wds

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with wds.ShardWriter(str(tmp / "shard-%06d.tar"), maxcount=per_shard, verbose=0) as out:
        for s in samples:
            out.write(s)
    os.replace(tmp, folder)
    return shards_in(folder)


def shards_in(folder: Path) -> list[str]:
    return sorted(glob.glob(str(folder / "shard-*.tar")))


def photo_samples(n: int, seed: int = 32) -> Any:
    """``n`` photos as ``{"__key__", "jpg", "cls"}``: the largest box of the target's aspect
    in one of scikit-image's photographs, scaled 0.6-1, anywhere, resized (LANCZOS) to about
    500x375 (or 500x333, 375x500), flipped half the time, JPEG quality 90."""
    import skimage
    from PIL import Image

    rng = np.random.default_rng(seed)
    photos = []
    for p in PHOTOS:
        with Image.open(os.path.join(os.path.dirname(skimage.__file__), "data", p)) as im:
            photos.append(im.convert("RGB"))
    labels = np.arange(n) % N_CLASSES
    rng.shuffle(labels)
    for i in range(n):
        im = photo_crop(photos[int(labels[i])], rng)
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=QUALITY)
        yield {"__key__": f"{i:06d}", "jpg": buf.getvalue(), "cls": int(labels[i])}


def raw_samples(n: int, seed: int = 33) -> Any:
    """``n`` float32 ``RAW_SHAPE`` arrays (``.npy``) and labels (``.cls``)."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        x = rng.standard_normal(RAW_SHAPE, dtype=np.float32)
        yield {"__key__": f"{i:06d}", "npy": x, "cls": int(rng.integers(0, RAW_CLASSES))}


def index_samples(n: int) -> Any:
    """Small samples for the open-time workload: a 3x8x8 float32 ``.npy`` and a label."""
    for i in range(n):
        yield {"__key__": f"{i:07d}", "npy": np.full((3, 8, 8), i, np.float32), "cls": i % 10}


def shard_data(folder: Path, write: Callable[[], list[str]]) -> list[str]:
    """The shards in ``folder``, written by ``write`` when absent (kept between runs)."""
    urls = shards_in(folder) if folder.is_dir() else []
    return urls or write()


def read_members(urls: list[str]) -> list[dict[str, bytes]]:
    """Every sample's members (``{"__key__": key, field: bytes}``) in shard order, read with
    tarfile (the page cache warmed on the way), split into key and field as webdataset does."""
    samples: list[dict[str, Any]] = []
    for url in urls:
        with tarfile.open(url) as tf:
            for m in tf:
                if not m.isfile():
                    continue
                base = os.path.basename(m.name)
                if "." not in base:
                    continue
                dot = m.name.rfind("/") + 1 + base.index(".")
                key, field = m.name[:dot], m.name[dot + 1 :].lower()
                if not samples or samples[-1]["__key__"] != key:
                    samples.append({"__key__": key})
                f = tf.extractfile(m)
                assert f is not None
                samples[-1][field] = f.read()
    return samples


def dali_indexes(urls: list[str]) -> list[str]:
    """DALI's index of each shard (``shard-NNNNNN.idx``, by its ``wds2idx``), made once."""
    out = []
    for url in urls:
        idx = url[: -len(".tar")] + ".idx"
        if not os.path.exists(idx):
            from wds2idx import IndexCreator

            with IndexCreator(url, idx + ".tmp", verbose=False) as ic:
                ic.create_index()
            os.replace(idx + ".tmp", idx)
        out.append(idx)
    return out


def wids_shardlist(urls: list[str], lengths: list[int], path: Path) -> str:
    """wids' shard-list JSON (what its ``widsindex create`` writes, without the md5 sums)."""
    shardlist = [
        {"url": u, "nsamples": n, "filesize": os.path.getsize(u)}
        for u, n in zip(urls, lengths, strict=True)
    ]
    desc = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": shardlist}
    path.write_text(json.dumps(desc, indent=1))
    return str(path)


# -- baselines (module level: DataLoader workers use them) ---------------------------------


def train_transform() -> Any:
    from torchvision import transforms

    return transforms.Compose(
        [
            transforms.RandomResizedCrop(SIZE, scale=SCALE, ratio=RATIO),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ]
    )


def identity(x: Any) -> Any:
    return x


class WidsImage:
    """A wids sample (after its PIL decoder) as ``(transformed image, label)``."""

    def __init__(self) -> None:
        self.transform = train_transform()

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        return self.transform(sample[".jpg"].convert("RGB")), sample[".cls"]


def wids_array(sample: dict[str, Any]) -> tuple[Any, int]:
    return sample[".npy"], sample[".cls"]


def wds_loader(urls: list[str], fields: tuple[str, str], train: bool) -> Any:
    import webdataset as wds

    ds = wds.WebDataset(urls, shardshuffle=len(urls), detshuffle=True, seed=0).shuffle(BUFFER)
    if train:
        ds = ds.decode("pil").to_tuple(*fields).map_tuple(train_transform(), identity)
    else:
        ds = ds.decode().to_tuple(*fields)
    return wds.WebLoader(
        ds, batch_size=BATCH, num_workers=WORKERS, persistent_workers=True, prefetch_factor=2
    )


def wids_loader(shardlist: str, folder: str, train: bool) -> Any:
    import torch.utils.data as tud
    import wids
    from wids.wids_decode import default_decoder

    # cache_dir: the shards' own folder, so wids opens them where they are (it copies a
    # local shard into its cache folder otherwise).
    decode = partial(default_decoder, format="PIL" if train else "numpy")
    # lru_size: every shard kept open. Its default (10 shards) makes a shuffled epoch over more
    # shards reopen (and re-index) a shard at nearly every sample: 15x slower here.
    shards = len(json.loads(Path(shardlist).read_text())["shardlist"])
    ds = wids.ShardListDataset(
        shardlist,
        cache_dir=folder,
        lru_size=max(10, shards),
        transformations=[decode, WidsImage() if train else wids_array],
    )
    return tud.DataLoader(
        ds,
        batch_size=BATCH,
        shuffle=True,
        num_workers=WORKERS,
        persistent_workers=True,
        prefetch_factor=2,
    )


def dali_loader(urls: list[str]) -> Any:
    """DALI's CPU pipeline over the shards; iterating it gives one epoch (the last batch
    partial). Labels come out as the ``.cls`` member's bytes (one digit here)."""
    from image_workloads import DaliPipelineEpochs
    from nvidia.dali import fn, pipeline_def, types

    idx = dali_indexes(urls)

    @pipeline_def(batch_size=BATCH, num_threads=WORKERS, device_id=None, seed=0)
    def pipe():  # type: ignore[no-untyped-def]
        jpegs, labels = fn.readers.webdataset(
            paths=urls,
            index_paths=idx,
            ext=["jpg", "cls"],
            random_shuffle=True,
            pad_last_batch=True,
            name="reader",
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

    return DaliPipelineEpochs(pipe())


def dali_label(labels: Any) -> np.ndarray:
    """The ``.cls`` bytes DALI hands over (ASCII digits, one a label here) as ints."""
    a = np.asarray(labels.cpu() if hasattr(labels, "cpu") else labels, dtype=np.int64)
    return a.reshape(len(a), -1)[:, 0] - ord("0")


# -- epochs --------------------------------------------------------------------------------


def batches_of(loader: Any, shape: tuple[int, ...], label: Callable[[Any], np.ndarray]) -> Any:
    """Runs one epoch of ``loader`` (``(images, labels)`` batches, or packread's dicts) and
    returns the labels it delivered; each batch's sample shape is checked (either layout)."""
    import torch

    def run() -> np.ndarray:
        got = []
        for b in loader:
            x, y = (b[0], b[1]) if isinstance(b, (tuple, list)) else tuple(b.values())
            s = tuple(x.shape[1:])
            assert s == shape or s == (*shape[-1:], *shape[:-1]), (s, shape)
            if isinstance(x, torch.Tensor):
                assert x.dtype in (torch.uint8, torch.float32), x.dtype
            got.append(label(y))
        return np.concatenate(got)

    return run


def plain_label(y: Any) -> np.ndarray:
    """The labels, copied: a training loop keeps no view of a batch, and one kept would stop
    a loader that reuses its batches' memory (packread's) from reusing it."""
    return np.asarray(y, dtype=np.int64).reshape(-1).copy()


def measure(
    contenders: dict[str, Callable[[], np.ndarray]], rounds: int, expect: np.ndarray
) -> dict[str, list[float]]:
    """Seconds per epoch of each contender: one warm-up epoch each, then ``rounds`` rounds
    of one epoch each in an order alternating between rounds. Each epoch's labels must be the
    data set's (``expect``), none dropped or repeated."""
    want = np.bincount(expect)

    def check(name: str, labels: np.ndarray) -> None:
        got = np.bincount(labels, minlength=len(want))
        said = f"{name}: delivered {len(labels)} labels, not the data set's {len(expect)}"
        assert len(got) == len(want), said
        assert np.array_equal(got, want), said

    for name, run in contenders.items():
        check(name, run())
    times: dict[str, list[float]] = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            labels = contenders[name]()
            times[name].append(time.perf_counter() - t0)
            check(name, labels)
    return times


def pack_epochs(src: str, fields: list[str], workers: int, **options: Any) -> Any:
    """``PackDataset`` over the shards, shuffled; with ``workers`` DataLoader processes (each
    with 1 packread thread) or in this process (2 threads). Each iteration is the next
    epoch."""
    import torch.utils.data as tud

    from packread.torch import PackDataset

    threads = 1 if workers else WORKERS
    ds = PackDataset(
        src, BATCH, fields=fields, shuffle=True, seed=0, num_threads=threads, **options
    )
    if not workers:
        return ds
    return tud.DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=True)


# -- the limit -----------------------------------------------------------------------------


def decode_alone(blobs: list[bytes], threads: int, scaled: bool, seed: int = 5) -> float:
    """Images/s simplejpeg decodes ``blobs`` (held in memory) at on ``threads`` threads (a
    ``ThreadPoolExecutor``; it releases the GIL), best of three passes: full decodes, or with
    ``scaled`` at the smallest DCT scale that keeps a random crop (``RandomResizedCrop``'s
    scale and ratio) at least 224 pixels each way."""
    import simplejpeg

    rng = np.random.default_rng(seed)
    mins: list[tuple[int, int] | None] = []
    for b in blobs:
        if not scaled:
            mins.append(None)
            continue
        height, width, _, _ = simplejpeg.decode_jpeg_header(b)
        h, w = crop_box(height, width, rng)
        # libjpeg-turbo's 7/8 is slower than a full decode: scales of 6/8 or less only.
        if max(SIZE / h, SIZE / w) > 0.75:
            mins.append(None)
        else:
            mins.append((math.ceil(height * SIZE / h), math.ceil(width * SIZE / w)))

    def one(k: int) -> None:
        m = mins[k]
        if m is None:
            simplejpeg.decode_jpeg(blobs[k], colorspace="RGB")
        else:
            simplejpeg.decode_jpeg(blobs[k], colorspace="RGB", min_height=m[0], min_width=m[1])

    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in pool.map(one, range(len(blobs))):
                pass
            best = min(best, time.perf_counter() - t0)
    return len(blobs) / best


def crop_box(height: int, width: int, rng: np.random.Generator) -> tuple[int, int]:
    """The height and width of torchvision's ``RandomResizedCrop.get_params`` box."""
    area = height * width
    for _ in range(10):
        a = area * rng.uniform(*SCALE)
        r = math.exp(rng.uniform(*np.log(RATIO)))
        w, h = round(math.sqrt(a * r)), round(math.sqrt(a / r))
        if 0 < w <= width and 0 < h <= height:
            return h, w
    return height, width


# -- report --------------------------------------------------------------------------------


def table(
    title: str,
    times: dict[str, list[float]],
    n: int,
    base: str | None,
    limit: float | None,
    unit: str = "samples",
    limits: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Prints the contenders' rates (median round) as a markdown table (``limits``: rows of
    rates measured apart, the limit among them), then each packread path's ratio to every
    baseline and to the limit; returns the same as a dict."""
    rows: dict[str, dict[str, Any]] = {}
    for k, t in times.items():
        m = statistics.median(t)
        rows[k] = {"seconds": m, "rate": n / m, "all": t}
    baselines = [k for k in rows if not k.startswith("packread")]
    packs = [k for k in rows if k.startswith("packread")]
    rounds = len(next(iter(times.values()))) if times else 0
    print(f"\n**{title}** ({n} {unit} an epoch, median of {rounds} rounds)\n")
    head = f"| loader | {unit}/s |" + (f" x {base.split(' ')[0]} |" if base else "")
    print(head + (" of decode alone |" if limit else ""))
    print("|---|---|" + ("---|" if base else "") + ("---|" if limit else ""))
    for k, row in rows.items():
        line = f"| {k} | {row['rate']:,.0f} |"
        if base:
            row["ratio"] = row["rate"] / rows[base]["rate"]
            line += f" {row['ratio']:.2f}x |"
        if limit:
            row["of_limit"] = row["rate"] / limit
            line += f" {100 * row['of_limit']:.0f} % |"
        print(line)
    for k, rate in (limits or {}).items():
        line = f"| {k} | {rate:,.0f} |" + (" |" if base else "")
        print(line + (f" {100 * rate / limit:.0f} % |" if limit else ""))
    if packs and baselines:
        cols = [f"x {b}" for b in baselines] + (["of decode alone"] if limit else [])
        print("\n| packread | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for p in packs:
            ratios = {b: rows[p]["rate"] / rows[b]["rate"] for b in baselines}
            rows[p]["vs"] = ratios
            cells = [f"**{r:.2f}x**" for r in ratios.values()]
            if limit:
                cells.append(f"{100 * rows[p]['of_limit']:.0f} %")
            print(f"| {p} | " + " | ".join(cells) + " |")
    return {"rows": rows, "base": base, "limit_rate": limit, "samples": n}


# -- the workloads ---------------------------------------------------------------------------


def images_workload(
    root: Path, sizes: Sizes, rounds: int, skipped: dict[str, str], packs: bool
) -> dict[str, Any]:
    folder = root / "images"
    urls = shard_data(
        folder,
        lambda: write_shards(
            folder, photo_samples(sizes.images), sizes.images // sizes.image_shards
        ),
    )
    per_shard = [read_members([u]) for u in urls]  # the fixtures read once: page cache warm
    samples = [s for shard in per_shard for s in shard]
    assert len(samples) == sizes.images, (len(samples), sizes.images)
    blobs = [s["jpg"] for s in samples]
    labels = np.array([int(s["cls"]) for s in samples], np.int64)
    px = np.array([simplejpeg_size(b) for b in blobs])
    print(
        f"images: {len(blobs)} JPEGs q{QUALITY} in {len(urls)} shards, mean "
        f"{px[:, 1].mean():.0f}x{px[:, 0].mean():.0f}, "
        f"{sum(map(len, blobs)) / len(blobs) / 1e3:.0f} KB each, {N_CLASSES} classes"
    )
    shape = (SIZE, SIZE, 3)
    contenders: dict[str, Callable[[], np.ndarray]] = {}
    base = None
    why = missing("webdataset") or missing("torchvision")
    if why is None:
        base = "webdataset WebLoader, 2 workers"
        contenders[base] = batches_of(wds_loader(urls, ("jpg", "cls"), True), shape, plain_label)
    else:
        skipped["webdataset"] = why
    why = missing("wids")
    if why is None:
        lengths = [len(shard) for shard in per_shard]
        shardlist = wids_shardlist(urls, lengths, root / "images.wids.json")
        contenders["wids ShardListDataset, 2 workers"] = batches_of(
            wids_loader(shardlist, str(folder), True), shape, plain_label
        )
    else:
        skipped["wids"] = why + " (not in webdataset 1.0.2: pip install wids==0.1.11)"
    why = missing("nvidia.dali")
    if why is None:
        try:
            contenders["DALI readers.webdataset (CPU, 2 threads)"] = batches_of(
                dali_loader(urls), shape, dali_label
            )
        except Exception as e:
            skipped["DALI"] = f"{type(e).__name__}: {e}"
    else:
        skipped["DALI"] = why
    if packs:
        decode = packread.ImageDecode(SIZE, crop="random", flip=True)
        src = str(folder / "shard-*.tar")
        check_tar(src, samples)
        for w in (0, WORKERS):
            name = (
                "packread PackDataset, 0 workers (2 threads)"
                if w == 0
                else "packread PackDataset, 2 workers (1 thread each)"
            )
            contenders[name] = batches_of(
                pack_epochs(src, ["jpg", "cls"], w, decode=decode), shape, plain_label
            )
    times = measure(contenders, rounds, labels)
    limit = None
    if missing("simplejpeg") is None:
        one = decode_alone(blobs, 1, False)
        limit = decode_alone(blobs, 2, False)
        scaled = decode_alone(blobs, 2, True)
        print(
            f"\nsimplejpeg decode alone ({len(blobs)} JPEGs in memory): full size "
            f"{one:,.0f} images/s on one thread, {limit:,.0f} on two; at the DCT scale a "
            f"random crop allows {scaled:,.0f} on two"
        )
        times_limits = {"one_thread": one, "two_threads": limit, "two_threads_scaled": scaled}
    else:
        skipped["simplejpeg"] = missing("simplejpeg") or ""
        times_limits = {}
    rows = {}
    if times_limits:
        one, scaled = times_limits["one_thread"], times_limits["two_threads_scaled"]
        rows[f"decode alone (simplejpeg, 2 threads; 1 thread: {one:,.0f})"] = limit
        rows["decode alone at the DCT scale the crop allows (simplejpeg, 2 threads)"] = scaled
    out = table(
        "images (RandomResizedCrop 224 + flip, batch 64, one shuffled epoch)",
        times,
        len(labels),
        base,
        limit,
        "images",
        rows,
    )
    out["decode_alone"] = times_limits
    return out


def simplejpeg_size(b: bytes) -> tuple[int, int]:
    """``(height, width)`` of a JPEG (PIL reads only the header)."""
    from PIL import Image

    with Image.open(io.BytesIO(b)) as im:
        return im.height, im.width


def check_tar(src: str, samples: list[dict[str, bytes]]) -> None:
    """packread reads the shards as tarfile and PIL do: keys, labels, whole images."""
    from PIL import Image

    r = packread.TarReader(src, fields=["jpg", "cls"])
    assert len(r) == len(samples), (len(r), len(samples))
    assert list(r.names()) == [s["__key__"] for s in samples]
    idx = [0, len(samples) // 2, len(samples) - 1]
    got = r.batch(idx)  # decode=None: each image whole, a list of (H, W, 3) arrays
    assert got["cls"].tolist() == [int(samples[i]["cls"]) for i in idx]
    for k, i in enumerate(idx):
        with Image.open(io.BytesIO(samples[i]["jpg"])) as im:
            want = np.asarray(im.convert("RGB"))
        assert np.array_equal(np.asarray(got["jpg"][k]), want), i


def raw_workload(
    root: Path, sizes: Sizes, rounds: int, skipped: dict[str, str], packs: bool
) -> dict[str, Any]:
    folder = root / "raw"
    urls = shard_data(
        folder, lambda: write_shards(folder, raw_samples(sizes.raw), sizes.raw_per_shard)
    )
    per_shard = [read_members([u]) for u in urls]  # the fixtures read once: page cache warm
    lengths = [len(shard) for shard in per_shard]
    labels = np.array([int(s["cls"]) for shard in per_shard for s in shard], np.int64)
    assert len(labels) == sizes.raw, (len(labels), sizes.raw)
    print(
        f"\nraw: {sizes.raw} float32 {'x'.join(map(str, RAW_SHAPE))} .npy + .cls in "
        f"{len(urls)} shards of {sizes.raw_per_shard}"
    )
    contenders: dict[str, Callable[[], np.ndarray]] = {}
    base = None
    why = missing("webdataset")
    if why is None:
        base = "webdataset WebLoader, 2 workers"
        contenders[base] = batches_of(
            wds_loader(urls, ("npy", "cls"), False), RAW_SHAPE, plain_label
        )
    else:
        skipped["webdataset"] = why
    why = missing("wids")
    if why is None:
        shardlist = wids_shardlist(urls, lengths, root / "raw.wids.json")
        contenders["wids ShardListDataset, 2 workers"] = batches_of(
            wids_loader(shardlist, str(folder), False), RAW_SHAPE, plain_label
        )
    if packs:
        src = str(folder / "shard-*.tar")
        r = packread.TarReader(src, fields=["npy", "cls"])
        first = per_shard[0][0]
        want = np.load(io.BytesIO(first["npy"]))
        got = r.batch([0])
        assert np.array_equal(got["npy"][0], want)
        assert int(got["cls"][0]) == labels[0]
        contenders["packread PackDataset, 0 workers (2 threads)"] = batches_of(
            pack_epochs(src, ["npy", "cls"], 0), RAW_SHAPE, plain_label
        )
        contenders["packread PackDataset, 2 workers (1 thread each)"] = batches_of(
            pack_epochs(src, ["npy", "cls"], WORKERS), RAW_SHAPE, plain_label
        )
    times = measure(contenders, rounds, labels)
    return table(
        "raw arrays (float32 3x64x64 .npy + .cls, batch 64, one shuffled epoch; goal 5x)",
        times,
        len(labels),
        base,
        None,
        "arrays",
    )


def index_workload(
    root: Path, sizes: Sizes, rounds: int, skipped: dict[str, str], packs: bool
) -> dict[str, Any]:
    folder = root / "index"
    n = sizes.index_shards * sizes.index_per_shard
    urls = shard_data(folder, lambda: write_shards(folder, index_samples(n), sizes.index_per_shard))
    assert len(urls) == sizes.index_shards, (len(urls), sizes.index_shards)
    warm(urls)
    src = str(folder / "shard-*.tar")
    index = root / "index.shard_index.json"
    print(f"\nindex: {len(urls)} shards of {sizes.index_per_shard} samples (.npy + .cls)")

    # The first open walks every shard's headers: with no index cache, every round is one.
    # A reopen takes each shard's walk from the index cache (its own folder here), and with
    # shard_index= the shards' counts from the index file as well.
    cache = root / "index.cache"
    walks = packread.Remote(index_cache=False)
    cached = packread.Remote(index_cache=str(cache))

    def first_open() -> None:
        r = packread.TarReader(src, remote=walks)
        assert len(r) == n

    def cached_open() -> None:
        r = packread.TarReader(src, remote=cached)
        assert len(r) == n

    def build() -> None:
        index.unlink(missing_ok=True)
        r = packread.TarReader(src, shard_index=str(index), remote=cached)
        assert len(r) == n

    def reopen() -> None:
        assert index.exists()
        r = packread.TarReader(src, shard_index=str(index), remote=cached)
        assert len(r) == n

    def reopen_batch() -> None:
        r = packread.TarReader(src, shard_index=str(index), remote=cached)
        r.batch(np.random.default_rng().integers(0, n, BATCH))

    def walk_batch() -> None:
        r = packread.TarReader(src, shard_index=str(index), remote=walks)
        r.batch(np.random.default_rng().integers(0, n, BATCH))

    def wids_index() -> None:
        from wids.wids import IndexedTarSamples

        total = 0
        for u in urls:
            t = IndexedTarSamples(path=u)
            total += len(t)
            t.close()
        assert total == n

    def dali_index() -> None:
        from wds2idx import IndexCreator

        tmp = root / "index.dali.tmp"
        for u in urls:
            with IndexCreator(u, str(tmp), verbose=False) as ic:
                ic.create_index()
        tmp.unlink()

    steps: dict[str, Callable[[], None]] = {}
    if packs:
        steps["packread first open: every shard's headers walked"] = first_open
        steps["packread reopen: every shard's walk from the index cache"] = cached_open
        steps["packread TarReader(glob, shard_index=), writing it"] = build
        steps["packread TarReader(glob, shard_index=), reading it"] = reopen
        steps["packread reopen with shard_index= + one random batch of 64"] = reopen_batch
        steps["the same, no index cache (the batch's shards walked)"] = walk_batch
    if missing("wids") is None:
        steps["wids IndexedTarSamples of every shard"] = wids_index
    else:
        skipped["wids"] = missing("wids") or ""
    if missing("wds2idx") is None:
        steps["DALI wds2idx of every shard"] = dali_index
    else:
        skipped["DALI wds2idx"] = missing("wds2idx") or ""
    for step in steps.values():
        step()  # warm-up (and the index file written once)
    times: dict[str, list[float]] = {k: [] for k in steps}
    names = list(steps)
    for r in range(rounds):
        # build before the reopens in either order: they read what it wrote
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            reads = "shard_index" in name or name.startswith("the same")
            if reads and not index.exists():
                build()
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
    rows = {}
    print(f"\n**open {len(urls)} shards, {n} samples** (median of {rounds} rounds)\n")
    print("| step | ms |\n|---|---|")
    for k, t in times.items():
        m = statistics.median(t)
        rows[k] = {"seconds": m, "all": t}
        print(f"| {k} | {1e3 * m:,.1f} |")
    return {"rows": rows, "shards": len(urls), "samples": n}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=str(ROOT / ".bench" / "tar"), help="where the data is kept")
    p.add_argument("--rounds", type=int, default=None, help="timed epochs (5; 1 with --quick)")
    p.add_argument("--workloads", nargs="+", default=["images", "raw", "index"])
    p.add_argument("--json", help="write the results here")
    p.add_argument(
        "--quick",
        action="store_true",
        help="small data (512 images, 2,000 arrays, 20 shards) and 1 round: a check, not numbers",
    )
    p.add_argument("--only-baselines", action="store_true", help="leave packread out")
    args = p.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 5)
    root = Path(args.dir) / "quick" if args.quick else Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    skipped: dict[str, str] = {}
    packs = not args.only_baselines
    if packs and (why := tar_missing()) is not None:
        print(f"packread left out: {why}; run with --only-baselines", file=sys.stderr)
        return 2
    if args.only_baselines:
        skipped["packread"] = "--only-baselines"
    results: dict[str, Any] = {
        "versions": versions(PACKAGES),
        "quick": args.quick,
        "rounds": rounds,
    }
    print(" ".join(f"{k} {v}" for k, v in results["versions"].items()))
    runs = {"images": images_workload, "raw": raw_workload, "index": index_workload}
    for w in args.workloads:
        results[w] = runs[w](root, sizes, rounds, skipped, packs)
    for name, why in skipped.items():
        print(f"left out: {name} ({why})")
    results["skipped"] = skipped
    results["command"] = " ".join(["python benches/bench_tar.py", *(argv or sys.argv[1:])])
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
