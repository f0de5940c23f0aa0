"""packread builds side by side: this checkout against the build of an earlier commit (or any
other), on the paths a change touched, alternated round by round in one run.

    python benches/bench_builds.py --build base=.bench/builds/959622d/python --build new=python
    make bench-builds BASE=959622d        # builds BASE's extension in a worktree, then runs this

A build is a folder holding the ``packread`` package with its compiled extension (a checkout's
``python/`` after ``make develop``). Every timed call is a fresh process with that folder first
on ``sys.path``; within a round the builds run back to back, in an order that alternates from
round to round, so a drift of the machine's speed falls on both. Each call warms up (threads
started, metadata read, the data read once: the page cache holds it), then times batches of
fresh random indices for at least ``--seconds``. The data is larger than the CPU caches.

Prints, per workload, each build's median rate, the ratio to the first build's with the range
of the per-round ratios, and how many rounds each build won. The workloads:

- ``jpeg-eval``, ``jpeg-random``: ImageNet-like JPEGs (about 500x375, quality 90) in a stored
  ZIP, 224x224 eval crops (crop-decoding the box) and random-resized crops, batches of 64;
- ``jpeg-small``: 64x64 JPEGs decoded whole, batches of 256 (what a decode's fixed cost is);
- ``png``: 160x144 PNGs, resized to 128, batches of 64;
- ``hdf5-raw``: 3x64x64 uint8 samples, one uncompressed chunk each (98 MiB), batches of 64;
- ``hdf5-open``: opening a dataset of 100,000 chunks (opens/s);
- ``shards``: 200 HDF5 shards of 40 gzip samples of 3x32x32, batches of 64 over all of them;
- ``blosc-*``: PyTables CArrays of 8 rows of 800 KB (the chanshing seed's layout) and of
  3x64x64 samples with blosc's lz4hc, lz4, zstd and blosclz, batches of 8 or 64.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

#: One timed call: prints {"rate": ..., "unit": ...}.
TIMED = r"""
import json, sys, time
import numpy as np
import packread

data, workload, seed, MIN_SECONDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
rng = np.random.default_rng(seed)
if workload == "hdf5-open":
    path = f"{data}/open.h5"
    packread.HDF5Reader(path, "x")
    opens, started = 0, time.perf_counter()
    while opens < 3 or time.perf_counter() - started < MIN_SECONDS:
        packread.HDF5Reader(path, "x").close()
        opens += 1
    print(json.dumps({"rate": opens / (time.perf_counter() - started), "unit": "opens/s"}))
    sys.exit()
batch = 64
if workload == "jpeg-eval":
    reader = packread.ImageReader(f"{data}/imagenet.zip", labels=False, size=224, resize=256)
elif workload == "jpeg-random":
    reader = packread.ImageReader(f"{data}/imagenet.zip", labels=False, size=224, crop="random")
elif workload == "jpeg-small":
    reader, batch = packread.ImageReader(f"{data}/small.zip", labels=False, size=64), 256
elif workload == "png":
    reader = packread.ImageReader(f"{data}/pngs.zip", labels=False, size=128, resize=128)
elif workload == "hdf5-raw":
    reader = packread.HDF5Reader(f"{data}/raw.h5", "x")
elif workload == "shards":
    reader = packread.HDF5Reader(f"{data}/shards/s_*.h5", "x")
elif workload.startswith("blosc-rows-"):
    reader, batch = packread.HDF5Reader(f"{data}/{workload}.h5", "/x"), 8
elif workload.startswith("blosc-"):
    reader = packread.HDF5Reader(f"{data}/{workload}.h5", "/x")
n = len(reader)
epoch = 0
for start in range(0, n, 256):  # read once: the page cache holds it, as for a user's 2nd epoch
    reader.batch(range(start, min(n, start + 256)))
batches, started = 0, time.perf_counter()
while batches < 5 or time.perf_counter() - started < MIN_SECONDS:
    epoch += 1
    kw = {"epoch": epoch} if workload.startswith("jpeg") else {}
    reader.batch(rng.integers(0, n, batch), **kw)
    batches += 1
took = time.perf_counter() - started
print(json.dumps({"rate": batch * batches / took, "unit": "samples/s"}))
"""

WORKLOADS = (
    "jpeg-eval",
    "jpeg-random",
    "jpeg-small",
    "png",
    "hdf5-raw",
    "hdf5-open",
    "shards",
    "blosc-rows-lz4hc",
    "blosc-lz4",
    "blosc-zstd",
    "blosc-blosclz",
)


def _smooth(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> np.ndarray:
    """``n`` uint8 images of ``shape`` whose rows are random walks: smooth, as photographs are,
    so codecs compress them somewhat, unlike noise."""
    steps = rng.integers(-3, 4, (n, *shape), dtype=np.int16)
    steps[..., 0] = rng.integers(0, 256, (n, *shape[:-1]), dtype=np.int16)
    return (np.cumsum(steps, axis=-1, dtype=np.int16) % 256).astype(np.uint8)


def _jpeg(im, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def write_fixtures(data: Path) -> None:
    """Writes every workload's files once (kept between runs)."""
    done = data / "done"
    if done.exists():
        return
    import h5py
    import tables
    from PIL import Image

    sys.path.insert(0, str(HERE))
    from image_workloads import write_image_workload

    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    w = write_image_workload(str(data / "imagenet"), 600, log=lambda _: None)
    os.replace(w.zip_path, data / "imagenet.zip")
    shutil.rmtree(data / "imagenet")
    images = _smooth(rng, 8000, (3, 64, 64))  # 98 MiB
    with zipfile.ZipFile(data / "small.zip", "w") as z:
        for k, im in enumerate(images[:2000]):
            z.writestr(f"{k:05d}.jpg", _jpeg(Image.fromarray(im.transpose(1, 2, 0)), quality=90))
    with zipfile.ZipFile(data / "pngs.zip", "w") as z:
        for k, im in enumerate(_smooth(rng, 600, (144, 160, 3))):
            pic = Image.fromarray(im)
            buf = io.BytesIO()
            pic.save(buf, "PNG")
            z.writestr(f"{k:05d}.png", buf.getvalue())
    with h5py.File(data / "raw.h5", "w") as f:
        f.create_dataset("x", data=images, chunks=(1, 3, 64, 64))
    with h5py.File(data / "open.h5", "w") as f:
        f.create_dataset("x", data=np.arange(100_000, dtype="<i4"), chunks=(1,))
    (data / "shards").mkdir()
    for k in range(200):
        with h5py.File(data / "shards" / f"s_{k:03d}.h5", "w") as f:
            part = images[k * 40 : (k + 1) * 40, :, :32, :32]
            f.create_dataset("x", data=part, chunks=(1, 3, 32, 32), compression="gzip")
    # The chanshing seed: 8 rows of 800 KB a dataset (float32 200,000), blosc lz4hc; and
    # 3x64x64 samples one a chunk, with each of blosc's fast codecs.
    rows = np.cumsum(rng.normal(size=(8, 200_000)), axis=1).astype("<f4")
    layouts = {
        "blosc-rows-lz4hc": (rows, "lz4hc", (1, 200_000)),
        "blosc-lz4": (images, "lz4", (1, 3, 64, 64)),
        "blosc-zstd": (images, "zstd", (1, 3, 64, 64)),
        "blosc-blosclz": (images, "blosclz", (1, 3, 64, 64)),
    }
    for name, (values, codec, chunk) in layouts.items():
        with tables.open_file(str(data / f"{name}.h5"), "w") as f:
            filters = tables.Filters(complevel=5, complib=f"blosc:{codec}", shuffle=True)
            f.create_carray("/", "x", obj=values, filters=filters, chunkshape=chunk)
    done.write_text("ok")


def timed(build: str, data: Path, workload: str, seed: int, seconds: float) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(build))
    out = subprocess.run(
        [sys.executable, "-c", TIMED, str(data), workload, str(seed), str(seconds)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=str(data),
    )
    if out.returncode != 0:
        raise SystemExit(f"{build} {workload}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", required=True, metavar="LABEL=FOLDER")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--seconds", type=float, default=1.0, help="timed per call, at least")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--data", default=str(REPO / ".bench" / "builds-data"))
    ap.add_argument("--json", help="also write the rates here")
    args = ap.parse_args()
    builds = dict(b.split("=", 1) for b in args.build)
    data = Path(args.data)
    write_fixtures(data)
    labels = list(builds)
    rates: dict[str, dict[str, list[float]]] = {w: {b: [] for b in labels} for w in args.workloads}
    units: dict[str, str] = {}
    for r in range(args.rounds):
        order = labels if r % 2 == 0 else labels[::-1]
        for w in args.workloads:
            for b in order:
                got = timed(builds[b], data, w, seed=r, seconds=args.seconds)
                rates[w][b].append(got["rate"])
                units[w] = got["unit"]
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    first = labels[0]
    print(f"{'workload':<17}" + "".join(f"{b:>14}" for b in labels) + "   ratio to " + first)
    for w in args.workloads:
        med = {b: statistics.median(rates[w][b]) for b in labels}
        line = f"{w:<17}" + "".join(f"{med[b]:>14,.0f}" for b in labels)
        for b in labels[1:]:
            per_round = [x / y for x, y in zip(rates[w][b], rates[w][first], strict=True)]
            wins = sum(x > 1 for x in per_round)
            line += (
                f"   {b}: {med[b] / med[first]:.2f}x "
                f"({min(per_round):.2f}-{max(per_round):.2f}, won {wins}/{len(per_round)})"
            )
        print(line + f"   {units[w]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"builds": builds, "rates": rates, "units": units}))


if __name__ == "__main__":
    main()
