"""Where ``packread convert`` writes: an HDF5 file (h5py, each array rechunked with a codec;
other datasets, groups and attributes copied) or an uncompressed ZIP (:mod:`zipfile`), with
checkpoints that a resumed run continues from. The output's kind follows DST's suffix."""

from __future__ import annotations

import math
import os
import zipfile
from typing import Any

from ..._hdf5 import HDF5_SUFFIXES
from ...errors import InvalidArgumentError
from .._layout import samples_per_chunk_for
from .codecs import _h5py, codec_options
from .journal import _directory_copy, _remove
from .sources import _Source

#: HDF5 refuses chunks of 4 GiB or more.
MAX_CHUNK_BYTES = (4 << 30) - 1
#: Fixed member times: the same input gives the same archive.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _output_kind(dst: str) -> str:
    lower = dst.lower()
    if lower.endswith(HDF5_SUFFIXES):
        return "hdf5"
    if lower.endswith(".zip"):
        return "zip"
    raise InvalidArgumentError(f"{dst}: the output must end in .h5/.hdf5 (HDF5) or .zip (ZIP)")


def _chunk_rows(source: _Source, out_kind: str, samples_per_chunk: int | None) -> dict[str, int]:
    """Samples per output chunk of each array (HDF5 only; 1 for a ZIP): ``samples_per_chunk``,
    or by default one sample or enough small samples to fill ``MIN_CHUNK_BYTES``; never more
    than the samples there are."""
    rows = {k: 1 for k in source.arrays}
    if out_kind == "hdf5":
        for k, (dt, shp) in source.arrays.items():
            per = samples_per_chunk or samples_per_chunk_for(math.prod(shp) * dt.itemsize)
            rows[k] = max(1, min(source.n, per))
    return rows


def _h5_described(source: _Source, rows: dict[str, int], codec: str) -> dict[str, Any]:
    return {
        name: {
            "dtype": str(dtype),
            "sample_shape": list(sample),
            "chunks": [rows[name], *(max(1, d) for d in sample)],
            "codec": codec,
        }
        for name, (dtype, sample) in source.arrays.items()
    }


class _Sink:
    warnings: list[str]

    def write(self, lo: int, hi: int, source: _Source) -> None:
        raise NotImplementedError

    def checkpoint(self) -> dict[str, Any]:
        """Makes everything written so far durable; returns what resuming needs."""
        raise NotImplementedError

    def committed(self) -> None:
        """The progress record now names the last checkpoint: older resume data can go."""

    def close(self) -> None:
        raise NotImplementedError

    def abandon(self) -> None:
        """Releases the output file without finishing it (after an error, or after close)."""

    def describe(self) -> dict[str, dict[str, Any]]:
        raise NotImplementedError


class _H5Sink(_Sink):
    def __init__(
        self,
        partial: str,
        source: _Source,
        rows: dict[str, int],
        codec: str,
        shuffle: str,
        resume: bool,
    ) -> None:
        h5py = _h5py()
        self.warnings = []
        try:
            self.file = h5py.File(partial, "r+" if resume else "w")
        except OSError as e:
            if not resume:
                raise
            raise InvalidArgumentError(
                f"{partial}: cannot be resumed ({e}); run again without --resume"
            ) from None
        self._described: dict[str, dict[str, Any]] = {}
        src_h5 = h5py.File(source.h5_path, "r") if source.h5_path else None
        try:
            for name, (dtype, sample) in source.arrays.items():
                chunks = (rows[name], *(max(1, d) for d in sample))
                nbytes = math.prod(chunks) * dtype.itemsize
                if nbytes > MAX_CHUNK_BYTES:
                    raise InvalidArgumentError(
                        f"{name}: chunks of {rows[name]} samples would hold {nbytes:,} bytes; "
                        "HDF5 allows less than 4 GiB (lower samples_per_chunk)"
                    )
                self._described[name] = {
                    "dtype": str(dtype),
                    "sample_shape": list(sample),
                    "chunks": list(chunks),
                    "codec": codec,
                }
                if resume:
                    ds = self.file.get(name)
                    if ds is None or ds.shape != (source.n, *sample) or ds.chunks != chunks:
                        raise InvalidArgumentError(
                            f"{partial}: {name} is not as this conversion writes it; "
                            "start again without --resume"
                        )
                    continue
                maxshape = None
                if src_h5 is not None and name in src_h5:
                    maxshape = src_h5[name].maxshape
                self.file.create_dataset(
                    name,
                    shape=(source.n, *sample),
                    dtype=dtype,
                    chunks=chunks if source.n else None,
                    maxshape=maxshape,
                    **codec_options(codec, dtype.itemsize, shuffle),
                )
            if src_h5 is not None and not resume:
                self._copy_structure(src_h5, source)
        finally:
            if src_h5 is not None:
                src_h5.close()

    def _copy_structure(self, src: Any, source: _Source) -> None:
        """Groups and attributes as in the source; datasets without the sample axis copied
        as they are (libhdf5 copies their stored bytes)."""
        h5py = _h5py()

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Group):
                self.file.require_group(name)

        src.visititems(visit)
        for name in source.copies:
            parent = os.path.dirname(name)
            dest = self.file.require_group(parent) if parent else self.file
            src.copy(src[name], dest, name=os.path.basename(name))
        self._copy_attrs(src, self.file, "/")
        for name in [*source.arrays, *self._groups(src)]:
            self._copy_attrs(src[name], self.file[name], name)

    @staticmethod
    def _groups(src: Any) -> list[str]:
        h5py = _h5py()

        out: list[str] = []
        src.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Group) else None)
        return out

    def _copy_attrs(self, src: Any, dst: Any, where: str) -> None:
        for key in src.attrs:
            try:
                dst.attrs[key] = src.attrs[key]
            except Exception as e:  # an attribute h5py cannot read back or write
                self.warnings.append(f"{where}: attribute {key!r} not copied ({e})")

    def write(self, lo: int, hi: int, source: _Source) -> None:
        for name, block in source.read(lo, hi).items():
            self.file[name][lo:hi] = block

    def checkpoint(self) -> dict[str, Any]:
        self.file.flush()
        return {}

    def close(self) -> None:
        self.file.close()

    def abandon(self) -> None:
        if self.file.id.valid:
            self.file.close()

    def describe(self) -> dict[str, dict[str, Any]]:
        return self._described


class _ZipSink(_Sink):
    """An uncompressed ZIP written with :mod:`zipfile`. A checkpoint closes the archive (so
    its central directory is written), keeps a copy of that directory beside it (named by its
    offset, so the progress record and the copy always agree), and opens it again for
    appending; resuming cuts the file where the directory was and puts it back."""

    def __init__(self, partial: str, source: _Source, state: dict[str, Any] | None) -> None:
        self.warnings = []
        self.partial = partial
        self._kept: str | None = None
        self._newest: str | None = None
        self._described = {
            name: {"dtype": str(dtype), "sample_shape": list(sample), "chunks": None}
            for name, (dtype, sample) in source.arrays.items()
        }
        self.patterns = {name: source.pattern(name) for name in source.arrays}
        self._own = source.zip_description()
        if state is None:
            self.zip = zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED, allowZip64=True)
            return
        self._kept = self._directory_path(state["sink"]["cd_offset"])
        with open(self._kept, "rb") as f:
            directory = f.read()
        with open(partial, "r+b") as f:
            f.truncate(state["sink"]["cd_offset"])
            f.seek(state["sink"]["cd_offset"])
            f.write(directory)
        self.zip = zipfile.ZipFile(partial, "a", zipfile.ZIP_STORED, allowZip64=True)

    def write(self, lo: int, hi: int, source: _Source) -> None:
        for name, data in source.members(lo, hi):
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            self.zip.writestr(info, data)

    def checkpoint(self) -> dict[str, Any]:
        # zipfile writes the central directory at start_dir: where the next member would go.
        cd_offset = self.zip.start_dir
        self.zip.close()
        with open(self.partial, "rb") as f:
            f.seek(cd_offset)
            directory = f.read()
        path = self._directory_path(cd_offset)
        with open(path + ".tmp", "wb") as f:
            f.write(directory)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        self._newest = path
        self.zip = zipfile.ZipFile(self.partial, "a", zipfile.ZIP_STORED, allowZip64=True)
        return {"cd_offset": cd_offset}

    def committed(self) -> None:
        if self._kept is not None and self._kept != self._newest:
            _remove(self._kept)
        self._kept = self._newest

    def _directory_path(self, offset: int) -> str:
        return _directory_copy(self.partial, offset)

    def close(self) -> None:
        self.zip.close()

    def abandon(self) -> None:
        if self.zip.fp is not None:
            self.zip.close()

    def describe(self) -> dict[str, dict[str, Any]]:
        if self._own is not None:
            return self._own
        return {n: {**d, "members": self.patterns[n]} for n, d in self._described.items()}
