"""The API reference: every public class, function and method has a docstring with an example,
and every example runs (as a doctest, in a folder holding the files the examples name).
`make docs` renders the reference (mkdocs with mkdocstrings, strictly: it fails on a module that
does not load or a broken link), outside the tests."""

from __future__ import annotations

import doctest
import importlib
import inspect
import io
import json
import tarfile
import zipfile

import h5py
import numpy as np
import pytest

import packread
import packread.cli
import packread.cli.bench
import packread.cli.bench.baselines
import packread.cli.bench.report
import packread.cli.bench.timing
import packread.cli.convert
import packread.cli.inspect
import packread.torch
from packread.errors import PackreadError

#: Modules whose docstrings are the reference (`make docs` renders these).
MODULES = [
    "packread._common",
    "packread._reader",
    "packread._options",
    "packread._hdf5",
    "packread._npy",
    "packread._npz",
    "packread._zip",
    "packread._keyed",
    "packread._image",
    "packread._clip",
    "packread._open",
    "packread._stats",
    "packread.ray",
    "packread.dask",
    "packread.errors",
    "packread.torch",
    "packread.cli",
    "packread.cli.inspect",
    "packread.cli.convert",
    "packread.cli.bench",
    "packread.cli.bench.timing",
    "packread.cli.bench.baselines",
    "packread.cli.bench.report",
]


def public_api():
    """``(qualified name, object)`` of every public class and function."""
    found = [(f"packread.{n}", getattr(packread, n)) for n in packread.__all__]
    found += [(f"packread.torch.{n}", getattr(packread.torch, n)) for n in packread.torch.__all__]
    bench = packread.cli.bench
    for mod in (
        packread.cli,
        packread.cli.inspect,
        packread.cli.convert,
        bench,
        bench.timing,
        bench.baselines,
        bench.report,
    ):
        for n, v in vars(mod).items():
            if n.startswith("_") or getattr(v, "__module__", None) != mod.__name__:
                continue
            if inspect.isclass(v) or inspect.isfunction(v):
                found.append((f"{mod.__name__}.{n}", v))
    return [
        (n, v)
        for n, v in found
        if (inspect.isclass(v) or callable(v))
        # Exceptions say when they are raised; their base class shows how to catch them.
        and not (inspect.isclass(v) and issubclass(v, BaseException) and v is not PackreadError)
    ]


def missing_examples():
    missing = []
    for name, obj in public_api():
        if ">>>" not in (inspect.getdoc(obj) or ""):
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        for attr, value in vars(obj).items():
            if attr.startswith("_"):
                continue
            if isinstance(value, property):
                if not value.__doc__:
                    missing.append(f"{name}.{attr} (property without a docstring)")
            elif inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)):
                func = getattr(value, "__func__", value)
                if ">>>" not in (func.__doc__ or ""):
                    missing.append(f"{name}.{attr}")
    return missing


def test_every_public_class_and_method_has_an_example():
    assert missing_examples() == []


@pytest.fixture(scope="module")
def example_files(tmp_path_factory):
    """The files the examples name, written by the real writers."""
    root = tmp_path_factory.mktemp("examples")
    rng = np.random.default_rng(0)
    steps = rng.integers(-2, 3, (64, 3, 32, 32))
    images = (np.cumsum(steps, axis=-1) % 256).astype(np.uint8)
    with h5py.File(root / "train.h5", "w") as f:
        f.create_dataset("images", data=images, chunks=(1, 3, 32, 32), compression="gzip")
        f.create_dataset("labels", data=np.arange(64, dtype=np.int64))
    (root / "data" / "train").mkdir(parents=True)
    (root / "data" / "npz").mkdir()
    for i in range(64):
        np.save(root / "data" / "train" / f"{i:03d}.npy", rng.random((4, 8), dtype=np.float32))
    for i in range(8):
        np.savez_compressed(
            root / "data" / "npz" / f"{i:03d}.npz", image=images[i], mask=images[i, 0] > 128
        )
    with zipfile.ZipFile(root / "train.zip", "w") as z:
        for i in range(16):
            z.writestr(f"img/{i:02d}.raw", images[i].tobytes())
    with zipfile.ZipFile(root / "arrays.zip", "w") as z:
        for name in ("a", "b"):
            buf = io.BytesIO()
            np.save(buf, rng.random((4, 8), dtype=np.float32))
            z.writestr(f"{name}.npy", buf.getvalue())
    from PIL import Image

    with zipfile.ZipFile(root / "images.zip", "w") as z:
        for i in range(4):
            buf = io.BytesIO()
            Image.fromarray(images[i].transpose(1, 2, 0)).save(buf, "PNG")
            z.writestr(f"{i:02d}.png", buf.getvalue())
        z.writestr("dataset.json", json.dumps({"labels": {f"{i:02d}.png": i for i in range(4)}}))
    # A WebDataset shard (the layout webdataset's TarWriter writes): samples 000000... of a
    # 32x32 photo (.jpg) and a label (.cls) that is the sample's index.
    with tarfile.open(root / "train.tar", "w", format=tarfile.PAX_FORMAT) as t:
        for i in range(16):
            buf = io.BytesIO()
            Image.fromarray(images[i].transpose(1, 2, 0)).save(buf, "JPEG")
            for field, data in (("cls", str(i).encode()), ("jpg", buf.getvalue())):
                info = tarfile.TarInfo(f"{i:06d}.{field}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    for v, n in enumerate((8, 10, 12)):  # frame folders: three videos
        (root / "frames" / f"v_{v:03d}").mkdir(parents=True)
        for t in range(n):
            frame = np.roll(images[v], 2 * t, axis=2)[:, 4:28, :].transpose(1, 2, 0)
            Image.fromarray(np.ascontiguousarray(frame)).save(
                root / "frames" / f"v_{v:03d}" / f"img_{t + 1:05d}.jpg"
            )
    np.save(root / "sample.npy", rng.random((4, 8)))
    np.save(root / "X.npy", rng.random((100, 32), dtype=np.float32))
    np.savez(root / "sample.npz", image=images[0], mask=images[0, 0] > 128)
    return root


@pytest.mark.parametrize("module", MODULES)
def test_examples_run(module, example_files, monkeypatch):
    monkeypatch.chdir(example_files)
    mod = importlib.import_module(module)
    from torch.utils.data import DataLoader

    globs = {**vars(mod), "np": np, "packread": packread, "DataLoader": DataLoader}
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(mod, module, globs=globs)
    if module.startswith("packread._") or module == "packread.errors":
        # The extension's functions are documented in Rust; their examples run here too.
        tests += finder.find(packread._packread, "packread._packread", globs=globs)
    assert any(t.examples for t in tests)
    for test in tests:
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0
