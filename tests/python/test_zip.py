"""packread.ZipReader against zipfile: names, info, read and batch, on archives written by
zipfile (stored, deflated, ZIP64, data descriptors) and by hand (ZIP64 central records)."""

from __future__ import annotations

import io
import pathlib
import warnings
import zipfile

import numpy as np
import pytest

import packread
from support.helpers import assert_same, npy_bytes, random_array, with_order
from support.zipcraft import build_zip, layout, patch_at

RNG = np.random.default_rng(1234)
RANDOM_100K = RNG.integers(0, 256, size=100_000, dtype=np.uint8).tobytes()
TEXTY = b"".join(b"line %d of a fairly compressible member\n" % i for i in range(3000))

# name -> (data, compress_type, compresslevel, force_zip64)
MEMBERS = {
    "empty.bin": (b"", zipfile.ZIP_STORED, None, False),
    "one.bin": (b"\x7f", zipfile.ZIP_DEFLATED, None, False),
    "stored/random.bin": (RANDOM_100K, zipfile.ZIP_STORED, None, False),
    "deflated/random.bin": (RANDOM_100K, zipfile.ZIP_DEFLATED, 6, False),
    "deflated/text-level1.txt": (TEXTY, zipfile.ZIP_DEFLATED, 1, False),
    "deflated/text-level9.txt": (TEXTY, zipfile.ZIP_DEFLATED, 9, False),
    "deflated/text-level0.txt": (TEXTY, zipfile.ZIP_DEFLATED, 0, False),
    "dir/": (b"", zipfile.ZIP_STORED, None, False),
    "zip64/stored.bin": (RANDOM_100K[:777], zipfile.ZIP_STORED, None, True),
    "zip64/deflated.txt": (TEXTY, zipfile.ZIP_DEFLATED, None, True),
    "ünïcødé/名前.dat": (b"unicode name", zipfile.ZIP_DEFLATED, None, False),
    "zeros.bin": (bytes(1 << 20), zipfile.ZIP_DEFLATED, 9, False),
    "tail.bin": (b"the last member", zipfile.ZIP_STORED, None, False),
}


def write_members(path, members=MEMBERS, **zkw):
    with zipfile.ZipFile(path, "w", **zkw) as zf:
        for name, (data, method, level, zip64) in members.items():
            if name.endswith("/"):
                zf.mkdir(name)
                continue
            # zf.open(name, "w") takes the archive's current method and level.
            zf.compression, zf.compresslevel = method, level
            with zf.open(name, "w", force_zip64=zip64) as f:
                f.write(data)
    return path


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return str(write_members(tmp_path_factory.mktemp("zip") / "mixed.zip"))


def check_against_zipfile(path, reader=None, **kw):
    """Every member of ``path`` reads the same through packread as through zipfile."""
    z = reader if reader is not None else packread.ZipReader(path, **kw)
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        assert z.names() == [i.filename for i in infos]
        assert len(z) == len(infos)
        for pos, i in enumerate(infos):
            assert i.filename in z
            info = z.info(i.filename)
            assert info == (i.filename, i.file_size, i.compress_size, i.compress_type, i.CRC)
            assert z.info(pos) == info
            want = zf.read(i)
            got = z.read(i.filename)
            assert type(got) is bytes
            assert got == want, i.filename
            assert z.read(pos) == want
    return z


# --------------------------------------------------------------------------------------------
# names, info, read


def test_members_match_zipfile(archive):
    z = check_against_zipfile(archive)
    assert z.names() == list(MEMBERS)
    assert z.path == archive
    assert archive in repr(z)
    assert f"{len(MEMBERS)} members" in repr(z)


def test_info_fields(archive):
    z = packread.ZipReader(archive)
    info = z.info("deflated/text-level9.txt")
    assert isinstance(info, packread.ZipMemberInfo)
    assert info.name == "deflated/text-level9.txt"
    assert info.size == len(TEXTY)
    assert info.method == zipfile.ZIP_DEFLATED
    assert info.compressed_size < info.size
    assert info.crc32 == zipfile.crc32(TEXTY)
    stored = z.info("stored/random.bin")
    assert (stored.method, stored.size, stored.compressed_size) == (0, 100_000, 100_000)
    assert z.info(-1) == z.info("tail.bin")
    assert z.info(0) == ("empty.bin", 0, 0, 0, 0)


def test_npy_header_is_what_numpy_reads(tmp_path):
    """``npy_header`` gives the dtype and shape numpy reads from a ``.npy`` member (selected
    or not by ``members``), ``None`` for raw members, and refuses what ``info`` refuses."""
    path = tmp_path / "mixed.zip"
    arrays = {"a.npy": np.arange(12, dtype=">i2").reshape(3, 4), "b.npy": np.zeros((2, 0, 5))}
    with zipfile.ZipFile(path, "w") as zf:
        for name, x in arrays.items():
            zf.writestr(name, npy_bytes(x), compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr("raw.bin", b"not an array")
        zf.writestr("fake.npy", b"no NPY magic here")
    z = packread.ZipReader(path)
    with zipfile.ZipFile(path) as zf:
        for name in arrays:
            want = np.load(io.BytesIO(zf.read(name)))
            assert z.npy_header(name) == (want.dtype, want.shape)
    assert z.npy_header(0) == z.npy_header("a.npy")
    assert z.npy_header(-1) is None  # fake.npy: named so, but no NPY magic
    assert z.npy_header("raw.bin") is None
    assert packread.ZipReader(path, members="b.npy").npy_header(0) == (np.dtype("<f8"), (2, 0, 5))
    with pytest.raises(KeyError):
        z.npy_header("missing.npy")
    with pytest.raises(IndexError):
        z.npy_header(4)
    two = packread.ZipReader([path, path], members="*.npy")
    with pytest.raises(packread.UnsupportedError, match="npy_header"):
        two.npy_header(0)


def test_names_is_a_copy(archive):
    z = packread.ZipReader(archive)
    names = z.names()
    names.clear()
    assert len(z.names()) == len(MEMBERS)


def test_contains(archive):
    z = packread.ZipReader(archive)
    assert "tail.bin" in z
    assert "dir/" in z
    assert "tail" not in z
    assert "TAIL.BIN" not in z
    assert 0 not in z
    assert None not in z


def test_accepts_pathlib_and_str(archive):
    assert packread.ZipReader(pathlib.Path(archive)).read("tail.bin") == b"the last member"
    assert packread.ZipReader(str(archive)).names() == list(MEMBERS)


def test_read_missing_member_is_a_key_error(archive):
    z = packread.ZipReader(archive)
    with pytest.raises(KeyError) as exc:
        z.read("no/such/member")
    assert isinstance(exc.value, packread.PackreadError)
    assert "no/such/member" in str(exc.value)
    assert archive in str(exc.value)
    with pytest.raises(KeyError):
        z.info("no/such/member")
    with pytest.raises(KeyError):
        z.batch(["tail.bin", "nope"])


@pytest.mark.parametrize("pos", [len(MEMBERS), -len(MEMBERS) - 1, 10**12])
def test_read_position_out_of_range(archive, pos):
    z = packread.ZipReader(archive)
    with pytest.raises(IndexError):
        z.read(pos)
    with pytest.raises(IndexError):
        z.info(pos)


def test_missing_and_directory_paths(tmp_path):
    with pytest.raises(FileNotFoundError) as exc:
        packread.ZipReader(tmp_path / "absent.zip")
    assert isinstance(exc.value, packread.PackreadError)
    assert "absent.zip" in str(exc.value)
    with pytest.raises(packread.errors.PackreadOSError) as exc:
        packread.ZipReader(tmp_path)
    assert isinstance(exc.value, packread.PackreadError)


def test_empty_archive(tmp_path):
    path = tmp_path / "empty.zip"
    zipfile.ZipFile(path, "w").close()
    z = packread.ZipReader(path)
    assert len(z) == 0
    assert z.names() == []
    assert z.batch([]).shape == (0, 0)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_large_member(tmp_path, compression):
    # Several MiB: read in pieces by the engine.
    data = np.random.default_rng(5).integers(0, 64, size=6 << 20, dtype=np.uint8).tobytes()
    path = tmp_path / "big.zip"
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        zf.writestr("big", data)
        zf.writestr("after", b"after")
    z = packread.ZipReader(path)
    assert z.read("big") == data
    assert z.read("after") == b"after"


# --------------------------------------------------------------------------------------------
# archive variants


def test_allowzip64_and_compression_defaults(tmp_path):
    path = tmp_path / "z.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        for i in range(20):
            zf.writestr(f"m{i:02d}", bytes([i]) * (i * 101))
    check_against_zipfile(path)


def test_force_zip64_members(tmp_path):
    path = tmp_path / "z64.zip"
    members = {
        f"{kind}{i}": (RANDOM_100K[: 1000 * i + 1], method, None, True)
        for i in range(4)
        for kind, method in (("s", zipfile.ZIP_STORED), ("d", zipfile.ZIP_DEFLATED))
    }
    write_members(path, members)
    # Every local header carries a ZIP64 extra field.
    raw = path.read_bytes()
    assert all(raw[m.local + 28] == 20 for m in layout(raw).members)
    check_against_zipfile(path)


@pytest.mark.parametrize(
    ("local64", "central64", "eocd64"),
    [(True, True, True), (False, True, False), (False, False, True), (True, False, False)],
)
def test_hand_written_zip64_records(tmp_path, local64, central64, eocd64):
    # Sizes and offsets in ZIP64 extra fields of the central directory, a ZIP64 end record.
    members = [
        ("a.bin", RANDOM_100K[:5000], 0),
        ("b.txt", TEXTY, 8),
        ("c/", b"", 0),
        ("d.bin", b"d", 8),
    ]
    raw = build_zip(members, local_zip64=local64, central_zip64=central64, eocd64=eocd64)
    path = tmp_path / "hand.zip"
    path.write_bytes(raw)
    z = check_against_zipfile(path)
    assert [z.read(n) for n, _, _ in members] == [d for _, d, _ in members]


def test_data_descriptors_from_unseekable_writer(tmp_path):
    class Unseekable:
        def __init__(self):
            self.buf = bytearray()

        def write(self, data):
            self.buf += data
            return len(data)

        def flush(self):
            pass

    sink = Unseekable()
    with zipfile.ZipFile(sink, "w") as zf:
        zf.writestr("s.bin", RANDOM_100K[:3000], compress_type=zipfile.ZIP_STORED)
        zf.writestr("d.txt", TEXTY, compress_type=zipfile.ZIP_DEFLATED)
    path = tmp_path / "stream.zip"
    path.write_bytes(bytes(sink.buf))
    with zipfile.ZipFile(path) as zf:
        assert all(i.flag_bits & 0x08 for i in zf.infolist())  # data descriptors in use
    check_against_zipfile(path)


def test_archive_comment(tmp_path):
    path = tmp_path / "c.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x", b"payload")
        zf.comment = b"an archive comment " * 20
    check_against_zipfile(path)


def test_prepended_data(tmp_path):
    # A self-extracting archive: a stub before the ZIP data (offsets are relative to it).
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("x", b"payload", compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr("y", b"y" * 100)
    path = tmp_path / "sfx.zip"
    path.write_bytes(b"#!/bin/sh\nexit 0\n" + bytes(1000) + inner.getvalue())
    check_against_zipfile(path)


def test_utf8_and_cp437_names(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("caf_.txt", b"cp437")
        zf.writestr("日本/ü.bin", b"utf-8")
    raw = buf.getvalue()
    m = layout(raw).member("caf_.txt")
    # 0x82 is é in code page 437, the encoding of names without the UTF-8 flag.
    raw = patch_at(patch_at(raw, m.local_name + 3, b"\x82"), m.central + 46 + 3, b"\x82")
    path = tmp_path / "names.zip"
    path.write_bytes(raw)
    z = check_against_zipfile(path)
    assert z.names() == ["café.txt", "日本/ü.bin"]


def test_duplicate_names_are_refused_clearly(tmp_path):
    path = tmp_path / "dup.zip"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate name"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("d", b"first")
            zf.writestr("e", b"between")
            zf.writestr("d", b"second")
    with zipfile.ZipFile(path) as zf:
        assert zf.namelist() == ["d", "e", "d"]
        want_last = zf.read("d")
    assert want_last == b"second"
    # The zip crate keeps one entry per name, so the first "d" could not be reached: rather
    # than list fewer members than zipfile does, packread refuses the archive, naming it.
    with pytest.raises(packread.UnsupportedError, match="same name") as info:
        packread.ZipReader(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, NotImplementedError)


# --------------------------------------------------------------------------------------------
# many members


@pytest.fixture(scope="module")
def many_members(tmp_path_factory):
    path = tmp_path_factory.mktemp("many") / "many.zip"
    with zipfile.ZipFile(path, "w", allowZip64=True) as zf:
        for i in range(200_000):
            zf.writestr(f"m/{i}", b"%c" % (i % 251))
    return path


def test_200k_members(many_members):
    with zipfile.ZipFile(many_members) as zf:
        names = zf.namelist()
    assert len(names) == 200_000
    # More than 65535 entries: zipfile wrote a ZIP64 end record.
    assert b"PK\x06\x06" in many_members.read_bytes()[-200:]
    z = packread.ZipReader(many_members)
    assert len(z) == 200_000
    assert z.names() == names
    assert "m/199999" in z
    assert z.read("m/199999") == bytes([199_999 % 251])
    assert z.read(123_456) == bytes([123_456 % 251])
    idx = [0, 1, 65_535, 65_536, 199_999, -2]
    got = z.batch(idx)
    assert got.tolist() == [[i % 251] for i in (0, 1, 65_535, 65_536, 199_999, 199_998)]
    got = z.batch([f"m/{i}" for i in range(1000, 1100)])
    assert got[:, 0].tolist() == [i % 251 for i in range(1000, 1100)]


# --------------------------------------------------------------------------------------------
# batch of raw members


@pytest.fixture
def raw_archive(tmp_path):
    """12 raw members of 3x4 '>f4' (stored and deflated alternately), plus odd ones."""
    rng = np.random.default_rng(7)
    arrays = [random_array(rng, (3, 4), ">f4") for _ in range(12)]
    path = tmp_path / "raw.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i, a in enumerate(arrays):
            method = zipfile.ZIP_DEFLATED if i % 2 else zipfile.ZIP_STORED
            zf.writestr(f"r{i:02d}.raw", a.tobytes(), compress_type=method)
        zf.writestr("short.raw", arrays[0].tobytes()[:-4])
        zf.writestr("odd.raw", b"12345")
    return str(path), arrays


def test_batch_raw_default_is_bytes_per_member(raw_archive):
    path, arrays = raw_archive
    z = packread.ZipReader(path)
    got = z.batch(["r03.raw", "r00.raw"])
    assert got.dtype == np.uint8
    assert got.shape == (2, 48)
    assert got.flags.c_contiguous
    assert got.tobytes() == arrays[3].tobytes() + arrays[0].tobytes()


def test_batch_raw_with_dtype_and_shape(raw_archive):
    path, arrays = raw_archive
    z = packread.ZipReader(path)
    names = [f"r{i:02d}.raw" for i in (5, 0, 11, 5, 2)]
    got = z.batch(names, dtype=">f4", shape=(3, 4))
    want = np.stack([arrays[i] for i in (5, 0, 11, 5, 2)]).astype(">f4")
    assert_same(got, want)
    flat = z.batch(names, dtype=">f4")
    assert flat.shape == (5, 12)
    assert flat.tobytes() == want.tobytes()
    as_u4 = z.batch(names, dtype="<u4", shape=(12,))
    assert as_u4.dtype == np.dtype("<u4")
    assert as_u4.tobytes() == want.tobytes()


@pytest.mark.parametrize(
    "members",
    [[3, 0, 11], np.array([3, 0, 11]), np.array([3, 0, 11], dtype=np.uint32), [3, -14, -3]],
    ids=["list", "int64", "uint32", "negative"],
)
def test_batch_raw_by_position(raw_archive, members):
    path, arrays = raw_archive
    z = packread.ZipReader(path)
    got = z.batch(members, dtype=">f4", shape=(3, 4))
    assert got.tobytes() == b"".join(arrays[i].tobytes() for i in (3, 0, 11))


def test_batch_range_and_slice(raw_archive):
    path, arrays = raw_archive
    z = packread.ZipReader(path)
    assert z.batch(range(2, 8, 3), dtype=">f4", shape=(3, 4)).tobytes() == (
        arrays[2].tobytes() + arrays[5].tobytes()
    )
    assert z.batch(slice(0, 12), dtype=">f4").tobytes() == b"".join(a.tobytes() for a in arrays)


def test_batch_empty(raw_archive):
    z = packread.ZipReader(raw_archive[0])
    got = z.batch([], dtype="<f8", shape=(2, 3))
    assert got.shape == (0, 2, 3)
    assert got.dtype == np.dtype("<f8")


def test_batch_into_out(raw_archive):
    path, arrays = raw_archive
    z = packread.ZipReader(path)
    out = np.full((3, 3, 4), np.nan, dtype=">f4")
    got = z.batch(["r01.raw", "r02.raw", "r01.raw"], dtype=">f4", shape=(3, 4), out=out)
    assert got is out
    assert out.tobytes() == arrays[1].tobytes() + arrays[2].tobytes() + arrays[1].tobytes()


def test_batch_size_mismatch_names_the_member(raw_archive):
    path, _ = raw_archive
    z = packread.ZipReader(path)
    with pytest.raises(ValueError, match=r"short\.raw") as exc:
        z.batch(["r00.raw", "short.raw"], dtype=">f4", shape=(3, 4))
    assert isinstance(exc.value, packread.PackreadError)
    assert path in str(exc.value)
    with pytest.raises(ValueError, match=r"short\.raw"):
        z.batch(["r00.raw", "short.raw"])  # shape from the first member
    with pytest.raises(ValueError, match=r"odd\.raw"):
        z.batch(["odd.raw"], dtype="<i4")  # 5 bytes is not a whole number of int32


@pytest.mark.parametrize(
    "bad_out",
    [
        np.zeros((2, 3, 4), dtype=">f4"),  # wrong number of rows
        np.zeros((3, 4, 3), dtype=">f4"),  # wrong sample shape
        np.zeros((3, 3, 4), dtype="<f4"),  # wrong byte order
        np.zeros((3, 3, 4), dtype=">i4"),  # wrong dtype
        np.zeros((3, 3, 8), dtype=">f4")[:, :, ::2],  # not contiguous
        np.zeros((3, 4, 3), dtype=">f4").transpose(0, 2, 1),  # not C order
        "read-only",
        "not an array",
    ],
    ids=["rows", "shape", "byteorder", "dtype", "strided", "transposed", "readonly", "list"],
)
def test_batch_bad_out(raw_archive, bad_out):
    path, _ = raw_archive
    z = packread.ZipReader(path)
    if isinstance(bad_out, str) and bad_out == "read-only":
        bad_out = np.zeros((3, 3, 4), dtype=">f4")
        bad_out.flags.writeable = False
    elif isinstance(bad_out, str):
        bad_out = np.zeros((3, 3, 4), dtype=">f4").tolist()
    before = np.array(bad_out, copy=True)
    with pytest.raises(packread.InvalidArgumentError):
        z.batch([0, 1, 2], dtype=">f4", shape=(3, 4), out=bad_out)
    assert np.array_equal(np.asarray(bad_out), before, equal_nan=True)


@pytest.mark.parametrize("idx", [[14], [0, 99], [-15], [10**12]])
def test_batch_index_out_of_range(raw_archive, idx):
    z = packread.ZipReader(raw_archive[0])
    with pytest.raises(IndexError) as exc:
        z.batch(idx)
    assert isinstance(exc.value, packread.IndexOutOfRangeError)


def test_batch_one_name_is_a_type_error(raw_archive):
    z = packread.ZipReader(raw_archive[0])
    with pytest.raises(TypeError):
        z.batch("r00.raw")


# --------------------------------------------------------------------------------------------
# batch of .npy members


NPY_DTYPES = ["<f4", ">f4", "|b1", ">i8", "<c16", "|S3", ">U2", "<f2"]


@pytest.mark.parametrize("dtype", NPY_DTYPES)
def test_batch_npy_members(tmp_path, dtype):
    rng = np.random.default_rng(11)
    arrays = [
        with_order(random_array(rng, (4, 5), dtype), "F" if i % 3 == 0 else "C") for i in range(8)
    ]
    path = tmp_path / "arrays.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i, a in enumerate(arrays):
            method = zipfile.ZIP_DEFLATED if i % 2 else zipfile.ZIP_STORED
            zf.writestr(f"a{i}.npy", npy_bytes(a), compress_type=method)
    z = packread.ZipReader(path)
    order = [7, 0, 3, 3, 6, 1]
    want = np.empty((len(order), 4, 5), dtype=dtype)
    for k, i in enumerate(order):
        want[k] = np.load(io.BytesIO(zipfile.ZipFile(path).read(f"a{i}.npy")))
    for members in (order, [f"a{i}.npy" for i in order]):
        got = z.batch(members)
        assert_same(got, want)
    out = np.empty_like(want)
    assert z.batch(order, out=out) is out
    assert_same(out, want)
    # dtype and shape, if given, must agree with the headers.
    assert_same(z.batch(order, dtype=dtype, shape=(4, 5)), want)


def test_batches_of_npy_members_share_one_batch_reader(tmp_path):
    # One batch reader per kind of sample, whichever member a batch starts with: a reader per
    # first member cost a pass over every member per batch (and memory for each).
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(50):
            zf.writestr(f"m{i:02d}.npy", npy_bytes(np.full((2, 3), i, "<i4")))
    z = packread.ZipReader(path)
    for first in range(50):
        got = z.batch([first, (first + 7) % 50])
        assert_same(
            got, np.stack([np.full((2, 3), first, "<i4"), np.full((2, 3), (first + 7) % 50, "<i4")])
        )
    assert len(z._readers) <= 1


def test_batch_npy_0d_and_zero_size(tmp_path):
    path = tmp_path / "odd.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(3):
            zf.writestr(f"s{i}.npy", npy_bytes(np.float64(i + 0.5)))
            zf.writestr(f"z{i}.npy", npy_bytes(np.zeros((2, 0), dtype="<i2")))
    z = packread.ZipReader(path)
    assert_same(z.batch(["s2.npy", "s0.npy"]), np.array([2.5, 0.5]))
    assert_same(z.batch(["z1.npy", "z0.npy"]), np.zeros((2, 2, 0), dtype="<i2"))


def test_batch_npy_mismatch_names_the_member(tmp_path):
    path = tmp_path / "mixed.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("good.npy", npy_bytes(np.zeros((2, 3), "<f4")))
        zf.writestr("dtype.npy", npy_bytes(np.zeros((2, 3), "<f8")))
        zf.writestr("shape.npy", npy_bytes(np.zeros((3, 2), "<f4")))
        zf.writestr("order.npy", npy_bytes(np.zeros((2, 3), ">f4")))
        zf.writestr("raw.npy", b"not an npy file at all, just bytes")
    z = packread.ZipReader(path)
    for bad in ("dtype.npy", "shape.npy", "order.npy", "raw.npy"):
        with pytest.raises((packread.InconsistentError, packread.NpyFormatError)) as exc:
            z.batch(["good.npy", bad])
        assert isinstance(exc.value, packread.PackreadError)
        assert bad in str(exc.value)
        assert str(path) in str(exc.value)
    with pytest.raises(packread.InconsistentError):
        z.batch(["good.npy"], dtype="<f8")
    with pytest.raises(packread.InconsistentError):
        z.batch(["good.npy"], shape=(6,))
    with pytest.raises(packread.InvalidArgumentError):
        z.batch(["good.npy"], out=np.zeros((1, 2, 3), "<f8"))
