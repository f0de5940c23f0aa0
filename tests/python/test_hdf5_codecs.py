"""The plugin codecs, decoded natively and in parallel with no plugin installed: blosc
(PyTables and hdf5plugin, every inner codec and shuffle mode), zstd, LZ4 and bitshuffle (none,
LZ4, zstd inside), written by the real writers and compared bit for bit with their readers."""

from __future__ import annotations

import h5py
import hdf5plugin
import numpy as np
import pytest
import tables

import packread
from support.h5files import all_rows, chunk_spans, index_forms, sample_data
from support.helpers import BLOSC_CODECS, NUMERIC_DTYPES, assert_same, pytables_filters

SHAPE = (29, 3, 10, 12)
CHUNKS = {
    "one-sample": (1, 3, 10, 12),
    "unaligned": (4, 2, 7, 5),
}
BLOSC_SHUFFLES = {
    "noshuffle": hdf5plugin.Blosc.NOSHUFFLE,
    "shuffle": hdf5plugin.Blosc.SHUFFLE,
    "bitshuffle": hdf5plugin.Blosc.BITSHUFFLE,
}

H5PLUGIN_FILTERS = {
    **{
        f"blosc-{c}-{s}": (lambda c=c, m=m: hdf5plugin.Blosc(cname=c, clevel=5, shuffle=m))
        for c in BLOSC_CODECS
        for s, m in BLOSC_SHUFFLES.items()
    },
    "blosc-lz4hc9": lambda: hdf5plugin.Blosc(cname="lz4hc", clevel=9, shuffle=0),
    "blosc-level0": lambda: hdf5plugin.Blosc(cname="lz4", clevel=0, shuffle=0),
    "zstd": lambda: hdf5plugin.Zstd(clevel=3),
    "zstd-22": lambda: hdf5plugin.Zstd(clevel=22),
    "lz4": lambda: hdf5plugin.LZ4(),
    "lz4-small-blocks": lambda: hdf5plugin.LZ4(nbytes=512),
    "bitshuffle": lambda: hdf5plugin.Bitshuffle(cname="none"),
    "bitshuffle-blocks": lambda: hdf5plugin.Bitshuffle(nelems=64, cname="none"),
    "bitshuffle-lz4": lambda: hdf5plugin.Bitshuffle(cname="lz4"),
    "bitshuffle-lz4-blocks": lambda: hdf5plugin.Bitshuffle(nelems=128, cname="lz4"),
    "bitshuffle-zstd": lambda: hdf5plugin.Bitshuffle(cname="zstd", clevel=5),
}


def _check(path, name, *, seed=0):
    want = all_rows(path, name)
    r = packread.HDF5Reader(path, name)
    assert r[name].read_path.startswith("chunked"), r[name].read_path
    for label, idx, rows in index_forms(len(r), seed):
        try:
            assert_same(r.batch(idx), want[rows])
        except AssertionError as exc:
            raise AssertionError(f"{name}, idx {label}: {exc}") from exc
    return r


def _write_h5py(path, data, chunks, make_filter, **kw):
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=chunks, **make_filter(), **kw)


@pytest.mark.parametrize("chunks", CHUNKS.values(), ids=CHUNKS.keys())
@pytest.mark.parametrize("filt", H5PLUGIN_FILTERS, ids=H5PLUGIN_FILTERS.keys())
def test_hdf5plugin_codecs_match_h5py(tmp_path, filt, chunks):
    rng = np.random.default_rng(1)
    data = sample_data(rng, SHAPE, "<f4")
    path = tmp_path / "p.h5"
    _write_h5py(path, data, chunks, H5PLUGIN_FILTERS[filt])
    _check(path, "x")


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize(
    "filt", ["blosc-zstd-shuffle", "blosc-lz4-bitshuffle", "bitshuffle-lz4", "zstd", "lz4"]
)
def test_hdf5plugin_codecs_every_numeric_dtype(tmp_path, filt, dtype):
    rng = np.random.default_rng(2)
    data = sample_data(rng, (23, 5, 7), dtype)
    path = tmp_path / "d.h5"
    _write_h5py(path, data, (3, 5, 7), H5PLUGIN_FILTERS[filt])
    _check(path, "x")


def test_hdf5plugin_with_h5py_shuffle_and_fletcher32(tmp_path):
    rng = np.random.default_rng(3)
    data = sample_data(rng, (20, 64), "<i8")
    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "x", data=data, chunks=(3, 64), shuffle=True, fletcher32=True, **hdf5plugin.Zstd()
        )
    _check(path, "x")


# --------------------------------------------------------------------------------------------
# PyTables

PYTABLES_COMPLIBS = ["blosc", *(f"blosc:{c}" for c in BLOSC_CODECS)]


@pytest.mark.parametrize("shuffle", ["none", "shuffle", "bitshuffle"])
@pytest.mark.parametrize("complib", PYTABLES_COMPLIBS)
@pytest.mark.parametrize("compressible", [True, False], ids=["compressible", "random"])
def test_pytables_blosc_carray_matches_pytables(tmp_path, complib, shuffle, compressible):
    rng = np.random.default_rng(4)
    data = sample_data(rng, (31, 6, 9), "<f8", compressible=compressible)
    path = tmp_path / "t.h5"
    filters = pytables_filters(complib, shuffle)
    with tables.open_file(str(path), "w") as f:
        f.create_carray("/", "c", obj=data, filters=filters, chunkshape=(4, 6, 9))
        f.create_carray("/", "one", obj=data, filters=filters, chunkshape=(1, 6, 9))
    for name in ("c", "one"):
        r = _check(path, name)
        with tables.open_file(str(path), "r") as f:
            node = f.get_node("/" + name)
            rows = [5, 0, 30, 5, -1]
            assert_same(r.batch(rows), np.stack([node[i] for i in rows]))


def test_pytables_incompressible_chunks_are_stored_unfiltered(tmp_path):
    """PyTables registers blosc as optional: a chunk blosc cannot shrink is stored as is, with
    its filter-mask bit set. Those chunks must not be run through blosc."""
    rng = np.random.default_rng(5)
    data = sample_data(rng, (60, 64), "<u8", compressible=True)
    path = tmp_path / "m.h5"
    with tables.open_file(str(path), "w") as f:
        f.create_carray(
            "/", "x", obj=data, filters=tables.Filters(5, "blosc:lz4"), chunkshape=(1, 64)
        )
    masks = {m for _, _, m in chunk_spans(path, "x")}
    assert masks == {0, 1}, masks  # some chunks compressed, some stored unfiltered
    _check(path, "x")


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_pytables_default_blosc_every_numeric_dtype(tmp_path, dtype):
    rng = np.random.default_rng(6)
    data = sample_data(rng, (19, 4, 3), dtype)
    path = tmp_path / "n.h5"
    with tables.open_file(str(path), "w") as f:
        f.create_carray(
            "/", "x", obj=data, filters=tables.Filters(5, "blosc"), chunkshape=(3, 4, 3)
        )
    r = packread.HDF5Reader(path, "x")
    with tables.open_file(str(path), "r") as f:
        want = f.root.x[:]  # PyTables reads its bools as bool (h5py: uint8)
    for label, idx, rows in index_forms(len(r)):
        try:
            assert_same(r.batch(idx), want[rows])
        except AssertionError as exc:
            raise AssertionError(f"idx {label}: {exc}") from exc


def test_seed_layout_lz4hc9_one_row_per_chunk(tmp_path):
    """The h5py-vs-npy comparison's layout: float64 rows, blosc:lz4hc level 9, no shuffle, one
    row per chunk, written both by h5py + hdf5plugin and by PyTables."""
    rng = np.random.default_rng(7)
    rows = np.cumsum(rng.normal(size=(12, 20_000)), axis=1)
    a, b = tmp_path / "h.h5", tmp_path / "t.h5"
    with h5py.File(a, "w") as f:
        f.create_dataset(
            "data",
            data=rows,
            chunks=(1, 20_000),
            **hdf5plugin.Blosc(cname="lz4hc", clevel=9, shuffle=0),
        )
    with tables.open_file(str(b), "w") as f:
        f.create_carray(
            "/",
            "data",
            obj=rows,
            filters=tables.Filters(9, "blosc:lz4hc", shuffle=False),
            chunkshape=(1, 20_000),
        )
    for p in (a, b):
        r = _check(p, "data")
        assert_same(r.batch([3, 1, 3]), rows[[3, 1, 3]])


# --------------------------------------------------------------------------------------------
# crafted bad chunks: HDF5Error naming file, dataset and chunk; never a crash

BAD_FILTERS = {
    "blosc-lz4": lambda: hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=1),
    "blosc-zstd": lambda: hdf5plugin.Blosc(cname="zstd", clevel=5, shuffle=2),
    "zstd": lambda: hdf5plugin.Zstd(),
    "lz4": lambda: hdf5plugin.LZ4(nbytes=256),
    "bitshuffle-lz4": lambda: hdf5plugin.Bitshuffle(nelems=64, cname="lz4"),
    "bitshuffle-zstd": lambda: hdf5plugin.Bitshuffle(nelems=64, cname="zstd"),
}


def _bad_chunk_file(tmp_path, filt):
    rng = np.random.default_rng(20)
    data = sample_data(rng, (12, 512), "<i4")
    data[:] = np.arange(512) // 16  # every chunk and block compressible: none stored raw
    path = tmp_path / "bad.h5"
    _write_h5py(path, data, (1, 512), BAD_FILTERS[filt])
    return path, chunk_spans(path, "x")


def _patched(path, at, new: bytes):
    raw = bytearray(path.read_bytes())
    raw[at : at + len(new)] = new
    path.write_bytes(bytes(raw))


def _expect_hdf5_error(path, offset):
    r = packread.HDF5Reader(path, "x")
    with pytest.raises(packread.HDF5Error) as exc:
        r.batch(range(12))
    msg = str(exc.value)
    assert str(path) in msg, msg
    assert ":/x" in msg, msg
    assert f"chunk at byte {offset}" in msg, msg
    return msg


# (name, function of (chunk offset, chunk size) -> (file offset, new bytes))
CORRUPTIONS = {
    # Header sizes that disagree with the chunk (decoded size one element short / too long).
    "decoded-size": lambda f, off, size: {
        "blosc": (off + 4, (2044).to_bytes(4, "little")),
        "zstd": None,
        "lz4": (off, (2044).to_bytes(8, "big")),
        "bitshuffle": (off, (2052).to_bytes(8, "big")),
    }[f],
    # The compressed size or first block size/offset points past the end of the chunk.
    "past-the-end": lambda f, off, size: {
        "blosc": (off + 16, (size + 100).to_bytes(4, "little")),
        "zstd": (off + size - 8, b"\xff" * 8),
        "lz4": (off + 12, (size * 4).to_bytes(4, "big")),
        "bitshuffle": (off + 12, (size * 4).to_bytes(4, "big")),
    }[f],
    # Header of zeros (blosc: typesize and blocksize 0).
    "zeros": lambda f, off, size: (off, bytes(16)),
    # Garbage where the compressed data is.
    "garbage": lambda f, off, size: (off + 24, b"\xfe" * min(64, size - 24)),
}


@pytest.mark.parametrize("corruption", CORRUPTIONS)
@pytest.mark.parametrize("filt", BAD_FILTERS)
def test_crafted_bad_chunks_raise_hdf5error(tmp_path, filt, corruption):
    path, spans = _bad_chunk_file(tmp_path, filt)
    off, size, mask = spans[5]
    assert mask == 0
    family = filt.split("-")[0]
    change = CORRUPTIONS[corruption](family, off, size)
    if change is None:
        pytest.skip("zstd frames carry no size packread relies on")
    _patched(path, *change)
    _expect_hdf5_error(path, off)


@pytest.mark.parametrize("filt", BAD_FILTERS)
def test_truncated_chunks_raise_hdf5error(tmp_path, filt):
    """A chunk whose stored size was cut short (the index says fewer bytes)."""
    path, spans = _bad_chunk_file(tmp_path, filt)
    off, size, _ = spans[3]
    # Cut the stored bytes short by moving the end of the data: overwrite the tail with what
    # a shorter stream would leave (zeros), the classic truncated-write shape.
    _patched(path, off + size // 2, bytes(size - size // 2))
    _expect_hdf5_error(path, off)


@pytest.mark.parametrize(
    "filters",
    [
        {"compression": "lzf"},
        {"compression": "lzf", "fletcher32": True},
        {"compression": "lzf", "shuffle": True},  # cannot stop early: decoded whole
        {"compression": "gzip"},
    ],
    ids=["lzf", "lzf-fletcher32", "lzf-shuffle", "gzip"],
)
def test_random_batches_from_chunks_of_several_samples(tmp_path, filters):
    """Uniformly random batches over chunks of 8 samples with a cache of two chunks: the cache
    mostly misses, so LZF chunks are decoded only up to the last row a batch needs (and kept
    so, a later batch needing a later row decoding further); every batch equals h5py's."""
    path = str(tmp_path / "rows.h5")
    rng = np.random.default_rng(11)
    data = (np.arange(400 * 3 * 40, dtype="<f4").reshape(400, 3, 40) * 0.25).astype("<f4")
    data[::7] = rng.normal(size=data[::7].shape)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(8, 3, 40), **filters)
    chunk_bytes = 8 * 3 * 40 * 4
    reader = packread.HDF5Reader(path, "x", cache_bytes=2 * chunk_bytes)
    with h5py.File(path, "r") as f:
        ref = f["x"][:]
    for _ in range(120):
        idx = rng.choice(400, size=16, replace=False)
        assert_same(reader.batch(idx), ref[idx])
    # Rows in chunk order too (the cache hits again: whole chunks).
    for lo in range(0, 400, 24):
        assert_same(reader.batch(range(lo, min(lo + 24, 400))), ref[lo : lo + 24])
