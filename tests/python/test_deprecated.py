"""The names of the previous release, kept for one release with a ``DeprecationWarning``
(CHANGELOG.md, docs/api.md "Renamed parameters"): the source's old keyword names on each entry
point that had one, a ``TypeError`` naming ``source`` on the others, and every such warning
blamed on the caller's line, however many of packread's calls it went through."""

from __future__ import annotations

import io
import json
import warnings
import zipfile
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np
import pytest
from PIL import Image

import packread
from packread._deprecated import RENAMED
from support.formats import same

#: The source's names of the previous release (0.1), by entry point: ``HDF5Reader(src, ...)``,
#: ``ZipReader(path, ...)``, ``NpyReader(paths, ...)``, ``NpzReader(paths, ...)``,
#: ``load_npy(src)``, ``load_npz(src)``. ``ImageReader``, ``PackDataset`` and ``PackMapDataset``
#: took ``source`` then too, and ``packread.open`` is new.
OLD_SOURCE = {
    "HDF5Reader": "src",
    "ZipReader": "path",
    "NpyReader": "paths",
    "NpzReader": "paths",
    "load_npy": "src",
    "load_npz": "src",
    "ImageReader": None,
    "open": None,
    "PackDataset": None,
    "PackMapDataset": None,
}
#: Every former name of the source parameter.
SOURCE_NAMES = sorted(n for n, new in RENAMED.items() if new == "source")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """One small source per entry point."""
    root = tmp_path_factory.mktemp("old")
    with h5py.File(root / "a.h5", "w") as f:
        f["x"] = np.arange(24, dtype="<f4").reshape(6, 4)
        f["y"] = np.arange(6, dtype="<i8")
    with zipfile.ZipFile(root / "a.zip", "w") as z:
        for i in range(6):
            z.writestr(f"{i}.raw", bytes([i] * 8))
    (root / "npy").mkdir()
    (root / "npz").mkdir()
    for i in range(6):
        np.save(root / "npy" / f"{i}.npy", np.full(3, i, "<i2"))
        np.savez(root / "npz" / f"{i}.npz", a=np.full(2, i, "<f8"), b=np.int64(i))
    with zipfile.ZipFile(root / "img.zip", "w") as z:
        labels = {}
        for i in range(6):
            buf = io.BytesIO()
            Image.fromarray(np.full((5, 7, 3), 40 * i, np.uint8)).save(buf, "PNG")
            z.writestr(f"{i}.png", buf.getvalue())
            labels[f"{i}.png"] = i % 2
        z.writestr("dataset.json", json.dumps({"labels": labels}))
    one = root / "one.npy"
    np.save(one, np.arange(5))
    return {
        "HDF5Reader": str(root / "a.h5"),
        "ZipReader": str(root / "a.zip"),
        "NpyReader": str(root / "npy"),
        "NpzReader": str(root / "npz"),
        "ImageReader": str(root / "img.zip"),
        "load_npy": str(one),
        "load_npz": str(root / "npz" / "0.npz"),
        "open": str(root / "a.h5"),
        "PackDataset": str(root / "a.h5"),
        "PackMapDataset": str(root / "a.h5"),
    }


def entry(name: str) -> Callable[..., Any]:
    """The entry point, with its required arguments besides the source bound."""
    if name in ("PackDataset", "PackMapDataset"):
        cls = getattr(pytest.importorskip("packread.torch"), name)
        return (lambda *a, **kw: cls(*a, batch_size=2, **kw)) if name == "PackDataset" else cls
    return getattr(packread, name)


def content(made: Any) -> Any:
    """What an entry point made, to compare: a reader's first batch, a loaded array."""
    if isinstance(made, np.ndarray):
        return made
    if isinstance(made, dict):  # load_npz
        return {k: made[k] for k in sorted(made)}
    reader = getattr(made, "reader", made)
    return reader.batch([0, 5])


def recorded(call: Callable[[], Any]) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = call()
    return made, [w for w in caught if issubclass(w.category, DeprecationWarning)]


def blamed_on(caught: list[warnings.WarningMessage], call: Callable[[], Any]) -> None:
    """Every warning names the line of ``call`` (a lambda here), not one of packread's."""
    assert caught
    for w in caught:
        assert (w.filename, w.lineno) == (__file__, call.__code__.co_firstlineno), (
            w.filename,
            w.lineno,
            str(w.message),
        )


@pytest.mark.parametrize("old", SOURCE_NAMES)
@pytest.mark.parametrize("name", list(OLD_SOURCE))
def test_the_sources_old_keyword_names(files, name, old):
    func, source = entry(name), files[name]
    if OLD_SOURCE[name] != old:
        # Never this entry point's name: refused, naming the one it takes.
        with pytest.raises(TypeError, match=rf"'{old}'.*\bsource="):
            func(**{old: source})
        return
    want = content(func(source))
    call = lambda: func(**{old: source})  # noqa: E731
    made, caught = recorded(call)
    assert len(caught) == 1
    assert f"({old}=) is deprecated; use source=" in str(caught[0].message)
    blamed_on(caught, call)
    assert same(content(made), want)
    # Given both ways, it is an error, as for any renamed option.
    with pytest.raises(TypeError, match=rf"{old}= and another source"):
        func(source, **{old: source})
    with pytest.raises(TypeError, match=rf"{old}= and another source"):
        func(source=source, **{old: source})


def test_the_source_names_keep_their_signatures():
    # The old names are not parameters: help() and the API tables show source.
    import inspect

    for name in OLD_SOURCE:
        if name in ("PackDataset", "PackMapDataset"):
            continue
        params = list(inspect.signature(getattr(packread, name)).parameters)
        assert params[0] == "source", name
        assert not set(SOURCE_NAMES) & set(params), name


def _old_options(files: dict[str, str]) -> dict[str, Callable[[], Any]]:
    """Calls giving an old option through each kind of entry point: the reader itself, the
    dispatcher, and the torch datasets (which route ``datasets=`` themselves and pass other
    options on to the reader)."""
    h5, npz, zip_ = files["HDF5Reader"], files["NpzReader"], files["ZipReader"]
    calls = {
        "reader": lambda: packread.HDF5Reader(h5, datasets="x"),
        "reader-grouped": lambda: packread.ZipReader(zip_, max_member_bytes=100),
        "open-datasets": lambda: packread.open(h5, datasets="x"),
        "open-renamed": lambda: packread.open(h5, cache_bytes=4096),
        "open-npz-keys": lambda: packread.open(npz, keys=["a"]),
        "open-grouped": lambda: packread.open(zip_, max_header_size=20000),
        "open_reader": lambda: packread.open_reader(h5, "x"),
        "batch-old-option": lambda: packread.ZipReader(zip_).batch([0], dtype="u1"),
        "sample-keys": lambda: packread.ZipReader(zip_).keys(),
        "sharded-reader": lambda: packread.ShardedReader,
    }
    try:
        from packread.torch import PackDataset, PackMapDataset
    except ImportError:
        return calls
    calls.update(
        {
            "PackDataset-datasets": lambda: PackDataset(h5, 2, datasets="x"),
            "PackDataset-renamed": lambda: PackDataset(h5, 2, cache_bytes=4096),
            "PackMapDataset-datasets": lambda: PackMapDataset(h5, datasets="x"),
            "PackMapDataset-renamed": lambda: PackMapDataset(h5, cache_bytes=4096),
        }
    )
    return calls


def test_every_deprecation_warning_is_blamed_on_the_callers_line(files):
    for what, call in _old_options(files).items():
        _, caught = recorded(call)
        assert caught, what
        blamed_on(caught, call)
