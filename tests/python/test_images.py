"""ImageReader: JPEG, PNG and WebP from ZIP members and ImageFolder trees, decoded on packread's
threads, against PIL (pixels) and torchvision (geometry, folder classes)."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest

import packread
from support.images import INEXACT, files, pil_rgb, rotated

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("skimage")


@pytest.fixture(scope="module")
def encoded() -> dict[str, bytes]:
    return files()


@pytest.fixture(scope="module")
def archive(tmp_path_factory, encoded) -> str:
    """Every file in one ZIP, stored and deflated alternately, with the tutorial's labels."""
    path = str(tmp_path_factory.mktemp("zip") / "images.zip")
    names = sorted(encoded)
    with zipfile.ZipFile(path, "w") as z:
        for k, n in enumerate(names):
            z.writestr(n, encoded[n], zipfile.ZIP_DEFLATED if k % 2 else zipfile.ZIP_STORED)
        z.writestr("dataset.json", json.dumps({"labels": {n: k % 7 for k, n in enumerate(names)}}))
    return path


def assert_close(got: np.ndarray, want: np.ndarray, max_diff: int, mean_diff: float, what) -> None:
    """Pixels within ``max_diff`` levels of ``want`` everywhere, ``mean_diff`` on average."""
    diff = np.abs(got.astype(int) - np.asarray(want).astype(int))
    assert diff.max() <= max_diff, (what, diff.max())
    assert diff.mean() < mean_diff, (what, diff.mean())


def reader_of_one(path: str, name: str, **kw) -> packread.ImageReader:
    with zipfile.ZipFile(path) as z:
        raw = z.read(name)
    with Image.open(io.BytesIO(raw)) as im:
        w, h = im.size
    return packread.ImageReader(
        path, members=[name], labels=False, size=(h, w), resize=min(h, w), **kw
    )


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_pixels_equal_pils_without_resizing(archive, encoded, mode):
    for name, raw in sorted(encoded.items()):
        got = reader_of_one(archive, name, mode=mode).batch([0])[0]
        want = pil_rgb(raw, mode)
        if want.ndim == 2:
            want = want[..., None]
        assert got.shape == want.shape, name
        if any(name.endswith(k) for k in INEXACT):
            # image-webp and libwebp round the lossy (VP8) reconstruction differently.
            assert_close(got, want, 3, 0.5, name)
        else:
            assert np.array_equal(got, want), (name, mode)


def test_eval_crops_equal_torchvision(archive, encoded):
    T = pytest.importorskip("torchvision.transforms")
    names = sorted(encoded)
    for size, resize in [(224, 256), ((120, 96), 130), (32, 40)]:
        r = packread.ImageReader(archive, labels=False, size=size, resize=resize)
        assert r.names() == names
        got = r.batch(range(len(names)))
        tf = T.Compose([T.Resize(resize), T.CenterCrop(size)])
        for k, n in enumerate(names):
            want = np.asarray(tf(Image.open(io.BytesIO(encoded[n])).convert("RGB")))
            assert_close(got[k], want, 2, 0.5, (n, size))


def test_a_center_crop_spanning_a_whole_resized_side_reads(tmp_path):
    # 228x225 -> Resize(224) is 226x224, and CenterCrop(224) spans its whole height: the box
    # in source pixels was computed a hair past the image (225.00000000000003), and refused.
    T = pytest.importorskip("torchvision.transforms")
    rng = np.random.default_rng(3)
    sizes = [(228, 225), (225, 228), (32, 29), (61, 58), (119, 116), (256, 253), (230, 227)]
    zpath = tmp_path / "edges.zip"
    pixels = {}
    with zipfile.ZipFile(zpath, "w") as z:
        for w, h in sizes:
            name = f"{w}x{h}.png"
            pixels[name] = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels[name]).save(buf, "PNG")
            z.writestr(name, buf.getvalue())
    for size in (224, 299):
        decode = packread.ImageDecode(size, resize=size)
        r = packread.ImageReader(zpath, decode=decode, labels=False)
        got = r.batch(range(len(r)))
        tf = T.Compose([T.Resize(size), T.CenterCrop(size)])
        for k, name in enumerate(r.names()):
            want = np.asarray(tf(Image.fromarray(pixels[name])))
            assert_close(got[k], want, 2, 0.5, (name, size))


def test_random_crops_equal_torchvision_on_their_boxes_and_repeat_per_epoch(archive, encoded):
    F = pytest.importorskip("torchvision.transforms.functional")
    names = sorted(encoded)
    r = packread.ImageReader(archive, labels=False, size=64, crop="random", flip=True, seed=5)
    flips = 0
    for epoch in (0, 3):
        got = r.batch(range(len(names)), epoch=epoch)
        assert np.array_equal(got, r.batch(range(len(names)), epoch=epoch))
        for k, n in enumerate(names):
            top, left, h, w, flipped = r.crop_params(k, epoch)
            im = Image.open(io.BytesIO(encoded[n])).convert("RGB")
            want = F.resized_crop(im, top, left, h, w, [64, 64])
            if flipped:
                want = F.hflip(want)
                flips += 1
            assert_close(got[k], want, 2, 0.5, (n, epoch))
    assert 0 < flips < 2 * len(names)
    other = r.batch(range(len(names)), epoch=4)
    assert not np.array_equal(other, r.batch(range(len(names)), epoch=3))
    again = packread.ImageReader(archive, labels=False, size=64, crop="random", flip=True, seed=5)
    assert np.array_equal(again.batch([2, 0], epoch=3), r.batch([2, 0], epoch=3))


def test_layout_and_normalization(archive, encoded):
    base = packread.ImageReader(archive, labels=False, size=48)
    u8 = base.batch([0, 3])
    nchw = packread.ImageReader(archive, labels=False, size=48, layout="NCHW").batch([0, 3])
    assert np.array_equal(nchw, u8.transpose(0, 3, 1, 2))
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    f32 = packread.ImageReader(archive, labels=False, size=48, normalize=(mean, std)).batch([0, 3])
    want = ((u8.astype(np.float32) / 255 - np.float32(mean)) / np.float32(std)).astype(np.float32)
    assert f32.dtype == np.float32
    assert np.allclose(f32, want, atol=1e-6)
    f16 = packread.ImageReader(
        archive, labels=False, size=48, normalize=(mean, std, "float16"), layout="NCHW"
    ).batch([0, 3])
    assert f16.dtype == np.float16
    assert np.array_equal(f16, want.transpose(0, 3, 1, 2).astype(np.float16))


def test_labels_from_the_tutorials_json_both_forms(tmp_path, encoded):
    names = sorted(encoded)[:6]
    for form in ("dict", "pairs"):
        table = {n: k * 3 for k, n in enumerate(names)}
        doc = {"labels": table if form == "dict" else [[n, v] for n, v in table.items()]}
        path = tmp_path / f"{form}.zip"
        with zipfile.ZipFile(path, "w") as z:
            for n in reversed(names):
                z.writestr(n, encoded[n])
            z.writestr("dataset.json", json.dumps(doc))
        r = packread.ImageReader(path, size=16)
        assert r.names() == names  # name order, as the tutorial sorts them
        assert r.labels.dtype == np.int64
        assert r.labels.tolist() == [table[n] for n in names]
        assert r.classes is None
    doc["labels"] = doc["labels"][1:]
    with zipfile.ZipFile(tmp_path / "missing.zip", "w") as z:
        for n in names:
            z.writestr(n, encoded[n])
        z.writestr("dataset.json", json.dumps(doc))
    with pytest.raises(packread.MissingKeyError, match=names[0]):
        packread.ImageReader(tmp_path / "missing.zip", size=16)


def _tree(root, encoded) -> None:
    names = sorted(encoded)
    for k, n in enumerate(names):
        cls = ["n02", "a_class", "n01", "zz"][k % 4]
        sub = os.path.join(root, cls, "deep" if k % 5 == 0 else "")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"{k:03d}_{n}"), "wb") as f:
            f.write(encoded[n])
    with open(os.path.join(root, "n01", "notes.txt"), "w") as f:
        f.write("not an image")


def test_image_folder_trees_label_as_torchvision(tmp_path, encoded):
    datasets = pytest.importorskip("torchvision.datasets")
    root = str(tmp_path / "train")
    _tree(root, encoded)
    ref = datasets.ImageFolder(root)
    r = packread.ImageReader(root, size=24)
    assert r.classes == ref.classes
    assert r.class_to_idx == ref.class_to_idx
    assert r.names() == [p for p, _ in ref.samples]
    assert r.labels.tolist() == ref.targets
    batch = r.batch(range(len(r)))
    assert batch["labels"].tolist() == ref.targets  # a batch carries its labels
    got = batch["images"]
    T = pytest.importorskip("torchvision.transforms")
    tf = T.Compose([T.Resize(24), T.CenterCrop(24)])
    for k in (0, 7, len(r) - 1):
        want = np.asarray(tf(ref[k][0]))
        assert_close(got[k], want, 2, 0.5, k)
    # The same tree packed in one archive (below a common folder, as ImageNet's train.zip).
    zpath = tmp_path / "train.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        for p, _ in ref.samples:
            z.write(p, "train/" + os.path.relpath(p, root))
    rz = packread.ImageReader(zpath, size=24)
    assert rz.classes == ref.classes
    assert rz.labels.tolist() == ref.targets
    assert [n[len("train/") :] for n in rz.names()] == [
        os.path.relpath(p, root) for p, _ in ref.samples
    ]
    assert np.array_equal(rz.batch(range(len(rz)))["images"], got)


@pytest.mark.parametrize("orientation", [1, 2, 3, 4, 5, 6, 7, 8])
def test_exif_orientation_as_pil(tmp_path, orientation):
    from PIL import ImageOps

    raw = rotated(orientation)
    path = tmp_path / "r.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("r.jpg", raw)
    with Image.open(io.BytesIO(raw)) as im:
        upright = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        stored = np.asarray(im.convert("RGB"))
    for flag, want in ((True, upright), (False, stored)):
        h, w = want.shape[:2]
        got = packread.ImageReader(
            path, labels=False, size=(h, w), resize=min(h, w), exif_transpose=flag
        ).batch([0])[0]
        assert np.array_equal(got, want), (orientation, flag)


def _bad_inputs(encoded) -> dict[str, bytes]:
    good = encoded["chelsea.q90.jpg"]
    png = encoded["chelsea.rgb.png"]
    bad = {f"cut{p:02d}.jpg": good[: len(good) * p // 10] for p in range(1, 10)}
    bad.update({f"cut{p:02d}.png": png[: len(png) * p // 10] for p in range(1, 10)})
    bad["empty.jpg"] = b""
    bad["garbage.jpg"] = bytes(range(256)) * 20
    bad["text.png"] = b"not a png at all"
    crc = bytearray(png)
    crc[29] ^= 0xFF  # the IHDR chunk's CRC-32
    bad["bad_crc.png"] = bytes(crc)
    huge = bytearray(png[:33])
    huge[16:24] = (60000).to_bytes(4, "big") * 2  # IHDR: 60000 x 60000
    import zlib

    huge[29:33] = zlib.crc32(bytes(huge[12:29])).to_bytes(4, "big")
    bad["huge.png"] = bytes(huge) + png[33:]
    return bad


def test_bad_images_raise_decode_errors_naming_the_member(tmp_path, encoded):
    bad = _bad_inputs(encoded)
    path = tmp_path / "bad.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("good.jpg", encoded["chelsea.q90.jpg"])
        for n, raw in bad.items():
            z.writestr(n, raw)
    r = packread.ImageReader(path, labels=False, size=32)
    names = r.names()
    assert issubclass(packread.DecodeError, packread.PackreadError)
    assert issubclass(packread.DecodeError, ValueError)
    for k, n in enumerate(names):
        if n == "good.jpg":
            continue
        with pytest.raises(packread.DecodeError) as exc:
            r.batch([k])
        assert n in str(exc.value), str(exc.value)
        assert "bad.zip" in str(exc.value), str(exc.value)
    with pytest.raises(packread.DecodeError, match="too large"):
        r.batch([names.index("huge.png")])
    with pytest.raises(packread.DecodeError, match="truncated"):
        r.batch([names.index("cut05.jpg")])


def test_members_declaring_huge_sizes_are_refused_before_any_allocation(tmp_path, encoded):
    from support.zipcraft import patch_both

    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("ok.jpg", encoded["chelsea.q90.jpg"])
        z.writestr("bomb.jpg", encoded["chelsea.q90.jpg"])
    path = tmp_path / "bomb.zip"
    path.write_bytes(patch_both(raw.getvalue(), "bomb.jpg", usize=3 << 30))
    r = packread.ImageReader(path, labels=False, size=16)
    assert r.batch([r.names().index("ok.jpg")]).shape == (1, 16, 16, 3)
    with pytest.raises(packread.LimitExceededError, match=r"bomb\.jpg"):
        r.batch([r.names().index("bomb.jpg")])


def test_skip_replaces_bad_images_deterministically_and_reports_them(tmp_path, encoded):
    path = tmp_path / "some_bad.zip"
    good = sorted(encoded)[:5]
    with zipfile.ZipFile(path, "w") as z:
        for n in good:
            z.writestr("img/" + n, encoded[n])
        z.writestr("img/broken1.jpg", encoded[good[0]][:500])
        z.writestr("img/broken2.png", b"\x89PNG\r\n\x1a\n garbage")
    strict = packread.ImageReader(path, labels=False, size=20)
    r = packread.ImageReader(path, labels=False, size=20, on_error="skip")
    names = r.names()
    b1 = names.index("img/broken1.jpg")
    b2 = names.index("img/broken2.png")
    with pytest.warns(RuntimeWarning, match="did not decode"):
        got = r.batch(range(len(names)))

    # The next sample in index order that decodes stands in (wrapping around).
    def stand_in(i):
        j = (i + 1) % len(names)
        while j in (b1, b2):
            j = (j + 1) % len(names)
        return j

    ok = [i for i in range(len(names)) if i not in (b1, b2)]
    assert np.array_equal(got[ok], strict.batch(ok))
    for b in (b1, b2):
        assert np.array_equal(got[b], strict.batch([stand_in(b)])[0])
    assert sorted(r.errors) == sorted([b1, b2])
    assert "truncated" in r.errors[b1]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per reader
        again = r.batch(range(len(names)))
    assert np.array_equal(again, got)


def test_readers_pickle_with_their_options(archive):
    r = packread.ImageReader(archive, labels=False, size=(20, 30), crop="random", seed=9)
    copy = pickle.loads(pickle.dumps(r))
    assert copy.names() == r.names()
    assert np.array_equal(copy.batch([1, 4], epoch=2), r.batch([1, 4], epoch=2))


def test_arguments_are_checked(archive, tmp_path):
    for kw in (
        {"size": 0},
        {"size": 16, "crop": "middle"},
        {"size": 16, "layout": "HWC"},
        {"size": 16, "mode": "CMYK"},
        {"size": 16, "on_error": "ignore"},
        {"size": 16, "normalize": ((0.5,), (0.0,))},
        {"size": 16, "scale": (0.5, 0.1)},
    ):
        with pytest.raises(packread.InvalidArgumentError):
            packread.ImageReader(archive, labels=False, **kw)
    r = packread.ImageReader(archive, labels=False, size=16)
    with pytest.raises(packread.IndexOutOfRangeError):
        r.batch([len(r)])
    with pytest.raises(packread.InvalidArgumentError):
        r.batch([0], epoch=-1)
    out = np.empty((2, 16, 16, 3), np.uint8)
    assert r.batch([0, 1], out=out) is out
