"""`packread convert`: every pair round-trips (each sample of DST read by h5py, numpy or zipfile
equals SRC read by its own writer's reader, bit for bit), interrupted runs resume, DST is only
ever complete, and an existing DST is kept unless --force."""

from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import sys
import textwrap
import zipfile

import h5py
import hdf5plugin
import numpy as np
import pytest
import tables

import packread
from packread.cli import main
from packread.cli.convert import CODECS, convert, verify_conversion

IMAGE = (3, 16, 16)
N = 60


def images(n=N, seed=0):
    steps = np.random.default_rng(seed).integers(-2, 3, (n, *IMAGE))
    return (np.cumsum(steps, axis=-1) % 256).astype(np.uint8)


def digest(path):
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(path)) if os.path.isdir(path) else [("", [], [path])]:
        for f in sorted(files):
            with open(os.path.join(root, f), "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def assert_equal(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def assert_holds_npy_files(dst, folder, name):
    """DST holds FOLDER's .npy files in name order: as the rows of dataset NAME (HDF5), or as
    members of the same names stored as they are (ZIP)."""
    files = sorted(os.listdir(folder))
    if dst.suffix == ".h5":
        with h5py.File(dst) as d:
            for i, f in enumerate(files):
                assert_equal(d[name][i], np.load(folder / f))
        return
    with zipfile.ZipFile(dst) as z:
        assert z.testzip() is None
        assert z.namelist() == files
        for f in files:
            assert z.getinfo(f).compress_type == zipfile.ZIP_STORED
            assert z.read(f) == (folder / f).read_bytes()  # the files as they are


@pytest.fixture
def h5_src(tmp_path):
    """An h5py file the seeds would write: auto-chunked gzip images, labels, a group with a
    dataset of another length, attributes."""
    path = tmp_path / "src.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images(), compression="gzip")
        f.create_dataset("labels", data=np.arange(N, dtype="<i8"))
        f.create_dataset("stats/mean", data=np.arange(3.0))
        f["images"].attrs["source"] = "camera"
        f["stats"].attrs["epochs"] = 3
        f.attrs["version"] = 2
    return path


def sample_files(folder, ext, save):
    """``folder`` with one file ``NNN.<ext>`` per image, written by ``save(path, i, image)``."""
    folder.mkdir()
    for i, im in enumerate(images()):
        save(folder / f"{i:03d}.{ext}", i, im)
    return folder


@pytest.fixture
def npy_folder(tmp_path):
    return sample_files(tmp_path / "npy", "npy", lambda p, i, im: np.save(p, im.astype("<f4")))


@pytest.fixture
def npz_folder(tmp_path):
    def save(path, i, im):
        np.savez_compressed(path, image=im, label=np.int64(i))

    return sample_files(tmp_path / "npz", "npz", save)


@pytest.mark.parametrize("codec", CODECS)
def test_hdf5_to_hdf5_every_codec(h5_src, tmp_path, codec):
    dst = tmp_path / "dst.h5"
    result = convert(h5_src, dst, codec=codec, samples_per_chunk=1, progress=False)
    assert result.samples == N
    assert result.copied == ["stats/mean"]
    with h5py.File(h5_src) as s, h5py.File(dst) as d:
        for name in ("images", "labels", "stats/mean"):
            assert_equal(d[name][()], s[name][()])
        assert d["images"].chunks == (1, *IMAGE)
        assert d["labels"].chunks == (1,)
        assert d["images"].attrs["source"] == "camera"
        assert d["stats"].attrs["epochs"] == 3
        assert d.attrs["version"] == 2
    reader = packread.HDF5Reader(dst)
    for name in ("images", "labels"):
        # packread decodes the output itself, in parallel, without libhdf5.
        assert reader[name].read_path == "chunked: pread + decode in parallel"
    assert_equal(reader.batch(range(N))["images"], images())
    # Resuming the finished run recognises its chunks and filters: nothing to do.
    again = convert(h5_src, dst, codec=codec, samples_per_chunk=1, resume=True, progress=False)
    assert again.already_complete


def test_arrays_keeps_some_datasets_and_datasets_is_its_old_name(h5_src, tmp_path, capsys):
    dst = tmp_path / "images.h5"
    assert main(["convert", str(h5_src), str(dst), "--arrays", "images", "-q"]) == 0
    assert capsys.readouterr().err == ""
    with h5py.File(dst) as d:
        assert sorted(d) == ["images", "stats"]
    old = tmp_path / "old.h5"
    assert main(["convert", str(h5_src), str(old), "--datasets", "images", "-q"]) == 0
    assert "--datasets is deprecated; use --arrays" in capsys.readouterr().err
    with h5py.File(old) as d:
        assert sorted(d) == ["images", "stats"]
    with pytest.warns(DeprecationWarning, match=r"convert\(datasets=\) is deprecated"):
        result = convert(h5_src, tmp_path / "py.h5", datasets=["labels"], progress=False)
    assert list(result.datasets) == ["labels"]


def test_hdf5_default_chunks_fill_small_samples(h5_src, tmp_path):
    dst = tmp_path / "auto.h5"
    result = convert(h5_src, dst, codec="gzip:6", progress=False)
    with h5py.File(dst) as d:
        assert d["images"].chunks == (6, *IMAGE)  # 768 B images: 6 fill a 4 KiB chunk
        assert d["images"].compression_opts == 6
        assert d["labels"].chunks == (N,)  # 8 B labels: capped at the sample count
    assert result.datasets["images"]["chunks"] == [6, *IMAGE]
    verify_conversion(h5_src, dst, result)


def test_pytables_source(tmp_path):
    src, dst = tmp_path / "pt.h5", tmp_path / "out.h5"
    data = images()
    with tables.open_file(src, "w") as f:
        f.create_carray(
            "/", "images", obj=data, chunkshape=(8, *IMAGE), filters=tables.Filters(5, "blosc")
        )
        f.create_earray("/", "scores", obj=np.linspace(0, 1, N))
        v = f.create_vlarray("/", "tokens", tables.Int32Atom())
        for i in range(N):
            v.append(np.arange(i % 7, dtype=np.int32))
    result = convert(src, dst, codec="blosc:lz4", verify=True, progress=False)
    assert result.copied == ["tokens"]
    with tables.open_file(src) as s, h5py.File(dst) as d:
        assert_equal(d["images"][()], s.root.images[:])
        assert_equal(d["scores"][()], s.root.scores[:])
        assert d["scores"].maxshape == (None,)  # an EArray stays extendable
        for i in range(N):
            assert_equal(d["tokens"][i], s.root.tokens[i])


def test_dataset_packread_cannot_decode_goes_through_h5py(tmp_path):
    src, dst = tmp_path / "bz.h5", tmp_path / "out.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("images", data=images(), chunks=(4, *IMAGE), **hdf5plugin.BZip2())
    convert(src, dst, codec="zstd", progress=False)
    assert packread.HDF5Reader(dst)["images"].read_path.startswith("chunked")
    assert_equal(packread.HDF5Reader(dst, "images").batch(range(N)), images())


@pytest.mark.parametrize("fmt", ["h5", "zip"])
def test_npy_folder(npy_folder, tmp_path, fmt):
    dst = tmp_path / f"out.{fmt}"
    result = convert(npy_folder, dst, name="images", progress=False)
    assert_holds_npy_files(dst, npy_folder, "images")
    if fmt == "zip":
        assert result.datasets["images"]["members"] == "*.npy"
    verify_conversion(npy_folder, dst, result)


@pytest.mark.parametrize("fmt", ["h5", "zip"])
def test_npz_folder(npz_folder, tmp_path, fmt):
    dst = tmp_path / f"out.{fmt}"
    convert(npz_folder, dst, codec="lz4" if fmt == "h5" else "none", progress=False)
    files = sorted(os.listdir(npz_folder))
    if fmt == "h5":
        with h5py.File(dst) as d:
            for i, f in enumerate(files):
                with np.load(npz_folder / f) as want:
                    assert_equal(d["image"][i], want["image"])
                    assert_equal(d["label"][i], want["label"])
    else:
        with zipfile.ZipFile(dst) as z:
            assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
            for f in files:
                stem = f[:-4]
                with np.load(npz_folder / f) as want:
                    for key in ("image", "label"):
                        got = np.load(z.open(f"{key}/{stem}.npy"))
                        assert_equal(got, want[key])
        r = packread.ZipReader(dst, members="image/*.npy")
        assert_equal(r.batch(range(N)), images())


def test_zip_to_hdf5(tmp_path):
    raw, npy = tmp_path / "raw.zip", tmp_path / "npy.zip"
    data = images()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("labels.json", "{}")
        for i, im in enumerate(data):
            z.writestr(f"img/{i:03d}.raw", im.tobytes())
    with zipfile.ZipFile(npy, "w") as z:
        for i, im in enumerate(data):
            with z.open(f"{i:03d}.npy", "w") as f:
                np.save(f, im.astype(">i2"))
    assert (
        main(
            [
                "convert",
                str(raw),
                str(tmp_path / "raw.h5"),
                "--members",
                "img/*.raw",
                "--dtype",
                "uint8",
                "--shape",
                *map(str, IMAGE),
                "-q",
                "--verify",
            ]
        )
        == 0
    )
    with h5py.File(tmp_path / "raw.h5") as d, zipfile.ZipFile(raw) as z:
        for i in range(N):
            want = np.frombuffer(z.read(f"img/{i:03d}.raw"), np.uint8).reshape(IMAGE)
            assert_equal(d["data"][i], want)
    convert(npy, tmp_path / "npy.h5", progress=False)
    with h5py.File(tmp_path / "npy.h5") as d, zipfile.ZipFile(npy) as z:
        for i in range(N):
            assert_equal(d["data"][i], np.load(z.open(f"{i:03d}.npy")))


def test_refuses_to_overwrite_without_force(h5_src, tmp_path, capsys):
    dst = tmp_path / "dst.h5"
    dst.write_bytes(b"precious")
    assert main(["convert", str(h5_src), str(dst), "-q"]) == 1
    assert "pass --force" in capsys.readouterr().err
    assert dst.read_bytes() == b"precious"
    assert not os.path.exists(f"{dst}.partial")
    assert main(["convert", str(h5_src), str(dst), "-q", "--force"]) == 0
    with h5py.File(dst) as d:
        assert_equal(d["images"][()], images())
    assert main(["convert", str(h5_src), str(h5_src), "--force", "-q"]) == 1


def test_bad_arguments_write_nothing(h5_src, npy_folder, tmp_path, capsys):
    dst = tmp_path / "x.h5"
    assert main(["convert", str(h5_src), str(dst), "--codec", "brotli", "-q"]) == 1
    assert "unknown codec 'brotli'" in capsys.readouterr().err
    assert main(["convert", str(h5_src), str(tmp_path / "x.zip"), "-q"]) == 1
    assert "cannot convert hdf5 into zip" in capsys.readouterr().err
    assert main(["convert", str(h5_src), str(tmp_path / "x.txt"), "-q"]) == 1
    assert main(["convert", str(npy_folder), str(dst), "--codec", "gzip:12", "-q"]) == 1
    assert "level must be 0 to 9" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == sorted(["src.h5", "npy"])


class Stop(Exception):
    pass


@pytest.mark.parametrize("fmt", ["h5", "zip"])
def test_interrupted_then_resumed(npz_folder, tmp_path, fmt):
    src_digest = digest(npz_folder)
    dst = tmp_path / f"out.{fmt}"
    seen = []

    def stop_after_two(done):
        seen.append(done)
        if len(seen) == 2:
            raise Stop

    small = 6 * 800  # bytes: a few samples per block, a checkpoint after each
    with pytest.raises(Stop):
        convert(
            npz_folder,
            dst,
            memory_bytes=small,
            checkpoint_seconds=0,
            on_checkpoint=stop_after_two,
            progress=False,
        )
    assert not dst.exists()  # never half-written
    assert os.path.exists(f"{dst}.partial")
    assert os.path.exists(f"{dst}.partial.json")
    # ZIP: one copy of the central directory, the one the progress record names.
    assert len(glob.glob(f"{dst}.partial.cd-*")) == (1 if fmt == "zip" else 0)
    result = convert(npz_folder, dst, memory_bytes=small, resume=True, progress=False)
    assert result.resumed_from == seen[-1] > 0
    assert not os.path.exists(f"{dst}.partial")
    assert not os.path.exists(f"{dst}.partial.json")
    assert glob.glob(f"{dst}.partial*") == []
    verify_conversion(npz_folder, dst, result)
    assert digest(npz_folder) == src_digest  # the source is only read


@pytest.mark.parametrize("fmt", ["h5", "zip"])
def test_killed_process_resumes_from_the_command_line(npy_folder, tmp_path, fmt):
    """A real crash: the converting process SIGKILLs itself right after a checkpoint."""
    dst = tmp_path / f"out.{fmt}"
    script = textwrap.dedent(
        f"""
        import os, signal
        from packread.cli.convert import convert
        def crash(done):
            if done >= 20:
                os.kill(os.getpid(), signal.SIGKILL)
        convert({str(npy_folder)!r}, {str(dst)!r}, memory_bytes=4 * 3072,
                checkpoint_seconds=0, on_checkpoint=crash, progress=False)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()
    assert not dst.exists()
    # Garbage past the last checkpoint, as a crash mid-write leaves it, is cut off on resume.
    with open(f"{dst}.partial", "ab") as f:
        f.write(os.urandom(1000))
    args = ["convert", str(npy_folder), str(dst), "-q", "--verify"]
    assert main([*args, "--resume"]) == 0
    assert_holds_npy_files(dst, npy_folder, "data")


def test_resume_refuses_other_options_or_nothing_to_resume(npy_folder, tmp_path, capsys):
    dst = tmp_path / "out.h5"
    assert main(["convert", str(npy_folder), str(dst), "--resume", "-q"]) == 1
    assert "no interrupted conversion" in capsys.readouterr().err

    def stop(done):
        raise Stop

    with pytest.raises(Stop):
        convert(
            npy_folder,
            dst,
            memory_bytes=3072 * 4,
            checkpoint_seconds=0,
            on_checkpoint=stop,
            progress=False,
        )
    assert main(["convert", str(npy_folder), str(dst), "--resume", "--codec", "lz4", "-q"]) == 1
    assert "other options" in capsys.readouterr().err
    # Without --resume, a fresh run replaces the partial file.
    assert main(["convert", str(npy_folder), str(dst), "-q"]) == 0
    assert not os.path.exists(f"{dst}.partial")


def test_keyboard_interrupt_tells_how_to_resume(npy_folder, tmp_path, capsys, monkeypatch):
    import packread.cli.convert as mod

    def interrupt(self, lo, hi, source):
        raise KeyboardInterrupt

    monkeypatch.setattr(mod._H5Sink, "write", interrupt)
    dst = tmp_path / "out.h5"
    assert main(["convert", str(npy_folder), str(dst), "-q"]) == 130
    assert "--resume" in capsys.readouterr().err
    assert os.path.exists(f"{dst}.partial")
    assert not dst.exists()


#: Where a run is killed before it records any sample (within its first ~50 ms), and the files
#: it leaves beside DST.partial. ZIP: DST.partial is empty, then (once the first checkpoint
#: closed it) an empty archive of 22 bytes; HDF5: DST.partial is not flushed, then flushed.
EARLY_KILLS = [
    ("h5", "sink-opened", []),
    ("h5", "before-record", []),
    ("h5", "record-half-done", [".json.tmp"]),
    ("h5", "record-at-0", [".json"]),
    ("zip", "sink-opened", []),
    ("zip", "directory-copy", [".cd-0.tmp"]),
    ("zip", "before-record", [".cd-0"]),
    ("zip", "record-half-done", [".cd-0", ".json.tmp"]),
    ("zip", "record-at-0", [".cd-0", ".json"]),
]
EMPTY_ZIP = b"PK\x05\x06" + bytes(18)


@pytest.mark.parametrize(
    ("fmt", "point", "beside"), EARLY_KILLS, ids=[f"{f}-{p}" for f, p, _ in EARLY_KILLS]
)
def test_resume_after_an_early_kill_starts_over(npz_folder, tmp_path, capsys, fmt, point, beside):
    """A run SIGKILLed before it recorded any sample: --resume starts over, says why, and
    writes what a fresh run writes, byte for byte."""
    src_digest = digest(npz_folder)
    dst = tmp_path / f"out.{fmt}"
    script = textwrap.dedent(
        f"""
        import os, signal
        import packread.cli.convert as mod
        def die(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        point = {point!r}
        if point == "sink-opened":
            for cls in (mod._H5Sink, mod._ZipSink):
                def opened(self, *args, _init=cls.__init__, **kwargs):
                    _init(self, *args, **kwargs)
                    die()
                cls.__init__ = opened
        elif point == "before-record":
            mod._save_state = die
        elif point == "record-at-0":
            mod._H5Sink.committed = mod._ZipSink.committed = die
        else:
            suffix = ".cd-0" if point == "directory-copy" else ".partial.json"
            replace = os.replace
            os.replace = lambda a, b: die() if str(b).endswith(suffix) else replace(a, b)
        mod.convert({str(npz_folder)!r}, {str(dst)!r}, progress=False)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()
    assert not dst.exists()
    partial = f"{dst}.partial"
    assert sorted(glob.glob(f"{partial}?*")) == sorted(partial + s for s in beside)
    if fmt == "zip":
        with open(partial, "rb") as f:
            assert f.read() == (b"" if point == "sink-opened" else EMPTY_ZIP)
    assert main(["convert", str(npz_folder), str(dst), "--resume", "-q"]) == 0
    err = capsys.readouterr().err
    assert "starting over" in err
    assert ("holds no sample yet" if point == "record-at-0" else "no progress record") in err
    assert glob.glob(f"{partial}*") == []
    assert digest(npz_folder) == src_digest  # the source is only read
    fresh = tmp_path / f"fresh.{fmt}"
    convert(npz_folder, fresh, progress=False)
    assert dst.read_bytes() == fresh.read_bytes()
    if fmt == "h5":
        with h5py.File(dst) as d, h5py.File(fresh) as f:
            assert sorted(d) == sorted(f) == ["image", "label"]
            for name in f:
                assert_equal(d[name][()], f[name][()])
                assert d[name].chunks == f[name].chunks
    else:
        with zipfile.ZipFile(dst) as d, zipfile.ZipFile(fresh) as f:
            assert d.testzip() is None
            assert d.namelist() == f.namelist()
            for name in f.namelist():
                assert d.read(name) == f.read(name)


@pytest.mark.parametrize("fmt", ["h5", "zip"])
def test_resume_on_a_complete_destination_does_nothing(npz_folder, tmp_path, capsys, fmt):
    dst = tmp_path / f"out.{fmt}"
    args = ["convert", str(npz_folder), str(dst), *(["--codec", "lz4"] if fmt == "h5" else [])]
    assert main([*args, "-q"]) == 0
    before, mtime = dst.read_bytes(), os.stat(dst).st_mtime_ns
    capsys.readouterr()

    def unchanged():
        assert dst.read_bytes() == before
        assert os.stat(dst).st_mtime_ns == mtime
        assert glob.glob(f"{dst}.partial*") == []

    assert main([*args, "--resume"]) == 0
    assert f"{dst} is complete; nothing to do" in capsys.readouterr().err
    unchanged()
    result = convert(npz_folder, dst, codec="lz4" if fmt == "h5" else "none", resume=True)
    assert result.already_complete
    assert result.samples == N
    assert result.resumed_from == N
    assert main([*args, "--resume", "--verify", "-q"]) == 0
    # Stopped between renaming DST.partial and removing its progress files: complete.
    for leftover in (".partial.json", ".partial.cd-0"):
        with open(f"{dst}{leftover}", "w") as f:
            f.write("{}")
    assert main([*args, "--resume", "-q"]) == 0
    assert "is complete" in capsys.readouterr().err
    unchanged()
    # Without --resume, an existing DST is still refused.
    assert main([*args, "-q"]) == 1
    assert "pass --force" in capsys.readouterr().err
    unchanged()
    # A DST other than what this conversion writes is not complete: refused, kept.
    if fmt == "h5":
        assert main([*args, "--codec", "zstd", "--resume", "-q"]) == 1
        assert "is not what this conversion writes" in capsys.readouterr().err
        unchanged()
    dst.write_bytes(b"precious")
    assert main([*args, "--resume", "-q"]) == 1
    assert "is not what this conversion writes" in capsys.readouterr().err
    assert dst.read_bytes() == b"precious"
