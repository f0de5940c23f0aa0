"""The wheel `make wheel` builds: tagged abi3 for CPython >= 3.10, using only the stable ABI,
needing no shared library beyond the manylinux set (libhdf5 and zlib are inside), and working
in a fresh virtual environment holding nothing but numpy. `make wheel-test` (part of
`make test`) runs these with PACKREAD_WHEEL set; a plain pytest run skips them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile

import h5py
import numpy as np
import pytest
import tables

WHEEL = os.environ.get("PACKREAD_WHEEL", "")
pytestmark = pytest.mark.skipif(not WHEEL, reason="needs PACKREAD_WHEEL (make wheel-test)")

#: What a manylinux wheel may link against (PEP 600's policy, as auditwheel applies it).
SYSTEM_LIBRARIES = {
    "libc.so.6",
    "libm.so.6",
    "libgcc_s.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
}


def test_tag_and_contents():
    name = os.path.basename(WHEEL)
    assert "-cp310-abi3-" in name
    with zipfile.ZipFile(WHEEL) as z:
        names = set(z.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        tags = [line for line in z.read(meta).decode().splitlines() if line.startswith("Tag:")]
        entry = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert tags
    assert all("cp310-abi3-" in t for t in tags)
    for needed in (
        "packread/_packread.abi3.so",
        "packread/_packread.pyi",
        "packread/py.typed",
        "packread/__main__.py",
        "packread/cli/__init__.py",
        "packread/cli/inspect/__init__.py",
        "packread/cli/convert/__init__.py",
        "packread/cli/bench.py",
        "packread/_reader.py",
        "packread/_epoch.py",
        "packread/torch/__init__.py",
    ):
        assert needed in names
    assert "packread=packread.cli:main" in entry.replace(" ", "")


def test_only_system_libraries_and_stable_abi(tmp_path):
    with zipfile.ZipFile(WHEEL) as z:
        so = z.extract("packread/_packread.abi3.so", tmp_path)
    dynamic = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True)
    needed = {
        line.split("[")[1].rstrip("]") for line in dynamic.stdout.splitlines() if "(NEEDED)" in line
    }
    assert needed <= SYSTEM_LIBRARIES, needed - SYSTEM_LIBRARIES
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", WHEEL], capture_output=True, text=True
    )
    assert show.returncode == 0, show.stderr
    assert "is consistent with the following platform tag" in " ".join(show.stdout.split())
    assert "manylinux" in show.stdout
    # Every Python C-API symbol the extension uses is in the stable ABI of 3.10.
    audit = subprocess.run(
        [sys.executable, "-m", "abi3audit", "--strict", "--summary", WHEEL],
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    said = " ".join((audit.stdout + audit.stderr).split())  # a rich console: stderr, wrapped
    assert "0 ABI version mismatches and 0 ABI violations" in said


def _fixtures(root):
    """Files in every format, written by the real writers, and what each must read as."""
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


SMOKE = textwrap.dedent(
    """
    import os, subprocess, sys
    import numpy as np
    import packread

    here = sys.argv[1]
    assert packread.__file__.startswith(sys.prefix), packread.__file__
    assert packread._packread.__file__.endswith("_packread.abi3.so")
    for absent in ("h5py", "tables", "torch", "hdf5plugin"):
        try:
            __import__(absent)
        except ImportError:
            pass
        else:
            raise AssertionError(absent + " should not be installed here")
    images = np.load(os.path.join(here, "want_images.npy"))
    labels = np.load(os.path.join(here, "want_labels.npy"))
    idx = [5, 0, 11, 5]

    def same(got, want):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape)
        assert got.tobytes() == want.tobytes()

    h = packread.HDF5Reader(os.path.join(here, "h5py.h5"))
    batch = h.batch(idx)
    same(batch["images"], images[idx])
    same(batch["labels"], labels[idx])
    same(packread.HDF5Reader(os.path.join(here, "pytables.h5"), "images").batch(idx), images[idx])
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
    script = os.path.join(os.path.dirname(sys.executable), "packread")
    out = subprocess.run([script, "inspect", os.path.join(here, "npz")], check=True,
                         capture_output=True, text=True).stdout
    assert "compressed-npz" not in out and "deflate-compressed" in out, out
    out = subprocess.run([sys.executable, "-m", "packread", "--version"], check=True,
                         capture_output=True, text=True).stdout
    assert out.startswith("packread "), out
    print("smoke ok")
    """
)


def test_fresh_venv_reads_every_format(tmp_path):
    _fixtures(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = str(venv / "bin" / "python")
    install = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"numpy=={np.__version__}",
            WHEEL,
        ],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    (tmp_path / "smoke.py").write_text(SMOKE)
    run = subprocess.run(
        [python, "-I", str(tmp_path / "smoke.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "smoke ok" in run.stdout
