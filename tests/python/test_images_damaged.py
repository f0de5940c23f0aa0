"""Damaged images (BAD_INPUTS 60-66): a damaged JPEG or PNG decodes exactly as PIL decodes it
(its pixels bit for bit, or a DecodeError where PIL raises), and leaves nothing behind: the
good images decoded after it on the same thread are bit for bit what they are alone. The
inputs are PIL's files damaged at test time (support/damage.py), the shapes of the defects the
damaged-image runs found, and seeded random damage."""

from __future__ import annotations

import io
import json
import os
import warnings
import zipfile

import numpy as np
import pytest

import packread
from support.damage import (
    damaged_jpegs,
    good_jpegs,
    pil_result,
    png16_with_trns,
    png_short_palette,
)

pytest.importorskip("PIL.Image")
pytest.importorskip("skimage")

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "damaged")

#: What PIL does with each named mutation: the test fails, rather than passes vacuously, if a
#: mutation stops damaging the file the way it is meant to.
DECODES = {"no_dht", "junk_before_sos", "adobe_unknown_transform", "marker_mid_scan"}
REFUSED = {
    "no_eoi",
    "poison_dqt",
    "cut_before_sos",
    "no_dqt",
    "fatal_after_warning",
    "progressive_cut",
    "progressive_no_eoi",
}


@pytest.fixture(scope="module")
def damaged() -> dict[str, bytes]:
    return damaged_jpegs(random_count=60)


@pytest.fixture(scope="module")
def good() -> dict[str, bytes]:
    return good_jpegs()


def _zip(path, members: list[tuple[str, bytes]]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members:
            z.writestr(name, data)
    return str(path)


def _outcome(reader: packread.ImageReader, i: int) -> np.ndarray | Exception:
    try:
        return reader.batch([i])[0]
    except packread.DecodeError as e:
        return e


def _same(got: np.ndarray | Exception, want: np.ndarray | Exception) -> bool:
    if isinstance(want, Exception):
        return isinstance(got, Exception)
    return isinstance(got, np.ndarray) and got.shape == want.shape and np.array_equal(got, want)


def test_damaged_jpegs_decode_as_pil_decodes_them(tmp_path, damaged):
    """BAD_INPUTS 61: pixels where PIL gives pixels (warnings recovered from), a DecodeError
    where PIL raises (a fatal error, even after a warning; data ending before the last row)."""
    names = sorted(damaged)
    path = _zip(tmp_path / "damaged.zip", [(f"{n}.jpg", damaged[n]) for n in names])
    r = packread.ImageReader(path, labels=False, size=None, num_threads=1)
    refused = set()
    for k, n in enumerate(names):
        want = pil_result(damaged[n])
        got = _outcome(r, k)
        assert _same(got, want), (n, got if isinstance(got, Exception) else "pixels", want)
        if isinstance(got, Exception):
            refused.add(n)
            assert f"{n}.jpg" in str(got), str(got)
    assert {n for n in names if n in DECODES | REFUSED} == DECODES | REFUSED
    assert refused >= REFUSED, REFUSED - refused
    assert not (DECODES & refused), DECODES & refused
    assert "truncated" in str(_outcome(r, names.index("progressive_cut")))
    # The random damage both decodes and fails: the comparison covers both sides.
    randoms = [n for n in names if n.startswith("random")]
    assert 0 < len(refused.intersection(randoms)) < len(randoms)


@pytest.mark.parametrize(
    "options",
    [
        {"size": None},
        {"size": 48},
        {"size": 48, "crop": "random", "flip": True},
        {"size": 48, "draft": True},
        {"size": 48, "mode": "L"},
    ],
    ids=["whole", "eval", "random", "draft", "gray"],
)
def test_damaged_jpegs_leave_no_state_for_the_next_image(tmp_path, damaged, good, options):
    """BAD_INPUTS 60: each damaged JPEG read between two good ones on one thread (in turns and
    in one batch), and the good ones compared bit for bit with what they are read alone."""
    first, second = good["baseline"], good["progressive"]
    # The good images alone, at the places they have below (random crops are drawn per place).
    ref = _zip(tmp_path / "ref.zip", [("0.jpg", first), ("1.jpg", first), ("2.jpg", second)])
    ref_reader = packread.ImageReader(ref, labels=False, num_threads=1, **options)
    alone = {0: ref_reader.batch([0])[0], 2: ref_reader.batch([2])[0]}
    if options == {"size": None}:
        assert np.array_equal(alone[0], pil_result(first))
    for n, bad in sorted(damaged.items()):
        path = _zip(
            tmp_path / f"{n}.zip",
            [("0_first.jpg", first), ("1_bad.jpg", bad), ("2_second.jpg", second)],
        )
        r = packread.ImageReader(path, labels=False, num_threads=1, **options)
        bad_alone = _outcome(r, 1)
        for i in (0, 1, 2, 0):
            got = _outcome(r, i)
            if i == 1:
                # The damaged one after a good one: as it is alone (no tables carried over).
                assert _same(got, bad_alone), n
            else:
                assert _same(got, alone[i]), (n, i, got)
        skipping = packread.ImageReader(
            path, labels=False, num_threads=1, on_error="skip", **options
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            batch = skipping.batch([0, 1, 2, 0])
        for slot, i in ((0, 0), (2, 2), (3, 0)):
            assert _same(batch[slot], alone[i]), (n, slot)
        if isinstance(bad_alone, Exception):
            assert list(skipping.errors) == [1], (n, skipping.errors)
        else:
            assert skipping.errors == {}, (n, skipping.errors)
            assert _same(batch[1], bad_alone), n


def test_a_fatal_error_after_a_warning_is_the_error(tmp_path, damaged):
    """BAD_INPUTS 62: never the partial image, whatever warning came first."""
    path = _zip(tmp_path / "f.zip", [("f.jpg", damaged["fatal_after_warning"])])
    with pytest.raises(packread.DecodeError, match=r"f\.jpg.*Unsupported marker type 0xad"):
        packread.ImageReader(path, labels=False, size=None).batch([0])
    path = _zip(tmp_path / "p.zip", [("p.jpg", damaged["progressive_cut"])])
    reader = packread.ImageReader(path, labels=False, size=32)
    with pytest.raises(packread.DecodeError, match="truncated"):
        reader.batch([0])


def test_jpegs_with_sampling_factors_turbojpeg_cannot_name_crop(tmp_path):
    """BAD_INPUTS 63: luma 2x2, Cb 4x1, Cr 1x1 (written by libjpeg's cjpeg -sample; PIL writes
    no such file) decodes whole as PIL does, and its crops (decoded by region) equal crops of
    the whole image."""
    T = pytest.importorskip("torchvision.transforms")
    F = pytest.importorskip("torchvision.transforms.functional")
    from PIL import Image

    with open(os.path.join(FIXTURES, "jpeg_odd_sampling.jpg"), "rb") as f:
        data = f.read()
    path = _zip(tmp_path / "odd.zip", [("odd.jpg", data)])
    whole = packread.ImageReader(path, labels=False, size=None).batch([0])[0]
    assert np.array_equal(whole, pil_result(data))
    im = Image.open(io.BytesIO(data)).convert("RGB")
    for size in (64, (40, 90)):
        got = packread.ImageReader(path, labels=False, size=size).batch([0])[0]
        resize = size if isinstance(size, int) else max(size)
        want = np.asarray(T.Compose([T.Resize(resize), T.CenterCrop(size)])(im))
        diff = np.abs(got.astype(int) - want)
        assert diff.max() <= 2, (size, diff.max())
        assert diff.mean() < 0.5, (size, diff.mean())
    r = packread.ImageReader(path, labels=False, size=32, crop="random", seed=3)
    for epoch in range(4):
        top, left, h, w, _ = r.crop_params(0, epoch)
        want = np.asarray(F.resized_crop(im, top, left, h, w, [32, 32]))
        diff = np.abs(r.batch([0], epoch=epoch)[0].astype(int) - want)
        assert diff.max() <= 2, (epoch, diff.max())
        assert diff.mean() < 0.5, (epoch, diff.mean())


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_16_bit_pngs_with_a_transparent_colour_convert_as_pil(tmp_path, mode):
    """BAD_INPUTS 64: PIL converts to 8 bits first (grey clipped at 255, RGB's high bytes),
    then compares with the tRNS colour; packread kept the grey's high byte and compared in 16
    bits."""
    files = png16_with_trns()
    names = sorted(files)
    path = _zip(tmp_path / "png16.zip", [(f"{n}.png", files[n]) for n in names])
    r = packread.ImageReader(path, labels=False, size=None, mode=mode)
    transparent = 0
    for k, n in enumerate(names):
        want = pil_result(files[n], mode)
        got = r.batch([k])[0]
        assert np.array_equal(got.reshape(want.shape), want), (n, mode, got.tolist(), want.tolist())
        if mode == "RGBA":
            transparent += int((want[..., 3] == 0).sum())
    if mode == "RGBA":
        assert transparent == 2  # one pixel in each file whose tRNS an 8-bit pixel can equal


def test_a_png_palette_of_broken_length_is_a_decode_error_and_skips(tmp_path, good):
    """BAD_INPUTS 65: the png crate panicked on it (an InternalError, and skipping raised)."""
    path = _zip(
        tmp_path / "plte.zip", [("a.png", png_short_palette()), ("b.jpg", good["baseline"])]
    )
    with pytest.raises(packread.DecodeError, match=r"a\.png.*PLTE chunk of 47 bytes"):
        packread.ImageReader(path, labels=False, size=16).batch([0])
    r = packread.ImageReader(path, labels=False, size=16, on_error="skip")
    with pytest.warns(RuntimeWarning, match="did not decode"):
        got = r.batch([0, 1])
    assert list(r.errors) == [0]
    assert "PLTE" in r.errors[0]
    assert np.array_equal(got[0], got[1])


BAD_LABELS = [
    '"x"',
    '"3"',
    "1.5",
    "3.0",
    "true",
    "null",
    "[1]",
    "{}",
    "NaN",
    "Infinity",
    str(2**63),
    str(-(2**63) - 1),
    "[" * 100_000 + "]" * 100_000,
]


@pytest.mark.parametrize("label", BAD_LABELS, ids=lambda s: s[:12])
def test_labels_that_are_not_int64_integers_are_refused_naming_the_member(tmp_path, good, label):
    """BAD_INPUTS 66: a packread error naming the archive, the member and the image; never a
    builtin exception, never a label coerced ("3" as 3, 1.5 as 1, true as 1)."""
    for form in (
        '{"labels": {"a.jpg": 0, "b.jpg": %s}}',
        '{"labels": [["a.jpg", 0], ["b.jpg", %s]]}',
    ):
        path = _zip(
            tmp_path / "labels.zip",
            [("a.jpg", good["baseline"]), ("b.jpg", good["gray"]), ("dataset.json", form % label)],
        )
        with pytest.raises(packread.InvalidArgumentError, match=r"labels\.zip:dataset\.json") as e:
            packread.ImageReader(path, size=16)
        if len(label) < 100:
            assert "'b.jpg'" in str(e.value), str(e.value)


def test_labels_at_int64s_limits_are_read(tmp_path, good):
    doc = json.dumps({"labels": {"a.jpg": -(2**63), "b.jpg": 2**63 - 1}})
    path = _zip(
        tmp_path / "l.zip",
        [("a.jpg", good["baseline"]), ("b.jpg", good["gray"]), ("dataset.json", doc)],
    )
    assert packread.ImageReader(path, size=16).labels.tolist() == [-(2**63), 2**63 - 1]


def test_an_image_folder_with_a_file_name_that_is_not_utf8_reads_as_torchvision(tmp_path, good):
    """BAD_INPUTS 39: such a name reads like any other (it raised UnicodeEncodeError)."""
    datasets = pytest.importorskip("torchvision.datasets")
    root = tmp_path / "tree"
    (root / "cat").mkdir(parents=True)
    (root / "dog").mkdir()
    (root / "cat" / "ok.jpg").write_bytes(good["baseline"])
    bad_name = os.path.join(os.fsencode(root / "dog"), b"caf\xe9.jpg")
    with open(bad_name, "wb") as f:
        f.write(good["gray"])
    broken = os.path.join(os.fsencode(root / "dog"), b"\xff.jpg")
    with open(broken, "wb") as f:
        f.write(good["baseline"][:300])
    r = packread.ImageReader(str(root), size=None, arrays="images")
    tv = datasets.ImageFolder(str(root))
    assert r.names() == [p for p, _ in tv.samples]
    assert r.labels.tolist() == [c for _, c in tv.samples]
    k = r.names().index(os.fsdecode(bad_name))
    assert np.array_equal(r.batch([k])[0], pil_result(good["gray"]))
    with pytest.raises(packread.DecodeError, match=r"\\udcff\.jpg"):
        r.batch([r.names().index(os.fsdecode(broken))])
