"""packread.load_npy and packread.NpyReader against numpy's own reader and writer."""

from __future__ import annotations

import os
import pathlib

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
    np_load_bytes,
    npy_bytes,
    random_array,
    stack,
    with_order,
)

# --------------------------------------------------------------------------------------------
# dtypes

SCALAR_DTYPES = NPY_SCALAR_DTYPES

RECORD_DTYPES = {
    "simple": np.dtype([("a", "<i4"), ("b", ">f8"), ("c", "|S3")]),
    "nested": np.dtype([("x", [("lo", "<u2"), ("hi", ">u2")]), ("y", [("z", [("w", "<f4")])])]),
    "subarray": np.dtype([("img", "<f4", (2, 3)), ("label", "<i8"), ("tags", "|S2", (4,))]),
    "nested_subarray": np.dtype([("pts", [("x", ">f4"), ("y", "<i2")], (3,)), ("n", "|u1")]),
    "aligned": np.dtype([("a", "|u1"), ("b", "<f8"), ("c", "<i2", (3,)), ("d", "|u1")], align=True),
    "aligned_nested": np.dtype(
        [("a", "|i1"), ("s", np.dtype([("p", "<i4"), ("q", "|u1")], align=True))], align=True
    ),
    "titles": np.dtype([(("Temperature in K", "t"), "<f4"), (("flag", "f"), "|b1")]),
    "unicode_fields": np.dtype([("é", "<U2"), ("b", ">c8")]),
    "big_endian_mix": np.dtype([("a", ">i8"), ("b", "<i8"), ("c", ">U1")]),
}

ALL_DTYPES = [np.dtype(d) for d in SCALAR_DTYPES] + list(RECORD_DTYPES.values())
ALL_IDS = SCALAR_DTYPES + [f"rec-{k}" for k in RECORD_DTYPES]

VERSIONS = [(1, 0), (2, 0), (3, 0)]


def _sample(dtype, shape=(3, 4, 5), order="C", seed=0):
    return with_order(random_array(np.random.default_rng(seed), shape, dtype), order)


def _check_loads(tmp_path, raw: bytes, **kw) -> np.ndarray:
    """load_npy from bytes and from a file both equal numpy.load; returns numpy's array."""
    want = np_load_bytes(raw, **kw)
    assert_same(packread.load_npy(raw, **kw), want)
    path = tmp_path / "a.npy"
    path.write_bytes(raw)
    assert_same(packread.load_npy(path, **kw), np.load(path, **kw))
    assert_same(packread.load_npy(str(path), **kw), want)
    return want


# --------------------------------------------------------------------------------------------
# load_npy: every dtype, version and order


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"v{v[0]}")
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_IDS)
def test_load_npy_matches_numpy(tmp_path, dtype, version, order):
    arr = _sample(dtype, order=order)
    raw = npy_bytes(arr, version=version)
    assert raw[6:8] == bytes(version)
    want = _check_loads(tmp_path, raw)
    assert want.flags.f_contiguous == (order == "F")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_IDS)
def test_load_npy_np_save_default_version(tmp_path, dtype):
    _check_loads(tmp_path, npy_bytes(_sample(dtype, shape=(7,), seed=3)))


@pytest.mark.parametrize(
    "dtype",
    [
        np.dtype([("温度", "<f4"), ("数据", ">i8")]),
        np.dtype([(("títle ✓", "标题"), "<u2"), ("层", [("値", ">f8")])]),
    ],
)
def test_format_3_unicode_field_names(tmp_path, dtype):
    arr = _sample(dtype, shape=(4, 3), order="F")
    raw = npy_bytes(arr)  # numpy picks 3.0 itself: the header is not latin-1
    assert raw[6:8] == b"\x03\x00"
    _check_loads(tmp_path, raw)
    _check_loads(tmp_path, npy_bytes(arr, version=(3, 0)))


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (0, 0), (1,), (1, 1, 1), (3, 1, 4), (1, 5)])
@pytest.mark.parametrize("dtype", ["<f8", ">i2", "|b1", "<U3", "rec"])
def test_zero_size_zero_d_and_unit_dims(tmp_path, shape, dtype):
    dtype = RECORD_DTYPES["aligned"] if dtype == "rec" else np.dtype(dtype)
    for order in "CF":
        arr = _sample(dtype, shape=shape, order=order)
        for version in VERSIONS:
            _check_loads(tmp_path, npy_bytes(arr, version=version))


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (5, 1, 6), (2, 2, 2, 2)])
def test_fortran_result_is_f_contiguous(tmp_path, shape):
    arr = with_order(np.arange(np.prod(shape), dtype=">i4").reshape(shape), "F")
    raw = npy_bytes(arr)
    for got in (packread.load_npy(raw), _load_via_file(tmp_path, raw)):
        assert got.flags.f_contiguous
        assert not got.flags.c_contiguous
        np.testing.assert_array_equal(got, arr)


def _load_via_file(tmp_path, raw):
    path = tmp_path / "f.npy"
    path.write_bytes(raw)
    return packread.load_npy(path)


def test_large_file_read_in_parts(tmp_path):
    # More than the 4 MiB above which one read is split among threads; Fortran-ordered too.
    for order in "CF":
        arr = _sample("<f8", shape=(700, 1000), order=order, seed=9)
        _check_loads(tmp_path, npy_bytes(arr))


def test_empty_structured_dtype(tmp_path):
    # np.save writes {'descr': [], ...} for a record dtype without fields; numpy.load reads it.
    arr = np.zeros((3, 2), dtype=[])
    raw = npy_bytes(arr)
    assert b"'descr': []" in raw
    _check_loads(tmp_path, raw)


def test_trailing_bytes_after_data_are_ignored_like_numpy(tmp_path):
    raw = npy_bytes(np.arange(10, dtype="<i4")) + b"trailing garbage"
    want = _check_loads(tmp_path, raw)
    np.testing.assert_array_equal(want, np.arange(10))


def test_header_longer_than_one_probe(tmp_path):
    # A header of ~8 KB: longer than the first read packread makes, within the default limit.
    dtype = np.dtype([(f"f{i:03d}", "<i2" if i % 2 else ">f4") for i in range(400)])
    raw = npy_bytes(_sample(dtype, shape=(3,)))
    assert 4096 < int.from_bytes(raw[8:10], "little") < 10_000
    _check_loads(tmp_path, raw)


def test_path_like_and_str_paths(tmp_path):
    arr = _sample("<f4", shape=(2, 2))
    path = tmp_path / "p.npy"
    np.save(path, arr)
    assert_same(packread.load_npy(pathlib.Path(path)), arr)
    assert_same(packread.load_npy(os.fspath(path)), arr)


def test_file_result_is_writeable_and_owned(tmp_path):
    arr = _sample("<i8", shape=(4, 4))
    path = tmp_path / "w.npy"
    np.save(path, arr)
    got = packread.load_npy(path)
    assert got.flags.writeable
    got[0, 0] = 7
    assert_same(np.load(path), arr)


# --------------------------------------------------------------------------------------------
# load_npy from memory: zero-copy views and copies


def _data_offset(raw: bytes, arr: np.ndarray) -> int:
    return len(raw) - arr.nbytes


@pytest.mark.parametrize("dtype", ["<f8", ">c16", "<i4", "|u1", RECORD_DTYPES["aligned"]])
@pytest.mark.parametrize("order", ["C", "F"])
def test_from_aligned_buffer_is_a_read_only_view(dtype, order):
    arr = _sample(np.dtype(dtype), shape=(3, 5), order=order)
    raw = npy_bytes(arr)
    src = aligned_buffer(raw)  # a numpy uint8 array, data at a 64-byte boundary
    got = packread.load_npy(src)
    assert_same(got, np_load_bytes(raw))
    assert np.shares_memory(got, src)
    assert got.flags.writeable is False
    # A view really: changing the source shows through.
    size = arr.dtype.itemsize
    off = _data_offset(raw, arr)
    before = got.tobytes(order="A")[:size]
    src[off : off + size] ^= 0xFF
    after = got.tobytes(order="A")[:size]
    assert after != before


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "ndarray"])
@pytest.mark.parametrize("dtype", ["<f8", ">i2", "<c8", "|S4", RECORD_DTYPES["subarray"]])
def test_bytes_like_sources(kind, dtype):
    arr = _sample(np.dtype(dtype), shape=(4, 6), order="F")
    raw = npy_bytes(arr)
    src = {
        "bytes": lambda: raw,
        "bytearray": lambda: bytearray(raw),
        "memoryview": lambda: memoryview(raw),
        "ndarray": lambda: np.frombuffer(raw, dtype=np.uint8).copy(),
    }[kind]()
    got = packread.load_npy(src)
    assert_same(got, np_load_bytes(raw))
    assert got.flags.writeable is False
    base = np.frombuffer(src, dtype=np.uint8)
    data_addr = base.ctypes.data + _data_offset(raw, arr)
    if data_addr % got.dtype.alignment == 0:
        assert np.shares_memory(got, base), "aligned data must be viewed, not copied"
    else:
        assert not np.shares_memory(got, base)


def test_bytearray_view_follows_source():
    arr = np.arange(8, dtype="<i8")
    raw = npy_bytes(arr)
    src = bytearray(raw)
    got = packread.load_npy(src)
    if not np.shares_memory(got, np.frombuffer(src, np.uint8)):
        pytest.fail("an 8-byte aligned bytearray payload should be viewed in place")
    src[-8:] = (12345).to_bytes(8, "little")
    assert got[-1] == 12345


@pytest.mark.parametrize("dtype", ["<f8", ">i4", "<c16", "<f2", ">U2"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_misaligned_memoryview_gives_a_correct_copy(dtype, order):
    dtype = np.dtype(dtype)
    assert dtype.alignment > 1
    arr = _sample(dtype, shape=(5, 3), order=order, seed=4)
    raw = npy_bytes(arr)
    src = memoryview(b"x" + raw)[1:]
    base = np.frombuffer(src, dtype=np.uint8)
    assert (base.ctypes.data + _data_offset(raw, arr)) % dtype.alignment != 0
    got = packread.load_npy(src)
    assert_same(got, np_load_bytes(raw))
    assert got.flags.aligned
    assert not np.shares_memory(got, base)


@pytest.mark.parametrize("dtype", ["<f8", ">i4", "<c8"])
def test_misaligned_ndarray_source_is_copied(dtype):
    arr = _sample(np.dtype(dtype), shape=(6, 2), order="F", seed=5)
    raw = npy_bytes(arr)
    src = aligned_buffer(raw, shift=1)
    got = packread.load_npy(src)
    assert_same(got, np_load_bytes(raw))
    assert got.flags.aligned
    assert not np.shares_memory(got, src)
    src[:] = 0  # the copy does not follow the source
    assert_same(got, np_load_bytes(raw))


@pytest.mark.parametrize("shape", [(0,), (3, 0), ()])
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "ndarray"])
def test_bytes_sources_zero_size_and_zero_d(kind, shape):
    arr = _sample(np.dtype(">f4"), shape=shape)
    raw = npy_bytes(arr)
    src = {
        "bytes": raw,
        "bytearray": bytearray(raw),
        "memoryview": memoryview(raw),
        "ndarray": aligned_buffer(raw, shift=3),
    }[kind]
    assert_same(packread.load_npy(src), np_load_bytes(raw))


# --------------------------------------------------------------------------------------------
# property tests


@st.composite
def npy_arrays(draw):
    code = draw(st.sampled_from(PROPERTY_DTYPES))
    dtype = PROPERTY_RECORD if code == "rec" else np.dtype(code)
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
    arr = draw(hnp.arrays(dtype, shape))
    return with_order(arr, draw(st.sampled_from("CF")))


@settings(max_examples=60, deadline=None, database=None)
@given(arr=npy_arrays())
def test_property_round_trip(tmp_path_factory, arr):
    raw = npy_bytes(arr)
    want = np_load_bytes(raw)
    assert_same(packread.load_npy(raw), want)
    assert_same(packread.load_npy(bytearray(raw)), want)
    assert_same(packread.load_npy(memoryview(b"\0" + raw)[1:]), want)
    path = tmp_path_factory.mktemp("prop") / "x.npy"
    path.write_bytes(raw)
    assert_same(packread.load_npy(path), np.load(path))


@settings(max_examples=60, deadline=None, database=None)
@given(
    arr=npy_arrays(),
    rows=st.lists(st.integers(-3, 2), max_size=6),
)
def test_property_reader_batches(tmp_path_factory, arr, rows):
    folder = tmp_path_factory.mktemp("propreader")
    paths = []
    for i in range(3):
        path = folder / f"{i}.npy"
        # Same shape and dtype, different contents, mixed storage orders.
        sample = np.roll(arr, i) if arr.ndim else arr
        np.save(path, with_order(sample, "F" if i == 1 else "C"))
        paths.append(str(path))
    reader = packread.NpyReader(folder)
    assert reader.paths == paths
    got = reader.batch(rows)
    assert_same(got, stack(paths, rows, arr.shape, arr.dtype))


# --------------------------------------------------------------------------------------------
# NpyReader: construction and metadata


def test_reader_from_list_keeps_order(samples):
    paths = samples[::-1]
    reader = packread.NpyReader(paths)
    assert reader.paths == paths
    assert len(reader) == 16
    assert reader.shape == (3, 8, 8)
    assert reader.dtype == np.dtype("<f4")
    assert_same(reader[0], np.load(paths[0]))


def test_reader_from_pathlike_list(samples):
    reader = packread.NpyReader([pathlib.Path(p) for p in samples[:3]])
    assert reader.paths == samples[:3]
    assert all(isinstance(p, str) for p in reader.paths)


def test_reader_from_directory_sorted_npy_only(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    names = ["b10.npy", "a.npy", "b2.npy", "c.npy"]
    for i, name in enumerate(names):
        np.save(folder / name, np.full((2, 2), i, dtype="<i8"))
    (folder / "notes.txt").write_text("not a sample")
    np.savez(folder / "z.npz", x=np.zeros(3))
    (folder / "x.npy.bak").write_bytes(b"junk")
    for src in (folder, str(folder), pathlib.Path(folder)):
        reader = packread.NpyReader(src)
        assert reader.paths == [str(folder / n) for n in sorted(names)]
        assert len(reader) == 4
        assert reader.shape == (2, 2)
        assert reader.dtype == np.dtype("<i8")
    got = reader.batch(range(4))
    assert got[:, 0, 0].tolist() == [names.index(n) for n in sorted(names)]


def test_reader_from_glob_sorted(make_samples, tmp_path):
    make_samples(n=5, prefix="b")
    make_samples(n=4, prefix="a")
    pattern = str(tmp_path / "samples" / "*.npy")
    reader = packread.NpyReader(pattern)
    assert reader.paths == sorted(reader.paths)
    assert len(reader) == 9
    assert os.path.basename(reader.paths[0]) == "a000.npy"
    only_b = packread.NpyReader(str(tmp_path / "samples" / "b00[0-2].npy"))
    assert [os.path.basename(p) for p in only_b.paths] == ["b000.npy", "b001.npy", "b002.npy"]


def test_reader_repr_and_len(samples):
    reader = packread.NpyReader(samples)
    assert "16" in repr(reader)
    assert len(reader) == len(samples)


# --------------------------------------------------------------------------------------------
# NpyReader.batch: index forms


def _rows(idx, n):
    if isinstance(idx, slice):
        return list(range(n))[idx]
    return [int(i) for i in idx]


BATCH_INDICES = {
    "list": [3, 1, 4, 1, 5],
    "int32": np.array([0, 15, 7], dtype=np.int32),
    "int64": np.array([2, 2, 9], dtype=np.int64),
    "uint64": np.array([15, 0, 8], dtype=np.uint64),
    "uint8": np.array([1, 2], dtype=np.uint8),
    "int16": np.array([-1, 0], dtype=np.int16),
    "range": range(1, 14, 4),
    "range_neg_step": range(12, 2, -3),
    "slice": slice(2, 12, 3),
    "slice_all": slice(None),
    "slice_reverse": slice(None, None, -1),
    "slice_neg": slice(-2, -10, -2),
    "slice_tail": slice(-3, None),
    "duplicates": [6, 6, 6, 6],
    "unsorted": [9, 0, 13, 2, 11],
    "negative": [-1, -16, -8],
    "tuple": (4, 5),
    "one": [10],
    "all_list": list(range(16)),
}


@pytest.mark.parametrize("idx", list(BATCH_INDICES.values()), ids=list(BATCH_INDICES))
def test_batch_index_forms(samples, expected_batch, idx):
    reader = packread.NpyReader(samples)
    rows = _rows(idx, len(samples))
    want = expected_batch(samples, rows, reader.shape, reader.dtype)
    assert_same(reader.batch(idx), want)


@pytest.mark.parametrize(
    "idx",
    [[], np.array([], dtype=np.int64), np.array([], dtype=np.uint64), range(0), slice(5, 5)],
    ids=["list", "int64", "uint64", "range", "slice"],
)
def test_batch_empty(samples, idx):
    reader = packread.NpyReader(samples)
    got = reader.batch(idx)
    assert got.shape == (0, 3, 8, 8)
    assert got.dtype == np.dtype("<f4")
    out = np.empty((0, 3, 8, 8), dtype="<f4")
    assert reader.batch(idx, out=out) is out


def test_batch_out_filled_in_place(samples, expected_batch):
    reader = packread.NpyReader(samples)
    idx = [5, 0, 5, -1]
    out = np.full((4, 3, 8, 8), np.nan, dtype="<f4")
    got = reader.batch(idx, out=out)
    assert got is out
    assert_same(out, expected_batch(samples, idx))
    # Reused buffer: overwritten completely.
    assert reader.batch([1, 2, 3, 4], out=out) is out
    assert_same(out, expected_batch(samples, [1, 2, 3, 4]))


def test_getitem_returns_one_sample(samples):
    reader = packread.NpyReader(samples)
    for i in (0, 7, -1, np.int64(3)):
        got = reader[i]
        assert_same(got, np.load(samples[int(i)]))
    assert len(list(reader)) == 16  # iteration stops at IndexError


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (4, 1, 5), (6,), (1, 7), ()])
@pytest.mark.parametrize("dtype", ["<f4", ">i8", "<c16", "|S3", ">U2", "rec"])
def test_batch_dtypes_and_orders(make_samples, expected_batch, shape, dtype, order):
    dtype = RECORD_DTYPES["aligned"] if dtype == "rec" else np.dtype(dtype)
    paths = make_samples(n=5, shape=shape, dtype=dtype, order=order)
    reader = packread.NpyReader(paths)
    assert reader.shape == shape
    assert reader.dtype == np.load(paths[0]).dtype
    idx = [4, 0, 2, 2, -2]
    got = reader.batch(idx)
    assert got.flags.c_contiguous
    assert_same(got, expected_batch(paths, idx))


def test_fortran_samples_give_c_batches(make_samples, expected_batch):
    paths = make_samples(n=4, shape=(5, 7, 3), dtype=">f8", order="F")
    assert np.load(paths[0]).flags.f_contiguous
    reader = packread.NpyReader(paths)
    got = reader.batch([3, 1])
    assert got.flags.c_contiguous
    for k, i in enumerate([3, 1]):
        np.testing.assert_array_equal(got[k], np.load(paths[i]))
    assert_same(got, expected_batch(paths, [3, 1]))


def test_zero_size_samples(make_samples, expected_batch):
    paths = make_samples(n=3, shape=(2, 0, 4), dtype="<f4")
    reader = packread.NpyReader(paths)
    got = reader.batch([0, 2, 1])
    assert got.shape == (3, 2, 0, 4)
    assert_same(got, expected_batch(paths, [0, 2, 1]))


def test_mixed_versions_and_orders_in_one_reader(tmp_path, expected_batch):
    rng = np.random.default_rng(1)
    paths = []
    for i, (version, order) in enumerate(
        [((1, 0), "C"), ((2, 0), "F"), ((3, 0), "C"), ((1, 0), "F"), ((3, 0), "F")]
    ):
        arr = random_array(rng, (4, 6), "<i4")
        path = tmp_path / f"m{i}.npy"
        path.write_bytes(npy_bytes(with_order(arr, order), version=version))
        paths.append(str(path))
    reader = packread.NpyReader(paths)
    idx = [4, 3, 2, 1, 0, 2]
    assert_same(reader.batch(idx), expected_batch(paths, idx))


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((3, 8, 7), dtype="<f4"),  # shape
        np.zeros((8, 3, 8), dtype="<f4"),  # same size, other shape
        np.zeros((3, 8, 8), dtype="<f8"),  # dtype
        np.zeros((3, 8, 8), dtype=">f4"),  # byte order only
        np.zeros((3, 8, 8), dtype="<i4"),  # same itemsize
        np.zeros((192,), dtype="<f4"),  # same bytes, flat
    ],
    ids=["shape", "transposed", "dtype", "byteorder", "kind", "flat"],
)
def test_inconsistent_sample_names_first_offender(samples, bad):
    np.save(samples[5], bad)
    np.save(samples[9], bad)
    with pytest.raises(packread.InconsistentError) as exc:
        packread.NpyReader(samples)
    assert isinstance(exc.value, ValueError)
    assert isinstance(exc.value, packread.PackreadError)
    msg = str(exc.value)
    assert samples[5] in msg
    assert samples[9] not in msg


@pytest.mark.parametrize(
    "idx",
    [
        [16],
        [-17],
        [0, 3, 99],
        np.array([16], dtype=np.int32),
        range(10, 20),
        [np.iinfo(np.int64).max],
        [np.iinfo(np.int64).min],
        [2**63],
        np.array([2**64 - 1], dtype=np.uint64),
    ],
    ids=["n", "-n-1", "late", "int32", "range", "i64max", "i64min", "2**63", "u64max"],
)
def test_index_out_of_range(samples, idx):
    reader = packread.NpyReader(samples)
    with pytest.raises(IndexError) as exc:
        reader.batch(idx)
    assert isinstance(exc.value, packread.PackreadError)
    with pytest.raises(packread.IndexOutOfRangeError):
        reader.batch(idx, out=np.empty((len(idx), 3, 8, 8), dtype="<f4"))


def test_getitem_out_of_range(samples):
    reader = packread.NpyReader(samples)
    with pytest.raises(IndexError):
        reader[16]
    with pytest.raises(packread.PackreadError):
        reader[-17]


@pytest.mark.parametrize(
    "idx",
    [3, np.int64(3), [0.5], np.array([1.0, 2.0]), ["a"], [True, False], 1.5, None, "ab"],
    ids=["int", "np.int64", "floats", "float_array", "strs", "bools", "float", "None", "str"],
)
def test_non_integer_index_is_type_error(samples, idx):
    reader = packread.NpyReader(samples)
    with pytest.raises(TypeError):
        reader.batch(idx)


def test_two_dimensional_index_is_value_error(samples):
    reader = packread.NpyReader(samples)
    with pytest.raises(ValueError, match="one-dimensional"):
        reader.batch(np.zeros((2, 2), dtype=np.int64))


# --------------------------------------------------------------------------------------------
# thread count


def test_num_threads_round_trip():
    packread.set_num_threads(0)
    default = packread.get_num_threads()
    try:
        assert default >= 1
        for n in (1, 3, 4, 16):
            packread.set_num_threads(n)
            assert packread.get_num_threads() == n
        packread.set_num_threads(0)
        assert packread.get_num_threads() == default
    finally:
        packread.set_num_threads(0)


def test_results_identical_with_1_and_4_threads(make_samples, tmp_path):
    # Samples over 4 MiB are split among threads; Fortran ones are transposed.
    paths_c = make_samples(n=3, shape=(1100, 1000), dtype="<f4", subdir="big_c")
    paths_f = make_samples(n=3, shape=(30, 40), dtype=">f8", order="F", subdir="small_f")
    small = make_samples(n=40, shape=(4, 5), dtype="<i2", subdir="small")
    big_arr = random_array(np.random.default_rng(2), (800, 900), "<f8")
    big_file = tmp_path / "big.npy"
    np.save(big_file, with_order(big_arr, "F"))
    results = {}
    try:
        for n in (1, 4):
            packread.set_num_threads(n)
            assert packread.get_num_threads() == n
            results[n] = [
                packread.NpyReader(paths_c).batch([2, 0, 1, 2]),
                packread.NpyReader(paths_f).batch([1, 2, 0]),
                packread.NpyReader(small).batch(np.arange(40)[::-1]),
                packread.load_npy(big_file),
            ]
    finally:
        packread.set_num_threads(0)
    for a, b in zip(results[1], results[4], strict=True):
        assert_same(a, b)
    assert_same(results[4][0][1], np.load(paths_c[0]))
    assert_same(results[4][3], np.load(big_file))
