"""The release wheel against the development build, on the paths whose speed is the compiler's.

`make wheel` builds the wheel's C libraries (libhdf5, c-blosc2, zlib, zstd, lz4, libdeflate,
libjpeg-turbo) with zig's clang and links it with zig, for glibc 2.17; `make develop` builds
the same sources with the machine's gcc. Users install the wheel, so its decode speed is what
they see. This runs the same workloads through both, alternated round by round in one run:
the wheel installed in a fresh virtual environment (numpy only), the development build in
.venv. Usage (`make bench-wheel`):

    python benches/bench_wheel.py dist/packread-*.whl [--rounds 7]

Prints samples/s per workload for each build and the ratio wheel / develop."""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile

import h5py
import hdf5plugin
import numpy as np
from PIL import Image

#: One timed call of each workload: batches of BATCH fresh random indices, for at least
#: MIN_BATCHES batches and MIN_SECONDS.
TIMED = r"""
import json, sys, time
import numpy as np
import packread

here, workload, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
BATCH, MIN_BATCHES, MIN_SECONDS = 64, 10, 0.5
if workload.startswith("hdf5-"):
    reader = packread.HDF5Reader(f"{here}/{workload}.h5", "x")
elif workload == "jpeg-224":
    reader = packread.ImageReader(f"{here}/jpegs.zip", labels=False, size=224, resize=256)
elif workload == "png":
    reader = packread.ImageReader(f"{here}/pngs.zip", labels=False, size=128, resize=128)
rng = np.random.default_rng(seed)
n = len(reader)
reader.batch(rng.integers(0, n, BATCH))  # warm: threads started, metadata read
batches, started = 0, time.perf_counter()
while batches < MIN_BATCHES or time.perf_counter() - started < MIN_SECONDS:
    reader.batch(rng.integers(0, n, BATCH))
    batches += 1
took = time.perf_counter() - started
print(json.dumps({"samples_per_s": BATCH * batches / took}))
"""

WORKLOADS = ("hdf5-gzip", "hdf5-blosc-lz4", "hdf5-blosc-zstd", "jpeg-224", "png")


def write_fixtures(here: str) -> None:
    """Larger than the CPU caches: 8,000 samples of 3x64x64 (98 MiB) per HDF5 file, one
    sample a chunk; 600 JPEGs of 320x288 and 600 PNGs of 160x144 (smooth pictures with
    noise, as photographs compress)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:64, 0:64]
    base = np.stack([x * 4, y * 4, (x + y) * 2], axis=0).astype(np.int64)
    data = np.empty((8000, 3, 64, 64), np.uint8)
    for i in range(len(data)):
        data[i] = np.clip(base + rng.integers(-20, 20, base.shape), 0, 255)
    filters = {
        "hdf5-gzip": {"compression": "gzip", "compression_opts": 4, "shuffle": True},
        "hdf5-blosc-lz4": dict(hdf5plugin.Blosc(cname="lz4", clevel=5)),
        "hdf5-blosc-zstd": dict(hdf5plugin.Blosc(cname="zstd", clevel=3)),
    }
    for name, kw in filters.items():
        with h5py.File(os.path.join(here, f"{name}.h5"), "w") as f:
            f.create_dataset("x", data=data, chunks=(1, 3, 64, 64), **kw)
    for name, fmt, (h, w), n in (
        ("jpegs", "JPEG", (288, 320), 600),
        ("pngs", "PNG", (144, 160), 600),
    ):
        yy, xx = np.mgrid[0:h, 0:w]
        with zipfile.ZipFile(os.path.join(here, f"{name}.zip"), "w") as z:
            for i in range(n):
                rgb = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy + i) % 256], axis=-1)
                rgb = np.clip(rgb + rng.integers(0, 16, rgb.shape), 0, 255).astype(np.uint8)
                buf = io.BytesIO()
                Image.fromarray(rgb).save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
                z.writestr(f"{i:04d}.{fmt.lower()}", buf.getvalue())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        here = os.path.join(tmp, "data")
        os.mkdir(here)
        write_fixtures(here)
        venv = os.path.join(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        wheel_py = os.path.join(venv, "bin", "python")
        numpy_pin = f"numpy=={np.__version__}"
        subprocess.run(
            [
                wheel_py,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                numpy_pin,
                args.wheel,
            ],
            check=True,
        )
        script = os.path.join(tmp, "timed.py")
        with open(script, "w") as f:
            f.write(TIMED)
        for path in os.listdir(here):  # read once: a cold page cache is not what we compare
            with open(os.path.join(here, path), "rb") as f:
                while f.read(1 << 24):
                    pass
        builds = {"develop": sys.executable, "wheel": wheel_py}
        rates: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            order = list(builds.items()) if r % 2 == 0 else list(builds.items())[::-1]
            for workload in WORKLOADS:
                for build, py in order:
                    out = subprocess.run(
                        [py, "-I", script, here, workload, str(r)],
                        capture_output=True,
                        text=True,
                        check=True,
                        cwd=tmp,
                    ).stdout
                    rate = json.loads(out)["samples_per_s"]
                    rates.setdefault((workload, build), []).append(rate)
        print(
            f"{'workload':<18}{'develop (gcc)':>16}{'wheel (zig)':>16}{'wheel/develop':>16}"
            f"{'rounds won by the wheel':>26}"
        )
        for workload in WORKLOADS:
            dev, whl = rates[(workload, "develop")], rates[(workload, "wheel")]
            d, w = statistics.median(dev), statistics.median(whl)
            won = sum(b > a for a, b in zip(dev, whl, strict=True))
            print(f"{workload:<18}{d:>14,.0f}/s{w:>14,.0f}/s{w / d:>15.2f}x{won:>20} of {len(dev)}")
        print(f"median of {args.rounds} rounds, each >= 0.5 s of batches of 64 random samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
