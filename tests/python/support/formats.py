"""One small dataset in every format packread reads, written by the writers users use (np.save,
np.savez, zipfile, h5py), with packread's reader for it and the reference reader's answer for any
list of indices. Shared by the reader-protocol and torch tests (a module of its own so that spawn
workers can import what they unpickle)."""

from __future__ import annotations

import glob
import io
import json
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

import packread

#: Samples per dataset: divisible by none of the batch sizes, worker or rank counts used.
N = 37
SHAPE = (2, 5, 7)
#: Every case :func:`write_all` writes: the shared format matrix, images included.
CASE_NAMES = [
    "npy",
    "zip_raw",
    "zip_npy",
    "npz",
    "h5",
    "h5_lzf",
    "h5_shards",
    "h5_ragged",
    "h5_ragged_shards",
    "zip_shards",
    "npy_rows",
    "npy_rows_file",
    "npz_rows",
    "img_zip",
    "img_tree",
    "img_h5",
    "img_shards",
    "img_h5_shards",
    "clip_tree",
    "clip_zip",
    "clip_h5",
    "clip_shards",
    "tar_one",
    "tar_shards",
    "zip_fields",
]
#: Cases whose samples differ in size (variable-length HDF5): a batch holds them as the reader's
#: ``ragged=`` says, a list of arrays or ``(values, offsets)``, and cannot be read into ``out=``.
RAGGED_NAMES = ["h5_ragged", "h5_ragged_shards"]
#: How the HDF5 case's samples split into shards (one empty): sums to N.
SHARD_SIZES = (1, 7, 0, 26, 3)


@dataclass
class Case:
    """One dataset: how packread opens it and what its samples are."""

    name: str
    #: What PackDataset takes as ``source``.
    source: Any
    #: Reader options PackDataset passes on (``**reader_options``), and ``datasets=``.
    options: dict[str, Any] = field(default_factory=dict)
    datasets: Any = None
    #: Builds the reference answer for a list of sample indices.
    reference: Callable[[list[int]], Any] = None  # type: ignore[assignment]
    #: Samples decoded together (HDF5 chunks holding several samples).
    samples_per_chunk: int = 1

    def open(self) -> packread.BatchReader:
        src = self.source
        if self.name.startswith(("img", "clip", "tar")) or "format" in self.options:  # as a user
            reader = packread.open(src, **self.options)
            assert isinstance(
                reader,
                (packread.ImageReader, packread.ClipReader, packread.TarReader, packread.NpzReader),
            )
            return reader
        if self.name.startswith("h5"):
            return packread.HDF5Reader(src, self.datasets, **self.options)
        if self.name.startswith("zip"):
            return packread.ZipReader(src, **self.options)
        if self.name.startswith("npz"):
            return packread.NpzReader(src, **self.options)
        return packread.NpyReader(src, **self.options)


def _images(seed: int, dtype: str = "<f4") -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, *SHAPE)).astype(dtype)


def _stack(arrays: list[np.ndarray], like: np.ndarray) -> np.ndarray:
    out = np.empty((len(arrays), *like.shape[1:]), dtype=like.dtype)
    for k, a in enumerate(arrays):
        out[k] = a
    return out


def write_all(root: str) -> dict[str, Case]:
    """Writes every case under ``root`` and returns them by name."""
    cases: dict[str, Case] = {}
    os.makedirs(root, exist_ok=True)

    # A folder of .npy files (np.save), one sample each.
    npy_dir = os.path.join(root, "npy")
    os.makedirs(npy_dir, exist_ok=True)
    images = _images(1)
    paths = []
    for i in range(N):
        p = os.path.join(npy_dir, f"s{i:03d}.npy")
        np.save(p, images[i])
        paths.append(p)
    cases["npy"] = Case(
        "npy",
        npy_dir,
        reference=lambda rows, paths=paths: _stack(
            [np.load(paths[i]) for i in rows], np.empty((0, *SHAPE), "<f4")
        ),
    )

    # A ZIP of raw members (zipfile, stored) next to a labels file, as the SURF seed packs it.
    raw = _images(2)
    zpath = os.path.join(root, "raw.zip")
    names = [f"img/{i:03d}.raw" for i in range(N)]
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_STORED) as z:
        z.writestr("dataset.json", json.dumps({"labels": list(range(N))}))
        for i, name in enumerate(names):
            z.writestr(name, raw[i].tobytes())

    def zip_raw_ref(rows: list[int], zpath=zpath, names=names) -> np.ndarray:
        with zipfile.ZipFile(zpath) as z:
            arrays = [np.frombuffer(z.read(names[i]), "<f4").reshape(SHAPE) for i in rows]
        return _stack(arrays, np.empty((0, *SHAPE), "<f4"))

    cases["zip_raw"] = Case(
        "zip_raw",
        zpath,
        options={"members": "img/*.raw", "dtype": "<f4", "shape": SHAPE},
        reference=zip_raw_ref,
    )

    # A ZIP of deflated .npy members.
    npys = _images(3, ">f8")
    zpath2 = os.path.join(root, "npy.zip")
    names2 = [f"{i:03d}.npy" for i in range(N)]
    with zipfile.ZipFile(zpath2, "w", zipfile.ZIP_DEFLATED) as z:
        for i, name in enumerate(names2):
            buf = io.BytesIO()
            np.save(buf, npys[i])
            z.writestr(name, buf.getvalue())

    def zip_npy_ref(rows: list[int], zpath=zpath2, names=names2) -> np.ndarray:
        with zipfile.ZipFile(zpath) as z:
            arrays = [np.load(io.BytesIO(z.read(names[i]))) for i in rows]
        return _stack(arrays, np.empty((0, *SHAPE), ">f8"))

    cases["zip_npy"] = Case("zip_npy", zpath2, reference=zip_npy_ref)

    # A folder of NPZ files (an image and a label each), some compressed.
    npz_dir = os.path.join(root, "npz")
    os.makedirs(npz_dir, exist_ok=True)
    imgs = _images(4, "<f2")
    labels = np.arange(N, dtype="<i8") * 3
    npz_paths = []
    for i in range(N):
        p = os.path.join(npz_dir, f"s{i:03d}.npz")
        save = np.savez_compressed if i % 2 else np.savez
        save(p, image=imgs[i], label=labels[i])
        npz_paths.append(p)

    def npz_ref(rows: list[int], paths=npz_paths) -> dict[str, np.ndarray]:
        loaded = [np.load(paths[i]) for i in rows]
        return {
            "image": _stack([d["image"] for d in loaded], np.empty((0, *SHAPE), "<f2")),
            "label": _stack([d["label"] for d in loaded], np.empty((0,), "<i8")),
        }

    cases["npz"] = Case("npz", npz_dir, reference=npz_ref)

    # HDF5 (h5py): images gzip+shuffle one sample per chunk, labels auto-chunked.
    h5path = os.path.join(root, "data.h5")
    h5_images = _images(5)
    h5_labels = np.arange(N, dtype="<i4")[::-1].copy()
    with h5py.File(h5path, "w") as f:
        f.create_dataset(
            "images", data=h5_images, chunks=(1, *SHAPE), compression="gzip", shuffle=True
        )
        f.create_dataset("labels", data=h5_labels, chunks=True)

    def h5_ref(rows: list[int], path=h5path) -> dict[str, np.ndarray]:
        with h5py.File(path, "r") as f:
            return {
                "images": _stack([f["images"][i] for i in rows], np.empty((0, *SHAPE), "<f4")),
                "labels": _stack([np.asarray(f["labels"][i]) for i in rows], np.empty((0,), "<i4")),
            }

    cases["h5"] = Case("h5", h5path, reference=h5_ref)

    # HDF5 (h5py): one dataset, LZF chunks of 4 samples (decoded together).
    lzf_path = os.path.join(root, "lzf.h5")
    lzf_images = _images(6)
    with h5py.File(lzf_path, "w") as f:
        f.create_dataset("x", data=lzf_images, chunks=(4, *SHAPE), compression="lzf")

    def lzf_ref(rows: list[int], path=lzf_path) -> np.ndarray:
        with h5py.File(path, "r") as f:
            return _stack([f["x"][i] for i in rows], np.empty((0, *SHAPE), "<f4"))

    cases["h5_lzf"] = Case("h5_lzf", lzf_path, datasets="x", reference=lzf_ref, samples_per_chunk=4)

    # The same HDF5 samples as shards of unequal sizes, one of them empty (one reader over
    # their concatenation, as writer processes leave them).
    shard_paths = []
    at = 0
    for k, size in enumerate(SHARD_SIZES):
        p = os.path.join(root, f"shard_{k}.h5")
        with h5py.File(p, "w") as f:
            chunked = {"chunks": (1, *SHAPE), "compression": "gzip", "shuffle": True}
            f.create_dataset("images", data=h5_images[at : at + size], **(chunked if size else {}))
            f.create_dataset("labels", data=h5_labels[at : at + size])
        shard_paths.append(p)
        at += size

    def h5_shards_ref(rows: list[int], paths=shard_paths) -> dict[str, np.ndarray]:
        parts: dict[str, list[np.ndarray]] = {"images": [], "labels": []}
        for p in paths:  # h5py reads each shard; the shards concatenated
            with h5py.File(p, "r") as f:
                for k in parts:
                    parts[k].append(f[k][()])
        whole = {k: np.concatenate(v) for k, v in parts.items()}
        return {k: _stack([v[i] for i in rows], v[:0]) for k, v in whole.items()}

    cases["h5_shards"] = Case("h5_shards", shard_paths, reference=h5_shards_ref)

    # The raw ZIP's members split over three archives.
    zip_paths = []
    at = 0
    for k, size in enumerate((20, 0, 17)):
        p = os.path.join(root, f"part{k}.zip")
        with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
            for i in range(at, at + size):
                z.writestr(names[i], raw[i].tobytes())
        zip_paths.append(p)
        at += size

    def zip_shards_ref(rows: list[int], paths=zip_paths) -> np.ndarray:
        members: list[bytes] = []
        for p in paths:
            with zipfile.ZipFile(p) as z:
                members += [z.read(n) for n in sorted(z.namelist())]
        arrays = [np.frombuffer(members[i], "<f4").reshape(SHAPE) for i in rows]
        return _stack(arrays, np.empty((0, *SHAPE), "<f4"))

    cases["zip_shards"] = Case(
        "zip_shards",
        os.path.join(root, "part*.zip"),
        options={"dtype": "<f4", "shape": SHAPE},
        reference=zip_shards_ref,
    )

    # Rows of whole arrays, the most common NumPy layout: X.npy and y.npy (np.save) whose first
    # axis is the samples, read together; compared with np.load(mmap_mode="r")[rows].
    x_path, y_path = os.path.join(root, "X.npy"), os.path.join(root, "y.npy")
    np.save(x_path, _images(7, ">i2"))
    np.save(y_path, np.arange(N, dtype="<i8") * 7)

    def rows_ref(rows: list[int], x=x_path, y=y_path) -> dict[str, np.ndarray]:
        return {
            "x": np.load(x, mmap_mode="r")[rows].copy(),
            "y": np.load(y, mmap_mode="r")[rows].copy(),
        }

    cases["npy_rows"] = Case("npy_rows", {"x": x_path, "y": y_path}, reference=rows_ref)

    # The rows of one .npy through a Python binary file object (io.BytesIO: it pickles).
    with open(x_path, "rb") as f:
        x_bytes = f.read()
    cases["npy_rows_file"] = Case(
        "npy_rows_file",
        io.BytesIO(x_bytes),
        reference=lambda rows, x=x_path: np.load(x, mmap_mode="r")[rows].copy(),
    )

    # The rows of a stored NPZ's members (np.savez), from bytes in memory.
    buf = io.BytesIO()
    np.savez(buf, a=_images(8, "<f4"), b=np.arange(N, dtype="<i4")[::-1].copy())
    npz_bytes = buf.getvalue()

    def npz_rows_ref(rows: list[int], raw=npz_bytes) -> dict[str, np.ndarray]:
        with np.load(io.BytesIO(raw)) as d:
            return {k: d[k][rows] for k in ("a", "b")}

    # Bytes of a ZIP say nothing of NPZ (a name would): the format is named.
    cases["npz_rows"] = Case(
        "npz_rows", npz_bytes, options={"format": "npz"}, reference=npz_rows_ref
    )
    cases.update(write_ragged_cases(root))
    cases.update(write_image_cases(root))
    cases.update(write_clip_cases(root))
    cases.update(write_tar_cases(root))
    return cases


def _sequences() -> list[np.ndarray]:
    """``N`` float32 sequences of 0 to 11 values; sample 5 is empty."""
    rng = np.random.default_rng(7)
    seqs = [rng.standard_normal(int(rng.integers(0, 12))).astype("<f4") for _ in range(N)]
    seqs[5] = seqs[5][:0]
    return seqs


def _write_ragged(path: str, seqs: list[np.ndarray], labels: np.ndarray, **dataset: Any) -> None:
    with h5py.File(path, "w") as f:
        d = f.create_dataset("seqs", (len(seqs),), dtype=h5py.vlen_dtype(np.float32), **dataset)
        for i, seq in enumerate(seqs):
            d[i] = seq
        f.create_dataset("labels", data=labels)


def _flat(seqs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``ragged="flat"``'s form of a batch of sequences: the values end to end and the
    ``len(seqs) + 1`` offsets where each starts (int64)."""
    values = np.concatenate([np.empty(0, "<f4"), *seqs])
    offsets = np.cumsum([0, *(len(s) for s in seqs)], dtype=np.int64)
    return values, offsets


def write_ragged_cases(root: str) -> dict[str, Case]:
    """Variable-length float32 sequences (h5py ``vlen_dtype``) beside int64 labels: one file
    (gzip chunks of 4 rows), read as lists of arrays; and the same samples as shards (a glob,
    one shard empty, contiguous layout), read with ``ragged="flat"`` as ``(values, offsets)``,
    so that both of the library's forms run through the matrix."""
    seqs = _sequences()
    labels = (np.arange(N, dtype="<i8") * 7) % 5
    path = os.path.join(root, "ragged.h5")
    _write_ragged(path, seqs, labels, chunks=(4,), compression="gzip")
    at = 0
    for k, size in enumerate(SHARD_SIZES):
        _write_ragged(
            os.path.join(root, f"ragged_part{k}.h5"), seqs[at : at + size], labels[at : at + size]
        )
        at += size

    def read(paths: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
        """Every sequence and label, as h5py reads the files (concatenated)."""
        seqs: list[np.ndarray] = []
        labels: list[np.ndarray] = []
        for p in paths:
            with h5py.File(p, "r") as f:
                seqs += [np.asarray(f["seqs"][i]) for i in range(len(f["seqs"]))]
                labels.append(f["labels"][()])
        return seqs, np.concatenate(labels)

    def ragged_ref(rows: list[int]) -> dict[str, Any]:
        seqs, labels = read([path])
        return {
            "labels": _stack([labels[i] for i in rows], labels[:0]),
            "seqs": [seqs[i] for i in rows],
        }

    pattern = os.path.join(root, "ragged_part*.h5")

    def shards_ref(rows: list[int]) -> dict[str, Any]:
        seqs, labels = read(sorted(glob.glob(pattern)))
        return {
            "labels": _stack([labels[i] for i in rows], labels[:0]),
            "seqs": _flat([seqs[i] for i in rows]),
        }

    return {
        "h5_ragged": Case("h5_ragged", path, reference=ragged_ref, samples_per_chunk=4),
        "h5_ragged_shards": Case(
            "h5_ragged_shards", pattern, {"ragged": "flat"}, reference=shards_ref
        ),
    }


#: Stored image size: decoded at this size with ``resize`` its shorter side, a sample is the
#: image exactly as PIL decodes it.
IMAGE_HW = (10, 12)
IMAGE_DECODE = {"size": IMAGE_HW, "resize": min(IMAGE_HW)}


def _png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    return buf.getvalue()


def _pil(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def write_image_cases(root: str) -> dict[str, Case]:
    """The same ``N`` PNG images (written by PIL) with labels five ways: a ZIP with
    ``dataset.json``, an ImageFolder tree, an h5py variable-length dataset of the encoded bytes
    beside a labels dataset, ZIP shards (one holding only its ``dataset.json``), and HDF5 shards
    like the one file (a glob, one shard of no rows)."""
    rng = np.random.default_rng(9)
    encoded = [_png(rng.integers(0, 256, (*IMAGE_HW, 3), dtype=np.uint8)) for _ in range(N)]
    labels = np.array([(5 * i + 2) % 3 for i in range(N)], dtype=np.int64)
    decode = packread.ImageDecode(**IMAGE_DECODE)

    def reference(rows: list[int], order: list[int] | None = None) -> dict[str, np.ndarray]:
        at = list(range(N)) if order is None else order
        images = [_pil(encoded[at[i]]) for i in rows]
        return {
            "images": _stack(images, np.empty((0, *IMAGE_HW, 3), np.uint8)),
            "labels": _stack([labels[at[i]] for i in rows], np.empty((0,), np.int64)),
        }

    cases: dict[str, Case] = {}
    names = [f"img/{i:03d}.png" for i in range(N)]
    zpath = os.path.join(root, "images.zip")
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_STORED) as z:
        for name, data in zip(names, encoded, strict=True):
            z.writestr(name, data)
        table = dict(zip(names, labels.tolist(), strict=True))
        z.writestr("dataset.json", json.dumps({"labels": table}))
    cases["img_zip"] = Case("img_zip", zpath, {"decode": decode}, reference=reference)

    # An ImageFolder tree: class folders sorted, files sorted within each (torchvision's
    # order), so the samples are the images grouped by label.
    tree = os.path.join(root, "tree")
    order = sorted(range(N), key=lambda i: (int(labels[i]), f"{i:03d}"))
    for i in range(N):
        folder = os.path.join(tree, f"class{labels[i]}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{i:03d}.png"), "wb") as f:
            f.write(encoded[i])
    cases["img_tree"] = Case(
        "img_tree",
        tree,
        {"decode": decode},
        reference=lambda rows, order=order: reference(rows, order),
    )

    def write_h5(path: str, rows: range) -> None:
        with h5py.File(path, "w") as f:
            d = f.create_dataset("jpegs", (len(rows),), dtype=h5py.vlen_dtype(np.uint8))
            for k, i in enumerate(rows):
                d[k] = np.frombuffer(encoded[i], np.uint8)
            f["labels"] = labels[rows.start : rows.stop].astype("<i4")

    h5_options = {"decode": decode, "images": "jpegs", "labels": "labels"}
    hpath = os.path.join(root, "images.h5")
    write_h5(hpath, range(N))
    cases["img_h5"] = Case("img_h5", hpath, h5_options, reference=reference)
    at = 0
    for k, size in enumerate((15, 0, 22)):
        write_h5(os.path.join(root, f"imgh5_part{k}.h5"), range(at, at + size))
        at += size
    cases["img_h5_shards"] = Case(
        "img_h5_shards", os.path.join(root, "imgh5_part*.h5"), h5_options, reference=reference
    )

    at = 0
    for k, size in enumerate((15, 0, 22)):
        with zipfile.ZipFile(os.path.join(root, f"imgpart{k}.zip"), "w") as z:
            own = {names[i]: int(labels[i]) for i in range(at, at + size)}
            for i in range(at, at + size):
                z.writestr(names[i], encoded[i])
            z.writestr("dataset.json", json.dumps({"labels": own}))
        at += size
    cases["img_shards"] = Case(
        "img_shards", os.path.join(root, "imgpart*.zip"), {"decode": decode}, reference=reference
    )
    return cases


#: Clips of the matrix: 3 frames of 10x12 (PNG, exact), evenly placed in videos of 3 to 7.
CLIP_LEN = 3
CLIP_OPTIONS = {"clip_len": CLIP_LEN, "sampling": "uniform"}


def write_clip_cases(root: str) -> dict[str, Case]:
    """``N`` videos of 3 to 7 PNG frames (a camera panning over one of scikit-image's photos)
    with labels four ways: a class tree of frame folders, the same tree in a ZIP, ZIP shards of
    it (each holding both classes), and an h5py file of ``(N, 7, 10, 12, 3)`` sequences with a
    labels dataset; read as one evenly placed clip of 3 frames a video."""
    from support.clips import pan, reference_positions
    from support.images import PHOTOS

    lengths = [3 + (3 * i) % 5 for i in range(N)]
    labels = np.array([i % 2 for i in range(N)], dtype=np.int64)
    videos = [
        [np.asarray(f) for f in pan(PHOTOS[i % len(PHOTOS)], lengths[i], IMAGE_HW, at=i)]
        for i in range(N)
    ]
    encoded = [[_png(f) for f in v] for v in videos]
    names = [f"c{labels[i]}/v{i:03d}" for i in range(N)]
    order = sorted(range(N), key=lambda i: names[i])

    def reference(rows: list[int], at: list[int], n_frames: list[int]) -> dict[str, np.ndarray]:
        clips = []
        for i in rows:
            v = at[i]
            positions = reference_positions(n_frames[v], CLIP_LEN)
            clips.append(np.stack([_pil(encoded[v][p]) for p in positions]))
        return {
            "frames": _stack(clips, np.empty((0, CLIP_LEN, *IMAGE_HW, 3), np.uint8)),
            "labels": _stack([labels[at[i]] for i in rows], np.empty((0,), np.int64)),
        }

    cases: dict[str, Case] = {}
    tree = os.path.join(root, "clip_tree")
    for i in range(N):
        folder = os.path.join(tree, names[i])
        os.makedirs(folder, exist_ok=True)
        for t, data in enumerate(encoded[i]):
            with open(os.path.join(folder, f"img_{t + 1:05d}.png"), "wb") as f:
                f.write(data)
    cases["clip_tree"] = Case(
        "clip_tree",
        tree,
        dict(CLIP_OPTIONS),
        reference=lambda rows: reference(rows, order, lengths),
    )

    def write_zip(path: str, videos: list[int]) -> None:
        with zipfile.ZipFile(path, "w") as z:
            for i in videos:
                for t, data in enumerate(encoded[i]):
                    z.writestr(f"{names[i]}/img_{t + 1:05d}.png", data)

    zpath = os.path.join(root, "clips.zip")
    write_zip(zpath, order)
    cases["clip_zip"] = Case(
        "clip_zip",
        zpath,
        dict(CLIP_OPTIONS),
        reference=lambda rows: reference(rows, order, lengths),
    )
    parts = [order[::2], order[1::2]]  # each shard holds both classes
    shard_order = []
    for k, part in enumerate(parts):
        write_zip(os.path.join(root, f"clippart{k}.zip"), part)
        shard_order += sorted(part, key=lambda i: names[i])
    cases["clip_shards"] = Case(
        "clip_shards",
        os.path.join(root, "clippart*.zip"),
        dict(CLIP_OPTIONS),
        reference=lambda rows: reference(rows, shard_order, lengths),
    )

    # The seed's HDF5 layout: one row a datapoint, its frames along the second axis.
    hpath = os.path.join(root, "clips.h5")
    seqs = np.stack(
        [np.stack([_pil(encoded[i][min(t, lengths[i] - 1)]) for t in range(7)]) for i in range(N)]
    )
    with h5py.File(hpath, "w") as f:
        f.create_dataset("frames", data=seqs, chunks=(1, 7, *IMAGE_HW, 3), compression="lzf")
        f["labels"] = labels

    def h5_reference(rows: list[int]) -> dict[str, np.ndarray]:
        start = reference_positions(7, CLIP_LEN)[0]
        with h5py.File(hpath, "r") as f:
            return {
                "frames": _stack(
                    [f["frames"][i, start : start + CLIP_LEN] for i in rows],
                    np.empty((0, CLIP_LEN, *IMAGE_HW, 3), np.uint8),
                ),
                "labels": _stack([f["labels"][i] for i in rows], np.empty((0,), np.int64)),
            }

    cases["clip_h5"] = Case(
        "clip_h5", hpath, {**CLIP_OPTIONS, "labels": "labels"}, reference=h5_reference
    )
    return cases


#: The tar cases' labels: a ``.cls`` member per sample.
TAR_LABELS = [(3 * i + 1) % 4 for i in range(N)]


def write_tar_cases(root: str) -> dict[str, Case]:
    """``N`` images (crops of scikit-image's photos, stored at the decoded size so that a
    sample is exactly what PIL decodes) with ``.cls`` labels three ways: one webdataset shard
    of JPEGs (webdataset's ``TarWriter``) read with ``fields=["jpg", "cls"]``; three shards of
    15, 15 and 7 samples by its ``ShardWriter``, every third image a PNG, read as
    ``{"image": "jpg;png", "label": "cls"}``; and a ZIP of the one shard's members read by
    ``ZipReader(fields=["jpg", "cls"])``."""
    import webdataset

    from support.tars import crop, jpeg
    from support.tars import png as png_bytes

    decode = packread.ImageDecode(**IMAGE_DECODE)
    labels = np.array(TAR_LABELS, dtype=np.int64)
    jpgs = [jpeg(crop(i, IMAGE_HW)) for i in range(N)]
    keys = [f"img/s{i:03d}" for i in range(N)]

    def reference(rows: list[int], images: list[bytes], names: tuple[str, str]) -> dict:
        return {
            names[0]: _stack(
                [_pil(images[i]) for i in rows], np.empty((0, *IMAGE_HW, 3), np.uint8)
            ),
            names[1]: _stack([labels[i] for i in rows], np.empty((0,), np.int64)),
        }

    one = os.path.join(root, "one.tar")
    with webdataset.TarWriter(one, mtime=0) as w:
        for i in range(N):
            w.write({"__key__": keys[i], "jpg": jpgs[i], "cls": int(labels[i])})
    options = {"fields": ["jpg", "cls"], "decode": decode}
    cases = {
        "tar_one": Case(
            "tar_one",
            one,
            dict(options),
            reference=lambda rows: reference(rows, jpgs, ("jpg", "cls")),
        )
    }

    mixed = [png_bytes(crop(i, IMAGE_HW)) if i % 3 == 0 else jpgs[i] for i in range(N)]
    pattern = os.path.join(root, "tarpart-%02d.tar")
    with webdataset.ShardWriter(pattern, maxcount=15, verbose=0, mtime=0) as w:
        for i in range(N):
            w.write(
                {
                    "__key__": keys[i],
                    "png" if i % 3 == 0 else "jpg": mixed[i],
                    "cls": int(labels[i]),
                }
            )
    cases["tar_shards"] = Case(
        "tar_shards",
        os.path.join(root, "tarpart-*.tar"),
        {"fields": {"image": "jpg;png", "label": "cls"}, "decode": decode},
        reference=lambda rows: reference(rows, mixed, ("image", "label")),
    )

    zpath = os.path.join(root, "fields.zip")
    with zipfile.ZipFile(zpath, "w") as z:
        for i in range(N):
            z.writestr(f"{keys[i]}.cls", str(labels[i]), zipfile.ZIP_DEFLATED)
            z.writestr(f"{keys[i]}.jpg", jpgs[i], zipfile.ZIP_STORED)
    cases["zip_fields"] = Case(
        "zip_fields",
        zpath,
        dict(options),
        reference=lambda rows: reference(rows, jpgs, ("jpg", "cls")),
    )
    return cases


#: The datasets of :func:`write_layouts`, one per storage layout and pipeline.
LAYOUTS = ["gz", "lzf", "raw", "contig", "compact", "g/f32"]


def write_layouts(root: str) -> Case:
    """An HDF5 file (h5py) with a dataset in every storage layout and several pipelines: gzip +
    shuffle chunks of 16 samples, LZF chunks that split a sample, one raw chunk per sample,
    contiguous, compact (read through libhdf5) and Fletcher-32 in a group."""
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "layouts.h5")
    rng = np.random.default_rng(20)
    data = {
        "gz": rng.standard_normal((N, 3, 8, 8)).astype("<f4"),
        "lzf": rng.integers(-(2**40), 2**40, (N, 10)).astype("<i8"),
        "raw": rng.integers(0, 2**16, (N, 6)).astype("<u2"),
        "contig": rng.standard_normal((N, 2, 2)).astype("<f8"),
        "compact": rng.integers(-(2**15), 2**15, (N, 4)).astype("<i2"),
        "g/f32": rng.integers(-(2**31), 2**31, (N, 5)).astype("<i4"),
    }
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "gz", data=data["gz"], chunks=(16, 3, 8, 8), compression="gzip", shuffle=True
        )
        f.create_dataset("lzf", data=data["lzf"], chunks=(5, 4), compression="lzf")
        f.create_dataset("raw", data=data["raw"], chunks=(1, 6))
        f.create_dataset("contig", data=data["contig"])
        f.create_dataset("g/f32", data=data["g/f32"], chunks=(7, 5), fletcher32=True)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple(data["compact"].shape)
        tid = h5py.h5t.py_create(data["compact"].dtype)
        dsid = h5py.h5d.create(f.id, b"compact", tid, space, dcpl=dcpl)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data["compact"])

    def reference(rows: list[int], path=path) -> dict[str, np.ndarray]:
        with h5py.File(path, "r") as f:
            return {
                k: _stack([f[k][i] for i in rows], np.empty((0, *f[k].shape[1:]), f[k].dtype))
                for k in sorted(LAYOUTS)
            }

    return Case("h5_layouts", path, reference=reference, samples_per_chunk=16)


def as_reference(got: Any, want: Any) -> Any:
    """A batch as packread.torch yields it (tensors, in dicts, lists or tuples as the reader's
    batch is) as numpy arrays in the reference's dtypes: torch holds native byte order, so the
    values are compared in the file's. Anything else is left for :func:`same` to refuse."""
    if isinstance(want, dict) and isinstance(got, dict):
        return {k: as_reference(v, want[k]) if k in want else v for k, v in got.items()}
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)) and len(got) == len(want):
        # A DataLoader's default_convert makes a tuple (``ragged="flat"``'s ``(values,
        # offsets)``) a list: torch's rule, which the reader tests do not go through.
        if isinstance(want, list) and not isinstance(got, list):
            return got
        return type(want)(as_reference(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, np.ndarray) and hasattr(got, "numpy"):
        return got.numpy().astype(want.dtype)
    return got


def same(got: Any, want: Any) -> bool:
    """Bit-for-bit equality of arrays (or dicts of arrays, or the lists and tuples of arrays a
    ragged batch is), dtype and shape included."""
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and list(got) == list(want)
            and all(same(got[k], want[k]) for k in want)
        )
    if isinstance(want, (list, tuple)):
        return (
            type(got) is type(want)
            and len(got) == len(want)
            and all(same(g, w) for g, w in zip(got, want, strict=True))
        )
    if isinstance(got, (list, tuple)):
        return False
    got = np.asarray(got)
    return (
        got.dtype == want.dtype
        and got.shape == want.shape
        and np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()
    )
