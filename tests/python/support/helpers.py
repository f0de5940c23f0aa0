"""Helpers shared by the tests: bit-exact comparison, hand-made NPY streams, the dtypes the
format tests go through, PyTables filters."""

from __future__ import annotations

import io
import os
import pickle
import signal
import tempfile
import threading
import time
import traceback
import warnings

import numpy as np
import pytest
from numpy.lib import format as npformat

MAGIC = b"\x93NUMPY"


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype (byte order included), shape, C/F contiguity and bytes."""
    assert isinstance(got, np.ndarray), type(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.dtype.str == want.dtype.str, (got.dtype.str, want.dtype.str)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.flags.c_contiguous == want.flags.c_contiguous, "C contiguity differs"
    if want.itemsize or np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        # numpy 1.x flags a multi-dimensional array of a zero-size dtype F-contiguous when
        # numpy.load makes it, and not when np.empty does (packread's arrays are np.empty's).
        assert got.flags.f_contiguous == want.flags.f_contiguous, "F contiguity differs"
    assert leaf_bytes(got) == leaf_bytes(want)


def leaf_bytes(arr: np.ndarray) -> bytes:
    """The bytes of every field, without the padding of aligned structured dtypes (numpy.load
    leaves padding uninitialised, so only the fields can be compared)."""
    if arr.dtype.names is None:
        return arr.tobytes(order="A")
    return b"".join(leaf_bytes(arr[name]) for name in arr.dtype.names)


def npy_bytes(arr: np.ndarray, version: tuple[int, int] | None = None, **kw) -> bytes:
    """The bytes ``np.save`` (or ``write_array`` with an explicit version) writes."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "stored array in format 3.0"
        if version is None:
            np.save(buf, arr, **kw)
        else:
            npformat.write_array(buf, arr, version=version, **kw)
    return buf.getvalue()


def np_load_bytes(raw: bytes, **kw) -> np.ndarray:
    return np.load(io.BytesIO(bytes(raw)), **kw)


def craft_npy(
    header: str,
    data: bytes = b"",
    *,
    version: int = 1,
    header_len: int | None = None,
) -> bytes:
    """An NPY stream with an arbitrary header text, padded like numpy pads it (to 64 bytes).

    ``header_len`` overrides the length field of the preamble (to lie about it).
    """
    text = header.encode("utf-8" if version == 3 else "latin-1")
    pre = 10 if version == 1 else 12
    text += b" " * ((-(pre + len(text) + 1)) % 64) + b"\n"
    n = len(text) if header_len is None else header_len
    size = n.to_bytes(2 if version == 1 else 4, "little")
    return MAGIC + bytes([version, 0]) + size + text + data


def aligned_buffer(raw: bytes, shift: int = 0) -> np.ndarray:
    """A uint8 array holding ``raw`` whose first byte is at a 64-byte boundary plus ``shift``."""
    store = np.zeros(len(raw) + 128 + shift, dtype=np.uint8)
    start = (-store.ctypes.data) % 64 + shift
    view = store[start : start + len(raw)]
    view[:] = np.frombuffer(raw, dtype=np.uint8)
    assert view.ctypes.data % 64 == shift
    return view


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    """An array of random bytes (random 0/1 for bool) of any fixed-size dtype."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    raw = rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def with_order(arr: np.ndarray, order: str) -> np.ndarray:
    """A copy in C or Fortran order; 0-d stays 0-d (unlike ``np.asfortranarray``)."""
    return np.array(arr, order=order, copy=True)


def stack(paths, rows, shape=None, dtype=None) -> np.ndarray:
    """What a batch of ``rows`` must equal: ``np.stack`` of ``np.load`` of each file, but with
    the files' own dtype (``np.stack`` turns big-endian into native byte order)."""
    arrays = [np.load(paths[i]) for i in rows]
    if not arrays:
        return np.empty((0, *shape), dtype=dtype)
    out = np.empty((len(arrays), *arrays[0].shape), dtype=arrays[0].dtype)
    for k, a in enumerate(arrays):
        out[k] = a
    if out.dtype.names is None:  # (NaN inside records would not compare equal)
        np.testing.assert_array_equal(out, np.stack(arrays))
    return out


def _pack(value):
    """Arrays as NPY bytes (pickle does not keep a non-native byte order), recursively."""
    if isinstance(value, np.ndarray):
        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=False)
        return ("__npy__", buf.getvalue())
    if isinstance(value, dict):
        return {k: _pack(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_pack(v) for v in value)
    return value


def _unpack(value):
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "__npy__":
        return np.load(io.BytesIO(value[1]))
    if isinstance(value, dict):
        return {k: _unpack(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_unpack(v) for v in value)
    return value


def in_child(work, result_path=None, timeout_s: float = 60):
    """Forks; the child pickles ``work()`` to ``result_path`` and exits; returns the result.

    A child that does not finish within ``timeout_s`` is killed and the test fails (a hang must
    not hang pytest); a child that raised fails the test (its traceback is on stderr).
    """
    if result_path is None:
        fd, result_path = tempfile.mkstemp(suffix=".pickle")
        os.close(fd)
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            with open(result_path, "wb") as f:
                pickle.dump(_pack(work()), f)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"forked child did not finish within {timeout_s} s (hung)")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0, "child failed (traceback on stderr)"
    with open(result_path, "rb") as f:
        return _unpack(pickle.load(f))


def _both_orders(*codes: str) -> list[str]:
    """Each type code little-endian, then big-endian: ``["<i2", ">i2", ...]``."""
    return [f"{order}{code}" for code in codes for order in "<>"]


# Every scalar dtype numpy writes to NPY, both byte orders where they differ.
NPY_SCALAR_DTYPES = [
    "|b1",
    "|i1",
    "|u1",
    *_both_orders("i2", "i4", "i8", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"),
    "|S1",
    "|S7",
    "<U1",
    "<U5",
    ">U3",
    "<M8[ns]",
    ">m8[s]",
    "|V5",
    np.dtype(np.longdouble).str,
]

# Dtypes the property tests draw from ("rec" stands for PROPERTY_RECORD).
PROPERTY_DTYPES = [
    "|b1",
    "|i1",
    "<i2",
    ">i2",
    "<i4",
    ">i8",
    "<u2",
    ">u4",
    "<u8",
    *_both_orders("f2", "f4", "f8"),
    "<c8",
    ">c16",
    "|S3",
    "<U2",
    ">U1",
    "rec",
]
PROPERTY_RECORD = np.dtype([("a", ">i2"), ("b", "<f4", (2,)), ("c", "|S2")])

# Numeric dtypes of every size and byte order (strings and records are covered elsewhere and
# go through the same decoders), for the HDF5 codec tests.
NUMERIC_DTYPES = [
    d for d in NPY_SCALAR_DTYPES if np.dtype(d).kind in "biufc" and np.dtype(d) != np.longdouble
]

# The codecs inside blosc and blosc2.
BLOSC_CODECS = ["blosclz", "lz4", "lz4hc", "zlib", "zstd"]


def pytables_filters(complib: str, shuffle: str):
    """PyTables' ``Filters`` for ``complib`` at level 5, ``shuffle`` one of ``"none"``,
    ``"shuffle"`` and ``"bitshuffle"``."""
    import tables

    return tables.Filters(
        complevel=5,
        complib=complib,
        shuffle=shuffle == "shuffle",
        bitshuffle=shuffle == "bitshuffle",
    )


def run_threads(work, count: int = 8, timeout_s: float = 60) -> None:
    """Runs ``work(seed)`` for seeds ``0..count`` in as many threads, all started together;
    fails if any thread is still running after ``timeout_s``."""
    threads = [threading.Thread(target=work, args=(s,)) for s in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not any(t.is_alive() for t in threads)
