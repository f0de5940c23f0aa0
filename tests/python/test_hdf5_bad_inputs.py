"""The HDF5 cases of docs/BAD_INPUTS.md (20-27, 34, 35): real files written by h5py,
then truncated or patched at the offsets h5py reports. Each must give the documented
exception, naming the file (and the dataset where there is one), and never wrong data."""

from __future__ import annotations

import os
import shutil
import struct
import zlib

import h5py
import hdf5plugin
import numpy as np
import pytest

import packread
from support.h5files import all_rows, chunk_spans, contiguous_offset, h5py_rows, patch
from support.helpers import assert_same

SHAPE = (40, 8, 8)
CHUNK = (4, 8, 8)
CHUNK_BYTES = 4 * 8 * 8 * 4


def _compressible():
    return (np.arange(np.prod(SHAPE)) % 50).astype("<f4").reshape(SHAPE)


def _random():
    return np.random.default_rng(30).standard_normal(SHAPE).astype("<f4")


@pytest.fixture
def good(tmp_path):
    """A file with every native pipeline and a contiguous dataset, written with the v0
    superblock and v1 B-trees (``libver="earliest"``: no metadata checksums, so single fields
    can be patched). Returns ``(path, {name: h5py rows})``."""
    path = tmp_path / "good.h5"
    a, r = _compressible(), _random()
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("raw", data=a, chunks=CHUNK)
        f.create_dataset("gz", data=a, chunks=CHUNK, compression="gzip", compression_opts=4)
        f.create_dataset("lzf", data=a, chunks=CHUNK, compression="lzf")
        f.create_dataset("lzf_random", data=r, chunks=CHUNK, compression="lzf")  # masks set
        f.create_dataset("f32", data=r, chunks=CHUNK, fletcher32=True)
        f.create_dataset(
            "gz_f32", data=a, chunks=CHUNK, compression="gzip", shuffle=True, fletcher32=True
        )
        f.create_dataset("contig", data=a)
    return path, {k: all_rows(path, k) for k in ("raw", "gz", "lzf", "lzf_random", "f32", "contig")}


def _read(path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _copy(src, dst):
    shutil.copy(src, dst)
    return dst


def _btree_entry(path, name, k):
    """(offset of chunk ``k``'s address in its v1 B-tree node, chunk offset, size, mask).

    A v1 B-tree key for a chunk is ``size (4), filter mask (4), offsets (8 x (rank + 1))`` and
    is followed by the chunk's address (8)."""
    off, size, mask = chunk_spans(path, name)[k]
    raw = _read(path)
    needle = struct.pack("<Q", off)
    assert raw.count(needle) == 1
    at = raw.index(needle)
    key = at - 8 * (len(SHAPE) + 1) - 8
    assert struct.unpack_from("<II", raw, key) == (size, mask)
    return at, key, off, size, mask


def _raises(exc_type, fn, *names):
    """``fn()`` raises ``exc_type`` (also a PackreadError) whose message names ``names``."""
    with pytest.raises(exc_type) as exc:
        fn()
    assert isinstance(exc.value, packread.PackreadError), type(exc.value)
    for n in names:
        assert str(n) in str(exc.value), (n, str(exc.value))
    return exc.value


def _open_or_read_raises(exc_type, path, name, rows=range(40)):
    """The dataset cannot be read: opening it, or else the first batch touching the damage,
    raises ``exc_type`` naming the file and the dataset."""

    def go():
        packread.HDF5Reader(path, name, cache_bytes=0).batch(rows)

    return _raises(exc_type, go, path, name)


def _sane(path, wants, names=None):
    """Every other dataset of a damaged file still reads h5py's rows."""
    for k in names or wants:
        assert_same(packread.HDF5Reader(path, k).batch(range(40)), wants[k])


# 20. truncated file ---------------------------------------------------------------------------


# BAD_INPUTS 20
@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("cut", [0, 8, 100, 0.25, 0.5, 0.75, -1], ids=str)
def test_truncated_file(tmp_path, libver, cut):
    path = tmp_path / "t.h5"
    data = _compressible()
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("gz", data=data, chunks=CHUNK, compression="gzip")
        f.create_dataset("contig", data=data)
    size = os.path.getsize(path)
    keep = cut if isinstance(cut, int) and cut >= 0 else size - 1 if cut == -1 else int(size * cut)
    os.truncate(path, keep)
    # Opening fails naming the file; or, if the metadata survived (libhdf5 refuses every cut
    # above), reading fails cleanly or gives exactly the data, never garbage.
    error = None
    try:
        got = packread.HDF5Reader(path).batch(range(40))
    except packread.PackreadError as exc:
        error = exc
    if error is None:
        for name in got:
            assert_same(got[name], data)
    else:
        assert isinstance(error, OSError)
        assert str(path) in str(error)


# BAD_INPUTS 20
@pytest.mark.parametrize("content", [b"", b"\x89HDF\r\n\x1a\n", b"not hdf5 at all\n" * 64])
def test_not_an_hdf5_file(tmp_path, content):
    path = tmp_path / "x.h5"
    path.write_bytes(content)
    err = _raises(packread.HDF5Error, lambda: packread.HDF5Reader(path), path)
    assert isinstance(err, OSError)


# 21. chunk address or size beyond EOF, overlapping chunks --------------------------------------


# BAD_INPUTS 21
@pytest.mark.parametrize("where", ["past-eof", "straddles-eof", "far-past-eof"])
@pytest.mark.parametrize("name", ["raw", "gz", "f32"])
def test_chunk_address_beyond_eof(good, tmp_path, name, where):
    path, wants = good
    bad = _copy(path, tmp_path / "bad.h5")
    at, _, _, size, _ = _btree_entry(bad, name, 3)
    end = os.path.getsize(bad)
    addr = {"past-eof": end + 100, "straddles-eof": end - size // 2, "far-past-eof": 2**62}[where]
    patch(bad, at, struct.pack("<Q", addr))
    _open_or_read_raises(packread.HDF5Error, bad, name)
    _sane(bad, wants, [k for k in ("raw", "contig") if k != name])


# BAD_INPUTS 21
@pytest.mark.parametrize("name", ["raw", "gz"])
def test_chunk_size_beyond_eof(good, tmp_path, name):
    path, _ = good
    bad = _copy(path, tmp_path / "bad.h5")
    _, key, _, _, _ = _btree_entry(bad, name, 9)
    patch(bad, key, struct.pack("<I", 0xFFFFFFF0))
    _open_or_read_raises(packread.HDF5Error, bad, name)


# BAD_INPUTS 21
@pytest.mark.parametrize("name", ["raw", "gz"])
def test_overlapping_chunks(good, tmp_path, name):
    path, _ = good
    bad = _copy(path, tmp_path / "bad.h5")
    at, _, _, _, _ = _btree_entry(bad, name, 3)
    prev = chunk_spans(bad, name)[2][0]
    patch(bad, at, struct.pack("<Q", prev + 10))  # starts inside chunk 2
    _open_or_read_raises(packread.HDF5Error, bad, name)


# BAD_INPUTS 21
@pytest.mark.parametrize("name", ["raw", "gz", "lzf"])
def test_chunk_key_that_lookup_cannot_find(good, tmp_path, name):
    # A v1 B-tree key holds rank + 1 coordinates, the last always 0 (the element dimension).
    # Corrupt that last one for chunk 5: libhdf5's lookup (what h5py reads through) no longer
    # finds the chunk and reads the fill value, while its chunk iteration still lists it at
    # (20, 0, 0). Found by fuzzing single bytes. packread keeps only the chunks the lookup
    # finds, so it returns what h5py returns; never different bytes.
    path, _ = good
    bad = _copy(path, tmp_path / "bad.h5")
    _, key, _, _, _ = _btree_entry(bad, name, 5)
    assert _read(bad)[key + 32 : key + 40] == bytes(8)
    patch(bad, key + 35, b"\x63")
    with h5py.File(bad, "r") as f:
        want = h5py_rows(f[name], range(40))
    assert not want[20:24].any()  # h5py: fill value
    got = packread.HDF5Reader(bad, name).batch(range(40))
    assert got[20].tobytes() == want[20].tobytes(), "packread read a chunk h5py does not see"
    assert_same(got, want)


# BAD_INPUTS 21
@pytest.mark.parametrize("name", ["raw", "gz", "lzf", "contig"])
def test_data_cut_off_with_consistent_superblock(tmp_path, name):
    # The file is cut inside the data of the dataset written last, and the superblock's
    # end-of-file address (v0: at byte 40) is patched to match, so libhdf5 opens it: the data
    # runs past the end.
    path = tmp_path / "bad.h5"
    data = _compressible()
    keep = np.ascontiguousarray(data[:, 0])
    kw = {
        "raw": {"chunks": CHUNK},
        "gz": {"chunks": CHUNK, "compression": "gzip"},
        "lzf": {"chunks": CHUNK, "compression": "lzf"},
        "contig": {},
    }[name]
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("keep", data=keep, chunks=(4, 8))
        f.create_dataset(name, data=data, **kw)
    if name == "contig":
        cut = contiguous_offset(path, name) + 1000
    else:
        spans = chunk_spans(path, name)
        cut = spans[-1][0] + spans[-1][1] // 2
    assert cut > max(o + s for o, s, _ in chunk_spans(path, "keep"))
    size = os.path.getsize(path)
    assert cut < size
    assert struct.unpack_from("<Q", _read(path), 40)[0] == size
    os.truncate(path, cut)
    patch(path, 40, struct.pack("<Q", cut))
    with h5py.File(path, "r") as f:  # libhdf5 opens it
        assert f["keep"][3].tobytes() == keep[3].tobytes()

    def go():
        packread.HDF5Reader(path, name).batch(range(40))

    err = _raises(packread.HDF5Error, go, path)
    assert name in str(err) or "open" in str(err)
    assert_same(packread.HDF5Reader(path, "keep").batch(range(40)), keep)


# 22. corrupt compressed chunks, decoded size different from the chunk ------------------------


# BAD_INPUTS 22
@pytest.mark.parametrize("name", ["gz", "lzf", "gz_f32"])
def test_garbage_in_the_middle_of_a_chunk(good, tmp_path, name):
    path, _ = good
    bad = _copy(path, tmp_path / "bad.h5")
    off, size, mask = chunk_spans(bad, name)[2]
    assert mask == 0  # really compressed
    assert size < CHUNK_BYTES
    patch(bad, off + size // 3, b"\xff\x00\x13\x77" * 4)
    err = _open_or_read_raises(packread.HDF5Error, bad, name)
    assert isinstance(err, OSError)
    if name == "gz_f32":
        assert "fletcher" in str(err).lower()
    # Samples of the other chunks are still fine, from a reader of the damaged file.
    reader = packread.HDF5Reader(bad, name)
    ok = [0, 1, 7, 39]
    got = reader.batch(ok)
    with h5py.File(path, "r") as f:
        assert got.tobytes() == f[name][ok].tobytes()
    with pytest.raises(packread.HDF5Error):
        reader.batch([39, 9])  # one bad sample in the batch spoils it


# BAD_INPUTS 22
def test_every_deflate_bit_flip_is_caught_or_harmless(good, tmp_path):
    # Flip one bit at many places of a deflate chunk: whenever zlib refuses the stream (or it
    # inflates to another size), packread raises HDF5Error; when zlib accepts it, packread
    # returns exactly what zlib inflated.
    path, _ = good
    bad = _copy(path, tmp_path / "bad.h5")
    off, size, _ = chunk_spans(bad, "gz")[5]
    stored = _read(bad)[off : off + size]
    positions = sorted({*range(0, size, max(1, size // 40)), size - 1, size - 4, 0, 1})
    caught = harmless = 0
    for pos in positions:
        for bit in (0, 5):
            flipped = bytearray(stored)
            flipped[pos] ^= 1 << bit
            patch(bad, off, bytes(flipped))
            try:
                want = zlib.decompress(bytes(flipped))
                ok = len(want) == CHUNK_BYTES
            except zlib.error:
                ok = False
            reader = packread.HDF5Reader(bad, "gz", cache_bytes=0)
            if ok:
                got = reader.batch([20, 21, 22, 23])
                assert got.tobytes() == want, pos
                harmless += 1
            else:
                with pytest.raises(packread.HDF5Error) as exc:
                    reader.batch([21])
                assert str(bad) in str(exc.value)
                assert "gz" in str(exc.value)
                caught += 1
    patch(bad, off, stored)
    assert caught > 0


def _lzf_run(n: int) -> bytes:
    """An LZF stream inflating to ``n`` bytes of b"A": one literal, then back references."""
    out = bytearray([0, 0x41])
    n -= 1
    while n > 0:
        length = min(n, 264)
        if length < 3:
            out += bytes([length - 1]) + b"A" * length
        elif length >= 9:
            out += bytes([0xE0, length - 9, 0])
        else:
            out += bytes([(length - 2) << 5, 0])
        n -= length
    return bytes(out)


def _restream(path, name, k, stream):
    """Replaces chunk ``k``'s stored bytes by ``stream`` (and its size in the B-tree)."""
    _, key, off, size, _ = _btree_entry(path, name, k)
    assert len(stream) <= size
    patch(path, off, stream)
    patch(path, key, struct.pack("<I", len(stream)))


# BAD_INPUTS 22
@pytest.mark.parametrize(
    ("name", "decoded"),
    [
        ("gz", 0),
        ("gz", 512),
        ("gz", CHUNK_BYTES - 1),
        ("gz", CHUNK_BYTES + 1),
        ("gz", 2 * CHUNK_BYTES),
        ("gz", 64 * CHUNK_BYTES),
        ("lzf", 512),
        ("lzf", CHUNK_BYTES - 1),
        ("lzf", CHUNK_BYTES + 1),
        ("lzf", 2 * CHUNK_BYTES),
    ],
)
def test_stream_inflating_to_another_size(good, tmp_path, name, decoded):
    path, wants = good
    bad = _copy(path, tmp_path / "bad.h5")
    payload = b"A" * decoded
    stream = zlib.compress(payload, 9) if name == "gz" else _lzf_run(decoded)
    _restream(bad, name, 3, stream)
    _open_or_read_raises(packread.HDF5Error, bad, name, rows=[13])
    _sane(bad, wants, ["raw", "contig"])


# BAD_INPUTS 22
@pytest.mark.parametrize("name", ["gz", "lzf"])
def test_stream_of_the_right_size_reads(good, tmp_path, name):
    # The control case of the crafting above: a well-formed stream of exactly the chunk's size.
    path, _ = good
    bad = _copy(path, tmp_path / "bad.h5")
    payload = b"A" * CHUNK_BYTES
    stream = zlib.compress(payload, 9) if name == "gz" else _lzf_run(CHUNK_BYTES)
    _restream(bad, name, 3, stream)
    got = packread.HDF5Reader(bad, name).batch([13, 12])
    assert got.tobytes() == payload[: 2 * 256]
    with h5py.File(bad, "r") as f:
        assert got.tobytes() == f[name][[12, 13]][::-1].tobytes()


# BAD_INPUTS 22
@pytest.mark.parametrize("name", ["gz", "lzf"])
@pytest.mark.parametrize("keep", [1, 10, 0.5, -1], ids=str)
def test_stream_cut_short(good, tmp_path, name, keep):
    path, _ = good
    bad = _copy(path, tmp_path / "bad.h5")
    _, key, _, size, _ = _btree_entry(bad, name, 3)
    new = keep if isinstance(keep, int) and keep > 0 else size - 1 if keep == -1 else size // 2
    patch(bad, key, struct.pack("<I", new))
    _open_or_read_raises(packread.HDF5Error, bad, name, rows=[13])


# BAD_INPUTS 22
@pytest.mark.parametrize(
    ("name", "mask"),
    [("lzf", 1), ("gz", 1), ("gz", 0xFFFFFFFF), ("lzf_random", 0)],
    ids=["lzf-marked-skipped", "gz-marked-skipped", "gz-all-skipped", "raw-marked-lzf"],
)
def test_filter_mask_lies(good, tmp_path, name, mask):
    # A compressed chunk whose mask says it was stored raw is the wrong size; a raw chunk whose
    # mask says LZF was applied is not an LZF stream.
    path, _ = good
    bad = _copy(path, tmp_path / "bad.h5")
    _, key, _, _, _ = _btree_entry(bad, name, 3)
    patch(bad, key + 4, struct.pack("<I", mask))
    _open_or_read_raises(packread.HDF5Error, bad, name, rows=[13])


# 24. filter parameters too short or too long --------------------------------------------------


def _pipeline_file(tmp_path):
    path = tmp_path / "p.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset(
            "gz",
            data=_compressible(),
            chunks=CHUNK,
            compression="gzip",
            compression_opts=4,
            shuffle=True,
        )
    return path


# BAD_INPUTS 24
@pytest.mark.parametrize(
    "change",
    [
        "deflate-level-10",
        "deflate-no-params",
        "deflate-two-params",
        "shuffle-0",
        "shuffle-no-params",
    ],
)
def test_filter_parameters(tmp_path, change):
    # Pipeline message v1 entries: id (2), name length (2), flags (2), number of parameters
    # (2), name (padded to 8), parameters (4 each, padded to an even count).
    path = _pipeline_file(tmp_path)
    raw = _read(path)
    deflate = raw.index(b"deflate\x00")
    shuffle = raw.index(b"shuffle\x00")
    assert struct.unpack_from("<HHHH", raw, deflate - 8) == (1, 8, 1, 1)
    assert struct.unpack_from("<I", raw, deflate + 8)[0] == 4
    at, data = {
        "deflate-level-10": (deflate + 8, struct.pack("<I", 10)),
        "deflate-no-params": (deflate - 2, struct.pack("<H", 0)),
        "deflate-two-params": (deflate - 2, struct.pack("<H", 2)),
        "shuffle-0": (shuffle + 8, struct.pack("<I", 0)),
        "shuffle-no-params": (shuffle - 2, struct.pack("<H", 0)),
    }[change]
    patch(path, at, data)
    _open_or_read_raises(packread.HDF5Error, path, "gz")


# BAD_INPUTS 24
def test_odd_shuffle_element_size_matches_h5py(tmp_path):
    # A shuffle element size that does not divide the chunk is valid HDF5 (the tail bytes are
    # left as they are): packread must agree with h5py byte for byte.
    path = _pipeline_file(tmp_path)
    raw = _read(path)
    patch(path, raw.index(b"shuffle\x00") + 8, struct.pack("<I", 3))
    reader = packread.HDF5Reader(path, "gz")
    assert reader["gz"].filters[0] == (2, "shuffle", (3,))
    assert_same(reader.batch(range(40)), all_rows(path, "gz"))


# 26. chunk rank or a zero chunk dimension ------------------------------------------------------


# BAD_INPUTS 26
@pytest.mark.parametrize("change", ["zero-dim", "rank", "dim-beyond-the-dataset"])
def test_chunk_layout(tmp_path, change):
    # Layout message v3, chunked: version 3, class 2, dimensionality (rank + 1), B-tree address
    # (8), chunk dimensions (4 each, the last is the element size).
    path = _pipeline_file(tmp_path)
    raw = _read(path)
    dims = struct.pack("<IIII", *CHUNK, 4)
    assert raw.count(dims) == 1
    at = raw.index(dims)
    assert raw[at - 11 : at - 8] == bytes([3, 2, 4])
    where, data = {
        "zero-dim": (at + 4, struct.pack("<I", 0)),
        "rank": (at - 9, bytes([3])),
        "dim-beyond-the-dataset": (at + 4, struct.pack("<I", 1000)),
    }[change]
    patch(path, where, data)
    _open_or_read_raises(packread.HDF5Error, path, "gz")


# 25. Fletcher-32 -------------------------------------------------------------------------------


# BAD_INPUTS 25
@pytest.mark.parametrize("where", ["data-first", "data-middle", "data-last", "checksum"])
def test_fletcher32_mismatch(good, tmp_path, where):
    path, wants = good
    bad = _copy(path, tmp_path / "bad.h5")
    off, size, _ = chunk_spans(bad, "f32")[6]
    assert size == CHUNK_BYTES + 4
    pos = {
        "data-first": 0,
        "data-middle": size // 2 + 1,
        "data-last": size - 5,
        "checksum": size - 2,
    }
    byte = _read(bad)[off + pos[where]]
    patch(bad, off + pos[where], bytes([byte ^ 0x10]))
    err = _open_or_read_raises(packread.HDF5Error, bad, "f32", rows=[25])
    assert "Fletcher-32" in str(err)
    with h5py.File(bad, "r") as f, pytest.raises(OSError, match="read"):
        f["f32"][25]  # libhdf5 agrees
    # Other chunks are fine.
    assert_same(packread.HDF5Reader(bad, "f32").batch([0, 39]), wants["f32"][[0, 39]])


# BAD_INPUTS 25
def test_fletcher32_after_deflate(good, tmp_path):
    path, _ = good
    bad = _copy(path, tmp_path / "bad.h5")
    off, size, _ = chunk_spans(bad, "gz_f32")[1]
    byte = _read(bad)[off + size // 2]
    patch(bad, off + size // 2, bytes([byte ^ 1]))
    err = _open_or_read_raises(packread.HDF5Error, bad, "gz_f32", rows=[5])
    assert "Fletcher-32" in str(err)


# 27. filters nobody here can decode -------------------------------------------------------------

# (blosc, blosc2, zstd, LZ4 and bitshuffle are decoded natively: test_hdf5_codecs.py and
# test_hdf5_blosc2.py)
PLUGINS = {
    "bzip2": (307, lambda: hdf5plugin.BZip2()),
    "zfp": (32013, lambda: hdf5plugin.Zfp(reversible=True)),
}


# BAD_INPUTS 27
@pytest.mark.parametrize("plugin", list(PLUGINS))
def test_filter_only_a_plugin_can_decode(tmp_path, plugin):
    fid, make = PLUGINS[plugin]
    path = tmp_path / "p.h5"
    data = _compressible()
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=CHUNK, **make())
        f.create_dataset("ok", data=data, chunks=CHUNK, compression="gzip")
    with h5py.File(path, "r") as f:
        assert f["x"][3].tobytes() == data[3].tobytes()  # h5py (with hdf5plugin) reads it
    # Asked for everything, the reader leaves it out and says why (naming the filter).
    reader = packread.HDF5Reader(path)
    assert reader.keys() == ["ok"]
    assert str(fid) in reader.skipped["x"]
    assert_same(reader.batch([3])["ok"], data[[3]])
    # Named, it opens (the metadata is fine) and reading it is a NotImplementedError.
    named = packread.HDF5Reader(path, "x")
    assert named["x"].filters[0][0] == fid
    for read in (
        lambda: named.batch([3]),
        lambda: named["x"].read([0, 1]),
    ):
        err = _raises(packread.UnsupportedError, read, path, "x", fid)
        assert isinstance(err, NotImplementedError)
    assert_same(packread.HDF5Reader(path, "ok").batch([3]), data[[3]])


# 34. file changed after the reader opened it --------------------------------------------------


# BAD_INPUTS 34
@pytest.mark.parametrize("name", ["raw", "gz", "lzf", "contig"])
@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
def test_truncated_after_open(good, tmp_path, name, cache_bytes):
    path, wants = good
    bad = _copy(path, tmp_path / "bad.h5")
    reader = packread.HDF5Reader(bad, name, cache_bytes=cache_bytes)
    assert_same(reader.batch([0, 1]), wants[name][[0, 1]])
    if name == "contig":
        cut = contiguous_offset(bad, name) + 2 * 256 + 5  # rows 0 and 1 survive
    else:
        cut = chunk_spans(bad, name)[2][0] + 5  # chunks 0 and 1 survive
    os.truncate(bad, cut)
    # Every batch after it is refused as the file changed, also one of rows still there:
    # the file is no longer the one whose metadata the reader holds (BAD_INPUTS 68).
    for rows in (range(40), [1, 0], [39]):
        err = _raises(packread.errors.PackreadOSError, lambda r=rows: reader.batch(r), bad)
        assert "file changed since the reader opened it" in str(err)


# BAD_INPUTS 34
def test_replaced_after_open(good, tmp_path):
    # The file is replaced by another one: the open reader keeps reading the file it opened,
    # or fails cleanly; it never mixes the two.
    path, wants = good
    target = _copy(path, tmp_path / "target.h5")
    reader = packread.HDF5Reader(target, ["raw", "gz", "contig"], cache_bytes=0)
    other = tmp_path / "other.h5"
    with h5py.File(other, "w", libver="earliest") as f:
        for k in ("raw", "gz", "contig"):
            f.create_dataset(
                k, data=np.zeros(SHAPE, "<f4") + 7, chunks=CHUNK if k != "contig" else None
            )
    os.replace(other, target)
    error = None
    try:
        got = reader.batch(range(40))
    except packread.PackreadError as exc:
        error = exc
    if error is None:
        for k in ("raw", "gz", "contig"):
            assert_same(got[k], wants[k])
    else:
        assert str(target) in str(error)


def _same_size_twins(a, b):
    """Two HDF5 files of the same size holding the same two datasets, written in the other
    order: each one's chunks lie where the other's metadata points at the other dataset."""
    x, y = _compressible(), _random()
    for path, order in ((a, ("x", "y")), (b, ("y", "x"))):
        with h5py.File(path, "w", libver="earliest") as f:
            for k in order:
                f.create_dataset(k, data=x if k == "x" else y * 1000, chunks=CHUNK)
    assert os.path.getsize(a) == os.path.getsize(b)
    return x


# BAD_INPUTS 68
@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
@pytest.mark.parametrize("name", ["x", "y"])
def test_rewritten_in_place_with_the_same_size_is_refused(tmp_path, name, cache_bytes):
    # `cp other.h5 train.h5`: the same inode and length, another file's bytes. The reader's
    # metadata (chunk addresses, libhdf5's own) would read the other file's rows, no error.
    train, other = tmp_path / "train.h5", tmp_path / "other.h5"
    x = _same_size_twins(train, other)
    # Written earlier than the rewrite, not within the file system's timestamp resolution.
    os.utime(train, (1_700_000_000, 1_700_000_000))
    reader = packread.HDF5Reader(train, name, cache_bytes=cache_bytes)
    if name == "x":
        assert_same(reader.batch([0, 1]), x[[0, 1]])
    inode = os.stat(train).st_ino
    shutil.copyfile(other, train)
    assert os.stat(train).st_ino == inode
    assert os.path.getsize(train) == os.path.getsize(other)
    for rows in ([0, 1], [2], range(40)):
        err = _raises(packread.errors.PackreadOSError, lambda r=rows: reader.batch(r), train)
        assert "file changed since the reader opened it" in str(err)
    # A reader opened now reads the new file.
    with h5py.File(other) as f:
        assert_same(packread.HDF5Reader(train, name).batch([1, 3]), f[name][[1, 3]])


# 35 and friends: bad arguments, raised before any I/O ----------------------------------------


@pytest.fixture
def doomed(good, tmp_path):
    """A reader of a file truncated after it was opened: any read would fail with an
    HDF5/OS error, so an argument error seen instead was raised before any I/O."""
    path, _ = good
    bad = _copy(path, tmp_path / "doomed.h5")
    reader = packread.HDF5Reader(bad, "gz", cache_bytes=0)
    multi = packread.HDF5Reader(bad, ["gz", "contig"], cache_bytes=0)
    os.truncate(bad, 2048)
    return reader, multi


def _bad_outs():
    good = np.zeros((3, 8, 8), "<f4")
    return {
        "rows": np.zeros((2, 8, 8), "<f4"),
        "sample-shape": np.zeros((3, 8, 9), "<f4"),
        "flat": np.zeros((3 * 64,), "<f4"),
        "dtype": np.zeros((3, 8, 8), "<f8"),
        "byte-order": np.zeros((3, 8, 8), ">f4"),
        "int-dtype": np.zeros((3, 8, 8), "<i4"),
        "fortran": np.asfortranarray(good),
        "strided": np.zeros((6, 8, 8), "<f4")[::2],
        "read-only": np.lib.stride_tricks.as_strided(good, writeable=False),
        "read-only-flag": _readonly(np.zeros((3, 8, 8), "<f4")),
        "list": good.tolist(),
        "bytearray": bytearray(good.tobytes()),
        "memoryview": memoryview(np.zeros((3, 8, 8), "<f4")),
        "zero-d": np.zeros((), "<f4"),
    }


def _readonly(arr):
    arr.flags.writeable = False
    return arr


# BAD_INPUTS 35
@pytest.mark.parametrize("kind", list(_bad_outs()))
def test_bad_out_is_refused_before_any_io(doomed, kind):
    reader, multi = doomed
    out = _bad_outs()[kind]
    with pytest.raises(packread.InvalidArgumentError) as exc:
        reader.batch([0, 1, 2], out=out)
    assert isinstance(exc.value, ValueError)
    assert not isinstance(exc.value, OSError)
    with pytest.raises(packread.InvalidArgumentError):
        reader["gz"].read([0, 1, 2], out=out)
    # In a dict for a reader of several datasets, the good array is left untouched.
    sentinel = np.full((3, 8, 8), 0x42, "<f4")
    kept = sentinel.copy()
    with pytest.raises(packread.InvalidArgumentError):
        multi.batch([0, 1, 2], out={"contig": sentinel, "gz": out})
    assert sentinel.tobytes() == kept.tobytes()


# BAD_INPUTS 35
def test_out_sharing_memory_is_refused(good):
    path, _ = good
    reader = packread.HDF5Reader(path, ["gz", "contig"])
    shared = np.zeros((3, 8, 8), "<f4")
    with pytest.raises(packread.InvalidArgumentError) as exc:
        reader.batch([0, 1, 2], out={"gz": shared, "contig": shared})
    assert isinstance(exc.value, ValueError)
    whole = np.zeros((6, 8, 8), "<f4")
    with pytest.raises(packread.InvalidArgumentError):
        reader.batch([0, 1, 2], out={"gz": whole[:3], "contig": whole[2:5]})


# BAD_INPUTS 35
def test_out_of_the_wrong_kind_for_several_datasets(doomed):
    _, multi = doomed
    with pytest.raises((TypeError, ValueError)):
        multi.batch([0], out=np.zeros((1, 8, 8), "<f4"))


# BAD_INPUTS 35
def test_out_naming_a_dataset_the_reader_does_not_have(good):
    # A misspelt key must not be ignored: the caller's array would silently stay unfilled.
    path, _ = good
    reader = packread.HDF5Reader(path, ["gz", "contig"])
    buf = np.zeros((1, 8, 8), "<f4")
    with pytest.raises((KeyError, ValueError)) as exc:
        reader.batch([1], out={"gzz": buf})
    assert isinstance(exc.value, packread.PackreadError)
    assert "gzz" in str(exc.value)


@pytest.mark.parametrize(
    "idx",
    [
        [40],
        [-41],
        [0, 40],
        [2**31],
        [-(2**63)],
        np.array([2**63], dtype=np.uint64),
        [2**70],
        range(39, 42),
    ],
    ids=["n", "-n-1", "later", "2^31", "int64-min", "uint64-big", "2^70", "range"],
)
def test_index_out_of_range(doomed, idx):
    reader, multi = doomed
    for r in (reader, multi):
        with pytest.raises(IndexError) as exc:
            r.batch(idx)
        assert isinstance(exc.value, packread.PackreadError)
    out = np.full((len(list(idx)) if not isinstance(idx, np.ndarray) else 1, 8, 8), 3, "<f4")
    with pytest.raises(IndexError):
        reader.batch(idx, out=out)
    assert (out == 3).all()


@pytest.mark.parametrize(
    ("idx", "exc_type"),
    [
        ([1.0], TypeError),
        (["1"], TypeError),
        (np.array([0.5]), TypeError),
        ([[0, 1]], ValueError),
        (3, TypeError),
        (None, TypeError),
    ],
    ids=["float", "str", "float-array", "2-d", "int", "none"],
)
def test_bad_index_types(doomed, idx, exc_type):
    reader, _ = doomed
    with pytest.raises(exc_type):
        reader.batch(idx)


def test_missing_dataset_name(good):
    path, _ = good
    for datasets in ("nope", ["gz", "nope"], "gz/deeper", "/"):
        with pytest.raises(KeyError) as exc:
            packread.HDF5Reader(path, datasets)
        assert isinstance(exc.value, packread.MissingKeyError)
        assert str(path) in str(exc.value)
    reader = packread.HDF5Reader(path, "gz")
    with pytest.raises(KeyError):
        reader["nope"]
    with pytest.raises(KeyError):
        reader["contig"]  # in the file, not in this reader


def test_group_name_is_not_a_dataset(tmp_path):
    path = tmp_path / "g.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("grp/x", data=np.arange(5))
    with pytest.raises(KeyError) as exc:
        packread.HDF5Reader(path, "grp")
    assert isinstance(exc.value, packread.PackreadError)
    assert "grp" in str(exc.value)


def test_bad_constructor_arguments(good):
    path, _ = good
    with pytest.raises((TypeError, ValueError, OverflowError)):
        packread.HDF5Reader(path, cache_bytes=-1)
    with pytest.raises((TypeError, ValueError, OverflowError)):
        packread.HDF5Reader(path, num_threads=-2)
    with pytest.raises(TypeError):
        packread.HDF5Reader(path, datasets=3)


def test_dataset_with_a_damaged_object_header_is_skipped_not_the_file(tmp_path):
    # h5py and PyTables read a file's other datasets when one object header is damaged; so
    # does packread, listing the damaged one in `skipped` (asked for by name, it is an error).
    path = tmp_path / "oh.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f["x"] = np.arange(10.0)
        f["y"] = np.arange(10.0) * 2
    raw = bytearray(path.read_bytes())
    headers = [i for i in range(len(raw)) if raw.startswith(b"OHDR", i)]
    assert len(headers) == 3  # the root group, x, y
    raw[headers[1] + 6 : headers[1] + 10] = b"\xff" * 4  # x's header
    path.write_bytes(bytes(raw))
    with h5py.File(path, "r") as f:
        with pytest.raises(Exception):  # noqa: B017, PT011 (libhdf5's error varies)
            f["x"][:]
        want_y = f["y"][:]
    r = packread.HDF5Reader(path)
    assert r.keys() == ["y"]
    assert "x" in r.skipped
    assert "object header" in r.skipped["x"]
    assert_same(r.batch(range(10))["y"], want_y)
    with pytest.raises(packread.HDF5Error):
        packread.HDF5Reader(path, "x")


def test_dataset_whose_name_is_not_utf8_is_skipped_not_the_file(tmp_path):
    path = tmp_path / "names.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(10)
        f.create_dataset(b"bad\xff\xfename", data=np.arange(10))
    r = packread.HDF5Reader(path)
    assert r.keys() == ["x"]
    assert list(r.skipped.values()) == ["its name is not UTF-8, so no str can name it"]
    with h5py.File(path, "r") as f:
        assert_same(r.batch(range(10))["x"], f["x"][:])


def test_filter_nothing_decodes_but_every_chunk_skips_reads_as_h5py(tmp_path):
    # An optional filter neither packread nor libhdf5 knows: libhdf5 wrote every chunk without
    # it (their masks say so), so h5py reads the data, and packread does too.
    path = tmp_path / "unknown.h5"
    data = np.arange(60, dtype="<i4").reshape(10, 6)
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((2, 6))
        dcpl.set_filter(32999, h5py.h5z.FLAG_OPTIONAL, ())
        dcpl.set_deflate(4)
        tid = h5py.h5t.py_create(data.dtype)
        space = h5py.h5s.create_simple(data.shape)
        h5py.h5d.create(f.id, b"x", tid, space, dcpl=dcpl).write(h5py.h5s.ALL, h5py.h5s.ALL, data)
    with h5py.File(path, "r") as f:
        d = f["x"]
        assert all(d.id.get_chunk_info(i).filter_mask == 1 for i in range(d.id.get_num_chunks()))
        want = d[:]
    r = packread.HDF5Reader(path, "x")
    assert r["x"].read_path.startswith("chunked")
    assert_same(r.batch(range(10)), want)
