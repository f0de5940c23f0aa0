"""Python binary file objects as sources: every reader reads an ``io.BytesIO``, an open file
and a file-like object of the user's own (only ``seek``/``tell``/``read``) exactly as it reads
the path, through the core's one file-object source; reads of one object never interleave;
what cannot be read is refused with a clear error."""

from __future__ import annotations

import io
import json
import threading
import zipfile

import h5py
import numpy as np
import pytest
from PIL import Image

import packread
from packread.errors import InvalidArgumentError, NpyFormatError, PackreadError


class OnlyRead:
    """A file-like object with ``seek``, ``tell`` and ``read`` only (as some fsspec and
    network file classes are), counting its reads and failing if two overlap."""

    def __init__(self, data: bytes) -> None:
        self._f = io.BytesIO(data)
        self.reads = 0
        self._busy = threading.Lock()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def read(self, n: int = -1) -> bytes:
        if not self._busy.acquire(blocking=False):
            raise AssertionError("two reads of one file object overlapped")
        try:
            self.reads += 1
            return self._f.read(n)
        finally:
            self._busy.release()


def _as(kind: str, path: str):
    with open(path, "rb") as f:
        data = f.read()
    if kind == "bytesio":
        return io.BytesIO(data)
    if kind == "onlyread":
        return OnlyRead(data)
    return open(path, "rb")


KINDS = ["bytesio", "onlyread", "open"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("fileobj")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 4, 6)).astype("<f4")
    out = {"x": x}
    np.save(root / "X.npy", x)
    with h5py.File(root / "d.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(7, 4, 6), compression="gzip", shuffle=True)
        f.create_dataset("y", data=np.arange(300, dtype="<i8"))
    with zipfile.ZipFile(root / "raw.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(300):
            z.writestr(f"{i:03d}.raw", x[i].tobytes())
    np.savez(root / "d.npz", x=x, y=np.arange(300))
    pixels = rng.integers(0, 256, (20, 8, 10, 3), dtype=np.uint8)
    out["pixels"] = pixels
    with zipfile.ZipFile(root / "img.zip", "w") as z:
        for i in range(20):
            buf = io.BytesIO()
            Image.fromarray(pixels[i]).save(buf, "PNG")
            z.writestr(f"{i:02d}.png", buf.getvalue())
        z.writestr("dataset.json", json.dumps({"labels": {f"{i:02d}.png": i for i in range(20)}}))
    return root, out


@pytest.mark.parametrize("kind", KINDS)
def test_every_reader_reads_a_file_object_as_its_path(files, kind):
    root, data = files
    idx = [299, 0, 17, 18, 19, 5, 5, -3]
    opened = []

    def src(name):
        f = _as(kind, str(root / name))
        opened.append(f)
        return f

    try:
        r = packread.NpyReader(src("X.npy"))
        assert np.array_equal(r.batch(idx), data["x"][idx])
        h = packread.HDF5Reader(src("d.h5"))
        want = packread.HDF5Reader(str(root / "d.h5")).batch(idx)
        got = h.batch(idx)
        assert all(np.array_equal(got[k], want[k]) for k in ("x", "y"))
        z = packread.ZipReader(src("raw.zip"), dtype="<f4", shape=(4, 6))
        assert np.array_equal(z.batch(idx), data["x"][idx])
        n = packread.NpzReader(src("d.npz"))
        got = n.batch(idx)
        assert np.array_equal(got["x"], data["x"][idx])
        assert np.array_equal(got["y"], np.arange(300)[idx])
        images = packread.open(src("img.zip"), format="images")
        assert isinstance(images, packread.ImageReader)
        b = images.batch([3, 0, 19])  # no size given: each image as stored, HWC
        assert all(
            np.array_equal(g, data["pixels"][i])
            for g, i in zip(b["images"], [3, 0, 19], strict=True)
        )
        assert b["labels"].tolist() == [3, 0, 19]
        assert np.array_equal(packread.load_npy(src("X.npy")), data["x"])
        loaded = packread.load_npz(src("d.npz"))
        assert np.array_equal(loaded["x"], data["x"])
    finally:
        for f in opened:
            if hasattr(f, "close"):
                f.close()


def test_the_registry_tells_a_file_objects_format_by_its_bytes(files):
    root, _ = files
    with open(root / "d.h5", "rb") as f:
        assert isinstance(packread.open(f), packread.HDF5Reader)
    for name, cls in (("X.npy", packread.NpyReader), ("raw.zip", packread.ZipReader)):
        assert isinstance(packread.open(io.BytesIO((root / name).read_bytes())), cls)


def test_reads_of_one_object_never_overlap(files):
    root, data = files
    f = OnlyRead((root / "d.h5").read_bytes())
    readers = [packread.HDF5Reader(f, arrays="x", num_threads=4) for _ in range(2)]
    rng = np.random.default_rng(1)
    errors = []

    def run(r):
        try:
            for _ in range(20):
                idx = rng.integers(0, 300, 32)
                assert np.array_equal(r.batch(idx), data["x"][idx])
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in readers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert f.reads > 0


def test_nearby_reads_are_merged_into_fewer_calls(files):
    root, data = files
    f = OnlyRead((root / "X.npy").read_bytes())
    r = packread.NpyReader(f)
    before = f.reads
    assert np.array_equal(r.batch(range(0, 300, 2)), data["x"][::2])
    assert f.reads - before < 10  # 150 rows 96 bytes apart: merged, not 150 calls


def test_a_text_file_is_refused(files, tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("not binary")
    with open(p) as f, pytest.raises(PackreadError):
        packread.NpyReader(f)


def test_a_stream_that_cannot_seek_is_refused(files):
    class Pipe(io.RawIOBase):
        def readable(self):
            return True

        def seekable(self):
            return False

        def readinto(self, b):
            return 0

    with pytest.raises(InvalidArgumentError, match="cannot seek"):
        packread.NpyReader(Pipe())


def test_an_error_of_the_object_names_it(files):
    root, _ = files

    class Failing(OnlyRead):
        name = "flaky.npy"
        fail = False

        def read(self, n=-1):
            if self.fail:
                raise ConnectionError("the network went away")
            return super().read(n)

    f = Failing((root / "X.npy").read_bytes())
    r = packread.NpyReader(f)
    f.fail = True
    with pytest.raises(OSError, match=r"flaky\.npy.*ConnectionError.*the network went away"):
        r.batch([1, 2])


def test_a_file_object_shorter_than_its_header_says_is_an_error(files):
    root, _ = files
    raw = (root / "X.npy").read_bytes()
    with pytest.raises(NpyFormatError, match="28790 bytes but shape"):
        packread.NpyReader(io.BytesIO(raw[:-10]))


def test_a_reader_of_a_bytesio_pickles_and_reads_in_a_worker(files):
    import pickle

    root, data = files
    r = packread.NpyReader(io.BytesIO((root / "X.npy").read_bytes()))
    back = pickle.loads(pickle.dumps(r))
    assert np.array_equal(back.batch([7, 3]), data["x"][[7, 3]])


# An open local file: read by its descriptor, not its position


#: The reader forked children read (inherited, not pickled: an open file does not pickle).
_FORKED_READER: list = []


def _fork_read_rows(args):
    seed, want_path = args
    reader = _FORKED_READER[0]
    want = np.load(want_path, mmap_mode="r")
    rng = np.random.default_rng(seed)
    for _ in range(150):
        idx = rng.integers(0, len(want), 16)
        if not np.array_equal(reader.batch(idx), want[idx]):
            return False
    return True


def test_forked_workers_reading_one_open_file_get_their_own_rows(files):
    # Forked children share an open file's position with their parent and with each other:
    # seek-then-read in two of them at once would read each other's bytes. An open regular
    # file is read by pread on its descriptor, so children reading at once all read right.
    import multiprocessing

    root, _ = files
    with open(root / "X.npy", "rb") as f:
        _FORKED_READER[:] = [packread.NpyReader(f)]
        try:
            with multiprocessing.get_context("fork").Pool(3) as pool:
                jobs = [(seed, str(root / "X.npy")) for seed in range(6)]
                assert pool.map(_fork_read_rows, jobs) == [True] * 6
        finally:
            _FORKED_READER.clear()


def _fork_read_one(_):
    try:
        _FORKED_READER[0].batch([1, 2])
    except packread.errors.UnsupportedError as exc:
        return str(exc)
    return "read"


def test_a_file_object_over_a_descriptor_is_refused_in_a_forked_child(files):
    # Read through its methods (a subclass), its position would be shared with the parent and
    # the siblings: a forked child refuses with the reason rather than read their bytes.
    import multiprocessing

    root, data = files

    class Sub(io.BufferedReader):
        pass

    with Sub(io.FileIO(root / "X.npy", "rb")) as f:
        _FORKED_READER[:] = [packread.NpyReader(f)]
        try:
            with multiprocessing.get_context("fork").Pool(2) as pool:
                said = pool.map(_fork_read_one, range(2))
        finally:
            reader = _FORKED_READER.pop()
        assert all("forked process" in s and "pass the path" in s for s in said), said
        # the process that opened it still reads it
        assert np.array_equal(reader.batch([1, 2]), data["x"][[1, 2]])


def test_an_open_file_keeps_its_position_and_reads_after_it_is_closed(files):
    root, data = files
    with open(root / "X.npy", "rb") as f:
        f.seek(11)
        r = packread.NpyReader(f)
        assert np.array_equal(r.batch([4, 299]), data["x"][[4, 299]])
        assert f.tell() == 11  # the user's position is the user's
    # the reader holds a descriptor of its own, as it would for a path
    assert np.array_equal(r.batch([1]), data["x"][[1]])


def test_a_subclass_of_an_open_file_is_read_through_its_methods(files):
    # A subclass may change what read returns; it is read through its methods, not by its
    # descriptor.
    root, data = files

    class Counting(io.BufferedReader):
        reads = 0

        def readinto(self, b):
            Counting.reads += 1
            return super().readinto(b)

    with Counting(io.FileIO(root / "X.npy", "rb")) as f:
        r = packread.NpyReader(f)
        assert np.array_equal(r.batch([8, 2]), data["x"][[8, 2]])
    assert Counting.reads > 0


def test_an_open_file_rewritten_after_the_reader_opened_it_is_an_error(tmp_path):
    p = tmp_path / "X.npy"
    x = np.arange(4000, dtype="<f8").reshape(1000, 4)
    np.save(p, x)
    with open(p, "rb") as f:
        r = packread.NpyReader(f)
        assert np.array_equal(r.batch([3]), x[[3]])
        with open(p, "r+b") as w:  # truncated in place: the stamp no longer matches
            w.truncate(2000)
        with pytest.raises(PackreadError, match=r"changed|truncated|past the end"):
            r.batch([999])


def test_a_file_object_whose_seek_returns_none_is_measured_by_tell(files):
    # Some file-like classes return None from seek (io's return the position): the length is
    # then what tell says after seeking to the end.
    root, data = files

    class SeekNone(OnlyRead):
        def seek(self, offset: int, whence: int = 0) -> None:  # type: ignore[override]
            super().seek(offset, whence)

    r = packread.NpyReader(SeekNone((root / "X.npy").read_bytes()))
    assert len(r) == 300
    assert np.array_equal(r.batch([299, 0]), data["x"][[299, 0]])
