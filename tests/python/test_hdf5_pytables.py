"""PyTables files and ragged data: Array, CArray, EArray (appended over several sessions, with
``expectedrows``), Table, VLArray and h5py vlen datasets, files held in memory; every batch
equals what PyTables (or h5py) returns, bit for bit."""

from __future__ import annotations

import pickle

import h5py
import hdf5plugin
import numpy as np
import pytest
import tables

import packread
from support.h5files import all_rows, sample_data
from support.helpers import assert_same

BLOSC = tables.Filters(complevel=5, complib="blosc:lz4")


def _pytables_rows(path, name, rows):
    with tables.open_file(str(path), "r") as f:
        node = f.get_node(name)
        return [node[int(i)] for i in rows]


def _stacked(path, name, rows):
    with tables.open_file(str(path), "r") as f:
        node = f.get_node(name)
        n = node.nrows
        return np.concatenate([node[i % n : i % n + 1] for i in rows])


ROWS = [0, 5, -1, 3, 3, 17, 1]


def test_array_carray_earray_table(tmp_path):
    rng = np.random.default_rng(10)
    path = tmp_path / "pt.h5"
    n = 40
    rec = np.dtype([("a", "<i4"), ("b", "<f8", (2,)), ("c", "S5"), ("d", "?")])
    table_rows = np.zeros(n, rec)
    table_rows["a"] = rng.integers(-100, 100, n)
    table_rows["b"] = rng.normal(size=(n, 2))
    table_rows["c"] = [b"x%d" % i for i in range(n)]
    table_rows["d"] = rng.integers(0, 2, n).astype(bool)
    with tables.open_file(str(path), "w") as f:
        f.create_array("/", "array", obj=sample_data(rng, (n, 3), "<i8"))
        f.create_carray("/", "carray", obj=sample_data(rng, (n, 4, 4), "<f4"), filters=BLOSC)
        e = f.create_earray(
            "/",
            "earray",
            atom=tables.Float64Atom(),
            shape=(0, 7),
            filters=BLOSC,
            expectedrows=1000,
        )
        e.append(sample_data(rng, (n // 2, 7), "<f8"))
        t = f.create_table("/", "table", obj=table_rows, filters=BLOSC)
        t.flush()
        g = f.create_group("/", "group")
        f.create_carray(g, "nested", obj=sample_data(rng, (n, 2), ">i2"), filters=BLOSC)
    # A second and third session append to the EArray.
    for _ in range(2):
        with tables.open_file(str(path), "a") as f:
            f.root.earray.append(sample_data(rng, (n // 4, 7), "<f8"))
    r = packread.HDF5Reader(path)
    assert sorted(r.keys()) == ["array", "carray", "earray", "group/nested", "table"]
    assert len(r) == n
    got = r.batch(ROWS)
    for name in r.keys():
        want = _stacked(path, "/" + name, ROWS)
        assert_same(got[name], want)
        # h5py agrees byte for byte (it reads PyTables' bools as uint8).
        assert got[name].tobytes() == all_rows(path, name)[[i % n for i in ROWS]].tobytes()
    assert r["table"].dtype.names == ("a", "b", "c", "d")


def test_earray_with_expectedrows_unaligned_chunks(tmp_path):
    rng = np.random.default_rng(11)
    path = tmp_path / "e.h5"
    data = sample_data(rng, (333, 5), "<i4")
    with tables.open_file(str(path), "w") as f:
        e = f.create_earray(
            "/",
            "x",
            atom=tables.Int32Atom(),
            shape=(0, 5),
            filters=tables.Filters(5, "blosc:zstd", shuffle=True),
            expectedrows=100_000,
        )
        for s in range(0, 333, 50):
            e.append(data[s : s + 50])
    r = packread.HDF5Reader(path, "x")
    assert r["x"].chunks[0] > 1
    idx = np.random.default_rng(0).integers(-333, 333, 200)
    assert_same(r.batch(idx), data[idx])


# --------------------------------------------------------------------------------------------
# variable-length data


def _vlarray_file(path, *, filters=None):
    rng = np.random.default_rng(12)
    rows = [rng.normal(size=rng.integers(0, 300)).astype("<f4") for _ in range(120)]
    ints = [rng.integers(-5, 5, size=rng.integers(0, 20)).astype("<i8") for _ in range(120)]
    pairs = [rng.normal(size=(rng.integers(0, 9), 3)) for _ in range(120)]
    words = [(f"w{i}" * (i % 5)).encode() for i in range(120)]
    text = [f"ü{i}€" * (i % 4) for i in range(120)]
    with tables.open_file(str(path), "w") as f:
        kw = {} if filters is None else {"filters": filters}
        a = f.create_vlarray("/", "floats", tables.Float32Atom(), **kw)
        b = f.create_vlarray("/", "ints", tables.Int64Atom(), **kw)
        c = f.create_vlarray("/", "pairs", tables.Float64Atom(shape=(3,)), **kw)
        d = f.create_vlarray("/", "words", tables.VLStringAtom(), **kw)
        e = f.create_vlarray("/", "text", tables.VLUnicodeAtom(), **kw)
        for x, y, z, w, t in zip(rows, ints, pairs, words, text, strict=False):
            a.append(x)
            b.append(y)
            c.append(z)
            d.append(w)
            e.append(t)
    return {"floats": rows, "ints": ints, "pairs": pairs, "words": words, "text": text}


@pytest.mark.parametrize(
    "filters", [None, tables.Filters(5, "zlib"), BLOSC], ids=["plain", "zlib", "blosc"]
)
def test_vlarray_matches_pytables(tmp_path, filters):
    path = tmp_path / "vl.h5"
    written = _vlarray_file(path, filters=filters)
    r = packread.HDF5Reader(path)
    assert set(r.keys()) == set(written)
    idx = [0, 119, -1, 7, 7, 50, 3]
    got = r.batch(idx)
    for name in written:
        want = _pytables_rows(path, "/" + name, [i % 120 for i in idx])
        assert len(got[name]) == len(idx)
        for g, w in zip(got[name], want, strict=False):
            if isinstance(w, np.ndarray):
                assert_same(g, w)
            else:
                assert type(g) is type(w), (name, g, w)
                assert g == w, (name, g, w)
    # Every row, in order, one at a time and all at once.
    every = r["floats"].read(range(120))
    for g, w in zip(every, written["floats"], strict=False):
        assert_same(g, w)


def test_vlarray_flat(tmp_path):
    path = tmp_path / "vl.h5"
    written = _vlarray_file(path)
    r = packread.HDF5Reader(path, "pairs", ragged="flat")
    idx = [5, 0, 5, 119]
    values, offsets = r.batch(idx)
    assert offsets.dtype == np.int64
    assert offsets.shape == (len(idx) + 1,)
    assert offsets[0] == 0
    assert offsets[-1] == len(values)
    assert values.shape[1:] == (3,)
    for k, i in enumerate(idx):
        assert_same(values[offsets[k] : offsets[k + 1]], written["pairs"][i].astype("<f8"))
    empty_values, empty_offsets = r.batch([])
    assert len(empty_values) == 0
    assert empty_offsets.tolist() == [0]


@pytest.mark.parametrize("layout", ["contiguous", "chunked", "gzip", "zstd"])
def test_h5py_vlen_numeric_bytes_and_str(tmp_path, layout):
    rng = np.random.default_rng(13)
    n = 64
    nums = [rng.integers(-1000, 1000, size=rng.integers(0, 50)).astype("<i4") for _ in range(n)]
    strs = [f"sample {i} {'é' * (i % 7)}" for i in range(n)]
    blobs = [bytes(rng.integers(1, 128, rng.integers(0, 30), dtype=np.uint8)) for _ in range(n)]
    kw = {
        "contiguous": {},
        "chunked": {"chunks": (7,)},
        "gzip": {"chunks": (5,), "compression": "gzip"},
        # (hdf5plugin's blosc crashes h5py writing variable-length strings: zstd instead)
        "zstd": {"chunks": (9,), **hdf5plugin.Zstd()},
    }[layout]
    path = tmp_path / "v.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("nums", (n,), dtype=h5py.vlen_dtype(np.dtype("<i4")), **kw)
        for i, x in enumerate(nums):
            d[i] = x
        f.create_dataset("strs", data=np.array(strs, dtype=h5py.string_dtype()), **kw)
        f.create_dataset(
            "blobs", data=np.array(blobs, dtype=object), dtype=h5py.string_dtype("ascii"), **kw
        )
    r = packread.HDF5Reader(path)
    idx = [3, 0, -1, 63, 3, 10]
    got = r.batch(idx)
    with h5py.File(path, "r") as f:
        for name in ("nums", "strs", "blobs"):
            for g, i in zip(got[name], idx, strict=False):
                w = f[name][i]
                if isinstance(w, np.ndarray):
                    assert_same(g, w)
                else:
                    assert g == w, (name, g, w)


def test_ragged_side_columns_readme_pattern(tmp_path):
    """The PyTables write-up's flat EArray with start/stop side columns, read as ragged
    samples the way docs/hdf5.md shows."""
    rng = np.random.default_rng(14)
    path = tmp_path / "side.h5"
    lengths = rng.integers(1, 40, 200)
    stops = np.cumsum(lengths)
    starts = stops - lengths
    flat = rng.integers(0, 256, int(stops[-1])).astype("<i4")
    with tables.open_file(str(path), "w") as f:
        d = f.create_earray("/", "data", atom=tables.Int32Atom(), shape=(0,), filters=BLOSC)
        d.append(flat)
        s = f.create_earray("/", "data_start_and_stop", atom=tables.Int32Atom(), shape=(0, 2))
        s.append(np.stack([starts, stops], axis=1).astype("<i4"))
    # -- as in docs/hdf5.md
    spans = packread.HDF5Reader(path, "data_start_and_stop")
    data = packread.HDF5Reader(path, "data")
    idx = [5, 0, 199, 5]
    bounds = spans.batch(idx)
    rows = np.concatenate([np.arange(a, b) for a, b in bounds])
    values = data.batch(rows)
    offsets = np.concatenate([[0], np.cumsum(bounds[:, 1] - bounds[:, 0])])
    samples = np.split(values, offsets[1:-1])
    # --
    for got, i in zip(samples, idx, strict=False):
        assert_same(got, flat[starts[i] : stops[i]])


# --------------------------------------------------------------------------------------------
# in memory


@pytest.mark.parametrize("how", ["in_memory", "bytes", "bytearray", "memoryview", "ndarray"])
def test_in_memory_matches_on_disk(tmp_path, how):
    path = tmp_path / "m.h5"
    written = _vlarray_file(path)
    rng = np.random.default_rng(15)
    with tables.open_file(str(path), "a") as f:
        f.create_carray("/", "img", obj=sample_data(rng, (120, 3, 8, 8), "|u1"), filters=BLOSC)
    raw = path.read_bytes()
    src = {
        "in_memory": path,
        "bytes": raw,
        "bytearray": bytearray(raw),
        "memoryview": memoryview(raw),
        "ndarray": np.frombuffer(raw, np.uint8),
    }[how]
    disk = packread.HDF5Reader(path)
    mem = packread.HDF5Reader(src, in_memory=how == "in_memory")
    if how != "in_memory":
        path.unlink()  # nothing is read from the file any more
    assert mem.keys() == disk.keys()
    idx = [0, 119, 3, 3, -2]
    got, want = mem.batch(idx), disk.batch(idx)
    assert_same(got["img"], want["img"])
    for k in written:
        for g, w in zip(got[k], want[k], strict=False):
            if isinstance(w, np.ndarray):
                assert_same(g, w)
            else:
                assert g == w
    # Pickles (bytes travel with it).
    again = pickle.loads(pickle.dumps(mem))
    assert_same(again.batch(idx)["img"], want["img"])


def test_in_memory_bytes_that_are_not_hdf5(tmp_path):
    with pytest.raises(packread.errors.HDF5Error):
        packread.HDF5Reader(b"not an hdf5 file" * 100)
    with pytest.raises(packread.errors.HDF5Error):
        packread.HDF5Reader(b"")


# --------------------------------------------------------------------------------------------
# attributes


def _same_value(got, want):
    if isinstance(want, np.ndarray):
        if want.dtype == object:
            assert got.dtype == object
            assert got.tolist() == want.tolist()
        else:
            assert_same(got, want)
    else:
        assert type(got) is type(want), (got, want)
        assert got == want or (got != got and want != want), (got, want)


def test_attrs_pytables_user_view(tmp_path):
    path = tmp_path / "a.h5"
    with tables.open_file(str(path), "w") as f:
        g = f.create_group("/", "g")
        c = f.create_carray(g, "x", obj=np.zeros((4, 3)), filters=BLOSC)
        c.attrs.text = "héllo"
        c.attrs.raw = b"raw"
        c.attrs.count = 3
        c.attrs.scale = 2.5
        c.attrs.vector = np.arange(3, dtype="<i2")  # (PyTables misreads big-endian ones)
        c.attrs.flags = np.array([True, False])
        c.attrs.pickled = [1, 2]  # PyTables pickles it
    r = packread.HDF5Reader(path)
    got = r["g/x"].attrs
    with tables.open_file(str(path), "r") as f:
        a = f.root.g.x._v_attrs
        names = a._f_list("user")
        assert sorted(got) == sorted(names)
        for k in names:
            if k == "pickled":
                assert isinstance(got[k], (bytes, np.bytes_))  # never unpickled
            else:
                _same_value(got[k], a[k])


def test_attrs_h5py(tmp_path):
    path = tmp_path / "h.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=np.zeros((5, 2)))
        d.attrs["s"] = "vlen ü"
        d.attrs["fixed"] = np.bytes_(b"abc")
        d.attrs["i"] = np.int32(-7)
        d.attrs["arr"] = np.arange(6, dtype="<f4").reshape(2, 3)
        d.attrs["strs"] = ["a", "bb", "ccc"]
        d.attrs["CLASS"] = b"kept: not a PyTables file"
        d.attrs.create("empty", h5py.Empty("f4"))
    r = packread.HDF5Reader(path)
    got = r["x"].attrs
    with h5py.File(path, "r") as f:
        want = dict(f["x"].attrs)
    assert sorted(got) == sorted(want)
    for k, w in want.items():
        if isinstance(w, h5py.Empty):
            assert got[k] is None
        else:
            _same_value(got[k], w)


def test_in_memory_and_ragged_in_forked_child_and_threads(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from support.helpers import in_child

    path = tmp_path / "f.h5"
    written = _vlarray_file(path)
    rng = np.random.default_rng(16)
    img = sample_data(rng, (120, 3, 8, 8), "|u1")
    with tables.open_file(str(path), "a") as f:
        f.create_carray("/", "img", obj=img, filters=BLOSC, chunkshape=(7, 3, 8, 8))
    mem = packread.HDF5Reader(path.read_bytes(), ["img", "floats"], ragged="flat")
    idx = [4, 119, 0, 4]
    assert_same(mem.batch(idx)["img"], img[idx])
    values = in_child(lambda: mem.batch(idx)["img"])  # used in the parent, then forked
    assert_same(values, img[idx])
    got = in_child(lambda: mem.batch(idx)["floats"][0])
    assert_same(got, np.concatenate([written["floats"][i] for i in idx]))

    def work(seed):
        r = np.random.default_rng(seed).integers(0, 120, 50)
        b = mem.batch(r)
        assert_same(b["img"], img[r])
        v, o = b["floats"]
        for k, i in enumerate(r):
            assert_same(v[o[k] : o[k + 1]], written["floats"][i])

    with ThreadPoolExecutor(4) as ex:
        list(ex.map(work, range(16)))


def test_corrupt_global_heap_raises_hdf5error(tmp_path):
    path = tmp_path / "g.h5"
    _vlarray_file(path)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"GCOL")
    raw[at : at + 4] = b"XCOL"
    path.write_bytes(bytes(raw))
    r = packread.HDF5Reader(path, "floats")
    with pytest.raises(packread.HDF5Error) as exc:
        r.batch(range(120))
    msg = str(exc.value)
    assert str(path) in msg
    assert "floats" in msg
    assert "global heap" in msg
