"""Regression tests for the defects issue 10 found when the readers were tried with hostile
and unusual input (each class is listed in docs/BAD_INPUTS.md, "Found in review")."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
import textwrap
import zipfile

import h5py
import numpy as np
import pytest

import packread
from packread.errors import (
    HDF5Error,
    IndexOutOfRangeError,
    InvalidArgumentError,
    MissingKeyError,
    NpyFormatError,
    PackreadOSError,
    ReaderClosedError,
    UnsupportedError,
)
from support.helpers import assert_same, craft_npy

# --- zero-size string dtypes (S0, U0): numpy returns empty strings, never S1 garbage ---------


@pytest.mark.parametrize("dtype", ["S0", "<U0", "V0"])
def test_zero_itemsize_npy_file_bytes_and_reader(tmp_path, dtype):
    arr = np.ndarray((2, 3), dtype=dtype)  # np.save keeps the zero size (np.empty would not)
    path = tmp_path / "z.npy"
    np.save(path, arr)
    want = np.load(path)
    assert want.dtype.itemsize == 0
    for got in (packread.load_npy(path), packread.load_npy(path.read_bytes())):
        assert got.dtype == want.dtype
        assert got.dtype.str == want.dtype.str
        assert got.shape == want.shape
        assert got.tolist() == want.tolist()
    reader = packread.NpyReader([path, path])
    assert reader.dtype == want.dtype
    batch = reader.batch([1, 0, 1])
    assert batch.dtype == want.dtype
    assert batch.shape == (3, 2, 3)
    assert batch.tolist() == [want.tolist()] * 3


@pytest.mark.parametrize("dtype", ["S0", "<U0"])
def test_zero_itemsize_npz_and_zip_members(tmp_path, dtype):
    path = tmp_path / "z.npz"
    np.savez(path, s=np.ndarray((4,), dtype=dtype), x=np.arange(4))
    want = dict(np.load(path))
    for got in (packread.load_npz(path), packread.load_npz(path.read_bytes())):
        assert got["s"].dtype == want["s"].dtype
        assert got["s"].tolist() == want["s"].tolist()
        np.testing.assert_array_equal(got["x"], want["x"])
    batch = packread.NpzReader([path, path]).batch([0, 1])
    assert batch["s"].dtype == want["s"].dtype
    assert batch["s"].shape == (2, 4)
    assert batch["s"].tolist() == [want["s"].tolist()] * 2
    z = packread.ZipReader(path, members=["s.npy", "s.npy"][:1])
    got = z.batch([0, 0])
    assert got.dtype == want["s"].dtype
    assert got.tolist() == [want["s"].tolist()] * 2


# --- NPY header grammar: numpy's (ast.literal_eval + numpy.dtype) -----------------------------


def test_npy_bool_type_code_is_accepted(tmp_path):
    raw = craft_npy("{'descr': '?', 'fortran_order': False, 'shape': (3,), }", bytes([1, 0, 1]))
    want = np.load(io.BytesIO(raw))
    got = packread.load_npy(raw)
    assert got.dtype == want.dtype == np.bool_
    assert got.tolist() == want.tolist()
    (tmp_path / "b.npy").write_bytes(raw)
    assert packread.NpyReader([tmp_path / "b.npy"]).batch([0]).tolist() == [[True, False, True]]


@pytest.mark.parametrize("shape", ["(3,03)", "(007,)", "(1__0,)", "(3.0,)"])
def test_npy_shape_numpy_refuses_is_refused(shape):
    raw = craft_npy(f"{{'descr': '<i2', 'fortran_order': False, 'shape': {shape}, }}", bytes(64))
    with pytest.raises(ValueError):  # noqa: PT011 (numpy's message varies with the case)
        np.load(io.BytesIO(raw))
    with pytest.raises(NpyFormatError):
        packread.load_npy(raw)


@pytest.mark.parametrize("shape", ["(0x3,)", "(1_0,)", "(00,)"])
def test_npy_shape_python_accepts_is_accepted(shape):
    raw = craft_npy(f"{{'descr': '<u1', 'fortran_order': False, 'shape': {shape}, }}", bytes(16))
    want = np.load(io.BytesIO(raw))
    got = packread.load_npy(raw)
    assert got.shape == want.shape
    assert got.tolist() == want.tolist()


HEADERS_NUMPY_READS = {
    "comment-after-dict": "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } # note",
    "comment-inside": "{'descr': '<f4', # note\n 'fortran_order': False, 'shape': (2, 3), }",
    "joined-strings": "{'descr': '<' 'f4', 'fortran_order': False, 'shape': (2, 3), }",
    "raw-string": "{'descr': r'<f4', 'fortran_order': False, 'shape': (2, 3), }",
    "triple-quoted": "{'descr': \"\"\"<f4\"\"\", 'fortran_order': False, 'shape': (2, 3), }",
    "continuation": "{'descr': '<f4', 'fortran_order': False, \\\n 'shape': (2, 3), }",
    "parenthesised": "({'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), })",
    "octal-escape": "{'descr': '\\074f4', 'fortran_order': False, 'shape': (2, 3), }",
    "repeated-key": "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), 'descr': '<f4'}",
}


@pytest.mark.parametrize("header", HEADERS_NUMPY_READS.values(), ids=HEADERS_NUMPY_READS.keys())
def test_npy_header_python_syntax_numpy_reads_is_read(tmp_path, header):
    raw = craft_npy(header, np.arange(6, dtype="<f4").tobytes())
    want = np.load(io.BytesIO(raw))
    assert want.dtype == np.float32
    assert_same(packread.load_npy(raw), want)
    path = tmp_path / "h.npy"
    path.write_bytes(raw)
    assert_same(packread.NpyReader([path]).batch([0])[0], want)
    npz = io.BytesIO()
    with zipfile.ZipFile(npz, "w") as z:
        z.writestr("x.npy", raw)
    assert_same(packread.load_npz(npz.getvalue())["x"], want)


# --- a FIFO (or any non-regular file) never blocks an entry point ------------------------------

FIFO_CALLS = {
    "load_npy": "packread.load_npy(p)",
    "NpyReader": "packread.NpyReader([p])",
    "ZipReader": "packread.ZipReader(p)",
    "load_npz": "packread.load_npz(p)",
    "NpzReader": "packread.NpzReader([p])",
    "HDF5Reader": "packread.HDF5Reader(p)",
    "HDF5Reader(in_memory)": "packread.HDF5Reader(p, in_memory=True)",
    # Format sniffing opened the path with a plain open() (issue 37).
    "ImageReader": "packread.ImageReader(p, size=8)",
    "open_reader": "packread.open_reader(p)",
}


@pytest.mark.parametrize("call", sorted(FIFO_CALLS))
def test_fifo_is_refused_without_blocking(tmp_path, call):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # In a child: a blocking open would hang it (and Ctrl-C could not stop it); the timeout
    # turns that into a failure instead of a hung test run.
    code = textwrap.dedent(
        f"""
        import packread
        p = {str(fifo)!r}
        try:
            {FIFO_CALLS[call]}
        except packread.errors.PackreadOSError as e:
            assert "not a regular file (a FIFO)" in str(e), e
            assert {str(fifo)!r} in str(e), e
            print("refused")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "refused", out.stderr


def test_file_replaced_by_fifo_is_a_changed_file(tmp_path, make_samples):
    paths = make_samples(2, (4,), "<f4")
    reader = packread.NpyReader(paths)
    os.unlink(paths[1])
    os.mkfifo(paths[1])
    with pytest.raises(PackreadOSError, match="no longer a regular file"):
        reader.batch([1])


# --- HDF5: names, chunk index, datatypes ------------------------------------------------------


def test_hdf5_non_utf8_file_name(tmp_path):
    name = os.path.join(os.fsencode(tmp_path), b"caf\xe9.h5")
    with h5py.File(name, "w") as f:
        f["x"] = np.arange(12, dtype="<i4").reshape(6, 2)
    path = os.fsdecode(name)  # a str with a lone surrogate, as os.listdir gives it
    got = packread.HDF5Reader(path, "x").batch([5, 0])
    with h5py.File(name, "r") as f:
        np.testing.assert_array_equal(got, f["x"][:][[5, 0]])


def _duplicate_chunk_file(path) -> None:
    """A v1 B-tree chunk index whose second key repeats the first key's coordinates."""
    with h5py.File(path, "w") as f:  # libver earliest: v1 B-tree chunk index
        f.create_dataset("x", data=np.arange(8, dtype="<i4"), chunks=(4,))
    raw = bytearray(path.read_bytes())
    at = raw.find(b"TREE")
    while raw[at + 4] != 1:  # node type 1: raw data chunks
        at = raw.find(b"TREE", at + 1)
    key_len = 4 + 4 + 8 * 2  # chunk size, filter mask, offsets of rank 1 + 1
    key0 = at + 8 + 8 + 8
    key1 = key0 + key_len + 8
    raw[key1 + 8 : key1 + 16] = raw[key0 + 8 : key0 + 16]
    path.write_bytes(bytes(raw))


def test_hdf5_chunk_index_with_a_repeated_chunk_is_refused(tmp_path):
    path = tmp_path / "dup.h5"
    _duplicate_chunk_file(path)
    with h5py.File(path, "r") as f:  # h5py reads it silently (and wrongly)
        assert f["x"][:].tolist() != list(range(8))
    with pytest.raises(HDF5Error, match=r"holds the chunk at \[0\] twice") as e:
        packread.HDF5Reader(path, "x")
    assert str(path) in str(e.value)


def _odd_types_file(path) -> None:
    with h5py.File(path, "w") as f:
        space = h5py.h5s.create_simple((4,))
        bf16 = h5py.h5t.IEEE_F32LE.copy()  # bfloat16-like: 8-bit exponent, 7-bit mantissa
        bf16.set_fields(15, 7, 8, 0, 7)
        bf16.set_size(2)
        bf16.set_ebias(127)
        d = h5py.h5d.create(f.id, b"bf16", bf16, space)
        d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([1, 2, 3, -4.5], "<f4"), h5py.h5t.NATIVE_FLOAT)
        i12 = h5py.h5t.STD_I32LE.copy()  # 12 significant bits at bit offset 4
        i12.set_precision(12)
        i12.set_offset(4)
        d = h5py.h5d.create(f.id, b"i12", i12, space)
        d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([1, 2, 3, -4], "<i4"), h5py.h5t.NATIVE_INT32)
        f["plain"] = np.arange(4.0)


@pytest.mark.parametrize("name", ["bf16", "i12"])
def test_hdf5_non_ieee_types_are_refused_not_misread(tmp_path, name):
    path = tmp_path / "odd.h5"
    _odd_types_file(path)
    with pytest.raises(UnsupportedError, match=r"bf16|i12") as e:
        packread.HDF5Reader(path, name)
    assert "IEEE" in str(e.value) or "padding bits" in str(e.value)
    everything = packread.HDF5Reader(path)  # all datasets: the odd ones left out, with why
    assert everything.keys() == ["plain"]
    assert name in everything.skipped
    np.testing.assert_array_equal(everything.batch([3, 1])["plain"], [3.0, 1.0])


def test_hdf5_empty_dataset_list_is_an_error(tmp_path):
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(4)
    with pytest.raises(InvalidArgumentError, match="empty list"):
        packread.HDF5Reader(path, [])


# --- errors name the file; keys and names checked once -----------------------------------------


@pytest.fixture
def one_of_each(tmp_path, make_samples):
    npy = make_samples(3, (2,), "<f4")
    npz = tmp_path / "a.npz"
    np.savez(npz, x=np.arange(3), y=np.ones(2))
    h5 = tmp_path / "a.h5"
    with h5py.File(h5, "w") as f:
        f["x"] = np.arange(10)
        f["y"] = np.arange(10.0)
    return {"npy": npy, "npz": npz, "h5": h5}


def test_index_errors_name_the_file(one_of_each):
    f = one_of_each
    cases = [
        (packread.NpyReader(f["npy"]), f["npy"][0]),
        (packread.NpzReader([f["npz"], f["npz"]]), str(f["npz"])),
        (packread.HDF5Reader(f["h5"]), str(f["h5"])),
        (packread.ZipReader(f["npz"]), str(f["npz"])),
    ]
    for reader, name in cases:
        for bad in ([99], [2**70]):
            with pytest.raises(IndexOutOfRangeError) as e:
                reader.batch(bad)
            assert name in str(e.value), (reader, str(e.value))


def test_out_with_an_unknown_key_and_repeated_names(one_of_each):
    f = one_of_each
    npz = packread.NpzReader([f["npz"]])
    with pytest.raises(InvalidArgumentError, match="zz"):
        npz.batch([0], out={"zz": np.zeros(1)})
    h5 = packread.HDF5Reader(f["h5"])
    with pytest.raises(InvalidArgumentError, match="zz"):
        h5.batch([0], out={"zz": np.zeros(1)})
    # Repeated names say so (not "out= arrays must not share memory", with no out= given).
    for make in (
        lambda: npz.batch([0], keys=["x", "x"]),
        lambda: packread.NpzReader([f["npz"]], keys=["y", "y"]),
        lambda: packread.HDF5Reader(f["h5"], ["x", "/x"]),
        lambda: packread.ZipReader(f["npz"], members=["x.npy", "x.npy"]),
    ):
        with pytest.raises(InvalidArgumentError, match="more than once"):
            make()


@pytest.mark.parametrize(
    "call",
    [
        lambda f: packread.ZipReader(f["npz"]).batch(["\udcff"]),
        lambda f: packread.ZipReader(f["npz"]).read("\udcff"),
        lambda f: packread.NpzReader([f["npz"]], keys=["\udcff"]),
        lambda f: packread.NpzReader([f["npz"]]).batch([0], keys=["\udcff"]),
        lambda f: packread.HDF5Reader(f["h5"], "\udcff"),
        lambda f: packread.HDF5Reader(f["h5"], ["x", "\udcff"]),
        lambda f: packread.HDF5Reader(f["h5"])["\udcff"],
    ],
)
def test_surrogates_in_names_are_missing_keys(one_of_each, call):
    with pytest.raises(MissingKeyError) as e:
        call(one_of_each)
    assert isinstance(e.value, KeyError)
    assert not isinstance(e.value, UnicodeError)


# --- close() and with ------------------------------------------------------------------------


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_readers_close_and_work_as_context_managers(one_of_each):
    f = one_of_each
    makers = {
        "npy": lambda: packread.NpyReader(f["npy"]),
        "npz": lambda: packread.NpzReader([f["npz"], f["npz"]]),
        "zip": lambda: packread.ZipReader(f["npz"], members="x.npy"),
        "h5": lambda: packread.HDF5Reader(f["h5"]),
    }
    for kind, make in makers.items():
        before = _fds()
        with make() as reader:
            first = reader.batch([0])
            pending = reader.batch_async([len(reader) - 1])
        assert reader.closed
        assert "closed" in repr(reader)
        # A read started before close finishes; everything after raises.
        done = pending.result()
        assert type(done) is type(first)
        with pytest.raises(ReaderClosedError, match="closed"):
            reader.batch([0])
        with pytest.raises(ReaderClosedError):
            reader.batch_async([0])
        reader.close()  # twice is fine
        assert isinstance(ReaderClosedError("x"), ValueError)
        del pending, done
        assert _fds() <= before, kind
    h5 = packread.HDF5Reader(f["h5"])
    ds = h5["x"]
    h5.close()
    with pytest.raises(ReaderClosedError):
        ds.read([0])
    z = packread.ZipReader(f["npz"])
    z.close()
    with pytest.raises(ReaderClosedError):
        z.read("x.npy")


# --- memory and hand-off bounds -------------------------------------------------------------------


def test_tiny_batches_are_done_at_once(one_of_each):
    """A tiny batch runs on the calling thread: batch_async returns it already read (its
    handle keeps batch_async's contract: result() gives the batch)."""
    f = one_of_each
    r = packread.NpyReader(f["npy"])
    pending = r.batch_async([2])
    assert pending.done()
    np.testing.assert_array_equal(pending.result()[0], np.load(f["npy"][2]))
    pending = packread.HDF5Reader(f["h5"], "y").batch_async([3, 4])
    assert pending.done()
    np.testing.assert_array_equal(pending.result(), [3.0, 4.0])


def test_zip_read_of_a_large_member_peaks_near_its_size(tmp_path):
    """ZipReader.read decodes into the returned bytes: peak memory ~1x the member (was ~2x)."""
    size = 256 << 20
    path = tmp_path / "big.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("big.bin", b"\x07" * size)
    code = textwrap.dedent(
        f"""
        import resource, packread
        z = packread.ZipReader({str(path)!r})
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        data = z.read("big.bin")
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert len(data) == {size} and data[:3] == b"\\x07\\x07\\x07" and data[-1:] == b"\\x07"
        print((after - before) * 1024)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    grew = int(out.stdout.strip())
    assert grew < 1.5 * size, f"peak grew by {grew / size:.2f}x the member"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0
