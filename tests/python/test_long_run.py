"""Long-run resource bounds (docs/BAD_INPUTS.md 31, 33): open/batch/close cycles with flat RSS
and descriptor count, and many threads on one reader for a minute with every result checked.
Marked slow: `make py-test-slow` runs them (~15 min on 2 cores); `make test` does not.
PACKREAD_LONG_CYCLES and PACKREAD_LONG_SECONDS shorten them for a quick look."""

from __future__ import annotations

import os
import threading
import time

import h5py
import numpy as np
import pytest

import packread

CYCLES = int(os.environ.get("PACKREAD_LONG_CYCLES", "100000"))
SECONDS = float(os.environ.get("PACKREAD_LONG_SECONDS", "60"))
WARMUP = max(CYCLES // 10, 1)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("long")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (32, 3, 16, 16), dtype=np.uint8)
    npy = []
    for i, img in enumerate(images[:8]):
        npy.append(str(d / f"{i}.npy"))
        np.save(npy[-1], img)
    npz = []
    for i, img in enumerate(images[:8]):
        npz.append(str(d / f"{i}.npz"))
        np.savez(npz[-1], image=img, label=np.int64(i))
    zpath = str(d / "a.npz")
    np.savez_compressed(zpath, **{f"s{i}": img for i, img in enumerate(images)})
    h5 = str(d / "a.h5")
    with h5py.File(h5, "w") as f:
        f.create_dataset("images", data=images, chunks=(4, 3, 16, 16), compression="gzip")
        f["labels"] = np.arange(32)
    return {"images": images, "npy": npy, "npz": npz, "zip": zpath, "h5": h5}


READERS = {
    "npy": (lambda f: packread.NpyReader(f["npy"]), lambda f, b: b),
    "npz": (lambda f: packread.NpzReader(f["npz"]), lambda f, b: b["image"]),
    "zip": (lambda f: packread.ZipReader(f["zip"]), lambda f, b: b),
    "h5": (lambda f: packread.HDF5Reader(f["h5"]), lambda f, b: b["images"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(READERS))
def test_open_batch_close_cycles_keep_rss_and_fds_flat(files, kind):
    make, images_of = READERS[kind]
    rng = np.random.default_rng(1)

    def cycle():
        idx = rng.integers(0, 8, 3)
        with make(files) as reader:
            got = images_of(files, reader.batch(idx))
        np.testing.assert_array_equal(got, files["images"][idx])

    for _ in range(WARMUP):
        cycle()
    rss, fds = _rss(), _fds()
    for _ in range(CYCLES - WARMUP):
        cycle()
    grew = _rss() - rss
    assert _fds() == fds, f"{kind}: descriptors {fds} -> {_fds()}"
    # Flat: allocator noise only (the batches themselves are ~2 KB).
    assert grew < 16 << 20, f"{kind}: RSS grew by {grew / 2**20:.1f} MiB over {CYCLES} cycles"


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(READERS))
def test_sixteen_threads_on_one_reader_for_a_minute(files, kind):
    make, images_of = READERS[kind]
    reader = make(files)
    n = len(reader)
    want = files["images"]
    deadline = time.monotonic() + SECONDS
    errors: list[str] = []
    counts = [0] * 16

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        try:
            while time.monotonic() < deadline and not errors:
                idx = rng.integers(0, n, int(rng.integers(1, 9)))
                got = images_of(files, reader.batch(idx))
                if not np.array_equal(got, want[idx]):
                    errors.append(f"thread {t}: wrong batch for {idx.tolist()}")
                counts[t] += 1
        except BaseException as exc:
            errors.append(f"thread {t}: {exc!r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(SECONDS + 120)
    assert not any(th.is_alive() for th in threads), "a thread never finished"
    assert errors == []
    assert all(c > 0 for c in counts), counts
