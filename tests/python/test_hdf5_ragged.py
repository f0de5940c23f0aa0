"""Variable-length data where the native path cannot go (compact and external storage):
libhdf5 reads the sequences, under its lock, and
batches equal h5py's. And ragged ``batch_async`` runs on packread's pool like every batch."""

from __future__ import annotations

import threading

import h5py
import numpy as np
import pytest

import packread
from support.helpers import assert_same

N = 40


def _rows(rng):
    nums = [rng.integers(-1000, 1000, size=rng.integers(0, 20)).astype("<i4") for _ in range(N)]
    big = [rng.standard_normal(rng.integers(0, 9)).astype(">f8") for _ in range(N)]
    strs = [f"sample {i} {'é' * (i % 5)}" for i in range(N)]
    blobs = [bytes(rng.integers(1, 128, rng.integers(0, 12), dtype=np.uint8)) for _ in range(N)]
    return nums, big, strs, blobs


def _create(f, name, dtype, dcpl, values):
    tid = h5py.h5t.py_create(dtype, logical=True)
    space = h5py.h5s.create_simple((N,))
    h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=dcpl)
    d = f[name]
    for i, v in enumerate(values):
        d[i] = v


def _dcpl(layout, tmp_path, name):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    if layout == "compact":
        dcpl.set_layout(h5py.h5d.COMPACT)
    elif layout == "external":
        ext = tmp_path / f"{name}.bin"
        ext.touch()  # libhdf5 opens it, but does not create it
        dcpl.set_external(str(ext).encode(), 0, h5py.h5f.UNLIMITED)
    return dcpl


# (A filter pipeline packread does not run itself takes the same libhdf5 path, but no writer
# here makes one for variable-length data: hdf5plugin's blosc filters crash writing it, and
# libhdf5 refuses two deflates or Fletcher-32 before deflate on it.)
LAYOUTS = ["compact", "external"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ragged_through_libhdf5_matches_h5py(tmp_path, layout):
    nums, big, strs, blobs = _rows(np.random.default_rng(1))
    path = tmp_path / "v.h5"
    datasets = {
        "nums": (h5py.vlen_dtype(np.dtype("<i4")), nums),
        "big_endian": (h5py.vlen_dtype(np.dtype(">f8")), big),
        "strs": (h5py.string_dtype(), strs),
        "blobs": (h5py.string_dtype("ascii"), blobs),
    }
    written = []
    with h5py.File(path, "w") as f:
        for name, (dtype, values) in datasets.items():
            try:
                _create(f, name, dtype, _dcpl(layout, tmp_path, name), values)
            except (ValueError, OSError) as exc:  # libhdf5 refuses this combination
                if name in f:
                    del f[name]
                print(f"{name}: {layout} not writable: {exc}")
                continue
            written.append(name)
    assert written
    r = packread.HDF5Reader(path)
    assert sorted(r.keys()) == sorted(written), r.skipped
    idx = [3, 0, -1, N - 1, 3, 10]
    got = r.batch(idx)
    flat = packread.HDF5Reader(path, written, ragged="flat").batch(idx)
    with h5py.File(path, "r") as f:
        for name in written:
            assert r[name].read_path.startswith("libhdf5"), r[name].read_path
            values, offsets = flat[name]
            assert offsets.tolist()[0] == 0
            assert len(offsets) == len(idx) + 1
            for k, (g, i) in enumerate(zip(got[name], idx, strict=True)):
                want = f[name][i]
                if isinstance(want, np.ndarray):
                    # What was written, in native order (h5py gives big-endian sequences'
                    # bytes unswapped: not a reference for those).
                    want = datasets[name][1][i]
                    want = want.astype(want.dtype.newbyteorder("="))
                    assert_same(g, want)
                    assert_same(values[offsets[k] : offsets[k + 1]], want)
                else:
                    assert g == want, (name, g, want)
    # A single dataset and an empty batch.
    one = packread.HDF5Reader(path, written[0])
    assert one.batch([]) == []
    assert len(one.batch_async(range(N)).result()) == N


def test_ragged_batch_async_reads_on_the_pool(tmp_path):
    """The read happens in the background: a corrupt heap is reported by ``result()``, not by
    ``batch_async`` (which checks only the arguments, at once)."""
    path = tmp_path / "g.h5"
    nums = _rows(np.random.default_rng(2))[0]
    with h5py.File(path, "w") as f:
        d = f.create_dataset("nums", (N,), dtype=h5py.vlen_dtype(np.dtype("<i4")))
        for i, x in enumerate(nums):
            d[i] = x
        f.create_dataset("fixed", data=np.arange(N * 3).reshape(N, 3))
    r = packread.HDF5Reader(path)
    pending = r.batch_async([5, 1, 5])
    got = pending.result()
    assert pending.done()
    assert_same(got["fixed"], np.arange(N * 3).reshape(N, 3)[[5, 1, 5]])
    for g, i in zip(got["nums"], [5, 1, 5], strict=True):
        assert_same(g, nums[i])
    assert pending.result() is got  # the same batch, built once
    with pytest.raises(IndexError):
        r.batch_async([N])
    raw = bytearray(path.read_bytes())
    at = raw.index(b"GCOL")
    raw[at : at + 4] = b"XCOL"
    path.write_bytes(bytes(raw))
    bad = packread.HDF5Reader(path, "nums")
    pending = bad.batch_async(range(N))  # no error yet: the read runs on the pool
    with pytest.raises(packread.HDF5Error, match="global heap"):
        pending.result()


def test_ragged_reads_release_the_gil(tmp_path):
    """Python threads run while ragged batches are read (and several read at once)."""
    path = tmp_path / "big.h5"
    rng = np.random.default_rng(3)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("nums", (2000,), dtype=h5py.vlen_dtype(np.dtype("<f8")), chunks=(50,))
        for i in range(2000):
            d[i] = rng.standard_normal(rng.integers(100, 400))
    r = packread.HDF5Reader(path, "nums", ragged="flat")
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        pendings = [r.batch_async(rng.integers(0, 2000, 500)) for _ in range(8)]
        results = [p.result() for p in pendings]
    finally:
        stop.set()
        t.join()
    assert ticks > 0
    for values, offsets in results:
        assert len(offsets) == 501
        assert offsets[-1] == len(values)


@pytest.mark.parametrize("layout", ["chunked", "contiguous", "compact"])
def test_vlen_strings_end_at_their_first_nul_as_in_h5py(tmp_path, layout):
    # HDF5 variable-length strings are C strings: libhdf5, so h5py, ends one at its first NUL.
    # h5py cannot write a NUL inside one, so marker bytes are overwritten in the file's heap.
    # Sequences of uint8 bytes (vlen_dtype(uint8), PyTables VLStringAtom) keep every byte.
    path = tmp_path / "nul.h5"
    texts = [b"ab\x01QUb\x01", b"Q", b"plain", b"", b"xyQQz"]
    kw = {"chunks": (2,)} if layout == "chunked" else {}
    with h5py.File(path, "w") as f:
        if layout == "compact":  # read by libhdf5 itself
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            tid = h5py.h5t.py_create(h5py.string_dtype("ascii"), logical=True)
            space = h5py.h5s.create_simple((len(texts),))
            h5py.h5d.create(f.id, b"s", tid, space, dcpl=dcpl)
        else:
            f.create_dataset("s", (len(texts),), dtype=h5py.string_dtype("ascii"), **kw)
        f["s"][:] = texts
        u = f.create_dataset("u", (len(texts),), dtype=h5py.vlen_dtype(np.uint8), **kw)
        for i, t in enumerate(texts):
            u[i] = np.frombuffer(t.replace(b"Q", b"\0"), np.uint8)
    raw = path.read_bytes()
    assert raw.count(b"ab\x01QUb\x01") == 1
    path.write_bytes(raw.replace(b"ab\x01QUb\x01", b"ab\x01\0Ub\x01").replace(b"xyQQz", b"xy\0\0z"))
    with h5py.File(path, "r") as f:
        want_s = list(f["s"][:])
        want_u = [bytes(v) for v in f["u"][:]]
    assert want_s[0] == b"ab\x01"
    assert want_u[0] == b"ab\x01\0Ub\x01"
    r = packread.HDF5Reader(path)
    got = r.batch(range(len(texts)))
    assert got["s"] == want_s
    assert [bytes(v) for v in got["u"]] == want_u
    values, offsets = packread.HDF5Reader(path, ragged="flat").batch([4, 0, 0])["s"]
    assert values.tobytes() == b"xyab\x01ab\x01"
    assert offsets.tolist() == [0, 2, 5, 8]
