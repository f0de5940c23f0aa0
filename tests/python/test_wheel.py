"""The release wheel `make wheel` builds: tagged abi3 for CPython >= 3.10 and manylinux2014
(glibc >= 2.17), using only the stable ABI, needing no shared library beyond the manylinux set
and no glibc symbol newer than 2.17, stripped; and working in fresh virtual environments of
every CPython 3.10-3.13 on the machine, holding nothing but numpy (and, for the command line,
its ``cli`` extra). `make wheel-test` (part of `make test`) runs these with PACKREAD_WHEEL set;
a plain pytest run skips them."""

from __future__ import annotations

import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile

import h5py
import numpy as np
import pytest
import tables
from PIL import Image

from support.images import encode
from support.wheel import SYSTEM_LIBRARIES, inspect, report, version_key

WHEEL = os.environ.get("PACKREAD_WHEEL", "")
pytestmark = pytest.mark.skipif(not WHEEL, reason="needs PACKREAD_WHEEL (make wheel-test)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The fresh environments' pins (numpy, and the ``cli`` extra's tree), for CPython 3.10-3.13.
CONSTRAINTS = os.path.join(ROOT, "requirements", "wheel-test.txt")
#: The CPython versions packread supports; each one found on the machine gets its own venv.
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
#: manylinux2014's glibc: no symbol of the extension may need a newer one.
GLIBC_MAX = "2.17"


@pytest.fixture(scope="module")
def facts():
    got = inspect(WHEEL)
    print(report(got))
    return got


def test_tag_and_contents(facts):
    assert re.fullmatch(
        r"packread-[^-]+-cp310-abi3-manylinux2014_x86_64\.manylinux_2_17_x86_64\.whl", facts.name
    ), facts.name
    assert set(facts.tags) == {
        "cp310-abi3-manylinux2014_x86_64",
        "cp310-abi3-manylinux_2_17_x86_64",
    }
    with zipfile.ZipFile(WHEEL) as z:
        names = set(z.namelist())
        entry = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for needed in (
        "packread/_packread.abi3.so",
        "packread/_packread.pyi",
        "packread/py.typed",
        "packread/__main__.py",
        "packread/cli/__init__.py",
        "packread/cli/inspect/__init__.py",
        "packread/cli/convert/__init__.py",
        "packread/cli/bench/__init__.py",
        "packread/_reader.py",
        "packread/_epoch.py",
        "packread/torch/__init__.py",
    ):
        assert needed in names
    assert "packread=packread.cli:main" in entry.replace(" ", "")
    assert "Requires-Python: >=3.10" in meta
    for extra in ("torch", "convert", "bench", "cli"):
        assert f"Provides-Extra: {extra}" in meta


def test_manylinux2014_glibc_217_and_stripped(facts):
    # auditwheel's verdict, from the symbols and libraries themselves (not the file name).
    assert facts.audit_tag == "manylinux_2_17_x86_64", facts.audit_text
    assert facts.needed <= SYSTEM_LIBRARIES, facts.needed - SYSTEM_LIBRARIES
    # objdump -T: the newest GLIBC_ version any dynamic symbol references.
    assert facts.glibc, "objdump -T listed no GLIBC_ symbol versions"
    assert version_key(facts.newest_glibc) <= version_key(GLIBC_MAX), (
        facts.newest_glibc,
        facts.newest_symbols,
    )
    # The release wheel carries no debug information (maturin strips it: pyproject.toml).
    assert facts.debug_sections == ()


def test_stable_abi():
    # Every Python C-API symbol the extension uses is in the stable ABI of 3.10.
    audit = subprocess.run(
        [sys.executable, "-m", "abi3audit", "--strict", "--summary", WHEEL],
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    said = " ".join((audit.stdout + audit.stderr).split())  # a rich console: stderr, wrapped
    assert "0 ABI version mismatches and 0 ABI violations" in said


# -- fresh environments ------------------------------------------------------------------------


def _version_of(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python(version: str) -> str | None:
    """An interpreter of CPython ``version``: pyenv's (newest patch first), then the PATH's."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}"))
    candidates = sorted(found, key=lambda p: version_key(p.split(os.sep)[-3]), reverse=True)
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        candidates.append(getattr(sys, "_base_executable", sys.executable))
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    return next((p for p in candidates if _version_of(p) == version), None)


def fresh_venv(version: str, where, *install: str) -> str:
    """A new virtual environment of CPython ``version`` with ``install`` (pinned by
    requirements/wheel-test.txt); its python. Skips, saying so, where that CPython is not on
    this machine."""
    python = find_python(version)
    if python is None:
        pytest.skip(f"CPython {version} is not on this machine: its wheel test is skipped")
    venv = str(where / f"venv{version}")
    subprocess.run([python, "-m", "venv", venv], check=True, capture_output=True)
    py = os.path.join(venv, "bin", "python")
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run = subprocess.run([*pip, "-c", CONSTRAINTS, *install], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    return py


def _installed(py: str) -> set[str]:
    out = subprocess.run(
        [py, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {p["name"].lower() for p in json.loads(out)}


def _bare_env() -> dict[str, str]:
    """What the fresh environments' programs run with: the PATH and HOME, nothing of this
    process's virtual environment or PYTHONPATH."""
    return {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")}


def _image(h: int, w: int, seed: int) -> Image.Image:
    """A smooth picture with some texture (JPEG's quantisation has something to round)."""
    y, x = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(seed)
    rgb = np.stack([x * 255 // w, y * 255 // h, (x + y) * 127 // (w + h)], axis=-1)
    rgb = rgb + rng.integers(0, 24, rgb.shape)
    return Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    """Files in every format, written by the real writers, and what each must read as."""
    root = tmp_path_factory.mktemp("formats")
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (12, 3, 8, 8), dtype=np.uint8)
    labels = np.arange(12, dtype="<i8")
    with h5py.File(root / "h5py.h5", "w") as f:
        f.create_dataset(
            "images", data=images, chunks=(1, 3, 8, 8), compression="gzip", shuffle=True
        )
        f.create_dataset("labels", data=labels)
    with tables.open_file(root / "pytables.h5", "w") as f:
        f.create_carray(
            "/", "images", obj=images, chunkshape=(1, 3, 8, 8), filters=tables.Filters(5, "blosc")
        )
    for s in range(3):  # three shards of 4 samples, read as one data set
        with h5py.File(root / f"shard_{s}.h5", "w") as f:
            f.create_dataset("images", data=images[4 * s : 4 * s + 4], compression="lzf")
    with zipfile.ZipFile(root / "raw.zip", "w") as z:
        for i, im in enumerate(images):
            z.writestr(f"img/{i:02d}.raw", im.tobytes())
    (root / "npy").mkdir()
    (root / "npz").mkdir()
    for i, im in enumerate(images):
        np.save(root / "npy" / f"{i:02d}.npy", im)
        np.savez_compressed(root / "npz" / f"{i:02d}.npz", image=im, label=labels[i])
    np.save(root / "want_images.npy", images)
    np.save(root / "want_labels.npy", labels)
    # Encoded images: a ZIP with the tutorial's labels, and an ImageFolder tree.
    encoded = {
        "a.jpg": encode(_image(40, 32, 1), "JPEG", quality=90),
        "b.jpg": encode(_image(27, 33, 2), "JPEG", quality=85, progressive=True),
        "c.png": encode(_image(31, 20, 3), "PNG"),
        "d.webp": encode(_image(24, 24, 4), "WEBP", lossless=True),
    }
    with zipfile.ZipFile(root / "images.zip", "w") as z:
        for n, raw in encoded.items():
            z.writestr(n, raw)
        z.writestr("dataset.json", json.dumps({"labels": {n: k for k, n in enumerate(encoded)}}))
    for k, (n, raw) in enumerate(encoded.items()):
        folder = root / "tree" / ("cat" if k % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / n).write_bytes(raw)
    for k, raw in enumerate(encoded.values()):
        with Image.open(io.BytesIO(raw)) as im:
            np.save(root / f"want_pixels_{k}.npy", np.asarray(im.convert("RGB")))
    return root


SMOKE = textwrap.dedent(
    """
    import glob, os, subprocess, sys
    import numpy as np
    import packread

    here = sys.argv[1]
    assert packread.__file__.startswith(sys.prefix), packread.__file__
    assert packread._packread.__file__.endswith("_packread.abi3.so")
    for absent in ("h5py", "tables", "torch", "hdf5plugin", "PIL"):
        try:
            __import__(absent)
        except ImportError:
            pass
        else:
            raise AssertionError(absent + " should not be installed here")
    images = np.load(os.path.join(here, "want_images.npy"))
    labels = np.load(os.path.join(here, "want_labels.npy"))
    pixels = [np.load(p) for p in sorted(glob.glob(os.path.join(here, "want_pixels_*.npy")))]
    idx = [5, 0, 11, 5]

    def same(got, want):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape)
        assert got.tobytes() == want.tobytes()

    h = packread.HDF5Reader(os.path.join(here, "h5py.h5"))
    batch = h.batch(idx)
    same(batch["images"], images[idx])
    same(batch["labels"], labels[idx])
    same(packread.HDF5Reader(os.path.join(here, "pytables.h5"), "images").batch(idx), images[idx])
    shards = packread.HDF5Reader(os.path.join(here, "shard_*.h5"), "images")
    assert type(shards) is packread.HDF5Reader and shards.shard_lengths == [4, 4, 4]
    same(shards.batch(idx), images[idx])
    z = packread.ZipReader(os.path.join(here, "raw.zip"), members="img/*.raw", shape=(3, 8, 8))
    same(z.batch(idx), images[idx])
    same(packread.NpyReader(os.path.join(here, "npy")).batch(idx), images[idx])
    n = packread.NpzReader(os.path.join(here, "npz")).batch(idx)
    same(n["image"], images[idx])
    same(n["label"], labels[idx])
    raw = open(os.path.join(here, "npy", "03.npy"), "rb").read()
    same(packread.load_npy(raw), images[3])
    same(packread.load_npz(open(os.path.join(here, "npz", "03.npz"), "rb").read())["image"],
         images[3])
    same(packread.HDF5Reader(open(os.path.join(here, "h5py.h5"), "rb").read(), "labels")
         .batch(idx), labels[idx])
    # JPEG (baseline and progressive), PNG and WebP, at their own sizes, as PIL decodes them.
    zi = packread.ImageReader(os.path.join(here, "images.zip"))
    got = zi.batch([0, 1, 2, 3])
    for image, want in zip(got["images"], pixels):
        same(image, want)
    same(got["labels"], np.arange(4, dtype=np.int64))
    same(zi.labels, np.arange(4, dtype=np.int64))
    decode = packread.ImageDecode(16, resize=20)
    tree = packread.ImageReader(os.path.join(here, "tree"), decode=decode)
    assert tree.classes == ["cat", "dog"], tree.classes
    assert tree.batch([0, 1, 2, 3])["images"].shape == (4, 16, 16, 3)
    script = os.path.join(os.path.dirname(sys.executable), "packread")
    out = subprocess.run([script, "inspect", os.path.join(here, "npz")], check=True,
                         capture_output=True, text=True).stdout
    assert "compressed-npz" not in out and "deflate-compressed" in out, out
    out = subprocess.run([sys.executable, "-m", "packread", "--version"], check=True,
                         capture_output=True, text=True).stdout
    assert out.startswith("packread "), out
    print("smoke ok", sys.version_info[:2])
    """
)


@pytest.mark.parametrize("version", PYTHONS)
def test_fresh_venv_reads_every_format(version, fixtures, tmp_path):
    py = fresh_venv(version, tmp_path, "numpy", WHEEL)
    assert _installed(py) - {"pip", "setuptools"} == {"numpy", "packread"}
    (tmp_path / "smoke.py").write_text(SMOKE)
    run = subprocess.run(
        [py, "-I", str(tmp_path / "smoke.py"), str(fixtures)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_bare_env(),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"smoke ok ({version.replace('.', ', ')})" in run.stdout


@pytest.mark.parametrize("version", PYTHONS)
def test_cli_extra(version, fixtures, tmp_path):
    """`pip install packread[cli]`: `packread --help`, and a conversion that needs the extra
    (h5py writes, hdf5plugin's blosc) read back by packread."""
    py = fresh_venv(version, tmp_path, f"packread[cli] @ file://{os.path.abspath(WHEEL)}")
    assert {"h5py", "hdf5plugin", "tqdm", "matplotlib"} <= _installed(py)
    script = os.path.join(os.path.dirname(py), "packread")
    env = _bare_env()
    helped = subprocess.run([script, "--help"], capture_output=True, text=True, env=env)
    assert helped.returncode == 0, helped.stderr
    for command in (
        "packread inspect SOURCE",
        "packread convert SOURCE DST",
        "packread bench SOURCE",
    ):
        assert command in helped.stdout
    out = tmp_path / "converted.h5"
    conv = subprocess.run(
        [script, "convert", str(fixtures / "npy"), str(out), "--codec", "blosc:lz4:5", "-q"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert conv.returncode == 0, conv.stdout + conv.stderr
    check = (
        "import sys, numpy as np, packread; "
        "r = packread.HDF5Reader(sys.argv[1], 'data'); "
        "assert r.batch(range(12)).tobytes() == np.load(sys.argv[2]).tobytes(); print('ok')"
    )
    read = subprocess.run(
        [py, "-I", "-c", check, str(out), str(fixtures / "want_images.npy")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert read.stdout.strip() == "ok", read.stdout + read.stderr
    with h5py.File(out) as f:  # what the extra's writer made: blosc (filter 32001)
        plist = f["data"].id.get_create_plist()
        assert 32001 in [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
