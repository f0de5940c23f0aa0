"""The codecs of ``packread convert --codec``: the h5py keyword arguments that write each one
(:func:`codec_options`, with hdf5plugin's filters), h5py and hdf5plugin imported when HDF5 is
written, and an h5py dataset's filter pipeline as it is stored."""

from __future__ import annotations

import contextlib
from typing import Any

from ...errors import InvalidArgumentError, UnsupportedError

#: Codecs of ``--codec`` (each one packread decodes natively); ``:LEVEL`` may follow gzip,
#: zstd, blosc and bitshuffle:zstd.
CODECS = (
    "none",
    "gzip",
    "lzf",
    "zstd",
    "lz4",
    "blosc:blosclz",
    "blosc:lz4",
    "blosc:lz4hc",
    "blosc:zlib",
    "blosc:zstd",
    "bitshuffle:lz4",
    "bitshuffle:zstd",
)


def codec_options(codec: str, itemsize: int, shuffle: str = "auto") -> dict[str, Any]:
    """``h5py.Group.create_dataset`` keyword arguments for ``--codec`` (hdf5plugin's filters
    for zstd, lz4, blosc and bitshuffle).

    >>> codec_options("gzip:6", 4)
    {'compression': 'gzip', 'compression_opts': 6, 'shuffle': True}
    >>> codec_options("none", 4)
    {}
    """
    if shuffle not in ("auto", "none", "byte", "bit"):
        raise InvalidArgumentError(f"shuffle must be auto, none, byte or bit, not {shuffle!r}")
    parts = codec.lower().split(":")
    kind, rest = parts[0], parts[1:]
    byte = shuffle == "byte" or (shuffle == "auto" and itemsize > 1)

    def level(at: int, default: int, low: int, high: int) -> int:
        if len(rest) <= at:
            return default
        try:
            value = int(rest[at])
        except ValueError:
            raise InvalidArgumentError(f"codec {codec!r}: {rest[at]!r} is not a level") from None
        if not low <= value <= high:
            raise InvalidArgumentError(f"codec {codec!r}: level must be {low} to {high}")
        return value

    def extra(allowed: int) -> None:
        if len(rest) > allowed:
            raise InvalidArgumentError(f"codec {codec!r}: too many ':' parts")

    if shuffle == "bit" and kind != "blosc":
        raise InvalidArgumentError(
            "shuffle='bit' works with blosc codecs; use --codec bitshuffle:lz4 or bitshuffle:zstd"
        )
    if kind == "none":
        extra(0)
        return {}
    if kind == "gzip":
        extra(1)
        return {"compression": "gzip", "compression_opts": level(0, 4, 0, 9), "shuffle": byte}
    if kind == "lzf":
        extra(0)
        return {"compression": "lzf", "shuffle": byte}
    plugin = _hdf5plugin()
    if kind == "zstd":
        extra(1)
        return {**plugin.Zstd(clevel=level(0, 3, 1, 22)), "shuffle": byte}
    if kind == "lz4":
        extra(0)
        return {**plugin.LZ4(), "shuffle": byte}
    if kind == "blosc":
        names = ("blosclz", "lz4", "lz4hc", "zlib", "zstd")
        if not rest or rest[0] not in names:
            raise InvalidArgumentError(f"codec {codec!r}: blosc needs one of {', '.join(names)}")
        extra(2)
        mode = {"none": 0, "byte": 1, "bit": 2, "auto": 1 if itemsize > 1 else 0}[shuffle]
        return dict(plugin.Blosc(cname=rest[0], clevel=level(1, 5, 0, 9), shuffle=mode))
    if kind == "bitshuffle":
        inner = rest[0] if rest else "lz4"
        if inner not in ("lz4", "zstd"):
            raise InvalidArgumentError(f"codec {codec!r}: bitshuffle takes lz4 or zstd")
        extra(2 if inner == "zstd" else 1)
        return dict(plugin.Bitshuffle(cname=inner, clevel=level(1, 3, 1, 22)))
    raise InvalidArgumentError(f"unknown codec {codec!r} (codecs: {', '.join(CODECS)})")


def _hdf5plugin() -> Any:
    try:
        import hdf5plugin
    except ImportError:
        raise UnsupportedError(
            "this codec is written by hdf5plugin: pip install 'packread[convert]'"
        ) from None
    return hdf5plugin


def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise UnsupportedError(
            "HDF5 output is written by h5py: pip install 'packread[convert]'"
        ) from None
    with contextlib.suppress(ImportError):  # registers blosc, zstd, lz4, bzip2... for h5py
        import hdf5plugin  # noqa: F401
    return h5py


def _filters(ds: Any) -> list[tuple[int, tuple[int, ...]]]:
    """The filter pipeline of an h5py dataset: (filter id, parameters) in order."""
    plist = ds.id.get_create_plist()
    out = []
    for i in range(plist.get_nfilters()):
        code, _flags, values, _name = plist.get_filter(i)
        out.append((code, tuple(values)))
    return out
