"""The sdist `make wheel` builds (`maturin sdist`) installs with pip into a fresh virtual
environment holding nothing: pip fetches the build requirements (maturin, CMake) from PyPI, and
cargo builds the extension from source (Rust and nasm must be on the machine), then the
installed package reads HDF5. A whole release build, about 8 minutes on 2 cores: marked
slow; `make sdist-test` runs it with PACKREAD_SDIST set."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time

import h5py
import numpy as np
import pytest

SDIST = os.environ.get("PACKREAD_SDIST", "")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SDIST, reason="needs PACKREAD_SDIST (make sdist-test)"),
]


def test_sdist_holds_what_the_build_needs():
    with tarfile.open(SDIST) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for needed in (
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "pyproject.toml",
        "src/lib.rs",
        "src/codec/blosc2_shim.c",
        "python/packread/__init__.py",
        "python/packread/py.typed",
        "python/packread/_packread.pyi",
    ):
        assert needed in names, needed
    assert not any(n.endswith(".so") for n in names)


def test_pip_install_from_sdist(tmp_path):
    if shutil.which("cargo") is None:
        pytest.skip("no Rust toolchain (cargo) here: the sdist cannot build")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    py = str(venv / "bin" / "python")
    # A build of its own: no target directory shared with the checkout's builds.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["CARGO_TARGET_DIR"] = str(tmp_path / "target")
    started = time.monotonic()
    install = subprocess.run(
        [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", SDIST],
        capture_output=True,
        text=True,
        env=env,
    )
    minutes = (time.monotonic() - started) / 60
    print(f"pip install of the sdist: {minutes:.1f} min")
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-8000:]
    want = np.arange(60, dtype="<f4").reshape(12, 5)
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f.create_dataset("x", data=want, chunks=(2, 5), compression="gzip", shuffle=True)
    np.save(tmp_path / "want.npy", want)
    check = (
        "import sys, numpy as np, packread; "
        "r = packread.HDF5Reader(sys.argv[1], 'x'); "
        "assert r.batch([3, 0, 11]).tobytes() == np.load(sys.argv[2])[[3, 0, 11]].tobytes(); "
        "print('ok', packread._packread.__file__)"
    )
    read = subprocess.run(
        [py, "-I", "-c", check, str(tmp_path / "x.h5"), str(tmp_path / "want.npy")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert read.returncode == 0, read.stdout + read.stderr
    assert read.stdout.startswith("ok ")
    assert str(venv) in read.stdout  # the installed build, not the checkout's
