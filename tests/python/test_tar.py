"""TarReader: webdataset shards (webdataset's own ShardWriter) and tarfile's GNU and PAX
archives, sample by sample against webdataset's decode of the same keys and PIL's pixels;
fields and kinds, fixed-size decodes against torchvision, every kind of source, missing fields,
ZIPs of the same members, packread.open and the torch datasets; and damaged archives (cut at
every block, bad checksums, sizes and PAX records that lie, duplicate keys, links, gzip), each
refused with packread's own exception and nothing written anywhere."""

from __future__ import annotations

import glob
import gzip
import io
import os
import pathlib
import pickle
import re
import tarfile
import warnings
import zipfile
from typing import Any

import numpy as np
import pytest

import packread
from packread.errors import (
    BadTarError,
    DecodeError,
    InconsistentError,
    InvalidArgumentError,
    MissingKeyError,
    PackreadError,
    UnsupportedError,
)
from support import tars
from support.tars import BLOCK, COUNT, FIELDS

webdataset = pytest.importorskip("webdataset")
Image = pytest.importorskip("PIL.Image")
pytest.importorskip("skimage")


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> list[str]:
    """The main shards: 40 samples of every kind of field in 3 shards (14, 14, 12)."""
    return tars.write_shards(str(tmp_path_factory.mktemp("tar") / "shards"))


@pytest.fixture(scope="module")
def reference(shards) -> dict[str, dict[str, Any]]:
    """webdataset's samples of the main shards, by key, in order."""
    ref = tars.webdataset_samples(shards)
    assert len(ref) == COUNT
    return ref


@pytest.fixture(scope="module")
def raw(shards) -> dict[str, bytes]:
    """Every member of the main shards as stored, by name (read by tarfile)."""
    out = {}
    for p in shards:
        with tarfile.open(p) as t:
            for m in t.getmembers():
                out[m.name] = t.extractfile(m).read()
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[str, bytes]:
    """A small webdataset shard (``TarWriter``) of 3 samples of ``cls``, ``jpg`` (more
    than a block) and ``txt``: the archive the damage tests edit."""
    path = str(tmp_path_factory.mktemp("small") / "small.tar")
    tars.write_samples(path, [small_sample(i, f"k{i}") for i in range(3)])
    with open(path, "rb") as f:
        return path, f.read()


def small_sample(i: int, key: str) -> dict[str, Any]:
    return {
        "__key__": key,
        "cls": i,
        "jpg": tars.jpeg(tars.crop(i, (24, 32))),
        "txt": f"text of {key}",
    }


def equal(got: Any, want: Any) -> bool:
    """A decoded field equals webdataset's: arrays by dtype, shape and values, ints by value
    (an int64 from packread, a Python int from webdataset), anything else by type and value."""
    if isinstance(want, np.ndarray):
        return (
            isinstance(got, np.ndarray)
            and got.dtype == want.dtype
            and got.shape == want.shape
            and np.array_equal(got, want)
        )
    if isinstance(want, int) and not isinstance(want, bool):
        return isinstance(got, (int, np.integer)) and int(got) == want
    return type(got) is type(want) and got == want


def check_batch(batch: dict, keys: list[str], reference: dict, fields: list[str]) -> None:
    """Row ``r`` of every field of ``batch`` is webdataset's field of sample ``keys[r]``;
    int fields are one int64 array, npy fields one stacked array, the others lists."""
    assert list(batch) == fields
    for f in fields:
        column = batch[f]
        if f == "cls":
            assert isinstance(column, np.ndarray), f
            assert column.dtype == np.int64
            assert column.shape == (len(keys),)
        elif f == "npy":
            assert isinstance(column, np.ndarray), f
            assert column.shape == (len(keys), *tars.NPY_SHAPE)
        else:
            assert isinstance(column, list), (f, type(column))
            assert len(column) == len(keys)
        for r, key in enumerate(keys):
            assert equal(column[r], reference[key][f]), (key, f, column[r])


def assert_close(got: np.ndarray, want: np.ndarray, max_diff: int, mean_diff: float, what) -> None:
    """Pixels within ``max_diff`` levels of ``want`` everywhere, ``mean_diff`` on average (the
    tolerance test_images.py holds packread's resizing to against torchvision's)."""
    diff = np.abs(got.astype(int) - np.asarray(want).astype(int))
    assert diff.max() <= max_diff, (what, diff.max())
    assert diff.mean() < mean_diff, (what, diff.mean())


def read_all(reader) -> Any:
    return reader.batch(range(len(reader)))


# --------------------------------------------------------------------------------------------
# The samples, against webdataset


def test_every_sample_and_field_equals_webdatasets(shards, reference, raw):
    """Every field of every sample of three webdataset shards equals what webdataset decodes
    for that key (images whole as PIL decodes them, cls int64, json parsed, txt str, npy
    arrays, other fields bytes); names() are webdataset's keys in order; fields=None reads
    every field of the first sample, sorted."""
    r = packread.TarReader(shards)
    assert isinstance(r, packread.BatchReader)
    assert len(r) == COUNT
    assert r.names() == list(reference)
    assert r.keys() == FIELDS
    batch = read_all(r)
    check_batch(batch, list(reference), reference, FIELDS)
    assert batch["npy"].dtype == np.dtype("<f4")
    # The images are PIL's decode of the stored members, whole, uint8 (H, W, 3).
    for k, key in enumerate(reference):
        for f in ("jpg", "seg.png"):
            want = tars.pil_rgb(raw[f"{key}.{f}"])
            assert batch[f][k].dtype == np.uint8
            assert np.array_equal(batch[f][k], want), (key, f)
    assert batch["jpg"][0].shape == (*tars.HW, 3)
    assert batch["seg.png"][0].shape == (*tars.SEG_HW, 3)


def test_random_batches_across_shards_equal_the_reference(shards, reference):
    """Batches of random indices spanning the three shards (repeats, negatives, any order;
    lists, arrays, ranges, slices, batch_async) hold the samples they name."""
    r = packread.TarReader(shards)
    keys = list(reference)
    rng = np.random.default_rng(0)
    forms: list[Any] = [rng.integers(-COUNT, COUNT, int(rng.integers(1, 12))) for _ in range(8)]
    forms += [[39, 0, 14, 13, 28, 27, 0, -1], range(5, 40, 6), slice(3, 33, 5)]
    for idx in forms:
        rows = list(range(COUNT))[idx] if isinstance(idx, slice) else [int(i) for i in idx]
        want_keys = [keys[i % COUNT] for i in rows]
        check_batch(r.batch(idx), want_keys, reference, FIELDS)
    idx = [20, 1, 35, 20]
    check_batch(r.batch_async(idx).result(timeout=60), [keys[i] for i in idx], reference, FIELDS)


def test_one_sample_by_index(shards, reference):
    """reader[i] is sample i's fields as a dict, from any shard, negative indices from the
    end."""
    r = packread.TarReader(shards)
    keys = list(reference)
    for i in (0, 13, 14, 27, 28, COUNT - 1, -1, -COUNT):
        got = r[i]
        assert list(got) == FIELDS
        for f in FIELDS:
            assert equal(got[f], reference[keys[i]][f]), (i, f)


def long_samples(count: int) -> list[dict[str, Any]]:
    """Samples whose keys are past ustar's 100-character names (folders, base names, both,
    non-ASCII)."""
    folder = "d" * 70 + "/" + "é" * 40
    keys = [
        f"{folder}/s0",
        "short/s1",
        "b" * 130 + "2",
        f"{folder}/{'x' * 110}3",
        f"données/été/{'ü' * 60}4",
    ]
    return [small_sample(i, keys[i % len(keys)] + f"_{i}") for i in range(count)]


@pytest.mark.parametrize("fmt", ["ustar", "gnu", "pax"])
def test_long_names_of_ustar_gnu_and_pax_archives(tmp_path, fmt):
    """Names past 100 characters read whole, as webdataset reads them, the data after any
    extra header in place: ustar archives (the name's folders in the header's 155-byte
    prefix field), tarfile's GNU archives (``././@LongLink`` members) and PAX
    archives (``path`` records, non-ASCII names too)."""
    if fmt == "ustar":
        folder = "p" * 90 + "/" + "q" * 50
        members = tars.sample_members([small_sample(i, f"{folder}/s{i}") for i in range(7)])
        data = tars.tar_bytes(members, tarfile.USTAR_FORMAT)
        assert data[345 : 345 + 90] == b"p" * 90  # the prefix field
        assert data[257:263] == b"ustar\0"
    else:
        members = tars.sample_members(long_samples(7))
        data = tars.tar_bytes(members, tarfile.GNU_FORMAT if fmt == "gnu" else tarfile.PAX_FORMAT)
    if fmt == "gnu":
        assert b"././@LongLink" in data
    elif fmt == "pax":
        assert b" path=" in data
        assert b"././@LongLink" not in data
    path = tars.write(tmp_path / f"{fmt}.tar", data)
    reference = tars.webdataset_samples(path)
    assert len(reference) == 7
    assert max(len(k) for k in reference) > 100
    r = packread.TarReader(path)
    assert r.names() == list(reference)
    assert r.keys() == ["cls", "jpg", "txt"]
    check_batch(read_all(r), list(reference), reference, ["cls", "jpg", "txt"])


def test_key_and_field_split_as_webdataset(tmp_path):
    """A member's key is its path up to the first dot of its base name, its field the rest,
    lower-cased (``a/b.c.jpg``: key ``a/b``, field ``c.jpg``, an image by its last extension);
    a dot in a folder is part of the key; members with no dot in the base name, ``__index__``
    and directories are no samples. webdataset reads the same keys and fields."""
    jpg = tars.jpeg(tars.crop(0, (24, 32)))
    png = tars.png(tars.crop(1, (24, 32)))
    members = [
        ("a/b.c.jpg", jpg),
        ("a/b.cls", b"3"),
        ("README", b"no dot in the name"),
        ("x.y/z.C.JPG", png),  # a PNG named .JPG: decoded by its bytes, as PIL does
        ("x.y/z.CLS", b"4"),
        ("__index__", b"meta"),
        (tars.member("d.dir", kind=tarfile.DIRTYPE), b""),
        ("m/n.c.jpg", jpg),
        ("m/n.cls", b"-5"),
    ]
    path = tars.write(tmp_path / "split.tar", tars.tar_bytes(members))
    reference = tars.webdataset_samples(path)
    assert list(reference) == ["a/b", "x.y/z", "m/n"]
    r = packread.TarReader(path)
    assert r.names() == ["a/b", "x.y/z", "m/n"]
    assert r.keys() == ["c.jpg", "cls"]
    batch = read_all(r)
    check_batch(batch, list(reference), reference, ["c.jpg", "cls"])
    assert batch["cls"].tolist() == [3, 4, -5]
    assert np.array_equal(batch["c.jpg"][1], tars.pil_rgb(png))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    """12 samples whose image is a JPEG (``.jpg``) or, every third, a PNG (``.png``), with a
    ``.cls`` and a ``.txt`` holding a number."""
    path = str(tmp_path_factory.mktemp("mixed") / "mixed.tar")
    samples = []
    for i in range(12):
        pixels = tars.crop(i, (24, 32))
        image = {"png": tars.png(pixels)} if i % 3 == 0 else {"jpg": tars.jpeg(pixels)}
        samples.append({"__key__": f"m{i:02d}", **image, "cls": 7 * i, "txt": str(100 - i)})
    return tars.write_samples(path, samples)


def test_fields_with_alternatives_as_a_list_and_a_dict(mixed):
    """``"jpg;png"`` takes whichever a sample has, as webdataset's to_tuple does; a list's batch
    keys are each spec's first alternative, in the order given; a dict names them; a field
    some samples lack is missing without its alternative."""
    want = tars.webdataset_tuples(mixed, "jpg;png", "cls")
    assert len(want) == 12
    images = [w[0] for w in want]
    labels = [w[1] for w in want]
    r = packread.TarReader(mixed, fields=["jpg;png", "cls"])
    assert r.keys() == ["jpg", "cls"]
    got = read_all(r)
    assert list(got) == ["jpg", "cls"]
    assert all(equal(g, w) for g, w in zip(got["jpg"], images, strict=True))
    assert got["cls"].dtype == np.int64
    assert got["cls"].tolist() == labels
    flipped = packread.TarReader(mixed, fields=["cls", "jpg;png"])
    assert flipped.keys() == ["cls", "jpg"]
    assert list(read_all(flipped)) == ["cls", "jpg"]
    named = packread.TarReader(mixed, fields={"image": "jpg;png", "label": "cls"})
    assert named.keys() == ["image", "label"]
    got = read_all(named)
    assert list(got) == ["image", "label"]
    assert all(equal(g, w) for g, w in zip(got["image"], images, strict=True))
    assert got["label"].tolist() == labels
    # A fixed-size decode stacks the images, whichever format each is.
    decode = packread.ImageDecode((24, 32), resize=24)
    fixed = packread.TarReader(mixed, fields={"image": "png;jpg"}, decode=decode)
    stacked = read_all(fixed)["image"]
    assert stacked.shape == (12, 24, 32, 3)
    assert stacked.dtype == np.uint8
    assert np.array_equal(stacked, np.stack(images))
    with pytest.raises(MissingKeyError, match="m00"):  # m00 has a .png only
        packread.TarReader(mixed, fields=["jpg", "cls"])


def test_kinds_override_the_extension(mixed):
    """kinds= decodes a batch key as another kind: a .txt holding a number as int64, a .cls
    as text, an image as its stored bytes; by the dict's names where fields= is a dict."""
    with tarfile.open(mixed) as t:
        stored = {m.name: t.extractfile(m).read() for m in t.getmembers()}
    keys = [f"m{i:02d}" for i in range(12)]
    r = packread.TarReader(
        mixed,
        fields=["txt", "cls", "jpg;png"],
        kinds={"txt": "int", "cls": "text", "jpg": "bytes"},
    )
    got = read_all(r)
    assert got["txt"].dtype == np.int64
    assert got["txt"].tolist() == [100 - i for i in range(12)]
    assert got["cls"] == [str(7 * i) for i in range(12)]
    want = [stored.get(f"{k}.jpg", stored.get(f"{k}.png")) for k in keys]
    assert got["jpg"] == want
    named = packread.TarReader(mixed, fields={"n": "txt"}, kinds={"n": "int"})
    assert read_all(named)["n"].tolist() == [100 - i for i in range(12)]
    default = read_all(packread.TarReader(mixed, fields=["txt"]))
    assert default["txt"] == [str(100 - i) for i in range(12)]
    with pytest.raises(InvalidArgumentError):
        packread.TarReader(mixed, fields=["txt"], kinds={"txt": "float128"})


def test_fixed_decode_equals_torchvision_resize_and_center_crop(shards, raw, reference):
    """decode=ImageDecode(64, crop="center") stacks the images (B, 64, 64, 3) uint8, each
    within test_images' tolerance of torchvision's Resize(64) + CenterCrop(64) of PIL's image."""
    T = pytest.importorskip("torchvision.transforms")
    r = packread.TarReader(
        shards, fields=["jpg", "cls"], decode=packread.ImageDecode(64, crop="center")
    )
    got = read_all(r)
    assert got["jpg"].shape == (COUNT, 64, 64, 3)
    assert got["jpg"].dtype == np.uint8
    assert got["cls"].tolist() == list(range(COUNT))
    tf = T.Compose([T.Resize(64), T.CenterCrop(64)])
    for k, key in enumerate(reference):
        with Image.open(io.BytesIO(raw[f"{key}.jpg"])) as im:
            want = np.asarray(tf(im.convert("RGB")))
        assert_close(got["jpg"][k], want, 2, 0.5, key)


def test_random_crops_repeat_per_epoch_and_differ_across(shards):
    """Random crops and flips are drawn from (augment_seed, epoch, sample): an epoch read
    again, by another reader or a pickled copy, repeats exactly; another epoch or seed
    differs."""
    decode = packread.ImageDecode(32, crop="random", flip=True)

    def make(seed: int) -> packread.TarReader:
        return packread.TarReader(shards, fields=["jpg"], decode=decode, augment_seed=seed)

    r = make(3)
    idx = range(COUNT)
    first = r.batch(idx, epoch=0)["jpg"]
    assert first.shape == (COUNT, 32, 32, 3)
    assert np.array_equal(r.batch(idx, epoch=0)["jpg"], first)
    assert np.array_equal(make(3).batch(idx, epoch=0)["jpg"], first)
    assert np.array_equal(pickle.loads(pickle.dumps(r)).batch(idx, epoch=0)["jpg"], first)
    assert np.array_equal(r.batch([5, 30], epoch=0)["jpg"], first[[5, 30]])
    assert not np.array_equal(r.batch(idx, epoch=1)["jpg"], first)
    assert not np.array_equal(make(4).batch(idx, epoch=0)["jpg"], first)
    center = read_all(packread.TarReader(shards, fields=["jpg"], decode=packread.ImageDecode(32)))
    assert not np.array_equal(center["jpg"], first)


# --------------------------------------------------------------------------------------------
# Sources


def test_every_kind_of_source(shards, reference):
    """One shard by str, pathlib.Path, bytes and io.BytesIO; the shards by list and glob; each
    reads the same samples, and so do their pickled copies (what DataLoader workers get)."""
    keys = list(reference)
    first = keys[:14]
    folder = os.path.dirname(shards[0])
    with open(shards[0], "rb") as f:
        data = f.read()
    sources = {
        "str": (shards[0], first),
        "path": (pathlib.Path(shards[0]), first),
        "bytes": (data, first),
        "bytesio": (io.BytesIO(data), first),
        "list": (list(shards), keys),
        "reversed": ([shards[2], shards[0]], keys[28:] + keys[:14]),
        "glob": (os.path.join(folder, "shard-*.tar"), keys),
    }
    for name, (src, want) in sources.items():
        r = packread.TarReader(src)
        assert r.names() == want, name
        idx = [0, len(want) - 1, 3, 0]
        check_batch(r.batch(idx), [want[i] for i in idx], reference, FIELDS)
        copy = pickle.loads(pickle.dumps(r))
        assert copy.names() == want, name
        check_batch(copy.batch(idx), [want[i] for i in idx], reference, FIELDS)
        assert equal(copy[1]["txt"], reference[want[1]]["txt"]), name


def test_open_picks_the_tar_reader(shards, tmp_path):
    """packread.open takes a .tar, a glob of them, and a tar without the suffix (by the
    ``ustar`` magic at offset 257) to a TarReader, passing its options on."""
    one = packread.open(shards[0])
    assert isinstance(one, packread.TarReader)
    assert len(one) == 14
    many = packread.open(os.path.join(os.path.dirname(shards[0]), "shard-*.tar"))
    assert isinstance(many, packread.TarReader)
    assert len(many) == COUNT
    picked = packread.open(shards[1], fields=["cls"])
    assert isinstance(picked, packread.TarReader)
    assert picked.keys() == ["cls"]
    assert read_all(picked)["cls"].tolist() == list(range(14, 28))
    with open(shards[2], "rb") as f:
        plain = tars.write(tmp_path / "no_suffix.dat", f.read())
    unnamed = packread.open(plain, fields=["cls"])
    assert isinstance(unnamed, packread.TarReader)
    assert read_all(unnamed)["cls"].tolist() == list(range(28, COUNT))


# --------------------------------------------------------------------------------------------
# Missing fields


@pytest.fixture
def gappy(tmp_path) -> tuple[str, str]:
    """Two shards of ``jpg`` + ``cls`` samples: ``a.tar``'s ``ga/k002`` has no ``cls``,
    ``b.tar``'s ``gb/k001`` no ``jpg``."""

    def shard(name: str, prefix: str, n: int, lacking: int, field: str) -> str:
        samples = []
        for i in range(n):
            s = small_sample(i, f"{prefix}/k{i:03d}")
            del s["txt"]
            if i == lacking:
                del s[field]
            samples.append(s)
        return tars.write_samples(str(tmp_path / name), samples)

    return shard("a.tar", "ga", 5, 2, "cls"), shard("b.tar", "gb", 4, 1, "jpg")


def test_a_missing_field_raises_naming_shard_and_key(gappy):
    """A sample lacking a requested field: MissingKeyError at open naming the shard and the
    key."""
    a, b = gappy
    with pytest.raises(MissingKeyError) as exc:
        packread.TarReader([a, b], fields=["jpg", "cls"])
    assert "a.tar" in str(exc.value), str(exc.value)
    assert "ga/k002" in str(exc.value), str(exc.value)
    with pytest.raises(MissingKeyError, match=r"(?s)(b\.tar.*gb/k001|gb/k001.*b\.tar)"):
        packread.TarReader(b, fields=["jpg", "cls"])
    assert len(packread.TarReader(a, fields=["jpg"])) == 5  # it lacks no field asked for


def test_on_missing_skip_drops_warns_and_lists(gappy):
    """on_missing="skip" leaves out the samples lacking a field, warns how many (one shard, and
    two: one warning of 2 or one of 1 per shard), and lists (shard, key, batch key) in
    ``skipped``; the others read as webdataset reads them."""
    a, b = gappy
    with pytest.warns(Warning, match=r"\b1\b"):
        one = packread.TarReader(a, fields=["jpg", "cls"], on_missing="skip")
    assert one.names() == [f"ga/k{i:03d}" for i in (0, 1, 3, 4)]
    assert [(os.path.basename(p), k, f) for p, k, f in one.skipped] == [("a.tar", "ga/k002", "cls")]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        r = packread.TarReader([a, b], fields=["jpg", "cls"], on_missing="skip")
    kept = [f"ga/k{i:03d}" for i in (0, 1, 3, 4)] + [f"gb/k{i:03d}" for i in (0, 2, 3)]
    assert r.names() == kept
    assert len(r) == 7
    skipped = [(os.path.basename(os.fspath(p)), k, f) for p, k, f in r.skipped]
    assert skipped == [("a.tar", "ga/k002", "cls"), ("b.tar", "gb/k001", "jpg")]
    reference = tars.webdataset_samples([a, b])
    check_batch(read_all(r), kept, reference, ["jpg", "cls"])
    said = [str(w.message) for w in record]
    assert any(re.search(r"\b2\b", m) for m in said) or (
        len(said) == 2 and all(re.search(r"\b1\b", m) for m in said)
    ), f"skipping over two shards warned {said}"


# --------------------------------------------------------------------------------------------
# ZIP of the same members


def test_zip_of_the_same_members_reads_as_the_tar(shards, raw, tmp_path):
    """ZipReader(fields=...) on a ZIP holding a shard's members (stored and deflated) gives the
    tar's names and batches, whole images and fixed decodes alike."""
    with tarfile.open(shards[1]) as t:
        names = t.getnames()
    zpath = tmp_path / "same.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        for k, n in enumerate(names):
            z.writestr(n, raw[n], zipfile.ZIP_DEFLATED if k % 2 else zipfile.ZIP_STORED)
    fields = ["jpg", "cls", "json", "txt", "npy", "bin"]
    for decode in (None, packread.ImageDecode(40)):
        tr = packread.TarReader(shards[1], fields=fields, decode=decode)
        zr = packread.ZipReader(zpath, fields=fields, decode=decode)
        assert zr.names() == tr.names()
        assert len(zr) == len(tr) == 14
        idx = [13, 0, 5, 5]
        got, want = zr.batch(idx), tr.batch(idx)
        assert list(got) == list(want) == fields
        for f in fields:
            if isinstance(want[f], np.ndarray):
                assert equal(got[f], want[f]), f
            else:
                assert len(got[f]) == len(want[f])
                assert all(equal(g, w) for g, w in zip(got[f], want[f], strict=True)), f
        # keys() of a reader of fields: the batch keys (the BatchReader protocol), no warning.
        assert tr.keys() == fields
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            assert zr.keys() == fields


# --------------------------------------------------------------------------------------------
# torch


@pytest.mark.parametrize("workers", [0, 2])
def test_pack_dataset_yields_every_key_once_per_epoch(shards, workers):
    """PackDataset over a glob of shards (shuffled, seed 0) with 0 or 2 DataLoader workers:
    each epoch's dict batches hold every sample exactly once (cls is the sample's index), in
    another order each epoch, with the reader's images for those samples."""
    torch = pytest.importorskip("torch")
    from packread.torch import PackDataset

    pattern = os.path.join(os.path.dirname(shards[0]), "shard-*.tar")
    options = {"fields": ["jpg", "cls"], "decode": packread.ImageDecode(32)}
    ds = PackDataset(pattern, batch_size=8, shuffle=True, seed=0, **options)
    reader = packread.TarReader(shards, **options)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    orders = []
    for _ in range(2):
        order = []
        for batch in loader:
            assert isinstance(batch, dict)
            assert list(batch) == ["jpg", "cls"]
            assert isinstance(batch["jpg"], torch.Tensor)
            ids = batch["cls"].tolist()
            assert len(ids) <= 8
            assert np.array_equal(batch["jpg"].numpy(), reader.batch(ids)["jpg"])
            order += ids
        assert sorted(order) == list(range(COUNT))
        orders.append(order)
    assert orders[0] != orders[1]
    assert orders[0] != list(range(COUNT))


@pytest.mark.parametrize("workers", [0, 2])
def test_pack_map_dataset_reads_the_samples_asked_for(shards, workers):
    """PackMapDataset over the shards: a DataLoader's sampler order comes back sample for
    sample (cls is the index), and ds[i] is sample i."""
    torch = pytest.importorskip("torch")
    from packread.torch import PackMapDataset

    ds = PackMapDataset(shards, fields=["jpg", "cls"], decode=packread.ImageDecode(32))
    assert len(ds) == COUNT
    order = np.random.default_rng(3).permutation(COUNT).tolist()
    loader = torch.utils.data.DataLoader(
        ds, batch_size=5, sampler=order, collate_fn=ds.collate_fn, num_workers=workers
    )
    got = []
    for batch in loader:
        assert list(batch) == ["jpg", "cls"]
        assert batch["jpg"].shape[1:] == (32, 32, 3)
        got += batch["cls"].tolist()
    assert got == order
    assert int(ds[17]["cls"]) == 17


# --------------------------------------------------------------------------------------------
# Damaged and hostile archives


def test_bad_tar_error_is_packreads_and_tarfiles():
    assert issubclass(BadTarError, PackreadError)
    assert issubclass(BadTarError, tarfile.ReadError)


def _archives() -> dict[str, bytes]:
    """Small archives of three kinds to cut: a webdataset shard, tarfile's GNU archive
    with ``././@LongLink`` members, and its PAX archive with ``path`` records."""
    samples = [small_sample(i, f"k{i}") for i in range(3)]
    buf = io.BytesIO()
    with webdataset.TarWriter(buf, mtime=tars.MTIME) as w:
        for s in samples:
            w.write(s)
    long = tars.sample_members(long_samples(3))
    return {
        "webdataset": buf.getvalue(),
        "gnu": tars.tar_bytes(long, tarfile.GNU_FORMAT),
        "pax": tars.tar_bytes(long, tarfile.PAX_FORMAT),
    }


@pytest.mark.parametrize("kind", ["webdataset", "gnu", "pax"])
def test_truncated_archives(tmp_path, kind):
    """An archive cut at every block boundary and at odd offsets, read from a file and from
    bytes: a cut inside a member (its headers, a long-name or PAX record, its data) raises
    BadTarError at open. A cut at a member boundary, in the padding after a member's data or
    in the end-of-archive blocks may raise BadTarError (or MissingKeyError where it splits a
    sample's members), and a reader that opens holds only whole members, equal to
    webdataset's; with both end-of-archive blocks kept (only the record padding cut) it must
    open and hold every sample."""
    from webdataset.tariterators import base_plus_ext

    data = _archives()[kind]
    full = tars.write(tmp_path / "full.tar", data)
    reference = tars.webdataset_samples(full)
    members = tars.members_of(data)
    spans = [(m.offset, m.offset_data + m.size) for m in members]
    end = tars.end_of_members(data)
    assert len(data) >= end + 4 * BLOCK
    cuts = set(range(BLOCK, len(data), BLOCK)) | {1, 100, 148, 257, 511}
    for start, stop in spans:
        cuts |= {start + 1, start + 156, start + 300, stop - 1, stop, stop + 1}
    for cut in sorted(c for c in cuts if 0 < c < len(data)):
        inside = any(start < cut < stop for start, stop in spans)
        whole = {base_plus_ext(m.name)[0] for m in members if m.offset_data + m.size <= cut}
        cut_off = {base_plus_ext(m.name)[0] for m in members if m.offset_data + m.size > cut}
        splits = bool(whole & cut_off)  # a sample with members on both sides of the cut
        path = tars.write(tmp_path / f"cut{cut}.tar", data[:cut])
        for src in (path, data[:cut]):
            what = (kind, cut, type(src).__name__)
            try:
                r = packread.TarReader(src)
            except BadTarError:
                assert cut < end + 2 * BLOCK, f"{what}: a whole archive refused"
                continue
            except MissingKeyError:
                assert splits, what
                assert not inside, what
                continue
            assert not inside, f"{what}: a cut inside a member opened"
            keys = r.names()
            assert keys == list(reference)[: len(keys)], what
            assert set(keys) <= whole, what
            if cut >= end + 2 * BLOCK:
                assert keys == list(reference), what
            check_batch(read_all(r), keys, reference, r.keys())


def test_a_header_checksum_mismatch_is_refused(small, tmp_path):
    """A header whose checksum does not match (a name byte changed; the checksum field
    itself damaged), first or later member: BadTarError at open naming the shard."""
    _, data = small
    members = tars.members_of(data)
    for k in (0, 4):
        at = members[k].offset
        for edit in ("name", "field"):
            buf = bytearray(data)
            if edit == "name":
                buf[at + 1] ^= 0x20
            else:
                buf[at + 150] = ord("7") if buf[at + 150] != ord("7") else ord("1")
            path = tars.write(tmp_path / f"chk{k}{edit}.tar", bytes(buf))
            with pytest.raises(BadTarError, match=r"(?i)checksum") as exc:
                packread.TarReader(path)
            assert f"chk{k}{edit}.tar" in str(exc.value), str(exc.value)


@pytest.mark.parametrize("base256", [False, True], ids=["octal", "base256"])
def test_a_size_past_the_end_of_the_file_is_refused(small, tmp_path, base256):
    """A member whose size field (octal digits, or GNU's base-256 with the 0x80 marker; the
    checksum fixed so that only the size lies) runs past the end of the file: BadTarError."""
    _, data = small
    members = tars.members_of(data)
    for k, size in [(1, 1 << 20), (4, 2**33 - 1), (len(members) - 1, 10**9)]:
        buf = bytearray(data)
        tars.set_size(buf, members[k].offset, size, base256)
        assert tars.checksum(bytes(buf[members[k].offset :])) == int(
            bytes(buf[members[k].offset + 148 : members[k].offset + 154]), 8
        )
        path = tars.write(tmp_path / f"size{k}.tar", bytes(buf))
        with pytest.raises(BadTarError, match=rf"size{k}\.tar"):
            packread.TarReader(path)
        with pytest.raises(BadTarError):
            packread.TarReader(bytes(buf))
    # A size that lies short puts the next header inside the member's data.
    jpg = next(m for m in members if m.name.endswith(".jpg") and m.size > BLOCK)
    buf = bytearray(data)
    tars.set_size(buf, jpg.offset, jpg.size - BLOCK, base256)
    with pytest.raises(BadTarError):
        packread.TarReader(tars.write(tmp_path / "short.tar", bytes(buf)))


def test_a_true_base256_size_reads(small, tmp_path):
    """GNU's base-256 size field (0x80, then big-endian) holding the true size reads as the
    octal one does (tarfile writes it for members of 8 GiB and more)."""
    path, data = small
    want = tars.webdataset_samples(path)
    buf = bytearray(data)
    for m in tars.members_of(data):
        tars.set_size(buf, m.offset, m.size, base256=True)
    r = packread.TarReader(tars.write(tmp_path / "b256.tar", bytes(buf)))
    assert r.names() == list(want)
    check_batch(read_all(r), list(want), want, ["cls", "jpg", "txt"])


def _pax_archive() -> tuple[bytes, int]:
    """A PAX archive whose second member has a long name (a ``path`` record), and where that
    member's extended header starts."""
    members = tars.sample_members([small_sample(0, "p0"), small_sample(1, "q" * 120)])
    data = tars.tar_bytes(members, tarfile.PAX_FORMAT)
    m = next(m for m in tars.members_of(data) if m.name.startswith("q"))
    assert data[m.offset + 156 : m.offset + 157] == b"x"
    return data, m.offset


@pytest.mark.parametrize("lie", ["longer", "shorter", "past-header"])
def test_a_pax_record_whose_length_lies_is_refused(tmp_path, lie):
    """A PAX record's length that does not end at its newline (longer, shorter, or running past
    the extended header's data): BadTarError."""
    data, at = _pax_archive()
    buf = bytearray(data)
    body = at + BLOCK
    space = buf.index(b" ", body)
    length = int(buf[body:space])
    assert buf[body + length - 1 : body + length] == b"\n"
    digits = space - body
    new = {"longer": length + 3, "shorter": length - 4, "past-header": 10**digits - 1}[lie]
    assert len(str(new)) == digits
    buf[body:space] = str(new).encode()
    with pytest.raises(BadTarError, match=r"pax\.tar"):
        packread.TarReader(tars.write(tmp_path / "pax.tar", bytes(buf)))


def test_a_pax_size_record_past_the_end_is_refused(tmp_path):
    """A PAX ``size`` record larger than the file (the ustar header's size aside):
    BadTarError; Python's tarfile cannot read it either."""
    ti = tars.member("k1.txt", b"abc")
    ti.pax_headers = {"size": str(10**9)}
    data = tars.tar_bytes(
        [("k0.txt", b"zero"), (ti, b"abc"), ("k2.txt", b"two")], tarfile.PAX_FORMAT
    )
    assert b" size=1000000000\n" in data
    with pytest.raises(tarfile.ReadError):
        tars.members_of(data)
    with pytest.raises(BadTarError):
        packread.TarReader(tars.write(tmp_path / "paxsize.tar", data))


def test_a_gnu_long_name_as_the_last_member_is_refused(tmp_path):
    """A GNU ``././@LongLink`` member with no member after it (then the end-of-archive
    blocks): BadTarError."""
    long = "L" * 150 + ".txt"
    data = tars.tar_bytes([("k0.txt", b"zero"), (long, b"long")], tarfile.GNU_FORMAT)
    m = tars.members_of(data)[1]
    assert data[m.offset + 156 : m.offset + 157] == b"L"
    header = m.offset_data - BLOCK  # the member's own header, after the long name's blocks
    cut = data[:header] + bytes(2 * BLOCK)
    cut += bytes(-len(cut) % tarfile.RECORDSIZE)
    with pytest.raises(BadTarError, match=r"lastlong\.tar"):
        packread.TarReader(tars.write(tmp_path / "lastlong.tar", cut))


def test_a_key_twice_in_one_shard_is_refused(tmp_path):
    """A key whose members are not adjacent, or the same field twice: BadTarError naming the
    key (webdataset would read two samples of one key, or stop)."""
    apart = [("dup/k1.cls", b"1"), ("dup/k2.cls", b"2"), ("dup/k1.txt", b"one")]
    twice = [("dup/k1.cls", b"1"), ("dup/k1.cls", b"1"), ("dup/k2.cls", b"2")]
    for name, members in (("apart", apart), ("twice", twice)):
        path = tars.write(tmp_path / f"{name}.tar", tars.tar_bytes(members))
        with pytest.raises(BadTarError, match="dup/k1"):
            packread.TarReader(path, fields=["cls"])


def test_a_key_in_two_shards_is_inconsistent(tmp_path):
    """The same key in two shards: InconsistentError naming both shards."""
    x = tars.write(tmp_path / "x.tar", tars.tar_bytes([("k0.cls", b"0"), ("k1.cls", b"1")]))
    y = tars.write(tmp_path / "y.tar", tars.tar_bytes([("k1.cls", b"1"), ("k2.cls", b"2")]))
    with pytest.raises(InconsistentError) as exc:
        read_all(packread.TarReader([x, y]))
    assert "x.tar" in str(exc.value), str(exc.value)
    assert "y.tar" in str(exc.value), str(exc.value)


def test_zero_length_members(tmp_path):
    """Zero-length members take no data blocks and do not shift the members after them: b""
    and "" for bytes and text; an error of packread's for an image or an int."""
    jpg = tars.jpeg(tars.crop(2, (24, 32)))
    members = [
        ("z0.bin", b""),
        ("z0.txt", b""),
        ("z0.jpg", b""),
        ("z0.cls", b""),
        ("z1.bin", b"\x00\x01"),
        ("z1.txt", b"one"),
        ("z1.jpg", jpg),
        ("z1.cls", b"1"),
    ]
    path = tars.write(tmp_path / "zero.tar", tars.tar_bytes(members))
    r = packread.TarReader(path, fields=["bin", "txt"])
    assert r.names() == ["z0", "z1"]
    got = read_all(r)
    assert got["bin"] == [b"", b"\x00\x01"]
    assert got["txt"] == ["", "one"]
    with pytest.raises((DecodeError, BadTarError)):
        read_all(packread.TarReader(path, fields=["jpg"]))
    # API.md names InvalidArgumentError or InconsistentError; DecodeError (a ValueError too,
    # naming the member) is what a member that holds no integer label is.
    with pytest.raises((InvalidArgumentError, InconsistentError, DecodeError), match=r"z0\.cls"):
        read_all(packread.TarReader(path, fields=["cls"]))


def _files(root: pathlib.Path) -> set[str]:
    return {str(p) for p in root.rglob("*")}


def test_dotdot_and_absolute_names_are_only_keys(tmp_path, monkeypatch):
    """Names with ``..`` and absolute paths are keys like any other (webdataset's keys), read
    from the archive; nothing is extracted or written, in the working folder or where the
    names point."""
    target = tmp_path / "outside"
    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    absolute = str(target / "evil")
    members = [
        ("../escape.txt", b"up one"),
        (f"{absolute}.txt", b"absolute"),
        ("a/../../up.txt", b"up two"),
        ("../../outside/far.txt", b"far"),
        ("ok.txt", b"fine"),
    ]
    path = tars.write(tmp_path / "evil.tar", tars.tar_bytes(members))
    monkeypatch.chdir(work)
    before = _files(tmp_path)
    reference = tars.webdataset_samples(path)
    keys = ["../escape", absolute, "a/../../up", "../../outside/far", "ok"]
    assert list(reference) == keys
    r = packread.TarReader(path)
    assert r.names() == keys
    assert read_all(r)["txt"] == ["up one", "absolute", "up two", "far", "fine"]
    assert pickle.loads(pickle.dumps(r))[1]["txt"] == "absolute"
    assert _files(tmp_path) == before
    assert not target.exists()  # where the absolute and the ../../outside names point


@pytest.mark.parametrize("name", ["x.tar.gz", "x.tgz", "gzipped.tar"])
def test_gzipped_tars_are_refused_with_the_convert_command(small, tmp_path, name):
    """A gzip-compressed tar (by suffix or by its gzip magic under a .tar name) cannot be read
    at random: UnsupportedError saying to run ``packread convert``."""
    _, data = small
    gz = gzip.compress(data)
    path = tars.write(tmp_path / name, gz)
    with pytest.raises(UnsupportedError, match="packread convert"):
        packread.TarReader(path)
    with pytest.raises(UnsupportedError, match="packread convert"):
        packread.TarReader(gz)


def test_links_and_special_members_are_skipped(tmp_path):
    """Symbolic and hard links (one pointing out of the archive), directories, FIFOs and
    devices are no samples, never followed: only the regular members' key is read, as
    webdataset reads it."""
    jpg = tars.jpeg(tars.crop(4, (24, 32)))
    members = [
        ("a.jpg", jpg),
        ("a.cls", b"7"),
        (tars.member("b.jpg", kind=tarfile.SYMTYPE, linkname="a.jpg"), b""),
        (tars.member("b.cls", kind=tarfile.SYMTYPE, linkname="/etc/hostname"), b""),
        (tars.member("c.jpg", kind=tarfile.LNKTYPE, linkname="a.jpg"), b""),
        (tars.member("c.cls", kind=tarfile.LNKTYPE, linkname="a.cls"), b""),
        (tars.member("d.dir", kind=tarfile.DIRTYPE), b""),
        (tars.member("e.fifo", kind=tarfile.FIFOTYPE), b""),
        (tars.member("f.dev", kind=tarfile.CHRTYPE, devmajor=1, devminor=3), b""),
        ("g.jpg", jpg),
        ("g.cls", b"8"),
    ]
    path = tars.write(tmp_path / "links.tar", tars.tar_bytes(members))
    reference = tars.webdataset_samples(path)
    assert list(reference) == ["a", "g"]
    r = packread.TarReader(path)
    assert r.names() == ["a", "g"]
    assert r.keys() == ["cls", "jpg"]
    check_batch(read_all(r), ["a", "g"], reference, ["cls", "jpg"])
    assert sorted(glob.glob(str(tmp_path / "*"))) == [path]


# Inspecting, converting, and the walk kept in the index cache


def test_inspect_reports_keys_fields_missing_fields_and_image_formats(gappy, mixed):
    """``packread inspect`` on tar shards (a glob, a folder, one file): the samples, each field
    with its members and sizes, a ``missing-fields`` note naming the first sample lacking one,
    and the image fields' formats from their headers."""
    from packread.cli.inspect import inspect

    a, b = gappy
    report = inspect(os.path.join(os.path.dirname(a), "*.tar"))
    assert (report.format, report.files, report.samples) == ("tar", 2, 9)
    by_name = {i.name: i for i in report.items}
    assert sorted(by_name) == ["cls", "jpg"]
    assert (by_name["cls"].count, by_name["jpg"].count) == (8, 8)
    with tarfile.open(a) as t:
        cls_a = sum(m.size for m in t.getmembers() if m.name.endswith(".cls"))
    with tarfile.open(b) as t:
        cls_b = sum(m.size for m in t.getmembers() if m.name.endswith(".cls"))
    assert by_name["cls"].data_bytes == cls_a + cls_b
    assert "8 JPEG" in by_name["jpg"].note, by_name["jpg"].note
    notes = {x.message.split("'")[1]: x for x in report.advice}
    assert {x.code for x in report.advice} == {"missing-fields"}
    assert "a.tar: ga/k002" in notes["cls"].message
    assert "b.tar: gb/k001" in notes["jpg"].message
    assert inspect(os.path.dirname(a)).samples == 9
    one = inspect(mixed)
    formats = {i.name: i.note for i in one.items}
    assert "PNG" in formats["png"], formats
    assert "JPEG" in formats["jpg"], formats
    assert "tar shards" in one.render()


@pytest.mark.parametrize("out", ["x.tar", "x.zip"])
def test_convert_turns_a_gzipped_tar_into_one_read_at_random(shards, reference, tmp_path, out):
    """``packread convert x.tar.gz x.tar`` (or ``x.zip``) copies the regular members in order;
    TarReader (or ZipReader with fields=) then reads every sample as webdataset reads the
    original."""
    from packread.cli.convert import convert

    with open(shards[0], "rb") as f:
        gz = tars.write(tmp_path / "x.tar.gz", gzip.compress(f.read()))
    result = convert(gz, str(tmp_path / out), progress=False)
    keys = packread.TarReader(shards[0]).names()
    with open(shards[0], "rb") as f:
        assert result.samples == len(tars.members_of(f.read()))
    fields = ["jpg", "cls", "json", "txt"]
    if out.endswith(".tar"):
        r = packread.TarReader(result.dst, fields=fields)
    else:
        r = packread.ZipReader(result.dst, fields=fields)
        with zipfile.ZipFile(result.dst) as z:
            assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    assert r.names() == keys
    check_batch(read_all(r), keys, reference, fields)
    assert not os.path.exists(result.dst + ".partial")
    with pytest.raises(FileExistsError):
        convert(gz, str(tmp_path / out), progress=False)


def test_a_reopen_takes_the_walk_from_the_index_cache(small, tmp_path):
    """The first open walks the headers and keeps what it found in the index cache; a reopen of
    the same file (same path, size, modification time and inode) walks nothing. Proven by
    damaging a header in place and putting the modification time back: the reopen still reads
    the samples (the walk would refuse the header), while a file with another modification
    time is walked again and refused. A file modified in the last seconds is not kept (a
    rewrite in the same clock tick would share its key), so the file is made older first."""
    _, data = small
    path = tars.write(tmp_path / "cached.tar", data)
    young = packread.Remote(index_cache=str(tmp_path / "young"))
    packread.TarReader(path, remote=young).close()
    assert not (tmp_path / "young" / "index").exists()
    hour_ago = os.stat(path).st_mtime_ns - 3600 * 10**9
    os.utime(path, ns=(hour_ago, hour_ago))
    cache = tmp_path / "cache"
    remote = packread.Remote(index_cache=str(cache))
    first = packread.TarReader(path, remote=remote)
    names, batch = first.names(), read_all(first)
    first.close()
    assert list((cache / "index").iterdir()), "the walk was not kept"
    stat = os.stat(path)
    buf = bytearray(data)
    buf[0] ^= 0x20  # the first header's name: its checksum no longer matches
    with open(path, "r+b") as f:
        f.write(buf[:BLOCK])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = packread.TarReader(path, remote=remote)
    assert again.names() == names
    assert again.batch([0])["txt"] == batch["txt"][:1]
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    with pytest.raises(BadTarError, match="checksum"):
        packread.TarReader(path, remote=remote)
    uncached = packread.Remote(index_cache=False)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(BadTarError, match="checksum"):
        packread.TarReader(path, remote=uncached)


def test_npy_fields_of_different_shapes_read_ragged(tmp_path):
    """``kinds={"npy": "npy-ragged"}``: ``.npy`` members of one dtype and any shapes (C and
    Fortran order, 0-d; big-endian, given in native order as numpy's loaders give it) come
    back as a list equal to ``np.load``'s, or flat as ``(values, offsets, shapes)``; a member of
    another dtype (or byte order) is an InconsistentError naming it; the default ``"npy"``
    kind stacks equal shapes and refuses the others."""
    rng = np.random.default_rng(4)
    arrays = [
        rng.standard_normal((3, 5)).astype(">f4"),
        np.asfortranarray(rng.standard_normal((4, 2)).astype(">f4")),
        np.array(7.5, dtype=">f4"),
        rng.standard_normal((2, 3, 2)).astype(">f4"),
    ]
    samples = [{"__key__": f"r{i}", "npy": tars.npy(a), "cls": i} for i, a in enumerate(arrays)]
    path = tars.write_samples(str(tmp_path / "ragged.tar"), samples)
    r = packread.TarReader(path, fields=["npy", "cls"], kinds={"npy": "npy-ragged"})
    assert r.ragged_keys == ["npy"]
    got = r.batch([3, 0, 2, 1, 0])["npy"]
    for g, i in zip(got, [3, 0, 2, 1, 0], strict=True):
        want = np.load(io.BytesIO(tars.npy(arrays[i])))
        assert g.shape == want.shape, (g.shape, want.shape)
        assert g.dtype == np.dtype("=f4")
        np.testing.assert_array_equal(g, want)
    flat = packread.TarReader(
        path, fields=["npy"], kinds={"npy": "npy-ragged"}, ragged="flat"
    ).batch([1, 2])["npy"]
    values, offsets, shapes = flat
    assert shapes == [(4, 2), ()]
    assert offsets.tolist() == [0, 8, 9]
    np.testing.assert_array_equal(values[:8].reshape(4, 2), arrays[1])
    with pytest.raises(InconsistentError):
        packread.TarReader(path, fields=["npy"]).batch([0, 1])
    other = [*samples, {"__key__": "r9", "npy": tars.npy(np.zeros(3, "<i2")), "cls": 9}]
    bad = tars.write_samples(str(tmp_path / "dtypes.tar"), other)
    with pytest.raises(InconsistentError, match=r"r9\.npy"):
        packread.TarReader(bad, fields=["npy"], kinds={"npy": "npy-ragged"}).batch([0, 4])
