"""Blosc2 (HDF5 filter 32026) as hdf5plugin and PyTables write it: a contiguous frame per chunk,
holding one blosc2 chunk (1-d chunks) or a b2nd array tiled in blocks (n-d chunks). Decoded
natively and in parallel, and through libhdf5 (packread registers the filter with its own
libhdf5; no plugin is loaded) where the fast path cannot go; bit for bit against h5py and
PyTables. Crafted bad frames raise HDF5Error naming the file, dataset and chunk."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest
import tables

import packread
from support.h5files import all_rows, chunk_spans, index_forms, sample_data
from support.helpers import BLOSC_CODECS, NUMERIC_DTYPES, assert_same, pytables_filters

FILTERS = {
    "nofilter": hdf5plugin.Blosc2.NOFILTER,
    "shuffle": hdf5plugin.Blosc2.SHUFFLE,
    "bitshuffle": hdf5plugin.Blosc2.BITSHUFFLE,
}
# (dataset shape, chunk shape): n-d chunks are b2nd arrays; 1-d ones plain chunks.
LAYOUTS = {
    "nd-one-sample": ((17, 3, 10, 12), (1, 3, 10, 12)),
    "nd-unaligned": ((17, 3, 10, 12), (4, 2, 7, 5)),
    # Large chunks: the writers pick blocks (4, 3, 64, 64), tiles of the chunk that are not
    # contiguous in C order, which packread puts back in place.
    "nd-tiled": ((10, 3, 128, 128), (4, 3, 128, 128)),
    "2d-rows": ((40, 300), (3, 300)),
    "1d": ((1000,), (96,)),
}


def _check(path, name, *, native=True, want=None):
    want = all_rows(path, name) if want is None else want
    r = packread.HDF5Reader(path, name)
    path_kind = "chunked" if native else "libhdf5"
    assert r[name].read_path.startswith(path_kind), r[name].read_path
    for label, idx, rows in index_forms(len(r), 0):
        try:
            assert_same(r.batch(idx), want[rows])
        except AssertionError as exc:
            raise AssertionError(f"{name}, idx {label}: {exc}") from exc
    return r


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUTS.keys())
@pytest.mark.parametrize("filt", FILTERS, ids=FILTERS.keys())
@pytest.mark.parametrize("cname", BLOSC_CODECS)
def test_hdf5plugin_blosc2_matches_h5py(tmp_path, cname, filt, layout):
    shape, chunks = LAYOUTS[layout]
    data = sample_data(np.random.default_rng(1), shape, "<f4")
    path = tmp_path / "b2.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "x",
            data=data,
            chunks=chunks,
            **hdf5plugin.Blosc2(cname=cname, clevel=5, filters=FILTERS[filt]),
        )
    _check(path, "x")


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_hdf5plugin_blosc2_every_numeric_dtype(tmp_path, dtype):
    data = sample_data(np.random.default_rng(2), (23, 5, 7), dtype)
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(3, 5, 7), **hdf5plugin.Blosc2(cname="lz4"))
        f.create_dataset("y", data=data, chunks=(4, 2, 3), **hdf5plugin.Blosc2(filters=2))
    _check(path, "x")
    _check(path, "y")


def test_hdf5plugin_blosc2_delta_and_random_data(tmp_path):
    rng = np.random.default_rng(3)
    smooth = np.cumsum(rng.integers(-3, 4, size=(30, 64, 8)), axis=1).astype("<i4")
    noise = sample_data(rng, (30, 64, 8), "<u2", compressible=False)
    path = tmp_path / "e.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("delta", data=smooth, chunks=(5, 64, 8), **hdf5plugin.Blosc2(filters=3))
        f.create_dataset("noise", data=noise, chunks=(7, 13, 8), **hdf5plugin.Blosc2())
        f.create_dataset("level0", data=noise, chunks=(1, 64, 8), **hdf5plugin.Blosc2(clevel=0))
    for name in ("delta", "noise", "level0"):
        _check(path, name)


PYTABLES_COMPLIBS = ["blosc2", *(f"blosc2:{c}" for c in BLOSC_CODECS)]


@pytest.mark.parametrize("shuffle", ["none", "shuffle", "bitshuffle"])
@pytest.mark.parametrize("complib", PYTABLES_COMPLIBS)
def test_pytables_blosc2_matches_pytables(tmp_path, complib, shuffle):
    rng = np.random.default_rng(4)
    data = sample_data(rng, (31, 6, 9), "<f8")
    path = tmp_path / "t.h5"
    filters = pytables_filters(complib, shuffle)
    with tables.open_file(str(path), "w") as f:
        f.create_carray("/", "c", obj=data, filters=filters, chunkshape=(4, 6, 9))
        f.create_carray("/", "odd", obj=data, filters=filters, chunkshape=(3, 4, 5))
        e = f.create_earray("/", "e", atom=tables.Float64Atom(), shape=(0,), filters=filters)
        e.append(data.ravel()[:1000])
    with tables.open_file(str(path), "r") as f:
        wants = {n: f.get_node("/" + n)[:] for n in ("c", "odd", "e")}
    for name, want in wants.items():
        _check(path, name, want=want)


def test_pytables_blosc2_tiled_chunks(tmp_path):
    # (4, 3, 128, 128) chunks are stored as blocks of (4, 3, 64, 64) by PyTables' blosc2.
    data = sample_data(np.random.default_rng(6), (10, 3, 128, 128), "<f4")
    path = tmp_path / "tiled.h5"
    filters = tables.Filters(complevel=5, complib="blosc2:zstd", shuffle=True)
    with tables.open_file(str(path), "w") as f:
        f.create_carray("/", "c", obj=data, filters=filters, chunkshape=(4, 3, 128, 128))
    with tables.open_file(str(path), "r") as f:
        want = f.root.c[:]
    _check(path, "c", want=want)


# --------------------------------------------------------------------------------------------
# through libhdf5: packread registers its blosc2 decoder with its own libhdf5


def _two_compressors(path, data, chunks):
    """deflate then blosc2: a pipeline packread does not chain itself (the size between the two
    is unknown), so libhdf5 reads it, calling packread's registered blosc2 decoder."""
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(chunks)
        dcpl.set_deflate(3)
        dcpl.set_filter(32026, h5py.h5z.FLAG_OPTIONAL, (0, 0, 0, 0, 5, 1, 1))
        tid = h5py.h5t.py_create(data.dtype)
        dsid = h5py.h5d.create(f.id, b"x", tid, h5py.h5s.create_simple(data.shape), dcpl=dcpl)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data)


@pytest.mark.parametrize("chunks", [(1, 6, 9), (4, 5, 7)], ids=["one-sample", "unaligned"])
def test_blosc2_through_libhdf5(tmp_path, chunks):
    data = sample_data(np.random.default_rng(5), (21, 6, 9), "<i8")
    path = tmp_path / "f.h5"
    _two_compressors(path, data, chunks)
    with h5py.File(path, "r") as f:
        assert [f["x"].id.get_create_plist().get_filter(i)[0] for i in range(2)] == [1, 32026]
    r = _check(path, "x", native=False)
    assert "32026" not in r.skipped


# --------------------------------------------------------------------------------------------
# crafted bad frames: HDF5Error naming file, dataset and chunk; never a crash


def _bad_file(tmp_path, chunks):
    data = np.tile((np.arange(512) // 16).astype("<i4"), (12, 1))
    if len(chunks) == 3:
        data = data.reshape(12, 16, 32)
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=chunks, **hdf5plugin.Blosc2(cname="lz4"))
    return path, chunk_spans(path, "x")


def _patched(path, at, new: bytes):
    raw = bytearray(path.read_bytes())
    raw[at : at + len(new)] = new
    path.write_bytes(bytes(raw))


CORRUPTIONS = {
    # The frame's own length field disagrees with the stored size.
    "frame-length": lambda off, size: (off + 11, (size + 1).to_bytes(8, "big")),
    # Header zeroed (magic, sizes).
    "zeros": lambda off, size: (off, bytes(32)),
    # Garbage over the chunk data in the middle of the frame.
    "garbage": lambda off, size: (off + size // 2 - 16, b"\x7e" * 32),
    # The trailer (metalayers, chunk offsets) overwritten.
    "trailer": lambda off, size: (off + size - 24, b"\x01" * 24),
    # The tail of the stored bytes zeroed: what a short write leaves.
    "truncated": lambda off, size: (off + size // 2, bytes(size - size // 2)),
}


@pytest.mark.parametrize("chunks", [(1, 512), (2, 8, 32)], ids=["2d", "3d-b2nd"])
@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_crafted_bad_blosc2_frames_raise_hdf5error(tmp_path, corruption, chunks):
    path, spans = _bad_file(tmp_path, chunks)
    off, size, mask = spans[3]
    assert mask == 0
    _patched(path, *CORRUPTIONS[corruption](off, size))
    r = packread.HDF5Reader(path, "x")
    with pytest.raises(packread.HDF5Error) as exc:
        r.batch(range(len(r)))
    msg = str(exc.value)
    assert str(path) in msg, msg
    assert ":/x" in msg, msg
    assert f"chunk at byte {off}" in msg, msg
    assert "blosc2" in msg, msg
    # Samples outside the bad chunk still read.
    with h5py.File(path, "r") as f:
        dsid = f["x"].id
        infos = [dsid.get_chunk_info(i) for i in range(dsid.get_num_chunks())]
        first = next(c.chunk_offset[0] for c in infos if c.byte_offset == off)
        good = [i for i in range(len(r)) if not first <= i < first + chunks[0]]
        want = np.stack([f["x"][i] for i in good])
    assert_same(r.batch(good), want)


# --------------------------------------------------------------------------------------------
# damaged files from a mutation run (PyTables-style b2nd chunks, lz4 and zstd with shuffles)
# that crashed the process inside c-blosc2's frame and b2nd readers (SIGSEGV, SIGFPE, a
# corrupted heap): each is now read in a child process of its own, where a crash shows as a
# signal, and must give packread's error or the data h5py + hdf5plugin read.

DAMAGED = sorted((Path(__file__).parents[1] / "fixtures" / "damaged_blosc2").glob("*.h5"))

_READ_EVERY_CHUNK = """
import sys, numpy as np, packread
r = packread.HDF5Reader(sys.argv[1], "x")
out = []
for i in range(0, len(r), 2):  # one chunk (2 samples) at a time, then all at once
    try:
        np.save(sys.argv[2] + f"_{i}.npy", r.batch(range(i, i + 2)))
    except packread.HDF5Error as e:
        out.append(f"{i}: {e}")
try:
    r.batch(range(len(r)))
except packread.HDF5Error as e:
    out.append(f"all: {e}")
print("\\n".join(out))
"""


@pytest.mark.parametrize("path", DAMAGED, ids=[p.stem for p in DAMAGED])
def test_damaged_blosc2_files_never_crash(tmp_path, path):
    assert len(DAMAGED) == 5
    proc = subprocess.run(
        [sys.executable, "-c", _READ_EVERY_CHUNK, str(path), str(tmp_path / "got")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    errors = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert "all" in errors, "every file has a damaged chunk"
    assert str(path) in errors["all"], errors["all"]
    assert ":/x (chunk at byte" in errors["all"], errors["all"]
    with h5py.File(path, "r") as f:
        for i in range(0, f["x"].shape[0], 2):
            try:
                want = f["x"][i : i + 2]
            except OSError:
                want = None  # h5py + hdf5plugin refuse this chunk too
            if str(i) in errors:
                # A chunk packread refuses, h5py must refuse as well.
                assert want is None, f"chunk {i}: h5py reads it, packread says {errors[str(i)]}"
            else:
                assert want is not None, f"chunk {i}: h5py refuses it, packread read it"
                assert_same(np.load(tmp_path / f"got_{i}.npy"), want)
        # The undamaged dataset beside it reads as h5py reads it.
        assert_same(packread.HDF5Reader(path, "y").batch(range(8)), f["y"][:])
