"""packread.load_npz and packread.NpzReader against numpy.load, on archives written by
np.savez and np.savez_compressed."""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import packread
from support.helpers import (
    NPY_SCALAR_DTYPES,
    PROPERTY_DTYPES,
    PROPERTY_RECORD,
    aligned_buffer,
    assert_same,
    npy_bytes,
    random_array,
    with_order,
)

SAVERS = {"savez": np.savez, "savez_compressed": np.savez_compressed}

DTYPES = NPY_SCALAR_DTYPES
RECORDS = {
    "simple": np.dtype([("a", "<i4"), ("b", ">f8"), ("c", "|S3")]),
    "nested": np.dtype([("x", [("lo", "<u2"), ("hi", ">u2")]), ("y", "<f4", (2,))]),
    "aligned": np.dtype([("a", "|u1"), ("b", "<f8"), ("c", "<i2", (3,)), ("d", "|u1")], align=True),
    "big_endian_mix": np.dtype([("a", ">i8"), ("b", "<i8"), ("c", ">U1")]),
}
ALL_DTYPES = [np.dtype(d) for d in DTYPES] + list(RECORDS.values())
ALL_IDS = DTYPES + [f"rec-{k}" for k in RECORDS]

SHAPES = [(), (0,), (3, 0, 2), (7,), (3, 4, 5), (1, 1, 1)]


def npz_bytes(saver: str, *args, **arrays) -> bytes:
    buf = io.BytesIO()
    SAVERS[saver](buf, *args, **arrays)
    return buf.getvalue()


def assert_same_dict(got: dict, want: dict) -> None:
    """Same keys in the same order; arrays bit for bit (dtype, shape, layout), bytes equal."""
    assert isinstance(got, dict)
    assert list(got) == list(want)
    for key, w in want.items():
        if isinstance(w, np.ndarray):
            assert_same(got[key], w)
        else:
            assert type(got[key]) is type(w), key
            assert got[key] == w, key


def check_load(tmp_path, raw: bytes, **kw) -> dict:
    """load_npz from a file (str and Path), bytes, bytearray, memoryview and a uint8 array
    equals dict(np.load(...))."""
    path = tmp_path / "a.npz"
    path.write_bytes(raw)
    with np.load(path) as f:
        want = dict(f)
    assert_same_dict(packread.load_npz(path, **kw), want)
    assert_same_dict(packread.load_npz(str(path), **kw), want)
    for src in (
        raw,
        bytearray(raw),
        memoryview(raw),
        aligned_buffer(raw, 0),
        aligned_buffer(raw, 3),
    ):
        assert_same_dict(packread.load_npz(src, **kw), want)
    return want


# --------------------------------------------------------------------------------------------
# load_npz


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("saver", list(SAVERS))
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_IDS)
def test_load_npz_every_dtype(tmp_path, dtype, saver, order):
    rng = np.random.default_rng(3)
    arrays = {
        "matrix": with_order(random_array(rng, (5, 6), dtype), order),
        "cube": with_order(random_array(rng, (2, 3, 4), dtype), order),
        "scalar": random_array(rng, (), dtype),
        "empty": with_order(random_array(rng, (2, 0, 3), dtype), order),
    }
    want = check_load(tmp_path, npz_bytes(saver, **arrays))
    assert list(want) == list(arrays)
    if order == "F":
        assert want["matrix"].flags.f_contiguous


@pytest.mark.parametrize("saver", list(SAVERS))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_load_npz_shapes(tmp_path, saver, shape):
    rng = np.random.default_rng(4)
    arrays = {f"k{i}": random_array(rng, shape, d) for i, d in enumerate(["<f8", ">i2", "|S2"])}
    check_load(tmp_path, npz_bytes(saver, **arrays))


@pytest.mark.parametrize("saver", list(SAVERS))
def test_load_npz_positional_and_many_keys(tmp_path, saver):
    rng = np.random.default_rng(5)
    positional = [random_array(rng, (i, 3), "<f4") for i in range(5)]
    named = {f"key_{i:03d}": random_array(rng, (i % 7,), ">i8") for i in range(150)}
    want = check_load(tmp_path, npz_bytes(saver, *positional, **named))
    assert list(want)[150:] == [f"arr_{i}" for i in range(5)]  # numpy puts them last
    assert len(want) == 155


@pytest.mark.parametrize("saver", list(SAVERS))
def test_load_npz_large_arrays(tmp_path, saver):
    rng = np.random.default_rng(6)
    arrays = {
        "big": rng.standard_normal((512, 1024)).astype("<f4"),  # 2 MiB
        "bigf": np.asfortranarray(rng.integers(0, 9, size=(700, 300)).astype(">i8")),
        "small": np.arange(3),
    }
    check_load(tmp_path, npz_bytes(saver, **arrays))


def test_load_npz_odd_member_names(tmp_path):
    arrays = {"with space": np.arange(3), "dir/sub": np.ones(2), "ünï": np.zeros(1, "<c8")}
    check_load(tmp_path, npz_bytes("savez", **arrays))


def test_load_npz_non_npy_members_are_bytes(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("notes.txt", b"hello")
        zf.writestr("raw", npy_bytes(np.arange(3)))  # NPY without the suffix: an array
        zf.writestr("dir/", b"")
        zf.writestr("short.npy", b"\x93NUM")  # too short to be NPY: bytes
        zf.writestr("sub/k.npy", npy_bytes(np.arange(2.0)), compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr("text.npy", b"not an npy", compress_type=zipfile.ZIP_DEFLATED)
    want = check_load(tmp_path, buf.getvalue())
    assert list(want) == ["notes.txt", "raw", "dir/", "short", "sub/k", "text"]
    assert want["notes.txt"] == b"hello"


def test_load_npz_empty_archive(tmp_path):
    assert check_load(tmp_path, npz_bytes("savez")) == {}


def test_load_npz_pathlike(tmp_path):
    path = tmp_path / "p.npz"
    np.savez(path, a=np.arange(4))

    class P(os.PathLike):
        def __fspath__(self):
            return str(path)

    assert_same(packread.load_npz(P())["a"], np.arange(4))
    assert_same(packread.load_npz(pathlib.Path(path))["a"], np.arange(4))


def test_load_npz_object_arrays_refused(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, ok=np.arange(2), obj=np.array([1, None], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"), np.load(path) as f:
        f["obj"]  # numpy refuses too, without allow_pickle
    with pytest.raises(ValueError, match=r"obj\.npy") as exc:
        packread.load_npz(path)
    assert isinstance(exc.value, packread.PackreadError)
    assert str(path) in str(exc.value)
    assert "obj.npy" in str(exc.value)
    with pytest.raises(ValueError, match=r"<buffer>.*obj\.npy"):
        packread.load_npz(path.read_bytes())


def test_load_npz_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError) as exc:
        packread.load_npz(tmp_path / "nope.npz")
    assert isinstance(exc.value, packread.PackreadError)


# --------------------------------------------------------------------------------------------
# zero-copy views from bytes


def _data_offset(raw: bytes, key: str) -> int:
    """Offset in ``raw`` of the array data of stored member ``key.npy``."""
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        info = zf.getinfo(f"{key}.npy")
    name_len, extra_len = np.frombuffer(raw[info.header_offset + 26 :][:4], "<u2")
    start = info.header_offset + 30 + int(name_len) + int(extra_len)
    member = raw[start : start + info.compress_size]
    return start + (len(member) - len(np.load(io.BytesIO(member)).tobytes()))


@pytest.mark.parametrize("order", ["C", "F"])
def test_stored_members_are_zero_copy_views(order):
    rng = np.random.default_rng(8)
    arrays = {
        # First member, 2-letter key: np.savez puts its data at offset 184 (checked below).
        "ab": with_order(random_array(rng, (6, 7), "<f8"), order),
        "u1": random_array(rng, (4, 5), "|u1"),  # alignment 1: always a view
        "cd": with_order(random_array(rng, (3, 3), ">i4"), order),
        "ef": with_order(random_array(rng, (5, 2), "<c16"), order),
    }
    raw = npz_bytes("savez", **arrays)
    for shift in (0, 1, 4, 8):
        src = aligned_buffer(raw, shift)
        got = packread.load_npz(src)
        with np.load(io.BytesIO(raw)) as f:
            want = dict(f)
        assert_same_dict(got, want)
        for key, arr in got.items():
            offset = _data_offset(raw, key)
            aligned = (src.ctypes.data + offset) % arr.dtype.alignment == 0
            if aligned:
                assert np.shares_memory(arr, src), (key, shift)
                assert not arr.flags.writeable, (key, shift)
                assert arr.ctypes.data == src.ctypes.data + offset
            else:
                assert not np.shares_memory(arr, src), (key, shift)
        assert np.shares_memory(got["u1"], src)
        if shift in (0, 8):
            # The view path is exercised for a wide dtype too, not only for bytes.
            assert _data_offset(raw, "ab") % 8 == 0
            assert np.shares_memory(got["ab"], src)


def test_compressed_members_are_copies():
    raw = npz_bytes("savez_compressed", ab=np.arange(100.0), u1=np.arange(10, dtype=np.uint8))
    src = aligned_buffer(raw)
    got = packread.load_npz(src)
    for arr in got.values():
        assert not np.shares_memory(arr, src)


def test_view_keeps_the_buffer_alive():
    raw = npz_bytes("savez", u1=np.arange(200, dtype=np.uint8))
    got = packread.load_npz(bytearray(raw))
    arr = got["u1"]
    del got, raw
    assert arr.tolist() == list(range(200))


# --------------------------------------------------------------------------------------------
# property test


@st.composite
def npz_arrays(draw):
    arrays = {}
    for key in draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=3, unique=True)):
        code = draw(st.sampled_from(PROPERTY_DTYPES))
        dtype = PROPERTY_RECORD if code == "rec" else np.dtype(code)
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
        arr = draw(hnp.arrays(dtype, shape))
        arrays[key] = with_order(arr, draw(st.sampled_from("CF")))
    return arrays


@settings(max_examples=50, deadline=None, database=None)
@given(arrays=npz_arrays(), saver=st.sampled_from(list(SAVERS)))
def test_property_round_trip(tmp_path_factory, arrays, saver):
    raw = npz_bytes(saver, **arrays)
    path = tmp_path_factory.mktemp("prop") / "x.npz"
    path.write_bytes(raw)
    with np.load(path) as f:
        want = dict(f)
    assert_same_dict(packread.load_npz(path), want)
    assert_same_dict(packread.load_npz(raw), want)
    assert_same_dict(packread.load_npz(memoryview(b"\0" + raw)[1:]), want)


# --------------------------------------------------------------------------------------------
# NpzReader


def write_samples(folder, n=10, *, seed=0, shape=(3, 4), dtype=">f4", start=0):
    """``n`` NPZ files of one sample each (img, label, name, rec), alternately stored and
    compressed, every third one's image in Fortran order. Returns their paths."""
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    rec = np.dtype([("x", "<i2"), ("y", ">f8", (2,))])
    paths = []
    for i in range(start, start + n):
        img = with_order(random_array(rng, shape, dtype), "F" if i % 3 == 0 else "C")
        arrays = {
            "img": img,
            "label": np.int64(i),
            "name": np.array([f"s{i}", "x"], dtype="<U4"),
            "rec": random_array(rng, (2,), rec),
            "empty": np.zeros((0, 2), "<f8"),
        }
        path = folder / f"s{i:03d}.npz"
        (np.savez_compressed if i % 2 else np.savez)(path, **arrays)
        paths.append(str(path))
    return paths


def expected(paths, rows, key):
    """np.load of each file's key, stacked in C order with the file's own dtype."""
    arrays = []
    for i in rows:
        with np.load(paths[i]) as f:
            arrays.append(f[key])
    out = np.empty((len(arrays), *arrays[0].shape), dtype=arrays[0].dtype)
    for k, a in enumerate(arrays):
        out[k] = a
    return out


@pytest.fixture
def sample_files(tmp_path):
    return write_samples(tmp_path / "set")


def test_npz_reader_metadata(sample_files):
    r = packread.NpzReader(sample_files)
    assert len(r) == 10
    assert r.keys() == ["img", "label", "name", "rec", "empty"]
    assert r.paths == sample_files
    assert r.shape["img"] == (3, 4)
    assert r.dtype["img"] == np.dtype(">f4")
    assert r.dtype["img"].str == ">f4"
    assert r.shape["label"] == ()
    assert r.dtype["label"] == np.dtype("<i8")
    assert r.shape["name"] == (2,)
    assert r.dtype["name"] == np.dtype("<U4")
    assert r.shape["empty"] == (0, 2)
    assert "10 files" in repr(r)
    with pytest.raises(KeyError):
        r.shape["nope"]


def test_npz_reader_list_directory_glob(sample_files, tmp_path):
    folder = tmp_path / "set"
    (folder / "not-npz.txt").write_text("ignored")
    by_list = packread.NpzReader([pathlib.Path(p) for p in reversed(sample_files)])
    assert by_list.paths == list(reversed(sample_files))
    assert packread.NpzReader(folder).paths == sample_files
    assert packread.NpzReader(str(folder)).paths == sample_files
    assert packread.NpzReader(str(folder / "s00[0-4].npz")).paths == sample_files[:5]
    assert packread.NpzReader(folder / "*.npz").paths == sample_files


@pytest.mark.parametrize(
    "idx",
    [
        [0],
        [9, 0, 3, 3, -1],
        list(range(10)),
        [],
        np.array([2, 5]),
        range(1, 10, 4),
        slice(8, 2, -2),
    ],
    ids=["one", "mixed", "all", "empty", "ndarray", "range", "slice"],
)
def test_npz_reader_batch(sample_files, idx):
    r = packread.NpzReader(sample_files)
    rows = np.arange(10)[idx] if isinstance(idx, slice) else np.asarray(list(idx), dtype=int)
    rows = [int(i) % 10 for i in rows]
    got = r.batch(idx)
    assert list(got) == r.keys()
    for key in got:
        want = (
            expected(sample_files, rows, key)
            if rows
            else np.empty((0, *r.shape[key]), dtype=r.dtype[key])
        )
        assert_same(got[key], want)


def test_npz_reader_key_subset_and_out(sample_files):
    r = packread.NpzReader(sample_files)
    got = r.batch([4, 1], keys=["label", "img"])
    assert list(got) == ["label", "img"]
    assert_same(got["label"], expected(sample_files, [4, 1], "label"))
    out_img = np.full((2, 3, 4), np.nan, dtype=">f4")
    got = r.batch([7, 3], keys=["img", "label"], out={"img": out_img})
    assert got["img"] is out_img
    assert_same(out_img, expected(sample_files, [7, 3], "img"))
    assert_same(got["label"], expected(sample_files, [7, 3], "label"))
    with pytest.raises(KeyError):
        r.batch([0], keys=["nope"])
    with pytest.raises(TypeError):
        r.batch([0], keys="img")


def test_npz_reader_getitem(sample_files):
    r = packread.NpzReader(sample_files)
    sample = r[6]
    assert list(sample) == r.keys()
    with np.load(sample_files[6]) as f:
        for key in sample:
            assert np.array_equal(sample[key], f[key])
            assert sample[key].dtype == f[key].dtype


@pytest.mark.parametrize(
    "bad_out",
    [np.zeros((2, 3, 4), "<f4"), np.zeros((2, 4, 3), ">f4"), np.zeros((3, 3, 4), ">f4")],
    ids=["dtype", "shape", "rows"],
)
def test_npz_reader_bad_out(sample_files, bad_out):
    r = packread.NpzReader(sample_files)
    with pytest.raises(packread.InvalidArgumentError):
        r.batch([0, 1], keys=["img"], out={"img": bad_out})
    assert not bad_out.any()
    shared = np.zeros((2, 3, 4), ">f4")
    ro = np.zeros((2, 3, 4), ">f4")
    ro.flags.writeable = False
    with pytest.raises(packread.InvalidArgumentError):
        r.batch([0, 1], keys=["img"], out={"img": ro})
    with pytest.raises(packread.InvalidArgumentError):
        r.batch([0, 1], keys=["img", "img"], out={"img": shared})


@pytest.mark.parametrize("idx", [[10], [-11], [0, 10**9]])
def test_npz_reader_index_out_of_range(sample_files, idx):
    r = packread.NpzReader(sample_files)
    with pytest.raises(IndexError):
        r.batch(idx)


def test_npz_reader_mismatches_name_file_and_key(tmp_path):
    paths = write_samples(tmp_path / "set", n=4)
    folder = tmp_path / "set"
    extra = {
        "s900.npz": {"label": np.int64(1)},  # no img
        "s901.npz": {"img": np.zeros((3, 5), ">f4")},  # other shape
        "s902.npz": {"img": np.zeros((3, 4), "<f4")},  # other byte order
        "s903.npz": {"img": np.zeros((3, 4), ">f8")},  # other dtype
        "s904.npz": {"img": np.zeros((4, 3), ">f4", order="F")},  # other shape, Fortran order
    }
    with np.load(paths[0]) as f:
        base = dict(f)
    for name, changes in extra.items():
        arrays = {k: v for k, v in base.items() if k != "img"}
        arrays.update(changes)
        np.savez(folder / name, **arrays)
    r = packread.NpzReader(folder)  # only the first file is read here
    assert len(r) == 9
    got = r.batch(range(4))
    assert_same(got["img"], expected(paths, range(4), "img"))
    for k, name in enumerate(extra):
        with pytest.raises((KeyError, ValueError)) as exc:
            r.batch([0, 4 + k])
        assert isinstance(exc.value, packread.PackreadError)
        assert str(folder / name) in str(exc.value), str(exc.value)
        assert "img" in str(exc.value), str(exc.value)
        if name != "s900.npz":
            assert isinstance(exc.value, ValueError), repr(exc.value)
    # The good files still read after the errors.
    assert_same(r.batch([3])["img"], expected(paths, [3], "img"))


def test_npz_reader_missing_key_even_when_not_requested(tmp_path):
    paths = write_samples(tmp_path / "set", n=2)
    np.savez(tmp_path / "set" / "s999.npz", img=np.zeros((3, 4), ">f4"))
    r = packread.NpzReader([*paths, str(tmp_path / "set" / "s999.npz")])
    with pytest.raises(KeyError) as exc:
        r.batch([2])
    assert "s999.npz" in str(exc.value)
    assert "label" in str(exc.value)


def test_npz_reader_extra_keys_in_later_files_are_ignored(tmp_path):
    paths = write_samples(tmp_path / "set", n=2)
    with np.load(paths[0]) as f:
        arrays = dict(f)
    later = tmp_path / "set" / "s999.npz"
    np.savez(later, **arrays, bonus=np.arange(3))
    r = packread.NpzReader([*paths, str(later)])
    assert "bonus" not in r.keys()
    assert_same(r.batch([2])["img"], expected([*paths, str(later)], [2], "img"))


def test_npz_reader_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError):
        packread.NpzReader(tmp_path / "none-*.npz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError):
        packread.NpzReader(tmp_path / "empty")
    with pytest.raises(packread.InvalidArgumentError):
        packread.NpzReader([])
    np.savez(tmp_path / "nothing.npz")
    with pytest.raises(packread.InvalidArgumentError, match=r"nothing\.npz"):
        packread.NpzReader([tmp_path / "nothing.npz"])


_PEAK = """
import io, sys
import numpy as np
import packread


def peak_rss():
    # VmHWM: this process's peak resident set, reset below through clear_refs (ru_maxrss
    # would keep the peak of the forked parent this process was exec'ed from).
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))

path, how = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read() if how == "bytes" else None
small = io.BytesIO()
np.savez_compressed(small, x=np.arange(1000))
packread.load_npz(small.getvalue())  # warm up: the pool, imports
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = peak_rss()
if how == "zipread":
    got = packread.ZipReader(path).read("x.npy")
    n = len(got)
else:
    got = packread.load_npz(path if raw is None else raw)["x"]
    n = got.nbytes
after = peak_rss()
print((after - before) * 1024 / n)
"""


@pytest.mark.parametrize("how", ["path", "bytes", "zipread"])
def test_large_deflated_member_is_inflated_into_the_result(tmp_path, how):
    # numpy.load streams a compressed member into the array it returns (peak ~1x); packread
    # inflates straight into the array too, reading the compressed bytes a piece at a time,
    # instead of holding them and the whole inflated member beside the result (2.5-2.9x).
    n = 64 << 20
    # 4 bits of noise a byte: deflate keeps about half, as it does of real sample data.
    arr = np.random.default_rng(0).integers(0, 16, n, dtype=np.uint8)
    path = tmp_path / "big.npz"
    np.savez_compressed(path, x=arr, small=np.arange(3))
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, str(path), how], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    peak = float(proc.stdout)
    assert peak <= 1.1, f"peak {peak:.2f}x the data returned"
    got = packread.load_npz(path)["x"]
    assert_same(got, arr)
