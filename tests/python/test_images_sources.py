"""Encoded images in HDF5 rows (h5py vlen bytes, opaque rows, uint8 rows, PyTables VLArray) and
images at their own sizes (``size=None``), compared with PIL on the same bytes."""

from __future__ import annotations

import io
import pickle
import warnings
import zipfile

import numpy as np
import pytest

import packread
from support.images import INEXACT, files, pil_rgb, rotated

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("skimage")
h5py = pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def encoded() -> dict[str, bytes]:
    return files()


def _equal_or_close(got: np.ndarray, want: np.ndarray, name: str) -> None:
    assert got.shape == want.shape, (name, got.shape, want.shape)
    if any(name.endswith(k) for k in INEXACT):
        diff = np.abs(got.astype(int) - want.astype(int))
        assert diff.max() <= 3, name
        assert diff.mean() < 0.5, name
    else:
        assert np.array_equal(got, want), name


def _padded(blobs: list[bytes]) -> tuple[int, list[bytes]]:
    width = max(len(b) for b in blobs)
    return width, [b + b"\0" * (width - len(b)) for b in blobs]


@pytest.fixture(scope="module")
def hdf5_images(tmp_path_factory, encoded) -> tuple[str, list[str]]:
    """One file holding the same images four ways: vlen uint8 (chunked, gzip), opaque rows,
    uint8 rows (both padded with zeros) and a PyTables VLArray in a second file."""
    names = sorted(encoded)
    blobs = [encoded[n] for n in names]
    root = tmp_path_factory.mktemp("h5")
    path = str(root / "images.h5")
    with h5py.File(path, "w") as f:
        d = f.create_dataset(
            "jpegs", (len(blobs),), dtype=h5py.vlen_dtype(np.uint8), chunks=(4,), compression="gzip"
        )
        for k, b in enumerate(blobs):
            d[k] = np.frombuffer(b, np.uint8)
        width, padded = _padded(blobs)
        opaque = np.zeros(len(blobs), dtype=f"V{width}")
        for k, b in enumerate(padded):
            opaque[k] = np.void(b)
        f["opaque"] = opaque
        f["rows"] = np.frombuffer(b"".join(padded), np.uint8).reshape(len(blobs), width)
        f["labels"] = (np.arange(len(blobs)) * 7 % 5).astype(np.int32)
        f["short_labels"] = np.arange(3)
        f["strings"] = np.array([b"a", b"b"], dtype=h5py.string_dtype("ascii"))
    tables = pytest.importorskip("tables")
    with tables.open_file(str(root / "pytables.h5"), "w") as t:
        v = t.create_vlarray("/", "images", tables.UInt8Atom())
        for b in blobs:
            v.append(np.frombuffer(b, np.uint8))
    return path, names


@pytest.mark.parametrize("dataset", ["jpegs", "opaque", "rows", "pytables"])
def test_hdf5_rows_decode_as_pil_does(hdf5_images, encoded, dataset):
    path, names = hdf5_images
    if dataset == "pytables":
        path, dataset = path.replace("images.h5", "pytables.h5"), "images"
        labels = None
    else:
        labels = "labels"
    r = packread.ImageReader(path, dataset=dataset, labels=labels, size=None, arrays="images")
    assert len(r) == len(names)
    order = list(range(len(names)))[::-1]
    got = r.batch(order)
    for k, img in zip(order, got, strict=True):
        _equal_or_close(img, pil_rgb(encoded[names[k]]), names[k])
    if labels is not None:
        assert r.labels.dtype == np.int64
        assert np.array_equal(r.labels, np.arange(len(names)) * 7 % 5)
    # Fixed-size batches equal the same images read from a ZIP (same crops: same seed, index).
    zpath = path + ".zip"
    with zipfile.ZipFile(zpath, "w") as z:
        for n in names:
            z.writestr(n, encoded[n])
    for kw in ({"size": 24}, {"size": (20, 28), "crop": "random", "flip": True, "seed": 3}):
        from_h5 = packread.ImageReader(path, dataset=dataset, arrays="images", **kw)
        from_zip = packread.ImageReader(zpath, labels=False, **kw)
        idx = [5, 0, 2, 2, len(names) - 1]
        assert np.array_equal(from_h5.batch(idx, epoch=4), from_zip.batch(idx, epoch=4))
    copy = pickle.loads(pickle.dumps(from_h5))
    assert np.array_equal(copy.batch([1, 3], epoch=1), from_h5.batch([1, 3], epoch=1))
    assert r.encoded(2).startswith(encoded[names[2]])


def test_hdf5_sources_that_cannot_hold_images_are_refused(hdf5_images):
    path, _ = hdf5_images
    for ds, why in (("labels", "rows of shape"), ("strings", "first NUL")):
        with pytest.raises(packread.InvalidArgumentError, match=why):
            packread.ImageReader(path, dataset=ds, size=8)
    with pytest.raises(packread.InvalidArgumentError, match="3 labels for"):
        packread.ImageReader(path, dataset="jpegs", labels="short_labels", size=8)
    with pytest.raises(packread.InvalidArgumentError, match="images="):
        packread.ImageReader(path, size=8)
    with pytest.raises(packread.MissingKeyError):
        packread.ImageReader(path, dataset="nope", size=8)


def test_bad_images_in_hdf5_rows_name_the_dataset_and_sample(tmp_path, encoded):
    good = encoded["chelsea.q90.jpg"]
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("images", (4,), dtype=h5py.vlen_dtype(np.uint8))
        d[0] = np.frombuffer(good, np.uint8)
        d[1] = np.frombuffer(good[: len(good) // 2], np.uint8)
        d[2] = np.zeros(0, np.uint8)
        d[3] = np.frombuffer(b"garbage" * 40, np.uint8)
    r = packread.ImageReader(path, dataset="images", size=16)
    assert r.batch([0]).shape == (1, 16, 16, 3)
    for k, why in ((1, "truncated"), (2, "truncated"), (3, "unsupported")):
        with pytest.raises(packread.DecodeError, match=why) as exc:
            r.batch([0, k])
        assert f"bad.h5:/images (sample {k})" in str(exc.value), str(exc.value)
    skip = packread.ImageReader(path, dataset="images", size=16, on_error="skip")
    with pytest.warns(RuntimeWarning):
        got = skip.batch([0, 1, 2, 3])
    # Every broken row stands in for the next one that decodes: here row 0, wrapping around.
    assert all(np.array_equal(got[k], got[0]) for k in (1, 2, 3))
    assert sorted(skip.errors) == [1, 2, 3]


def test_own_sizes_as_a_list_or_flat(tmp_path, encoded):
    names = sorted(encoded)
    path = tmp_path / "all.zip"
    with zipfile.ZipFile(path, "w") as z:
        for k, n in enumerate(names):
            z.writestr(n, encoded[n], zipfile.ZIP_DEFLATED if k % 2 else zipfile.ZIP_STORED)
    idx = [3, 0, 3, len(names) - 1]
    for mode in ("RGB", "L"):
        r = packread.ImageReader(path, labels=False, size=None, mode=mode)
        assert r.shape == (None, None, len(mode))
        got = r.batch(idx)
        assert isinstance(got, list)
        assert len(got) == len(idx)
        for k, img in zip(idx, got, strict=True):
            want = pil_rgb(encoded[names[k]], mode)
            _equal_or_close(img, want.reshape(*want.shape[:2], -1), names[k])
    flat = packread.ImageReader(path, labels=False, size=None, ragged="flat", layout="NCHW")
    values, offsets, shapes = flat.batch(idx)
    assert values.dtype == np.uint8
    assert offsets.dtype == np.int64
    assert offsets[0] == 0
    assert offsets[-1] == values.size
    assert shapes.shape == (len(idx), 3)
    for j, k in enumerate(idx):
        img = values[offsets[j] : offsets[j + 1]].reshape(shapes[j])
        _equal_or_close(img.transpose(1, 2, 0), pil_rgb(encoded[names[k]]), names[k])
    norm = packread.ImageReader(path, labels=False, size=None, normalize=(0.5, 0.25))
    plain = packread.ImageReader(path, labels=False, size=None)
    for a, b in zip(norm.batch(idx), plain.batch(idx), strict=True):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, (b / 255 - 0.5) / 0.25, rtol=1e-5, atol=1e-5)
    flips = packread.ImageReader(path, labels=False, size=None, flip=True, seed=1)
    seen = set()
    for epoch in range(8):
        img = flips.batch([0], epoch=epoch)[0]
        ref = plain.batch([0])[0]
        assert np.array_equal(img, ref) or np.array_equal(img, ref[:, ::-1])
        seen.add(np.array_equal(img, ref))
    assert seen == {True, False}
    with pytest.raises(packread.InvalidArgumentError):
        plain.batch([0], out=np.empty((1, 4, 4, 3), np.uint8))


def test_own_sizes_turn_upright_and_skip_bad_images(tmp_path, encoded):
    path = tmp_path / "mixed.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a_rot6.jpg", rotated(6))
        cut = encoded["chelsea.q90.jpg"]
        z.writestr("b_bad.jpg", cut[: len(cut) // 2])
        z.writestr("c_ok.png", encoded["chelsea.rgb.png"])
    upright = packread.ImageReader(path, labels=False, size=None, exif_transpose=True)
    with Image.open(io.BytesIO(rotated(6))) as im:
        from PIL import ImageOps

        want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    assert np.array_equal(upright.batch([0])[0], want)
    with pytest.raises(packread.DecodeError, match=r"b_bad\.jpg"):
        upright.batch([0, 1])
    skip = packread.ImageReader(path, labels=False, size=None, on_error="skip")
    with pytest.warns(RuntimeWarning, match="did not decode"):
        got = skip.batch([1, 0, 1])
    ok = pil_rgb(encoded["chelsea.rgb.png"])
    assert np.array_equal(got[0], ok)
    assert np.array_equal(got[2], ok)
    assert list(skip.errors) == [1]
    assert "truncated" in skip.errors[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.array_equal(skip.batch([1])[0], ok)


def test_draft_decodes_large_jpegs_scaled_within_its_stated_tolerance(tmp_path):
    from skimage import data

    T = pytest.importorskip("torchvision.transforms")
    tiles = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    tiles = [np.asarray(Image.fromarray(t).resize((600, 450))) for t in tiles]
    mosaic = np.concatenate(
        [np.concatenate(tiles[:2], 1), np.concatenate(tiles[2:], 1)], 0
    )  # 1200 x 900
    raw = io.BytesIO()
    Image.fromarray(mosaic).resize((2400, 1800)).save(raw, "JPEG", quality=90)
    path = tmp_path / "big.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("big.jpg", raw.getvalue())
    want = np.asarray(
        T.CenterCrop(64)(T.Resize(72)(Image.open(io.BytesIO(raw.getvalue())).convert("RGB")))
    ).astype(int)
    exact = packread.ImageReader(path, labels=False, size=64, resize=72).batch([0])[0]
    draft = packread.ImageReader(path, labels=False, size=64, resize=72, draft=True).batch([0])[0]
    exact_diff = np.abs(exact.astype(int) - want)
    draft_diff = np.abs(draft.astype(int) - want)
    assert exact_diff.max() <= 2
    assert draft_diff.max() <= 7
    assert draft_diff.mean() < 0.6
    # The scaled decode really ran: its pixels are not the full decode's.
    assert not np.array_equal(draft, exact)


def test_progressive_jpegs_with_too_many_scans_are_refused(tmp_path, encoded):
    """A scan bomb: one scan of a progressive JPEG repeated 600 times (BAD_INPUTS 51)."""
    b = io.BytesIO()
    Image.open(io.BytesIO(encoded["chelsea.q90.jpg"])).save(b, "JPEG", progressive=True)
    raw = b.getvalue()
    last_scan = raw.rindex(b"\xff\xda")
    end = raw.rindex(b"\xff\xd9")
    bomb = raw[:end] + raw[last_scan:end] * 600 + b"\xff\xd9"
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ok.jpg", raw)
        z.writestr("bomb.jpg", bomb)
    r = packread.ImageReader(path, labels=False, size=16)
    assert r.batch([r.names().index("ok.jpg")]).shape == (1, 16, 16, 3)
    with pytest.raises(packread.DecodeError, match="more than 500 scans"):
        r.batch([r.names().index("bomb.jpg")])


def test_malformed_labels_members_are_refused_saying_the_forms(tmp_path, encoded):
    """BAD_INPUTS 50."""
    for k, doc in enumerate((b"not json", b'{"foo": 1}', b'{"labels": 5}', b'{"labels": [[1]]}')):
        path = tmp_path / f"bad{k}.zip"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("a.jpg", encoded["chelsea.q90.jpg"])
            z.writestr("dataset.json", doc)
        with pytest.raises(packread.InvalidArgumentError, match="labels must be JSON") as exc:
            packread.ImageReader(path, size=16)
        assert "dataset.json" in str(exc.value)
