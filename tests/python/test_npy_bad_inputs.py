"""The NPY cases of docs/BAD_INPUTS.md (1-8 and 35): crafted bytes and files must give
the documented exception, naming the file (or ``<buffer>``), and never a partial array."""

from __future__ import annotations

import os

import numpy as np
import pytest

import packread
from support.helpers import assert_same, craft_npy, np_load_bytes, npy_bytes

GOOD = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }"
GOOD_DATA = np.arange(6, dtype="<i4").tobytes()


def _raises_everywhere(tmp_path, raw: bytes, exc_type, *, reader=True, **kw):
    """``raw`` as bytes, bytearray and as a file to load_npy and NpyReader: all raise
    ``exc_type`` (also a PackreadError), naming ``<buffer>`` or the path."""
    for src in (raw, bytearray(raw), memoryview(raw)):
        with pytest.raises(exc_type) as exc:
            packread.load_npy(src, **kw)
        assert isinstance(exc.value, packread.PackreadError)
        assert "<buffer>" in str(exc.value), str(exc.value)
    path = tmp_path / "bad.npy"
    path.write_bytes(raw)
    with pytest.raises(exc_type) as exc:
        packread.load_npy(path, **kw)
    assert isinstance(exc.value, packread.PackreadError)
    assert str(path) in str(exc.value), str(exc.value)
    if reader:
        # The bad file among good ones: the reader refuses it when it opens, naming it.
        good = tmp_path / "good.npy"
        np.save(good, np.zeros((2, 3), dtype="<i4"))
        with pytest.raises(exc_type) as exc:
            packread.NpyReader([good, path], **kw)
        assert isinstance(exc.value, packread.PackreadError)
        assert str(path) in str(exc.value), str(exc.value)
    return exc.value


def test_sanity_crafted_good_header_loads(tmp_path):
    raw = craft_npy(GOOD, GOOD_DATA)
    for version in (1, 2, 3):
        raw = craft_npy(GOOD, GOOD_DATA, version=version)
        want = np_load_bytes(raw)
        assert_same(packread.load_npy(raw), want)
        path = tmp_path / "ok.npy"
        path.write_bytes(raw)
        assert_same(packread.load_npy(path), want)


# 1. ---------------------------------------------------------------------------------------


# BAD_INPUTS 1
@pytest.mark.parametrize(
    ("version", "header_len"),
    [(2, 0xFFFFFFF0), (3, 0xFFFFFFF0), (2, 0xFFFFFFFF), (1, 0xFFFF), (2, 10_001)],
)
def test_header_length_far_beyond_the_file(tmp_path, version, header_len):
    raw = craft_npy(GOOD, GOOD_DATA, version=version, header_len=header_len)
    assert len(raw) < header_len
    err = _raises_everywhere(tmp_path, raw, packread.LimitExceededError)
    assert isinstance(err, ValueError)


# BAD_INPUTS 1
def test_raised_limit_is_still_bounded_by_the_data(tmp_path):
    # With the limit lifted, a 4 GiB header is still refused from the length of the file,
    # not by trying to allocate or read 4 GiB.
    raw = craft_npy(GOOD, GOOD_DATA, version=2, header_len=0xFFFFFFF0)
    _raises_everywhere(tmp_path, raw, packread.NpyFormatError, max_header_size=2**40)


def test_truncated_preamble(tmp_path):
    raw = craft_npy(GOOD, GOOD_DATA, version=2)
    for cut in (0, 5, 9, 11):
        _raises_everywhere(tmp_path, raw[:cut], packread.NpyFormatError)


@pytest.mark.parametrize(
    "prefix", [b"\x93NUMPX\x01\x00", b"\x93NUMPY\x04\x00", b"\x93NUMPY\x01\x01", b"PK\x03\x04xx"]
)
def test_bad_magic_or_version(tmp_path, prefix):
    raw = craft_npy(GOOD, GOOD_DATA)
    _raises_everywhere(tmp_path, prefix + raw[8:], packread.NpyFormatError)


# 2. ---------------------------------------------------------------------------------------


def _big_header_file(tmp_path):
    dtype = np.dtype([(f"field_{i:03d}", "<f4" if i % 2 else ">i2") for i in range(600)])
    arr = np.zeros(3, dtype=dtype)
    arr["field_001"] = [1.5, 2.5, 3.5]
    raw = npy_bytes(arr)
    header_len = int.from_bytes(raw[8:10], "little")
    assert raw[6] == 1
    assert header_len > 10_000
    path = tmp_path / "bighdr.npy"
    path.write_bytes(raw)
    return raw, path, header_len


# BAD_INPUTS 2
def test_header_over_10000_bytes(tmp_path):
    raw, path, header_len = _big_header_file(tmp_path)
    with pytest.raises(ValueError, match="large"):  # numpy refuses it too
        np.load(path)
    err = _raises_everywhere(tmp_path, raw, packread.LimitExceededError)
    assert isinstance(err, ValueError)
    with pytest.raises(packread.LimitExceededError):
        packread.load_npy(raw, max_header_size=header_len - 1)


# BAD_INPUTS 2
def test_raised_limit_loads_like_numpy(tmp_path):
    raw, path, header_len = _big_header_file(tmp_path)
    for limit in (header_len, 20_000, 10**6):
        want = np.load(path, max_header_size=limit)
        assert_same(packread.load_npy(path, max_header_size=limit), want)
        assert_same(packread.load_npy(raw, max_header_size=limit), want)
        reader = packread.NpyReader([path, path], max_header_size=limit)
        got = reader.batch([1, 0])
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got[0], want)
        np.testing.assert_array_equal(got[1], want)


# 3. ---------------------------------------------------------------------------------------


# BAD_INPUTS 3
def test_code_in_header_is_never_evaluated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "PWNED"
    headers = [
        "{'descr': __import__('os').system('touch PWNED'), 'fortran_order': False, "
        "'shape': (2, 3), }",
        f"{{'descr': __import__('os').system('touch {marker}'), 'fortran_order': False, "
        "'shape': (2, 3), }",
        f"{{'descr': '<i4', 'fortran_order': open('{marker}', 'w'), 'shape': (2, 3), }}",
        f"__import__('os').system('touch {marker}')",
        f"{{'descr': '<i4', 'fortran_order': False, 'shape': "
        f"(exec(\"open('{marker}', 'w')\"), 3), }}",
    ]
    for header in headers:
        raw = craft_npy(header, GOOD_DATA)
        err = _raises_everywhere(tmp_path, raw, packread.NpyFormatError)
        assert isinstance(err, ValueError)
        assert not marker.exists()
    assert not marker.exists()
    assert not (tmp_path / "PWNED").exists()


# BAD_INPUTS 3
@pytest.mark.parametrize(
    "header",
    [
        "1+1",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (1+1, 3), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2*1, 3), }",
        "{'descr': '<i4', 'fortran_order': not True, 'shape': (2, 3), }",
        "{'descr': '<' + 'i4', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2.0, 3), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), } + {}",
        "{'descr': '<i4', 'fortran_order': False, 'shape': tuple([2, 3]), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), 'x': lambda: 0}",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), ",
        "{'descr', 'fortran_order', 'shape'}",
        "['descr', '<i4']",
        "dict(descr='<i4', fortran_order=False, shape=(2, 3))",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }; import os",
        "{'descr': b'<i4', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': f'<i4', 'fortran_order': False, 'shape': (2, 3), }",
        "",
    ],
)
def test_non_literal_header(tmp_path, header):
    _raises_everywhere(tmp_path, craft_npy(header, GOOD_DATA), packread.NpyFormatError)


# BAD_INPUTS 3
def test_header_not_utf8_in_v3(tmp_path):
    raw = craft_npy(GOOD, GOOD_DATA, version=3)
    raw = raw.replace(b"'<i4'", b"'\xff\xfe4'")
    _raises_everywhere(tmp_path, raw, packread.NpyFormatError)


# 4. ---------------------------------------------------------------------------------------


# BAD_INPUTS 4
@pytest.mark.parametrize(
    "header",
    [
        "{'descr': '<i4', 'fortran_order': False, }",
        "{'descr': '<i4', 'shape': (2, 3), }",
        "{'fortran_order': False, 'shape': (2, 3), }",
        "{}",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1, }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), 5: 1, }",
        "{'descr': '<i4', 'fortran_order': 0, 'shape': (2, 3), }",
        "{'descr': '<i4', 'fortran_order': 'False', 'shape': (2, 3), }",
        "{'descr': '<i4', 'fortran_order': None, 'shape': (2, 3), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': [2, 3], }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': 6, }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (6), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': '(2, 3)', }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, '3'), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, (3,)), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, None), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, True), }",
        "{'descr': '<i3', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': 4, 'fortran_order': False, 'shape': (2, 3), }",
    ],
)
def test_bad_keys_and_values(tmp_path, header):
    _raises_everywhere(tmp_path, craft_npy(header, GOOD_DATA * 4), packread.NpyFormatError)


# 5. ---------------------------------------------------------------------------------------


# BAD_INPUTS 5
@pytest.mark.parametrize("shape", ["(-1,)", "(2, -3)", "(-6, -1)", "(0, -1)", "(-0, -2, 3)"])
def test_negative_dimension(tmp_path, shape):
    header = f"{{'descr': '<i4', 'fortran_order': False, 'shape': {shape}, }}"
    err = _raises_everywhere(tmp_path, craft_npy(header, GOOD_DATA), packread.NpyFormatError)
    assert isinstance(err, ValueError)


# 6. ---------------------------------------------------------------------------------------

# Each product wraps to 0 (or to less than the data present) in 64-bit arithmetic, so an
# unchecked multiply would accept the header.
OVERFLOWING = [
    ("<i4", f"({2**62}, 4)"),
    ("<i4", f"({2**62},)"),
    ("<f8", f"({2**32}, {2**32})"),
    ("|u1", f"({2**32}, {2**32}, 2)"),
    ("|u1", f"({2**64},)"),
    ("|u1", f"({2**64 + 6},)"),
    ("<i4", f"({2**200},)"),
    ("|u1", f"(0, {2**62}, {2**62})"),
    (f"<U{2**62}", "(1,)"),
    ("[('a', '<i4', (4611686018427387904, 4))]", "(1,)"),
    (f"[('a', '|u1', ({2**32},)), ('b', '|u1', ({2**32},))]", f"({2**31},)"),
]


# BAD_INPUTS 6
@pytest.mark.parametrize(("descr", "shape"), OVERFLOWING)
def test_size_overflow(tmp_path, descr, shape):
    descr = descr if descr.startswith("[") else repr(descr)
    header = f"{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}"
    _raises_everywhere(tmp_path, craft_npy(header, bytes(64)), packread.NpyFormatError)


# 7. ---------------------------------------------------------------------------------------


class _Trap:
    """Unpickling this creates ``path`` (a directory): the proof that something unpickled."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


# BAD_INPUTS 7
@pytest.mark.parametrize("kind", ["object", "record"])
def test_object_dtype_is_never_unpickled(tmp_path, kind):
    marker = tmp_path / "UNPICKLED"
    if kind == "object":
        arr = np.empty(2, dtype=object)
        arr[0] = _Trap(marker)
        arr[1] = 5
    else:
        arr = np.zeros(2, dtype=[("x", "<i4"), ("o", "O")])
        arr[0] = (1, _Trap(marker))
    raw = npy_bytes(arr, allow_pickle=True)
    assert b"|O" in raw[:128]
    assert not marker.exists()
    err = _raises_everywhere(tmp_path, raw, ValueError)
    assert isinstance(err, packread.PackreadError)
    assert not marker.exists()
    for src in (raw, tmp_path / "bad.npy"):
        with pytest.raises(ValueError, match=r"(?i)object"):
            packread.load_npy(src)
    assert not marker.exists()
    # The trap works: numpy, allowed to unpickle, springs it.
    np.load(tmp_path / "bad.npy", allow_pickle=True)
    assert marker.is_dir()


# 8. ---------------------------------------------------------------------------------------


# BAD_INPUTS 8
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_data_shorter_than_shape(tmp_path, version, order):
    arr = np.array(np.arange(24, dtype=">f8").reshape(2, 3, 4), order=order)
    raw = npy_bytes(arr, version=version)
    data_offset = len(raw) - arr.nbytes
    for cut in (1, 7, 8, arr.nbytes - 1, arr.nbytes):
        err = _raises_everywhere(tmp_path, raw[:-cut], packread.NpyFormatError)
        assert isinstance(err, ValueError)
    # Cut inside the header itself.
    _raises_everywhere(tmp_path, raw[: data_offset - 1], packread.NpyFormatError)
    _raises_everywhere(tmp_path, raw[: data_offset // 2], packread.NpyFormatError)


# BAD_INPUTS 8
def test_truncated_real_file(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.arange(100, dtype="<i8"))
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 1)
    # numpy refuses it too (numpy 1.x: "cannot reshape array of size 99 into shape (100,)").
    with pytest.raises(ValueError, match=r"Failed to read all data|cannot reshape"):
        np.load(path)
    with pytest.raises(packread.NpyFormatError, match="needs") as exc:
        packread.load_npy(path)
    assert str(path) in str(exc.value)
    with pytest.raises(packread.NpyFormatError) as exc:
        packread.NpyReader([path])
    assert str(path) in str(exc.value)


def test_empty_file(tmp_path):
    _raises_everywhere(tmp_path, b"", packread.NpyFormatError)


# 34. A file changed under an open reader ---------------------------------------------------


def _open_reader(make_samples):
    paths = make_samples(n=6, shape=(4, 16), dtype="<f4")
    reader = packread.NpyReader(paths)
    good = reader.batch(range(6))
    return paths, reader, good


def _assert_changed_error(reader, paths, victim):
    for idx in ([victim], [0, victim, 1], range(6)):
        with pytest.raises(packread.errors.PackreadOSError) as exc:
            reader.batch(idx)
        assert isinstance(exc.value, OSError)
        assert paths[victim] in str(exc.value)
        out = np.zeros((len(idx), 4, 16), dtype="<f4")
        with pytest.raises(packread.PackreadError):
            reader.batch(idx, out=out)


# BAD_INPUTS 34
def test_file_truncated_after_open(make_samples):
    paths, reader, _ = _open_reader(make_samples)
    with open(paths[3], "r+b") as f:
        f.truncate(os.path.getsize(paths[3]) - 1)
    _assert_changed_error(reader, paths, 3)


# BAD_INPUTS 34
def test_file_truncated_to_nothing_after_open(make_samples):
    paths, reader, _ = _open_reader(make_samples)
    open(paths[2], "wb").close()
    _assert_changed_error(reader, paths, 2)


# BAD_INPUTS 34
def test_file_grown_after_open(make_samples):
    paths, reader, _ = _open_reader(make_samples)
    np.save(paths[4], np.zeros((4, 17), dtype="<f4"))
    _assert_changed_error(reader, paths, 4)


# BAD_INPUTS 34
def test_file_replaced_by_a_directory(make_samples):
    paths, reader, _ = _open_reader(make_samples)
    os.remove(paths[1])
    os.mkdir(paths[1])
    _assert_changed_error(reader, paths, 1)


# BAD_INPUTS 34
def test_file_deleted_after_open(make_samples):
    paths, reader, good = _open_reader(make_samples)
    os.remove(paths[5])
    with pytest.raises(FileNotFoundError) as exc:
        reader.batch([5])
    assert isinstance(exc.value, packread.PackreadError)
    assert paths[5] in str(exc.value)
    # The other files still read.
    assert_same(reader.batch([0, 1]), good[:2])


# BAD_INPUTS 34
def test_file_replaced_by_same_size_file_of_another_dtype(make_samples):
    # os.replace of a sample by a file of equal length but a different header: reading it
    # with the header read at open time would return garbage (int32 bits as float32).
    paths, reader, _ = _open_reader(make_samples)
    other = np.arange(64, dtype="<i4").reshape(4, 16)
    tmp = paths[2] + ".tmp"
    with open(tmp, "wb") as f:
        np.save(f, other)
    assert os.path.getsize(tmp) == os.path.getsize(paths[2])
    os.replace(tmp, paths[2])
    got = _outcome(lambda: reader.batch([2]))
    assert isinstance(got, packread.errors.PackreadOSError), (
        "a replaced file of the same size was read as if unchanged: got "
        f"{got.ravel()[:4]} (int32 bits as float32), numpy.load now gives "
        f"{np.load(paths[2]).ravel()[:4]}"
    )
    assert isinstance(got, OSError)
    assert paths[2] in str(got)


def _outcome(call):
    """What ``call()`` returns, or the exception it raises."""
    try:
        return call()
    except Exception as exc:
        return exc


# Missing files ----------------------------------------------------------------------------


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.npy"
    for call in (
        lambda: packread.load_npy(missing),
        lambda: packread.load_npy(str(missing)),
        lambda: packread.NpyReader([missing]),
    ):
        with pytest.raises(FileNotFoundError) as exc:
            call()
        assert isinstance(exc.value, packread.PackreadError)
        assert str(missing) in str(exc.value)


def test_missing_directory_contents_and_pattern(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "other.txt").write_text("x")
    with pytest.raises(FileNotFoundError) as exc:
        packread.NpyReader(empty)
    assert isinstance(exc.value, packread.PackreadError)
    assert str(empty) in str(exc.value)
    with pytest.raises(FileNotFoundError) as exc:
        packread.NpyReader(str(tmp_path / "*.npy"))
    assert isinstance(exc.value, packread.PackreadError)


def test_empty_path_list():
    with pytest.raises(packread.InvalidArgumentError, match="empty list") as exc:
        packread.NpyReader([])
    assert isinstance(exc.value, ValueError)


def test_directory_as_file(tmp_path):
    with pytest.raises(packread.errors.PackreadOSError) as exc:
        packread.load_npy(tmp_path)
    assert isinstance(exc.value, OSError)
    assert str(tmp_path) in str(exc.value)


# 35. out= ----------------------------------------------------------------------------------

BATCH = (3, 3, 8, 8)


def _readonly():
    a = np.zeros(BATCH, dtype="<f4")
    a.flags.writeable = False
    return a


BAD_OUTS = {
    "shape_rows": lambda: np.zeros((4, 3, 8, 8), dtype="<f4"),
    "shape_sample": lambda: np.zeros((3, 3, 8, 9), dtype="<f4"),
    "shape_flat_same_bytes": lambda: np.zeros(3 * 3 * 8 * 8, dtype="<f4"),
    "shape_sample_only": lambda: np.zeros((3, 8, 8), dtype="<f4"),
    "dtype": lambda: np.zeros(BATCH, dtype="<f8"),
    "dtype_same_itemsize": lambda: np.zeros(BATCH, dtype="<i4"),
    "dtype_byte_order": lambda: np.zeros(BATCH, dtype=">f4"),
    "dtype_bytes": lambda: np.zeros((3, 3, 8, 32), dtype="|u1"),
    "fortran": lambda: np.zeros(BATCH, dtype="<f4", order="F"),
    "slice": lambda: np.zeros((6, 3, 8, 8), dtype="<f4")[::2],
    "transposed": lambda: np.zeros((8, 8, 3, 3), dtype="<f4").T,
    "readonly": _readonly,
    "list": lambda: np.zeros(BATCH, dtype="<f4").tolist(),
    "bytearray": lambda: bytearray(3 * 3 * 8 * 8 * 4),
    "memoryview": lambda: memoryview(np.zeros(BATCH, dtype="<f4")),
}


# BAD_INPUTS 35
@pytest.mark.parametrize("make_out", list(BAD_OUTS.values()), ids=list(BAD_OUTS))
def test_bad_out_before_any_io(samples, make_out):
    reader = packread.NpyReader(samples)
    for path in samples:
        os.remove(path)
    # Control: with a good out= the (deleted) files are read and fail.
    with pytest.raises(FileNotFoundError):
        reader.batch([0, 5, 2], out=np.zeros(BATCH, dtype="<f4"))
    out = make_out()
    with pytest.raises(packread.InvalidArgumentError) as exc:
        reader.batch([0, 5, 2], out=out)
    assert isinstance(exc.value, ValueError)
    assert not isinstance(exc.value, OSError)
    assert "out" in str(exc.value)


# BAD_INPUTS 35
def test_bad_out_leaves_it_untouched(samples):
    reader = packread.NpyReader(samples)
    out = np.full((6, 3, 8, 8), 7.0, dtype="<f4")
    with pytest.raises(packread.InvalidArgumentError):
        reader.batch([0, 1, 2], out=out[::2])
    assert (out == 7.0).all()
