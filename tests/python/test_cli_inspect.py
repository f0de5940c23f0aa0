"""`packread inspect`: the tree and the advice on layouts written by the real writers (h5py,
PyTables, hdf5plugin, numpy, zipfile), checked against what those writers report."""

from __future__ import annotations

import json
import zipfile

import h5py
import hdf5plugin
import numpy as np
import pytest
import tables

from packread.cli import main
from packread.cli.inspect import MIN_CHUNK_BYTES, describe_filter, inspect

IMAGE = (3, 64, 64)  # 12 KiB: 100 samples make a dataset past NEGLIGIBLE_BYTES


def images(n=100, seed=0):
    """Rows that are random walks: smooth like photographs, so gzip and friends shrink them."""
    steps = np.random.default_rng(seed).integers(-2, 3, (n, *IMAGE))
    return (np.cumsum(steps, axis=-1) % 256).astype(np.uint8)


def codes(report, target=None):
    return sorted(a.code for a in report.advice if target is None or a.target == target)


def item(report, name):
    return next(i for i in report.items if i.name == name)


def test_sample_aligned_hdf5_gets_no_advice(tmp_path):
    path = tmp_path / "aligned.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images(), chunks=(1, *IMAGE), compression="gzip")
        f.create_dataset("labels", data=np.arange(100), chunks=(100,))
    report = inspect(path)
    assert report.format == "hdf5"
    assert report.samples == 100
    assert report.advice == []
    it = item(report, "images")
    assert it.chunks == [1, *IMAGE]
    assert it.sample_shape == list(IMAGE)
    assert it.filters == ["gzip(4)"]
    assert it.dtype == "uint8"
    with h5py.File(path) as f:
        # On-disk size from packread's chunk index == libhdf5's own count.
        assert it.stored_bytes == f["images"].id.get_storage_size()
        assert item(report, "labels").stored_bytes == f["labels"].id.get_storage_size()
    assert it.ratio == pytest.approx(100 * np.prod(IMAGE) / it.stored_bytes)
    assert "advice: none" in report.render()


def test_misaligned_chunks_say_how_many_samples_one_read_decodes(tmp_path):
    path = tmp_path / "misaligned.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images(), chunks=(10, *IMAGE))
    report = inspect(path)
    (advice,) = report.advice
    assert advice.code == "misaligned-chunks"
    assert advice.target == "images"
    assert "reading one sample decodes 10 samples (120 KiB, 10x the 12 KiB it needs)" in (
        advice.message
    )
    assert advice.fix == f"packread convert {path} misaligned-packed.h5 --codec none"


def test_auto_chunked_gzip_spans_and_misaligns(tmp_path):
    # What h5py's auto-chunking gives with compression= and no chunks= (the seeds' 78x).
    path = tmp_path / "auto.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("images", data=images(), compression="gzip")
        chunks = ds.chunks
    report = inspect(path)
    spans = int(np.prod([-(-s // c) for s, c in zip(IMAGE, chunks[1:], strict=True)]))
    assert chunks[0] > 1
    assert spans > 1
    assert codes(report) == ["misaligned-chunks", "split-samples"]
    split = next(a for a in report.advice if a.code == "split-samples")
    assert f"one sample spans {spans} chunks" in split.message
    assert split.fix.endswith("--codec gzip:4")


def test_tiny_chunks(tmp_path):
    path = tmp_path / "tiny.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("values", data=np.arange(300_000, dtype="<f4"), chunks=(16,))
        f.create_dataset("pieces", data=images(), chunks=(1, 1, 8, 8))
    report = inspect(path)
    assert codes(report, "values") == ["tiny-chunks"]
    tiny = report.advice[codes(report).index("tiny-chunks")]
    k = MIN_CHUNK_BYTES // 4
    assert "chunks of 64 B are far too small: 18,750 chunks" in tiny.message
    assert f"{k} samples per chunk make them 4 KiB" in tiny.message
    assert codes(report, "pieces") == ["split-samples"]
    assert "one sample spans 192 chunks of 64 B" in report.render()


def test_huge_chunks_and_weak_compression(tmp_path):
    path = tmp_path / "huge.h5"
    rng = np.random.default_rng(1)
    noise = rng.integers(0, 256, (40, 1024, 1024), dtype=np.uint8)  # incompressible
    with h5py.File(path, "w") as f:
        f.create_dataset("noise", data=noise, chunks=(40, 1024, 1024), compression="lzf")
    report = inspect(path)
    assert codes(report) == ["huge-chunks", "misaligned-chunks", "weak-compression"]
    weak = next(a for a in report.advice if a.code == "weak-compression")
    assert "lzf shrinks it by 1.00x" in weak.message
    # With weak compression, every fix drops the codec.
    fix = f"packread convert {path} huge-packed.h5 --codec none"
    assert {a.fix for a in report.advice} == {fix}


def test_contiguous_note_and_other_sample_counts(tmp_path):
    path = tmp_path / "contig.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images())
        f.create_dataset("meta/mean", data=np.zeros(3))
        f.create_dataset("scalar", data=7)
    report = inspect(path)
    assert codes(report) == ["contiguous"]
    assert report.advice[0].level == "note"
    assert item(report, "meta/mean").note == "has 3 samples, not 100"
    assert item(report, "scalar").note == "is a scalar (no first axis to index)"
    text = report.render(ascii_only=True)
    assert "|-- meta/" in text
    assert "|   `-- mean" in text


def test_codecs_read_only_through_libhdf5_or_not_at_all(tmp_path):
    path = tmp_path / "library.h5"
    arr = np.arange(64, dtype="<i8").reshape(32, 2)
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple(arr.shape)
        dsid = h5py.h5d.create(f.id, b"compact", h5py.h5t.py_create(arr.dtype), space, dcpl=dcpl)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, arr)
        f.create_dataset("bzip2", data=arr, chunks=(1, 2), **hdf5plugin.BZip2())
    report = inspect(path)
    assert codes(report, "compact") == ["libhdf5-read"]
    assert codes(report, "bzip2") == ["no-decoder"]
    assert "bzip2" in item(report, "bzip2").filters[0]
    assert item(report, "compact").stored_bytes is None


def test_pytables_file(tmp_path):
    path = tmp_path / "pt.h5"
    data = images(20)
    with tables.open_file(path, "w") as f:
        f.create_carray(
            "/", "images", obj=data, chunkshape=(1, *IMAGE), filters=tables.Filters(5, "blosc")
        )
        f.create_earray("/", "scores", obj=np.arange(20.0))
        v = f.create_vlarray("/", "tokens", tables.Int32Atom())
        for i in range(20):
            v.append(np.arange(i, dtype=np.int32))
    report = inspect(path)
    images_item = item(report, "images")
    assert images_item.filters == ["blosc(blosclz, 5, shuffle)"]
    assert images_item.chunks == [1, *IMAGE]
    assert item(report, "tokens").dtype == "vlen array of int32"
    with h5py.File(path) as f:
        assert images_item.stored_bytes == f["images"].id.get_storage_size()


def test_compressed_npz_folder(tmp_path):
    rng = np.random.default_rng(2)
    (tmp_path / "z").mkdir()
    (tmp_path / "s").mkdir()
    for i in range(40):
        image = np.full(IMAGE, i, dtype=np.uint8)  # compresses well
        np.savez_compressed(tmp_path / "z" / f"{i:03d}.npz", image=image, label=np.int64(i))
        np.savez(tmp_path / "s" / f"{i:03d}.npz", image=image, noise=rng.random(4))
    report = inspect(tmp_path / "z")
    assert report.format == "npz-folder"
    assert report.files == 40
    (advice,) = report.advice
    assert advice.code == "compressed-npz"
    assert "numpy.savez_compressed" in advice.message
    with zipfile.ZipFile(tmp_path / "z" / "000.npz") as z:
        info = z.getinfo("image.npy")
        want = info.file_size / info.compress_size
    assert f"{want:.2f}x" in report.render() or item(report, "image").ratio == pytest.approx(
        want, rel=0.05
    )
    assert item(report, "image").layout == "deflated"
    assert item(report, "image").sample_shape == list(IMAGE)
    stored = inspect(tmp_path / "s")
    assert stored.advice == []
    assert item(stored, "image").layout == "stored"


def test_single_npz_and_zip_files(tmp_path):
    npz = tmp_path / "one.npz"
    np.savez_compressed(npz, a=np.zeros((500, 1000)), b=np.arange(3))
    report = inspect(npz)
    assert report.format == "npz"
    assert [i.name for i in report.items] == ["a", "b"]
    assert item(report, "a").shape == [500, 1000]
    assert codes(report) == ["compressed-npz"]

    zpath = tmp_path / "raw.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(100):
            z.writestr(f"img/{i:03d}.raw", images(1, seed=i).tobytes())
        z.writestr("labels.json", "{}")
    report = inspect(zpath)
    assert [i.name for i in report.items] == ["img/*.raw", "*.json"]
    raw = item(report, "img/*.raw")
    assert raw.count == 100
    assert raw.sample_shape == [int(np.prod(IMAGE))]
    (advice,) = report.advice
    assert advice.code == "compressed-members"
    assert "101 of 101 members are deflated" in advice.message


def test_many_small_files(tmp_path):
    folder = tmp_path / "npy"
    folder.mkdir()
    for i in range(1000):
        np.save(folder / f"{i:04d}.npy", np.full((4, 4), i, dtype="<f4"))
    report = inspect(folder)
    assert report.format == "npy-folder"
    assert report.samples == 1000
    (advice,) = report.advice
    assert advice.code == "many-small-files"
    assert advice.message.startswith("1,000 files of 192 B on average")
    assert item(report, "*.npy").sample_shape == [4, 4]


def test_json_and_text_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "misaligned.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images(), chunks=(10, *IMAGE))
    assert main(["inspect", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "hdf5"
    assert [a["code"] for a in data["advice"]] == ["misaligned-chunks"]
    assert data["items"][0]["chunks"] == [10, *IMAGE]
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "misaligned.h5  HDF5" in out
    assert "to fix:" in out
    assert main(["inspect", str(tmp_path / "missing.h5")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_filter_descriptions():
    assert describe_filter(32015, "zstd", (9,)) == "zstd(9)"
    assert describe_filter(32008, "bitshuffle", (0, 4, 4, 0, 2)) == "bitshuffle:lz4"
    assert describe_filter(307, "bzip2", ()) == "bzip2 (id 307)"
