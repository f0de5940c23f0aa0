"""The files the examples of the README and of docs/*.md name, written by the writers users
use (numpy, h5py, PyTables, zipfile, PIL), small enough that every example runs in seconds.

Each file is what the pages say it is: ``train.h5`` holds images and labels (and a dataset of
another length, which ``h.skipped`` shows), ``train.zip`` is a ZIP of images labelled by its
``dataset.json``, ``raw.zip`` holds raw 3x256x256 members, ``data/train_*.h5`` are two shards of
500 samples, ``shards/train-*.tar`` two WebDataset shards (``shard.tar.gz``: the first,
gzipped)... Names an example writes (``packread convert``'s outputs, ``train.idx.json``) are
not here."""

from __future__ import annotations

import gzip
import io
import json
import os
import zipfile
from pathlib import Path

import h5py
import numpy as np
import tables
import webdataset
from PIL import Image

#: Samples in ``train.h5`` (the examples index up to 42; a DataLoader epoch is two batches).
TRAIN = 128
#: Images in ``train.zip`` and rows of ``frames.h5``.
IMAGES = 8
#: Samples in each WebDataset shard ``shards/train-00000k.tar`` (two shards).
SHARD = 8


def _image(rng: np.random.Generator, h: int = 24, w: int = 32) -> Image.Image:
    """A small picture: smooth gradients with a little noise (not all noise, not flat)."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 127 // (h + w)], axis=-1)
    noise = rng.integers(0, 16, (h, w, 3))
    return Image.fromarray((base + noise).clip(0, 255).astype(np.uint8), "RGB")


def _encoded(rng: np.random.Generator, k: int) -> tuple[str, bytes]:
    """Image ``k`` as PIL saves it: JPEG, PNG or WebP in turn, with its suffix."""
    fmt, suffix = [("JPEG", ".jpg"), ("PNG", ".png"), ("WEBP", ".webp")][k % 3]
    buf = io.BytesIO()
    _image(rng, 24 + 2 * (k % 4), 32).save(buf, fmt)
    return suffix, buf.getvalue()


def _npy(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, x)
    return buf.getvalue()


def _tree(root: Path, rng: np.random.Generator, classes: tuple[str, ...], per_class: int) -> None:
    """An ``ImageFolder`` tree: ``root/<class>/<file>``."""
    for c in classes:
        (root / c).mkdir(parents=True)
        for k in range(per_class):
            suffix, data = _encoded(rng, k)
            (root / c / f"{c}_{k}{suffix}").write_bytes(data)


def _tree_zip(path: Path, rng: np.random.Generator, classes: tuple[str, ...]) -> None:
    """An ``ImageFolder`` tree packed in a ZIP: members ``<class>/<file>``."""
    with zipfile.ZipFile(path, "w") as z:
        for c in classes:
            for k in range(2):
                suffix, data = _encoded(rng, k)
                z.writestr(f"{c}/{c}_{k}{suffix}", data)


def write(root: str | os.PathLike[str]) -> None:
    """Writes every file the examples name into ``root``."""
    root = Path(root)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (TRAIN, 3, 16, 16), dtype=np.uint8)

    # HDF5 (h5py): images and labels, one sample per gzip chunk, and per-channel means.
    # A training step of the user's own, for `packread bench --headspace --step`.
    (root / "mymodel.py").write_text("def train_step(batch):\n    return None\n")
    with h5py.File(root / "train.h5", "w") as f:
        f.create_dataset("images", data=images, chunks=(1, 3, 16, 16), compression="gzip")
        f.create_dataset("labels", data=np.arange(TRAIN, dtype=np.int64) % 10)
        f.create_dataset("mean", data=images.mean(axis=(0, 2, 3)))
    # Variable-length sequences, as PyTables writes them (a VLArray).
    with tables.open_file(root / "speech.h5", "w") as f:
        utterances = f.create_vlarray("/", "utterances", tables.Float32Atom())
        for i in range(32):
            utterances.append(rng.random(5 + i % 7, dtype=np.float32))
    # The PyTables write-up's pattern: one flat array plus start/stop rows.
    lengths = 3 + np.arange(32) % 5
    stops = np.cumsum(lengths)
    with h5py.File(root / "data.h5", "w") as f:
        f.create_dataset("data", data=rng.random(int(stops[-1]), dtype=np.float32))
        f.create_dataset("data_start_and_stop", data=np.stack([stops - lengths, stops], axis=1))
    # Encoded images in HDF5 rows (h5py vlen uint8), with labels.
    with h5py.File(root / "frames.h5", "w") as f:
        jpegs = f.create_dataset("jpegs", (IMAGES,), dtype=h5py.vlen_dtype(np.uint8))
        for k in range(IMAGES):
            buf = io.BytesIO()
            _image(rng).save(buf, "JPEG")
            jpegs[k] = np.frombuffer(buf.getvalue(), np.uint8)
        f.create_dataset("labels", data=np.arange(IMAGES, dtype=np.int64) % 2)
    # Clips: frame folders of three videos (a panning picture), and the spatiotemporal seed's
    # HDF5 layout, (N, 100, H, W) sequences one a chunk, with an episodes file beside them.
    picture = np.asarray(_image(rng, 64, 96))
    for v, n in enumerate((20, 24, 40)):
        (root / "frames" / f"v_{v:03d}").mkdir(parents=True)
        for t in range(n):
            frame = Image.fromarray(picture[t % 20 : t % 20 + 40, v + t : v + t + 48])
            frame.save(root / "frames" / f"v_{v:03d}" / f"img_{t + 1:05d}.jpg")
    seqs = rng.integers(0, 256, (4, 100, 16, 16), dtype=np.uint8)
    with h5py.File(root / "seed.h5", "w") as f:
        f.create_dataset("data", data=seqs, chunks=(1, 100, 16, 16), compression="lzf")
    with h5py.File(root / "episodes.h5", "w") as f:
        f.create_dataset("obs", data=rng.random((300, 6), dtype=np.float32), chunks=(16, 6))
        f.create_dataset("action", data=rng.random((300, 2), dtype=np.float32))
        f.create_dataset("episode_ends", data=np.array([120, 200, 300]))
    # Two shards of 500 samples.
    (root / "data").mkdir()
    for s in range(2):
        with h5py.File(root / "data" / f"train_{s:03d}.h5", "w") as f:
            f.create_dataset("images", data=rng.integers(0, 256, (500, 3, 4, 4), dtype=np.uint8))
            f.create_dataset("labels", data=np.arange(500, dtype=np.int64) % 10)

    # NPY and NPZ (numpy): single files, and folders of one sample per file.
    np.save(root / "sample.npy", rng.random((4, 8), dtype=np.float32))
    np.savez(root / "sample.npz", image=images[0], mask=images[0, 0] > 128)
    # Rows of whole arrays (docs/zip-npy-npz.md, docs/sources.md): X.npy, y.npy, train.npz.
    x, y = rng.random((100, 32), dtype=np.float32), np.arange(100)
    np.save(root / "X.npy", x)
    np.save(root / "y.npy", y)
    np.savez(root / "train.npz", x=x, y=y)
    for folder, n in (("train", 64), ("npy", 16)):
        (root / "data" / folder).mkdir()
        for i in range(n):
            np.save(root / "data" / folder / f"{i:03d}.npy", rng.random((4, 8), dtype=np.float32))
    (root / "data" / "npz").mkdir()
    for i in range(16):
        np.savez_compressed(
            root / "data" / "npz" / f"{i:03d}.npz", image=images[i], mask=images[i, 0] > 128
        )

    # ZIP (zipfile): raw 3x256x256 uint8 members, and .npy members (one archive, two shards).
    with zipfile.ZipFile(root / "raw.zip", "w") as z:
        for name in "abcdefgh":
            z.writestr(f"{name}.raw", rng.integers(0, 256, 3 * 256 * 256, np.uint8).tobytes())
    for name, members in (("arrays.zip", "ab"), ("part0.zip", "abc"), ("part1.zip", "def")):
        with zipfile.ZipFile(root / name, "w") as z:
            for m in members:
                z.writestr(f"{m}.npy", _npy(rng.random((4, 8), np.float32)))

    # Encoded images: a ZIP labelled by its dataset.json, ImageFolder trees (a folder, a ZIP).
    with zipfile.ZipFile(root / "train.zip", "w") as z:
        labels = {}
        for k in range(IMAGES):
            suffix, data = _encoded(rng, k)
            name = f"img/{k:04d}{suffix}"
            z.writestr(name, data)
            labels[name] = k % 2
        z.writestr("dataset.json", json.dumps({"labels": labels, "classes": ["cat", "dog"]}))
    _tree(root / "val", rng, ("cat", "dog"), 2)
    _tree(root / "imagenet" / "train", rng, ("cat", "dog", "rocket"), 3)
    for s in range(2):
        _tree_zip(root / "imagenet" / f"part{s}.zip", rng, ("cat", "dog"))

    # WebDataset shards, as webdataset's ShardWriter writes them: samples 000000, 000001...
    # of a photo (.jpg), a label (.cls) and a caption (.json), SHARD to a shard; and the first
    # shard gzipped (shard.tar.gz), as shards are often downloaded.
    (root / "shards").mkdir()
    pattern = str(root / "shards" / "train-%06d.tar")
    with webdataset.ShardWriter(pattern, maxcount=SHARD, verbose=0) as sink:
        for i in range(2 * SHARD):
            buf = io.BytesIO()
            _image(rng, 24 + 2 * (i % 4), 32).save(buf, "JPEG")
            caption = {"caption": f"picture {i}", "width": 32}
            sink.write(
                {"__key__": f"{i:06d}", "jpg": buf.getvalue(), "cls": i % 2, "json": caption}
            )
    first = (root / "shards" / "train-000000.tar").read_bytes()
    (root / "shard.tar.gz").write_bytes(gzip.compress(first))
