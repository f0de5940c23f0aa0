"""HDF5 filter pipelines in short (``gzip(4)``, ``blosc(lz4, 5, shuffle)``), and the
``packread convert --codec`` that writes data as a pipeline does."""

from __future__ import annotations

_BLOSC_NAMES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}
_BLOSC_SHUFFLE = {0: "", 1: ", shuffle", 2: ", bitshuffle"}
_BITSHUFFLE_INNER = {0: "", 2: ":lz4", 3: ":zstd"}


def describe_filter(filter_id: int, name: str, params: tuple[int, ...]) -> str:
    """A filter of an HDF5 pipeline in short: ``gzip(4)``, ``blosc(lz4, 5, shuffle)``, ...

    >>> describe_filter(1, "deflate", (4,))
    'gzip(4)'
    >>> describe_filter(32001, "blosc", (2, 2, 4, 10000, 5, 1, 1))
    'blosc(lz4, 5, shuffle)'
    """
    p = list(params)
    if filter_id == 1:
        return f"gzip({p[0]})" if p else "gzip"
    if filter_id == 2:
        return "shuffle"
    if filter_id == 3:
        return "fletcher32"
    if filter_id == 32000:
        return "lzf"
    if filter_id == 32001 and len(p) >= 6:  # PyTables leaves out the compressor for blosclz
        cname = _BLOSC_NAMES.get(p[6], p[6]) if len(p) > 6 else "blosclz"
        return f"blosc({cname}, {p[4]}{_BLOSC_SHUFFLE.get(p[5], '')})"
    if filter_id == 32004:
        return "lz4"
    if filter_id == 32008:
        inner = _BITSHUFFLE_INNER.get(p[4], "") if len(p) > 4 else ""
        return f"bitshuffle{inner}"
    if filter_id == 32015:
        return f"zstd({p[0]})" if p else "zstd"
    short = name.split(";")[0].split(" see ")[0].strip() or "filter"
    return f"{short} (id {filter_id})"


def codec_of(filters: list[str]) -> str:
    """The ``--codec`` of ``packread convert`` that stores data as these filters do, or
    ``"lz4"`` for codecs packread does not write.

    >>> codec_of(["shuffle", "gzip(4)"])
    'gzip:4'
    >>> codec_of([])
    'none'
    """
    for f in filters:
        if f.startswith("gzip"):
            return f"gzip:{f[5:-1]}" if "(" in f else "gzip"
        if f == "lzf" or f == "lz4":
            return f
        if f.startswith("zstd"):
            return f"zstd:{f[5:-1]}" if "(" in f else "zstd"
        if f.startswith("blosc("):
            cname, level = f[6:-1].split(", ")[:2]
            return f"blosc:{cname}:{level}" if cname != "snappy" else "blosc:lz4"
        if f.startswith("bitshuffle"):
            return "bitshuffle:zstd" if f.endswith("zstd") else "bitshuffle:lz4"
    compressing = [f for f in filters if f not in ("shuffle", "fletcher32")]
    return "lz4" if compressing else "none"
