"""Clips (issue 31): packread's ``ClipReader`` against the loaders people write for frame
folders and HDF5 time axes, on the same data, warm page cache, side by side in one run.

Workloads (``--workloads``):

- ``seed``: the spatiotemporal seed's data: 300 datapoints of 100 grey 184x184 JPEG frames
  (PIL's default quality; panned crops of scikit-image's photographs), as frame folders, as
  one stored ZIP, and as the seed's HDF5 ``(300, 100, 184, 184)`` uint8, LZF, one datapoint a
  chunk. Random batches of 10 datapoints, every frame. Against the seed's JPEG ``Dataset``
  (PIL per frame, ``np.stack``) and a simplejpeg ``Dataset``, each under ``DataLoader(
  batch_size=10, num_workers=2)``, and h5py rows under the same DataLoader (the seed's HDF5
  loader). The limit: simplejpeg decoding the frames of 12 datapoints, in memory, on two
  threads (it releases the GIL).
- ``action``: 200 videos of 32 to 300 RGB 320x240 JPEG frames (quality 90) in a class tree.
  One random 16-frame clip a video, frame step 2, ``RandomResizedCrop(112)`` + flip (one box a
  clip), batches of 8. Against torchvision's transforms on PIL frames and a simplejpeg +
  OpenCV ``Dataset``, 2 workers each. Frames/s. The limit: simplejpeg's full decode of
  frames of ten videos, in memory, on two threads.
- ``windows``: a ``(20000, 64, 64)`` float32 time axis (smooth fields, gzip, one frame a
  chunk) in episodes of 100 to 1,000 frames; windows of 16 at stride 1, random batches of 32.
  Against an h5py slicing ``Dataset`` with 2 workers. The limit: zlib inflating the same
  chunks (h5py's ``read_direct_chunk``), in memory, on two threads.

packread runs as a user's loop does: ``batch_async`` two batches in flight in the main
process, and ``PackDataset(num_workers=0)`` (which reuses its batches' memory).

Each round draws fresh random indices and runs every contender on them, in an order that
alternates from round to round; the median round is reported, with samples/s, the ratio to
the first baseline, and packread against the limit. Peers that are not installed (``make
bench-peers``) are left out, named. DALI's ``fn.readers.sequence`` is tried where DALI
installs and reads CPU-only.

    python benches/bench_clips.py --rounds 5 --json .bench/clips.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import packread

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "benches"))

from environment import missing  # noqa: E402

SEED_N, SEED_T, SEED_HW, SEED_BATCH = 300, 100, 184, 10
ACTION_VIDEOS, ACTION_CLIP, ACTION_STEP, ACTION_SIZE, ACTION_BATCH = 200, 16, 2, 112, 8
WIN_T, WIN_HW, WIN_LEN, WIN_BATCH = 20000, 64, 16, 32
WORKERS = 2


def decode_alone(files: list[str], colorspace: str) -> tuple[float, float]:
    """Seconds a frame simplejpeg takes to decode ``files`` (read into memory first) on one
    thread and on two (it releases the GIL): the best of three passes each. This machine's
    decode limit: two threads of it are what two cores give."""
    import simplejpeg

    blobs = []
    for f in files:
        with open(f, "rb") as fh:
            blobs.append(fh.read())

    def work(part: list[bytes]) -> None:
        for b in part:
            simplejpeg.decode_jpeg(b, colorspace=colorspace)

    return threaded(work, blobs, 1), threaded(work, blobs, 2)


def threaded(work: Callable[[list[Any]], Any], items: list[Any], threads: int) -> float:
    """Seconds an item ``work`` takes over ``items`` split between ``threads`` threads (the
    best of three passes)."""
    import threading

    parts = [items[k::threads] for k in range(threads)]
    best = float("inf")
    for _ in range(3):
        ts = [threading.Thread(target=work, args=(p,)) for p in parts]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        best = min(best, time.perf_counter() - t0)
    return best / len(items)


def warm(paths: list[str]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 22):
                pass


def files_below(root: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names)


# -- data --------------------------------------------------------------------------------


def photos_grey() -> list[np.ndarray]:

    from support.images import PHOTOS, photo

    return [np.asarray(photo(p).convert("L")) for p in PHOTOS]


def write_seed(root: Path) -> dict[str, str]:
    """The seed's frame folders, ZIP and HDF5 file (kept between runs)."""
    import h5py
    from PIL import Image

    folders, zpath, hpath = root / "seed_frames", root / "seed.zip", root / "seed.h5"
    done = root / "seed.done"
    if not done.exists():
        pics = photos_grey()
        data = np.empty((SEED_N, SEED_T, SEED_HW, SEED_HW), np.uint8)
        for i in range(SEED_N):
            pic = pics[i % len(pics)]
            h, w = pic.shape
            y0, x0 = (7 * i) % (h - SEED_HW - 100), (11 * i) % (w - SEED_HW - 100)
            folder = folders / f"dp_{i:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            for t in range(SEED_T):
                frame = pic[y0 + t : y0 + t + SEED_HW, x0 + t : x0 + t + SEED_HW]
                Image.fromarray(frame).save(folder / f"img_{t + 1:05d}.jpg")
        with zipfile.ZipFile(zpath, "w", zipfile.ZIP_STORED) as z:
            for f in files_below(str(folders)):
                z.write(f, os.path.relpath(f, folders))
        # The HDF5 copy holds the decoded frames (as the seed stores its datapoints).
        from PIL import Image as Im

        for i in range(SEED_N):
            folder = folders / f"dp_{i:04d}"
            for t in range(SEED_T):
                with Im.open(folder / f"img_{t + 1:05d}.jpg") as im:
                    data[i, t] = np.asarray(im)
        with h5py.File(hpath, "w") as f:
            f.create_dataset(
                "data", data=data, chunks=(1, SEED_T, SEED_HW, SEED_HW), compression="lzf"
            )
        done.touch()
    return {"folders": str(folders), "zip": str(zpath), "h5": str(hpath)}


def write_action(root: Path) -> str:
    """200 videos of 32-300 RGB 320x240 frames in 10 class folders (kept between runs)."""
    from PIL import Image

    from support.images import PHOTOS, photo

    tree = root / "action_tree"
    done = root / "action.done"
    if not done.exists():
        rng = np.random.default_rng(1)
        pics = [np.asarray(photo(p).resize((720, 540))) for p in PHOTOS]
        for v in range(ACTION_VIDEOS):
            n = int(rng.integers(32, 301))
            folder = tree / f"class_{v % 10:02d}" / f"video_{v:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            pic = pics[v % len(pics)]
            for t in range(n):
                y, x = (t * 1) % 290, (t * 2 + v) % 390
                Image.fromarray(pic[y : y + 240, x : x + 320]).save(
                    folder / f"img_{t + 1:05d}.jpg", quality=90
                )
        done.touch()
    return str(tree)


def write_windows(root: Path) -> tuple[str, list[int]]:
    """The time axis and its episode lengths (kept between runs)."""
    import h5py

    path = root / "windows.h5"
    rng = np.random.default_rng(2)
    lengths: list[int] = []
    while sum(lengths) < WIN_T:
        lengths.append(int(rng.integers(100, 1001)))
    lengths[-1] -= sum(lengths) - WIN_T
    if lengths[-1] < 100:
        lengths[-2] += lengths.pop()
    if not path.exists():
        yy, xx = np.mgrid[0:WIN_HW, 0:WIN_HW].astype(np.float32) / WIN_HW
        with h5py.File(path, "w") as f:
            d = f.create_dataset(
                "field",
                (WIN_T, WIN_HW, WIN_HW),
                np.float32,
                chunks=(1, WIN_HW, WIN_HW),
                compression="gzip",
            )
            for at in range(0, WIN_T, 1000):
                t = np.arange(at, at + 1000, dtype=np.float32)[:, None, None] / 200
                block = np.sin(6 * xx + t) * np.cos(4 * yy - 0.5 * t)
                block += rng.standard_normal(block.shape).astype(np.float32) * 0.01
                d[at : at + 1000] = block.astype(np.float32)
            f["episode_ends"] = np.cumsum(lengths)
    return str(path), lengths


# -- baselines (module level: DataLoader workers unpickle them) ----------------------------


class SeedJpegDataset:
    """The seed's JPEG loader: a datapoint is a folder of frames, each opened with PIL."""

    def __init__(self, folders: list[str]) -> None:
        self.folders = folders

    def __len__(self) -> int:
        return len(self.folders)

    def __getitem__(self, i: int) -> np.ndarray:
        from PIL import Image

        frames = []
        for name in sorted(os.listdir(self.folders[i])):
            with Image.open(os.path.join(self.folders[i], name)) as im:
                frames.append(np.asarray(im))
        return np.stack(frames)


class SimpleJpegDataset(SeedJpegDataset):
    """The same with simplejpeg (libjpeg-turbo) decoding."""

    def __getitem__(self, i: int) -> np.ndarray:
        import simplejpeg

        frames = []
        for name in sorted(os.listdir(self.folders[i])):
            with open(os.path.join(self.folders[i], name), "rb") as f:
                frames.append(simplejpeg.decode_jpeg(f.read(), colorspace="GRAY"))
        return np.stack(frames)


class H5RowsDataset:
    """The seed's HDF5 loader: the file opened in each worker, one row a datapoint."""

    def __init__(self, path: str, name: str) -> None:
        self.path, self.name, self.ds = path, name, None

    def __len__(self) -> int:
        import h5py

        with h5py.File(self.path, "r") as f:
            return len(f[self.name])

    def __getitem__(self, i: int) -> np.ndarray:
        import h5py

        if self.ds is None:
            self.ds = h5py.File(self.path, "r")[self.name]
        return self.ds[i]


class ActionPilDataset:
    """One random clip a video with torchvision's transforms on PIL frames: one
    ``RandomResizedCrop`` box and one flip for the clip, as a video training loop does."""

    def __init__(self, videos: list[list[str]]) -> None:
        self.videos = videos

    def __len__(self) -> int:
        return len(self.videos)

    def frames(self, i: int) -> list[str]:
        frames = self.videos[i]
        span = (ACTION_CLIP - 1) * ACTION_STEP + 1
        start = np.random.randint(0, max(len(frames) - span, 0) + 1)
        return [frames[min(start + t * ACTION_STEP, len(frames) - 1)] for t in range(ACTION_CLIP)]

    def __getitem__(self, i: int) -> np.ndarray:
        import torchvision.transforms as T
        import torchvision.transforms.functional as F
        from PIL import Image

        ims = [Image.open(p).convert("RGB") for p in self.frames(i)]
        top, left, h, w = T.RandomResizedCrop.get_params(ims[0], (0.08, 1.0), (3 / 4, 4 / 3))
        flip = np.random.rand() < 0.5
        out = []
        for im in ims:
            c = F.resized_crop(im, top, left, h, w, [ACTION_SIZE, ACTION_SIZE])
            out.append(np.asarray(F.hflip(c) if flip else c))
        return np.stack(out)


class ActionFastDataset(ActionPilDataset):
    """The same with simplejpeg decoding and OpenCV's resize (the fastest Python path)."""

    def __getitem__(self, i: int) -> np.ndarray:
        import cv2
        import simplejpeg
        import torch
        import torchvision.transforms as T

        pics = []
        for p in self.frames(i):
            with open(p, "rb") as f:
                pics.append(simplejpeg.decode_jpeg(f.read()))
        h0, w0 = pics[0].shape[:2]
        # What get_params reads of an image: its size (a tensor of that shape, no memory).
        shaped = torch.zeros(1, dtype=torch.uint8).expand(3, h0, w0)
        top, left, h, w = T.RandomResizedCrop.get_params(shaped, (0.08, 1.0), (3 / 4, 4 / 3))
        flip = np.random.rand() < 0.5
        out = []
        for pic in pics:
            c = cv2.resize(
                pic[top : top + h, left : left + w],
                (ACTION_SIZE, ACTION_SIZE),
                interpolation=cv2.INTER_AREA,
            )
            out.append(c[:, ::-1] if flip else c)
        return np.stack(out)


class H5WindowsDataset:
    """Windows of a time axis by h5py slicing, the file opened in each worker."""

    def __init__(self, path: str, starts: np.ndarray) -> None:
        self.path, self.starts, self.ds = path, starts, None

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> np.ndarray:
        import h5py

        if self.ds is None:
            self.ds = h5py.File(self.path, "r")["field"]
        a = int(self.starts[i])
        return self.ds[a : a + WIN_LEN]


class Batches:
    """A ``batch_sampler`` whose batches the benchmark sets each round."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __iter__(self) -> Any:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def loader(dataset: Any, batches: Batches) -> Any:
    import torch.utils.data as tud

    # torch's default collate: the batch a tensor the worker builds in shared memory (a numpy
    # batch would be pickled through a pipe, a cost no user pays).
    return tud.DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=WORKERS,
        persistent_workers=True,
        prefetch_factor=2,
    )


# -- the runs --------------------------------------------------------------------------------


def measure(
    contenders: dict[str, Callable[[list[np.ndarray]], int]],
    n: int,
    batch: int,
    rounds: int,
    seed: int,
) -> dict[str, list[float]]:
    """Seconds per round of each contender over the same fresh random batches (an epoch of
    ``n`` samples), in an order alternating between rounds."""
    rng = np.random.default_rng(seed)
    times: dict[str, list[float]] = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds):
        perm = rng.permutation(n)
        batches = [perm[a : a + batch] for a in range(0, n - batch + 1, batch)]
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            t0 = time.perf_counter()
            got = contenders[name](batches)
            times[name].append(time.perf_counter() - t0)
            assert got == sum(len(b) for b in batches), (name, got)
    return times


def through(load: Any, box: Batches, check: Callable[[np.ndarray], None]) -> Callable[..., int]:
    def run(batches: list[np.ndarray]) -> int:
        box.batches = [b.tolist() for b in batches]
        done = 0
        for x in load:
            check(np.asarray(x))
            done += len(x)
        return done

    return run


def dali_sequences(root: str, check: Callable[[Any], None]) -> Callable[..., int]:
    """DALI's (deprecated) frame-folder reader on the CPU: ``fn.readers.sequence`` of the
    seed's folders, 100 grey frames a sequence, decoded by the reader; batch 10, 2 threads.
    It shuffles by itself: a round runs as many batches as the others read."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=SEED_BATCH, num_threads=WORKERS, device_id=None, seed=0)
    def pipe():  # type: ignore[no-untyped-def]
        return fn.readers.sequence(
            file_root=root,
            sequence_length=SEED_T,
            step=SEED_T,
            image_type=types.GRAY,
            random_shuffle=True,
            name="reader",
        )

    p = pipe()
    p.build()

    def run(batches: list[np.ndarray]) -> int:
        done = 0
        for b in batches:
            (out,) = p.run()
            x = out.as_array()
            check(x[..., 0] if x.ndim == 5 else x)
            done += len(b)
        return done

    return run


def pack_epochs(reader: Any, batch: int, check: Callable[[Any], None]) -> Callable[..., int]:
    """``PackDataset(reader, batch, shuffle=True)`` with ``num_workers=0``, an epoch a call
    (its own shuffled order; it reuses its batches' memory): as many samples as the others."""
    from packread.torch import PackDataset

    ds = PackDataset(reader, batch, seed=0, drop_last=True)
    epoch = [0]

    def run(batches: list[np.ndarray]) -> int:
        ds.set_epoch(epoch[0])
        epoch[0] += 1
        done = 0
        for x in ds:
            check({k: v.numpy() for k, v in x.items()} if isinstance(x, dict) else x.numpy())
            done += batch
            if done >= sum(len(b) for b in batches):
                break
        return done

    return run


def packread_run(
    read: Callable[[np.ndarray], Any], check: Callable[[Any], None]
) -> Callable[..., int]:
    """The reader's batches two in flight (``batch_async``), in the main process."""

    def run(batches: list[np.ndarray]) -> int:
        done = 0
        pending = read(batches[0]) if batches else None
        for k in range(len(batches)):
            current = pending
            pending = read(batches[k + 1]) if k + 1 < len(batches) else None
            got = current.result()
            check(got)
            done += len(batches[k])
        return done

    return run


def report(
    name: str,
    times: dict[str, list[float]],
    samples: int,
    unit: str,
    base: str,
    limit: float | None,
    frames: int = 1,
    limited: Callable[[str], bool] = lambda k: k.startswith("packread"),
) -> dict[str, Any]:
    rows = {}
    base_s = statistics.median(times[base])
    print(f"\n{name}: {samples} {unit} a round, median of {len(times[base])} rounds")
    for k, t in times.items():
        m = statistics.median(t)
        rate = samples * frames / m
        rows[k] = {"seconds": m, "rate": rate, "ratio": base_s / m, "all": t}
        print(f"  {k:38s} {rate:10,.0f} {'frames' if frames > 1 else unit}/s  {base_s / m:5.2f}x")
    if limit is not None:
        what = "frames" if frames > 1 else unit
        print(f"  {'limit: decode alone, 2 threads':38s} {limit:10,.0f} {what}/s")
        for k, row in rows.items():
            if limited(k):
                row["of_limit"] = row["rate"] / limit
                print(f"  {k:38s} {100 * row['of_limit']:9.0f} % of the limit")
    return {"rows": rows, "base": base, "limit_rate": limit}


def seed_workload(root: Path, rounds: int, skipped: dict[str, str]) -> dict[str, Any]:
    paths = write_seed(root)
    warm([*files_below(paths["folders"]), paths["zip"], paths["h5"]])
    folders = sorted(os.path.join(paths["folders"], d) for d in os.listdir(paths["folders"]))
    decode = packread.ImageDecode(mode="L")
    frames_r = packread.ClipReader(paths["folders"], SEED_T, sampling="uniform", decode=decode)
    zip_r = packread.ClipReader(paths["zip"], SEED_T, sampling="uniform", decode=decode)
    h5_r = packread.ClipReader(paths["h5"], SEED_T, sampling="uniform")
    rows_r = packread.HDF5Reader(paths["h5"], "data")
    shape = (SEED_BATCH, SEED_T, SEED_HW, SEED_HW)

    def check(x: Any) -> None:
        x = np.asarray(x)
        assert x.shape[:2] == shape[:2]
        assert x.shape[2:4] == shape[2:]
        assert x.dtype == np.uint8

    contenders: dict[str, Callable[..., int]] = {}
    box_pil, box_h5 = Batches(), Batches()
    contenders["seed PIL Dataset, 2 workers"] = through(
        loader(SeedJpegDataset(folders), box_pil), box_pil, check
    )
    why = missing("simplejpeg")
    if why is None:
        box_sj = Batches()
        contenders["simplejpeg Dataset, 2 workers"] = through(
            loader(SimpleJpegDataset(folders), box_sj), box_sj, check
        )
    else:
        skipped["simplejpeg"] = why
    why = missing("nvidia.dali")
    if why is None:
        contenders["DALI readers.sequence (CPU, 2 threads)"] = dali_sequences(
            paths["folders"], check
        )
    else:
        skipped["DALI"] = why
    contenders["packread ClipReader, frame folders"] = packread_run(frames_r.batch_async, check)
    contenders["packread PackDataset, frame folders"] = pack_epochs(frames_r, SEED_BATCH, check)
    contenders["packread ClipReader, one ZIP"] = packread_run(zip_r.batch_async, check)
    contenders["packread PackDataset, one ZIP"] = pack_epochs(zip_r, SEED_BATCH, check)
    contenders["h5py rows, 2 workers (seed HDF5)"] = through(
        loader(H5RowsDataset(paths["h5"], "data"), box_h5), box_h5, check
    )
    contenders["packread ClipReader, HDF5"] = packread_run(h5_r.batch_async, check)
    contenders["packread HDF5Reader rows"] = packread_run(rows_r.batch_async, check)
    # Correct before timing: the readers equal PIL and h5py on a few datapoints.
    from support.clips import pil_frames

    got = frames_r.batch([0, 17])
    assert np.array_equal(got, zip_r.batch([0, 17]))
    assert np.array_equal(got[1], pil_frames(frames_r.frames(17), "L"))
    assert np.array_equal(h5_r.batch([5])[0], rows_r.batch([5])[0])
    times = measure(contenders, SEED_N, SEED_BATCH, rounds, 31)
    limit = None
    if missing("simplejpeg") is None:
        spread = [folders[k] for k in range(0, SEED_N, SEED_N // 12)]
        files = [os.path.join(d, f) for d in spread for f in sorted(os.listdir(d))]
        one, two = decode_alone(files, "GRAY")
        limit = 1 / (two * SEED_T)  # datapoints/s: every frame decoded, two threads
        print(
            f"\nsimplejpeg decode alone ({len(files)} frames of 12 datapoints in memory): "
            f"{one * 1e6:.1f} us a frame on one thread, {two * 1e6:.1f} us on two"
        )
    out = report(
        "seed (datapoints of 100 grey 184x184 frames, batch 10)",
        times,
        SEED_N,
        "datapoints",
        "seed PIL Dataset, 2 workers",
        limit,
        limited=lambda k: k.startswith("packread") and ("folders" in k or "ZIP" in k),
    )
    out["ms_per_datapoint"] = {k: 1e3 * statistics.median(t) / SEED_N for k, t in times.items()}
    return out


def action_workload(root: Path, rounds: int, skipped: dict[str, str]) -> dict[str, Any]:
    tree = write_action(root)
    warm(files_below(tree))
    decode = packread.ImageDecode(ACTION_SIZE, crop="random", flip=True)
    r = packread.ClipReader(tree, ACTION_CLIP, frame_step=ACTION_STEP, decode=decode)
    videos = [r.video_frames(v) for v in range(len(r.videos))]
    epoch = [0]

    def read(idx: np.ndarray) -> Any:
        return r.batch_async(idx, epoch=epoch[0])

    def check(x: Any) -> None:
        x = np.asarray(x["frames"] if isinstance(x, dict) else x)
        assert x.shape[1:] == (ACTION_CLIP, ACTION_SIZE, ACTION_SIZE, 3), x.shape

    contenders: dict[str, Callable[..., int]] = {}
    why = missing("torchvision")
    if why is not None:
        skipped["torchvision"] = why
        return {}
    box = Batches()
    contenders["torchvision on PIL, 2 workers"] = through(
        loader(ActionPilDataset(videos), box), box, check
    )
    why = missing("simplejpeg") or missing("cv2")
    if why is None:
        box2 = Batches()
        contenders["simplejpeg + OpenCV, 2 workers"] = through(
            loader(ActionFastDataset(videos), box2), box2, check
        )
    else:
        skipped["simplejpeg + OpenCV"] = why
    run = packread_run(read, check)

    def packread_epochs(batches: list[np.ndarray]) -> int:
        epoch[0] += 1
        return run(batches)

    contenders["packread ClipReader"] = packread_epochs
    contenders["packread PackDataset"] = pack_epochs(r, ACTION_BATCH, check)
    times = measure(contenders, len(r), ACTION_BATCH, rounds, 32)
    limit = None
    if missing("simplejpeg") is None:
        files = [f for v in videos[:: len(videos) // 10] for f in v[:40]]
        one, two = decode_alone(files, "RGB")
        limit = 1 / two  # frames/s: full decode of every frame, two threads
        print(
            f"\nsimplejpeg decode alone ({len(files)} frames in memory, full size): "
            f"{one * 1e6:.1f} us a frame on one thread, {two * 1e6:.1f} us on two"
        )
    n = (len(r) // ACTION_BATCH) * ACTION_BATCH
    return report(
        "action (random 16-frame clips, step 2, RandomResizedCrop 112 + flip, batch 8)",
        times,
        n,
        "clips",
        "torchvision on PIL, 2 workers",
        limit,
        frames=ACTION_CLIP,
    )


def windows_workload(root: Path, rounds: int, skipped: dict[str, str]) -> dict[str, Any]:
    import h5py

    path, lengths = write_windows(root)
    warm([path])
    r = packread.ClipReader(
        path, WIN_LEN, sampling="windows", episodes="episode_ends", arrays="field"
    )
    firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    starts = np.concatenate(
        [f + np.arange(n - WIN_LEN + 1) for f, n in zip(firsts, lengths, strict=False)]
    )
    assert len(starts) == len(r)
    with h5py.File(path, "r") as f:
        d = f["field"]
        for i in (0, 777, len(r) - 1):
            assert np.array_equal(r.batch([i])[0], d[starts[i] : starts[i] + WIN_LEN])

    def check(x: Any) -> None:
        assert np.asarray(x).shape[1:] == (WIN_LEN, WIN_HW, WIN_HW)

    box = Batches()
    contenders = {
        "h5py slicing Dataset, 2 workers": through(
            loader(H5WindowsDataset(path, starts), box), box, check
        ),
        "packread ClipReader windows": packread_run(r.batch_async, check),
        "packread PackDataset windows": pack_epochs(r, WIN_BATCH, check),
    }
    n = 32 * 100  # 100 random batches a round
    times = measure_sub(contenders, len(r), WIN_BATCH, n // WIN_BATCH, rounds, 33)
    # The limit: zlib inflating chunks of the file, in memory, on two threads.
    with h5py.File(path, "r") as f:
        d = f["field"]
        raw = [d.id.read_direct_chunk((t, 0, 0))[1] for t in range(2000)]
    two = threaded(lambda part: [zlib.decompress(b) for b in part], raw, 2)
    limit = 1 / (two * WIN_LEN)  # windows/s
    print(f"\nzlib inflate alone: {two * 1e6:.1f} us a frame on two threads")
    return report(
        "windows (16 frames of a (20000, 64, 64) float32 gzip time axis, batch 32)",
        times,
        n,
        "windows",
        "h5py slicing Dataset, 2 workers",
        limit,
    )


def measure_sub(
    contenders: dict[str, Callable[..., int]],
    n: int,
    batch: int,
    count: int,
    rounds: int,
    seed: int,
) -> dict[str, list[float]]:
    """:func:`measure` over ``count`` random batches of ``n`` samples (not a whole epoch)."""
    rng = np.random.default_rng(seed)
    times: dict[str, list[float]] = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds):
        batches = [rng.integers(0, n, batch) for _ in range(count)]
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            t0 = time.perf_counter()
            got = contenders[name](batches)
            times[name].append(time.perf_counter() - t0)
            assert got == batch * count, (name, got)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=str(ROOT / ".bench" / "clips"), help="where the data is kept")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workloads", nargs="+", default=["seed", "action", "windows"])
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    skipped: dict[str, str] = {}
    results: dict[str, Any] = {}
    runs = {"seed": seed_workload, "action": action_workload, "windows": windows_workload}
    for w in args.workloads:
        results[w] = runs[w](root, args.rounds, skipped)
    for name, why in skipped.items():
        print(f"left out: {name} ({why})")
    results["skipped"] = skipped
    results["command"] = " ".join(["python benches/bench_clips.py", *(argv or sys.argv[1:])])
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
