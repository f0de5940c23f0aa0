"""`packread inspect` and `packread convert` on image sources: ImageFolder trees (a folder, or a
ZIP holding one) and ZIPs of images, made at test time from scikit-image's photographs
re-encoded by PIL. Counts are checked against PIL (formats, CMYK, progressive, sizes) and
torchvision's ImageFolder (samples, order, classes, labels); a converted ZIP gives through
ImageReader the tree's pixels and ImageFolder's labels."""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import os
import re
import shutil
import zipfile
from collections import Counter

import numpy as np
import pytest

import packread
from packread.cli import main
from packread.cli.convert import MismatchError, convert, verify_conversion
from packread.cli.inspect import inspect
from packread.cli.inspect.thresholds import SHORTER_SIDE_EDGES
from packread.errors import UnsupportedError
from support.images import KINDS, photo

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("skimage")
datasets = pytest.importorskip("torchvision.datasets")

#: Class folder -> the photograph its images are made from, and the kinds of file it holds.
TREE = {
    "cat": ("chelsea.png", ["q90.jpg", "progressive.jpg", "cmyk.jpg", "rgb.png", "small.jpg"]),
    "coffee": ("coffee.png", ["q60-444.jpg", "cmyk.jpg", "palette.png", "lossy.webp"]),
    "rocket": ("rocket.jpg", ["q95-422.jpg", "progressive.jpg", "lossless.webp", "gray.jpg"]),
}
#: Files no packread decoder reads: a damaged one, and a BMP (an image PIL and torchvision
#: read, which packread does not decode).
CORRUPT = "cat/broken.jpg"
BMP = "coffee/coffee.bmp"
#: A file in a sub-folder of a class folder (ImageFolder walks class folders recursively).
NESTED = "rocket/zz/rocket.small.jpg"


def digest(path):
    """Every file's path, bytes and modification time below ``path`` (or of the file)."""
    h = hashlib.sha256()
    walk = sorted(os.walk(path)) if os.path.isdir(path) else [("", [], [path])]
    for root, _, files in walk:
        for f in sorted(files):
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                h.update(p.encode() + fh.read() + str(os.stat(p).st_mtime_ns).encode())
    return h.hexdigest()


def write_tree(root):
    for cls, (name, kinds) in TREE.items():
        os.makedirs(root / cls)
        im = photo(name)
        for kind in kinds:
            (root / cls / f"{name.split('.')[0]}.{kind}").write_bytes(KINDS[kind](im))
    (root / CORRUPT).write_bytes(b"this is not an image\n" * 10)
    buf = io.BytesIO()
    photo("coffee.png").resize((200, 150)).save(buf, "BMP")
    (root / BMP).write_bytes(buf.getvalue())
    (root / "cat" / "notes.txt").write_text("not an image: neither ImageFolder nor packread")
    os.makedirs(root / "rocket" / "zz")
    (root / NESTED).write_bytes(KINDS["small.jpg"](photo("rocket.jpg")))


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("images") / "train"
    write_tree(root)
    return root


@pytest.fixture(scope="module")
def folder(tree):
    """torchvision's ImageFolder on the tree: the reference for samples, order and labels."""
    return datasets.ImageFolder(str(tree))


def relative(folder, root):
    return [os.path.relpath(p, root).replace(os.sep, "/") for p, _ in folder.samples]


def pil_expected(root, names):
    """What PIL says of each file: formats (packread's names; others undecodable), CMYK and
    progressive JPEGs, sizes."""
    formats, cmyk, progressive, sizes = Counter(), 0, 0, []
    for n in names:
        try:
            with Image.open(root / n) as im:
                fmt, mode, info, size = im.format, im.mode, im.info, im.size
        except OSError:
            formats["undecodable"] += 1
            continue
        if fmt not in ("JPEG", "PNG", "WEBP"):
            formats["undecodable"] += 1
            continue
        formats["WebP" if fmt == "WEBP" else fmt] += 1
        cmyk += fmt == "JPEG" and mode == "CMYK"
        progressive += fmt == "JPEG" and bool(info.get("progressive") or info.get("progression"))
        sizes.append(size)
    return formats, cmyk, progressive, sizes


def histogram(sizes):
    counts = [0] * (len(SHORTER_SIDE_EDGES) + 1)
    for w, h in sizes:
        counts[bisect.bisect_right(SHORTER_SIDE_EDGES, min(w, h))] += 1
    return counts


def spread(values):
    values = sorted(values)
    return {"min": values[0], "median": values[(len(values) - 1) // 2], "max": values[-1]}


def codes(report):
    return sorted(a.code for a in report.advice)


def test_inspect_tree_counts_equal_pil_and_imagefolder(tree, folder):
    before = digest(tree)
    names = relative(folder, tree)
    report = inspect(tree)
    summary = report.images
    assert report.format == "image-folder"
    assert report.samples == summary.images == len(folder.samples) == 16
    formats, cmyk, progressive, sizes = pil_expected(tree, names)
    assert summary.formats == {"JPEG": 10, "PNG": 2, "WebP": 2, "undecodable": 2}
    assert summary.formats == {k: formats[k] for k in summary.formats}
    assert (summary.cmyk, summary.progressive) == (cmyk, progressive) == (2, 2)
    assert [n for n, _ in summary.undecodable] == sorted([BMP, CORRUPT])
    assert all("not a JPEG, PNG or WebP" in why for _, why in summary.undecodable)
    counts = [b["count"] for b in summary.shorter_side]
    assert counts == histogram(sizes)
    assert sum(counts) == summary.images - summary.formats["undecodable"]
    assert summary.width == spread([w for w, _ in sizes])
    assert summary.height == spread([h for _, h in sizes])
    # Classes and images per class: ImageFolder's.
    assert summary.labels == "folders"
    assert summary.classes == len(folder.classes) == 3
    want = Counter(folder.classes[t] for t in folder.targets)
    assert summary.per_class == {c: want[c] for c in folder.classes}
    assert summary.per_class == {"cat": 6, "coffee": 5, "rocket": 5}
    # One row per format, with the bytes on disk of its files.
    rows = {i.name: i for i in report.items}
    assert {k: r.count for k, r in rows.items()} == summary.formats
    assert sum(r.stored_bytes for r in rows.values()) == report.disk_bytes
    assert report.disk_bytes == sum(os.path.getsize(tree / n) for n in names)
    assert codes(report) == ["cmyk-jpeg", "progressive-jpeg", "undecodable-images"]
    assert report.advice[0].code == "undecodable-images"  # warnings first
    assert "2 of 16 images do not decode" in report.advice[0].message
    assert digest(tree) == before  # only read


def test_inspect_text_and_json(tree, capsys):
    assert main(["inspect", str(tree)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("train  ImageFolder tree, ")
    assert "in 16 files, 16 images" in out
    assert "└── undecodable" in out
    assert f"      {CORRUPT}: unsupported image" in out
    assert "shorter side (pixels)" in out
    assert "classes: 3 (class folders), 16 images" in out
    assert "2 of 10 JPEGs are CMYK" in out
    assert main(["inspect", str(tree), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "image-folder"
    assert data["images"]["formats"] == {"JPEG": 10, "PNG": 2, "WebP": 2, "undecodable": 2}
    assert sum(b["count"] for b in data["images"]["shorter_side"]) == 14
    assert data["images"]["per_class"] == {"cat": 6, "coffee": 5, "rocket": 5}
    assert main(["inspect", str(tree), "--ascii"]) == 0
    assert "`-- undecodable" in capsys.readouterr().out


def test_inspect_zip_of_a_tree_and_deflated_members(tree, folder, tmp_path):
    path = tmp_path / "tree.zip"
    names = relative(folder, tree)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n in names:
            z.write(tree / n, f"train/{n}")
        z.writestr("train/cat/notes.txt", "not an image")
    report = inspect(path)
    summary = report.images
    assert report.format == "image-zip"
    assert report.files == 1
    assert report.disk_bytes == os.path.getsize(path)
    assert summary.labels == "folders"
    assert summary.per_class == {"cat": 6, "coffee": 5, "rocket": 5}
    assert summary.formats == inspect(tree).images.formats
    assert [n for n, _ in summary.undecodable] == sorted([f"train/{BMP}", f"train/{CORRUPT}"])
    assert all(i.layout == "deflated" for i in report.items)
    with zipfile.ZipFile(path) as z:
        stored = sum(i.compress_size for i in z.infolist() if not i.filename.endswith(".txt"))
    assert sum(i.stored_bytes for i in report.items) == stored
    deflated = next(a for a in report.advice if a.code == "deflated-images")
    assert deflated.message.startswith("16 of 16 images are deflated")
    assert "ZIP of an ImageFolder tree" in report.render()


def test_inspect_zip_labelled_unlabelled_and_badly_labelled(tree, tmp_path):
    files = ["cat/chelsea.q90.jpg", "coffee/coffee.palette.png", "rocket/rocket.lossless.webp"]
    labelled, bare, bad = tmp_path / "l.zip", tmp_path / "u.zip", tmp_path / "b.zip"
    for path in (labelled, bare, bad):
        with zipfile.ZipFile(path, "w") as z:
            for k, f in enumerate(files):
                z.write(tree / f, f"{k:02d}{os.path.splitext(f)[1]}")
            if path == labelled:
                labels = {"00.jpg": 4, "01.png": 4, "02.webp": 9}
                z.writestr("dataset.json", json.dumps({"labels": labels}))
            if path == bad:
                z.writestr("dataset.json", json.dumps({"labels": {"00.jpg": 1}}))
    report = inspect(labelled)
    assert report.images.formats == {"JPEG": 1, "PNG": 1, "WebP": 1}
    assert report.images.labels == "dataset.json"
    assert (report.images.classes, report.images.per_class) == (2, {"4": 2, "9": 1})
    assert report.advice == []
    report = inspect(bare)
    assert report.images.labels is None
    assert report.images.per_class is None
    assert codes(report) == ["unlabelled"]
    report = inspect(bad)
    assert report.images.images == 3
    assert codes(report) == ["bad-labels"]
    assert "no label for '01.png'" in report.advice[0].message


def test_inspect_many_classes_are_summed_up(tmp_path):
    raw = KINDS["small.jpg"](photo("astronaut.png"))
    for c in range(25):
        os.makedirs(tmp_path / "t" / f"class{c:02d}")
        for i in range(1 + c % 3):
            (tmp_path / "t" / f"class{c:02d}" / f"{i}.jpg").write_bytes(raw)
    report = inspect(tmp_path / "t")
    assert report.images.classes == 25
    assert sum(report.images.per_class.values()) == report.samples == 49
    text = report.render()
    assert "classes: 25 (class folders), 49 images" in text
    assert "per class: min 1 (class00), median 2, max 3 (class02)" in text
    assert "class24" not in text.split("classes:")[1]  # not listed one a line


def test_array_sources_are_still_what_they_were(tmp_path):
    """Folders of .npy files, and ZIPs mostly of other members, are not taken for images."""
    (tmp_path / "npy").mkdir()
    (tmp_path / "npy" / "sub").mkdir()  # a sub-folder beside .npy files: still a .npy folder
    for i in range(3):
        np.save(tmp_path / "npy" / f"{i}.npy", np.zeros(4))
    assert inspect(tmp_path / "npy").format == "npy-folder"
    path = tmp_path / "mixed.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("preview.png", KINDS["small.jpg"](photo("chelsea.png")))
        for i in range(3):
            z.writestr(f"{i}.raw", bytes(16))
    assert inspect(path).format == "zip"


def test_loose_images_are_refused_saying_why(tree, tmp_path, capsys):
    flat = tmp_path / "flat"
    shutil.copytree(tree / "cat", flat)
    with pytest.raises(UnsupportedError, match="6 image files but no class folders"):
        inspect(flat)
    assert main(["convert", str(flat), str(tmp_path / "flat.zip"), "-q"]) == 1
    assert "no class folders" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "flat.zip")


def test_a_jpeg_cut_before_its_frame_header_is_undecodable(tmp_path, monkeypatch):
    monkeypatch.setattr("packread.cli.inspect.images.HEADER_THREADS", 1)
    (tmp_path / "t" / "a").mkdir(parents=True)
    full = KINDS["q90.jpg"](photo("chelsea.png"))
    (tmp_path / "t" / "a" / "0.jpg").write_bytes(KINDS["small.jpg"](photo("chelsea.png")))
    (tmp_path / "t" / "a" / "1.jpg").write_bytes(full[:100])  # quantisation tables, no SOF
    summary = inspect(tmp_path / "t").images
    assert summary.formats == {"JPEG": 1, "undecodable": 1}


# --- convert -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def packed(tree, tmp_path_factory):
    before = digest(tree)
    dst = tmp_path_factory.mktemp("packed") / "train.zip"
    result = convert(tree, dst, verify=True, progress=False)
    assert digest(tree) == before  # the tree is only read
    return dst, result


def test_convert_writes_imagefolders_samples_stored_with_labels(tree, folder, packed):
    dst, result = packed
    names = relative(folder, tree)
    assert result.samples == len(names) == 16
    assert result.datasets == {
        "images": {
            "dtype": None,
            "sample_shape": None,
            "chunks": None,
            "members": "<class>/<file>",
            "classes": 3,
            "labels": "dataset.json",
        }
    }
    with zipfile.ZipFile(dst) as z:
        assert z.testzip() is None
        assert z.namelist() == ["dataset.json", *names]  # ImageFolder's order
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
        for n in names:
            assert z.read(n) == (tree / n).read_bytes()  # the files as they are
        doc = json.loads(z.read("dataset.json"))
    assert doc["classes"] == folder.classes
    assert doc["labels"] == dict(zip(names, folder.targets, strict=True))
    (undecodable,) = result.warnings  # the order agrees: no warning about it
    assert undecodable.startswith(f"2 images do not decode as JPEG, PNG or WebP (first: {CORRUPT}")


def test_converted_zip_reads_as_the_tree_and_as_imagefolder(tree, folder, packed):
    dst, _ = packed
    from_zip = packread.ImageReader(dst, size=None, arrays="images")
    from_tree = packread.ImageReader(tree, size=None, arrays="images")
    names = relative(folder, tree)
    assert from_zip.names() == names
    assert [os.path.relpath(n, tree).replace(os.sep, "/") for n in from_tree.names()] == names
    assert from_zip.labels.tolist() == from_tree.labels.tolist() == folder.targets
    assert from_tree.classes == folder.classes
    if from_zip.classes is not None:  # dataset.json's classes, where ImageReader reads them
        assert from_zip.classes == folder.classes
    ok = [k for k, n in enumerate(names) if n not in (CORRUPT, BMP)]
    got, want = from_zip.batch(ok), from_tree.batch(ok)
    assert len(got) == len(want) == 14
    for k, g, w in zip(ok, got, want, strict=True):
        assert g.shape == w.shape, names[k]
        assert np.array_equal(g, w), names[k]
    for k, n in enumerate(names):
        if n in (CORRUPT, BMP):
            with pytest.raises(packread.DecodeError, match=re.escape(n)):
                from_zip.batch([k])
    sized_zip = packread.ImageReader(dst, size=48, arrays="images")
    sized_tree = packread.ImageReader(tree, size=48, arrays="images")
    assert np.array_equal(sized_zip.batch(ok), sized_tree.batch(ok))
    # Decoded from the ZIP, the images equal PIL's of the tree's files.
    for k in ok[:4]:
        with Image.open(tree / names[k]) as im:
            assert np.array_equal(got[ok.index(k)], np.asarray(im.convert("RGB")))


def test_convert_inspected_zip_agrees_with_the_tree(tree, packed):
    dst, _ = packed
    zipped, folder_report = inspect(dst), inspect(tree)
    assert zipped.images.labels == "dataset.json"
    for field in ("formats", "cmyk", "progressive", "width", "height", "shorter_side"):
        assert getattr(zipped.images, field) == getattr(folder_report.images, field)
    assert zipped.images.per_class == folder_report.images.per_class  # dataset.json's classes
    assert all(i.layout == "stored" for i in zipped.items)


def test_convert_from_the_command_line_and_resume_on_complete(tree, tmp_path, capsys):
    dst = tmp_path / "out.zip"
    assert main(["convert", str(tree), str(dst)]) == 0
    captured = capsys.readouterr()
    assert "16 samples (images <class>/<file> in 3 classes, labels in dataset.json)" in (
        captured.out
    )
    assert "warning: 2 images do not decode" in captured.err
    assert main(["convert", str(tree), str(dst), "--resume", "--verify", "-q"]) == 0
    assert "is complete; nothing to do" in capsys.readouterr().err
    assert main(["convert", str(tree), str(dst), "-q"]) == 1
    assert "pass --force" in capsys.readouterr().err


class Stop(Exception):
    pass


def test_interrupted_conversion_resumes_to_the_same_archive(tree, tmp_path):
    before = digest(tree)
    dst, fresh = tmp_path / "resumed.zip", tmp_path / "fresh.zip"
    seen = []

    def stop(done):
        seen.append(done)
        if len(seen) == 3:
            raise Stop

    with pytest.raises(Stop):
        convert(
            tree,
            dst,
            memory_bytes=200_000,
            checkpoint_seconds=0,
            on_checkpoint=stop,
            progress=False,
        )
    assert not dst.exists()
    assert 0 < seen[-1] < 16
    result = convert(tree, dst, memory_bytes=200_000, resume=True, progress=False)
    assert result.resumed_from == seen[-1]
    convert(tree, fresh, progress=False)
    assert dst.read_bytes() == fresh.read_bytes()
    verify_conversion(tree, dst, result)
    assert digest(tree) == before


def test_verify_finds_a_changed_file(tree, tmp_path):
    copy = tmp_path / "train"
    shutil.copytree(tree, copy)
    result = convert(copy, tmp_path / "out.zip", progress=False)
    (copy / "cat" / "chelsea.small.jpg").write_bytes(KINDS["small.jpg"](photo("coffee.png")))
    with pytest.raises(MismatchError, match=r"cat/chelsea\.small\.jpg differs"):
        verify_conversion(copy, tmp_path / "out.zip", result)


def test_order_imagereader_cannot_keep_is_said(tmp_path):
    """Class names where one extends another with a character sorting before "/": ImageFolder
    gives "a" first; ImageReader, reading the archive's names in order, "a-b" first. The
    same images keep their labels."""
    root = tmp_path / "t"
    raw = KINDS["small.jpg"](photo("chelsea.png"))
    for cls in ("a", "a-b"):
        os.makedirs(root / cls)
        (root / cls / "x.jpg").write_bytes(raw)
    dst = tmp_path / "t.zip"
    result = convert(root, dst, progress=False)
    (warning,) = result.warnings
    assert "a-b/x.jpg sorts before a/x.jpg" in warning
    folder = datasets.ImageFolder(str(root))
    reader = packread.ImageReader(dst, size=None)
    want = dict(zip(relative(folder, root), folder.targets, strict=True))
    assert dict(zip(reader.names(), reader.labels.tolist(), strict=True)) == want


def test_convert_refuses_what_is_not_a_tree_and_writes_nothing(tree, packed, tmp_path, capsys):
    zipped, _ = packed
    before = digest(tree), digest(zipped)
    out = tmp_path / "out"
    out.mkdir()
    cases = [
        ([str(zipped), str(out / "x.zip")], "a ZIP of images, which packread.ImageReader reads"),
        ([str(zipped), str(out / "x.h5")], "nothing to convert"),
        ([str(tree), str(out / "x.h5")], "cannot convert image-folder into hdf5"),
        ([str(tree), str(tree / "x.zip")], "inside"),
        ([str(tree), str(tree / "cat" / "x.zip")], "inside"),
        ([str(tree / "cat"), str(out / "x.zip")], "no class folders"),
    ]
    for args, message in cases:
        assert main(["convert", *args, "-q"]) == 1, args
        assert message in capsys.readouterr().err, args
    assert os.listdir(out) == []
    assert (digest(tree), digest(zipped)) == before
    assert not any(n.endswith((".zip", ".partial")) for _, _, fs in os.walk(tree) for n in fs)
