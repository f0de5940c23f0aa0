"""The main job: a DataLoader epoch over a dataset in each format, through packread and through
the seed users' own Dataset classes, samples/s side by side.

Run with `make demo`. The datasets (a few hundred MB in all) are written once into `.demo/` and
reused by later runs. Every epoch is checked: all samples arrive, and packread's first batch
equals what h5py / numpy / zipfile read at the same indices.

Each loader runs a warm-up epoch first (workers start, pages come in), then whole epochs until
at least a second has passed: a fast loader's epoch over this small set takes milliseconds, and
a rate timed over milliseconds says more about the machine's mood than about the loader.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "benches"))

from workloads import (  # noqa: E402
    BATCH,
    FORMATS,
    Workload,
    pack_loader,
    run_epoch,
    seed_loader,
    warm,
    write_workloads,
)

import packread  # noqa: E402

N_SAMPLES = 512  # per format: ~100 MB of 3x256x256 uint8 images each
MIN_SECONDS = 1.0  # each rate is timed over whole epochs spanning at least this long
CACHE = os.path.join(HERE, "..", ".demo")


def progress(label: str, total: int):
    """A progress line, rewritten in place on a terminal; one line when it ends elsewhere."""
    last = [0.0]
    tty = sys.stdout.isatty()

    def show(done: int) -> None:
        now = time.perf_counter()
        if tty and (now - last[0] > 0.1 or done == total):
            last[0] = now
            print(f"\r  {label:<40} {done:>5}/{total} samples", end="", flush=True)
        elif not tty and done == total:
            print(f"  {label:<40} {done:>5}/{total} samples", flush=True)

    return show


def epoch_rate(w: Workload, label: str, make_loader) -> float:
    """samples/s of a fresh loader over whole epochs spanning at least ``MIN_SECONDS``, after
    a warm-up epoch (the first starts the workers)."""
    loader = make_loader()
    run_epoch(loader)
    samples, seconds = 0, 0.0
    while seconds < MIN_SECONDS:
        epoch = run_epoch(loader, progress=progress(label, w.n) if not samples else None)
        assert epoch.samples == w.n, f"{label}: {epoch.samples} samples, expected {w.n}"
        samples += epoch.samples
        seconds += epoch.seconds
    return samples / seconds


def check_first_batch(w: Workload) -> None:
    """packread's batch equals the seed Dataset's samples at the same indices."""
    ds = w.pack(shuffle=False)
    got = next(iter(torch.utils.data.DataLoader(ds, batch_size=None)))
    seed = w.seed_dataset()
    for k in (0, BATCH // 2, BATCH - 1):
        want = seed[k]
        if isinstance(want, dict):
            assert all(np.array_equal(got[key][k].numpy(), want[key].numpy()) for key in want)
        elif isinstance(want, tuple):
            image, label = want
            images = got["images"] if isinstance(got, dict) else got
            assert np.array_equal(images[k].numpy(), image.numpy())
            if isinstance(got, dict):
                assert int(got["labels"][k]) == label
        else:
            assert np.array_equal(got[k].numpy(), want.numpy())


def main() -> None:
    print(
        f"packread {packread.__version__}: one DataLoader epoch per format, {N_SAMPLES} samples "
        f"of 3x256x256 uint8, batches of {BATCH}, shuffled, warm page cache, "
        f"{packread.get_num_threads()} packread threads\n"
    )
    workloads = write_workloads(CACHE, N_SAMPLES, log=lambda m: print("  " + m, flush=True))
    rows = []
    for fmt in FORMATS:
        w = workloads[fmt]
        warm(w.path)
        check_first_batch(w)
        seed = epoch_rate(w, f"{fmt}: seed Dataset, 2 workers", lambda w=w: seed_loader(w, 2))
        own = epoch_rate(w, f"{fmt}: PackDataset, num_workers=0", lambda w=w: pack_loader(w, 0))
        two = epoch_rate(w, f"{fmt}: PackDataset, 2 workers", lambda w=w: pack_loader(w, 2))
        chunk = None
        if fmt == "hdf5-lzf":
            chunk = epoch_rate(
                w,
                f"{fmt}: PackDataset, chunk shuffle",
                lambda w=w: pack_loader(w, 0, shuffle_mode="chunk"),
            )
        rows.append((fmt, w.nbytes, seed, own, two, chunk))
        if sys.stdout.isatty():
            print("\r" + " " * 70, end="\r")
    print(
        f"{'format':<12} {'on disk':>8} {'seed Dataset':>13} {'PackDataset':>12} "
        f"{'PackDataset':>12} {'best':>7}"
    )
    print(f"{'':<12} {'':>8} {'2 workers':>13} {'0 workers':>12} {'2 workers':>12} {'/ seed':>7}")
    for fmt, nbytes, seed, own, two, chunk in rows:
        best = max(own, two, chunk or 0)
        print(
            f"{fmt:<12} {nbytes / 1e6:>6.0f}MB {seed:>11,.0f}/s {own:>10,.0f}/s {two:>10,.0f}/s "
            f"{best / seed:>6.1f}x"
        )
        if chunk is not None:
            print(f"{'':<12} {'':>8} {'':>13} {chunk:>10,.0f}/s  (shuffle_mode='chunk')")
    print(
        f"\nsamples/s over whole epochs spanning at least {MIN_SECONDS:.0f} s, after a warm-up "
        "epoch; best / seed: packread's best / seed's"
    )


if __name__ == "__main__":
    main()
