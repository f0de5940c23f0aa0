"""A resumed run that finds DST already there, with no ``DST.partial`` beside it: whether DST
holds what this conversion writes (then the run is complete and nothing is written), and
what it holds, as :attr:`~packread.cli.convert.ConvertResult.datasets` describes it."""

from __future__ import annotations

import os
import zipfile
from typing import Any

from ..._image import LABELS_MEMBER
from ..._zip import ZipReader
from ...errors import PackreadError
from .codecs import _filters, _h5py, codec_options
from .sinks import _h5_described
from .sources import _ImageTreeSource, _Source


def _unlike_output(
    dst: str,
    out_kind: str,
    source: _Source,
    rows: dict[str, int],
    codec: str,
    shuffle: str,
) -> str | None:
    """How ``dst`` differs from what this conversion writes (its arrays: names, sample
    count, dtype and sample shape; HDF5: chunks and filters; ZIP: member count), or None.
    Only metadata is read; ``verify`` compares the samples."""
    n = source.n
    if out_kind == "zip" and isinstance(source, _ImageTreeSource):
        return _unlike_image_zip(dst, source)
    if out_kind == "zip":
        try:
            with zipfile.ZipFile(dst) as z:
                count = len(z.infolist())
            for name, (dtype, sample) in source.arrays.items():
                reader = ZipReader(dst, members=source.pattern(name))
                got = (len(reader), reader.dtype, tuple(reader.shape))
                if got != (n, dtype, sample):
                    return (
                        f"{source.pattern(name)}: {got[0]:,} samples of {got[1]} {got[2]}, "
                        f"not {n:,} of {dtype} {sample}"
                    )
        except (PackreadError, OSError, ValueError, zipfile.BadZipFile) as e:
            return f"not a ZIP packread reads: {e}"
        if count != n * len(source.arrays):
            return f"{count:,} members, not {n * len(source.arrays):,}"
        return None
    h5py = _h5py()
    try:
        out = h5py.File(dst, "r")
    except OSError as e:
        return f"not an HDF5 file: {e}"
    # The datasets as this conversion creates them, in memory, for their filter pipelines.
    want = h5py.File(f"{dst}.expected", "w", driver="core", backing_store=False)
    with out, want:
        for name in source.copies:
            if name not in out:
                return f"no {name!r}"
        for name, (dtype, sample) in source.arrays.items():
            ds = out.get(name)
            if not isinstance(ds, h5py.Dataset):
                return f"no dataset {name!r}"
            if ds.shape != (n, *sample) or ds.dtype != dtype:
                return f"{name} is {ds.dtype} {ds.shape}, not {dtype} {(n, *sample)}"
            if not n:
                continue
            chunks = (rows[name], *(max(1, d) for d in sample))
            ref = want.create_dataset(
                name,
                shape=(n, *sample),
                dtype=dtype,
                chunks=chunks,
                **codec_options(codec, dtype.itemsize, shuffle),
            )
            if ds.chunks != chunks or _filters(ds) != _filters(ref):
                return f"{name} is not chunked and filtered as {codec} in chunks {chunks}"
    return None


def _complete_datasets(
    out_kind: str, source: _Source, rows: dict[str, int], codec: str
) -> dict[str, dict[str, Any]]:
    """What a complete output holds per converted array, as the run that wrote it said."""
    if out_kind == "hdf5":
        return _h5_described(source, rows, codec)
    own = source.zip_description()
    if own is not None:
        return own
    return {
        n: {
            "dtype": str(dt),
            "sample_shape": list(shp),
            "chunks": None,
            "members": source.pattern(n),
        }
        for n, (dt, shp) in source.arrays.items()
    }


def _unlike_image_zip(dst: str, source: _ImageTreeSource) -> str | None:
    """How ``dst`` differs from the ZIP this tree packs into: its members (names, order and
    sizes) and its ``dataset.json``."""
    want = [LABELS_MEMBER, *source.names]
    try:
        with zipfile.ZipFile(dst) as z:
            infos = z.infolist()
            names = [i.filename for i in infos]
            if names != want:
                return f"{len(names):,} members, not the {len(want):,} this tree packs into"
            if z.read(LABELS_MEMBER) != source.labels_json:
                return f"its {LABELS_MEMBER} is not this tree's"
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        return f"not a ZIP packread reads: {e}"
    for info, path in zip(infos[1:], source.files, strict=True):
        if info.file_size != os.path.getsize(path):
            return f"{info.filename} is {info.file_size:,} bytes, not {os.path.getsize(path):,}"
    return None
