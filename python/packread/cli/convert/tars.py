"""A compressed tar (``.tar.gz``, ``.tgz``, bzip2, xz) into an uncompressed ``.tar`` or a stored
ZIP, which :class:`packread.TarReader` and ``ZipReader(fields=)`` read at random. One streaming
pass (a compressed stream cannot be read at random, so it cannot be resumed either: an
interrupted run starts over); regular members are copied in order, their names kept (so the
keys of WebDataset samples are), links and other special members left out. The output is
written to ``DST.partial`` and renamed at the end."""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import zipfile
from typing import Any

from ...errors import InvalidArgumentError
from .progress import _NoBar

#: First bytes of the compressed streams Python's tarfile reads.
MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}


def compression(path: str) -> str | None:
    """The compression of the file at ``path`` (``"gzip"``, ``"bzip2"``, ``"xz"``), told by
    its first bytes, or ``None``."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return None
    for magic, name in MAGIC.items():
        if head.startswith(magic):
            return name
    return None


def is_compressed_tar(path: str) -> bool:
    """Whether ``path`` is a compressed stream holding a tar (a first header that checks out,
    or an empty archive)."""
    if compression(path) is None:
        return False
    try:
        with tarfile.open(path, "r|*") as t:
            t.next()
        return True
    except (tarfile.TarError, OSError, EOFError):
        return False


def _bar(total: int, dst: str, show: bool) -> Any:
    if not show:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="B", unit_scale=True, desc=os.path.basename(dst), file=sys.stderr)


def _output(path: str, lower: str) -> Any:
    """The archive written: a PAX tar (long names kept), or a stored ZIP."""
    if lower.endswith(".tar"):
        return tarfile.open(path, "w", format=tarfile.PAX_FORMAT)
    return zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True)


def convert_tar(src: str, dst: str, *, force: bool = False, progress: bool = True) -> int:
    """Copies the regular members of the compressed tar ``src`` into ``dst`` (``.tar`` or
    ``.zip``); returns how many. Progress is counted in compressed bytes read."""
    lower = dst.lower()
    if not lower.endswith((".tar", ".zip")):
        raise InvalidArgumentError(
            f"{dst}: a compressed tar converts into a .tar or a .zip (read at random)"
        )
    if os.path.exists(dst) and not force:
        raise FileExistsError(f"{dst} exists; pass --force (force=True) to replace it")
    partial = dst + ".partial"
    members = 0
    total = os.path.getsize(src)
    bar = _bar(total, dst, progress)
    done = 0
    try:
        with (
            open(src, "rb") as raw,
            tarfile.open(fileobj=raw, mode="r|*") as tin,
            _output(partial, lower) as out,
        ):
            for m in tin:
                if not m.isreg():
                    continue
                data = tin.extractfile(m)
                assert data is not None  # a regular member has data
                if isinstance(out, tarfile.TarFile):
                    info = tarfile.TarInfo(m.name)
                    info.size, info.mtime, info.mode = m.size, m.mtime, m.mode
                    out.addfile(info, data)
                else:
                    with out.open(zipfile.ZipInfo(m.name), "w", force_zip64=True) as w:
                        shutil.copyfileobj(data, w, 1 << 20)
                members += 1
                bar.update(raw.tell() - done)
                done = raw.tell()
        os.replace(partial, dst)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    finally:
        bar.close()
    return members
